//! Campaigns ([`run_campaign`]): tasks × agents × samples, in parallel, through
//! one metering gateway, resumable.
//!
//! One plan on the [`pipeline`](pdl_grader::pipeline) of every command: the
//! ladder and the in-campaign calibration (every rung, gold and do-nothing of
//! each task), then the episodes, which the pipeline runs through this
//! module's [`EpisodeRunner`] (the gateway and the agents live here). Every
//! result is appended to `RUN_DIR/results.jsonl` as soon as it is known, with
//! its resume key ([`pdl_grader::pipeline::JobKey`]). Episodes are keyed by
//! content (task digest, agent, model, sample, prompt version), so a campaign
//! killed at any point resumes where it stopped, with nothing lost and nothing
//! graded twice.
//!
//! On resume every record is checked before it counts as done: its reward must
//! be finite, in [0, 1] and equal (±1e-9) to the task's formula over its
//! components, and an episode record must carry the key, agent and model of an
//! episode of this campaign. A record that fails is ignored (its episode runs
//! again) and reported as a pipeline [`Event::Warning`]. Only episodes whose
//! record says `harness_error` are run again; the new record keeps the earlier
//! outcomes in `episode.previous_outcomes` (and `episode.rerun_of`).
//!
//! The token budget belongs to an episode slot (its key), not to one attempt:
//! the gateway appends the slot's spend to `ledger/` as calls are reserved and
//! settled, and an attempt starts from what the earlier ones spent (a harness
//! error, or a harness killed in the middle of an episode, buys no fresh
//! budget). Every episode record carries the slot's tokens, harness errors
//! included.
//!
//! Every file under `RUN_DIR` is opened through [`pdl_fs::Dir`]: no symbolic
//! link is followed and only regular files are used, so a link planted in a
//! run folder is an error naming it, never a write elsewhere. The folders that
//! hold what agents produced are private to the harness (mode 0700), and a run
//! folder or work folder that an agent could read (inside an `--agent-path`,
//! or a system folder every sandbox binds) is refused ([`check_private_folders`]).
//!
//! ```text
//! RUN_DIR/
//!   campaign.json                         the settings of the latest start
//!   results.jsonl                         one result record per line
//!   trajectories/<task_id>/<episode>.jsonl every model exchange of an episode
//!   patches/<task_id>/<episode>.diff      the episode's final patch
//!   logs/<task_id>/<episode>.log          an external agent's own output
//!   ledger/<task_id>/<episode>.jsonl      the slot's token spend, across attempts
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pdl_grader::pipeline::{
    done_keys, EpisodeJob, EpisodeRunner, EpisodeSession, Event, Job, Phase, Pipeline,
    PipelineError, Plan, Resume, Shard, ShardManifest,
};
use pdl_grader::record::{
    EpisodeInfo, ModelRoute, PriorOutcome, RecordLog, ScratchFsInfo, TokenCount,
};
use pdl_grader::{
    Grader, LadderFingerprints, ResultRecord, Submission, SubmissionContent, SubmissionKind,
    Verdict,
};
use pdl_sandbox::ProcessRunner;
use pdl_task::Task;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::agent::builtin::{prompt_version, run_builtin};
use crate::agent::chat::ChatClient;
use crate::agent::tools::Toolbox;
use crate::agent::{
    base_environment, final_patch, prepare_workspace, run_external, AgentRun, EndReason,
    EpisodeLimits, ExternalAgent, GatewayRoute, TaskBrief,
};
use crate::{
    EpisodeHandle, EpisodeSpec, Gateway, GatewayConfig, Ledger, RequestPolicy, Spent,
    UpstreamConfig, Usage,
};

/// The port the gateway answers on inside every sandbox.
pub const SANDBOX_GATEWAY_PORT: u16 = 4141;

/// An agent to evaluate.
#[derive(Debug, Clone)]
pub enum AgentSpec {
    /// The built-in tool-calling agent.
    Builtin,
    /// A command-line agent.
    Command(ExternalAgent),
}

impl AgentSpec {
    /// The agent's name in records: `builtin` or `cmd:<command>`.
    pub fn label(&self) -> String {
        match self {
            AgentSpec::Builtin => "builtin".into(),
            AgentSpec::Command(a) => format!("cmd:{}", a.command),
        }
    }

    /// What identifies the agent's behaviour, for episode keys.
    fn descriptor(&self) -> String {
        match self {
            AgentSpec::Builtin => prompt_version(),
            AgentSpec::Command(a) => {
                let mut env: Vec<_> = a.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                env.sort();
                format!("cmd\0{}\0{}", a.command, env.join("\0"))
            }
        }
    }

    fn slug(&self) -> String {
        match self {
            AgentSpec::Builtin => "builtin".into(),
            AgentSpec::Command(a) => {
                let words: String = a
                    .command
                    .split_whitespace()
                    .next()
                    .unwrap_or("cmd")
                    .rsplit('/')
                    .next()
                    .unwrap_or("cmd")
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                    .take(24)
                    .collect();
                format!("cmd-{words}")
            }
        }
    }
}

