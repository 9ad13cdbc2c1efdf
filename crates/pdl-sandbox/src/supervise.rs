//! Supervision shared by every runner: spawn in a process group, stream output to
//! a bounded file, enforce the wall-clock bound on the whole group.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::command::{PassedFd, ResourceLimits};
use crate::outcome::OUTPUT_TAIL_BYTES;

/// The marker written where output was cut.
pub const TRUNCATION_MARKER: &str = "\n[pdl-swe: output truncated here; the rest was discarded]\n";

/// A pipe, both ends close-on-exec.
pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Output statistics from the drain thread.
#[derive(Debug, Default, Clone)]
pub(crate) struct OutputStats {
    pub bytes: u64,
    pub truncated: bool,
    /// The last [`OUTPUT_TAIL_BYTES`] bytes.
    pub tail: Vec<u8>,
}

/// Creates the output file: new, never through a link, readable by its owner.
pub(crate) fn create_output(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Copies everything from `reader` into `file`, keeping at most `cap` bytes
/// there and the last [`OUTPUT_TAIL_BYTES`] in memory. Stops at end of file,
/// or once `stop` is set and nothing arrived for a short while (a process that
/// escaped the kill still holds the pipe).
fn drain(read_end: OwnedFd, mut file: File, cap: u64, stop: Arc<AtomicBool>) -> OutputStats {
    let mut stats = OutputStats::default();
    let fd = read_end.as_raw_fd();
    let mut reader = File::from(read_end);
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
        if ready == 0 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            continue;
        }
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let keep = cap.saturating_sub(stats.bytes).min(n as u64) as usize;
        if keep > 0 {
            let _ = file.write_all(&buf[..keep]);
        }
        if keep < n && !stats.truncated {
            let _ = file.write_all(TRUNCATION_MARKER.as_bytes());
            stats.truncated = true;
        }
        stats.bytes += n as u64;
        let fresh = &buf[n.saturating_sub(OUTPUT_TAIL_BYTES)..n];
        let overflow = (tail.len() + fresh.len()).saturating_sub(OUTPUT_TAIL_BYTES);
        tail.drain(..overflow.min(tail.len()));
        tail.extend(fresh);
    }
    stats.tail = tail.into_iter().collect();
    stats
}

/// A pidfd for `pid`, when the kernel has them.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a new descriptor we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// How waiting for the child ended.
enum Waited {
    /// The child exited.
    Exited(ExitStatus),
    /// The deadline passed first.
    Deadline,
    /// The harness was asked to stop ([`crate::interrupt`]).
    Interrupted,
}

/// Waits for the child until `deadline` (none: no bound) or an interruption.
fn wait_until(child: &mut Child, pidfd: Option<&OwnedFd>, deadline: Option<Instant>) -> Waited {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Waited::Exited(status);
        }
        if crate::interrupt::requested() {
            return Waited::Interrupted;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Waited::Deadline;
        }
        // Wake at least every 100 ms to notice an interruption.
        let slice = deadline
            .map_or(Duration::MAX, |d| d - now)
            .min(Duration::from_millis(100));
        match pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = slice.as_millis() as i32;
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
            }
            None => std::thread::sleep(slice.min(Duration::from_millis(5))),
        }
    }
}

/// Sends `signal` to the whole process group `pgid`.
pub(crate) fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: kill with a negative pid signals a process group; no memory involved.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// How a supervised process ended, before runner-specific interpretation.
pub(crate) struct Supervised {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub duration: Duration,
    pub output: OutputStats,
}

impl Supervised {
    /// Exit code, or 128 + signal.
    pub fn code_or_signal(&self) -> (Option<i32>, Option<i32>) {
        match self.status {
            Some(s) => (s.code(), s.signal()),
            None => (None, None),
        }
    }
}

/// What happens in the child between fork and exec: descriptors handed over
/// at their numbers, cgroups joined, per-process limits applied.
pub(crate) struct ChildSetup {
    /// Descriptors the child inherits at given numbers.
    pub fds: Vec<PassedFd>,
    /// `cgroup.procs` descriptors the child writes itself into.
    pub cgroup_procs: Vec<OwnedFd>,
    /// Per-process limits to apply (the plain runner; the namespace helper
    /// applies them to the command itself).
    pub rlimits: Option<ResourceLimits>,
    /// Whether the process limit is applied as an rlimit.
    pub process_rlimit: bool,
    /// Whether the child is exempt from the OOM killer (`oom_score_adj`
    /// -1000, where the harness may set it); its own children reset it.
    pub oom_protected: bool,
}

