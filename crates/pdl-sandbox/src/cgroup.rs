//! Limits that add up over a whole run ([`RunCgroup`]): a cgroup per run with a
//! memory and a process-count bound, joined by the run's first process before
//! anything else starts, so that every descendant counts against it.
//!
//! Two layouts are supported:
//!
//! - **cgroup v2** (a unified hierarchy whose `memory` and `pids` controllers
//!   are available to the harness's own cgroup, as under a systemd unit with
//!   `Delegate=yes`). When the harness's cgroup still has processes and the
//!   controllers are not yet enabled for its children, the harness first moves
//!   itself into a leaf `pdl-swe-harness` (the "no internal processes" rule).
//! - **cgroup v1** (separate `memory` and `pids` hierarchies, writable by the
//!   harness, as for root on many hosts).
//!
//! Anywhere else the runner falls back to per-process rlimits and says so in
//! [`crate::Enforcement`].

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::outcome::LimitScope;

/// Where run cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// Children of this cgroup v2 directory.
    V2 { parent: PathBuf },
    /// Children of these v1 `memory` and `pids` directories, and of the `cpu`
    /// one where it is writable too.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
}

static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();

/// The layout this machine offers the harness, found once.
fn layout() -> Option<&'static Layout> {
    LAYOUT.get_or_init(detect).as_ref()
}

/// The scope run cgroups enforce limits at on this machine, or `None` when
/// there are none.
pub fn scope() -> LimitScope {
    match layout() {
        Some(Layout::V2 { .. }) => LimitScope::CgroupV2,
        Some(Layout::V1 { .. }) => LimitScope::CgroupV1,
        None => LimitScope::None,
    }
}

fn mounts() -> Vec<(PathBuf, String, String)> {
    // mountinfo: id parent major:minor root mountpoint options - fstype source superoptions
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let superoptions = right.nth(1).unwrap_or("").to_string();
            Some((PathBuf::from(mountpoint), fstype, superoptions))
        })
        .collect()
}

/// This process's cgroup path in each hierarchy (`0` for v2, else the
/// controller list), from /proc/self/cgroup.
fn own_cgroups() -> Vec<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some((
                if id == "0" && controllers.is_empty() {
                    "0".to_string()
                } else {
                    controllers.to_string()
                },
                path.to_string(),
            ))
        })
        .collect()
}

fn join(mountpoint: &Path, path: &str) -> PathBuf {
    mountpoint.join(path.trim_start_matches('/'))
}

/// Whether a child cgroup can be made and removed under `dir`.
fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!("pdl-swe-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    if made {
        let _ = std::fs::remove_dir(&probe);
    }
    made
}

fn detect() -> Option<Layout> {
    let mounts = mounts();
    let own = own_cgroups();
    // cgroup v1, both controllers.
    let v1 = |controller: &str| {
        let (mountpoint, _, _) = mounts.iter().find(|(_, fstype, options)| {
            fstype == "cgroup" && options.split(',').any(|o| o == controller)
        })?;
        let (_, path) = own
            .iter()
            .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))?;
        let dir = join(mountpoint, path);
        writable(&dir).then_some(dir)
    };
    if let (Some(memory), Some(pids)) = (v1("memory"), v1("pids")) {
        return Some(Layout::V1 {
            memory,
            pids,
            cpu: v1("cpu"),
        });
    }
    // cgroup v2.
    let (mountpoint, _, _) = mounts.iter().find(|(_, fstype, _)| fstype == "cgroup2")?;
    let (_, path) = own.iter().find(|(id, _)| id == "0")?;
    let dir = join(mountpoint, path);
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).ok()?;
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if !has("memory") || !has("pids") || !writable(&dir) {
        return None;
    }
    let enabled = |dir: &Path| {
        std::fs::read_to_string(dir.join("cgroup.subtree_control"))
            .map(|t| {
                let on: Vec<&str> = t.split_whitespace().collect();
                on.contains(&"memory") && on.contains(&"pids")
            })
            .unwrap_or(false)
    };
    if !enabled(&dir) {
        // Controllers can only be enabled for the children of a cgroup without
        // processes of its own: move this process into a leaf first.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if !procs.trim().is_empty() {
            let leaf = dir.join("pdl-swe-harness");
            if std::fs::create_dir(&leaf).is_err() && !leaf.is_dir() {
                return None;
            }
            OpenOptions::new()
                .write(true)
                .open(leaf.join("cgroup.procs"))
                .and_then(|mut f| f.write_all(std::process::id().to_string().as_bytes()))
                .ok()?;
        }
        OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.subtree_control"))
            .and_then(|mut f| f.write_all(b"+memory +pids"))
            .ok()?;
        if !enabled(&dir) {
            return None;
        }
    }
    if has("cpu") {
        // Where it can be had, CPU time is shared between runs, not between
        // processes. Optional: the memory and process bounds stand without it.
        let _ = write_file(&dir.join("cgroup.subtree_control"), "+cpu");
    }
    Some(Layout::V2 { parent: dir })
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// One run's cgroup (one directory per hierarchy). Dropping it kills whatever
/// is left in it and removes it.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    dirs: Vec<PathBuf>,
    version: LimitScope,
}

