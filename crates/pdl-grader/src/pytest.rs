//! Running pytest on a graded tree ([`run_pytest`]): the trusted bootstrap,
//! the outcome channel, the deterministic environment, the sandboxed command,
//! and the channels that must agree ([`cross_check`]).
//!
//! The graded tree and the bootstrap are bound read-only; the run writes only
//! to in-memory scratch (`/tmp`, HOME) that is not executable. The bootstrap
//! gets its configuration (with the run's MAC key) on standard input and the
//! write end of a pipe on descriptor [`OUTCOME_FD`]; the harness drains the
//! other end itself. Nothing of the channel is in the environment or in a file.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pdl_sandbox::{PassedFd, ProcessRunner, ResourceLimits, RunReport, RunStatus, SandboxCommand};
use serde_json::json;

use crate::env::PythonEnv;
use crate::outcome::{PytestCounts, TestLog};
use crate::protocol::{read_channel, to_test_log, Breach, RunMode, MAX_CHANNEL_BYTES};

/// The bootstrap's source, written next to each run.
pub const BOOTSTRAP_SOURCE: &str = include_str!("plugin/pdl_boot.py");

/// The descriptor the outcome channel arrives on in the sandbox.
pub const OUTCOME_FD: i32 = 5;

/// Bytes of in-memory scratch (`/tmp`, `/var/tmp`, HOME, each) a test run gets.
pub const TEST_SCRATCH_BYTES: u64 = 256 << 20;

/// What to run.
#[derive(Debug, Clone)]
pub enum PytestMode {
    /// Run these node IDs (and only these), from their files.
    Select(Vec<String>),
    /// Collect everything pytest discovers from the root, run nothing.
    CollectAll,
}

/// A test run's folders.
#[derive(Debug, Clone)]
pub struct RunDirs {
    /// The graded tree (pytest's root and working directory), read-only to
    /// the run.
    pub tree: PathBuf,
    /// Where the bootstrap is written (read-only to the run).
    pub boot: PathBuf,
    /// Where the run's output goes (out of the run's reach).
    pub output: PathBuf,
}

/// What the bootstrap must know of the tree.
#[derive(Debug, Clone, Default)]
pub struct TreeFacts {
    /// Changed `.py` files to compile (the pristine ones compile).
    pub compile: Vec<String>,
    /// Every test file of the tree (hidden and public).
    pub test_files: Vec<String>,
    /// Pristine `conftest.py` files with their SHA-256.
    pub conftests: Vec<(String, String)>,
    /// The hidden test files in the tree, which code of the repository must
    /// not read (empty when the run has none).
    pub hidden: Vec<String>,
}

/// The result of one pytest run.
#[derive(Debug, Clone)]
pub struct PytestRun {
    /// How the process ended.
    pub report: RunReport,
    /// What the channel reported (empty when it was breached).
    pub log: TestLog,
    /// Why the channel cannot be trusted, if it cannot.
    pub breach: Option<Breach>,
}

