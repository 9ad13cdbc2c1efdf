//! The namespace sandbox ([`NamespaceRunner`]): Linux user, mount, pid, network,
//! IPC and UTS namespaces, without Docker or setuid helpers.
//!
//! # How a run is set up
//!
//! The harness starts a helper process (the `pdl-swe` binary itself, in its
//! hidden `__sandbox-init` mode) in its own process group and, where the machine
//! offers cgroups, in a cgroup of its own that bounds the memory and the number
//! of processes of everything the run starts. The helper reads its [`InitSpec`]
//! from a pipe (no file names it), `clone`s the sandbox's first process into new
//! namespaces and writes its user and group maps from outside. That first
//! process (pid 1 of the new pid namespace, see [`init`]):
//!
//! 1. builds a new root on a tmpfs: the system folders (`/usr`, `/bin`, `/lib*`,
//!    `/etc`, `/opt`) and the command's readable paths bound read-only, its
//!    writable paths bound read-write, a private `/tmp`, `/var/tmp` and HOME
//!    (host folders, or in-memory tmpfs mounts of a bounded size), a minimal
//!    `/dev`, a `/proc` of the new pid namespace, and the harness's own
//!    executable hidden behind an empty file; nothing else of the host is
//!    visible;
//! 2. pivots into it and makes the skeleton read-only;
//! 3. brings up loopback in the empty network namespace and, for agent
//!    episodes, starts a forwarder from `127.0.0.1:<port>` to the model
//!    gateway's Unix socket;
//! 4. forks the command, which drops every privilege (a non-zero uid, no
//!    capabilities, `no_new_privs`, resource limits) and execs;
//! 5. reaps children until the command exits, reports its status on a private
//!    pipe, and exits, which kills every process left in the namespace.
//!
//! When the harness runs as root, each run's command runs as a host uid of its
//! own (from a range no account uses), so root-only host files stay unreadable,
//! concurrent runs cannot touch each other's processes or files, and the
//! process limit counts that run alone. Otherwise the command keeps the
//! invoking user's uid behind a nested user namespace that removes
//! capabilities.

mod init;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use crate::cgroup::RunCgroup;
use crate::command::{NetworkPolicy, PassedFd, SandboxCommand};
use crate::outcome::{Enforcement, LimitScope, NetworkScope, RunReport, RunStatus};
use crate::runner::{prepare_scratch, ProcessRunner, SandboxKind};
use crate::supervise::{create_output, pipe, run_supervised, ChildSetup};

pub use init::init_main;

/// The uid and gid the command runs as inside the sandbox.
const SANDBOX_ID: u32 = 1000;
/// The first host uid of the range runs get when the harness is root.
const HOST_ID_BASE: u32 = 200_000;
/// How many host uids the range holds.
const HOST_ID_SPAN: u32 = 1 << 20;
/// The descriptor the helper reports status on.
const STATUS_FD: i32 = 3;
/// The descriptor the helper reads its spec from.
const SPEC_FD: i32 = 4;
/// The lowest number a caller may hand a descriptor over at.
pub const FIRST_PASSED_FD: i32 = 5;

/// What the helper needs to know, written to a pipe for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct InitSpec {
    command: SandboxCommand,
    /// An empty host folder the new root is built on.
    root: PathBuf,
    host_uid: u32,
    host_gid: u32,
    /// The host uid and gid the command runs as when the harness is root.
    run_id: u32,
    /// Host paths hidden behind an empty file inside the sandbox.
    mask: Vec<PathBuf>,
}

/// A runner that isolates with Linux namespaces.
#[derive(Debug, Clone)]
pub struct NamespaceRunner {
    helper: PathBuf,
    helper_args: Vec<String>,
    mask: Vec<PathBuf>,
}

