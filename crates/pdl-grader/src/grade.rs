//! Grading one submission ([`Grader::grade`]), exactly as the specification's
//! section 4 lays it out: materialize, work out the change set, police it, apply
//! it, apply the hidden tests, run pytest once, score, record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pdl_sandbox::{ProcessRunner, ResourceLimits, RunStatus};
use pdl_task::diff::parse_patch;
use pdl_task::{RewardFormula, RewardInputs, Task};
use sha2::{Digest, Sha256};

use crate::apply::{apply_patch, filtered_patch, ApplyError};
use crate::env::{EnvManager, PythonEnv};
use crate::ladder::LadderFingerprints;
use crate::outcome::{TestLog, TestOutcome};
use crate::policy::{PatchPolicy, PathDecision};
use crate::pytest::{run_dirs, run_pytest, PytestMode, PytestRun};
use crate::record::{Components, PolicyReport, Provenance, ResultRecord, SubmissionKind, Verdict};
use crate::workspace::{apply_change, materialize, workspace_changes, Change};

/// The version recorded in provenance.
pub const HARNESS_VERSION: &str = concat!("pdl-swe ", env!("CARGO_PKG_VERSION"));

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

    fn digest(&self) -> String {
        match &self.content {
            SubmissionContent::Patch(p) => {
                format!("sha256:{}", hex::encode(Sha256::digest(p.as_bytes())))
            }
            SubmissionContent::Workspace(_) => String::new(),
        }
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
}

/// Grades submissions. Cheap to share between threads.
pub struct Grader {
    settings: GradeSettings,
    envs: Arc<EnvManager>,
    runner: Arc<dyn ProcessRunner>,
    counter: AtomicU64,
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
    policy: PolicyReport,
}

