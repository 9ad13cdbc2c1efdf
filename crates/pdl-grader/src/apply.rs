//! Applying a submitted patch ([`apply_in_sandbox`]): `git apply` on a scratch
//! copy of the pristine tree, inside the sandbox, as the sandbox's user, with
//! its limits; exactly, then with `--recount`, then with one line of context
//! (`-C1`), all or nothing. Whatever git does there (it may follow the patch
//! wherever the patch leads it) stays in the scratch copy, which the grader then
//! reads without following anything ([`crate::changes::police_tree`]).
//!
//! git runs with no configuration but the harness's: no system or global
//! config, no attributes file, no hooks, no bare repository discovered by
//! accident, and no repository around the scratch tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pdl_sandbox::{ProcessRunner, ResourceLimits, RunStatus, SandboxCommand};

/// A patch that did not apply, or could not be tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Every attempt was refused; the message is git's own, from the last attempt.
    #[error("{0}")]
    Rejected(String),
    /// The apply step ran out of time or memory: the patch's doing.
    #[error("{0}")]
    Exhausted(String),
    /// The sandbox or git could not be started: the harness's fault.
    #[error("{0}")]
    Infrastructure(String),
}

/// Address space of each process of the apply step: far above what `git
/// apply` needs for the largest accepted patch on the largest accepted tree.
const APPLY_PROCESS_MEMORY: u64 = 2 << 30;

/// The script the sandbox runs: three attempts, stopping at the first that
/// applies. `$1` is the patch file.
const APPLY_SCRIPT: &str = r#"
set -u
git="git -c safe.bareRepository=explicit -c core.attributesFile=/dev/null -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.symlinks=true"
for extra in "" "--recount" "--recount -C1"; do
  if $git apply --whitespace=nowarn -p"$2" $extra "$1" 2>/tmp/apply.err; then
    exit 0
  fi
done
sed 's/^/git: /' /tmp/apply.err | head -c 4000 >&2
exit 1
"#;

/// A `git` command for the harness's own use on folders only the harness
/// writes (never on a tree a submission shaped): no repository around the
/// folder, no user or system configuration.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    let parent = dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    cmd.current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("GIT_CEILING_DIRECTORIES", parent)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("LC_ALL", "C")
        .args([
            "-c",
            "safe.bareRepository=explicit",
            "-c",
            "core.attributesFile=/dev/null",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ]);
    cmd
}

/// Applies `patch` (stripping `strip` leading components) to the tree at
/// `tree` inside the sandbox. `patch_file` is where the harness wrote the
/// patch: in a folder the sandbox may read but not write. `output` is a fresh
/// path in a folder the sandbox cannot reach.
pub fn apply_in_sandbox(
    runner: &dyn ProcessRunner,
    tree: &Path,
    patch_file: &Path,
    strip: u8,
    output: &Path,
    limits: &ResourceLimits,
) -> Result<(), ApplyError> {
    let mut limits = limits.clone();
    limits.wall_time = limits.wall_time.min(Duration::from_secs(60));
    // git and the shell around it are the harness's choice and do not fork at
    // will: per-process limits bound them (the process count through the run's
    // own user), so the run skips the cgroup and its start-up cost.
    limits.max_processes = Some(limits.max_processes.unwrap_or(16).min(16));
    limits.process_memory_bytes = Some(
        limits
            .process_memory_bytes
            .unwrap_or(APPLY_PROCESS_MEMORY)
            .min(APPLY_PROCESS_MEMORY),
    );
    limits.max_output_bytes = 64 << 10;
    let scratch = output.parent().unwrap_or(tree);
    let mut cmd = SandboxCommand::new("/bin/sh", tree, scratch)
        .args([
            "-c".to_string(),
            APPLY_SCRIPT.to_string(),
            "apply".to_string(),
            patch_file.display().to_string(),
            strip.to_string(),
        ])
        .writable(tree.to_path_buf())
        .readable(patch_file.to_path_buf())
        .memory_scratch(16 << 20)
        .limits(limits)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env(
            "GIT_CEILING_DIRECTORIES",
            tree.parent().unwrap_or(tree).display().to_string(),
        );
    cmd.noexec = true;
    cmd.cgroup = false;
    cmd.output = output.to_path_buf();
    let report = runner.run(&cmd);
    match &report.status {
        RunStatus::Exited { code: 0 } => Ok(()),
        RunStatus::Exited { .. } => {
            let text = report.output_tail(4000);
            let lines: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("git: "))
                .collect();
            if lines
                .iter()
                .any(|l| l.contains("git: not found") || l.contains("command not found"))
            {
                return Err(ApplyError::Infrastructure(
                    "git is not installed where the sandbox can run it; install git to grade patches".into(),
                ));
            }
            let shown = lines
                .iter()
                .map(|l| l.replace(&patch_file.display().to_string(), "<patch>"))
                .collect::<Vec<_>>()
                .join("\n");
            Err(ApplyError::Rejected(if shown.trim().is_empty() {
                "git apply refused the patch".into()
            } else {
                shown
            }))
        }
        RunStatus::TimedOut => Err(ApplyError::Exhausted(
            "applying the patch passed its time bound".into(),
        )),
        RunStatus::OutOfMemory => Err(ApplyError::Exhausted(
            "applying the patch ran out of memory".into(),
        )),
        RunStatus::Signaled { signal } => Err(ApplyError::Exhausted(format!(
            "applying the patch was stopped by signal {signal} (a file or memory bound)"
        ))),
        RunStatus::SpawnFailed { reason } | RunStatus::SandboxFailed { reason } => Err(
            ApplyError::Infrastructure(format!("cannot run git apply in the sandbox: {reason}")),
        ),
    }
}
