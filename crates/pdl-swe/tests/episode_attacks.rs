//! Hostile agents and tampered run folders, end to end: the real binary runs
//! campaigns on the fixture task with the agents of `tests/fixtures/agents/`
//! (each one attack of the episode red-team report) against a logging
//! stand-in for the real provider (`upstream.py`), or against the replay model.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use pdl_episode::{ReplayConfig, ReplayScript, ReplayServer};
use serde_json::{json, Value};

const TASK: &str = "pdl_fixture_calc_001";
const BUDGET: u64 = 10_000;
const MODEL: &str = "gpt-eval";
const REAL_KEY: &str = "sk-real-upstream-key-0123456789";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn agents() -> PathBuf {
    fixtures().join("agents")
}

/// The logging upstream, stopped (by its own pid) when dropped.
struct Upstream {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Upstream {
    fn start(dir: &Path) -> Upstream {
        let log = dir.join("upstream.jsonl");
        let mut child = Command::new("python3")
            .arg(agents().join("upstream.py"))
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the test upstream");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the upstream prints its port");
        Upstream { child, port, log }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_args(base_url: &str, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--dataset",
        &fixtures().join("tasks").display().to_string(),
        "--task",
        TASK,
        "--model",
        MODEL,
        "--base-url",
        base_url,
        "--api",
        "openai",
        "--api-key-env",
        "PDL_TEST_REAL_KEY",
        "--out",
        &out.display().to_string(),
        "--test-timeout",
        "30",
        "--agent-path",
        &agents().display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn pdl_swe(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .env("PDL_TEST_REAL_KEY", REAL_KEY)
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

fn episode_of<'a>(eps: &'a [Value], script: &str) -> &'a Value {
    eps.iter()
        .find(|e| e["episode"]["agent"].as_str().unwrap().contains(script))
        .unwrap_or_else(|| panic!("no episode of {script}"))
}

fn agent_cmd(script: &str) -> String {
    format!("python3 {}", agents().join(script).display())
}

/// Request fields the gateway may forward to an OpenAI upstream.
const OPENAI_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "seed",
    "reasoning_effort",
    "verbosity",
];

#[test]
fn hostile_agents_stay_within_the_budget_and_the_campaigns_model_and_features() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let out = dir.path().join("run");
    let (race, features, abandon, bloat) = (
        agent_cmd("race.py"),
        agent_cmd("features.py"),
        agent_cmd("abandon.py"),
        agent_cmd("bloat.py"),
    );
    let run = pdl_swe(&run_args(
        &upstream.base_url(),
        &out,
        &[
            "--agent-cmd",
            &race,
            "--agent-cmd",
            &features,
            "--agent-cmd",
            &abandon,
            "--agent-cmd",
            &bloat,
            "-j",
            "4",
        ],
    ));
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let eps = episodes(&out);
    assert_eq!(eps.len(), 4, "{}", text(&run));
    for e in &eps {
        let ep = &e["episode"];
        let total = ep["tokens_in"].as_u64().unwrap() + ep["tokens_out"].as_u64().unwrap();
        assert!(
            total <= BUDGET,
            "{}: {total} tokens of {BUDGET}",
            ep["agent"]
        );
        assert_eq!(ep["overrun_tokens"], 0, "{ep}");
        assert_eq!(ep["model"], MODEL);
    }

