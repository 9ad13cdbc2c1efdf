//! Grading one submission ([`Grader::grade`]), as the specification's section 4
//! lays it out: materialize the pristine tree; apply the submission to a scratch
//! copy inside the sandbox (a patch) or take the agent's workspace as it stands;
//! read the resulting tree without following anything and police every change;
//! build the graded tree from the pristine files, the allowed regular files and
//! the hidden tests, all written by the harness; run pytest once through the
//! trusted bootstrap and its signed outcome channel; check that the channels
//! agree; score; record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pdl_sandbox::{Enforcement, ProcessRunner, ResourceLimits, RunStatus};
use pdl_task::diff::{parse_patch_with, PatchLimits};
use pdl_task::task::HIDDEN_DIR;
use pdl_task::{RepoFile, RewardFormula, RewardInputs, Task};
use sha2::{Digest, Sha256};

use crate::apply::{apply_in_sandbox, ApplyError};
use crate::changes::{
    build_graded_tree, install_hidden_tests, police_tree, GradedChange, Policed, TreeLimits,
    TreeOrigin,
};
use crate::env::{EnvManager, PythonEnv};
use crate::exact_apply::{apply_exactly, write_changes};
use crate::ladder::LadderFingerprints;
use crate::outcome::{TestLog, TestOutcome};
use crate::policy::PatchPolicy;
use crate::pytest::{cross_check, run_dirs, run_pytest, PytestMode, PytestRun, RunDirs, TreeFacts};
use crate::record::{
    Components, Phases, PolicyReport, Provenance, ResultRecord, SubmissionKind, SuspiciousLine,
    Verdict,
};
use crate::workspace::materialize;

/// The version recorded in provenance.
pub const HARNESS_VERSION: &str = concat!("pdl-swe ", env!("CARGO_PKG_VERSION"));

/// The largest patch graded; a larger one is `patch_failed` before anything
/// parses it.
pub const MAX_PATCH_BYTES: usize = 32 << 20;

/// One of a grading's pytest runs (public tests, then hidden tests).
struct TestRun {
    /// `public` or `hidden`.
    name: &'static str,
    /// The node IDs it ran.
    ids: Vec<String>,
    run: PytestRun,
}

/// What a submission consists of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmissionContent {
    /// A unified diff (empty: do nothing).
    Patch(String),
    /// A final workspace, compared with the pristine files.
    Workspace(PathBuf),
}

/// One thing to grade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// Its kind.
    pub kind: SubmissionKind,
    /// Its name (rung name, `gold`, `noop`, a model, an episode key).
    pub name: String,
    /// The model that produced it, for predictions and episodes.
    pub model_name_or_path: Option<String>,
    /// The patch or workspace.
    pub content: SubmissionContent,
}

impl Submission {
    /// The task's reference patch.
    pub fn gold(task: &Task) -> Self {
        Submission {
            kind: SubmissionKind::Gold,
            name: "gold".into(),
            model_name_or_path: None,
            content: SubmissionContent::Patch(task.row.patch.clone()),
        }
    }

    /// The empty patch.
    pub fn noop() -> Self {
        Submission {
            kind: SubmissionKind::Noop,
            name: "noop".into(),
            model_name_or_path: None,
            content: SubmissionContent::Patch(String::new()),
        }
    }

    /// A registered rung (its diff from the task).
    pub fn rung(task: &Task, name: &str) -> Option<Self> {
        task.rung(name).map(|r| Submission {
            kind: SubmissionKind::Rung,
            name: r.name.clone(),
            model_name_or_path: None,
            content: SubmissionContent::Patch(r.diff.clone()),
        })
    }

    /// The digest recorded as `provenance.submission_digest` (empty for a
    /// workspace, whose digest is that of its graded change set).
    pub fn digest(&self) -> String {
        match &self.content {
            SubmissionContent::Patch(p) => {
                format!("sha256:{}", hex::encode(Sha256::digest(p.as_bytes())))
            }
            SubmissionContent::Workspace(_) => String::new(),
        }
    }

