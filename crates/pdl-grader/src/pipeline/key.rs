//! The resume-key rule ([`JobKey`]): one key per job, computable both from a
//! planned [`Job`](super::Job) and from a [`ResultRecord`] read back, so that
//! every command that writes results skips what a file already holds, whether
//! this release or an earlier one wrote it.
//!
//! The key is `<kind>:<digest>`, where `<digest>` is the first 32 hex digits of
//! the SHA-256 of `pdl-job-key/1`, the kind and the kind's parts, each followed
//! by a NUL byte:
//!
//! | kind | parts |
//! |---|---|
//! | `gold`, `noop`, `rung` | task digest, name (`gold`, `noop`, the rung) |
//! | `prediction` | instance ID, model (empty when unknown), submission digest |
//! | `episode` | the episode key (itself a digest of task, agent, model, sample) |
//! | `collect` | task digest (never recorded) |
//!
//! Every part is a field of the record (`provenance.task_digest`, `name`,
//! `instance_id`, `model_name_or_path`, `provenance.submission_digest`,
//! `episode.key`), so a record without `job_key` has the same key as one with
//! it. Repetitions of a job (validation repeats gold and do-nothing) share its
//! key.

use std::collections::HashSet;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::record::{ResultRecord, SubmissionKind, Verdict};

/// A job's resume key (see the module docs for the rule).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(String);

/// The version of the rule, hashed into every key.
const RULE: &str = "pdl-job-key/1";

impl JobKey {
    fn new(kind: &str, parts: &[&str]) -> Self {
        let mut h = Sha256::new();
        for part in [RULE, kind].iter().chain(parts) {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let digest = hex::encode(h.finalize());
        JobKey(format!("{kind}:{}", &digest[..32]))
    }

    /// A reference submission of the task: gold, do-nothing or a rung.
    pub fn reference(task_digest: &str, kind: SubmissionKind, name: &str) -> Self {
        JobKey::new(kind.name(), &[task_digest, name])
    }

    /// A prediction (valid or not) for an instance by a model.
    pub fn prediction(instance_id: &str, model: &str, submission_digest: &str) -> Self {
        JobKey::new(
            SubmissionKind::Prediction.name(),
            &[instance_id, model, submission_digest],
        )
    }

    /// An agent episode, by its content key.
    pub fn episode(episode_key: &str) -> Self {
        JobKey::new(SubmissionKind::Episode.name(), &[episode_key])
    }

    /// Collecting a task's tests.
    pub fn collect(task_digest: &str) -> Self {
        JobKey::new("collect", &[task_digest])
    }

    /// The key of the job that produced `record`, from its fields (never from
    /// its `job_key`, which older records lack). `None` for an episode record
    /// without an episode key.
    pub fn of_record(record: &ResultRecord) -> Option<Self> {
        Some(match record.kind {
            SubmissionKind::Gold | SubmissionKind::Noop | SubmissionKind::Rung => {
                JobKey::reference(&record.provenance.task_digest, record.kind, &record.name)
            }
            SubmissionKind::Prediction => JobKey::prediction(
                &record.instance_id,
                record.model_name_or_path.as_deref().unwrap_or_default(),
                &record.provenance.submission_digest,
            ),
            SubmissionKind::Episode => JobKey::episode(record.episode.as_ref()?.key.as_deref()?),
        })
    }

    /// The key as written in records.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which earlier records count as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Every record: its job is not run again.
    Every,
    /// Every record but a `harness_error` one, whose job runs again (the
    /// harness, not the submission, was at fault).
    RetryHarnessErrors,
}

/// The keys of the jobs `records` finished, by the `resume` rule.
pub fn done_keys<'a>(
    records: impl IntoIterator<Item = &'a ResultRecord>,
    resume: Resume,
) -> HashSet<JobKey> {
    records
        .into_iter()
        .filter(|r| resume == Resume::Every || r.verdict != Verdict::HarnessError)
        .filter_map(JobKey::of_record)
        .collect()
}
