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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// How it ended.
    pub status: RunStatus,
    /// Wall time from spawn to the end of the process tree.
    pub duration: Duration,
    /// Bytes of output the command produced in all.
    pub output_bytes: u64,
    /// True when output beyond the bound was dropped.
    pub output_truncated: bool,
    /// The output file.
    pub output_path: PathBuf,
}

impl RunReport {
    /// The kept output (lossy UTF-8), or its last `max` bytes.
    pub fn output_tail(&self, max: usize) -> String {
        let bytes = std::fs::read(&self.output_path).unwrap_or_default();
        let start = bytes.len().saturating_sub(max);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}
