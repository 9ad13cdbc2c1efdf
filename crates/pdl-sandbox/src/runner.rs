//! The process-runner interface ([`ProcessRunner`]) every piece of task code is
//! run through, and the plain runner ([`PlainRunner`]): a child process in its own
//! process group, with limits, bounded output and the wall-clock bound enforced on
//! the whole group, but no isolation.

use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::cgroup::RunCgroup;
use crate::command::{PassedFd, SandboxCommand};
use crate::outcome::{Enforcement, LimitScope, NetworkScope, RunReport, RunStatus};
use crate::supervise::{create_output, run_supervised, ChildSetup};

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
    /// Runs one command to completion (or to its wall-clock bound), handing it
    /// the given descriptors at their numbers.
    fn run_with(&self, command: &SandboxCommand, fds: Vec<PassedFd>) -> RunReport;
    /// Runs one command to completion (or to its wall-clock bound).
    fn run(&self, command: &SandboxCommand) -> RunReport {
        self.run_with(command, Vec::new())
    }
    /// The isolation this runner gives.
    fn kind(&self) -> SandboxKind;
}

/// Creates the private HOME and /tmp folders of a command (when they are host
/// folders).
pub(crate) fn prepare_scratch(command: &SandboxCommand) -> std::io::Result<()> {
    if command.memory_scratch.is_none() {
        std::fs::create_dir_all(&command.home)?;
        std::fs::create_dir_all(&command.tmp)?;
    }
    if let Some(parent) = command.output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    Ok(())
}

/// A runner without isolation. It keeps the limits (with a cgroup where the
/// machine offers one) and nothing else: no namespaces, the host's network,
/// the host's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainRunner;

impl ProcessRunner for PlainRunner {
    fn run_with(&self, command: &SandboxCommand, fds: Vec<PassedFd>) -> RunReport {
        let limits = &command.limits;
        let cgroup = if command.cgroup {
            RunCgroup::create(limits.memory_bytes, limits.max_processes)
        } else {
            Ok(None)
        };
        let scope = match &cgroup {
            Ok(Some(c)) => c.scope(),
            _ => LimitScope::None,
        };
        let enforced = Enforcement {
            sandbox: SandboxKind::None.name().into(),
            network: NetworkScope::Host,
            memory_bytes: limits.memory_bytes.filter(|_| scope != LimitScope::None),
            memory_scope: scope,
            process_memory_bytes: limits.process_memory_bytes,
            max_processes: limits.max_processes,
            processes_scope: if scope != LimitScope::None {
                scope
            } else {
                LimitScope::None
            },
            cpu_shared: matches!(&cgroup, Ok(Some(c)) if c.shares_cpu()),
            max_file_bytes: limits.max_file_bytes,
            scratch_bytes: None,
            noexec: false,
            wall_time_s: limits.wall_time.as_secs_f64(),
            kill_grace_s: limits.kill_grace.as_secs_f64(),
            max_output_bytes: limits.max_output_bytes,
            host_uid: None,
            masked: Vec::new(),
        };
        let failed =
            |status: RunStatus| RunReport::not_started(status, &command.output, enforced.clone());
        let cgroup = match cgroup {
            Ok(c) => c,
            Err(e) => {
                return failed(RunStatus::SandboxFailed {
                    reason: format!("cannot create the run's cgroup: {e}"),
                })
            }
        };
        if let Err(e) = prepare_scratch(command) {
            return failed(RunStatus::SandboxFailed {
                reason: format!("cannot create scratch folders: {e}"),
            });
        }
        let output = match create_output(&command.output) {
            Ok(f) => f,
            Err(e) => {
                return failed(RunStatus::SandboxFailed {
                    reason: format!("cannot create the output file: {e}"),
                })
            }
        };
        let cgroup_procs = match cgroup.as_ref().map(RunCgroup::procs_files).transpose() {
            Ok(p) => p.unwrap_or_default(),
            Err(e) => {
                return failed(RunStatus::SandboxFailed {
                    reason: format!("cannot join the run's cgroup: {e}"),
                })
            }
        };
        let home = command.home_inside();
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .current_dir(&command.cwd)
            .env_clear()
            .envs(&command.env)
            .env("HOME", &home)
            .env("TMPDIR", &command.tmp);
        let setup = ChildSetup {
            fds,
            cgroup_procs,
            rlimits: Some(limits.clone()),
            // The process limit counts every process of the user: only a
            // cgroup can bound one run's processes without touching the rest.
            process_rlimit: false,
            oom_protected: false,
        };
        let supervised = run_supervised(cmd, limits, output, &command.stdin, setup);
        let oom_kills = cgroup.as_ref().map_or(0, RunCgroup::oom_kills);
        drop(cgroup);
        match supervised {
            Err(e) => failed(RunStatus::SpawnFailed {
                reason: format!("{}: {e}", command.program.display()),
            }),
            Ok(s) => {
                let status = if s.timed_out {
                    RunStatus::TimedOut
                } else {
                    match s.code_or_signal() {
                        (Some(code), _) => RunStatus::Exited { code },
                        (_, Some(libc::SIGKILL)) if oom_kills > 0 => RunStatus::OutOfMemory,
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
                    tail: s.output.tail,
                    oom_kills,
                    enforced,
                }
            }
        }
    }

    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }
}
