//! Campaigns ([`run_campaign`]): tasks × agents × samples, in parallel, through
//! one metering gateway, resumable.
//!
//! Plan → execute → report, twice: first the in-campaign calibration (gold,
//! do-nothing and every rung of each task), then the episodes. Every result is
//! appended to `RUN_DIR/results.jsonl` as soon as it is known. Episodes are keyed
//! by content (task digest, agent, model, sample, prompt version), so a campaign
//! killed at any point resumes where it stopped, with nothing lost and nothing
//! graded twice.
//!
//! On resume every record is checked before it counts as done: its reward must
//! be finite, in [0, 1] and equal (±1e-9) to the task's formula over its
//! components, and an episode record must carry the key, agent and model of an
//! episode of this campaign. A record that fails is ignored (its episode runs
//! again) and reported as a [`CampaignEvent::Warning`]. Only episodes whose
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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pdl_grader::execute::execute;
use pdl_grader::record::RecordLog;
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
}

/// Progress of a campaign.
#[derive(Debug)]
pub enum CampaignEvent<'a> {
    /// A phase starts: `total` jobs to run, `skipped` already done.
    Phase {
        /// `calibration` or `episodes`.
        name: &'static str,
        /// Jobs to run.
        total: usize,
        /// Jobs found done in `results.jsonl`.
        skipped: usize,
    },
    /// A job finished and its record is on disk.
    Done {
        /// The phase.
        phase: &'static str,
        /// Its record.
        record: &'a ResultRecord,
    },
    /// Something in the run folder was skipped (an unreadable line, a record
    /// that fails its checks); the campaign goes on.
    Warning(String),
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

fn calibration_key(record: &ResultRecord) -> (String, &'static str, String) {
    (
        record.provenance.task_digest.clone(),
        record.kind.name(),
        record.name.clone(),
    )
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

struct Job<'a> {
    task: &'a Task,
    agent: &'a AgentSpec,
    sample: usize,
    key: String,
    /// The outcomes of earlier runs of this episode (harness errors), oldest first.
    previous: Vec<Value>,
}