    // What reached the provider: only the campaign's model, only listed
    // fields, no provider-side tool, no beta or account header.
    let requests = upstream.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        let body = r["body"].as_object().unwrap();
        assert_eq!(body["model"], MODEL, "{r}");
        for field in body.keys() {
            assert!(
                OPENAI_FIELDS.contains(&field.as_str()),
                "{field} was forwarded"
            );
        }
        assert!(body.get("tools").is_none(), "{r}");
        let headers: BTreeSet<String> = r["headers"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.to_ascii_lowercase())
            .collect();
        for name in ["anthropic-beta", "accept", "openai-organization"] {
            assert!(!headers.contains(name), "{name} was forwarded: {r}");
        }
        assert_eq!(r["headers"]["authorization"], format!("Bearer {REAL_KEY}"));
        assert!(
            body.get("max_tokens")
                .or(body.get("max_completion_tokens"))
                .is_some_and(Value::is_u64),
            "every request carries an integer cap: {r}"
        );
    }
    let of = |marker: &str| -> Vec<&Value> {
        requests
            .iter()
            .filter(|r| r["body"].to_string().contains(marker))
            .collect()
    };

    // Finding #2: the race. What the provider was allowed to produce for the
    // calls it got, plus the input it billed, fits in the budget.
    let race_calls = of("race-");
    assert!(!race_calls.is_empty() && race_calls.len() < 40);
    let allowed: u64 = race_calls
        .iter()
        .map(|r| r["body"]["max_tokens"].as_u64().unwrap() + r["bytes"].as_u64().unwrap() / 4)
        .sum();
    assert!(allowed <= BUDGET, "{allowed}");
    let race_ep = &episode_of(&eps, "race.py")["episode"];
    assert!(race_ep["refused_calls"].as_u64().unwrap() >= 1, "{race_ep}");

    // Findings #4, #5, #6: odd caps and provider tools never went upstream;
    // the model swap went with the campaign's model and no account fields.
    assert!(of("features-")
        .iter()
        .all(|r| r["body"]["messages"][0]["content"] == "features-swap"));
    assert_eq!(of("features-swap").len(), 1);
    let features_ep = &episode_of(&eps, "features.py")["episode"];
    assert!(
        features_ep["refused_calls"].as_u64().unwrap() >= 9,
        "{features_ep}"
    );
    let trajectory =
        std::fs::read_to_string(out.join(features_ep["trajectory"].as_str().unwrap())).unwrap();
    let swap = trajectory
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["refused"] == false)
        .unwrap();
    assert_eq!(swap["requested_model"], "o3-pro-EXPENSIVE");
    assert_eq!(
        swap["dropped"]["fields"],
        json!(["metadata", "service_tier", "store"])
    );

    // Finding #7: calls the agent hung up on are charged their reservation.
    let abandon_ep = &episode_of(&eps, "abandon.py")["episode"];
    assert_eq!(abandon_ep["abandoned_calls"], 2, "{abandon_ep}");
    assert!(
        abandon_ep["tokens_out"].as_u64().unwrap() >= 5_000,
        "{abandon_ep}"
    );

    // Findings #8 and #10: big refused bodies are neither parsed nor stored.
    assert!(of("AAAA").is_empty() && of("BBBB").is_empty());
    let bloat_ep = &episode_of(&eps, "bloat.py")["episode"];
    let log = std::fs::read_to_string(out.join(bloat_ep["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("@@ bloat"), "{log}");
    let size = std::fs::metadata(out.join(bloat_ep["trajectory"].as_str().unwrap()))
        .unwrap()
        .len();
    assert!(
        size < 256 << 10,
        "a {size}-byte trajectory for refused calls"
    );
    assert!(
        bloat_ep["refused_calls"].as_u64().unwrap() >= 7,
        "{bloat_ep}"
    );

    // The real key reached only the upstream.
    for e in &eps {
        let t = std::fs::read_to_string(out.join(e["episode"]["trajectory"].as_str().unwrap()))
            .unwrap();
        assert!(!t.contains(REAL_KEY));
    }
    let campaign: Value =
        serde_json::from_slice(&std::fs::read(out.join("campaign.json")).unwrap()).unwrap();
    assert_eq!(campaign["allowed_provider_tools"], json!([]));
}

fn idle_model() -> ReplayServer {
    let text = json!({"conversations": [{"replies": [{"content": "unused"}]}]}).to_string();
    ReplayServer::start(ReplayConfig::new(
        ReplayScript::parse(&text, Path::new("idle.json")).unwrap(),
    ))
    .unwrap()
}

#[test]
fn a_symlinked_results_file_is_refused_and_its_target_left_untouched() {
    // Finding #17.
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim.txt");
    let original = "important line 1\nimportant line 2 without newline";
    std::fs::write(&victim, original).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("results.jsonl")).unwrap();
    let run = pdl_swe(&run_args(&model.base_url(), &out, &["--agent-cmd", "true"]));
    assert_ne!(run.status.code(), Some(0), "{}", text(&run));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("results.jsonl") && stderr.contains("symbolic link"),
        "{}",
        text(&run)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), original);

    // A linked folder inside the run folder is not written through either.
    let out = dir.path().join("run2");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("trajectories")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("report")).unwrap();
    let run = pdl_swe(&run_args(&model.base_url(), &out, &["--agent-cmd", "true"]));
    let e = &episodes(&out)[0];
    assert_eq!(e["verdict"], "harness_error", "{}", text(&run));
    assert!(
        e["detail"].as_str().unwrap().contains("trajectories"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn forged_records_are_ignored_with_a_warning_on_resume() {
    // Finding #18.
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = run_args(&model.base_url(), &out, &["--agent-cmd", "true"]);
    let first = pdl_swe(&args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let lines: Vec<Value> = records(&out);
    let real = lines
        .iter()
        .find(|r| r["kind"] == "episode")
        .unwrap()
        .clone();
    assert_eq!(real["reward"], 0.2);
    // The episode's own record turned into reward 5.0, and a record with a
    // plausible reward but a key no episode of the campaign has.
    let mut forged = real.clone();
    forged["reward"] = json!(5.0);
    let mut stranger = real.clone();
    stranger["reward"] = json!(1.0);
    stranger["components"] =
        json!({"hidden_pass_fraction": 1.0, "public_regression": 1.0, "build_health": 1.0});
    stranger["episode"]["key"] = json!("0123456789abcdef0123");
    let mut text_lines: Vec<String> = lines
        .iter()
        .filter(|r| r["kind"] != "episode")
        .map(Value::to_string)
        .collect();
    text_lines.push(forged.to_string());
    text_lines.push(stranger.to_string());
    text_lines.push("this line is not a record".into());
    std::fs::write(out.join("results.jsonl"), text_lines.join("\n") + "\n").unwrap();

    let resumed = pdl_swe(&args);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        stderr.contains("reward 5 is not a number in [0, 1]"),
        "{stderr}"
    );
    assert!(stderr.contains("is not the key of sample 0"), "{stderr}");
    assert!(
        stderr.contains("line ") && stderr.contains("not a result record"),
        "{stderr}"
    );
    // The episode ran again and the report shows its real reward.
    let eps = episodes(&out);
    assert_eq!(eps.len(), 3);
    assert_eq!(eps[2]["reward"], 0.2);
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report/report.json")).unwrap()).unwrap();
    assert_eq!(report["overall"][0]["mean_reward"], 0.2, "{report}");
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("reward 5"), "{warnings}");
    assert!(
        warnings.contains("is not one of the campaign's episodes"),
        "{warnings}"
    );
}

#[test]
fn only_harness_errors_are_run_again_and_reports_count_the_reruns() {
    // Resume attribution: an agent-caused failure is final; a harness error is
    // run again, and the new record keeps the first outcome.
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = run_args(
        &model.base_url(),
        &out,
        &["--agent-cmd", "true", "--samples", "2"],
    );
    let first = pdl_swe(&args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let mut lines = records(&out);
    let zero = json!({"hidden_pass_fraction": 0.0, "public_regression": 0.0, "build_health": 0.0});
    for r in lines.iter_mut().filter(|r| r["kind"] == "episode") {
        let (verdict, detail) = if r["episode"]["sample"] == 0 {
            ("harness_error", "the sandbox could not start")
        } else {
            ("policy_violation", "the agent changed a forbidden path")
        };
        r["verdict"] = json!(verdict);
        r["detail"] = json!(detail);
        r["reward"] = json!(0.0);
        r["components"] = zero.clone();
    }
    let text_lines: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(out.join("results.jsonl"), text_lines.join("\n") + "\n").unwrap();

    let resumed = pdl_swe(&args);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    let eps = episodes(&out);
    assert_eq!(eps.len(), 3, "only the harness error ran again");
    let rerun = &eps[2];
    assert_eq!(rerun["episode"]["sample"], 0);
    assert_eq!(rerun["verdict"], "graded");
    assert_eq!(rerun["episode"]["rerun_of"]["verdict"], "harness_error");
    assert_eq!(
        rerun["episode"]["previous_outcomes"][0]["detail"],
        "the sandbox could not start"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report/report.json")).unwrap()).unwrap();
    let overall = &report["overall"][0];
    assert_eq!(overall["reruns"], 1, "{overall}");
    assert_eq!(
        overall["episodes"], 2,
        "the later record replaces the earlier"
    );
    assert_eq!(overall["harness_errors"], 0);
    assert_eq!(
        overall["mean_reward"], 0.1,
        "mean of 0.2 (re-run) and 0.0 (policy)"
    );
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("Re-runs"));
    let markdown = std::fs::read_to_string(out.join("report/report.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    assert!(markdown.contains("Re-runs") && html.contains("Re-runs"));
}

#[test]
fn the_builtin_file_tools_never_write_through_a_planted_link() {
    // Review finding 3: a dangling link, and a link to a folder outside.
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let replies = json!([
        call(
            "run_shell",
            json!({"command": format!(
            "ln -s {o}/planted.txt src/evil.py && ln -s {o} src/outdir", o = outside.display())})
        ),
        call(
            "replace_in_file",
            json!({"path": "src/evil.py", "old_text": "", "new_text": "pwned\n"})
        ),
        call(
            "replace_in_file",
            json!({"path": "src/outdir/new.py", "old_text": "", "new_text": "pwned\n"})
        ),
        call("view_file", json!({"path": "src/outdir"})),
        call("finish", json!({})),
    ]);
    let text_script = json!({"conversations": [{"replies": replies}]}).to_string();
    let model = ReplayServer::start(ReplayConfig::new(
        ReplayScript::parse(&text_script, Path::new("links.json")).unwrap(),
    ))
    .unwrap();
    let out = dir.path().join("run");
    let mut args = run_args(&model.base_url(), &out, &["--agent", "builtin"]);
    // The replay model answers whatever model the gateway names.
    args.iter_mut()
        .filter(|a| *a == MODEL)
        .for_each(|a| *a = "replay".into());
    let run = pdl_swe(&args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "a tool wrote outside"
    );
    let e = &episodes(&out)[0];
    let trajectory =
        std::fs::read_to_string(out.join(e["episode"]["trajectory"].as_str().unwrap())).unwrap();
    let refusals = trajectory
        .matches("is a symbolic link or passes through one")
        .count();
    assert!(refusals >= 3, "{trajectory}");
    // The links themselves are a policy violation of the workspace.
    assert_eq!(e["verdict"], "policy_violation", "{e}");
}

/// The harness's peak resident memory while `args` run.
fn peak_rss_of(args: &[String]) -> (Output, f64) {
    let child = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .env("PDL_TEST_REAL_KEY", REAL_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0u64;
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let kb = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0u64);
            peak = peak.max(kb);
            if status.contains("State:\tZ") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        peak
    });
    let out = child.wait_with_output().unwrap();
    (out, sampler.join().unwrap() as f64 / 1024.0)
}

#[test]
fn a_workspace_the_agent_shaped_is_its_own_doing_and_costs_the_harness_nothing() {
    // Findings #1 and #9: an unreadable workspace is no way out of the means,
    // and files the policy drops are never read, copied or put in the patch.
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut args = run_args(
        &model.base_url(),
        &out,
        &[
            "--agent-cmd",
            &agent_cmd("deep.py"),
            "--agent-cmd",
            &agent_cmd("sparse.py"),
            "-j",
            "1",
        ],
    );
    args.extend(["--samples".to_string(), "1".to_string()]);
    let (run, peak_mb) = peak_rss_of(&args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(peak_mb < 500.0, "the harness peaked at {peak_mb:.0} MiB");
    let eps = episodes(&out);
    let deep = episode_of(&eps, "deep.py");
    assert_eq!(deep["verdict"], "policy_violation", "{deep}");
    assert!(
        deep["detail"].as_str().unwrap().contains("path longer"),
        "{deep}"
    );
    let sparse = episode_of(&eps, "sparse.py");
    assert_eq!(sparse["verdict"], "graded", "{sparse}");
    assert_eq!(sparse["reward"].as_f64(), Some(0.2), "{sparse}");
    let dropped = sparse["policy"]["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 17, "{sparse}");
    let patch = out.join(sparse["episode"]["patch"].as_str().unwrap());
    assert!(
        std::fs::metadata(&patch).unwrap().len() < 4096,
        "dropped files reached the patch"
    );
    // Nothing the agent caused is run again on resume.
    let again = pdl_swe(&args);
    let said = text(&again);
    assert!(
        said.lines()
            .any(|l| l.starts_with("episodes: 2 already done") && l.ends_with(", 0 to run")),
        "{said}"
    );
    assert_eq!(episodes(&out).len(), 2);
}

#[test]
fn an_agent_that_takes_every_inode_fills_only_its_own_file_system() {
    // Red-team attempt 17: files in the workspace's .git until the file
    // system is full. The episode's workspace and scratch live on a file
    // system of their own, so the agent fills that one: its episode is
    // graded, and the harness's folders beside it keep their inodes.
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let work = dir.path().join("work");
    let mut args = run_args(
        &model.base_url(),
        &out,
        &[
            "--agent-cmd",
            &agent_cmd("inodes.py"),
            "--episode-inodes",
            "5000",
            "--work-dir",
            &work.display().to_string(),
            "-j",
            "1",
        ],
    );
    args.extend(["--samples".to_string(), "2".to_string()]);
    let run = pdl_swe(&args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let eps = episodes(&out);
    assert_eq!(eps.len(), 2);
    for ep in &eps {
        assert_eq!(ep["verdict"], "graded", "{ep}");
        assert_eq!(ep["reward"].as_f64(), Some(0.2), "{ep}");
        assert_eq!(ep["episode"]["scratch_fs"]["inodes"], 5000, "{ep}");
        let log =
            std::fs::read_to_string(out.join(ep["episode"]["log"].as_str().unwrap())).unwrap();
        let said = log
            .lines()
            .find_map(|l| l.strip_prefix("@@ inodes "))
            .unwrap_or_else(|| panic!("{log}"));
        let said: Value = serde_json::from_str(said).unwrap();
        assert_eq!(said["stopped"], "ENOSPC", "{said}");
        assert!(said["made"].as_u64().unwrap() < 5000, "{said}");
        assert_eq!(said["files"], 5000, "{said}");
    }
    // Nothing is left mounted under the work folder.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&work.display().to_string()),
        "a scratch file system was left mounted"
    );
}

/// What the logging upstream billed in all (input by its bytes and images,
/// output by the cap it was sent).
fn billed(upstream: &Upstream) -> u64 {
    upstream
        .requests()
        .iter()
        .map(|r| r["billed"].as_u64().unwrap())
        .sum()
}

/// Input plus output tokens of an episode object.
fn tokens(episode: &Value) -> u64 {
    episode["tokens_in"].as_u64().unwrap() + episode["tokens_out"].as_u64().unwrap()
}

#[test]
fn image_inputs_are_reserved_at_what_the_model_can_bill() {
    // Red-team attempt 03: 271-byte PNGs that gpt-4o-mini bills 48 169 tokens
    // each, eight at once, on a 10 000-token budget. Before, each was reserved
    // about 4 500 tokens and the provider billed several times the budget.
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let out = dir.path().join("run");
    let mut args = run_args(
        &upstream.base_url(),
        &out,
        &["--agent-cmd", &agent_cmd("images.py")],
    );
    args.iter_mut()
        .filter(|a| *a == MODEL)
        .for_each(|a| *a = "gpt-4o-mini".into());
    let run = pdl_swe(&args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let e = &episodes(&out)[0];
    let ep = &e["episode"];
    assert!(tokens(ep) <= BUDGET, "{ep}");
    assert_eq!(ep["overrun_tokens"], 0, "{ep}");
    let total = billed(&upstream);
    assert!(
        total <= BUDGET,
        "the provider billed {total} on a {BUDGET} budget"
    );
    // No high-detail image fits; the low-detail one (2 833 tokens) does.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0]["body"].to_string().contains("images-low"));
    let log = std::fs::read_to_string(out.join(ep["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("@@ images"), "{log}");
    assert_eq!(ep["refused_calls"], 8, "{ep}");
}

/// The lines of every trajectory file of a run folder.
fn trajectory_lines(run_dir: &Path) -> Vec<Value> {
    let mut lines = Vec::new();
    let mut folders = vec![run_dir.join("trajectories")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                lines.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
            }
        }
    }
    lines
}

/// Waits until `done` holds, at most `limit`.
fn wait_until(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    done()
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fields after the command name, which ends with ')'.
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The sandbox helpers the harness `pid` runs (its children in the hidden
/// `__sandbox-init` mode).
fn sandbox_helpers(pid: u32) -> Vec<u32> {
    children_of(pid)
        .into_iter()
        .filter(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__sandbox-init"))
        })
        .collect()
}

fn sigkill(pid: u32) {
    // SAFETY: a plain kill(2) of a process this test started (or its child).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// Starts the harness with its output in files under `dir`.
fn spawn_pdl_swe(args: &[String], dir: &Path, name: &str) -> Child {
    let stdout = std::fs::File::create(dir.join(format!("{name}.stdout"))).unwrap();
    let stderr = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .env("PDL_TEST_REAL_KEY", REAL_KEY)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn spawned_text(dir: &Path, name: &str) -> String {
    let read =
        |ext: &str| std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).unwrap_or_default();
    format!("{}\n{}", read("stdout"), read("stderr"))
}

#[test]
fn a_harness_error_keeps_its_tokens_and_the_rerun_starts_from_them() {
    // Red-team attempts 18 and 07: spend the budget, then drop out through a
    // harness error, and start again. The record must keep what was spent, and
    // the re-run gets only what is left of the episode's budget.
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let out = dir.path().join("run");
    let args = run_args(
        &upstream.base_url(),
        &out,
        &["--agent-cmd", &agent_cmd("spend.py"), "-j", "1"],
    );
    let mut first = spawn_pdl_swe(&args, dir.path(), "first");
    // Once the gateway refuses a call the agent has spent what it could; its
    // sandbox helper is then killed from outside (a fault of the machine).
    let refused = wait_until(std::time::Duration::from_secs(180), || {
        trajectory_lines(&out).iter().any(|l| l["refused"] == true)
    });
    assert!(refused, "{}", spawned_text(dir.path(), "first"));
    let helpers = sandbox_helpers(first.id());
    assert_eq!(helpers.len(), 1, "{helpers:?}");
    sigkill(helpers[0]);
    let status = first.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "{}",
        spawned_text(dir.path(), "first")
    );
    let eps = episodes(&out);
    let ep = &eps[0]["episode"];
    assert_eq!(eps[0]["verdict"], "harness_error", "{}", eps[0]);
    let spent = tokens(ep);
    assert!(spent > BUDGET * 9 / 10 && spent <= BUDGET, "{ep}");
    assert!(ep["calls"].as_u64().unwrap() >= 3, "{ep}");
    let billed_first = billed(&upstream);
    assert!(
        billed_first <= spent,
        "{billed_first} billed, {spent} recorded"
    );
    // The reports show what it spent.
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report/report.json")).unwrap()).unwrap();
    let overall = &report["overall"][0];
    let shown = overall["mean_tokens_in"].as_f64().unwrap_or(0.0)
        + overall["mean_tokens_out"].as_f64().unwrap_or(0.0);
    assert_eq!(shown as u64, spent, "{overall}");

    // The harness error is run again, from what the slot spent.
    let again = pdl_swe(&args);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    let eps = episodes(&out);
    assert_eq!(eps.len(), 2);
    let rerun = &eps[1]["episode"];
    assert_eq!(rerun["rerun_of"]["verdict"], "harness_error");
    assert_eq!(
        rerun["carried"]["tokens_in"].as_u64().unwrap()
            + rerun["carried"]["tokens_out"].as_u64().unwrap(),
        spent,
        "{rerun}"
    );
    assert!(tokens(rerun) <= BUDGET, "{rerun}");
    assert_eq!(rerun["end_reason"], "budget_exhausted", "{rerun}");
    let total = billed(&upstream);
    assert!(
        total <= BUDGET,
        "one episode slot was billed {total} over two starts on a {BUDGET} budget"
    );
}

/// Removes the cgroups a killed harness `pid` left behind (best effort).
fn remove_cgroups_of(pid: u32) {
    let prefix = format!("pdl-swe-{pid}-");
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut roots = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_start_matches('/');
        for c in controllers.split(',') {
            match c {
                "memory" | "pids" => roots.push(Path::new("/sys/fs/cgroup").join(c).join(path)),
                "" => {
                    roots.push(Path::new("/sys/fs/cgroup").join(path));
                    roots.push(Path::new("/sys/fs/cgroup/unified").join(path));
                }
                _ => {}
            }
        }
    }
    let mut folders: Vec<(PathBuf, usize)> = roots.into_iter().map(|r| (r, 0)).collect();
    while let Some((folder, depth)) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir(&path);
            } else if depth < 2 {
                folders.push((path, depth + 1));
            }
        }
    }
}

#[test]
fn a_harness_killed_in_the_middle_of_an_episode_reports_its_spend_and_leaves_the_budget_whole() {
    // The ledger is written as the gateway reserves and settles: a harness
    // killed while a call is in flight leaves both on record. No agent can
    // kill the harness, so the attempt run on the next start gets the whole
    // budget, and its record reports what the cut-short attempt spent.
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let out = dir.path().join("run");
    let work = dir.path().join("work");
    let args = run_args(
        &upstream.base_url(),
        &out,
        &[
            "--agent-cmd",
            &format!("{} slow", agent_cmd("spend.py")),
            "-j",
            "1",
            "--work-dir",
            &work.display().to_string(),
        ],
    );
    let mut first = spawn_pdl_swe(&args, dir.path(), "first");
    let in_flight = wait_until(std::time::Duration::from_secs(180), || {
        upstream
            .requests()
            .iter()
            .any(|r| r["body"].to_string().contains("SLOW spend-2"))
    });
    assert!(in_flight, "{}", spawned_text(dir.path(), "first"));
    let pid = first.id();
    let helpers = sandbox_helpers(pid);
    sigkill(pid);
    first.wait().unwrap();
    // The killed harness could not detach its episode's file system.
    let source = format!("pdl-swe-scratch-{pid} ");
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&source)
    };
    assert!(mounted(), "no scratch file system of the killed harness");
    // The orphaned agent leaves when its call breaks off.
    let gone = wait_until(std::time::Duration::from_secs(60), || {
        helpers
            .iter()
            .all(|h| !Path::new(&format!("/proc/{h}")).exists())
    });
    assert!(gone, "the killed harness's sandbox is still running");
    remove_cgroups_of(pid);
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("pdl-gw-{pid}-"))
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    assert!(
        episodes(&out).is_empty(),
        "the killed start wrote no record"
    );
    let billed_first = billed(&upstream);
    assert!(billed_first > BUDGET / 2, "{billed_first}");

    let again = pdl_swe(&args);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    // The next harness let it go (this one, or one of a test running beside).
    assert!(
        !mounted(),
        "the killed harness's file system is still mounted"
    );
    let eps = episodes(&out);
    assert_eq!(eps.len(), 1);
    let ep = &eps[0]["episode"];
    assert!(ep.get("carried").is_none(), "{ep}");
    let interrupted = ep["interrupted"]["tokens_in"].as_u64().unwrap()
        + ep["interrupted"]["tokens_out"].as_u64().unwrap();
    assert!(
        interrupted >= billed_first,
        "the record reports {interrupted} of the {billed_first} the killed start was billed: {ep}"
    );
    assert!(tokens(ep) <= BUDGET, "{ep}");
    let second = billed(&upstream) - billed_first;
    assert!(
        second > BUDGET / 2 && second <= BUDGET,
        "the resumed attempt was billed {second} of its {BUDGET} budget"
    );
}

