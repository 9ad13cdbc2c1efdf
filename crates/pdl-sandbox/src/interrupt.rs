//! Stopping every run at once ([`request`]), for a harness that was asked to
//! stop (Ctrl-C, SIGTERM).
//!
//! Every supervised run registers its process group while it runs. A request
//! sets a process-wide flag and kills each registered group with SIGKILL (the
//! namespace helper's first process dies with it, and a run's cgroup is
//! emptied when the run ends); a run that starts afterwards is refused before
//! it spawns, or killed as soon as it registers. Callers check [`requested`]
//! to start no further work and to keep results of cut-short runs out of
//! their records. A request cannot be taken back: it is meant for the end of
//! the process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Asks every run to stop now: running process groups are killed, and no run
/// starts from now on. Safe to call more than once, from any thread (not
/// from a signal handler: it takes a lock).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    for &pgid in running.iter() {
        crate::supervise::kill_group(pgid, libc::SIGKILL);
    }
}

/// True once [`request`] was called.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// A registered process group; dropping it unregisters the group.
pub(crate) struct Registered(i32);

/// Registers the process group `pgid` for [`request`] to kill; kills it at
/// once when a request came first.
pub(crate) fn register(pgid: i32) -> Registered {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pgid);
    if requested() {
        crate::supervise::kill_group(pgid, libc::SIGKILL);
    }
    Registered(pgid)
}

impl Drop for Registered {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}
