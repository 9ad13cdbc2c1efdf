//! Running pytest on a graded tree ([`run_pytest`]): the deterministic
//! environment, the outcome plugin, the sandboxed command.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pdl_sandbox::{ProcessRunner, ResourceLimits, RunReport, SandboxCommand};

use crate::env::PythonEnv;
use crate::outcome::TestLog;

/// The plugin's source, written next to each run.
pub const PLUGIN_SOURCE: &str = include_str!("plugin/pdl_outcomes.py");

/// What to run.
#[derive(Debug, Clone)]
pub enum PytestMode {
    /// Run these node IDs (and only these), from their files.
    Select(Vec<String>),
    /// Collect everything pytest discovers from the root, run nothing.
    CollectAll,
}

/// The test run's folders: the graded tree and a scratch folder beside it.
#[derive(Debug, Clone)]
pub struct RunDirs {
    /// The graded tree (pytest's root directory and working directory).
    pub tree: PathBuf,
    /// Scratch: plugin, selection, outcomes, output, private HOME and /tmp.
    pub scratch: PathBuf,
}

/// The result of one pytest run.
#[derive(Debug, Clone)]
pub struct PytestRun {
    /// How the process ended.
    pub report: RunReport,
    /// What the plugin reported.
    pub log: TestLog,
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
fn test_environment(env: &PythonEnv, dirs: &RunDirs, cmd: SandboxCommand) -> SandboxCommand {
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
    .env(
        "PYTHONPATH",
        dirs.scratch.join("plugin").display().to_string(),
    )
    .env(
        "PDL_OUTCOMES_FILE",
        dirs.scratch.join("outcomes.jsonl").display().to_string(),
    )
    .env("USER", "pdl")
    .env("LOGNAME", "pdl")
    .env("NO_COLOR", "1")
    .env("COLUMNS", "120")
}

/// Runs pytest once over the tree and reads back every outcome.
pub fn run_pytest(
    runner: &dyn ProcessRunner,
    env: &PythonEnv,
    dirs: &RunDirs,
    mode: &PytestMode,
    timeout: Duration,
    limits: &ResourceLimits,
) -> std::io::Result<PytestRun> {
    let plugin_dir = dirs.scratch.join("plugin");
    std::fs::create_dir_all(&plugin_dir)?;
    std::fs::write(plugin_dir.join("pdl_outcomes.py"), PLUGIN_SOURCE)?;
    let outcomes = dirs.scratch.join("outcomes.jsonl");
    std::fs::write(&outcomes, b"")?;
    let mut args: Vec<String> = vec![
        "-m".into(),
        "pytest".into(),
        "-p".into(),
        "pdl_outcomes".into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "--rootdir".into(),
        dirs.tree.display().to_string(),
        "-q".into(),
        "--tb=short".into(),
        "--color=no".into(),
        "--continue-on-collection-errors".into(),
    ];
    let mut cmd = SandboxCommand::new(&env.python, &dirs.tree, &dirs.scratch);
    match mode {
        PytestMode::Select(ids) => {
            let select = dirs.scratch.join("select.txt");
            std::fs::write(&select, ids.join("\n") + "\n")?;
            cmd = cmd
                .env("PDL_SELECT_FILE", select.display().to_string())
                .env("PDL_COMPILE_CHECK", "1");
            args.push("--".into());
            args.extend(test_files(ids));
        }
        PytestMode::CollectAll => {
            args.push("--collect-only".into());
        }
    }
    let mut limits = limits.clone();
    limits.wall_time = timeout;
    cmd = test_environment(env, dirs, cmd.args(args).limits(limits))
        .writable(dirs.tree.clone())
        .writable(dirs.scratch.clone());
    for path in &env.readable_paths {
        cmd = cmd.readable(path.clone());
    }
    // The exact command, for reproducing a grading by hand from a kept workdir.
    std::fs::write(
        dirs.scratch.join("command.json"),
        serde_json::to_vec_pretty(&serde_json::json!({
            "program": cmd.program,
            "args": cmd.args,
            "cwd": cmd.cwd,
            "env": cmd.env,
        }))
        .expect("commands serialize"),
    )?;
    let report = runner.run(&cmd);
    let text = std::fs::read_to_string(&outcomes).unwrap_or_default();
    Ok(PytestRun {
        report,
        log: TestLog::parse(&text),
    })
}

/// The scratch folder layout for a grading rooted at `base`.
pub fn run_dirs(base: &Path) -> RunDirs {
    RunDirs {
        tree: base.join("tree"),
        scratch: base.join("run"),
    }
}