/// Everything a campaign needs to know.
#[derive(Debug, Clone)]
pub struct CampaignSettings {
    /// The run folder.
    pub run_dir: PathBuf,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// Episodes per task and agent.
    pub samples: usize,
    /// The model evaluated (sent by the built-in agent; given to external agents).
    pub model: String,
    /// The real model provider.
    pub upstream: UpstreamConfig,
    /// Episodes in parallel.
    pub parallelism: usize,
    /// Bounds on each episode.
    pub limits: EpisodeLimits,
    /// Keep each episode's final workspace under `RUN_DIR/workspaces/`.
    pub keep_workspaces: bool,
    /// Where the dataset came from (for `campaign.json`).
    pub dataset: String,
    /// Provider-side tools the campaign enables (`--allow-provider-tool`);
    /// every other one is refused by the gateway.
    pub allowed_provider_tools: BTreeSet<String>,
    /// Bounds on the gateway's requests and connections.
    pub gateway_limits: crate::GatewayLimits,
    /// Bounds on each episode's own file system (its workspace, unless kept,
    /// and the agent's scratch).
    pub scratch: pdl_sandbox::ScratchBounds,
    /// Run only this slice of the campaign (`--shard I/N`); its manifest is
    /// `RUN_DIR/shard.json`.
    pub shard: Option<Shard>,
}

/// Why a campaign could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The run folder cannot be used.
    #[error("run folder {path}: {message}")]
    RunDir {
        /// The folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The gateway did not start.
    #[error("model gateway: {0}")]
    Gateway(String),
    /// A file of the run folder cannot be used (a link, not a regular file, ...).
    #[error(transparent)]
    File(#[from] pdl_fs::FsError),
    /// The run folder or the work folder is readable by agents.
    #[error(transparent)]
    Exposed(#[from] ExposedFolder),
    /// The episodes could not start.
    #[error("{0}")]
    Episodes(String),
}

/// Host folders every sandbox binds read-only (`pdl_sandbox`'s system
/// folders): whatever lies inside them, every agent can read.
pub const SANDBOX_SYSTEM_FOLDERS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Folders of the run folder that hold what agents produced (patches,
/// trajectories, logs, kept workspaces, ledgers): private to the harness.
const PRIVATE_FOLDERS: &[&str] = &["trajectories", "patches", "logs", "ledger", "workspaces"];

/// A folder of the harness's that agents could read: the run folder holds
/// every episode's patch and the hidden test names, the work folder the
/// grading trees (hidden tests included) and the other episodes' workspaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ExposedFolder {
    /// Which folder: `the run folder (--out)` or `the work folder (--work-dir)`.
    pub folder_kind: &'static str,
    /// The folder, resolved.
    pub folder: PathBuf,
    /// The path agents can read, resolved.
    pub readable: PathBuf,
    /// True when `readable` is one of [`SANDBOX_SYSTEM_FOLDERS`], false for an
    /// `--agent-path`.
    pub system: bool,
}

impl ExposedFolder {
    fn describe(&self) -> String {
        let (folder, readable) = (self.folder.display(), self.readable.display());
        let kind = self.folder_kind;
        let advice = if kind.starts_with("the dataset") || kind.starts_with("the cache") {
            "agents could read the hidden tests, the reference solutions and the ladders \
             through it; keep it outside every --agent-path"
        } else {
            "agents could read other episodes' patches and workspaces, hidden test \
             names and grading trees through it; choose a folder outside every \
             --agent-path and outside the system folders every sandbox reads"
        };
        if self.system {
            format!("{kind} {folder} lies inside {readable}, a folder every sandbox binds read-only: {advice}")
        } else if self.folder.starts_with(&self.readable) {
            format!("{kind} {folder} lies inside --agent-path {readable}: {advice}")
        } else {
            format!("--agent-path {readable} lies inside {kind} {folder}: {advice}")
        }
    }
}

/// `path` made absolute and free of links where it exists: the deepest
/// existing ancestor canonicalized, the rest appended without `.` and `..`.
fn resolve_folder(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    let base = loop {
        if let Ok(real) = existing.canonicalize() {
            break real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => break existing.to_path_buf(),
        }
    };
    let mut resolved = base;
    for part in rest.iter().rev() {
        for c in Path::new(part).components() {
            match c {
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::Normal(name) => resolved.push(name),
                _ => {}
            }
        }
    }
    resolved
}

/// True when `folder` lies inside `outer` (or is it): by path, or by identity
/// (device and inode) of `outer` and one of `folder`'s existing ancestors, so
/// that a bind mount or another name of the same folder is no way around.
fn lies_within(folder: &Path, outer: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if folder.starts_with(outer) {
        return true;
    }
    let Ok(target) = std::fs::metadata(outer) else {
        return false;
    };
    folder.ancestors().any(|ancestor| {
        std::fs::metadata(ancestor)
            .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
    })
}

/// Whether a folder's mode keeps agents out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderAccess {
    /// Agents run under a host uid of their own with no capability (the
    /// namespace sandbox of a harness running as root): a folder of the
    /// harness's with mode 0700 is closed to them, wherever it lies.
    ModeKeepsAgentsOut,
    /// Agents run as the harness's own user (an unprivileged harness, or no
    /// sandbox): only a folder outside everything they can see is private.
    SameUser,
}

impl FolderAccess {
    /// What holds for agents run by `runner` from this process.
    pub fn of(runner: &dyn ProcessRunner) -> FolderAccess {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root && runner.kind() == pdl_sandbox::SandboxKind::Namespaces {
            FolderAccess::ModeKeepsAgentsOut
        } else {
            FolderAccess::SameUser
        }
    }
}

/// Checks that no agent can read the run folder or the work folder. A folder
/// inside a folder every sandbox binds read-only ([`SANDBOX_SYSTEM_FOLDERS`])
/// is refused, and so is a work folder that lies inside an `agent_paths`
/// entry or holds one. A run folder that does is refused when agents run as
/// the harness's own user; when its mode keeps them out
/// ([`FolderAccess::ModeKeepsAgentsOut`]) it is returned, to be made 0700
/// before anything is written in it ([`make_private`]). Paths are
/// compared after following links, component by component.
pub fn check_private_folders(
    run_dir: &Path,
    work_root: Option<&Path>,
    agent_paths: &[PathBuf],
    access: FolderAccess,
) -> Result<Vec<PathBuf>, ExposedFolder> {
    let readable: Vec<(PathBuf, bool)> = agent_paths
        .iter()
        .map(|p| (resolve_folder(p), false))
        .chain(
            SANDBOX_SYSTEM_FOLDERS
                .iter()
                .map(|p| (resolve_folder(Path::new(p)), true)),
        )
        .collect();
    // The work folder holds the sandboxes' own mounts: binding an agent path
    // above it would have to reveal them, so it is never allowed there.
    let folders = [
        Some(("the run folder (--out)", run_dir, true)),
        work_root.map(|w| ("the work folder (--work-dir)", w, false)),
    ];
    let mut private = Vec::new();
    for (folder_kind, given, may_close) in folders.into_iter().flatten() {
        let folder = resolve_folder(given);
        for (path, system) in &readable {
            let exposed = lies_within(&folder, path) || (!system && lies_within(path, &folder));
            if !exposed {
                continue;
            }
            if !system && may_close && access == FolderAccess::ModeKeepsAgentsOut {
                if !private.contains(&given.to_path_buf()) {
                    private.push(given.to_path_buf());
                }
                continue;
            }
            return Err(ExposedFolder {
                folder_kind,
                folder,
                readable: path.clone(),
                system: *system,
            });
        }
    }
    Ok(private)
}

/// Refuses a dataset or a cache folder that an agent could read: one that lies
/// inside an `agent_paths` entry. A dataset holds the hidden tests
/// and the reference solutions; the cache holds the ladders (which hidden tests
/// each rung passes). Their files are the user's, so no mode can be relied on.
pub fn check_hidden_inputs(
    dataset: Option<&Path>,
    cache_dir: &Path,
    agent_paths: &[PathBuf],
) -> Result<(), ExposedFolder> {
    let inputs = [
        dataset.map(|d| ("the dataset (--dataset)", d)),
        Some(("the cache folder (--cache-dir)", cache_dir)),
    ];
    for (folder_kind, given) in inputs.into_iter().flatten() {
        let folder = resolve_folder(given);
        for path in agent_paths.iter().map(|p| resolve_folder(p)) {
            // An agent path inside them shows the agent only that folder.
            if lies_within(&folder, &path) {
                return Err(ExposedFolder {
                    folder_kind,
                    folder,
                    readable: path,
                    system: false,
                });
            }
        }
    }
    Ok(())
}

/// Creates each folder if missing and sets its mode to 0700: what it holds is
/// then closed to agents that can see the folder through an `--agent-path`.
pub fn make_private(folders: &[PathBuf]) -> Result<(), CampaignError> {
    use std::os::unix::fs::PermissionsExt;
    for folder in folders {
        let made = std::fs::create_dir_all(folder).and_then(|()| {
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))
        });
        if let Err(e) = made {
            return Err(CampaignError::RunDir {
                path: folder.clone(),
                message: format!("cannot make it private to the harness (mode 0700): {e}"),
            });
        }
    }
    Ok(())
}

