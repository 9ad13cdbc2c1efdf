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
    /// Bound on each test run of a grading (the public tests, then the hidden tests), in seconds
    /// (default: each task's own, else 120).
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
    /// Run a campaign: tasks × agents × samples through the metering gateway.
    Run(Box<RunCampaignArgs>),
    /// Write the reports of a campaign's run folder.
    Report(ReportArgs),
    /// Local models: the replay model (canned replies) and the console model
    /// (replies written by hand), both OpenAI- and Anthropic-compatible servers.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Dated certificates per task and agent from graded results; --check
    /// applies the tier gates to them.
    Certify(CertifyArgs),
    /// Check this machine: Python, installer, git, sandbox and its start cost.
    Doctor(DoctorArgs),
    /// Combine shard outputs (`grade --shard` results files, or `run --shard`
    /// run folders) into one results file or run folder, in plan order.
    Merge(MergeArgs),
    /// Run `grade` or `run` as a Slurm job array of shards with a dependent
    /// merge job, or show a submission's progress.
    #[command(subcommand)]
    Slurm(SlurmCommand),
    /// The evaluation service: an HTTP API, a web page and graders over a
    /// durable queue (`serve keys create` makes API keys).
    Serve(ServeArgs),
    /// Datasets on an evaluation service.
    #[command(subcommand)]
    Datasets(DatasetsCommand),
    /// Submit predictions to an evaluation service.
    Submit(SubmitArgs),
    /// Runs on an evaluation service.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Internal: the sandbox's first process (its spec arrives on descriptor 4).
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// One line per task: id, tier, domain, test counts, budget, rungs,
    /// certification status.
    List {
        #[command(flatten)]
        dataset: DatasetArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Write the dataset as .parquet, .jsonl or a task-tree folder.
    #[command(group(clap::ArgGroup::new("destination").required(true).args(["to", "agent_view"])))]
    Export {
        #[command(flatten)]
        dataset: DatasetArgs,
        /// Destination: a .parquet or .jsonl file, or a folder.
        #[arg(long, value_name = "PATH")]
        to: Option<PathBuf>,
        /// Instead, write what an agent sees of each task into
        /// DIR/<task_id>/: the repository as a git repository with one
        /// commit, ISSUE.md, TASK.md and task.json (the policy and the budget).
        /// No hidden test, reference patch or rung.
        #[arg(long, value_name = "DIR")]
        agent_view: Option<PathBuf>,
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
    /// Grade only slice I of N of the work (I from 1 to N), the same slice on
    /// every machine; `pdl-swe merge` combines the slices' outputs.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<pdl_grader::pipeline::Shard>,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// Graded results: `grade --out` files (JSONL of result records) and
    /// campaign run folders (their results.jsonl, episode records only).
    #[arg(value_name = "RESULTS", required_unless_present = "check")]
    pub results: Vec<PathBuf>,
    /// Instead of writing certificates, read every task's certificates and
    /// apply the tier gates; exit 1 when a task's tier is not supported.
    #[arg(long, conflicts_with = "results")]
    pub check: bool,
    /// A YAML file that overrides each tier's minimum attempts
    /// (`min_attempts: {T5: 5}`) or least mean hidden pass fraction
    /// (`min_mean_hidden_pass: {T5: 0.3}`); with --check.
    #[arg(long, value_name = "FILE", requires = "check")]
    pub gates: Option<PathBuf>,
    /// The folder of task folders that holds the certificates
    /// (DIR/<task_id>/certificates/). Default: the dataset, when it is a task
    /// tree (the bundled suite's is the repository's `tasks` folder).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// The same as --format json.
    #[arg(long)]
    pub json: bool,
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

/// The upstream model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiChoice {
    /// OpenAI Chat Completions.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

#[derive(Debug, Args)]
pub struct RunCampaignArgs {
    /// An agent to evaluate: `builtin` (repeatable with --agent-cmd).
    #[arg(long = "agent", value_name = "NAME", value_parser = ["builtin"])]
    pub agents: Vec<String>,
    /// An external agent command, run by `sh -c` in the sandboxed workspace (repeatable).
    #[arg(long = "agent-cmd", value_name = "COMMAND")]
    pub agent_cmds: Vec<String>,
    /// The model to evaluate.
    #[arg(long, value_name = "NAME")]
    pub model: String,
    /// The real upstream's base URL, `/v1` included (default: the provider's public API).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The upstream's API.
    #[arg(long, value_enum, default_value_t = ApiChoice::Openai)]
    pub api: ApiChoice,
    /// The environment variable holding the upstream API key (default:
    /// OPENAI_API_KEY or ANTHROPIC_API_KEY). Unset: no key is sent.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Episodes per task and agent.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub samples: usize,
    /// The run folder: results.jsonl, trajectories, patches. An existing folder is resumed.
    #[arg(long, value_name = "RUN_DIR")]
    pub out: PathBuf,
    /// Run only slice I of N of the campaign (I from 1 to N), the same slice
    /// on every machine; `pdl-swe merge` combines the slices' run folders.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<pdl_grader::pipeline::Shard>,
    /// A task to run (task ID or instance ID; repeatable; default: all).
    #[arg(long = "task", value_name = "ID")]
    pub tasks: Vec<String>,
    /// An extra variable for external agents (repeatable).
    #[arg(long = "agent-env", value_name = "NAME=VALUE")]
    pub agent_env: Vec<String>,
    /// A host path external agents may read, such as their own installation
    /// (repeatable). The run folder and the work folder must lie outside it.
    #[arg(long = "agent-path", value_name = "PATH")]
    pub agent_paths: Vec<PathBuf>,
    /// Model calls per episode (built-in agent).
    #[arg(long, default_value_t = 100)]
    pub max_steps: usize,
    /// Wall-clock bound of one episode, in seconds.
    #[arg(long, default_value_t = 3600.0, value_name = "SECONDS")]
    pub episode_timeout: f64,
    /// Default bound of one shell command of the built-in agent, in seconds.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub shell_timeout: f64,
    /// Bound on one upstream request, in seconds.
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub upstream_timeout: f64,
    /// Keep every episode's final workspace under RUN_DIR/workspaces/.
    #[arg(long)]
    pub keep_workspaces: bool,
    /// Let agents use this provider-side tool (repeatable): `web_search`,
    /// `web_fetch`, `mcp`, `code_execution`, `remote_media` (images by URL), or a
    /// tool type such as `web_search_20250305`. Without it the gateway refuses
    /// every request that switches one on: such tools reach the network or
    /// outside information from the provider's side of the sandbox.
    #[arg(long = "allow-provider-tool", value_name = "NAME")]
    pub allow_provider_tools: Vec<String>,
    /// The largest request body the gateway reads from an agent, in MiB; a
    /// larger one is refused before it is parsed.
    #[arg(long, default_value_t = 16, value_name = "MIB")]
    pub max_request_mib: usize,
    /// Files and folders an episode's own file system holds (its workspace and
    /// the agent's scratch); past it the agent's writes fail with "no space".
    #[arg(long, default_value_t = 500_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
    pub episode_inodes: u64,
    /// Bytes an episode's own file system holds, in MiB (its pages are also
    /// charged to the episode's memory bound).
    #[arg(long, default_value_t = 4096, value_name = "MIB", value_parser = clap::value_parser!(u64).range(16..=1_048_576))]
    pub episode_disk_mib: u64,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The campaign's run folder.
    pub run_dir: PathBuf,
    /// Where report.json, report.md and index.html go (default: RUN_DIR/report).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub dataset: DatasetArgs,
    /// Output format on the terminal.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Serve canned replies from a script (or a recorded trajectory) until Ctrl-C.
    Serve {
        /// The replay script (JSON).
        #[arg(long, value_name = "FILE", required_unless_present = "trajectory")]
        script: Option<PathBuf>,
        /// Replay a gateway trajectory file instead of a script.
        #[arg(long, value_name = "FILE", conflicts_with = "script")]
        trajectory: Option<PathBuf>,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Added latency per reply, in milliseconds.
        #[arg(long, default_value_t = 0, value_name = "MS")]
        latency_ms: u64,
    },
    /// Serve the console model until Ctrl-C: every request is written to a
    /// mailbox folder and answered with the reply a person (or a program)
    /// writes there with `model reply`. Usage is estimated, never declared.
    Console {
        /// The mailbox folder (created if missing).
        #[arg(long, value_name = "DIR")]
        mailbox: PathBuf,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR")]
        listen: std::net::SocketAddr,
    },
    /// Wait for the console model's next request and show it.
    Turn {
        /// The mailbox folder.
        #[arg(long, value_name = "DIR")]
        mailbox: PathBuf,
        /// How long to wait for a request, in seconds.
        #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
        wait: f64,
    },
    /// Answer the console model's waiting request, then wait for the next one
    /// and show it. The reply is JSON (`{"content": …, "tool_calls": [{"name":
    /// …, "arguments": {…}}], "finish": false}`) read from --file, or built
    /// from --shell, --say or --finish.
    #[command(group(clap::ArgGroup::new("answer").required(true).args(["file", "shell", "say", "finish"])))]
    Reply {
        /// The mailbox folder.
        #[arg(long, value_name = "DIR")]
        mailbox: PathBuf,
        /// The reply as JSON (`-` reads standard input).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Shorthand: one `run_shell` call with this command.
        #[arg(long, value_name = "COMMAND")]
        shell: Option<String>,
        /// Shorthand: a text reply without a tool call.
        #[arg(long, value_name = "TEXT")]
        say: Option<String>,
        /// Shorthand: one `finish` call with this summary (the built-in agent
        /// then stops and the workspace is graded).
        #[arg(long, value_name = "SUMMARY")]
        finish: Option<String>,
        /// The request this reply answers (its number, shown by `model turn`):
        /// when another request is waiting, nothing is sent.
        #[arg(long, value_name = "N")]
        request: Option<u64>,
        /// How long to wait for the next request, in seconds.
        #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
        wait: f64,
    },
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The merged output: a new results file (for `grade` shards) or a run
    /// folder without results.jsonl and campaign.json (for `run` shards).
    #[arg(value_name = "OUT")]
    pub out: PathBuf,
    /// Every shard's output: its results file (`grade --shard I/N --out`) or
    /// its run folder (`run --shard I/N --out`), one per shard, any order.
    #[arg(value_name = "SHARD_OUT", required = true)]
    pub shards: Vec<PathBuf>,
    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// How the shards are submitted to Slurm.
#[derive(Debug, Clone, Args)]
pub struct SlurmOptions {
    /// Shards: array tasks 1 to N, each running `--shard $SLURM_ARRAY_TASK_ID/N`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub shards: u64,
    /// The Slurm partition (sbatch --partition).
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    /// The time limit of each array task and of the merge (sbatch --time).
    #[arg(long, value_name = "T")]
    pub time: Option<String>,
    /// CPUs per array task (sbatch --cpus-per-task); without -j each shard
    /// grades with that many in parallel.
    #[arg(long, default_value_t = 1, value_name = "C", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub cpus_per_task: u64,
    /// Another sbatch option for the array, such as `--mem=8G` (repeatable).
    #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Print the scripts instead of submitting them.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// `pdl-swe grade` as a job array: --out is a folder that gets
    /// shards/<I>.jsonl, slurm/ (scripts, logs, submitted.json) and the merged
    /// results.jsonl.
    Grade(Box<SlurmGradeArgs>),
    /// `pdl-swe run` as a job array: --out is a folder that gets shards/<I>/
    /// (each shard's run folder), slurm/ and, merged, the campaign's run folder.
    Run(Box<SlurmRunArgs>),
    /// Each shard's progress (from sacct, or scontrol, and its output) and
    /// the merge job's.
    Status {
        /// The --out folder of `pdl-swe slurm grade` or `slurm run`.
        #[arg(value_name = "RUN_DIR")]
        dir: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Debug, Args)]
pub struct SlurmGradeArgs {
    #[command(flatten)]
    pub slurm: SlurmOptions,
    #[command(flatten)]
    pub grade: GradeArgs,
}

#[derive(Debug, Args)]
pub struct SlurmRunArgs {
    #[command(flatten)]
    pub slurm: SlurmOptions,
    #[command(flatten)]
    pub run: RunCampaignArgs,
}

/// `pdl-swe serve`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Largest dataset upload, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 20)]
    pub max_dataset_bytes: usize,
    /// Largest predictions file, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub max_predictions_bytes: usize,
    /// Longest a request may take, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub request_timeout: u64,
    /// How long a worker's claim on a job holds without renewal, in seconds
    /// (a killed service's jobs are taken again after this long).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, hide = true)]
    pub lease_seconds: u64,
    /// How often a submitter's view of a run moves on, in seconds: a record
    /// shows at the next step after it is stored, so when it appears tells
    /// its grading's time only to the step (admins see records at once).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub publish_every: f64,
}

/// Where the service keeps its state.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The data folder: datasets, and the SQLite database unless --database.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A database URL instead of SQLite in the data folder (postgres://…).
    #[arg(long, value_name = "URL", env = "PDL_SWE_DATABASE")]
    pub database: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it (shown once; only its hash is stored).
    Create(KeyCreateArgs),
}

/// A key's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleChoice {
    /// Uploads datasets, sees every run.
    Admin,
    /// Submits predictions.
    Submitter,
}

