//! SIGINT and SIGTERM during a grading whose hidden test sleeps: the real
//! binary stops promptly with exit code 130, kills its sandboxes (no process
//! of the run outlives it), and keeps the records written before the signal.
//!
//! The test process makes itself a child subreaper, so any process of the run
//! that outlived the harness is re-parented to it and can be found.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture_task() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/pdl_fixture_calc_001")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The fixture task with a hidden test module that sleeps at import and the
/// task's own bound at its maximum, so only a signal can end the run soon.
fn sleeping_task(dir: &Path) -> PathBuf {
    let task = dir.join("tasks/pdl_fixture_calc_001");
    copy_tree(&fixture_task(), &task);
    let hidden = task.join("hidden/test_hidden.py");
    let text = std::fs::read_to_string(&hidden).unwrap();
    std::fs::write(&hidden, format!("import time\ntime.sleep(10**9)\n{text}")).unwrap();
    let manifest = task.join("manifest.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let (head, _) = text.split_once("limits:").unwrap();
    std::fs::write(
        &manifest,
        format!("{head}limits:\n  test_timeout_s: 3600\n"),
    )
    .unwrap();
    task
}

/// Processes whose parent is this test process (orphans of the run land here).
fn our_children() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let ppid: i32 = rest
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == me {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

fn reap_zombies() {
    // SAFETY: waitpid with WNOHANG on any child; no memory involved.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

fn interrupt_a_sleeping_grading(signal: i32) {
    // SAFETY: prctl with integer arguments.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let dir = tempfile::tempdir().unwrap();
    let task = sleeping_task(dir.path());
    let predictions = dir.path().join("preds.jsonl");
    std::fs::write(
        &predictions,
        "{\"instance_id\": \"pdl_fixture_calc_001-v1\", \"model_name_or_path\": \"m\", \"model_patch\": \"\"}\n",
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let work = dir.path().join("work");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(["grade", "--dataset"])
        .arg(&task)
        .arg("--predictions")
        .arg(&predictions)
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(&work)
        .args(["-j", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a sandbox runs (a helper of ours exists), at most 120 s
    // (the first run may build the environment).
    let started = Instant::now();
    let helper_running = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split(' ').nth(1).map(str::to_string))
                .unwrap_or_default();
            ppid == child.id().to_string()
        })
    };
    while !helper_running() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no sandbox started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let pytest reach the sleeping import.
    std::thread::sleep(Duration::from_secs(2));
    let signalled = Instant::now();
    // SAFETY: kill with a pid and a signal number.
    unsafe { libc::kill(child.id() as i32, signal) };
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the harness did not stop within 15 s of the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = signalled.elapsed();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    // Nothing of the run survives it.
    let mut leftovers = Vec::new();
    for _ in 0..30 {
        reap_zombies();
        leftovers = our_children();
        if leftovers.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (pid, _) in &leftovers {
        // SAFETY: kill with a pid and a signal number.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        leftovers.is_empty(),
        "processes outlived the harness: {leftovers:?}"
    );
    // No record of the cut-short grading was written as if it were real.
    let records = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        records
            .lines()
            .all(|l| !l.contains("\"verdict\":\"harness_error\"")),
        "{records}"
    );
}

#[test]
fn sigint_and_sigterm_stop_a_grading_and_its_sandboxes() {
    interrupt_a_sleeping_grading(libc::SIGINT);
    interrupt_a_sleeping_grading(libc::SIGTERM);
}