/// What a finished campaign produced.
#[derive(Debug)]
pub struct CampaignOutcome {
    /// Every record in `results.jsonl`, old and new.
    pub records: Vec<ResultRecord>,
    /// Records graded in this run.
    pub new_records: usize,
}

fn sha(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The content key of an episode.
pub fn episode_key(task: &Task, agent: &AgentSpec, model: &str, sample: usize) -> String {
    sha(&[
        &task.digest(),
        &agent.descriptor(),
        model,
        &sample.to_string(),
    ])[..20]
        .to_string()
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Runs a campaign on the [`pipeline`](pdl_grader::pipeline): the ladder and
/// calibration phases (every rung, gold and do-nothing of each task), then the
/// episodes, each skipped when `results.jsonl` already has its record (by the
/// pipeline's resume key; a `harness_error` record runs again). `grader`
/// grades calibration submissions and final workspaces; `runner` runs every
/// agent process. Warnings and progress go to `on_event`.
pub fn run_campaign(
    settings: &CampaignSettings,
    tasks: &[Task],
    grader: &Grader,
    runner: Arc<dyn ProcessRunner>,
    mut on_event: impl FnMut(Event<'_>),
) -> Result<CampaignOutcome, CampaignError> {
    let run_dir = &settings.run_dir;
    let dir_err = |message: String| CampaignError::RunDir {
        path: run_dir.clone(),
        message,
    };
    let agent_paths: Vec<PathBuf> = settings
        .agents
        .iter()
        .filter_map(|a| match a {
            AgentSpec::Command(agent) => Some(agent.readable.iter().cloned()),
            AgentSpec::Builtin => None,
        })
        .flatten()
        .collect();
    let private = check_private_folders(
        run_dir,
        Some(grader.work_root()),
        &agent_paths,
        FolderAccess::of(grader.runner()),
    )?;
    make_private(&private)?;
    // Every run folder is the harness's alone: a later campaign's agent path
    // may come to hold it, and it names the hidden tests and their outcomes.
    make_private(&[run_dir.to_path_buf()])?;
    let dir = pdl_fs::Dir::create(run_dir)?;
    // What agents produced is the harness's alone. A folder that cannot be
    // made private here (a link someone planted) is refused, with its path,
    // when an episode first writes beneath it.
    for name in PRIVATE_FOLDERS {
        if *name == "workspaces" && !settings.keep_workspaces {
            continue;
        }
        if let Ok(folder) = dir.open_dir(Path::new(name), true) {
            let _ = folder.set_mode(0o700);
        }
    }
    let results_path = run_dir.join("results.jsonl");
    let mut log = RecordLog::open(&results_path).map_err(|e| dir_err(e.to_string()))?;
    for skipped in log.skipped() {
        on_event(Event::Warning(format!(
            "{}: {skipped}; left in place and ignored",
            results_path.display()
        )));
    }
    let mut records = Vec::new();
    for record in log.existing() {
        match check_record(record, settings, tasks) {
            Ok(()) => records.push(record.clone()),
            Err(reason) => on_event(Event::Warning(format!(
                "{}: ignored the {} record `{}` for {}: {reason}",
                results_path.display(),
                record.kind.name(),
                record.name,
                record.instance_id
            ))),
        }
    }
    write_campaign_json(&dir, settings, tasks, grader)?;

    let mut plan = plan_campaign(settings, tasks, &records);
    if let Some(shard) = settings.shard {
        // The whole campaign, as one machine would plan it, names every
        // shard's records in order; this shard runs its slice.
        let whole = plan_campaign(settings, tasks, &[]);
        ShardManifest::new("run", shard, &whole, tasks)
            .write_or_check(&ShardManifest::path_for_run_dir(run_dir))
            .map_err(|e| dir_err(e.to_string()))?;
        plan = plan.shard(tasks, shard);
    }
    let episodes = CampaignEpisodes {
        dir: &dir,
        settings,
        grader,
        runner: &runner,
    };
    let pipeline = Pipeline {
        grader,
        tasks,
        parallelism: settings.parallelism,
        episodes: Some(&episodes),
    };
    let outcome = pipeline
        .run(&plan, &mut log, &mut on_event)
        .map_err(|e| match e {
            PipelineError::Write(e) => dir_err(format!("cannot write results.jsonl: {e}")),
            PipelineError::Episodes(message) => CampaignError::Episodes(message),
        })?;
    let new_records = outcome.stats.recorded;
    records.extend(outcome.records().cloned());
    Ok(CampaignOutcome {
        records,
        new_records,
    })
}

/// The campaign's plan: the ladder phase (every rung), the calibration phase
/// (gold and do-nothing of each task), then tasks × agents × samples episodes,
/// each left out when `records` (the run folder's checked records) has it.
/// The fingerprints of rungs measured by an earlier start come from their
/// records.
fn plan_campaign(settings: &CampaignSettings, tasks: &[Task], records: &[ResultRecord]) -> Plan {
    let done = done_keys(records, Resume::RetryHarnessErrors);
    let order: Vec<usize> = (0..tasks.len()).collect();
    let mut plan = Plan::default();
    for (t, task) in tasks.iter().enumerate() {
        let digest = task.digest();
        let earlier = LadderFingerprints::from_records(
            task,
            records
                .iter()
                .filter(|r| r.kind == SubmissionKind::Rung && r.provenance.task_digest == digest),
        );
        if !earlier.rungs.is_empty() {
            plan.known_rungs.insert(t, earlier.rungs);
        }
    }
    plan.add_ladders(tasks, &order, true, &done);
    let calibration = plan.phase_mut(Phase::Calibration, true);
    for &t in &order {
        calibration.push_unless_done(Job::grade(tasks, t, Submission::gold(&tasks[t]), 0), &done);
        calibration.push_unless_done(Job::grade(tasks, t, Submission::noop(), 0), &done);
    }
    // Earlier outcomes of episodes run again (harness errors only).
    let mut previous: HashMap<String, Vec<PriorOutcome>> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r.kind == SubmissionKind::Episode && r.verdict == Verdict::HarnessError)
    {
        if let Some(key) = r.episode.as_ref().and_then(|e| e.key.as_ref()) {
            previous.entry(key.clone()).or_default().push(PriorOutcome {
                verdict: r.verdict,
                detail: r.detail.clone(),
                started_at: r.provenance.started_at.clone(),
            });
        }
    }
    let episodes = plan.phase_mut(Phase::Episodes, true);
    for (t, task) in tasks.iter().enumerate() {
        for (a, agent) in settings.agents.iter().enumerate() {
            for sample in 0..settings.samples {
                let key = episode_key(task, agent, &settings.model, sample);
                let job = Job::episode(
                    t,
                    EpisodeJob {
                        agent: a,
                        agent_label: agent.label(),
                        model: settings.model.clone(),
                        sample,
                        previous: previous.get(&key).cloned().unwrap_or_default(),
                        episode_key: key,
                    },
                );
                episodes.push_unless_done(job, &done);
            }
        }
    }
    plan
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

fn write_campaign_json(
    dir: &pdl_fs::Dir,
    settings: &CampaignSettings,
    tasks: &[Task],
    grader: &Grader,
) -> Result<(), pdl_fs::FsError> {
    let name = Path::new("campaign.json");
    let earlier = dir
        .read(name, 16 << 20)?
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let started_at = earlier
        .as_ref()
        .and_then(|v| {
            v.get("started_at")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(now);
    // Every episode any start of the campaign planned: the report counts no
    // other episode record.
    let mut keys: BTreeSet<String> = earlier
        .as_ref()
        .and_then(|v| v.get("episode_keys")?.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    for task in tasks {
        for agent in &settings.agents {
            for sample in 0..settings.samples {
                keys.insert(episode_key(task, agent, &settings.model, sample));
            }
        }
    }
    let value = json!({
        "started_at": started_at,
        "resumed_at": now(),
        "harness_version": pdl_grader::HARNESS_VERSION,
        "dataset": settings.dataset,
        "model": settings.model,
        "api": settings.upstream.api.name(),
        "base_url": settings.upstream.base_url,
        "agents": settings.agents.iter().map(AgentSpec::label).collect::<Vec<_>>(),
        "samples": settings.samples,
        "tasks": tasks.iter().map(|t| t.row.instance_id.clone()).collect::<Vec<_>>(),
        "tiers": tasks.iter().map(|t| (t.row.instance_id.clone(), t.row.tier.clone())).collect::<BTreeMap<_, _>>(),
        "allowed_provider_tools": settings.allowed_provider_tools,
        "episode_keys": keys,
        "settings": {
            "parallelism": settings.parallelism,
            "max_steps": settings.limits.max_steps,
            "wall_time_s": settings.limits.wall_time.as_secs_f64(),
            "shell_timeout_s": settings.limits.shell_timeout.as_secs_f64(),
            "sandbox": grader.runner().kind().name(),
            "prompt_version": prompt_version(),
            "max_request_bytes": settings.gateway_limits.max_request_bytes,
        },
    });
    dir.write_atomic(
        name,
        &serde_json::to_vec_pretty(&value).expect("settings serialize"),
    )
}

/// The tolerance of a record's reward against its formula.
const REWARD_TOLERANCE: f64 = 1e-9;

/// Why an earlier record cannot count as done in this campaign, if it cannot.
fn check_record(
    record: &ResultRecord,
    settings: &CampaignSettings,
    tasks: &[Task],
) -> Result<(), String> {
    let task = tasks
        .iter()
        .find(|t| t.row.instance_id == record.instance_id);
    let Some(task) = task else {
        // Another campaign's task in the same folder: it is not resumed here.
        return Ok(());
    };
    check_reward(record, task)?;
    if record.kind != SubmissionKind::Episode {
        return Ok(());
    }
    let episode = record.episode.as_ref().ok_or("it has no episode fields")?;
    let key = episode.key.as_deref().ok_or("it has no episode key")?;
    let agent_label = episode.agent.as_deref().ok_or("it names no agent")?;
    let model = episode.model.as_deref().ok_or("it names no model")?;
    if model != settings.model || record.model_name_or_path.as_deref() != Some(model) {
        return Err(format!(
            "its model `{model}` is not the campaign's `{}`",
            settings.model
        ));
    }
    if record.name != agent_label {
        return Err(format!(
            "its name `{}` is not its agent `{agent_label}`",
            record.name
        ));
    }
    let sample = episode.sample.ok_or("it has no sample number")? as usize;
    let agent = settings
        .agents
        .iter()
        .find(|a| a.label() == agent_label)
        .ok_or_else(|| format!("its agent `{agent_label}` is not one of this campaign's"))?;
    if sample >= settings.samples || episode_key(task, agent, &settings.model, sample) != key {
        return Err(format!(
            "its key `{key}` is not the key of sample {sample} of `{agent_label}` on this task"
        ));
    }
    Ok(())
}

/// The reward must be finite, in [0, 1], and what the task's formula gives for
/// the record's components (0 for verdicts that score nothing).
fn check_reward(record: &ResultRecord, task: &Task) -> Result<(), String> {
    let reward = record.reward;
    if !reward.is_finite() || !(0.0..=1.0).contains(&reward) {
        return Err(format!("its reward {reward} is not a number in [0, 1]"));
    }
    let c = &record.components;
    for (name, value) in [
        ("hidden_pass_fraction", c.hidden_pass_fraction),
        ("public_regression", c.public_regression),
        ("build_health", c.build_health),
    ] {
        if !value.is_finite() || !(0.0..=1.0).contains(&value) {
            return Err(format!("its component {name} = {value} is not in [0, 1]"));
        }
    }
    let scored = matches!(record.verdict, Verdict::Graded | Verdict::Timeout);
    let expected = if scored {
        let formula = pdl_task::RewardFormula::parse(&task.row.reward_formula)
            .map_err(|e| format!("the task's formula cannot be read: {e}"))?;
        formula
            .terms
            .iter()
            .map(|term| {
                let value = match term.variable {
                    pdl_task::RewardVariable::HiddenPassFraction => c.hidden_pass_fraction,
                    pdl_task::RewardVariable::PublicRegression => c.public_regression,
                    pdl_task::RewardVariable::BuildHealth => c.build_health,
                };
                term.coefficient.to_f64() * value
            })
            .sum::<f64>()
    } else {
        0.0
    };
    if (reward - expected).abs() > REWARD_TOLERANCE {
        return Err(format!(
            "its reward {reward} is not what the task's formula gives for its components ({expected})"
        ));
    }
    Ok(())
}

/// The campaign's side of the pipeline's episodes: starts the gateway and the
/// agents' runtime when the plan has episodes to run.
struct CampaignEpisodes<'a> {
    dir: &'a pdl_fs::Dir,
    settings: &'a CampaignSettings,
    grader: &'a Grader,
    runner: &'a Arc<dyn ProcessRunner>,
}

impl EpisodeRunner for CampaignEpisodes<'_> {
    fn start<'s>(
        &'s self,
        warn: &mut dyn FnMut(String),
    ) -> Result<Box<dyn EpisodeSession + 's>, PipelineError> {
        let run_dir = &self.settings.run_dir;
        let failed = |e: CampaignError| PipelineError::Episodes(e.to_string());
        // Scratch file systems of harnesses killed earlier are let go first.
        for path in pdl_sandbox::scratch::detach_orphans() {
            warn(format!(
                "detached the episode file system a killed harness left at {}",
                path.display()
            ));
        }
        // Workspaces and agent scratch: the harness's alone.
        let episodes_root = self.grader.work_root().join("episodes");
        std::fs::create_dir_all(&episodes_root).map_err(|e| {
            failed(CampaignError::RunDir {
                path: run_dir.clone(),
                message: format!("{}: {e}", episodes_root.display()),
            })
        })?;
        set_mode(&episodes_root, 0o700);
        let socket_dir = std::env::temp_dir().join(format!(
            "pdl-gw-{}-{}",
            std::process::id(),
            &sha(&[&run_dir.display().to_string()])[..8]
        ));
        std::fs::create_dir_all(&socket_dir).map_err(|e| {
            failed(CampaignError::Gateway(format!(
                "{}: {e}",
                socket_dir.display()
            )))
        })?;
        set_mode(&socket_dir, 0o755);
        let socket = socket_dir.join("gateway.sock");
        let _ = std::fs::remove_file(&socket);
        let settings = self.settings;
        let mut config = GatewayConfig::new(settings.upstream.clone());
        config.unix_socket = Some(socket.clone());
        config.models = vec![settings.model.clone()];
        config.policy = RequestPolicy {
            model: Some(settings.model.clone()),
            allowed_tools: settings.allowed_provider_tools.clone(),
        };
        config.limits = settings.gateway_limits;
        let gateway =
            Gateway::start(config).map_err(|e| failed(CampaignError::Gateway(e.to_string())))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| {
                failed(CampaignError::Gateway(format!(
                    "cannot start the agent runtime: {e}"
                )))
            })?;
        Ok(Box::new(EpisodeContext {
            dir: self.dir,
            settings,
            grader: self.grader,
            runner: self.runner,
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            gateway: Some(gateway),
            socket,
            socket_dir,
        }))
    }
}

/// A started campaign: the gateway and the agents' runtime, stopped when it
/// is dropped.
struct EpisodeContext<'a> {
    dir: &'a pdl_fs::Dir,
    settings: &'a CampaignSettings,
    grader: &'a Grader,
    runner: &'a Arc<dyn ProcessRunner>,
    /// Taken only when the context is dropped.
    gateway: Option<Gateway>,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    socket: PathBuf,
    socket_dir: PathBuf,
}