    /// True for the dataset's own content (gold, do-nothing, rungs): its output
    /// may be shown to whoever runs the harness.
    fn is_trusted(&self) -> bool {
        matches!(
            self.kind,
            SubmissionKind::Gold | SubmissionKind::Noop | SubmissionKind::Rung
        )
    }
}

/// Settings for a [`Grader`].
#[derive(Debug, Clone)]
pub struct GradeSettings {
    /// Where grading folders are made.
    pub work_root: PathBuf,
    /// Keep each grading's folder (for debugging) instead of removing it.
    pub keep_workdirs: bool,
    /// Overrides every task's test timeout.
    pub test_timeout: Option<Duration>,
    /// Limits of the test process (its wall time is the test timeout).
    pub limits: ResourceLimits,
    /// Bounds on reading a submitted tree.
    pub tree_limits: TreeLimits,
    /// Bounds on a patch's binary sections.
    pub patch_limits: PatchLimits,
}

/// Grades submissions. Cheap to share between threads.
pub struct Grader {
    settings: GradeSettings,
    envs: Arc<EnvManager>,
    runner: Arc<dyn ProcessRunner>,
}

/// What `collect` found for validation.
#[derive(Debug, Clone)]
pub struct Collection {
    /// Every node ID pytest collected from the tree with the hidden tests in place.
    pub collected: Vec<String>,
    /// Files that failed to collect, with messages.
    pub errors: Vec<(String, String)>,
}

/// An error that stops grading before tests run, mapped to a verdict.
struct Stop {
    verdict: Verdict,
    detail: String,
    policy: Option<PolicyReport>,
}

impl Stop {
    fn harness(detail: impl Into<String>) -> Self {
        Stop {
            verdict: Verdict::HarnessError,
            detail: detail.into(),
            policy: None,
        }
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Grader {
    /// A grader over an environment manager and a process runner.
    pub fn new(
        settings: GradeSettings,
        envs: Arc<EnvManager>,
        runner: Arc<dyn ProcessRunner>,
    ) -> Self {
        Grader {
            settings,
            envs,
            runner,
        }
    }

    /// Where grading folders are made.
    pub fn work_root(&self) -> &Path {
        &self.settings.work_root
    }

    /// True when grading folders are kept.
    pub fn keeps_workdirs(&self) -> bool {
        self.settings.keep_workdirs
    }

    /// The process runner in use.
    pub fn runner(&self) -> &dyn ProcessRunner {
        self.runner.as_ref()
    }

    /// The environment manager in use.
    pub fn envs(&self) -> &EnvManager {
        &self.envs
    }

    /// The effective test timeout for a task.
    pub fn test_timeout(&self, task: &Task) -> Duration {
        self.settings
            .test_timeout
            .unwrap_or_else(|| Duration::from_secs(task.test_timeout_s()))
    }

    /// A fresh grading folder: private to the harness (mode 0700), with a
    /// name no one can guess.
    fn new_workdir(&self, task: &Task, label: &str) -> std::io::Result<tempfile::TempDir> {
        let safe: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        // The task ID is a safe name once loaded; it is filtered again here so
        // that a grading folder is always directly inside the work root.
        let task: String = task
            .row
            .task_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(128)
            .collect();
        std::fs::create_dir_all(&self.settings.work_root)?;
        // It holds the hidden tests and, for gold, the reference solution:
        // nobody but the harness may look inside (the default mode would let
        // every local user, and an agent sharing the harness's uid, read it).
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("{task}-{safe}-"))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&self.settings.work_root)?;
        dir.disable_cleanup(self.settings.keep_workdirs);
        Ok(dir)
    }

