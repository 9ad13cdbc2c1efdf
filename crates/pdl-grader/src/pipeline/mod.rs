//! One plan → execute → record path ([`Pipeline`]) for `validate`,
//! `calibrate`, `grade` and `run`.
//!
//! A command plans a [`Plan`]: phases of [`Job`]s (plain data, each with its
//! [`JobKey`]), minus the jobs whose records its results file already holds
//! ([`done_keys`]). [`Pipeline::run`] executes the phases in order, the jobs of
//! a phase in parallel, appends each record to a [`RecordSink`] as soon as it
//! is known (so an interrupted run resumes), and reports everything as one
//! typed [`Event`] stream on the calling thread.
//!
//! The ladder rule: the rungs of the tasks involved are measured by the plan's
//! [`Phase::Ladder`] (or their fingerprints are known before it starts: read
//! from the cache, keyed by task digest and environment digest, or from the
//! rung records a resumed results file holds), and later phases grade with the
//! fingerprints, so every record's `landed_rung` is known when it is written. A
//! rung's own record is written once its task's whole ladder is measured.
//!
//! A plan can be cut into deterministic slices ([`Plan::shard`], see
//! [`shard`]) that separate machines run; `pdl-swe merge` puts their records
//! back together in plan order.
//!
//! Agent episodes need the gateway and agents of `pdl-episode`: the pipeline
//! runs them through the [`EpisodeRunner`] a campaign provides.

pub mod event;
pub mod job;
pub mod key;
pub mod shard;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use pdl_task::Task;

pub use event::{Event, JobResult, Phase, PhaseTotals, RunStats};
pub use job::{EpisodeJob, InvalidJob, Job, JobKind};
pub use key::{done_keys, JobKey, Resume};
pub use shard::{Shard, ShardManifest};

use crate::execute::{execute_reporting, Report};
use crate::grade::{Grader, Submission, HARNESS_VERSION};
use crate::ladder::{LadderFingerprints, RungFingerprint};
use crate::record::{
    Components, PolicyReport, Provenance, RecordLog, ResultRecord, SubmissionKind, Verdict,
};

/// Where records go as soon as they are known.
pub trait RecordSink {
    /// Appends one record (durably: an interrupted run keeps it).
    fn append(&mut self, record: &ResultRecord) -> std::io::Result<()>;
}

impl RecordSink for RecordLog {
    fn append(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        RecordLog::append(self, record)
    }
}

impl<S: RecordSink + ?Sized> RecordSink for Option<&mut S> {
    fn append(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        match self {
            Some(sink) => sink.append(record),
            None => Ok(()),
        }
    }
}

/// Runs a campaign's episodes (implemented in `pdl-episode`).
pub trait EpisodeRunner: Sync {
    /// Starts what the episodes need (the gateway, the agents' runtime); called
    /// once, before the first episode, only when the plan has episodes.
    /// Warnings go to `warn`.
    fn start<'s>(
        &'s self,
        warn: &mut dyn FnMut(String),
    ) -> Result<Box<dyn EpisodeSession + 's>, PipelineError>;
}

/// What a started [`EpisodeRunner`] runs episodes with; dropping it stops it.
pub trait EpisodeSession: Sync {
    /// Runs one episode and grades its final workspace with `ladder`; every
    /// failure is in the record (`harness_error` for the harness's own).
    fn run(&self, task: &Task, job: &EpisodeJob, ladder: &LadderFingerprints) -> ResultRecord;
}

/// Why a plan could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A record could not be appended to the results.
    #[error("cannot write the results: {0}")]
    Write(#[source] std::io::Error),
    /// The plan has episodes and no runner, or the runner could not start.
    #[error("{0}")]
    Episodes(String),
}

/// The jobs of one phase.
#[derive(Debug, Clone)]
pub struct PhasePlan {
    /// The phase.
    pub phase: Phase,
    /// Its jobs, in the order workers take them.
    pub jobs: Vec<Job>,
    /// Jobs left out because their records are already written.
    pub skipped: usize,
    /// Whether its records are written (false: a ladder measured only for
    /// fingerprints).
    pub recorded: bool,
}

impl PhasePlan {
    /// An empty phase.
    pub fn new(phase: Phase, recorded: bool) -> Self {
        PhasePlan {
            phase,
            jobs: Vec::new(),
            skipped: 0,
            recorded,
        }
    }