impl Drop for EpisodeContext<'_> {
    fn drop(&mut self) {
        if let Some(gateway) = self.gateway.take() {
            gateway.shutdown();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.socket_dir);
    }
}

impl EpisodeSession for EpisodeContext<'_> {
    fn run(&self, task: &Task, job: &EpisodeJob, ladder: &LadderFingerprints) -> ResultRecord {
        self.run_episode(task, job, ladder)
    }
}

/// One episode being run: what the steps of [`EpisodeContext::run_episode`] share.
#[derive(Clone, Copy)]
struct EpisodeRun<'a> {
    task: &'a Task,
    job: &'a EpisodeJob,
    agent: &'a AgentSpec,
    paths: &'a EpisodePaths,
    scratch: &'a Path,
    workspace: &'a Path,
}

/// Where an episode's files go, relative to the run folder.
struct EpisodePaths {
    trajectory: PathBuf,
    patch: PathBuf,
    log: PathBuf,
    ledger: PathBuf,
}

/// The most of an external agent's log kept in the run folder (its output is
/// capped at 16 MiB by the sandbox).
const MAX_LOG_BYTES: u64 = 17 << 20;

impl EpisodeContext<'_> {
    fn gateway(&self) -> &Gateway {
        self.gateway
            .as_ref()
            .expect("the gateway runs until the context is dropped")
    }

    /// Copies the agent's log from its scratch folder (where the agent could
    /// have put a link) into the run folder, following no link on either side.
    fn keep_log(&self, agent_scratch: &Path, log: &Path) {
        let source = pdl_fs::Dir::open(agent_scratch)
            .and_then(|d| d.open_file(Path::new("agent.log"), pdl_fs::OpenMode::Read));
        if let Ok(mut source) = source {
            let _ = self.dir.copy_from(log, &mut source, MAX_LOG_BYTES);
        }
    }

    fn run_episode(
        &self,
        task: &Task,
        job: &EpisodeJob,
        ladder: &LadderFingerprints,
    ) -> ResultRecord {
        let agent = &self.settings.agents[job.agent];
        let name = format!("{}-s{}-{}", agent.slug(), job.sample, &job.episode_key[..8]);
        let rel = |folder: &str, ext: &str| {
            PathBuf::from(folder)
                .join(&task.row.task_id)
                .join(format!("{name}.{ext}"))
        };
        let paths = EpisodePaths {
            trajectory: rel("trajectories", "jsonl"),
            patch: rel("patches", "diff"),
            log: rel("logs", "log"),
            ledger: rel("ledger", "jsonl"),
        };
        let scratch = self
            .grader
            .work_root()
            .join("episodes")
            .join(&job.episode_key);
        let kept = PathBuf::from("workspaces")
            .join(&task.row.task_id)
            .join(&name);
        let workspace = if self.settings.keep_workspaces {
            self.settings.run_dir.join(&kept)
        } else {
            scratch.join("workspace")
        };
        let mut episode = EpisodeInfo {
            key: Some(job.episode_key.clone()),
            agent: Some(agent.label()),
            model: Some(self.settings.model.clone()),
            sample: Some(job.sample as u64),
            token_budget: Some(task.row.token_budget),
            prompt_version: match agent {
                AgentSpec::Builtin => Some(prompt_version()),
                AgentSpec::Command(_) => None,
            },
            model_route: Some(ModelRoute {
                provider: self.settings.upstream.api.name().to_string(),
                base_url: self.settings.upstream.base_url.clone(),
                model: self.settings.model.clone(),
                gateway: self.gateway().base_url(),
            }),
            allowed_provider_tools: Some(
                self.settings
                    .allowed_provider_tools
                    .iter()
                    .cloned()
                    .collect(),
            ),
            trajectory: Some(paths.trajectory.display().to_string()),
            ..EpisodeInfo::default()
        };
        if let Some(first) = job.previous.first() {
            episode.rerun_of = Some(first.clone());
            episode.previous_outcomes = Some(job.previous.clone());
        }
        // What earlier attempts of this slot spent comes first: whatever
        // happens next, the record carries the slot's tokens.
        let ledger = self
            .dir
            .open_file(&paths.ledger, pdl_fs::OpenMode::ReadAppend)
            .map_err(|e| e.to_string())
            .and_then(|file| {
                Ledger::resume(file, self.dir.display_path(&paths.ledger))
                    .map_err(|e| e.to_string())
            });
        if let Ok(ledger) = &ledger {
            episode.ledger = Some(paths.ledger.display().to_string());
            record_carried(&mut episode, ledger.carried());
            let interrupted = ledger.interrupted();
            if interrupted.total() > 0 {
                episode.interrupted = Some(TokenCount {
                    tokens_in: interrupted.input_tokens,
                    tokens_out: interrupted.output_tokens,
                });
            }
        }
        let ledger_opened = ledger.is_ok();
        let kept_ok = if self.settings.keep_workspaces {
            self.dir
                .open_dir(&kept, true)
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            Ok(())
        };
        let result = kept_ok.and(ledger).and_then(|ledger| {
            let ctx = EpisodeRun {
                task,
                job,
                agent,
                paths: &paths,
                scratch: &scratch,
                workspace: &workspace,
            };
            self.episode(&ctx, ledger, ladder, &mut episode)
        });
        let mut record = match result {
            Ok(record) => record,
            Err(message) => harness_error_record(task, agent, &self.settings.model, message),
        };
        // The attempt is over: its spend is carried into any later attempt
        // of the slot (only a harness error is run again). An attempt cut
        // short because the harness was asked to stop is not recorded, and
        // stays open: like one of a killed harness, it is reported, not
        // charged, when the slot runs again.
        if ledger_opened && !pdl_sandbox::interrupt::requested() {
            let closed = self
                .dir
                .open_file(&paths.ledger, pdl_fs::OpenMode::ReadAppend)
                .map_err(|e| e.to_string())
                .and_then(|file| {
                    Ledger::close(file, &self.dir.display_path(&paths.ledger))
                        .map_err(|e| e.to_string())
                });
            if let Err(error) = closed {
                episode.ledger_error = Some(error);
            }
        }
        record.episode = Some(episode);
        if !self.settings.keep_workspaces {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        record
    }

    fn episode(
        &self,
        ctx: &EpisodeRun<'_>,
        ledger: Ledger,
        ladder: &LadderFingerprints,
        episode: &mut EpisodeInfo,
    ) -> Result<ResultRecord, String> {
        let EpisodeRun {
            task,
            job,
            agent,
            paths,
            scratch,
            workspace,
        } = *ctx;
        let _ = std::fs::remove_dir_all(scratch);
        let _ = std::fs::remove_dir_all(workspace);
        std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        // The workspace and the agent's scratch get a file system of their
        // own, so that no agent can take the inodes or bytes the harness's
        // other folders (other episodes, grading folders) live on.
        let _scratch_fs = match pdl_sandbox::ScratchFs::mount(scratch, self.settings.scratch) {
            Ok(fs) => {
                episode.scratch_fs = Some(ScratchFsInfo::Own {
                    bytes: fs.bounds().bytes,
                    inodes: fs.bounds().inodes,
                });
                Some(fs)
            }
            Err(e) => {
                episode.scratch_fs = Some(ScratchFsInfo::Shared {
                    shared: format!("no file system of its own ({e}): inodes are bounded only by the run's memory"),
                });
                None
            }
        };
        let env = self
            .grader
            .envs()
            .ensure(task.row.requirements_lock())
            .map_err(|e| e.to_string())?;
        prepare_workspace(&task.row.files, workspace)
            .map_err(|e| format!("cannot prepare the workspace: {e}"))?;
        let trajectory = self
            .dir
            .open_file(&paths.trajectory, pdl_fs::OpenMode::Append)
            .map_err(|e| e.to_string())?;
        let handle = self
            .gateway()
            .open_episode_with(
                EpisodeSpec {
                    id: job.episode_key.clone(),
                    token_budget: task.row.token_budget.max(0) as u64,
                    trajectory_path: self.dir.display_path(&paths.trajectory),
                },
                trajectory,
                ledger,
            )
            .map_err(|e| format!("cannot open the episode at the gateway: {e}"))?;
        let run = self.run_agent(ctx, &env, &handle, episode);
        // The tokens are recorded however the agent's run ended.
        let usage = handle.end();
        record_usage(episode, &usage);
        if let Some(error) = handle.ledger_error() {
            episode.ledger_error = Some(error);
        }
        drop(handle);
        let run = run?;
        let end_reason = if usage.total_tokens() >= task.row.token_budget.max(0) as u64
            && run.end_reason != EndReason::Finished
        {
            EndReason::BudgetExhausted
        } else {
            run.end_reason
        };
        episode.end_reason = Some(end_reason.name().to_string());
        episode.steps = Some(run.steps as u64);
        episode.wall_s = Some(run.wall_s);
        episode.error = Some(run.error);
        episode.summary = Some(run.summary);
        let policy = pdl_grader::PatchPolicy::new(
            &task.row.patch_policy_allowed,
            &task.row.patch_policy_forbidden,
        )
        .map_err(|e| format!("task defect: {e}"))?;
        match final_patch(
            &task.row.files,
            &policy,
            workspace,
            scratch,
            &pdl_grader::changes::TreeLimits::default(),
        ) {
            Ok(patch) => {
                self.dir
                    .write(&paths.patch, patch.as_bytes())
                    .map_err(|e| e.to_string())?;
                episode.patch = Some(paths.patch.display().to_string());
            }
            Err(e) => episode.patch_error = Some(e.to_string()),
        }
        let submission = Submission {
            kind: SubmissionKind::Episode,
            name: agent.label(),
            model_name_or_path: Some(self.settings.model.clone()),
            content: SubmissionContent::Workspace(workspace.to_path_buf()),
        };
        Ok(self.grader.grade(task, &submission, Some(ladder)))
    }

    /// Runs the episode's agent against the open gateway episode. An `Err`
    /// is a fault of the harness (the sandbox could not run the agent).
    fn run_agent(
        &self,
        ctx: &EpisodeRun<'_>,
        env: &pdl_grader::PythonEnv,
        handle: &EpisodeHandle,
        episode: &mut EpisodeInfo,
    ) -> Result<AgentRun, String> {
        let EpisodeRun {
            task,
            agent,
            paths,
            scratch,
            workspace,
            ..
        } = *ctx;
        let brief = TaskBrief {
            problem_statement: task.row.problem_statement.clone(),
            allowed: task.row.patch_policy_allowed.clone(),
            forbidden: task.row.patch_policy_forbidden.clone(),
            token_budget: task.row.token_budget.max(0) as u64,
        };
        let agent_env = base_environment(Some(&env.root.join("bin")));
        let limits = &self.settings.limits;
        let budget_spent = || handle.budget_exhausted();
        match agent {
            AgentSpec::Builtin => {
                let client = ChatClient::new(
                    self.handle.clone(),
                    &self.gateway().base_url(),
                    handle.token(),
                    self.settings.upstream.api,
                    self.settings.upstream.request_timeout + Duration::from_secs(30),
                );
                let tools = Toolbox::new(
                    self.runner.clone(),
                    workspace.to_path_buf(),
                    scratch.join("shell"),
                    agent_env,
                    env.readable_paths.clone(),
                    limits.shell_timeout,
                );
                Ok(run_builtin(
                    &client,
                    self.settings.upstream.api,
                    &self.settings.model,
                    &brief,
                    &tools,
                    limits,
                    &budget_spent,
                ))
            }
            AgentSpec::Command(agent) => {
                let route = GatewayRoute {
                    port: SANDBOX_GATEWAY_PORT,
                    socket: self.socket.clone(),
                    token: handle.token().to_string(),
                    model: self.settings.model.clone(),
                    api: self.settings.upstream.api,
                };
                let calls = || handle.usage().calls as usize;
                let agent_scratch = scratch.join("agent");
                let run = run_external(
                    agent,
                    self.runner,
                    workspace,
                    &agent_scratch,
                    agent_env,
                    env.readable_paths.clone(),
                    &brief,
                    &route,
                    limits,
                    &budget_spent,
                    &calls,
                );
                self.keep_log(&agent_scratch, &paths.log);
                episode.log = Some(paths.log.display().to_string());
                run
            }
        }
    }
}

