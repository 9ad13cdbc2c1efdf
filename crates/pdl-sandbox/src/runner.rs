//! The process-runner interface ([`ProcessRunner`]) every piece of task code is
//! run through, and the plain runner ([`PlainRunner`]): a child process in its own
//! process group, with limits, bounded output and the wall-clock bound enforced on
//! the whole group, but no isolation.

use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::command::SandboxCommand;
use crate::outcome::{RunReport, RunStatus};
use crate::supervise::run_supervised;

/// Which isolation a runner gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// Linux namespaces: read-only root, private /tmp and HOME, no network.
    Namespaces,
    /// No isolation: a plain child process (only when asked for).
    None,
}

impl SandboxKind {
    /// The name used on the command line and in provenance.
    pub fn name(self) -> &'static str {
        match self {
            SandboxKind::Namespaces => "namespaces",
            SandboxKind::None => "none",
        }
    }
}

/// Runs commands. Implementations never print; everything is in the report.
pub trait ProcessRunner: Send + Sync {
    /// Runs one command to completion (or to its wall-clock bound).
    fn run(&self, command: &SandboxCommand) -> RunReport;
    /// The isolation this runner gives.
    fn kind(&self) -> SandboxKind;
}

/// Creates the private HOME and /tmp folders of a command.
pub(crate) fn prepare_scratch(command: &SandboxCommand) -> std::io::Result<()> {
    std::fs::create_dir_all(&command.home)?;
    std::fs::create_dir_all(&command.tmp)?;
    if let Some(parent) = command.output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    Ok(())
}

/// A runner without isolation.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainRunner;

impl ProcessRunner for PlainRunner {
    fn run(&self, command: &SandboxCommand) -> RunReport {
        let failed = |status: RunStatus| RunReport {
            status,
            duration: Default::default(),
            output_bytes: 0,
            output_truncated: false,
            output_path: command.output.clone(),
        };
        if let Err(e) = prepare_scratch(command) {
            return failed(RunStatus::SandboxFailed {
                reason: format!("cannot create scratch folders: {e}"),
            });
        }
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .current_dir(&command.cwd)
            .env_clear()
            .envs(&command.env)
            .env("HOME", &command.home)
            .env("TMPDIR", &command.tmp);
        match run_supervised(cmd, &command.limits, &command.output, &command.stdin, true) {
            Err(e) => failed(RunStatus::SpawnFailed {
                reason: format!("{}: {e}", command.program.display()),
            }),
            Ok(s) => {
                let status = if s.timed_out {
                    RunStatus::TimedOut
                } else {
                    match s.code_or_signal() {
                        (Some(code), _) => RunStatus::Exited { code },
                        (_, Some(signal)) => RunStatus::Signaled { signal },
                        _ => RunStatus::Signaled { signal: 0 },
                    }
                };
                RunReport {
                    status,
                    duration: s.duration,
                    output_bytes: s.output.bytes,
                    output_truncated: s.output.truncated,
                    output_path: command.output.clone(),
                }
            }
        }
    }

    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }
}
