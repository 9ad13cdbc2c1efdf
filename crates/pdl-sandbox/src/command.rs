//! What to run and under which rules ([`SandboxCommand`], [`ResourceLimits`],
//! [`NetworkPolicy`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits on one sandboxed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Wall-clock bound; the whole process tree is ended when it passes.
    pub wall_time: Duration,
    /// Time between SIGTERM and SIGKILL when the wall-clock bound is hit.
    pub kill_grace: Duration,
    /// Address-space bound per process, in bytes.
    pub memory_bytes: Option<u64>,
    /// Bound on the number of processes.
    pub max_processes: Option<u64>,
    /// Largest file a process may write, in bytes.
    pub max_file_bytes: Option<u64>,
    /// Bytes of combined stdout and stderr kept; the rest is dropped behind a marker.
    pub max_output_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            wall_time: Duration::from_secs(120),
            kill_grace: Duration::from_secs(2),
            memory_bytes: Some(4 << 30),
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
    /// A host folder to serve as the command's private HOME.
    pub home: PathBuf,
    /// A host folder to serve as the command's private /tmp.
    pub tmp: PathBuf,
    /// Network access.
    pub network: NetworkPolicy,
    /// Limits.
    pub limits: ResourceLimits,
    /// Where combined stdout and stderr go (bounded by `limits.max_output_bytes`).
    pub output: PathBuf,
    /// Bytes to feed on standard input (empty: standard input is `/dev/null`).
    #[serde(default)]
    pub stdin: Vec<u8>,
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
            home: scratch.join("home"),
            tmp: scratch.join("tmp"),
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
}
