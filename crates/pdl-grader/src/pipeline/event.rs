//! The typed event stream of a running plan ([`Event`]) and the statistics
//! every reporter can share ([`RunStats`]). Libraries never print: the CLI's
//! reporters turn events into progress bars and tables.

use std::collections::BTreeMap;

use super::job::Job;
use crate::grade::Collection;
use crate::record::{ResultRecord, Verdict};

/// A stage of a plan. Phases run one after another; the jobs of a phase run in
/// parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// The rungs of the tasks involved, measured so that every later record's
    /// `landed_rung` is known when it is written.
    Ladder,
    /// Reference measurements: collection, gold and do-nothing.
    Calibration,
    /// The entries of a predictions file.
    Predictions,
    /// Agent episodes.
    Episodes,
}

impl Phase {
    /// The phase's name in progress displays.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Ladder => "ladder",
            Phase::Calibration => "calibration",
            Phase::Predictions => "predictions",
            Phase::Episodes => "episodes",
        }
    }
}

/// A phase's size, as planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTotals {
    /// The phase.
    pub phase: Phase,
    /// Jobs to run.
    pub total: usize,
    /// Jobs found done in the results already written.
    pub skipped: usize,
    /// Whether its records are written (a ladder measured only for
    /// fingerprints is not).
    pub recorded: bool,
}

/// What a finished job produced.
#[derive(Debug, Clone)]
pub enum JobResult {
    /// A collection (or why it failed).
    Collected(Result<Collection, String>),
    /// A grading's record.
    Record(Box<ResultRecord>),
}

impl JobResult {
    /// The record, when the job made one.
    pub fn record(&self) -> Option<&ResultRecord> {
        match self {
            JobResult::Record(r) => Some(r),
            JobResult::Collected(_) => None,
        }
    }
}

/// One event of a running plan, in the order it happened, on the thread that
/// runs the plan.
#[derive(Debug)]
pub enum Event<'a> {
    /// The plan is about to run: every phase's size, in order.
    PlanStarted {
        /// The phases.
        phases: &'a [PhaseTotals],
    },
    /// A phase starts.
    PhaseStarted(PhaseTotals),
    /// A job started on a worker.
    JobStarted {
        /// Its phase.
        phase: Phase,
        /// The job.
        job: &'a Job,
    },
    /// A job's record was appended to the results.
    Recorded {
        /// Its phase.
        phase: Phase,
        /// The job.
        job: &'a Job,
        /// The record, as written.
        record: &'a ResultRecord,
    },
    /// A job finished whose result is not written: a collection, or a rung
    /// measured only for its fingerprints.
    Measured {
        /// Its phase.
        phase: Phase,
        /// The job.
        job: &'a Job,
        /// What it produced.
        result: &'a JobResult,
    },
    /// Something was skipped or could not be done; the run goes on.
    Warning(String),
}

/// Counts over a run, fed by its events (one set of numbers for every reporter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Jobs planned to run.
    pub planned: usize,
    /// Jobs skipped as done.
    pub skipped: usize,
    /// Jobs started.
    pub started: usize,
    /// Jobs finished (recorded or measured).
    pub finished: usize,
    /// Records written.
    pub recorded: usize,
    /// Records written, by verdict.
    pub verdicts: BTreeMap<&'static str, usize>,
    /// Warnings given.
    pub warnings: usize,
}

impl RunStats {
    /// Counts one event.
    pub fn on_event(&mut self, event: &Event<'_>) {
        match event {
            Event::PlanStarted { phases } => {
                self.planned += phases.iter().map(|p| p.total).sum::<usize>();
                self.skipped += phases.iter().map(|p| p.skipped).sum::<usize>();
            }
            Event::PhaseStarted(_) => {}
            Event::JobStarted { .. } => self.started += 1,
            Event::Recorded { record, .. } => {
                self.finished += 1;
                self.recorded += 1;
                *self.verdicts.entry(record.verdict.name()).or_default() += 1;
            }
            Event::Measured { .. } => self.finished += 1,
            Event::Warning(_) => self.warnings += 1,
        }
    }

    /// Records written with verdict `harness_error`.
    pub fn harness_errors(&self) -> usize {
        self.verdicts
            .get(Verdict::HarnessError.name())
            .copied()
            .unwrap_or(0)
    }
}
