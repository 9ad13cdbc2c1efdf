//! What to run and under which rules ([`SandboxCommand`], [`ResourceLimits`],
//! [`NetworkPolicy`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits on one sandboxed run.
///
/// Where the machine allows it (cgroup v2 with delegated `memory` and `pids`
/// controllers, or cgroup v1 `memory` and `pids` hierarchies writable by the
/// harness, as for root), `memory_bytes` and `max_processes` bound the run's
/// whole process tree together; otherwise only per-process limits apply. What
/// was enforced is in [`crate::RunReport::enforced`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Wall-clock bound; the whole process tree is ended when it passes.
    pub wall_time: Duration,
    /// Time between SIGTERM and SIGKILL when the wall-clock bound is hit.
    pub kill_grace: Duration,
    /// Memory of the whole run (every process together, page cache and
    /// in-memory scratch included), in bytes.
    pub memory_bytes: Option<u64>,
    /// Address-space bound of each process, in bytes (`RLIMIT_AS`).
    #[serde(default)]
    pub process_memory_bytes: Option<u64>,
    /// Bound on the number of processes of the run.
    pub max_processes: Option<u64>,
    /// Largest file a process may write, in bytes.
    pub max_file_bytes: Option<u64>,
    /// Bytes of combined stdout and stderr kept in the output file; the rest is
    /// dropped behind a marker (the last [`crate::OUTPUT_TAIL_BYTES`] are always
    /// kept in the report).
    pub max_output_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            wall_time: Duration::from_secs(120),
            kill_grace: Duration::from_secs(2),
            memory_bytes: Some(2 << 30),
            process_memory_bytes: Some(4 << 30),
            max_processes: Some(512),
            max_file_bytes: Some(256 << 20),
            max_output_bytes: 4 << 20,
        }
    }
}

/// What the sandboxed process may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkPolicy {
    /// Loopback only, private to the sandbox.
    LoopbackOnly,
    /// Loopback only, plus one forwarded route: connections to
    /// `127.0.0.1:<port>` inside the sandbox reach the host's Unix socket.
    Gateway {
        /// Port inside the sandbox.
        port: u16,
        /// The host's Unix socket the route leads to.
        socket: PathBuf,
    },
}

/// One command to run in the sandbox.
///
/// The environment is exactly [`SandboxCommand::env`]: nothing of the harness's
/// own environment is inherited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxCommand {
    /// Program to execute (a path, or a name looked up in the command's `PATH`).
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory (must be under a writable or read-only path).
    pub cwd: PathBuf,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Paths the command may write (bound read-write at the same place).
    pub writable: Vec<PathBuf>,
    /// Extra host paths the command may read (bound read-only at the same place),
    /// beyond the system directories.
    pub readable: Vec<PathBuf>,
    /// Host paths the command may read as data only: bound read-only and
    /// `noexec`, so no program or shared library in them can be executed or
    /// loaded (a submission's native extension module, say), even where a
    /// wider read-only bind already shows them.
    #[serde(default)]
    pub data: Vec<PathBuf>,
    /// A host folder to serve as the command's private HOME (unused when
    /// `memory_scratch` is set).
    pub home: PathBuf,
    /// A host folder to serve as the command's private /tmp (unused when
    /// `memory_scratch` is set).
    pub tmp: PathBuf,
    /// In-memory scratch instead of host folders: `/tmp`, `/var/tmp` and HOME
    /// (`/home/sandbox`) are fresh tmpfs mounts of at most this many bytes each,
    /// gone with the run. Nothing the command writes there reaches the host's
    /// disk.
    #[serde(default)]
    pub memory_scratch: Option<u64>,
    /// Mount the writable paths and the scratch `noexec`: no program or shared
    /// library the command writes can be executed or loaded.
    #[serde(default)]
    pub noexec: bool,
    /// Network access.
    pub network: NetworkPolicy,
    /// Limits.
    pub limits: ResourceLimits,
    /// Where combined stdout and stderr go (bounded by `limits.max_output_bytes`).
    /// The file is created new (never through a link) and must lie in a folder
    /// the command cannot write.
    pub output: PathBuf,
    /// Bytes to feed on standard input (empty: standard input is `/dev/null`).
    #[serde(default)]
    pub stdin: Vec<u8>,
    /// Bound the run's processes together (memory, process count) through a
    /// cgroup where the machine has one. Off, only the per-process limits
    /// apply: meant for harness-chosen programs that do not fork at will
    /// (`git apply`), where joining a cgroup (a kernel grace period, about
    /// 10 ms on cgroup v1) would cost more than the program.
    #[serde(default = "default_true")]
    pub cgroup: bool,
}

fn default_true() -> bool {
    true
}

impl SandboxCommand {
    /// A command with default limits, loopback-only networking and an empty
    /// environment. `scratch` holds the private HOME, /tmp and the output file.
    pub fn new(program: impl Into<PathBuf>, cwd: impl Into<PathBuf>, scratch: &Path) -> Self {
        SandboxCommand {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: BTreeMap::new(),
            writable: Vec::new(),
            readable: Vec::new(),
            data: Vec::new(),
            home: scratch.join("home"),
            tmp: scratch.join("tmp"),
            memory_scratch: None,
            noexec: false,
            cgroup: true,
            network: NetworkPolicy::LoopbackOnly,
            limits: ResourceLimits::default(),
            output: scratch.join("output.log"),
            stdin: Vec::new(),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Lets the command write `path`.
    pub fn writable(mut self, path: impl Into<PathBuf>) -> Self {
        self.writable.push(path.into());
        self
    }

    /// Lets the command read `path`.
    pub fn readable(mut self, path: impl Into<PathBuf>) -> Self {
        self.readable.push(path.into());
        self
    }

    /// Lets the command read `path` as data, never as code.
    pub fn data(mut self, path: impl Into<PathBuf>) -> Self {
        self.data.push(path.into());
        self
    }

    /// Sets the wall-clock bound.
    pub fn wall_time(mut self, limit: Duration) -> Self {
        self.limits.wall_time = limit;
        self
    }

    /// Sets every limit.
    pub fn limits(mut self, limits: ResourceLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the network policy.
    pub fn network(mut self, policy: NetworkPolicy) -> Self {
        self.network = policy;
        self
    }

    /// Sets standard input.
    pub fn stdin(mut self, bytes: Vec<u8>) -> Self {
        self.stdin = bytes;
        self
    }

    /// Gives the command in-memory scratch of at most `bytes` per mount.
    pub fn memory_scratch(mut self, bytes: u64) -> Self {
        self.memory_scratch = Some(bytes);
        self
    }

    /// The HOME the command sees.
    pub fn home_inside(&self) -> PathBuf {
        if self.memory_scratch.is_some() {
            PathBuf::from(PRIVATE_HOME)
        } else {
            self.home.clone()
        }
    }
}

/// HOME inside the sandbox when the scratch is in memory.
pub const PRIVATE_HOME: &str = "/home/sandbox";

/// A descriptor the command inherits at a given number.
#[derive(Debug)]
pub struct PassedFd {
    /// The number the command sees it at (3 and 4 are the sandbox's own).
    pub target: i32,
    /// The descriptor; the runner closes its copy once the command started.
    pub fd: std::os::fd::OwnedFd,
}