/// The unique test files of a list of node IDs, sorted.
pub fn test_files(ids: &[String]) -> Vec<String> {
    ids.iter()
        .map(|id| id.split("::").next().unwrap_or(id).to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The deterministic environment every test run gets (nothing else is inherited).
fn test_environment(env: &PythonEnv, cmd: SandboxCommand) -> SandboxCommand {
    let bin = env.root.join("bin");
    cmd.env(
        "PATH",
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    )
    .env("VIRTUAL_ENV", env.root.display().to_string())
    .env("PYTHONHASHSEED", "0")
    .env("TZ", "UTC")
    .env("LANG", "C.UTF-8")
    .env("LC_ALL", "C.UTF-8")
    .env("PYTHONUTF8", "1")
    .env("PYTHONIOENCODING", "utf-8")
    .env("PYTHONDONTWRITEBYTECODE", "1")
    .env("PYTHONNOUSERSITE", "1")
    .env("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    .env("USER", "pdl")
    .env("LOGNAME", "pdl")
    .env("NO_COLOR", "1")
    .env("COLUMNS", "120")
}

/// 32 bytes from the kernel's random source.
fn random_key() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded; both descriptors are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs pytest once over the tree through the bootstrap and reads every
/// outcome from the channel.
pub fn run_pytest(
    runner: &dyn ProcessRunner,
    env: &PythonEnv,
    dirs: &RunDirs,
    mode: &PytestMode,
    facts: &TreeFacts,
    timeout: Duration,
    limits: &ResourceLimits,
) -> std::io::Result<PytestRun> {
    std::fs::create_dir_all(&dirs.boot)?;
    let boot = dirs.boot.join("pdl_boot.py");
    std::fs::write(&boot, BOOTSTRAP_SOURCE)?;
    let key = random_key()?;
    let tree = dirs.tree.display().to_string();
    let mut args: Vec<String> = vec![
        "-p".into(),
        "no:cacheprovider".into(),
        "--rootdir".into(),
        tree.clone(),
        "-q".into(),
        "--tb=short".into(),
        "--color=no".into(),
        "--continue-on-collection-errors".into(),
        // Records carry outcomes, never assertion messages: rewriting every
        // test module's asserts for richer messages is a third of a small
        // run's time, and changes no outcome (calibration checks it).
        "--assert=plain".into(),
    ];
    let (select, run_mode): (Vec<String>, &str) = match mode {
        PytestMode::Select(ids) => {
            args.push("--".into());
            args.extend(test_files(ids));
            (ids.clone(), "select")
        }
        PytestMode::CollectAll => {
            args.push("--collect-only".into());
            (Vec::new(), "collect")
        }
    };
    let config = json!({
        "key": hex::encode(key),
        "fd": OUTCOME_FD,
        "root": tree,
        "mode": run_mode,
        "select": &select,
        "compile": facts.compile,
        "test_files": facts.test_files,
        "conftests": facts.conftests.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "hidden": facts.hidden,
        "args": args,
    });
    let mut limits = limits.clone();
    limits.wall_time = timeout;
    std::fs::create_dir_all(&dirs.output)?;
    let mut cmd = SandboxCommand::new(&env.python, &dirs.tree, &dirs.output)
        .args([boot.display().to_string()])
        .limits(limits)
        .memory_scratch(TEST_SCRATCH_BYTES)
        .stdin(serde_json::to_vec(&config).expect("configs serialize"))
        .data(dirs.tree.clone())
        .data(dirs.boot.clone());
    cmd.noexec = true;
    cmd.output = dirs.output.join("pytest.log");
    for path in &env.readable_paths {
        cmd = cmd.readable(path.clone());
    }
    cmd = test_environment(env, cmd);
    // The run, for reproducing it by hand from a kept grading folder (the key
    // is not in it).
    std::fs::write(
        dirs.output.join("command.json"),
        serde_json::to_vec_pretty(&json!({
            "python": cmd.program,
            "bootstrap": boot,
            "cwd": cmd.cwd,
            "env": cmd.env,
            "node_ids": select,
            "pytest_args": config["args"],
        }))
        .expect("commands serialize"),
    )?;
    let (read_end, write_end) = pipe()?;
    let drain = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::fs::File::from(read_end)
            .take(MAX_CHANNEL_BYTES as u64 + 1)
            .read_to_end(&mut bytes);
        bytes
    });
    let report = runner.run_with(
        &cmd,
        vec![PassedFd {
            target: OUTCOME_FD,
            fd: write_end,
        }],
    );
    let bytes = drain.join().unwrap_or_default();
    let run_mode = match mode {
        PytestMode::Select(ids) => RunMode::Select(ids),
        PytestMode::CollectAll => RunMode::Collect,
    };
    let outcome = read_channel(&bytes, &key).and_then(|events| to_test_log(&events, run_mode));
    Ok(match outcome {
        Ok(log) => PytestRun {
            report,
            log,
            breach: None,
        },
        Err(breach) => PytestRun {
            report,
            log: TestLog::default(),
            breach: Some(breach),
        },
    })
}

/// pytest's own account of the run: the counts of its last summary line.
pub fn terminal_summary(tail: &str) -> Option<PytestCounts> {
    let line = tail.lines().rev().find(|l| !l.trim().is_empty())?;
    let line = line.trim().trim_matches('=').trim();
    let (counts, time) = line.rsplit_once(" in ")?;
    if !is_duration(time.trim_end()) {
        return None;
    }
    let mut out = PytestCounts::default();
    if counts == "no tests ran" {
        return Some(out);
    }
    for part in counts.split(", ") {
        let (n, word) = part.trim().split_once(' ')?;
        let n: u64 = n.parse().ok()?;
        match word {
            "passed" => out.passed = n,
            "failed" => out.failed = n,
            "error" | "errors" => out.errors = n,
            "skipped" => out.skipped = n,
            "xfailed" => out.xfailed = n,
            "xpassed" => out.xpassed = n,
            "deselected" | "warning" | "warnings" | "rerun" | "reruns" => {}
            _ => return None,
        }
    }
    Some(out)
}

/// pytest's run time: `0.12s`, and past a minute `61.23s (0:01:01)`.
fn is_duration(text: &str) -> bool {
    let (seconds, clock) = match text.split_once(" (") {
        Some((seconds, rest)) => (seconds, Some(rest.strip_suffix(')'))),
        None => (text, None),
    };
    let seconds_ok = seconds
        .strip_suffix('s')
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'));
    let clock_ok = match clock {
        None => true,
        Some(Some(hms)) => {
            let parts: Vec<&str> = hms.split(':').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        }
        Some(None) => false,
    };
    seconds_ok && clock_ok
}

/// The channels of a finished run that must agree: the signed protocol, the
/// process's exit status, and pytest's terminal summary (read from the output,
/// a descriptor of its own). Honest runs always agree; `Err` says how they do
/// not.
pub fn cross_check(run: &PytestRun) -> Result<(), Breach> {
    let log = &run.log;
    if !log.finished {
        return Ok(());
    }
    let status = log.exit_status.unwrap_or(-1);
    if let RunStatus::Exited { code } = run.report.status {
        if i64::from(code) != status {
            return Err(Breach(format!(
                "pytest reported exit status {status} but the process exited with {code}"
            )));
        }
    }
    let counts = log.pytest_counts();
    if status == 0 && (counts.failed > 0 || counts.errors > 0) {
        return Err(Breach(
            "pytest's exit status says every test passed, its reports say otherwise".into(),
        ));
    }
    if status == 1 && counts.failed + counts.errors == 0 {
        return Err(Breach(
            "pytest's exit status says tests failed, its reports say none did".into(),
        ));
    }
    if !matches!(status, 0 | 1) || log.collected.is_empty() {
        return Ok(());
    }
    match terminal_summary(&run.report.output_tail(4096)) {
        None => Err(Breach(
            "pytest's terminal summary is missing or is not the last line of its output".into(),
        )),
        Some(summary) => {
            if (summary.passed, summary.failed, summary.errors)
                == (counts.passed, counts.failed, counts.errors)
            {
                Ok(())
            } else {
                Err(Breach(format!(
                    "pytest's terminal summary ({} passed, {} failed, {} errors) disagrees with its reports ({} passed, {} failed, {} errors)",
                    summary.passed, summary.failed, summary.errors, counts.passed, counts.failed, counts.errors
                )))
            }
        }
    }
}

/// The folders of a grading rooted at `base`.
pub fn run_dirs(base: &Path) -> RunDirs {
    RunDirs {
        tree: base.join("graded"),
        boot: base.join("boot"),
        output: base.join("out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_summaries_are_read() {
        let s = terminal_summary("x\n1 failed, 5 passed, 2 deselected in 0.12s\n").unwrap();
        assert_eq!((s.passed, s.failed, s.errors), (5, 1, 0));
        let s = terminal_summary("==== 2 errors, 1 xfailed in 1.0s ====\n\n").unwrap();
        assert_eq!((s.errors, s.xfailed), (2, 1));
        assert_eq!(
            terminal_summary("no tests ran in 0.01s"),
            Some(PytestCounts::default())
        );
        assert!(terminal_summary("7 passed in 0.01s\nforged afterwards\n").is_none());
        // Past a minute pytest adds the clock time.
        let s = terminal_summary("==== 3 passed in 61.23s (0:01:01) ====\n").unwrap();
        assert_eq!(s.passed, 3);
        assert!(terminal_summary("3 passed in 61.23s (0:01)").is_none());
        assert!(terminal_summary("3 passed in 61.23s (soon)").is_none());
        assert!(terminal_summary("").is_none());
    }
}