    /// Grades one submission. Never panics on bad input: every failure becomes a
    /// verdict in the record.
    pub fn grade(
        &self,
        task: &Task,
        submission: &Submission,
        ladder: Option<&LadderFingerprints>,
    ) -> ResultRecord {
        let started = Instant::now();
        let started_at = now_rfc3339();
        let timeout = self.test_timeout(task);
        let mut record = ResultRecord {
            instance_id: task.row.instance_id.clone(),
            model_name_or_path: submission.model_name_or_path.clone(),
            kind: submission.kind,
            name: submission.name.clone(),
            reward: 0.0,
            components: Components::default(),
            verdict: Verdict::HarnessError,
            detail: None,
            tests: task
                .row
                .fail_to_pass
                .iter()
                .chain(&task.row.pass_to_pass)
                .map(|id| (id.clone(), TestOutcome::Missing))
                .collect(),
            policy: PolicyReport::default(),
            landed_rung: None,
            compile_errors: Vec::new(),
            collection_errors: Vec::new(),
            duration_s: 0.0,
            phases_s: Phases::default(),
            provenance: Provenance {
                harness_version: HARNESS_VERSION.into(),
                task_digest: task.digest(),
                submission_digest: submission.digest(),
                environment: Default::default(),
                // The runner's name until a run in it reports what it enforced.
                sandbox: Enforcement {
                    sandbox: self.runner.kind().name().to_string(),
                    ..Enforcement::default()
                },
                test_timeout_s: timeout.as_secs_f64(),
                started_at,
            },
            suspicious: Vec::new(),
            episode: None,
            job_key: None,
        };
        let workdir = match self.new_workdir(task, &submission.name) {
            Ok(d) => d,
            Err(e) => {
                record.detail = Some(format!(
                    "cannot create a grading folder under {}: {e}",
                    self.settings.work_root.display()
                ));
                record.duration_s = started.elapsed().as_secs_f64();
                return record;
            }
        };
        if let Err(stop) = self.grade_in(task, submission, workdir.path(), timeout, &mut record) {
            record.verdict = stop.verdict;
            record.detail = Some(stop.detail);
            if let Some(policy) = stop.policy {
                record.policy = policy;
            }
            record.reward = 0.0;
            record.components = Components::default();
        }
        if let Some(ladder) = ladder {
            if matches!(record.verdict, Verdict::Graded | Verdict::Timeout) {
                record.landed_rung = ladder.landed(task, &record);
            }
        }
        record.duration_s = started.elapsed().as_secs_f64();
        drop(workdir);
        record
    }

    fn environment(&self, task: &Task) -> Result<Arc<PythonEnv>, Stop> {
        self.envs
            .ensure(task.row.requirements_lock())
            .map_err(|e| Stop::harness(e.to_string()))
    }

