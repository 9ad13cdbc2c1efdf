//! Episodes end to end: the real binary runs campaigns against the replay model,
//! through the gateway and the sandbox, on the fixture task.

use std::io::BufRead;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pdl_episode::{ReplayConfig, ReplayScript, ReplayServer};
use serde_json::{json, Value};

const TASK: &str = "pdl_fixture_calc_001";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks")
}

fn replay(replies: Value, latency: Duration) -> ReplayServer {
    let text = json!({"conversations": [{"replies": replies}]}).to_string();
    let script = ReplayScript::parse(&text, Path::new("test-script.json")).unwrap();
    let mut config = ReplayConfig::new(script);
    config.latency = latency;
    ReplayServer::start(config).unwrap()
}

fn run_args(model: &ReplayServer, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--dataset".into(),
        fixtures().display().to_string(),
        "--task".into(),
        TASK.into(),
        "--model".into(),
        "replay".into(),
        "--base-url".into(),
        model.base_url(),
        "--api".into(),
        "openai".into(),
        "--out".into(),
        out.display().to_string(),
        "--test-timeout".into(),
        "30".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn pdl_swe(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn records(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn episodes(run_dir: &Path) -> Vec<Value> {
    records(run_dir)
        .into_iter()
        .filter(|r| r["kind"] == "episode")
        .collect()
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn fixing_replies() -> Value {
    json!([
        call("view_file", json!({"path": "src/calc.py"})),
        call(
            "replace_in_file",
            json!({"path": "src/calc.py", "old_text": "range(abs(b) - 1)", "new_text": "range(abs(b))"})
        ),
        call(
            "run_shell",
            json!({"command": "python -m pytest -q -p no:cacheprovider tests/public"})
        ),
        call("finish", json!({"summary": "mul now adds a |b| times"})),
    ])
}

#[test]
fn a_scripted_builtin_episode_that_fixes_the_task_scores_one() {
    let model = replay(fixing_replies(), Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = pdl_swe(&run_args(
        &model,
        &out,
        &["--agent", "builtin", "--samples", "2"],
    ));
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let all = records(&out);
    let calibration: Vec<&Value> = all.iter().filter(|r| r["kind"] != "episode").collect();
    assert_eq!(
        calibration.len(),
        3,
        "gold, noop and the rung run in the campaign"
    );
    assert!(calibration
        .iter()
        .any(|r| r["kind"] == "gold" && r["reward"] == 1.0));
    let eps = episodes(&out);
    assert_eq!(eps.len(), 2);
    for e in &eps {
        assert_eq!(e["verdict"], "graded", "{e}");
        assert_eq!(e["reward"], 1.0, "{e}");
        let ep = &e["episode"];
        assert_eq!(ep["end_reason"], "finished");
        assert_eq!(ep["steps"], 4);
        assert!(ep["tokens_in"].as_u64().unwrap() > 0 && ep["tokens_out"].as_u64().unwrap() > 0);
        assert!(ep["prompt_version"]
            .as_str()
            .unwrap()
            .starts_with("builtin-"));
        assert_eq!(ep["model_route"]["provider"], "openai");
        let trajectory = out.join(ep["trajectory"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(&trajectory)
                .unwrap()
                .lines()
                .count(),
            4
        );
        let patch = std::fs::read_to_string(out.join(ep["patch"].as_str().unwrap())).unwrap();
        assert!(patch.contains("+    for _ in range(abs(b)):"), "{patch}");
        assert_eq!(e["provenance"]["sandbox"]["sandbox"], "namespaces");
    }
    assert_ne!(eps[0]["episode"]["key"], eps[1]["episode"]["key"]);
    assert!(out.join("report/index.html").is_file());
    assert!(String::from_utf8_lossy(&run.stdout).contains(TASK));
}

#[test]
fn an_episode_that_edits_a_forbidden_path_is_a_policy_violation() {
    let model = replay(
        json!([
            call(
                "replace_in_file",
                json!({"path": "tests/public/test_public.py", "old_text": "assert add(2, 3) == 5", "new_text": "assert True"})
            ),
            call("finish", json!({})),
        ]),
        Duration::ZERO,
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = pdl_swe(&run_args(&model, &out, &["--agent", "builtin"]));
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let e = &episodes(&out)[0];
    assert_eq!(e["verdict"], "policy_violation", "{e}");
    assert_eq!(e["reward"], 0.0);
    assert_eq!(
        e["policy"]["violations"],
        json!(["tests/public/test_public.py"])
    );
}

#[test]
fn running_out_of_budget_ends_the_episode_and_grades_the_workspace_as_it_stands() {
    // The fixture's budget is 10 000 tokens; each reply claims 4 000 in and 3 000 out.
    let usage = json!({"input_tokens": 4000, "output_tokens": 3000});
    let model = replay(
        json!([
            {"tool_calls": [{"name": "replace_in_file", "arguments": {"path": "src/calc.py", "old_text": "range(abs(b) - 1)", "new_text": "range(abs(b))"}}], "usage": usage},
            {"tool_calls": [{"name": "run_shell", "arguments": {"command": "true"}}], "usage": usage},
            {"tool_calls": [{"name": "run_shell", "arguments": {"command": "true"}}], "usage": usage},
            {"tool_calls": [{"name": "finish", "arguments": {}}], "usage": usage},
        ]),
        Duration::ZERO,
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = pdl_swe(&run_args(&model, &out, &["--agent", "builtin"]));
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let e = &episodes(&out)[0];
    let ep = &e["episode"];
    assert_eq!(ep["end_reason"], "budget_exhausted", "{e}");
    assert_eq!(e["verdict"], "graded");
    assert_eq!(
        e["reward"], 1.0,
        "the fix made before the budget ran out counts"
    );
    // Input and output together stay within the budget: the second request
    // (a prompt of several thousand bytes) could not fit in the 3 000 tokens
    // left and was refused before it went upstream.
    let total = ep["tokens_in"].as_u64().unwrap() + ep["tokens_out"].as_u64().unwrap();
    assert!(total <= 10_000, "{ep}");
    assert_eq!(total, 7_000, "{ep}");
    assert_eq!(ep["calls"], 1, "{ep}");
    assert!(ep["refused_calls"].as_u64().unwrap() >= 1, "{ep}");
}

/// A tiny external agent: one streamed request through the gateway, then exit.
const STREAMING_AGENT: &str = r#"
import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["PDL_MODEL"], "stream": True,
                     "messages": [{"role": "user", "content": open(os.environ["PDL_PROBLEM_FILE"]).read()}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
chunks = [line for line in urllib.request.urlopen(req, timeout=30) if line.startswith(b"data:")]
assert chunks[-1].strip() == b"data: [DONE]", chunks[-1]
print("streamed", len(chunks), "chunks")
"#;

#[test]
fn an_external_agent_streams_through_the_gateway_and_its_final_usage_chunk_is_counted() {
    let model = replay(
        json!([{"content": "Here is what I would do.", "usage": {"input_tokens": 111, "output_tokens": 22}}]),
        Duration::ZERO,
    );
    let dir = tempfile::tempdir().unwrap();
    // The agent's own folder, beside the run folder (never around it).
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir(&agent_dir).unwrap();
    let agent = agent_dir.join("agent.py");
    std::fs::write(&agent, STREAMING_AGENT).unwrap();
    let out = dir.path().join("run");
    let cmd = format!("python3 {}", agent.display());
    let run = pdl_swe(&run_args(
        &model,
        &out,
        &[
            "--agent-cmd",
            &cmd,
            "--agent-path",
            &agent_dir.display().to_string(),
        ],
    ));
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let e = &episodes(&out)[0];
    let ep = &e["episode"];
    assert_eq!(
        ep["end_reason"],
        "finished",
        "{e}\n{}",
        std::fs::read_to_string(out.join(ep["log"].as_str().unwrap())).unwrap_or_default()
    );
    assert_eq!(ep["tokens_in"], 111);
    assert_eq!(ep["tokens_out"], 22);
    assert_eq!(e["reward"], 0.2, "the agent changed nothing");
    let log = std::fs::read_to_string(out.join(ep["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("streamed"), "{log}");
}

const ESCAPING_AGENT: &str = r#"
import os, socket, sys, urllib.request
# The gateway is reachable ...
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models", headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
urllib.request.urlopen(req, timeout=10).read()
# ... and nothing else is.
escaped = []
for host, port in [("127.0.0.1", int(os.environ["HOST_PORT"])), ("1.1.1.1", 443), ("10.0.0.1", 80)]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        escaped.append(f"{host}:{port}")
    except OSError:
        pass
if any(k in os.environ for k in ("PDL_TEST_UPSTREAM_SECRET",)):
    escaped.append("secret")
print("escaped:", escaped)
sys.exit(3 if escaped else 0)
"#;

#[test]
fn an_external_agent_reaches_the_gateway_and_nothing_else() {
    let model = replay(json!([{"content": "unused"}]), Duration::ZERO);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir(&agent_dir).unwrap();
    let agent = agent_dir.join("agent.py");
    std::fs::write(&agent, ESCAPING_AGENT).unwrap();
    let out = dir.path().join("run");
    let cmd = format!("python3 {}", agent.display());
    let host_port = format!("HOST_PORT={port}");
    let mut args = run_args(
        &model,
        &out,
        &[
            "--agent-cmd",
            &cmd,
            "--agent-env",
            &host_port,
            "--agent-path",
            &agent_dir.display().to_string(),
            "--api-key-env",
            "PDL_TEST_UPSTREAM_SECRET",
        ],
    );
    args.push("--samples".into());
    args.push("1".into());
    let run = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(&args)
        .env("PDL_TEST_UPSTREAM_SECRET", "sk-real-upstream-key")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let e = &episodes(&out)[0];
    let log = std::fs::read_to_string(out.join(e["episode"]["log"].as_str().unwrap())).unwrap();
    assert_eq!(e["episode"]["end_reason"], "finished", "{log}");
    assert!(log.contains("escaped: []"), "{log}");
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
    let trajectory =
        std::fs::read_to_string(out.join(e["episode"]["trajectory"].as_str().unwrap()))
            .unwrap_or_default();
    assert!(!trajectory.contains("sk-real-upstream-key"));
}

#[test]
fn a_campaign_killed_with_sigkill_resumes_without_loss_or_duplicates() {
    let model = replay(fixing_replies(), Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = run_args(
        &model,
        &out,
        &["--agent", "builtin", "--samples", "6", "-j", "2"],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while episodes(&out).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no episode finished in time"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = episodes(&out).len();
    assert!(
        before < 6,
        "the campaign finished before it could be killed"
    );
    let resumed = pdl_swe(&args);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    let eps = episodes(&out);
    let keys: std::collections::BTreeSet<&str> = eps
        .iter()
        .map(|e| e["episode"]["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 6, "every sample exactly once");
    assert_eq!(eps.len(), 6, "no duplicates");
    assert!(
        eps.iter().all(|e| e["reward"] == 1.0),
        "{:#?}",
        eps.iter()
            .map(|e| (e["reward"].clone(), e["episode"].clone()))
            .collect::<Vec<_>>()
    );
    let calibration = records(&out)
        .iter()
        .filter(|r| r["kind"] != "episode")
        .count();
    assert_eq!(calibration, 3, "calibration is not repeated on resume");
    // Every line of the results file is a complete record.
    let f = std::fs::File::open(out.join("results.jsonl")).unwrap();
    for line in std::io::BufReader::new(f).lines() {
        serde_json::from_str::<Value>(&line.unwrap()).unwrap();
    }
}
