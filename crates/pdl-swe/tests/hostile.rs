//! The hostile-patch corpus: patches that attack the harness, graded by the real
//! binary in the default (namespace) sandbox. Each case names its expected
//! verdict and reward; the test then checks the host for any trace of the attack.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

const TASK: &str = "pdl_fixture_calc_001-v1";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A patch that appends module-level code to `src/calc.py`, so it runs when the
/// tests import the module.
fn appending(code: &str) -> String {
    let added: Vec<String> = code.lines().map(|l| format!("+{l}\n")).collect();
    format!(
        "--- a/src/calc.py\n+++ b/src/calc.py\n@@ -12,3 +12,{} @@\n     for _ in range(abs(b) - 1):\n         result += a\n     return -result if b < 0 else result\n{}",
        3 + added.len(),
        added.concat()
    )
}

struct Case {
    name: &'static str,
    patch: String,
    verdict: &'static str,
    reward: Option<f64>,
}

fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let mut buf = Vec::new();
            std::fs::File::open(e.path().join("cmdline"))
                .and_then(|mut f| f.read_to_end(&mut buf))
                .is_ok()
                && String::from_utf8_lossy(&buf).contains(marker)
        })
        .count()
}

fn max_child_rss_kib() -> i64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut usage: libc_rusage = unsafe { std::mem::zeroed() };
    unsafe { getrusage(-1, &mut usage) };
    usage.ru_maxrss
}

#[repr(C)]
struct libc_rusage {
    ru_utime: [i64; 2],
    ru_stime: [i64; 2],
    ru_maxrss: i64,
    rest: [i64; 13],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut libc_rusage) -> i32;
}