    /// The submission's policed change set: a patch applied to a scratch copy
    /// inside the sandbox, or a workspace as it stands; read, compared and
    /// policed ([`police_tree`]).
    fn change_set(
        &self,
        task: &Task,
        submission: &Submission,
        policy: &PatchPolicy,
        hidden: &[RepoFile],
        workdir: &Path,
        phases: &mut Phases,
    ) -> Result<Policed, Stop> {
        let hidden_paths: Vec<String> = hidden.iter().map(|f| f.path.clone()).collect();
        let test_files: Vec<String> = task
            .row
            .files
            .iter()
            .filter(|f| f.path.ends_with(".py") && f.path.split('/').any(|c| c == "tests"))
            .map(|f| f.path.clone())
            .collect();
        let police = |tree: &Path, origin| {
            police_tree(
                tree,
                origin,
                &task.row.files,
                policy,
                &hidden_paths,
                &test_files,
                &self.settings.tree_limits,
            )
            .map_err(|e| Stop::harness(format!("cannot read {}: {e}", tree.display())))
        };
        match &submission.content {
            SubmissionContent::Patch(text) => {
                if text.len() > MAX_PATCH_BYTES {
                    return Err(Stop::submission(
                        Verdict::PatchFailed,
                        format!(
                            "the patch is {} bytes, over the limit of {MAX_PATCH_BYTES}",
                            text.len()
                        ),
                    ));
                }
                let set = parse_patch_with(text, &self.settings.patch_limits).map_err(|e| {
                    Stop::submission(Verdict::PatchFailed, format!("not a valid diff: {e}"))
                })?;
                if set.files.is_empty() {
                    if text.trim().is_empty() {
                        return Ok(Policed::default());
                    }
                    return Err(Stop::submission(
                        Verdict::PatchFailed,
                        "not a diff: no file section found in a non-empty patch".into(),
                    ));
                }
                // A copy leaves its source unchanged in the tree, so only the
                // patch can say that it reads a forbidden file.
                let copied: Vec<String> = set
                    .files
                    .iter()
                    .filter(|f| f.kind == pdl_task::diff::ChangeKind::Copied)
                    .filter_map(|f| f.old_path.clone())
                    .filter(|p| policy.decide(p) == crate::policy::PathDecision::Forbidden)
                    .collect();
                if !copied.is_empty() {
                    let report = PolicyReport {
                        violations: copied.clone(),
                        dropped: Vec::new(),
                    };
                    return Err(Stop {
                        verdict: Verdict::PolicyViolation,
                        detail: format!("the patch copies forbidden paths: {}", copied.join(", ")),
                        policy: Some(report),
                    });
                }
                let apply_started = Instant::now();
                let scratch = workdir.join("apply");
                let tree = scratch.join("tree");
                let patch_dir = workdir.join("patch");
                let output = workdir.join("out");
                for dir in [&scratch, &patch_dir, &output] {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| Stop::harness(format!("{}: {e}", dir.display())))?;
                }
                materialize(&task.row.files, &tree)
                    .map_err(|e| Stop::harness(format!("cannot write the pristine tree: {e}")))?;
                let patch_file = patch_dir.join("submission.diff");
                let mut bytes = text.clone().into_bytes();
                if !bytes.ends_with(b"\n") {
                    bytes.push(b'\n');
                }
                std::fs::write(&patch_file, bytes)
                    .map_err(|e| Stop::harness(format!("{}: {e}", patch_file.display())))?;
                // Every hunk where it says it is: the tree git would make,
                // without starting git. Anything else, or a write the file
                // system refuses, goes to git in the sandbox on a fresh tree.
                let exact = match apply_exactly(&task.row.files, &set) {
                    Some(changes) if write_changes(&tree, &changes).is_ok() => true,
                    Some(_) => {
                        std::fs::remove_dir_all(&tree)
                            .and_then(|()| materialize(&task.row.files, &tree))
                            .map_err(|e| {
                                Stop::harness(format!("cannot write the pristine tree: {e}"))
                            })?;
                        false
                    }
                    None => false,
                };
                let applied = match exact {
                    true => Ok(()),
                    false => apply_in_sandbox(
                        self.runner.as_ref(),
                        &tree,
                        &patch_file,
                        set.strip,
                        &output.join("apply.log"),
                        &self.settings.limits,
                    ),
                };
                match applied {
                    Ok(()) => {}
                    Err(ApplyError::Rejected(msg)) => {
                        return Err(Stop::submission(
                            Verdict::PatchFailed,
                            format!("the patch does not apply: {msg}"),
                        ))
                    }
                    Err(ApplyError::Exhausted(msg)) => {
                        return Err(Stop::submission(Verdict::PatchFailed, msg))
                    }
                    Err(ApplyError::Infrastructure(msg)) => return Err(Stop::harness(msg)),
                }
                phases.apply = apply_started.elapsed().as_secs_f64();
                let police_started = Instant::now();
                let policed = police(&tree, TreeOrigin::AppliedPatch);
                phases.police = police_started.elapsed().as_secs_f64();
                policed
            }
            SubmissionContent::Workspace(ws) => {
                let police_started = Instant::now();
                let policed = police(ws, TreeOrigin::Workspace);
                phases.police = police_started.elapsed().as_secs_f64();
                policed
            }
        }
    }

    fn grade_in(
        &self,
        task: &Task,
        submission: &Submission,
        workdir: &Path,
        timeout: Duration,
        record: &mut ResultRecord,
    ) -> Result<(), Stop> {
        let formula = RewardFormula::parse(&task.row.reward_formula)
            .map_err(|e| Stop::harness(format!("task defect: {e}")))?;
        let policy = PatchPolicy::new(
            &task.row.patch_policy_allowed,
            &task.row.patch_policy_forbidden,
        )
        .map_err(|e| Stop::harness(format!("task defect: {e}")))?;
        let hidden = hidden_files(task).map_err(Stop::harness)?;
        let env_started = Instant::now();
        let env = self.environment(task)?;
        record.phases_s.environment = env_started.elapsed().as_secs_f64();
        record.provenance.environment = env.info.clone();
        let policed = self.change_set(
            task,
            submission,
            &policy,
            &hidden,
            workdir,
            &mut record.phases_s,
        )?;
        record.policy = policed.report.clone();
        if !policed.report.violations.is_empty() {
            let what = match submission.content {
                SubmissionContent::Patch(_) => "the patch",
                SubmissionContent::Workspace(_) => "the workspace",
            };
            return Err(Stop {
                verdict: Verdict::PolicyViolation,
                detail: policed.detail(what),
                policy: Some(policed.report),
            });
        }
        if let SubmissionContent::Workspace(_) = submission.content {
            record.provenance.submission_digest = change_set_digest(&policed.graded);
        }
        record.suspicious = suspicious_lines(task, &policed.graded);
        let layout_started = Instant::now();
        let dirs = run_dirs(workdir);
        // The public tests run first, in a tree without the hidden tests:
        // their per-test outcomes, which submitters see, cannot depend on
        // what the hidden tests say, however the code under test tries.
        build_graded_tree(&dirs.tree, &task.row.files, &policed.graded, &[])
            .map_err(|e| Stop::harness(format!("cannot write the graded tree: {e}")))?;
        let (hidden_ids, public_ids): (Vec<String>, Vec<String>) = task
            .row
            .fail_to_pass
            .iter()
            .chain(&task.row.pass_to_pass)
            .cloned()
            .partition(|id| id.starts_with(HIDDEN_DIR));
        let facts = tree_facts(task, &policed.graded, &hidden);
        record.phases_s.layout = layout_started.elapsed().as_secs_f64();
        let tests_started = Instant::now();
        let mut runs = Vec::new();
        if !public_ids.is_empty() {
            let public_facts = TreeFacts {
                hidden: Vec::new(),
                ..facts.clone()
            };
            let run = self.test_run(&env, &dirs, "public", public_ids, &public_facts, timeout)?;
            let breached = run.run.breach.is_some();
            runs.push(run);
            if breached {
                return self.score(task, &formula, &runs, submission, record);
            }
        }
        if !hidden_ids.is_empty() {
            install_hidden_tests(&dirs.tree, &hidden)
                .map_err(|e| Stop::harness(format!("cannot write the hidden tests: {e}")))?;
            let hidden_facts = TreeFacts {
                // The changed files compiled in the public run already.
                compile: if runs.is_empty() {
                    facts.compile.clone()
                } else {
                    Vec::new()
                },
                hidden: hidden.iter().map(|f| f.path.clone()).collect(),
                ..facts.clone()
            };
            runs.push(self.test_run(&env, &dirs, "hidden", hidden_ids, &hidden_facts, timeout)?);
        }
        record.phases_s.tests = tests_started.elapsed().as_secs_f64();
        if let Some(last) = runs.last() {
            record.provenance.sandbox = last.run.report.enforced.clone();
        }
        self.score(task, &formula, &runs, submission, record)
    }

    /// One pytest run over `ids` in the graded tree, its output in a folder
    /// of its own.
    fn test_run(
        &self,
        env: &PythonEnv,
        dirs: &RunDirs,
        name: &'static str,
        ids: Vec<String>,
        facts: &TreeFacts,
        timeout: Duration,
    ) -> Result<TestRun, Stop> {
        let dirs = RunDirs {
            output: dirs.output.join(name),
            ..dirs.clone()
        };
        let run = run_pytest(
            self.runner.as_ref(),
            env,
            &dirs,
            &PytestMode::Select(ids.clone()),
            facts,
            timeout,
            &self.settings.limits,
        )
        .map_err(|e| Stop::harness(format!("cannot prepare the {name} test run: {e}")))?;
        Ok(TestRun { name, ids, run })
    }

    fn score(
        &self,
        task: &Task,
        formula: &RewardFormula,
        runs: &[TestRun],
        submission: &Submission,
        record: &mut ResultRecord,
    ) -> Result<(), Stop> {
        // Two runs are told apart in what is said about them.
        let label = |run: &TestRun| {
            if runs.len() > 1 {
                format!("the {} test run", run.name)
            } else {
                "the test run".to_string()
            }
        };
        for part in runs {
            let report = &part.run.report;
            if let RunStatus::SandboxFailed { reason } = &report.status {
                return Err(Stop::harness(format!("sandbox: {reason}")));
            }
            if let RunStatus::SpawnFailed { reason } = &report.status {
                return Err(Stop::harness(format!("cannot start pytest: {reason}")));
            }
            if let Some(breach) = &part.run.breach {
                return Err(Stop::submission(
                    Verdict::Tampered,
                    format!("{}'s outcomes cannot be trusted: {breach}", label(part)),
                ));
            }
            if !part.run.log.started {
                // The bootstrap reports its start before any code of the
                // repository is importable: a run that never got there is the
                // harness's or the machine's fault, unless the clock ran out.
                if report.status == RunStatus::TimedOut {
                    return Err(Stop::submission(
                        Verdict::Timeout,
                        "the test process did not start within the time bound".into(),
                    ));
                }
                let mut detail =
                    format!("the test process did not start ({})", report.status.name());
                if submission.is_trusted() {
                    detail.push_str(&format!("; output:\n{}", report.output_tail(2000)));
                }
                return Err(Stop::harness(detail));
            }
            if let Err(breach) = cross_check(&part.run) {
                return Err(Stop::submission(
                    Verdict::Tampered,
                    format!("{}'s channels disagree: {breach}", label(part)),
                ));
            }
        }
        let mut tests: BTreeMap<String, TestOutcome> = BTreeMap::new();
        for part in runs {
            let timed_out = part.run.report.status == RunStatus::TimedOut;
            for id in &part.ids {
                tests.insert(id.clone(), part.run.log.outcome(id, timed_out));
            }
        }
        let passed = |list: &[String]| {
            list.iter()
                .filter(|id| tests.get(*id).is_some_and(|o| o.passed()))
                .count()
        };
        // A run that ended before collection finished proves nothing about the
        // files it did not reach.
        let build_healthy = runs.iter().all(|part| {
            let log: &TestLog = &part.run.log;
            log.compile_errors.is_empty() && log.collect_errors.is_empty() && log.collection_done
        });
        let inputs = RewardInputs::from_counts(
            passed(&task.row.fail_to_pass),
            task.row.fail_to_pass.len(),
            passed(&task.row.pass_to_pass),
            task.row.pass_to_pass.len(),
            build_healthy,
        );
        record.reward = formula.evaluate(&inputs);
        record.components = Components {
            hidden_pass_fraction: inputs.hidden_pass_fraction.to_f64(),
            public_regression: inputs.public_regression.to_f64(),
            build_health: inputs.build_health.to_f64(),
        };
        record.tests = tests;
        record.compile_errors = runs
            .iter()
            .flat_map(|part| &part.run.log.compile_errors)
            .map(|c| format!("{}: {}", c.path, c.message))
            .collect();
        record.collection_errors = runs
            .iter()
            .flat_map(|part| &part.run.log.collect_errors)
            .map(|(id, kind)| {
                let id = if id.is_empty() {
                    "<session>"
                } else {
                    id.as_str()
                };
                format!("{id}: {kind}")
            })
            .collect();
        let timed_out = runs
            .iter()
            .any(|part| part.run.report.status == RunStatus::TimedOut);
        record.verdict = if timed_out {
            Verdict::Timeout
        } else {
            Verdict::Graded
        };
        let mut notes = Vec::new();
        for part in runs {
            let log = &part.run.log;
            let report = &part.run.report;
            if report.status == RunStatus::TimedOut {
                let running = log
                    .running_when_stopped()
                    .map(|id| format!(" while running {id}"))
                    .unwrap_or_default();
                notes.push(format!(
                    "{} passed its {:.0} s bound{running}; unfinished tests count as failed",
                    label(part),
                    record.provenance.test_timeout_s
                ));
            } else if !log.finished {
                notes.push(format!(
                    "the test process of {} ended before pytest finished ({}); unfinished tests count as errors",
                    label(part),
                    match &report.status {
                        RunStatus::Exited { code } => format!("exit code {code}"),
                        RunStatus::Signaled { signal } => format!("signal {signal}"),
                        other => other.name().to_string(),
                    }
                ));
            }
        }
        let oom_kills: u64 = runs.iter().map(|part| part.run.report.oom_kills).sum();
        if oom_kills > 0 {
            notes.push(format!(
                "{oom_kills} process(es) of the run were stopped at the memory bound"
            ));
        }
        if runs.iter().any(|part| part.run.report.output_truncated) {
            notes.push(format!(
                "test output was cut after {} bytes",
                self.settings.limits.max_output_bytes
            ));
        }
        if !notes.is_empty() {
            record.detail = Some(notes.join("; "));
        }
        Ok(())
    }

    /// Collects every test with the hidden tests in place at base, for validation.
    pub fn collect(&self, task: &Task) -> Result<Collection, String> {
        let workdir = self
            .new_workdir(task, "collect")
            .map_err(|e| e.to_string())?;
        let hidden = hidden_files(task)?;
        let env = self.environment(task).map_err(|s| s.detail)?;
        let dirs = run_dirs(workdir.path());
        build_graded_tree(&dirs.tree, &task.row.files, &BTreeMap::new(), &hidden)
            .map_err(|e| format!("cannot write the graded tree: {e}"))?;
        let facts = tree_facts(task, &BTreeMap::new(), &hidden);
        let run = run_pytest(
            self.runner.as_ref(),
            &env,
            &dirs,
            &PytestMode::CollectAll,
            &facts,
            self.test_timeout(task),
            &self.settings.limits,
        )
        .map_err(|e| e.to_string())?;
        if let Some(breach) = run.breach {
            return Err(format!(
                "the collection's outcomes cannot be trusted: {breach}"
            ));
        }
        if !run.log.started {
            return Err(format!(
                "pytest did not start ({}): {}",
                run.report.status.name(),
                run.report.output_tail(2000)
            ));
        }
        if run.report.status == RunStatus::TimedOut {
            return Err("collection passed the time bound".into());
        }
        Ok(Collection {
            collected: run.log.collected.clone(),
            errors: run.log.collect_errors.clone(),
        })
    }
}