fn io_reason(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

impl NamespaceRunner {
    /// A runner whose helper is `helper` run with `helper_args`. The helper must
    /// call [`init_main`] first thing. The helper's own executable is hidden
    /// from every run (it may embed data the runs must not read).
    pub fn new(helper: PathBuf, helper_args: Vec<String>) -> Self {
        let mut mask = Vec::new();
        if let Ok(real) = std::fs::canonicalize(&helper) {
            mask.push(real);
        }
        NamespaceRunner {
            helper,
            helper_args,
            mask,
        }
    }

    /// Also hides this host file (the file a link leads to) from every run.
    pub fn mask(mut self, path: PathBuf) -> Self {
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        if !self.mask.contains(&path) {
            self.mask.push(path);
        }
        self
    }

    /// Also hides from every run each other copy of the helper's executable
    /// in `dirs`, and every file there named like one of `names` (see
    /// [`installed_copies`]).
    pub fn mask_copies(self, dirs: &[PathBuf], names: &[&str]) -> Self {
        installed_copies(&self.helper, dirs, names)
            .into_iter()
            .fold(self, NamespaceRunner::mask)
    }

    /// Checks that namespaces can be created here by running `true` inside one.
    pub fn probe(&self) -> Result<(), String> {
        let scratch = tempfile::Builder::new()
            .prefix("pdl-sandbox-probe-")
            .tempdir()
            .map_err(|e| format!("cannot create a folder for the probe: {e}"))?;
        let cmd = SandboxCommand::new("/bin/true", "/", scratch.path())
            .memory_scratch(1 << 20)
            .wall_time(std::time::Duration::from_secs(20));
        let report = self.run(&cmd);
        match &report.status {
            RunStatus::Exited { code: 0 } => Ok(()),
            RunStatus::SandboxFailed { reason } => Err(reason.clone()),
            other => Err(format!(
                "a probe run ended as {} ({})",
                other.name(),
                report.output_tail(500).trim()
            )),
        }
    }
}

/// The other copies of the executable `exe` found in `dirs` (each folder
/// itself, not below it), by their real paths: every regular file named like
/// `exe` or like one of `names` (the names an install gives the program, which
/// hold it whatever name this copy runs under), every other hard link to it,
/// and every file with its exact content under another name. An install puts
/// the harness in such a folder (a Python environment's `bin`,
/// `/usr/local/bin`, `~/.cargo/bin`), and a sandbox may see that folder (a
/// system folder every run binds, or the interpreter's) while the harness runs
/// from another copy, which embeds the same data.
pub fn installed_copies(exe: &Path, dirs: &[PathBuf], names: &[&str]) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = std::fs::canonicalize(exe) else {
        return Vec::new();
    };
    let (Some(name), Ok(meta)) = (real.file_name(), std::fs::metadata(&real)) else {
        return Vec::new();
    };
    let same_file = |m: &std::fs::Metadata| m.dev() == meta.dev() && m.ino() == meta.ino();
    let mut found: Vec<PathBuf> = Vec::new();
    let mut keep = |path: PathBuf| {
        if let Ok(path) = std::fs::canonicalize(path) {
            if path != real && path.is_file() && !found.contains(&path) {
                found.push(path);
            }
        }
    };
    for dir in dirs {
        keep(dir.join(name));
        for other in names {
            keep(dir.join(other));
        }
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let Ok(m) = entry.metadata() else { continue };
            // A renamed copy: the same length, then the same bytes.
            if m.is_file()
                && (same_file(&m) || (m.len() == meta.len() && same_content(&entry.path(), &real)))
            {
                keep(entry.path());
            }
        }
    }
    found
}

