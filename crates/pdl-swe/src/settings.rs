//! Settings resolved once from the command line and the environment, before any
//! work starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pdl_grader::changes::TreeLimits;
use pdl_grader::{find_interpreter, EnvManager, GradeSettings, Grader};
use pdl_sandbox::{ProcessRunner, ResourceLimits, SandboxKind};
use pdl_task::diff::PatchLimits;
use pdl_task::safe::MAX_TEST_TIMEOUT_S;
use pdl_task::Dataset;

use crate::cli::{DatasetArgs, RunArgs, SandboxChoice};
use crate::exit::ExitError;

/// Loads the dataset named on the command line, or the bundled suite, and
/// prints its load warnings.
pub fn load_dataset(args: &DatasetArgs) -> Result<Dataset, ExitError> {
    let dataset = match &args.dataset {
        None => pdl_suite::bundled(),
        Some(path) => Dataset::load(path).map_err(ExitError::usage)?,
    };
    crate::commands::report_load_warnings(&dataset.warnings);
    Ok(dataset)
}

/// Everything a grading command needs.
pub struct RunSettings {
    /// Gradings in parallel.
    pub parallelism: usize,
    /// The cache folder.
    pub cache_dir: PathBuf,
    /// The grader.
    pub grader: Grader,
    /// The runner every piece of task code goes through.
    pub runner: Arc<dyn ProcessRunner>,
    /// The work folder the harness made (removed when the settings go, unless
    /// asked to keep grading folders); `None` when the user named one.
    _own_work_root: Option<tempfile::TempDir>,
}

/// The default cache folder.
pub fn default_cache_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("pdl-swe")
}

/// Resolves run settings: interpreter, environments, sandbox, limits.
pub fn resolve(args: &RunArgs) -> Result<RunSettings, ExitError> {
    resolve_exposing(args, &[])
}

/// [`resolve`] for runs that also see the host folders `exposed` (a
/// campaign's agent paths): copies of the harness installed in them, or in
/// their `bin` folders, are hidden from every run too.
pub fn resolve_exposing(args: &RunArgs, exposed: &[PathBuf]) -> Result<RunSettings, ExitError> {
    let parallelism = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // Folders are bound into sandboxes, whose working folder is elsewhere:
    // a relative path is made absolute here, once.
    let absolute = |dir: &PathBuf| {
        std::path::absolute(dir)
            .with_context(|| format!("cannot resolve the folder {}", dir.display()))
            .map_err(ExitError::environment)
    };
    let cache_dir = absolute(&args.cache_dir.clone().unwrap_or_else(default_cache_dir))?;
    let interpreter = find_interpreter(args.python.as_deref()).map_err(ExitError::environment)?;
    let envs = Arc::new(EnvManager::new(cache_dir.clone(), interpreter));
    let kind = match args.sandbox {
        SandboxChoice::Namespaces => SandboxKind::Namespaces,
        SandboxChoice::None => SandboxKind::None,
    };
    // Every run reads the interpreter's folders: a pip install of the harness
    // into that interpreter (or its environment) put a copy there.
    let interpreter = envs.interpreter();
    let mut install_dirs = vec![interpreter.base_prefix.join("bin")];
    install_dirs.extend(interpreter.executable.parent().map(Path::to_path_buf));
    for dir in exposed {
        install_dirs.push(dir.clone());
        install_dirs.push(dir.join("bin"));
    }
    let runner: Arc<dyn ProcessRunner> =
        pdl_sandbox::runner_hiding_copies(kind, &install_dirs, &[env!("CARGO_PKG_NAME")])
            .map_err(ExitError::environment)?;
    // A folder the user names is theirs: created if missing, never removed.
    // Otherwise the harness makes one of its own with a name no one can guess.
    let (work_root, own) = match &args.work_dir {
        Some(dir) => {
            let dir = &absolute(dir)?;
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the work folder {}", dir.display()))
                .map_err(ExitError::environment)?;
            (dir.clone(), None)
        }
        None => {
            let mut dir = tempfile::Builder::new()
                .prefix("pdl-swe-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .context("cannot create a work folder in the temporary folder")
                .map_err(ExitError::environment)?;
            dir.disable_cleanup(args.keep_workdirs);
            (dir.path().to_path_buf(), Some(dir))
        }
    };
    let test_timeout = match args.test_timeout {
        Some(s) if s > 0.0 && s <= MAX_TEST_TIMEOUT_S as f64 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(ExitError::usage(anyhow::anyhow!(
                "--test-timeout must be a number of seconds above 0 and at most {MAX_TEST_TIMEOUT_S}, not {s}"
            )))
        }
        None => None,
    };
    let grader = Grader::new(
        GradeSettings {
            work_root,
            keep_workdirs: args.keep_workdirs,
            test_timeout,
            limits: ResourceLimits::default(),
            tree_limits: TreeLimits::default(),
            patch_limits: PatchLimits::default(),
        },
        envs,
        runner.clone(),
    );
    Ok(RunSettings {
        parallelism,
        cache_dir,
        grader,
        runner,
        _own_work_root: own,
    })
}