impl Stop {
    fn submission(verdict: Verdict, detail: String) -> Self {
        Stop {
            verdict,
            detail,
            policy: None,
        }
    }
}

/// The hidden test files `test_patch` creates (it may only create files, each
/// at a safe path under `tests/hidden/`; the loader checks this too).
pub fn hidden_files(task: &Task) -> Result<Vec<RepoFile>, String> {
    let set = pdl_task::diff::parse_patch(&task.row.test_patch)
        .map_err(|e| format!("task defect: test_patch is not a valid diff: {e}"))?;
    set.files
        .iter()
        .map(|f| match (f.kind, &f.new_path, f.added_content()) {
            (pdl_task::diff::ChangeKind::Added, Some(path), Some(content)) => {
                if let Err(why) = pdl_task::safe::check_repo_path(path) {
                    return Err(format!(
                        "task defect: test_patch: unsafe path `{path}`: {why}"
                    ));
                }
                if path.len() <= HIDDEN_DIR.len() || !path.starts_with(HIDDEN_DIR) {
                    return Err(format!(
                        "task defect: test_patch: `{path}` is not under {HIDDEN_DIR}"
                    ));
                }
                Ok(RepoFile {
                    path: path.clone(),
                    content,
                })
            }
            _ => Err(format!(
                "task defect: test_patch does more than create text files ({})",
                f.touched_paths().join(", ")
            )),
        })
        .collect()
}