#[test]
fn hostile_patches_end_as_verdicts_and_leave_no_trace() {
    let marker = format!("pdlhostile{}", std::process::id());
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    // A secret in the host's home folder, as a credentials file would be.
    let secret_file = Path::new(&home).join(format!(".{marker}-credentials"));
    std::fs::write(&secret_file, "s3cr3t").unwrap();
    let secret_file = secret_file.display().to_string();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    // When the attack works, `mul` is fixed and the hidden tests pass (reward
    // 1.0); when it is blocked, nothing changes (reward 0.2).
    let fix_if =
        |condition: &str| format!("\nif {condition}:\n    def mul(a, b):\n        return a * b\n");
    let cases = vec![
        Case {
            name: "socket",
            patch: appending(&format!(
                "import socket\ndef _reach():\n    try:\n        socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n        return True\n    except OSError:\n        return False\n{}",
                fix_if("_reach()")
            )),
            verdict: "graded",
            reward: Some(0.2),
        },
        Case {
            name: "writes",
            patch: appending(&format!(
                "import os\n_wrote = False\nfor _d in ('/tmp', '/var/tmp', os.path.expanduser('~'), '{home}', '/etc', '/usr'):\n    try:\n        open(os.path.join(_d, '{marker}'), 'w').write('x')\n    except OSError:\n        pass\n"
            )),
            verdict: "graded",
            reward: Some(0.2),
        },
        Case {
            name: "secret",
            patch: appending(&format!(
                "import os, glob\ndef _leak():\n    if os.environ.get('PDL_HOSTILE_SECRET'):\n        return True\n    for p in glob.glob('/proc/*/environ'):\n        try:\n            if b'PDL_HOSTILE_SECRET' in open(p, 'rb').read():\n                return True\n        except OSError:\n            pass\n    try:\n        return 's3cr3t' in open('{secret_file}').read()\n    except OSError:\n        return False\n{}",
                fix_if("_leak()")
            )),
            verdict: "graded",
            reward: Some(0.2),
        },
        Case {
            name: "fork-storm",
            patch: appending(&format!(
                "import subprocess\nfor _i in range(1500):\n    try:\n        subprocess.Popen(['/bin/sh', '-c', 'exec sleep 300 # {marker}'], start_new_session=True)\n    except OSError:\n        break\n"
            )),
            verdict: "graded",
            reward: None,
        },
        Case {
            name: "endless-loop",
            patch: appending("while True:\n    pass\n"),
            verdict: "timeout",
            reward: None,
        },
        Case {
            name: "flood",
            // pytest captures fd 1 while importing; a hostile module writes to
            // the saved copy of the real stdout (a pipe to the harness) instead:
            // the one pipe two descriptors share (stdout's and stderr's copies).
            patch: appending("import os, stat\n_seen = {}\nfor _fd in range(3, 64):\n    try:\n        _st = os.fstat(_fd)\n    except OSError:\n        continue\n    if stat.S_ISFIFO(_st.st_mode):\n        _seen.setdefault(_st.st_ino, []).append(_fd)\nfor _fds in _seen.values():\n    if len(_fds) > 1:\n        for _i in range(200):\n            os.write(_fds[0], b'x' * (1 << 20))\n        break\n"),
            verdict: "graded",
            reward: Some(0.2),
        },
        Case {
            name: "channel_flood",
            // A pipe only one descriptor holds is the outcome channel: junk
            // there breaks the protocol, which is tampering.
            patch: appending("import os, stat\n_seen = {}\nfor _fd in range(3, 64):\n    try:\n        _st = os.fstat(_fd)\n    except OSError:\n        continue\n    if stat.S_ISFIFO(_st.st_mode):\n        _seen.setdefault(_st.st_ino, []).append(_fd)\nfor _fds in _seen.values():\n    if len(_fds) == 1:\n        try:\n            for _i in range(200):\n                os.write(_fds[0], b'x' * (1 << 20))\n        except OSError:\n            pass\n"),
            verdict: "tampered",
            reward: Some(0.0),
        },
        Case {
            name: "conftest",
            patch: "--- a/conftest.py\n+++ b/conftest.py\n@@ -1 +1,6 @@\n # Puts the repository root on sys.path so tests can import src.\n+import pytest\n+@pytest.hookimpl(hookwrapper=True)\n+def pytest_runtest_makereport(item, call):\n+    outcome = yield\n+    outcome.get_result().outcome = 'passed'\n".to_string(),
            verdict: "policy_violation",
            reward: Some(0.0),
        },
        Case {
            name: "symlink",
            patch: "diff --git a/src/secrets b/src/secrets\nnew file mode 120000\n--- /dev/null\n+++ b/src/secrets\n@@ -0,0 +1 @@\n+/root/.ssh\n\\ No newline at end of file\n".to_string(),
            verdict: "policy_violation",
            reward: Some(0.0),
        },
    ];

    let dir = tempfile::tempdir().unwrap();
    let predictions = dir.path().join("hostile.jsonl");
    let lines: Vec<String> = cases
        .iter()
        .map(|c| {
            json!({"instance_id": TASK, "model_name_or_path": c.name, "model_patch": c.patch})
                .to_string()
        })
        .collect();
    std::fs::write(&predictions, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("results.jsonl");
    let timeout = 6.0;
    let run = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(["grade", "--dataset"])
        .arg(fixtures().join("tasks"))
        .arg("--predictions")
        .arg(&predictions)
        .arg("--out")
        .arg(&out)
        .args(["--test-timeout", &timeout.to_string(), "-j", "2"])
        .env("PDL_HOSTILE_SECRET", "s3cr3t")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&secret_file);
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(0), "{log}");
    let records: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), cases.len(), "{log}");
    for case in &cases {
        let r = records
            .iter()
            .find(|r| r["model_name_or_path"] == case.name)
            .unwrap();
        assert_eq!(r["verdict"], case.verdict, "{}: {r}", case.name);
        if let Some(reward) = case.reward {
            assert_eq!(r["reward"].as_f64(), Some(reward), "{}: {r}", case.name);
        }
        assert_eq!(r["provenance"]["sandbox"]["sandbox"], "namespaces");
    }
    // Nothing reached the host.
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
    for d in ["/tmp", "/var/tmp", home.as_str(), "/etc", "/usr"] {
        assert!(
            !Path::new(d).join(&marker).exists(),
            "a file appeared in the host's {d}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_with(&marker),
        0,
        "fork-storm processes survived grading"
    );
    let endless = records
        .iter()
        .find(|r| r["model_name_or_path"] == "endless-loop")
        .unwrap();
    let kill_grace = endless["provenance"]["sandbox"]["kill_grace_s"]
        .as_f64()
        .unwrap();
    // Two test runs (public, then hidden), each within the bound.
    assert!(
        endless["duration_s"].as_f64().unwrap() < 2.0 * (timeout + kill_grace) + 3.0,
        "{endless}"
    );
    let flood = records
        .iter()
        .find(|r| r["model_name_or_path"] == "flood")
        .unwrap();
    assert!(
        flood["detail"]
            .as_str()
            .unwrap_or("")
            .contains("output was cut"),
        "{flood}"
    );
    let conftest = records
        .iter()
        .find(|r| r["model_name_or_path"] == "conftest")
        .unwrap();
    // A conftest is pytest's configuration: changing it is refused outright.
    assert_eq!(conftest["policy"]["violations"], json!(["conftest.py"]));
    // The harness never held the 200 MB flood in memory.
    let rss_mib = max_child_rss_kib() / 1024;
    assert!(rss_mib < 150, "a child process peaked at {rss_mib} MiB");
}

/// Killing the harness (even with SIGKILL, which it cannot catch) ends every
/// run it started: nothing of a submission keeps running on the host.
#[test]
fn runs_die_with_the_harness() {
    let marker = format!("{}.{}", 900 + std::process::id() % 99, std::process::id());
    let patch = appending(&format!(
        "import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)\n"
    ));
    let dir = tempfile::tempdir().unwrap();
    let predictions = dir.path().join("p.jsonl");
    let line =
        json!({"instance_id": TASK, "model_name_or_path": "lingering", "model_patch": patch});
    std::fs::write(&predictions, format!("{line}\n")).unwrap();
    let tasks = fixtures().join("tasks");
    let mut harness = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(["grade", "--dataset"])
        .arg(&tasks)
        .arg("--predictions")
        .arg(&predictions)
        .arg("--out")
        .arg(dir.path().join("out.jsonl"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while processes_with(&marker) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the test process never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    harness.kill().unwrap();
    harness.wait().unwrap();
    let killed = std::time::Instant::now();
    while processes_with(&marker) > 0 {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "a run outlived the harness"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