/// Numbers the run cgroups of this process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl RunCgroup {
    /// Makes a cgroup with these bounds, or `None` when the machine offers no
    /// usable cgroups.
    pub(crate) fn create(
        memory_bytes: Option<u64>,
        max_processes: Option<u64>,
    ) -> std::io::Result<Option<RunCgroup>> {
        let Some(layout) = layout() else {
            return Ok(None);
        };
        let name = format!(
            "pdl-swe-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let made = |dir: PathBuf| -> std::io::Result<PathBuf> {
            match std::fs::create_dir(&dir) {
                // A harness that is gone had this pid (a killed one leaves its
                // groups): an empty group goes, a busy one stays an error.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::remove_dir(&dir).and_then(|()| std::fs::create_dir(&dir))
                }
                other => other,
            }
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            Ok(dir)
        };
        let cgroup = match layout {
            Layout::V2 { parent } => {
                let dir = made(parent.join(&name))?;
                let cgroup = RunCgroup {
                    dirs: vec![dir.clone()],
                    version: LimitScope::CgroupV2,
                };
                if let Some(bytes) = memory_bytes {
                    write_file(&dir.join("memory.max"), &bytes.to_string())?;
                    let _ = write_file(&dir.join("memory.swap.max"), "0");
                }
                if let Some(n) = max_processes {
                    write_file(&dir.join("pids.max"), &n.to_string())?;
                }
                cgroup
            }
            Layout::V1 { memory, pids, cpu } => {
                let mut cgroup = RunCgroup {
                    dirs: Vec::new(),
                    version: LimitScope::CgroupV1,
                };
                let memory = made(memory.join(&name))?;
                cgroup.dirs.push(memory.clone());
                let pids = made(pids.join(&name))?;
                cgroup.dirs.push(pids.clone());
                if let Some(cpu) = cpu {
                    // A group of its own: the scheduler shares CPU time between
                    // runs, so a run of a thousand busy processes gets one
                    // run's share, not a thousand processes' share.
                    cgroup.dirs.push(made(cpu.join(&name))?);
                }
                if let Some(bytes) = memory_bytes {
                    write_file(&memory.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    // Where swap accounting exists, swap counts too.
                    let _ = write_file(
                        &memory.join("memory.memsw.limit_in_bytes"),
                        &bytes.to_string(),
                    );
                }
                if let Some(n) = max_processes {
                    write_file(&pids.join("pids.max"), &n.to_string())?;
                }
                cgroup
            }
        };
        Ok(Some(cgroup))
    }

    /// Which version enforces the limits.
    pub(crate) fn scope(&self) -> LimitScope {
        self.version
    }

    /// Whether the run has a CPU group of its own (its processes share one
    /// run's part of the CPU time).
    pub(crate) fn shares_cpu(&self) -> bool {
        match self.version {
            LimitScope::CgroupV2 => self.dirs[0].join("cpu.weight").exists(),
            _ => self.dirs.len() > 2,
        }
    }

    /// Descriptors of the files through which a starting process joins, with
    /// [`join_from_child`] between fork and exec.
    ///
    /// On cgroup v1 that is `tasks`: the child is single-threaded there, so
    /// moving its one thread moves the process, and the kernel moves the
    /// calling thread without the global write lock whose grace period costs
    /// `cgroup.procs` about 10 ms per run.
    pub(crate) fn procs_files(&self) -> std::io::Result<Vec<OwnedFd>> {
        let file = match self.version {
            LimitScope::CgroupV1 => "tasks",
            _ => "cgroup.procs",
        };
        self.dirs
            .iter()
            .map(|dir| {
                let path = dir.join(file);
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
            })
            .collect()
    }

    /// Processes the kernel killed for want of memory in this cgroup.
    pub(crate) fn oom_kills(&self) -> u64 {
        let file = match self.version {
            LimitScope::CgroupV2 => "memory.events",
            _ => "memory.oom_control",
        };
        std::fs::read_to_string(self.dirs[0].join(file))
            .ok()
            .and_then(|text| {
                text.lines().find_map(|line| {
                    line.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// Kills every process still in the cgroup and waits until it is empty.
    pub(crate) fn kill_all(&self) {
        for dir in &self.dirs {
            if self.version == LimitScope::CgroupV2 {
                let _ = write_file(&dir.join("cgroup.kill"), "1");
            }
            let mut backoff = Backoff::new(Duration::from_secs(1));
            loop {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    // SAFETY: kill with a pid and a signal number; no memory involved.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                if !backoff.wait() {
                    break;
                }
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.kill_all();
        for dir in &self.dirs {
            // A cgroup can be removed once its last process is gone; the kernel
            // may take a moment after the kill.
            let mut backoff = Backoff::new(Duration::from_millis(500));
            while std::fs::remove_dir(dir).is_err() && dir.exists() && backoff.wait() {}
        }
    }
}

/// Waits that start short and double, up to 5 ms each, within a total budget:
/// a cgroup usually empties within microseconds of its last exit, and a fixed
/// sleep would cost every run its full length.
struct Backoff {
    next: Duration,
    left: Duration,
}

impl Backoff {
    fn new(budget: Duration) -> Self {
        Backoff {
            next: Duration::from_micros(50),
            left: budget,
        }
    }

    /// Sleeps once; false when the budget is spent.
    fn wait(&mut self) -> bool {
        if self.left.is_zero() {
            return false;
        }
        let step = self.next.min(self.left);
        std::thread::sleep(step);
        self.left -= step;
        self.next = (self.next * 2).min(Duration::from_millis(5));
        true
    }
}

/// Moves the calling process into the cgroups whose `cgroup.procs` descriptors
/// are given. Only async-signal-safe calls: meant for a child between fork and
/// exec.
pub(crate) fn join_from_child(procs: &[i32]) -> std::io::Result<()> {
    for &fd in procs {
        // "0" is the writing process itself, in both versions.
        // SAFETY: writing a two-byte buffer to a descriptor we hold.
        let n = unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_group_a_killed_harness_left_under_this_pid_is_replaced() {
        // A harness killed with SIGKILL leaves its groups; a later harness
        // given the same pid must not fail to create its own.
        let Some(layout) = layout() else {
            assert!(
                std::env::var_os("PDL_SWE_ALLOW_UNPRIVILEGED").is_some(),
                "no usable cgroups; set PDL_SWE_ALLOW_UNPRIVILEGED=1 to leave this out"
            );
            return;
        };
        let next = COUNTER.load(Ordering::SeqCst);
        let name = format!("pdl-swe-{}-{next}", std::process::id());
        let parents: Vec<PathBuf> = match layout {
            Layout::V2 { parent } => vec![parent.clone()],
            Layout::V1 { memory, pids, cpu } => {
                let mut v = vec![memory.clone(), pids.clone()];
                v.extend(cpu.clone());
                v
            }
        };
        for parent in &parents {
            std::fs::create_dir(parent.join(&name)).unwrap();
        }
        let cgroup = RunCgroup::create(Some(64 << 20), Some(32)).unwrap();
        assert!(cgroup.is_some());
        drop(cgroup);
    }
}
