//! The console model end to end: the real binary serves it, a real campaign's
//! built-in agent sends it requests through the gateway and the sandbox, and the
//! replies are written with `pdl-swe model turn` and `pdl-swe model reply`.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TASK: &str = "pdl_fixture_calc_001";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks")
}

fn pdl_swe(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Kills the process when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_console_model_episode_is_answered_through_the_mailbox_and_metered() {
    let dir = tempfile::tempdir().unwrap();
    let mailbox = dir.path().join("mailbox");
    let mailbox_arg = mailbox.display().to_string();
    let out = dir.path().join("run");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _console = Reaped(
        Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
            .args([
                "model",
                "console",
                "--mailbox",
                &mailbox_arg,
                "--listen",
                &listen,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let run = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args([
            "run",
            "--dataset",
            &fixtures().display().to_string(),
            "--task",
            TASK,
            "--agent",
            "builtin",
            "--model",
            "by-hand",
            "--base-url",
            &format!("http://{listen}/v1"),
            "--out",
            &out.display().to_string(),
            "--test-timeout",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = Reaped(run);

    // The first request: the system prompt (with the issue and the budget) and the tools.
    let first = pdl_swe(
        &["model", "turn", "--mailbox", &mailbox_arg, "--wait", "120"],
        None,
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let shown = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(shown.starts_with("=== request 1 · turn 0 ·"), "{shown}");
    assert!(shown.contains("Token budget: "), "{shown}");
    assert!(shown.contains("\"name\":\"run_shell\""), "{shown}");

    // A reply may not declare its usage, and must be JSON: both refused before
    // the server sees them, naming the file and the field.
    let declared = pdl_swe(
        &["model", "reply", "--mailbox", &mailbox_arg, "--file", "-"],
        Some(r#"{"content": "x", "usage": {"input_tokens": 1, "output_tokens": 1}}"#),
    );
    assert_eq!(declared.status.code(), Some(2), "{}", text(&declared));
    assert!(
        text(&declared).contains("000001.json: `reply.usage` is not a known field"),
        "{}",
        text(&declared)
    );
    let broken = pdl_swe(
        &["model", "reply", "--mailbox", &mailbox_arg, "--file", "-"],
        Some("{not json"),
    );
    assert_eq!(broken.status.code(), Some(2), "{}", text(&broken));
    assert!(
        text(&broken).contains("not valid JSON"),
        "{}",
        text(&broken)
    );

    // A reply longer than the request's output cap would be cut (and its tool
    // calls lost) as a model's would: it is refused before it is sent.
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(mailbox.join("requests/000001.json")).unwrap(),
    )
    .unwrap();
    let cap = summary["output_cap"]
        .as_u64()
        .expect("the agent asks for a cap");
    assert!(
        shown.contains(&format!("reply at most {cap} tokens")),
        "{shown}"
    );
    let long = json!({"content": "x".repeat(cap as usize * 4 + 8)}).to_string();
    let refused = pdl_swe(
        &["model", "reply", "--mailbox", &mailbox_arg, "--file", "-"],
        Some(&long),
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains(&format!("this request allows at most {cap}")),
        "{}",
        text(&refused)
    );

    // A bad reply written straight into the mailbox is refused by the server,
    // which says why and keeps waiting for a good one.
    std::fs::write(mailbox.join("replies/000001.json"), r#"{"tool_calls": 3}"#).unwrap();
    wait_for("the server's refusal", Duration::from_secs(10), || {
        mailbox.join("replies/000001.error").exists()
    });
    let why = std::fs::read_to_string(mailbox.join("replies/000001.error")).unwrap();
    assert!(why.contains("`reply.tool_calls`"), "{why}");
    assert!(mailbox.join("replies/000001.rejected").exists());

    // Now a good reply: the next request holds the tool's output.
    let viewed = pdl_swe(
        &[
            "model",
            "reply",
            "--mailbox",
            &mailbox_arg,
            "--file",
            "-",
            "--wait",
            "120",
        ],
        Some(
            &json!({"tool_calls": [{"name": "view_file", "arguments": {"path": "src/calc.py"}}]})
                .to_string(),
        ),
    );
    assert_eq!(viewed.status.code(), Some(0), "{}", text(&viewed));
    let shown = String::from_utf8_lossy(&viewed.stdout).to_string();
    assert!(shown.starts_with("=== request 2 · turn 1 ·"), "{shown}");
    assert!(shown.contains("range(abs(b) - 1)"), "{shown}");
    assert!(
        !shown.contains("--- tools ---"),
        "tools are shown once: {shown}"
    );

    // A reply written for a request that is no longer waiting is not sent.
    let late = pdl_swe(
        &[
            "model",
            "reply",
            "--mailbox",
            &mailbox_arg,
            "--request",
            "1",
            "--shell",
            "ls",
        ],
        None,
    );
    assert_eq!(late.status.code(), Some(2), "{}", text(&late));
    assert!(
        text(&late).contains("request 1 is not waiting for a reply (request 2 is)"),
        "{}",
        text(&late)
    );

    let edit = dir.path().join("edit.json");
    std::fs::write(
        &edit,
        json!({"tool_calls": [{"name": "replace_in_file", "arguments": {
            "path": "src/calc.py", "old_text": "range(abs(b) - 1)", "new_text": "range(abs(b))"}}]})
        .to_string(),
    )
    .unwrap();
    let edited = pdl_swe(
        &[
            "model",
            "reply",
            "--mailbox",
            &mailbox_arg,
            "--file",
            &edit.display().to_string(),
        ],
        None,
    );
    assert_eq!(edited.status.code(), Some(0), "{}", text(&edited));
    let tested = pdl_swe(
        &[
            "model",
            "reply",
            "--mailbox",
            &mailbox_arg,
            "--shell",
            "python -m pytest -q -p no:cacheprovider tests/public",
        ],
        None,
    );
    assert_eq!(tested.status.code(), Some(0), "{}", text(&tested));
    assert!(
        String::from_utf8_lossy(&tested.stdout).contains("passed"),
        "{}",
        text(&tested)
    );

    // The last reply ends the episode; no request follows, so the wait runs out.
    let finished = pdl_swe(
        &[
            "model",
            "reply",
            "--mailbox",
            &mailbox_arg,
            "--finish",
            "mul adds |b| times",
            "--wait",
            "1",
        ],
        None,
    );
    assert_eq!(finished.status.code(), Some(1), "{}", text(&finished));
    assert!(
        text(&finished).contains("no request came within 1 s"),
        "{}",
        text(&finished)
    );
    let status = run.0.wait().unwrap();
    assert!(status.success(), "the campaign failed");

    // Whoever ran the episode closes the mailbox; a waiting replier learns it.
    std::fs::write(mailbox.join("closed"), "graded\n").unwrap();
    let closed = pdl_swe(
        &["model", "turn", "--mailbox", &mailbox_arg, "--wait", "5"],
        None,
    );
    assert_eq!(closed.status.code(), Some(0), "{}", text(&closed));
    assert!(String::from_utf8_lossy(&closed.stdout).contains("=== the episode ended: graded ==="));

    let records: Vec<Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let episode = records
        .iter()
        .find(|r| r["kind"] == "episode")
        .expect("an episode record");
    assert_eq!(episode["verdict"], "graded", "{episode}");
    assert_eq!(episode["reward"], 1.0, "{episode}");
    let ep = &episode["episode"];
    assert_eq!(ep["end_reason"], "finished", "{ep}");
    assert_eq!(ep["steps"], 4, "{ep}");
    assert_eq!(ep["model"], "by-hand", "{ep}");
    // Usage is estimated from each request in full: four requests of a
    // conversation that grows, never what a reply declared.
    let tokens_in = ep["tokens_in"].as_u64().unwrap();
    assert!(tokens_in > 2_000, "{ep}");
    assert!(ep["token_budget"].as_i64().unwrap() > 0, "{ep}");
}