/// Records what earlier attempts of the slot spent (they count in
/// `tokens_in` and `tokens_out`).
fn record_carried(episode: &mut EpisodeInfo, carried: Spent) {
    episode.tokens_in = Some(carried.input_tokens);
    episode.tokens_out = Some(carried.output_tokens);
    if carried.total() > 0 {
        episode.carried = Some(TokenCount {
            tokens_in: carried.input_tokens,
            tokens_out: carried.output_tokens,
        });
    }
}

/// Records an attempt's usage: the slot's tokens and this attempt's counters.
fn record_usage(episode: &mut EpisodeInfo, usage: &Usage) {
    record_carried(
        episode,
        Spent {
            input_tokens: usage.carried_input_tokens,
            output_tokens: usage.carried_output_tokens,
        },
    );
    episode.tokens_in = Some(usage.input_tokens);
    episode.tokens_out = Some(usage.output_tokens);
    episode.calls = Some(usage.calls);
    episode.refused_calls = Some(usage.refused_calls);
    episode.budget_refusals = Some(usage.budget_refusals);
    episode.unrecorded_refusals = Some(usage.unrecorded_refusals);
    episode.abandoned_calls = Some(usage.abandoned_calls);
    episode.overrun_tokens = Some(usage.overrun_tokens);
}

fn harness_error_record(
    task: &Task,
    agent: &AgentSpec,
    model: &str,
    message: String,
) -> ResultRecord {
    let mut record = ResultRecord {
        instance_id: task.row.instance_id.clone(),
        model_name_or_path: Some(model.to_string()),
        kind: SubmissionKind::Episode,
        name: agent.label(),
        reward: 0.0,
        components: Default::default(),
        verdict: Verdict::HarnessError,
        detail: Some(message),
        tests: BTreeMap::new(),
        policy: Default::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 0.0,
        phases_s: Default::default(),
        provenance: Default::default(),
        suspicious: Vec::new(),
        episode: None,
        job_key: None,
    };
    record.provenance.harness_version = pdl_grader::HARNESS_VERSION.into();
    record.provenance.task_digest = task.digest();
    record
}