/// Whether two files hold the same bytes (read in blocks; false on any error).
fn same_content(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let (Ok(na), Ok(nb)) = (fa.read(&mut ba), fb.read(&mut bb)) else {
            return false;
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Hands `path` (recursively) to `uid`/`gid`. Symlinks are changed, not followed.
fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// A host uid for one run, distinct from every other run of this harness that
/// could be alive at the same time, and from other harness processes' runs
/// unless their process ids collide in the low bits.
fn run_id() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let process = std::process::id() % 4096;
    HOST_ID_BASE + (process * 256 + n % 256) % HOST_ID_SPAN
}

impl ProcessRunner for NamespaceRunner {
    fn run_with(&self, command: &SandboxCommand, fds: Vec<PassedFd>) -> RunReport {
        let limits = &command.limits;
        // SAFETY: getuid/getgid/geteuid cannot fail.
        let (host_uid, host_gid, euid) =
            unsafe { (libc::getuid(), libc::getgid(), libc::geteuid()) };
        let root_harness = euid == 0;
        let id = run_id();
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
            sandbox: SandboxKind::Namespaces.name().into(),
            network: match command.network {
                NetworkPolicy::LoopbackOnly => NetworkScope::LoopbackOnly,
                NetworkPolicy::Gateway { .. } => NetworkScope::Gateway,
            },
            memory_bytes: if scope != LimitScope::None {
                limits.memory_bytes
            } else {
                None
            },
            memory_scope: scope,
            process_memory_bytes: limits.process_memory_bytes,
            max_processes: if scope != LimitScope::None || root_harness {
                limits.max_processes
            } else {
                None
            },
            processes_scope: if scope != LimitScope::None {
                scope
            } else if root_harness && limits.max_processes.is_some() {
                LimitScope::PerProcess
            } else {
                LimitScope::None
            },
            cpu_shared: matches!(&cgroup, Ok(Some(c)) if c.shares_cpu()),
            max_file_bytes: limits.max_file_bytes,
            scratch_bytes: command.memory_scratch,
            noexec: command.noexec,
            wall_time_s: limits.wall_time.as_secs_f64(),
            kill_grace_s: limits.kill_grace.as_secs_f64(),
            max_output_bytes: limits.max_output_bytes,
            host_uid: Some(if root_harness { id } else { host_uid }),
            masked: self.mask.clone(),
        };
        let failed = |reason: String| {
            RunReport::not_started(
                RunStatus::SandboxFailed { reason },
                &command.output,
                enforced.clone(),
            )
        };
        if let Some(bad) = fds.iter().find(|p| p.target < FIRST_PASSED_FD) {
            return failed(format!(
                "descriptor {} is the sandbox's own; hand descriptors over at {FIRST_PASSED_FD} or above",
                bad.target
            ));
        }
        let cgroup = match cgroup {
            Ok(c) => c,
            Err(e) => return failed(io_reason("cannot create the run's cgroup", e)),
        };
        if let Err(e) = prepare_scratch(command) {
            return failed(io_reason("cannot create scratch folders", e));
        }
        let output = match create_output(&command.output) {
            Ok(f) => f,
            Err(e) => return failed(io_reason("cannot create the output file", e)),
        };
        let scratch = command
            .output
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let root = match tempfile::Builder::new()
            .prefix(".sandbox-root-")
            .tempdir_in(&scratch)
        {
            Ok(d) => d,
            Err(e) => return failed(io_reason("cannot create the sandbox root", e)),
        };
        if root_harness {
            let mut owned: Vec<&PathBuf> = command.writable.iter().collect();
            if command.memory_scratch.is_none() {
                owned.push(&command.home);
                owned.push(&command.tmp);
            }
            for path in owned {
                if let Err(e) = chown_tree(path, id, id) {
                    return failed(io_reason(
                        &format!("cannot hand {} to the sandbox user", path.display()),
                        e,
                    ));
                }
            }
        }
        let spec = InitSpec {
            command: command.clone(),
            root: root.path().to_path_buf(),
            host_uid,
            host_gid,
            run_id: id,
            mask: self.mask.clone(),
        };
        let (spec_read, spec_write) = match pipe() {
            Ok(p) => p,
            Err(e) => return failed(io_reason("cannot create the spec pipe", e)),
        };
        let (status_read, status_write) = match pipe() {
            Ok(p) => p,
            Err(e) => return failed(io_reason("cannot create the status pipe", e)),
        };
        let spec_bytes = serde_json::to_vec(&spec).expect("specs serialize");
        let spec_thread = std::thread::spawn(move || {
            let _ = File::from(spec_write).write_all(&spec_bytes);
        });
        let status_thread = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = File::from(status_read)
                .take(1 << 20)
                .read_to_string(&mut text);
            text
        });
        let cgroup_procs = match cgroup.as_ref().map(RunCgroup::procs_files).transpose() {
            Ok(p) => p.unwrap_or_default(),
            Err(e) => return failed(io_reason("cannot join the run's cgroup", e)),
        };
        let mut handed = vec![
            PassedFd {
                target: STATUS_FD,
                fd: status_write,
            },
            PassedFd {
                target: SPEC_FD,
                fd: spec_read,
            },
        ];
        handed.extend(fds);
        let mut cmd = Command::new(&self.helper);
        cmd.args(&self.helper_args).env_clear().current_dir("/");
        let setup = ChildSetup {
            fds: handed,
            cgroup_procs,
            rlimits: None,
            process_rlimit: false,
            // The helper holds the run together and reports how it ended: the
            // OOM killer takes the command's processes, never the helper.
            oom_protected: true,
        };
        let supervised = run_supervised(cmd, limits, output, &command.stdin, setup);
        let status_text = status_thread.join().unwrap_or_default();
        let _ = spec_thread.join();
        let oom_kills = cgroup.as_ref().map_or(0, RunCgroup::oom_kills);
        drop(cgroup);
        drop(root);
        let s = match supervised {
            Ok(s) => s,
            Err(e) => {
                return failed(io_reason(
                    &format!("cannot start the sandbox helper {}", self.helper.display()),
                    e,
                ))
            }
        };
        let mut status = interpret(&status_text, s.timed_out, s.code_or_signal());
        // The run's memory ran out: the command's SIGKILL, or the helper's own
        // if the kernel found nothing else to kill (memory held by the run's
        // in-memory files), is the run's doing.
        let helper_killed = s.code_or_signal() == (None, Some(libc::SIGKILL));
        if oom_kills > 0
            && (status
                == (RunStatus::Signaled {
                    signal: libc::SIGKILL,
                })
                || (matches!(status, RunStatus::SandboxFailed { .. }) && helper_killed))
        {
            status = RunStatus::OutOfMemory;
        }
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

    fn kind(&self) -> SandboxKind {
        SandboxKind::Namespaces
    }
}

/// Turns the helper's status lines into a run status.
fn interpret(status: &str, timed_out: bool, helper: (Option<i32>, Option<i32>)) -> RunStatus {
    let mut result = None;
    for line in status.lines() {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "error" => {
                return RunStatus::SandboxFailed {
                    reason: rest.to_string(),
                }
            }
            "spawn_error" => {
                return RunStatus::SpawnFailed {
                    reason: rest.to_string(),
                }
            }
            "exit" => result = rest.parse().ok().map(|code| RunStatus::Exited { code }),
            "signal" => {
                result = rest
                    .parse()
                    .ok()
                    .map(|signal| RunStatus::Signaled { signal })
            }
            _ => {}
        }
    }
    if timed_out {
        return RunStatus::TimedOut;
    }
    match result {
        Some(r) => r,
        None => RunStatus::SandboxFailed {
            reason: match helper {
                (Some(code), _) => format!(
                    "the sandbox helper exited with code {code} before the command finished"
                ),
                (_, Some(signal)) => format!("the sandbox helper was killed by signal {signal}"),
                _ => "the sandbox helper vanished".into(),
            },
        },
    }
}
