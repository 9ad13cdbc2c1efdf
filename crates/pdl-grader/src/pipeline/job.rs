//! One unit of work ([`Job`]): plain data, planned before anything runs.

use pdl_task::Task;

use super::key::JobKey;
use crate::grade::Submission;
use crate::record::{PriorOutcome, SubmissionKind};

/// What a job does. Closed: every command plans only these.
#[derive(Debug, Clone, PartialEq)]
pub enum JobKind {
    /// Collect every test at base with the hidden tests in place.
    Collect,
    /// Grade a submission: gold, do-nothing, a rung or a prediction.
    Grade {
        /// What to grade.
        submission: Submission,
        /// Which repetition (0-based) this is.
        repeat: usize,
    },
    /// Run an agent episode and grade its final workspace (through the
    /// [`EpisodeRunner`](super::EpisodeRunner) a campaign provides).
    Episode(EpisodeJob),
    /// A prediction that cannot be graded: its record is known when planned.
    Invalid(InvalidJob),
}

/// An episode to run.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeJob {
    /// Index of the agent in the campaign's agents.
    pub agent: usize,
    /// The agent's label in records.
    pub agent_label: String,
    /// The model.
    pub model: String,
    /// The sample number.
    pub sample: usize,
    /// The episode's content key.
    pub episode_key: String,
    /// Outcomes of earlier runs of this episode (harness errors), oldest first.
    pub previous: Vec<PriorOutcome>,
}

/// A prediction that cannot be graded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidJob {
    /// Its instance ID (empty when unreadable).
    pub instance_id: String,
    /// Its model, when readable.
    pub model_name_or_path: Option<String>,
    /// Where it was and what is wrong.
    pub detail: String,
    /// The digest recorded as its submission digest.
    pub submission_digest: String,
}

/// One unit of work of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Index of its task in the pipeline's tasks; `None` only for a prediction
    /// of an instance the dataset does not hold.
    pub task: Option<usize>,
    /// What it does.
    pub kind: JobKind,
    /// Its resume key.
    pub key: JobKey,
}

impl Job {
    /// Collecting the tests of `tasks[task]`.
    pub fn collect(tasks: &[Task], task: usize) -> Self {
        Job {
            task: Some(task),
            kind: JobKind::Collect,
            key: JobKey::collect(&tasks[task].digest()),
        }
    }

    /// Grading `submission` on `tasks[task]`.
    pub fn grade(tasks: &[Task], task: usize, submission: Submission, repeat: usize) -> Self {
        let t = &tasks[task];
        let key = match submission.kind {
            SubmissionKind::Prediction | SubmissionKind::Episode => JobKey::prediction(
                &t.row.instance_id,
                submission.model_name_or_path.as_deref().unwrap_or_default(),
                &submission.digest(),
            ),
            kind => JobKey::reference(&t.digest(), kind, &submission.name),
        };
        Job {
            task: Some(task),
            kind: JobKind::Grade { submission, repeat },
            key,
        }
    }

    /// Running an episode on `tasks[task]`.
    pub fn episode(task: usize, episode: EpisodeJob) -> Self {
        Job {
            task: Some(task),
            key: JobKey::episode(&episode.episode_key),
            kind: JobKind::Episode(episode),
        }
    }

    /// Recording a prediction that cannot be graded.
    pub fn invalid(task: Option<usize>, invalid: InvalidJob) -> Self {
        Job {
            task,
            key: JobKey::prediction(
                &invalid.instance_id,
                invalid.model_name_or_path.as_deref().unwrap_or_default(),
                &invalid.submission_digest,
            ),
            kind: JobKind::Invalid(invalid),
        }
    }

    /// The kind of submission its record will have, if it makes one.
    pub fn submission_kind(&self) -> Option<SubmissionKind> {
        match &self.kind {
            JobKind::Collect => None,
            JobKind::Grade { submission, .. } => Some(submission.kind),
            JobKind::Episode(_) => Some(SubmissionKind::Episode),
            JobKind::Invalid(_) => Some(SubmissionKind::Prediction),
        }
    }

    /// A short label for progress displays (`<task_id> gold #2`).
    pub fn label(&self, tasks: &[Task]) -> String {
        let id = match (self.task, &self.kind) {
            (Some(t), _) => tasks[t].row.task_id.as_str(),
            (None, JobKind::Invalid(i)) => i.instance_id.as_str(),
            (None, _) => "?",
        };
        match &self.kind {
            JobKind::Collect => format!("{id} collect"),
            JobKind::Grade { submission, repeat } if *repeat > 0 => {
                format!("{id} {} #{}", submission.name, repeat + 1)
            }
            JobKind::Grade { submission, .. } => format!("{id} {}", submission.name),
            JobKind::Episode(e) => format!("{id} {} s{}", e.agent_label, e.sample),
            JobKind::Invalid(_) => format!("{id} invalid"),
        }
    }
}