/// What the bootstrap must know of a graded tree.
fn tree_facts(
    task: &Task,
    graded: &BTreeMap<String, GradedChange>,
    hidden: &[RepoFile],
) -> TreeFacts {
    let compile = graded
        .iter()
        .filter(|(path, change)| {
            path.ends_with(".py") && matches!(change, GradedChange::Write { .. })
        })
        .map(|(path, _)| path.clone())
        .collect();
    let test_files = task
        .row
        .files
        .iter()
        .chain(hidden)
        .filter(|f| f.path.ends_with(".py") && f.path.split('/').any(|c| c == "tests"))
        .map(|f| f.path.clone())
        .chain(
            task.row
                .fail_to_pass
                .iter()
                .chain(&task.row.pass_to_pass)
                .map(|id| id.split("::").next().unwrap_or(id).to_string()),
        )
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let conftests = task
        .row
        .files
        .iter()
        .filter(|f| f.path == "conftest.py" || f.path.ends_with("/conftest.py"))
        .map(|f| {
            (
                f.path.clone(),
                hex::encode(Sha256::digest(f.content.as_bytes())),
            )
        })
        .collect();
    TreeFacts {
        compile,
        test_files,
        conftests,
        hidden: Vec::new(),
    }
}

/// Lines of the graded change set a review rule matches.
fn suspicious_lines(task: &Task, graded: &BTreeMap<String, GradedChange>) -> Vec<SuspiciousLine> {
    let pristine: BTreeMap<&str, &str> = task
        .row
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.content.as_str()))
        .collect();
    let top_level: std::collections::BTreeSet<String> = task
        .row
        .files
        .iter()
        .map(|f| {
            f.path
                .split('/')
                .next()
                .unwrap_or("")
                .trim_end_matches(".py")
                .to_string()
        })
        .chain(graded.keys().map(|p| {
            p.split('/')
                .next()
                .unwrap_or("")
                .trim_end_matches(".py")
                .to_string()
        }))
        .collect();
    let tree_modules = |name: &str| top_level.contains(name);
    let mut out = Vec::new();
    for (path, change) in graded {
        let GradedChange::Write { bytes, .. } = change else {
            continue;
        };
        let text = String::from_utf8_lossy(bytes);
        for m in crate::suspicious::scan_file(
            path,
            pristine.get(path.as_str()).copied(),
            &text,
            &tree_modules,
        ) {
            out.push(SuspiciousLine::from(m));
        }
    }
    out
}

/// A digest of a graded change set (paths, contents, modes).
fn change_set_digest(graded: &BTreeMap<String, GradedChange>) -> String {
    let mut h = Sha256::new();
    for (path, change) in graded {
        h.update(path.as_bytes());
        h.update([0]);
        match change {
            GradedChange::Write { bytes, executable } => {
                h.update([1, *executable as u8]);
                h.update((bytes.len() as u64).to_be_bytes());
                h.update(bytes);
            }
            GradedChange::Delete => h.update([2]),
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}