#[derive(Debug, Args)]
pub struct KeyCreateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The key's name (datasets are granted to names).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Its role.
    #[arg(long, value_enum)]
    pub role: RoleChoice,
    /// Runs it may start in any 24 hours.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub runs_per_day: i64,
    /// Predictions in one run.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub predictions_per_run: i64,
    /// Bytes it may upload in any 24 hours.
    #[arg(long, value_name = "BYTES", default_value_t = 2 << 30)]
    pub upload_bytes_per_day: i64,
    /// Requests it may make in any minute.
    #[arg(long, value_name = "N", default_value_t = 600)]
    pub requests_per_minute: i64,
}

/// The service a client command talks to.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The service's URL (the key comes from PDL_SWE_API_KEY).
    #[arg(long, value_name = "URL", env = "PDL_SWE_SERVER")]
    pub server: String,
}

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// Upload a dataset (an admin key): .jsonl, .parquet or a .tar of task trees.
    Upload {
        #[command(flatten)]
        server: ServerArgs,
        /// The dataset's name on the service.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// The dataset file.
        path: PathBuf,
        /// A key name that may use it (repeatable; none: every submitter).
        #[arg(long = "grant", value_name = "KEY_NAME")]
        grants: Vec<String>,
        /// Show rung names and landed rungs to submitters.
        #[arg(long)]
        public_ladders: bool,
    },
    /// The datasets this key may use.
    List {
        #[command(flatten)]
        server: ServerArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The dataset to grade against.
    #[arg(long, value_name = "NAME")]
    pub dataset: String,
    /// Predictions: JSONL or a JSON list of {instance_id, model_name_or_path, model_patch}.
    pub file: PathBuf,
    /// Follow the run's progress until it is finished.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: write the result records (the submitter's view) here, one per line.
    #[arg(long, value_name = "FILE", requires = "wait")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// This key's runs.
    List {
        #[command(flatten)]
        server: ServerArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// One run's progress.
    Show {
        #[command(flatten)]
        server: ServerArgs,
        /// The run.
        id: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// One run's result records (the submitter's view).
    Report {
        #[command(flatten)]
        server: ServerArgs,
        /// The run.
        id: String,
        /// Write the records here, one per line (default: a table).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Delete a run and its records.
    Delete {
        #[command(flatten)]
        server: ServerArgs,
        /// The run.
        id: String,
    },
}