#[test]
fn a_sandbox_helper_killed_while_the_run_was_out_of_memory_is_the_agents_doing() {
    // Red-team attempt 07: tmpfs pages no process owns fill the run's memory
    // cgroup, and the kernel kills the sandbox helper. Here the agent makes
    // the cgroup record an out-of-memory kill and the test kills the helper
    // with SIGKILL, as the kernel did: the agent's doing, graded, never a
    // harness error (which would drop it out of the means).
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let out = dir.path().join("run");
    let args = run_args(
        &upstream.base_url(),
        &out,
        &["--agent-cmd", &agent_cmd("oom.py"), "-j", "1"],
    );
    let mut first = spawn_pdl_swe(&args, dir.path(), "first");
    let ready = wait_until(std::time::Duration::from_secs(180), || {
        upstream
            .requests()
            .iter()
            .any(|r| r["body"].to_string().contains("oom-done"))
    });
    assert!(ready, "{}", spawned_text(dir.path(), "first"));
    for helper in sandbox_helpers(first.id()) {
        sigkill(helper);
    }
    let status = first.wait().unwrap();
    let said = spawned_text(dir.path(), "first");
    let records = records(&out);
    let scope = records
        .iter()
        .find(|r| r["kind"] == "gold")
        .map(|r| r["provenance"]["sandbox"]["memory_scope"].clone())
        .unwrap_or_default();
    if !matches!(scope.as_str(), Some("cgroup_v1" | "cgroup_v2")) {
        eprintln!("skipped: runs have no memory cgroup here ({scope}), so no OOM kill is recorded");
        return;
    }
    let e = &episodes(&out)[0];
    assert_eq!(e["verdict"], "graded", "{e}\n{said}");
    assert_eq!(e["reward"], 0.2, "{e}");
    let ep = &e["episode"];
    assert_eq!(ep["end_reason"], "agent_error", "{ep}");
    assert!(
        ep["error"].as_str().unwrap().contains("out of memory"),
        "{ep}"
    );
    assert_eq!(status.code(), Some(0), "{said}");
}