/// Spawns `command` in a new process group with merged, bounded output and the
/// child set up, then supervises it to the end.
pub(crate) fn run_supervised(
    mut command: Command,
    limits: &ResourceLimits,
    output: File,
    stdin: &[u8],
    setup: ChildSetup,
) -> std::io::Result<Supervised> {
    let (read_end, write_end) = pipe()?;
    let write_err = write_end.try_clone()?;
    command
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_err))
        .stdin(if stdin.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .process_group(0);
    let moves: Vec<(i32, i32)> = setup
        .fds
        .iter()
        .map(|p| (p.fd.as_raw_fd(), p.target))
        .collect();
    let procs: Vec<i32> = setup.cgroup_procs.iter().map(|f| f.as_raw_fd()).collect();
    let mut targets: Vec<i32> = moves.iter().map(|&(_, target)| target).collect();
    targets.sort_unstable();
    let rlimits = setup.rlimits.clone();
    let process_rlimit = setup.process_rlimit;
    let oom_protected = setup.oom_protected;
    // SAFETY: getpid cannot fail.
    let harness = unsafe { libc::getpid() };
    // SAFETY: the closure only calls dup2, fcntl, write and setrlimit, which are
    // async-signal-safe, on descriptors and values prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // A run never outlives the harness: killed with it, even by
            // SIGKILL. The harness may already be gone by now.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != harness {
                libc::_exit(1);
            }
            crate::cgroup::join_from_child(&procs)?;
            if oom_protected {
                // Best effort: lowering the score needs privilege.
                set_oom_score_adj(b"-1000");
            }
            // Two passes, so that a source numbered like another's target is
            // not overwritten before it moves.
            let mut staged = Vec::with_capacity(moves.len());
            for &(source, _) in &moves {
                let copy = libc::fcntl(source, libc::F_DUPFD_CLOEXEC, 64);
                if copy < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                staged.push(copy);
            }
            for (i, &(_, target)) in moves.iter().enumerate() {
                if libc::dup2(staged[i], target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Nothing else crosses the exec: not even a descriptor the
            // harness itself inherited without close-on-exec.
            cloexec_all_but(&targets);
            if let Some(limits) = &rlimits {
                apply_resource_limits(limits, process_rlimit);
            }
            Ok(())
        });
    }
    if crate::interrupt::requested() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            "the harness is stopping; no run starts",
        ));
    }
    let started = Instant::now();
    let spawned = command.spawn();
    // Our copies of the handed-over descriptors and of the pipe's write ends
    // (in `command`) go, so that the readers see end of file when the run ends.
    drop(setup);
    drop(command);
    let mut child = spawned?;
    let pid = child.id() as i32;
    let registered = crate::interrupt::register(pid);
    let pidfd = pidfd_open(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let drain_thread: JoinHandle<OutputStats> = {
        let cap = limits.max_output_bytes;
        let stop = stop.clone();
        std::thread::spawn(move || drain(read_end, output, cap, stop))
    };
    if let Some(mut pipe) = child.stdin.take() {
        let bytes = stdin.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    // A bound too far to represent is no bound (the dataset's is capped
    // anyway); adding must never panic.
    let deadline = started.checked_add(limits.wall_time);
    let mut timed_out = false;
    let status = match wait_until(&mut child, pidfd.as_ref(), deadline) {
        Waited::Exited(status) => Some(status),
        Waited::Interrupted => {
            kill_group(pid, libc::SIGKILL);
            child.wait().ok()
        }
        Waited::Deadline => {
            timed_out = true;
            kill_group(pid, libc::SIGTERM);
            let grace = Instant::now().checked_add(limits.kill_grace);
            match wait_until(&mut child, pidfd.as_ref(), grace) {
                Waited::Exited(s) => Some(s),
                Waited::Deadline | Waited::Interrupted => {
                    kill_group(pid, libc::SIGKILL);
                    child.wait().ok()
                }
            }
        }
    };
    // Whatever the leader left behind in its group goes too.
    kill_group(pid, libc::SIGKILL);
    drop(registered);
    let duration = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let output = drain_thread.join().unwrap_or_default();
    Ok(Supervised {
        status,
        timed_out,
        duration,
        output,
    })
}

/// Marks every descriptor from 3 up close-on-exec except `keep` (sorted).
/// Async-signal-safe: `close_range` where the kernel has it, else `fcntl`
/// over every number up to the descriptor limit.
fn cloexec_all_but(keep: &[i32]) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let mut ranges = [(0u32, 0u32); 66];
    let mut n = 0;
    let mut low = 3u32;
    for &k in keep.iter().filter(|&&k| k >= 3).take(64) {
        let k = k as u32;
        if k > low {
            ranges[n] = (low, k - 1);
            n += 1;
        }
        low = low.max(k + 1);
    }
    ranges[n] = (low, u32::MAX);
    n += 1;
    for &(first, last) in &ranges[..n] {
        // SAFETY: plain syscalls on integers.
        let done =
            unsafe { libc::syscall(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) == 0 };
        if done {
            continue;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct.
        let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            limit.rlim_cur.min(1 << 16) as u32
        } else {
            1024
        };
        for fd in first..=last.min(top) {
            // SAFETY: fcntl on a number; a closed one answers EBADF.
            unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
}

/// Writes `value` to /proc/self/oom_score_adj. Async-signal-safe; errors are
/// ignored (an unprivileged harness cannot lower the score).
pub(crate) fn set_oom_score_adj(value: &[u8]) {
    // SAFETY: open/write/close on a static NUL-terminated path and a buffer.
    unsafe {
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, value.as_ptr().cast(), value.len());
            libc::close(fd);
        }
    }
}

/// Applies the per-process limits. Async-signal-safe. The process limit counts
/// every process of the user, so it is applied only where the command runs as a
/// user of its own (`with_process_limit`).
pub(crate) fn apply_resource_limits(limits: &ResourceLimits, with_process_limit: bool) {
    let set = |resource, value: u64| {
        let rl = libc::rlimit {
            rlim_cur: value as libc::rlim_t,
            rlim_max: value as libc::rlim_t,
        };
        // SAFETY: setrlimit with a valid struct.
        unsafe {
            libc::setrlimit(resource, &rl);
        }
    };
    if let Some(bytes) = limits.process_memory_bytes {
        set(libc::RLIMIT_AS, bytes);
    }
    if let Some(n) = limits.max_processes.filter(|_| with_process_limit) {
        set(libc::RLIMIT_NPROC, n);
    }
    if let Some(bytes) = limits.max_file_bytes {
        set(libc::RLIMIT_FSIZE, bytes);
    }
    set(libc::RLIMIT_CORE, 0);
}
