//! The command line's shape (clap types stay in this crate).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// pdl-swe: the PDL-SWE-Bench harness.
///
/// Without --dataset every command works on the bundled open suite.
#[derive(Debug, Parser)]
#[command(name = "pdl-swe", version, about, long_about = None, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Where the tasks come from.
#[derive(Debug, Clone, Args)]
pub struct DatasetArgs {
    /// A task-tree folder (one task or a folder of tasks), a .parquet or a .jsonl
    /// file. Default: the bundled open suite.
    #[arg(long, value_name = "PATH", global = true)]
    pub dataset: Option<PathBuf>,
}

/// How gradings run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Gradings run in parallel (default: the number of cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    /// Bound on one grading's test run, in seconds (default: each task's own, else 120).
    #[arg(long, value_name = "SECONDS")]
    pub test_timeout: Option<f64>,
    /// Isolation for task code: `namespaces` (default) or `none` (only when asked).
    #[arg(long, value_enum, default_value_t = SandboxChoice::Namespaces)]
    pub sandbox: SandboxChoice,
    /// The Python interpreter environments are built from (default: python3 on PATH).
    #[arg(long, value_name = "PATH", env = "PDL_SWE_PYTHON")]
    pub python: Option<PathBuf>,
    /// Cache folder for Python environments and ladder fingerprints
    /// (default: the user cache folder, e.g. ~/.cache/pdl-swe).
    #[arg(long, value_name = "DIR", env = "PDL_SWE_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// Folder for grading scratch trees (default: the system temporary folder).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Keep each grading's scratch tree for inspection.
    #[arg(long)]
    pub keep_workdirs: bool,
}

/// Output format of a command's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Isolation choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxChoice {
    /// Linux namespaces.
    Namespaces,
    /// No isolation.
    None,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List or export the tasks of a dataset.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Check every task: schema, test lists, base and gold outcomes, rungs, determinism.
    Validate(ValidateArgs),
    /// Grade gold, do-nothing and every rung of every task; exit 1 on any deviation.
    Calibrate(CalibrateArgs),
    /// Grade a SWE-bench style predictions file.
    Grade(GradeArgs),
    /// Check this machine: Python, installer, git, sandbox and its start cost.
    Doctor(DoctorArgs),
    /// Internal: the sandbox's first process.
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit {
        /// The sandbox specification file.
        spec: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// One line per task: id, tier, domain, test counts, budget, rungs.
    List {
        #[command(flatten)]
        dataset: DatasetArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Write the dataset as .parquet, .jsonl or a task-tree folder.
    Export {
        #[command(flatten)]
        dataset: DatasetArgs,
        /// Destination: a .parquet or .jsonl file, or a folder.
        #[arg(long, value_name = "PATH")]
        to: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Task IDs or instance IDs to check (default: all).
    pub tasks: Vec<String>,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// How many times gold and do-nothing run for the determinism check.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: usize,
    /// Also write every grading's result record to this JSONL file as it finishes.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Task IDs or instance IDs to calibrate (default: all).
    pub tasks: Vec<String>,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Also write every grading's result record to this JSONL file as it finishes.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct GradeArgs {
    /// Predictions: JSONL or a JSON list of {instance_id, model_name_or_path, model_patch}.
    #[arg(long, value_name = "FILE")]
    pub predictions: PathBuf,
    /// Result records, one JSON object per line. An existing file is resumed:
    /// predictions already graded in it are skipped.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Sandbox runs to time.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// The Python interpreter to check (default: python3 on PATH).
    #[arg(long, value_name = "PATH", env = "PDL_SWE_PYTHON")]
    pub python: Option<PathBuf>,
    /// The cache folder to report.
    #[arg(long, value_name = "DIR", env = "PDL_SWE_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}