/// Runs a campaign. `grader` grades calibration submissions and final
/// workspaces; `runner` runs every agent process.
pub fn run_campaign(
    settings: &CampaignSettings,
    tasks: &[Task],
    grader: &Grader,
    runner: Arc<dyn ProcessRunner>,
    mut on_event: impl FnMut(CampaignEvent<'_>),
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
        on_event(CampaignEvent::Warning(format!(
            "{}: {skipped}; left in place and ignored",
            results_path.display()
        )));
    }
    let mut records = Vec::new();
    for record in log.existing() {
        match check_record(record, settings, tasks) {
            Ok(()) => records.push(record.clone()),
            Err(reason) => on_event(CampaignEvent::Warning(format!(
                "{}: ignored the {} record `{}` for {}: {reason}",
                results_path.display(),
                record.kind.name(),
                record.name,
                record.instance_id
            ))),
        }
    }
    write_campaign_json(&dir, settings, tasks, grader)?;

    // Phase 1: calibration in the campaign.
    let done_calibration: HashSet<_> = records
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                SubmissionKind::Gold | SubmissionKind::Noop | SubmissionKind::Rung
            )
        })
        .filter(|r| r.verdict != Verdict::HarnessError)
        .map(calibration_key)
        .collect();
    let mut calibration_jobs: Vec<(&Task, Submission)> = Vec::new();
    let mut skipped = 0;
    for task in tasks {
        let digest = task.digest();
        let mut subs = vec![Submission::gold(task), Submission::noop()];
        subs.extend(
            task.extras
                .ladder
                .iter()
                .filter_map(|r| Submission::rung(task, &r.name)),
        );
        for s in subs {
            if done_calibration.contains(&(digest.clone(), s.kind.name(), s.name.clone())) {
                skipped += 1;
            } else {
                calibration_jobs.push((task, s));
            }
        }
    }
    on_event(CampaignEvent::Phase {
        name: "calibration",
        total: calibration_jobs.len(),
        skipped,
    });
    let mut write_error = None;
    let mut new_records = 0;
    execute(
        &calibration_jobs,
        settings.parallelism,
        |(task, s)| grader.grade(task, s, None),
        |_, rec| {
            if let Err(e) = log.append(&rec) {
                write_error.get_or_insert(e);
            }
            new_records += 1;
            on_event(CampaignEvent::Done {
                phase: "calibration",
                record: &rec,
            });
            records.push(rec);
        },
    );
    if let Some(e) = write_error {
        return Err(dir_err(format!("cannot write results.jsonl: {e}")));
    }
    let ladders: HashMap<String, LadderFingerprints> = tasks
        .iter()
        .map(|t| {
            let digest = t.digest();
            let rungs: Vec<&ResultRecord> = records
                .iter()
                .filter(|r| r.kind == SubmissionKind::Rung && r.provenance.task_digest == digest)
                .collect();
            (
                t.row.instance_id.clone(),
                LadderFingerprints::from_records(t, rungs),
            )
        })
        .collect();

    // Phase 2: the episodes.
    let done_episodes: HashSet<String> = records
        .iter()
        .filter(|r| r.kind == SubmissionKind::Episode && r.verdict != Verdict::HarnessError)
        .filter_map(|r| r.episode.as_ref()?.get("key")?.as_str().map(str::to_string))
        .collect();
    // Earlier outcomes of episodes run again (harness errors only).
    let mut previous: HashMap<String, Vec<Value>> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r.kind == SubmissionKind::Episode && r.verdict == Verdict::HarnessError)
    {
        if let Some(key) = r.episode.as_ref().and_then(|e| e.get("key")?.as_str()) {
            previous.entry(key.to_string()).or_default().push(json!({
                "verdict": r.verdict.name(),
                "detail": r.detail,
                "started_at": r.provenance.started_at,
            }));
        }
    }
    let mut jobs = Vec::new();
    let mut skipped = 0;
    for task in tasks {
        for agent in &settings.agents {
            for sample in 0..settings.samples {
                let key = episode_key(task, agent, &settings.model, sample);
                if done_episodes.contains(&key) {
                    skipped += 1;
                } else {
                    let previous = previous.remove(&key).unwrap_or_default();
                    jobs.push(Job {
                        task,
                        agent,
                        sample,
                        key,
                        previous,
                    });
                }
            }
        }
    }
    on_event(CampaignEvent::Phase {
        name: "episodes",
        total: jobs.len(),
        skipped,
    });
    if !jobs.is_empty() {
        // Scratch file systems of harnesses killed earlier are let go first.
        for path in pdl_sandbox::scratch::detach_orphans() {
            on_event(CampaignEvent::Warning(format!(
                "detached the episode file system a killed harness left at {}",
                path.display()
            )));
        }
        // Workspaces and agent scratch: the harness's alone.
        let episodes_root = grader.work_root().join("episodes");
        std::fs::create_dir_all(&episodes_root)
            .map_err(|e| dir_err(format!("{}: {e}", episodes_root.display())))?;
        set_mode(&episodes_root, 0o700);
        let socket_dir = std::env::temp_dir().join(format!(
            "pdl-gw-{}-{}",
            std::process::id(),
            &sha(&[&run_dir.display().to_string()])[..8]
        ));
        std::fs::create_dir_all(&socket_dir)
            .map_err(|e| CampaignError::Gateway(format!("{}: {e}", socket_dir.display())))?;
        set_mode(&socket_dir, 0o755);
        let socket = socket_dir.join("gateway.sock");
        let _ = std::fs::remove_file(&socket);
        let mut config = GatewayConfig::new(settings.upstream.clone());
        config.unix_socket = Some(socket.clone());
        config.models = vec![settings.model.clone()];
        config.policy = RequestPolicy {
            model: Some(settings.model.clone()),
            allowed_tools: settings.allowed_provider_tools.clone(),
        };
        config.limits = settings.gateway_limits;
        let gateway = Gateway::start(config).map_err(|e| CampaignError::Gateway(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| CampaignError::Gateway(format!("cannot start the agent runtime: {e}")))?;
        let ctx = EpisodeContext {
            dir: &dir,
            settings,
            grader,
            runner: &runner,
            gateway: &gateway,
            runtime: runtime.handle().clone(),
            socket: socket.clone(),
            ladders: &ladders,
        };
        let mut write_error = None;
        execute(
            &jobs,
            settings.parallelism,
            |job| ctx.run(job),
            |_, rec| {
                if let Err(e) = log.append(&rec) {
                    write_error.get_or_insert(e);
                }
                new_records += 1;
                on_event(CampaignEvent::Done {
                    phase: "episodes",
                    record: &rec,
                });
                records.push(rec);
            },
        );
        gateway.shutdown();
        runtime.shutdown_timeout(Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&socket_dir);
        if let Some(e) = write_error {
            return Err(dir_err(format!("cannot write results.jsonl: {e}")));
        }
    }
    Ok(CampaignOutcome {
        records,
        new_records,
    })
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
    let episode = record
        .episode
        .as_ref()
        .and_then(Value::as_object)
        .ok_or("it has no episode fields")?;
    let text = |k: &str| episode.get(k).and_then(Value::as_str);
    let key = text("key").ok_or("it has no episode key")?;
    let agent_label = text("agent").ok_or("it names no agent")?;
    let model = text("model").ok_or("it names no model")?;
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
    let sample = episode
        .get("sample")
        .and_then(Value::as_u64)
        .ok_or("it has no sample number")? as usize;
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

struct EpisodeContext<'a> {
    dir: &'a pdl_fs::Dir,
    settings: &'a CampaignSettings,
    grader: &'a Grader,
    runner: &'a Arc<dyn ProcessRunner>,
    gateway: &'a Gateway,
    runtime: tokio::runtime::Handle,
    socket: PathBuf,
    ladders: &'a HashMap<String, LadderFingerprints>,
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
    /// Copies the agent's log from its scratch folder (where the agent could
    /// have put a link) into the run folder, following no link on either side.
    fn keep_log(&self, agent_scratch: &Path, log: &Path) {
        let source = pdl_fs::Dir::open(agent_scratch)
            .and_then(|d| d.open_file(Path::new("agent.log"), pdl_fs::OpenMode::Read));
        if let Ok(mut source) = source {
            let _ = self.dir.copy_from(log, &mut source, MAX_LOG_BYTES);
        }
    }

    fn run(&self, job: &Job<'_>) -> ResultRecord {
        let task = job.task;
        let name = format!("{}-s{}-{}", job.agent.slug(), job.sample, &job.key[..8]);
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
        let scratch = self.grader.work_root().join("episodes").join(&job.key);
        let kept = PathBuf::from("workspaces")
            .join(&task.row.task_id)
            .join(&name);
        let workspace = if self.settings.keep_workspaces {
            self.settings.run_dir.join(&kept)
        } else {
            scratch.join("workspace")
        };
        let mut episode = json!({
            "key": job.key,
            "agent": job.agent.label(),
            "model": self.settings.model,
            "sample": job.sample,
            "token_budget": task.row.token_budget,
            "prompt_version": match job.agent { AgentSpec::Builtin => Value::String(prompt_version()), AgentSpec::Command(_) => Value::Null },
            "model_route": {
                "provider": self.settings.upstream.api.name(),
                "base_url": self.settings.upstream.base_url,
                "model": self.settings.model,
                "gateway": self.gateway.base_url(),
            },
            "allowed_provider_tools": self.settings.allowed_provider_tools,
            "trajectory": paths.trajectory.display().to_string(),
        });
        if let Some(first) = job.previous.first() {
            episode["rerun_of"] = first.clone();
            episode["previous_outcomes"] = Value::Array(job.previous.clone());
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
            episode["ledger"] = Value::String(paths.ledger.display().to_string());
            record_carried(&mut episode, ledger.carried());
            let interrupted = ledger.interrupted();
            if interrupted.total() > 0 {
                episode["interrupted"] = json!({
                    "tokens_in": interrupted.input_tokens,
                    "tokens_out": interrupted.output_tokens,
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
            self.episode(job, &paths, &scratch, &workspace, ledger, &mut episode)
        });
        let mut record = match result {
            Ok(record) => record,
            Err(message) => harness_error_record(task, job, &self.settings.model, message),
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
                episode["ledger_error"] = Value::String(error);
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
        job: &Job<'_>,
        paths: &EpisodePaths,
        scratch: &Path,
        workspace: &Path,
        ledger: Ledger,
        episode: &mut Value,
    ) -> Result<ResultRecord, String> {
        let task = job.task;
        let _ = std::fs::remove_dir_all(scratch);
        let _ = std::fs::remove_dir_all(workspace);
        std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        // The workspace and the agent's scratch get a file system of their
        // own, so that no agent can take the inodes or bytes the harness's
        // other folders (other episodes, grading folders) live on.
        let _scratch_fs = match pdl_sandbox::ScratchFs::mount(scratch, self.settings.scratch) {
            Ok(fs) => {
                episode["scratch_fs"] = json!({
                    "bytes": fs.bounds().bytes,
                    "inodes": fs.bounds().inodes,
                });
                Some(fs)
            }
            Err(e) => {
                episode["scratch_fs"] = json!({
                    "shared": format!("no file system of its own ({e}): inodes are bounded only by the run's memory"),
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
            .gateway
            .open_episode_with(
                EpisodeSpec {
                    id: job.key.clone(),
                    token_budget: task.row.token_budget.max(0) as u64,
                    trajectory_path: self.dir.display_path(&paths.trajectory),
                },
                trajectory,
                ledger,
            )
            .map_err(|e| format!("cannot open the episode at the gateway: {e}"))?;
        let run = self.run_agent(job, paths, scratch, workspace, &env, &handle, episode);
        // The tokens are recorded however the agent's run ended.
        let usage = handle.end();
        record_usage(episode, &usage);
        if let Some(error) = handle.ledger_error() {
            episode["ledger_error"] = Value::String(error);
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
        episode["end_reason"] = json!(end_reason.name());
        episode["steps"] = json!(run.steps);
        episode["wall_s"] = json!(run.wall_s);
        episode["error"] = json!(run.error);
        episode["summary"] = json!(run.summary);
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
                episode["patch"] = Value::String(paths.patch.display().to_string());
            }
            Err(e) => episode["patch_error"] = Value::String(e.to_string()),
        }
        let submission = Submission {
            kind: SubmissionKind::Episode,
            name: job.agent.label(),
            model_name_or_path: Some(self.settings.model.clone()),
            content: SubmissionContent::Workspace(workspace.to_path_buf()),
        };
        Ok(self
            .grader
            .grade(task, &submission, self.ladders.get(&task.row.instance_id)))
    }

    /// Runs the episode's agent against the open gateway episode. An `Err`
    /// is a fault of the harness (the sandbox could not run the agent).
    #[allow(clippy::too_many_arguments)]
    fn run_agent(
        &self,
        job: &Job<'_>,
        paths: &EpisodePaths,
        scratch: &Path,
        workspace: &Path,
        env: &pdl_grader::PythonEnv,
        handle: &EpisodeHandle,
        episode: &mut Value,
    ) -> Result<AgentRun, String> {
        let task = job.task;
        let brief = TaskBrief {
            problem_statement: task.row.problem_statement.clone(),
            allowed: task.row.patch_policy_allowed.clone(),
            forbidden: task.row.patch_policy_forbidden.clone(),
            token_budget: task.row.token_budget.max(0) as u64,
        };
        let agent_env = base_environment(Some(&env.root.join("bin")));
        let limits = &self.settings.limits;
        let budget_spent = || handle.budget_exhausted();
        match job.agent {
            AgentSpec::Builtin => {
                let client = ChatClient::new(
                    self.runtime.clone(),
                    &self.gateway.base_url(),
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
                episode["log"] = Value::String(paths.log.display().to_string());
                run
            }
        }
    }
}

/// Records what earlier attempts of the slot spent (they count in
/// `tokens_in` and `tokens_out`).
fn record_carried(episode: &mut Value, carried: Spent) {
    episode["tokens_in"] = json!(carried.input_tokens);
    episode["tokens_out"] = json!(carried.output_tokens);
    if carried.total() > 0 {
        episode["carried"] = json!({
            "tokens_in": carried.input_tokens,
            "tokens_out": carried.output_tokens,
        });
    }
}

/// Records an attempt's usage: the slot's tokens and this attempt's counters.
fn record_usage(episode: &mut Value, usage: &Usage) {
    record_carried(
        episode,
        Spent {
            input_tokens: usage.carried_input_tokens,
            output_tokens: usage.carried_output_tokens,
        },
    );
    episode["tokens_in"] = json!(usage.input_tokens);
    episode["tokens_out"] = json!(usage.output_tokens);
    episode["calls"] = json!(usage.calls);
    episode["refused_calls"] = json!(usage.refused_calls);
    episode["budget_refusals"] = json!(usage.budget_refusals);
    episode["unrecorded_refusals"] = json!(usage.unrecorded_refusals);
    episode["abandoned_calls"] = json!(usage.abandoned_calls);
    episode["overrun_tokens"] = json!(usage.overrun_tokens);
}

fn harness_error_record(task: &Task, job: &Job<'_>, model: &str, message: String) -> ResultRecord {
    let mut record = ResultRecord {
        instance_id: task.row.instance_id.clone(),
        model_name_or_path: Some(model.to_string()),
        kind: SubmissionKind::Episode,
        name: job.agent.label(),
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
    };
    record.provenance.harness_version = pdl_grader::HARNESS_VERSION.into();
    record.provenance.task_digest = task.digest();
    record
}