    /// Adds `job`, or counts it as skipped when its key is in `done`.
    pub fn push_unless_done(&mut self, job: Job, done: &std::collections::HashSet<JobKey>) {
        if done.contains(&job.key) {
            self.skipped += 1;
        } else {
            self.jobs.push(job);
        }
    }

    fn totals(&self) -> PhaseTotals {
        PhaseTotals {
            phase: self.phase,
            total: self.jobs.len(),
            skipped: self.skipped,
            recorded: self.recorded,
        }
    }
}

/// Everything a run will do, planned before anything runs.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The phases, in order.
    pub phases: Vec<PhasePlan>,
    /// Rung fingerprints known before the plan runs, by task index (from the
    /// cache, or from the rung records of a resumed results file).
    pub known_rungs: BTreeMap<usize, Vec<RungFingerprint>>,
    /// Where complete ladders are cached (`None`: not cached).
    pub ladder_cache: Option<PathBuf>,
}

impl Plan {
    /// Jobs to run, over every phase.
    pub fn total(&self) -> usize {
        self.phases.iter().map(|p| p.jobs.len()).sum()
    }

    /// Jobs skipped as done, over every phase.
    pub fn skipped(&self) -> usize {
        self.phases.iter().map(|p| p.skipped).sum()
    }

    /// The phase `phase`, added (empty) when missing.
    pub fn phase_mut(&mut self, phase: Phase, recorded: bool) -> &mut PhasePlan {
        let at = match self.phases.iter().position(|p| p.phase == phase) {
            Some(at) => at,
            None => {
                self.phases.push(PhasePlan::new(phase, recorded));
                self.phases.len() - 1
            }
        };
        &mut self.phases[at]
    }

    /// The ladder phase's rung jobs for `tasks[i]` for each `i` of `order`,
    /// skipping those in `done`.
    pub fn add_ladders(
        &mut self,
        tasks: &[Task],
        order: &[usize],
        recorded: bool,
        done: &std::collections::HashSet<JobKey>,
    ) {
        let phase = self.phase_mut(Phase::Ladder, recorded);
        for &i in order {
            for rung in &tasks[i].extras.ladder {
                if let Some(s) = Submission::rung(&tasks[i], &rung.name) {
                    phase.push_unless_done(Job::grade(tasks, i, s, 0), done);
                }
            }
        }
    }
}

/// Task indices, slowest first (most tests), so the tail of a parallel phase
/// is short.
pub fn slow_first(tasks: &[Task]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by_key(|&i| {
        std::cmp::Reverse(tasks[i].row.fail_to_pass.len() + tasks[i].row.pass_to_pass.len())
    });
    order
}

/// One finished job of a run.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Index of its phase in the plan.
    pub phase: usize,
    /// Index of the job in its phase.
    pub job: usize,
    /// What it produced (a record as written).
    pub result: JobResult,
    /// Its wall time, in seconds.
    pub busy_s: f64,
}

/// What a run produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every finished job, in completion order.
    pub finished: Vec<Finished>,
    /// The run's counts.
    pub stats: RunStats,
    /// True when the run stopped because the harness was asked to stop.
    pub interrupted: bool,
}

impl Outcome {
    /// The records written, in the order written.
    pub fn records(&self) -> impl Iterator<Item = &ResultRecord> {
        self.finished.iter().filter_map(|f| f.result.record())
    }
}

/// Executes plans with one grader over one list of tasks.
pub struct Pipeline<'a> {
    /// The grader of every submission and workspace.
    pub grader: &'a Grader,
    /// The tasks job indices refer to.
    pub tasks: &'a [Task],
    /// Jobs in parallel.
    pub parallelism: usize,
    /// The runner of episode jobs, when the plan has any.
    pub episodes: Option<&'a dyn EpisodeRunner>,
}

/// Rung records of one task waiting for the rest of its ladder.
#[derive(Default)]
struct PendingLadder {
    left: usize,
    held: Vec<(usize, JobResult, f64)>,
}

/// The calling thread's side of one running phase: writes records, emits
/// events, keeps what finished.
struct PhaseRun<'p> {
    phase: Phase,
    jobs: &'p [Job],
    recorded: bool,
    sink: &'p mut dyn RecordSink,
    on_event: &'p mut dyn FnMut(Event<'_>),
    stats: &'p mut RunStats,
    write_error: Option<std::io::Error>,
    finished: Vec<(usize, JobResult, f64)>,
}

