//! The plan of a validation or calibration ([`plan`]) and what it measured,
//! by task ([`TaskMeasurements`]).

use std::collections::{BTreeMap, HashSet};

use pdl_task::Task;

use crate::grade::{Collection, Submission};
use crate::pipeline::{slow_first, Job, JobKind, JobResult, Outcome, Phase, Plan};
use crate::record::{ResultRecord, SubmissionKind};

/// What to plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanOptions {
    /// Collect every test (validation).
    pub collect: bool,
    /// How many times gold and do-nothing run (at least 1).
    pub repeats: usize,
    /// Grade every rung.
    pub rungs: bool,
}

/// The plan for a set of tasks: the ladder phase (every rung, recorded), then
/// the calibration phase (collection, gold and do-nothing). Slow tasks first
/// in each, so the tail of a parallel phase is short. Nothing is skipped: a
/// validation measures the task as it behaves now.
pub fn plan(tasks: &[Task], options: PlanOptions) -> Plan {
    let order = slow_first(tasks);
    let mut plan = Plan::default();
    if options.rungs {
        plan.add_ladders(tasks, &order, true, &HashSet::new());
    }
    let phase = plan.phase_mut(Phase::Calibration, true);
    for &i in &order {
        if options.collect {
            phase.jobs.push(Job::collect(tasks, i));
        }
        for repeat in 0..options.repeats.max(1) {
            phase
                .jobs
                .push(Job::grade(tasks, i, Submission::gold(&tasks[i]), repeat));
            phase
                .jobs
                .push(Job::grade(tasks, i, Submission::noop(), repeat));
        }
    }
    plan
}

/// Everything measured for one task.
#[derive(Debug, Clone, Default)]
pub struct TaskMeasurements {
    /// The collection, when planned.
    pub collection: Option<Result<Collection, String>>,
    /// Gold records, by repetition.
    pub gold: Vec<ResultRecord>,
    /// Do-nothing records, by repetition.
    pub noop: Vec<ResultRecord>,
    /// Rung records, by name.
    pub rungs: BTreeMap<String, ResultRecord>,
    /// Wall time spent on the task's jobs, summed.
    pub busy_s: f64,
}

impl TaskMeasurements {
    /// What `outcome` (a run of `plan`) measured, one entry per task.
    pub fn from_outcome(tasks: &[Task], plan: &Plan, outcome: &Outcome) -> Vec<TaskMeasurements> {
        let mut out = vec![TaskMeasurements::default(); tasks.len()];
        for finished in &outcome.finished {
            let job = &plan.phases[finished.phase].jobs[finished.job];
            let Some(task) = job.task else { continue };
            let m = &mut out[task];
            m.busy_s += finished.busy_s;
            match (&job.kind, &finished.result) {
                (JobKind::Collect, JobResult::Collected(c)) => m.collection = Some(c.clone()),
                (JobKind::Grade { submission, repeat }, JobResult::Record(r)) => {
                    match submission.kind {
                        SubmissionKind::Gold => insert_at(&mut m.gold, *repeat, r),
                        SubmissionKind::Noop => insert_at(&mut m.noop, *repeat, r),
                        _ => {
                            m.rungs.insert(submission.name.clone(), (**r).clone());
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

fn insert_at(list: &mut Vec<ResultRecord>, index: usize, record: &ResultRecord) {
    while list.len() <= index {
        list.push(record.clone());
    }
    list[index] = record.clone();
}