/// Unix permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn run_and_work_folders_an_agent_could_read_are_closed_to_it_or_refused() {
    // Red-team attempt 23: `--out` or `--work-dir` under an `--agent-path` let
    // the agent read sibling patches, hidden test names and grading trees.
    // As root, agents run under a uid of their own: such a folder is made
    // 0700 and the agent cannot enter it. Otherwise it is refused.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("proj");
    std::fs::create_dir(&agent_dir).unwrap();
    let link = dir.path().join("link-to-proj");
    std::os::unix::fs::symlink(&agent_dir, &link).unwrap();
    let agent_path = agent_dir.display().to_string();
    let model = idle_model();
    // An agent that tries to list a folder and read the results.
    let probe = |listed: &Path, results: &Path| {
        format!(
            "sh -c 'ls {} >/dev/null 2>&1 && echo LISTED; cat {} >/dev/null 2>&1 && echo READ; echo PROBED'",
            listed.display(),
            results.display()
        )
    };
    let attempt = |out: &Path, listed: &Path, results: &Path, extra: &[&str], named: &[&Path]| {
        let probe = probe(listed, results);
        let mut args = run_args(&model.base_url(), out, &["--agent-cmd", &probe]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let run = pdl_swe(&args);
        let said = text(&run);
        if !root {
            assert_eq!(run.status.code(), Some(2), "{said}");
            for path in named {
                assert!(
                    said.contains(&path.display().to_string()),
                    "{path:?}: {said}"
                );
            }
            return;
        }
        assert_eq!(run.status.code(), Some(0), "{said}");
        let eps = episodes(out);
        let log =
            std::fs::read_to_string(out.join(eps[0]["episode"]["log"].as_str().unwrap())).unwrap();
        assert!(log.contains("PROBED"), "{log}");
        assert!(!log.contains("LISTED") && !log.contains("READ"), "{log}");
        for path in named.iter().take(1) {
            assert_eq!(mode(path) & 0o777, 0o700, "{path:?}");
        }
    };
    // The run folder inside an agent path (named through a link, not yet made).
    let out = link.join("runs/x");
    attempt(
        &out,
        &agent_dir.join("runs/x"),
        &agent_dir.join("runs/x/results.jsonl"),
        &["--agent-path", &agent_path],
        &[&agent_dir.join("runs/x"), &agent_dir],
    );
    // The work folder inside an agent path: refused whoever runs the harness
    // (the sandboxes' own mounts live in it).
    let out = dir.path().join("run");
    let work = agent_dir.join("work");
    let mut args = run_args("http://127.0.0.1:9/v1", &out, &["--agent-cmd", "true"]);
    args.extend(
        [
            "--agent-path",
            &agent_path,
            "--work-dir",
            &work.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let run = pdl_swe(&args);
    let said = text(&run);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(
        said.contains("--work-dir") && said.contains(&agent_path),
        "{said}"
    );
    assert!(!work.exists() && !out.exists());
    // An agent path inside the run folder.
    let out = dir.path().join("run2");
    let inner = out.join("patches");
    attempt(
        &out,
        &inner,
        &out.join("results.jsonl"),
        &["--agent-path", &inner.display().to_string()],
        &[&out, &inner],
    );
    // A folder every sandbox reads is refused whoever runs the harness.
    let system = Path::new("/etc/pdl-swe-test-never-made/run");
    let args = run_args("http://127.0.0.1:9/v1", system, &["--agent-cmd", "true"]);
    let run = pdl_swe(&args);
    let said = text(&run);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(said.contains("/etc"), "{said}");
    assert!(!Path::new("/etc/pdl-swe-test-never-made").exists());
}

#[test]
fn a_dataset_or_cache_an_agent_could_read_is_refused() {
    // Second episode red team: with the tasks inside the agent's project the
    // agent applied the reference solution; a cache folder there showed the
    // ladders' hidden test IDs.
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("proj");
    let tasks = project.join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let copy = std::process::Command::new("cp")
        .args(["-r"])
        .arg(fixtures().join("tasks").join(TASK))
        .arg(&tasks)
        .status()
        .unwrap();
    assert!(copy.success());
    let out = dir.path().join("run");
    let project_path = project.display().to_string();
    let mut args = run_args("http://127.0.0.1:9/v1", &out, &["--agent-cmd", "true"]);
    let at = args.iter().position(|a| a == "--dataset").unwrap();
    args[at + 1] = tasks.join(TASK).display().to_string();
    args.extend(["--agent-path".to_string(), project_path.clone()]);
    let run = pdl_swe(&args);
    let said = text(&run);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(
        said.contains("the dataset") && said.contains(&project_path),
        "{said}"
    );
    assert!(!out.exists());
    // The cache folder inside the agent path.
    let mut args = run_args("http://127.0.0.1:9/v1", &out, &["--agent-cmd", "true"]);
    args.extend([
        "--agent-path".to_string(),
        project_path.clone(),
        "--cache-dir".to_string(),
        project.join("cache").display().to_string(),
    ]);
    let run = pdl_swe(&args);
    let said = text(&run);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(said.contains("the cache folder"), "{said}");
    assert!(!out.exists());
    // Third red team: the same folder under another name (a bind mount).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("PDL_SWE_ALLOW_UNPRIVILEGED").is_some(),
            "binding a folder needs root; set PDL_SWE_ALLOW_UNPRIVILEGED=1 to leave this out"
        );
        return;
    }
    let alias = dir.path().join("alias");
    std::fs::create_dir(&alias).unwrap();
    let bound = Command::new("mount")
        .args(["--bind"])
        .arg(&project)
        .arg(&alias)
        .status()
        .unwrap();
    assert!(bound.success());
    let mut args = run_args("http://127.0.0.1:9/v1", &out, &["--agent-cmd", "true"]);
    let at = args.iter().position(|a| a == "--dataset").unwrap();
    args[at + 1] = tasks.join(TASK).display().to_string();
    args.extend(["--agent-path".to_string(), alias.display().to_string()]);
    let run = pdl_swe(&args);
    let _ = Command::new("umount").arg(&alias).status();
    let said = text(&run);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(said.contains("the dataset"), "{said}");
    assert!(!out.exists());
}

#[test]
fn grading_folders_and_what_agents_produced_are_private_to_the_harness() {
    // Red-team attempt 23: grading folders were created 0755, readable by any
    // local user (and by an agent running as the harness's user).
    let model = idle_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let work = dir.path().join("work");
    let args = run_args(
        &model.base_url(),
        &out,
        &[
            "--agent-cmd",
            "true",
            "--work-dir",
            &work.display().to_string(),
            "--keep-workdirs",
        ],
    );
    let run = pdl_swe(&args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let graded: Vec<PathBuf> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        graded.len() >= 4,
        "gold, noop, the episode, its scratch: {graded:?}"
    );
    for folder in &graded {
        assert_eq!(mode(folder), 0o700, "{}", folder.display());
    }
    for name in ["trajectories", "patches", "logs", "ledger"] {
        assert_eq!(mode(&out.join(name)), 0o700, "{name}");
    }
}