impl PhaseRun<'_> {
    fn emit(&mut self, event: Event<'_>) {
        self.stats.on_event(&event);
        (self.on_event)(event);
    }

    /// Writes (or only reports) a finished job's result.
    fn deliver(&mut self, index: usize, mut result: JobResult, busy_s: f64) {
        let jobs = self.jobs;
        let job = &jobs[index];
        let phase = self.phase;
        if let JobResult::Record(record) = &mut result {
            record.job_key = Some(job.key.as_str().to_string());
        }
        match &result {
            JobResult::Record(record) if self.recorded => {
                if let Err(e) = self.sink.append(record) {
                    self.write_error.get_or_insert(e);
                }
                self.emit(Event::Recorded { phase, job, record });
            }
            result => self.emit(Event::Measured { phase, job, result }),
        }
        self.finished.push((index, result, busy_s));
    }
}

impl Pipeline<'_> {
    /// Runs `plan`: phase by phase, each record appended to `sink` as soon as
    /// it is known, every event handed to `on_event`. A write error stops the
    /// run after its phase; an interruption (see [`crate::execute`]) stops it
    /// with what was written kept.
    pub fn run(
        &self,
        plan: &Plan,
        sink: &mut dyn RecordSink,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<Outcome, PipelineError> {
        let mut outcome = Outcome::default();
        let totals: Vec<PhaseTotals> = plan.phases.iter().map(PhasePlan::totals).collect();
        let started = Event::PlanStarted { phases: &totals };
        outcome.stats.on_event(&started);
        on_event(started);
        let mut ladders: Vec<LadderFingerprints> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(i, task)| {
                LadderFingerprints::from_rungs(
                    task,
                    plan.known_rungs.get(&i).cloned().unwrap_or_default(),
                )
            })
            .collect();
        let mut session: Option<Box<dyn EpisodeSession + '_>> = None;
        for (phase_index, phase_plan) in plan.phases.iter().enumerate() {
            if pdl_sandbox::interrupt::requested() {
                break;
            }
            let phase = phase_plan.phase;
            let event = Event::PhaseStarted(phase_plan.totals());
            outcome.stats.on_event(&event);
            on_event(event);
            let jobs = &phase_plan.jobs;
            if jobs.is_empty() {
                continue;
            }
            if session.is_none() && jobs.iter().any(|j| matches!(j.kind, JobKind::Episode(_))) {
                let runner = self.episodes.ok_or_else(|| {
                    PipelineError::Episodes("the plan has episodes but no episode runner".into())
                })?;
                let mut warnings = Vec::new();
                let started = runner.start(&mut |w| warnings.push(w));
                for w in warnings {
                    let event = Event::Warning(w);
                    outcome.stats.on_event(&event);
                    on_event(event);
                }
                session = Some(started?);
            }
            let mut pending: HashMap<usize, PendingLadder> = HashMap::new();
            if phase == Phase::Ladder {
                for t in jobs.iter().filter_map(|j| j.task) {
                    pending.entry(t).or_default().left += 1;
                }
            }
            let mut completed: Vec<(usize, LadderFingerprints)> = Vec::new();
            let mut run = PhaseRun {
                phase,
                jobs,
                recorded: phase_plan.recorded,
                sink: &mut *sink,
                on_event: &mut *on_event,
                stats: &mut outcome.stats,
                write_error: None,
                finished: Vec::new(),
            };
            let ladders_now = &ladders;
            let session_now = session.as_deref();
            execute_reporting(
                jobs,
                self.parallelism,
                |job| {
                    let started = Instant::now();
                    let result = self.work(job, phase, ladders_now, session_now);
                    (result, started.elapsed().as_secs_f64())
                },
                |report| match report {
                    Report::Started(i) => run.emit(Event::JobStarted {
                        phase,
                        job: &jobs[i],
                    }),
                    Report::Finished(i, (result, busy_s)) => {
                        match jobs[i].task.filter(|_| phase == Phase::Ladder) {
                            None => run.deliver(i, result, busy_s),
                            Some(t) => {
                                let waiting =
                                    pending.get_mut(&t).expect("every ladder task is counted");
                                waiting.held.push((i, result, busy_s));
                                waiting.left -= 1;
                                if waiting.left == 0 {
                                    let held = std::mem::take(&mut waiting.held);
                                    let fingerprints =
                                        self.complete_ladder(plan, t, held, &mut run);
                                    completed.push((t, fingerprints));
                                }
                            }
                        }
                    }
                },
            );
            let PhaseRun {
                write_error,
                finished,
                ..
            } = run;
            for (t, fingerprints) in completed {
                let task = &self.tasks[t];
                if let Some(root) = &plan.ladder_cache {
                    if fingerprints.rungs.len() == task.extras.ladder.len() {
                        let env = finished
                            .iter()
                            .filter(|(i, _, _)| jobs[*i].task == Some(t))
                            .find_map(|(_, r, _)| r.record())
                            .map(|r| r.provenance.environment.digest.clone())
                            .unwrap_or_default();
                        // A cache that cannot be written costs only time later.
                        let _ = fingerprints.store(root, task, &env);
                    }
                }
                ladders[t] = fingerprints;
            }
            outcome
                .finished
                .extend(finished.into_iter().map(|(job, result, busy_s)| Finished {
                    phase: phase_index,
                    job,
                    result,
                    busy_s,
                }));
            if let Some(e) = write_error {
                return Err(PipelineError::Write(e));
            }
        }
        outcome.interrupted = pdl_sandbox::interrupt::requested();
        drop(session);
        Ok(outcome)
    }

    /// The whole ladder of `tasks[t]` is measured: its fingerprints (with
    /// those known before), and its rung records delivered with their landed
    /// rung (a rung lands on itself, or on an earlier rung it equals).
    fn complete_ladder(
        &self,
        plan: &Plan,
        t: usize,
        held: Vec<(usize, JobResult, f64)>,
        run: &mut PhaseRun<'_>,
    ) -> LadderFingerprints {
        let task = &self.tasks[t];
        let measured =
            LadderFingerprints::from_records(task, held.iter().filter_map(|(_, r, _)| r.record()));
        let mut rungs = plan.known_rungs.get(&t).cloned().unwrap_or_default();
        rungs.retain(|r| measured.rungs.iter().all(|m| m.name != r.name));
        rungs.extend(measured.rungs);
        let fingerprints = LadderFingerprints::from_rungs(task, rungs);
        for (i, mut result, busy_s) in held {
            if let JobResult::Record(record) = &mut result {
                if matches!(record.verdict, Verdict::Graded | Verdict::Timeout) {
                    record.landed_rung = fingerprints.landed(task, record);
                }
            }
            run.deliver(i, result, busy_s);
        }
        fingerprints
    }

    /// Does one job on a worker thread.
    fn work(
        &self,
        job: &Job,
        phase: Phase,
        ladders: &[LadderFingerprints],
        session: Option<&(dyn EpisodeSession + '_)>,
    ) -> JobResult {
        let task = job.task.map(|t| &self.tasks[t]);
        match (&job.kind, task) {
            (JobKind::Collect, Some(task)) => JobResult::Collected(self.grader.collect(task)),
            (JobKind::Grade { submission, .. }, Some(task)) => {
                // Rungs are graded before their ladder is known; their
                // landed rung is set when the ladder is complete.
                let ladder = (phase != Phase::Ladder).then(|| &ladders[job.task.unwrap_or(0)]);
                JobResult::Record(Box::new(self.grader.grade(task, submission, ladder)))
            }
            (JobKind::Episode(episode), Some(task)) => {
                let session = session.expect("a session is started before episodes run");
                let ladder = &ladders[job.task.unwrap_or(0)];
                JobResult::Record(Box::new(session.run(task, episode, ladder)))
            }
            (JobKind::Invalid(invalid), task) => {
                JobResult::Record(Box::new(invalid_record(invalid, task)))
            }
            (_, None) => JobResult::Collected(Err("the job names no task".into())),
        }
    }
}

/// The record of a prediction that cannot be graded.
fn invalid_record(invalid: &InvalidJob, task: Option<&Task>) -> ResultRecord {
    let model = invalid.model_name_or_path.clone();
    ResultRecord {
        instance_id: invalid.instance_id.clone(),
        model_name_or_path: model.clone(),
        kind: SubmissionKind::Prediction,
        name: model.unwrap_or_else(|| "unknown".into()),
        reward: 0.0,
        components: Components::default(),
        verdict: Verdict::InvalidPrediction,
        detail: Some(invalid.detail.clone()),
        tests: BTreeMap::new(),
        policy: PolicyReport::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 0.0,
        phases_s: Default::default(),
        provenance: Provenance {
            harness_version: HARNESS_VERSION.into(),
            task_digest: task.map(Task::digest).unwrap_or_default(),
            submission_digest: invalid.submission_digest.clone(),
            ..Provenance::default()
        },
        suspicious: Vec::new(),
        episode: None,
        job_key: None,
    }
}

#[cfg(test)]
mod tests;
