//! How a sandboxed run ended ([`RunStatus`], [`RunReport`]).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a sandboxed run ended. Closed: every run ends in exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunStatus {
    /// The command exited by itself.
    Exited {
        /// Its exit code.
        code: i32,
    },
    /// The command was ended by a signal it was not sent by the harness.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The wall-clock bound passed; the whole process tree was killed.
    TimedOut,
    /// The command ran out of memory.
    OutOfMemory,
    /// The command could not be started (missing program, bad working directory).
    SpawnFailed {
        /// Why.
        reason: String,
    },
    /// The sandbox itself could not be set up (namespaces unavailable, a mount
    /// failed). Never the submission's fault.
    SandboxFailed {
        /// Why.
        reason: String,
    },
}

impl RunStatus {
    /// True when the harness, not the command, is at fault.
    pub fn is_infrastructure_failure(&self) -> bool {
        matches!(self, RunStatus::SandboxFailed { .. })
    }

    /// A short name for records and tables.
    pub fn name(&self) -> &'static str {
        match self {
            RunStatus::Exited { .. } => "exited",
            RunStatus::Signaled { .. } => "signaled",
            RunStatus::TimedOut => "timed_out",
            RunStatus::OutOfMemory => "oom",
            RunStatus::SpawnFailed { .. } => "spawn_failed",
            RunStatus::SandboxFailed { .. } => "sandbox_failed",
        }
    }
}

/// Everything known about one finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// How it ended.
    pub status: RunStatus,
    /// Wall time from spawn to the end of the process tree.
    pub duration: Duration,
    /// Bytes of output the command produced in all.
    pub output_bytes: u64,
    /// True when output beyond the bound was dropped from the output file.
    pub output_truncated: bool,
    /// The output file (its first `max_output_bytes`).
    pub output_path: PathBuf,
    /// The last [`OUTPUT_TAIL_BYTES`] of the output, whatever its length.
    #[serde(default)]
    pub tail: Vec<u8>,
    /// Processes of the run the kernel killed for want of memory.
    #[serde(default)]
    pub oom_kills: u64,
    /// What was actually enforced.
    #[serde(default)]
    pub enforced: Enforcement,
}

/// How many bytes of the end of a run's output are kept in memory.
pub const OUTPUT_TAIL_BYTES: usize = 64 << 10;

impl RunReport {
    /// A report for a run that never started.
    pub fn not_started(status: RunStatus, output: &std::path::Path, enforced: Enforcement) -> Self {
        RunReport {
            status,
            duration: Duration::default(),
            output_bytes: 0,
            output_truncated: false,
            output_path: output.to_path_buf(),
            tail: Vec::new(),
            oom_kills: 0,
            enforced,
        }
    }

    /// The last `max` bytes of the output (lossy UTF-8).
    pub fn output_tail(&self, max: usize) -> String {
        let start = self.tail.len().saturating_sub(max);
        String::from_utf8_lossy(&self.tail[start..]).into_owned()
    }
}

/// Where a limit applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// The whole run together, through a cgroup v2.
    CgroupV2,
    /// The whole run together, through cgroup v1 controllers.
    CgroupV1,
    /// Each process on its own (an rlimit).
    PerProcess,
    /// Not enforced.
    #[default]
    None,
}

/// The network a run could reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkScope {
    /// Its own loopback, nothing else.
    #[default]
    LoopbackOnly,
    /// Its own loopback and one route to the model gateway.
    Gateway,
    /// The host's network (no isolation).
    Host,
}

/// What a runner actually enforced on a run: recorded in provenance, so that a
/// result never claims an isolation that was not there.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Enforcement {
    /// `namespaces` or `none`.
    pub sandbox: String,
    /// The network it could reach.
    pub network: NetworkScope,
    /// The memory bound and where it applied.
    pub memory_bytes: Option<u64>,
    /// Where the memory bound applied.
    pub memory_scope: LimitScope,
    /// The per-process address-space bound.
    pub process_memory_bytes: Option<u64>,
    /// The process-count bound.
    pub max_processes: Option<u64>,
    /// Where the process-count bound applied.
    pub processes_scope: LimitScope,
    /// Whether the run's processes together got one run's share of the CPU
    /// (a CPU cgroup of their own), rather than one share per process.
    #[serde(default)]
    pub cpu_shared: bool,
    /// The largest file a process could write.
    pub max_file_bytes: Option<u64>,
    /// The size of each in-memory scratch mount, when the scratch was in memory.
    pub scratch_bytes: Option<u64>,
    /// Whether written files could be executed.
    pub noexec: bool,
    /// The wall-clock bound, in seconds.
    pub wall_time_s: f64,
    /// Seconds between SIGTERM and SIGKILL when the bound passes.
    #[serde(default)]
    pub kill_grace_s: f64,
    /// Output kept in the output file.
    pub max_output_bytes: u64,
    /// The host user the command ran as, when the runner chose one.
    pub host_uid: Option<u32>,
    /// Host paths hidden from the run (the harness's own executable and the
    /// other copies of it installed where a run could see them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masked: Vec<PathBuf>,
}