impl Stop {
    fn harness(detail: impl Into<String>) -> Self {
        Stop {
            verdict: Verdict::HarnessError,
            detail: detail.into(),
            policy: PolicyReport::default(),
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
            counter: AtomicU64::new(0),
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

    fn sandbox_description(&self, timeout: Duration) -> serde_json::Value {
        let l = &self.settings.limits;
        serde_json::json!({
            "kind": self.runner.kind().name(),
            "network": "none",
            "wall_time_s": timeout.as_secs_f64(),
            "kill_grace_s": l.kill_grace.as_secs_f64(),
            "memory_bytes": l.memory_bytes,
            "max_processes": l.max_processes,
            "max_file_bytes": l.max_file_bytes,
            "max_output_bytes": l.max_output_bytes,
        })
    }

    /// A fresh grading folder.
    fn new_workdir(&self, task: &Task, label: &str) -> std::io::Result<PathBuf> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
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
        let dir = self.settings.work_root.join(format!(
            "{}-{}-{}-{n}",
            task.row.task_id,
            safe,
            std::process::id()
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    fn cleanup(&self, dir: &Path) {
        if !self.settings.keep_workdirs {
            let _ = std::fs::remove_dir_all(dir);
        }
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
            provenance: Provenance {
                harness_version: HARNESS_VERSION.into(),
                task_digest: task.digest(),
                submission_digest: submission.digest(),
                environment: Default::default(),
                sandbox: self.sandbox_description(timeout),
                test_timeout_s: timeout.as_secs_f64(),
                started_at,
            },
            episode: None,
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
        match self.grade_in(task, submission, &workdir, timeout, &mut record) {
            Ok(()) => {}
            Err(stop) => {
                record.verdict = stop.verdict;
                record.detail = Some(stop.detail);
                record.policy = stop.policy;
                record.reward = 0.0;
                record.components = Components::default();
            }
        }
        if let Some(ladder) = ladder {
            if matches!(record.verdict, Verdict::Graded | Verdict::Timeout) {
                record.landed_rung = ladder.landed(task, &record);
            }
        }
        record.duration_s = started.elapsed().as_secs_f64();
        self.cleanup(&workdir);
        record
    }

    fn environment(&self, task: &Task) -> Result<Arc<PythonEnv>, Stop> {
        self.envs
            .ensure(task.row.requirements_lock())
            .map_err(|e| Stop::harness(e.to_string()))
    }

    /// Builds the graded tree: pristine files, the policed change set, the hidden
    /// tests. Returns the policy report.
    fn build_tree(
        &self,
        task: &Task,
        submission: &Submission,
        tree: &Path,
        scratch: &Path,
    ) -> Result<PolicyReport, Stop> {
        let policy = PatchPolicy::new(
            &task.row.patch_policy_allowed,
            &task.row.patch_policy_forbidden,
        )
        .map_err(|e| Stop::harness(format!("task defect: {e}")))?;
        materialize(&task.row.files, tree)
            .map_err(|e| Stop::harness(format!("cannot write the pristine tree: {e}")))?;
        let mut report = PolicyReport::default();
        match &submission.content {
            SubmissionContent::Patch(text) => {
                let set = parse_patch(text).map_err(|e| Stop {
                    verdict: Verdict::PatchFailed,
                    detail: format!("not a valid diff: {e}"),
                    policy: PolicyReport::default(),
                })?;
                if set.files.is_empty() && !text.trim().is_empty() {
                    return Err(Stop {
                        verdict: Verdict::PatchFailed,
                        detail: "not a diff: no file section found in a non-empty patch".into(),
                        policy: PolicyReport::default(),
                    });
                }
                let mut keep = Vec::new();
                let mut links: Vec<String> = Vec::new();
                for file in &set.files {
                    let paths = file.touched_paths();
                    let mut forbidden = false;
                    let mut dropped = false;
                    for p in &paths {
                        match policy.decide(p) {
                            PathDecision::Forbidden => {
                                forbidden = true;
                                report.violations.push((*p).to_string());
                            }
                            PathDecision::Dropped => dropped = true,
                            PathDecision::Allowed => {}
                        }
                    }
                    if file.involves_symlink() {
                        forbidden = true;
                        let path = paths.last().copied().unwrap_or("").to_string();
                        links.push(path.clone());
                        report.violations.push(path);
                    }
                    if !forbidden && dropped {
                        report
                            .dropped
                            .extend(paths.iter().map(|p| (*p).to_string()));
                    }
                    keep.push(!forbidden && !dropped);
                }
                report.violations.sort();
                report.violations.dedup();
                report.dropped.sort();
                report.dropped.dedup();
                if !report.violations.is_empty() {
                    return Err(Stop {
                        verdict: Verdict::PolicyViolation,
                        detail: violation_detail("the patch", &report.violations, &links),
                        policy: report,
                    });
                }
                let kept = filtered_patch(&set, |i| keep[i]);
                let kept_set = parse_patch(&kept)
                    .map_err(|e| Stop::harness(format!("re-parsing the kept sections: {e}")))?;
                apply_patch(tree, &kept, &kept_set, scratch).map_err(|e| match e {
                    ApplyError::Rejected(msg) => Stop {
                        verdict: Verdict::PatchFailed,
                        detail: format!("the patch does not apply: {msg}"),
                        policy: report.clone(),
                    },
                    other => Stop::harness(other.to_string()),
                })?;
            }
            SubmissionContent::Workspace(ws) => {
                let changes = workspace_changes(&task.row.files, ws).map_err(|e| {
                    Stop::harness(format!("cannot read the workspace {}: {e}", ws.display()))
                })?;
                let mut allowed = Vec::new();
                let mut links: Vec<String> = Vec::new();
                for (path, change) in &changes {
                    let decision = policy.decide(path);
                    if change.is_link_or_special() {
                        links.push(path.clone());
                        report.violations.push(path.clone());
                    } else if decision == PathDecision::Forbidden {
                        report.violations.push(path.clone());
                    } else if decision == PathDecision::Dropped {
                        report.dropped.push(path.clone());
                    } else {
                        allowed.push((path, change));
                    }
                }
                if !report.violations.is_empty() {
                    return Err(Stop {
                        verdict: Verdict::PolicyViolation,
                        detail: violation_detail("the workspace", &report.violations, &links),
                        policy: report,
                    });
                }
                for (path, change) in allowed {
                    apply_change(tree, path, change as &Change).map_err(|e| {
                        Stop::harness(format!("cannot apply {path} to the graded tree: {e}"))
                    })?;
                }
            }
        }
        let test_set = parse_patch(&task.row.test_patch).map_err(|e| {
            Stop::harness(format!("task defect: test_patch is not a valid diff: {e}"))
        })?;
        apply_patch(tree, &task.row.test_patch, &test_set, scratch)
            .map_err(|e| Stop::harness(format!("task defect: test_patch does not apply: {e}")))?;
        Ok(report)
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
        let env = self.environment(task)?;
        record.provenance.environment = env.info.clone();
        let dirs = run_dirs(workdir);
        std::fs::create_dir_all(&dirs.scratch).map_err(|e| Stop::harness(e.to_string()))?;
        record.policy = self.build_tree(task, submission, &dirs.tree, &dirs.scratch)?;
        if let SubmissionContent::Workspace(_) = submission.content {
            record.provenance.submission_digest = tree_digest(&dirs.tree);
        }
        let ids: Vec<String> = task
            .row
            .fail_to_pass
            .iter()
            .chain(&task.row.pass_to_pass)
            .cloned()
            .collect();
        let run = run_pytest(
            self.runner.as_ref(),
            &env,
            &dirs,
            &PytestMode::Select(ids.clone()),
            timeout,
            &self.settings.limits,
        )
        .map_err(|e| Stop::harness(format!("cannot prepare the test run: {e}")))?;
        self.score(task, &formula, &ids, &run, record)
    }

    fn score(
        &self,
        task: &Task,
        formula: &RewardFormula,
        ids: &[String],
        run: &PytestRun,
        record: &mut ResultRecord,
    ) -> Result<(), Stop> {
        let report = &run.report;
        let log: &TestLog = &run.log;
        if let RunStatus::SandboxFailed { reason } = &report.status {
            return Err(Stop::harness(format!("sandbox: {reason}")));
        }
        if let RunStatus::SpawnFailed { reason } = &report.status {
            return Err(Stop::harness(format!("cannot start pytest: {reason}")));
        }
        let timed_out = report.status == RunStatus::TimedOut;
        if !log.started {
            if timed_out {
                return Err(Stop {
                    verdict: Verdict::Timeout,
                    detail: "the test process did not start within the time bound".into(),
                    policy: record.policy.clone(),
                });
            }
            return Err(Stop::harness(format!(
                "pytest did not start ({}); output:\n{}",
                report.status.name(),
                report.output_tail(2000)
            )));
        }
        let tests: BTreeMap<String, TestOutcome> = ids
            .iter()
            .map(|id| (id.clone(), log.outcome(id, timed_out)))
            .collect();
        let passed = |list: &[String]| list.iter().filter(|id| tests[*id].passed()).count();
        let build_healthy = log.compile_errors.is_empty() && log.collect_errors.is_empty();
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
        record.compile_errors = log
            .compile_errors
            .iter()
            .map(|c| format!("{}: {}", c.path, c.message))
            .collect();
        record.collection_errors = log
            .collect_errors
            .iter()
            .map(|(id, _)| {
                if id.is_empty() {
                    "<session>".to_string()
                } else {
                    id.clone()
                }
            })
            .collect();
        record.verdict = if timed_out {
            Verdict::Timeout
        } else {
            Verdict::Graded
        };
        let mut notes = Vec::new();
        if timed_out {
            let running = log
                .running_when_stopped()
                .map(|id| format!(" while running {id}"))
                .unwrap_or_default();
            notes.push(format!(
                "the test run passed its {:.0} s bound{running}; unfinished tests count as failed",
                record.provenance.test_timeout_s
            ));
        } else if !log.finished {
            notes.push(format!(
                "the test process ended before pytest finished ({}); unfinished tests count as errors",
                match &report.status {
                    RunStatus::Exited { code } => format!("exit code {code}"),
                    RunStatus::Signaled { signal } => format!("signal {signal}"),
                    other => other.name().to_string(),
                }
            ));
        }
        if report.output_truncated {
            notes.push(format!(
                "test output was truncated after {} bytes",
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
        let result = (|| {
            let env = self.environment(task).map_err(|s| s.detail)?;
            let dirs = run_dirs(&workdir);
            std::fs::create_dir_all(&dirs.scratch).map_err(|e| e.to_string())?;
            self.build_tree(task, &Submission::noop(), &dirs.tree, &dirs.scratch)
                .map_err(|s| s.detail)?;
            let run = run_pytest(
                self.runner.as_ref(),
                &env,
                &dirs,
                &PytestMode::CollectAll,
                self.test_timeout(task),
                &self.settings.limits,
            )
            .map_err(|e| e.to_string())?;
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
        })();
        self.cleanup(&workdir);
        result
    }
}

/// Names what a policy violation consists of.
fn violation_detail(what: &str, violations: &[String], links: &[String]) -> String {
    let forbidden: Vec<&str> = violations
        .iter()
        .filter(|v| !links.contains(v))
        .map(String::as_str)
        .collect();
    let mut parts = Vec::new();
    if !forbidden.is_empty() {
        parts.push(format!(
            "changes forbidden or unsafe paths: {}",
            forbidden.join(", ")
        ));
    }
    if !links.is_empty() {
        parts.push(format!(
            "creates symbolic links or special files: {}",
            links.join(", ")
        ));
    }
    format!("{what} {}", parts.join("; "))
}

/// A digest of every file in a tree (paths and bytes).
fn tree_digest(dir: &Path) -> String {
    let mut h = Sha256::new();
    if let Ok(entries) = crate::workspace::scan_tree(dir) {
        for (path, entry) in entries {
            h.update(path.as_bytes());
            h.update([0]);
            if let crate::workspace::Entry::File { bytes, executable } = entry {
                h.update(&bytes);
                h.update([executable as u8]);
            }
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}
