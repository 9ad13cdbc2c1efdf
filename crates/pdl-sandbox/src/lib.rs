//! Running untrusted task code.
//!
//! A [`SandboxCommand`] says what to run, with which environment (exactly that,
//! nothing inherited), which paths it may write and read, its network policy and
//! its [`ResourceLimits`]. A [`ProcessRunner`] runs it and returns a [`RunReport`]
//! whose [`RunStatus`] is a closed enum that keeps infrastructure failures
//! ([`RunStatus::SandboxFailed`]) apart from the command's own.
//!
//! Output is streamed into a bounded file, never buffered in memory; the wall-clock
//! bound ends the whole process tree (SIGTERM, then SIGKILL after a grace period).

mod cgroup;
pub mod command;
pub mod interrupt;
pub mod namespaces;
pub mod outcome;
pub mod runner;
pub mod scratch;
mod supervise;

pub use cgroup::scope as cgroup_scope;
pub use command::{NetworkPolicy, PassedFd, ResourceLimits, SandboxCommand, PRIVATE_HOME};
pub use namespaces::{init_main, installed_copies, NamespaceRunner, FIRST_PASSED_FD};
pub use outcome::{Enforcement, LimitScope, NetworkScope, RunReport, RunStatus, OUTPUT_TAIL_BYTES};
pub use runner::{PlainRunner, ProcessRunner, SandboxKind};
pub use scratch::{ScratchBounds, ScratchFs};
pub use supervise::TRUNCATION_MARKER;

use std::path::PathBuf;
use std::sync::Arc;

/// The sandbox cannot be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {kind} sandbox is not available: {reason}")]
pub struct SandboxUnavailable {
    /// The sandbox asked for.
    pub kind: &'static str,
    /// Why it is unavailable, with a hint.
    pub reason: String,
}

/// The hidden subcommand a program must route to [`init_main`] (before
/// anything else, with no further arguments) for [`runner`]'s namespace
/// sandbox to work.
pub const INIT_SUBCOMMAND: &str = "__sandbox-init";

/// A runner of the given kind, checked to work on this machine. The namespace
/// runner starts this very program with [`INIT_SUBCOMMAND`] as its helper, and
/// hides from every run its executable and each other copy of it installed in
/// a folder of `PATH`.
pub fn runner(kind: SandboxKind) -> Result<Arc<dyn ProcessRunner>, SandboxUnavailable> {
    runner_hiding_copies(kind, &[], &[])
}

/// [`runner`], whose namespace runner also hides each copy of this program
/// installed in one of `dirs` (such as the `bin` folders of the interpreter
/// the runs use: a pip install of the harness puts it there), and every file
/// there named like one of `names` (the names installs give the program).
pub fn runner_hiding_copies(
    kind: SandboxKind,
    dirs: &[PathBuf],
    names: &[&str],
) -> Result<Arc<dyn ProcessRunner>, SandboxUnavailable> {
    match kind {
        SandboxKind::None => Ok(Arc::new(PlainRunner)),
        SandboxKind::Namespaces => {
            let helper = std::env::current_exe().map_err(|e| SandboxUnavailable {
                kind: kind.name(),
                reason: format!(
                    "cannot find this program's own executable to start the sandbox helper: {e}"
                ),
            })?;
            let mut search: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            search.extend(dirs.iter().cloned());
            let runner = NamespaceRunner::new(helper, vec![INIT_SUBCOMMAND.to_string()])
                .mask_copies(&search, names);
            runner.probe().map_err(|reason| SandboxUnavailable {
                kind: kind.name(),
                reason,
            })?;
            Ok(Arc::new(runner))
        }
    }
}
