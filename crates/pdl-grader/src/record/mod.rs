//! The result record ([`ResultRecord`]): one JSON object per graded submission,
//! with its [`Verdict`], reward, components, per-test outcomes, policy decision
//! and provenance. An episode's record carries an [`EpisodeInfo`] as well.

pub mod episode;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::TestOutcome;

pub use episode::{
    EpisodeInfo, MalformedField, ModelRoute, PriorOutcome, ScratchFsInfo, TokenCount,
};

/// How a grading ended. Closed: every record has exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Tests ran to the end; the reward is meaningful.
    Graded,
    /// The submission changed a forbidden path, a symlink, or a path outside the
    /// repository. Reward 0.
    PolicyViolation,
    /// The patch is not a diff or does not apply. Reward 0.
    PatchFailed,
    /// The test run hit its time bound; tests that did not finish count as failed.
    Timeout,
    /// The submission interfered with the grading machinery: forged or
    /// conflicting outcomes, a broken outcome protocol, channels that disagree,
    /// pytest's machinery changed. Reward 0.
    Tampered,
    /// The harness could not grade (environment, sandbox, task defect). Not the
    /// submission's fault; excluded from means and retried by campaigns.
    HarnessError,
    /// A prediction that could not be graded at all: an unknown instance, a
    /// duplicate, or an entry without the required fields. Reward 0.
    InvalidPrediction,
}

impl Verdict {
    /// The verdict's name in records and tables.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Graded => "graded",
            Verdict::PolicyViolation => "policy_violation",
            Verdict::PatchFailed => "patch_failed",
            Verdict::Timeout => "timeout",
            Verdict::Tampered => "tampered",
            Verdict::HarnessError => "harness_error",
            Verdict::InvalidPrediction => "invalid_prediction",
        }
    }

    /// True when the harness, not the submission, is at fault.
    pub fn is_infrastructure(self) -> bool {
        self == Verdict::HarnessError
    }
}

/// What was graded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionKind {
    /// The reference patch.
    Gold,
    /// The empty patch (the do-nothing agent).
    Noop,
    /// A registered ladder rung.
    Rung,
    /// A patch from a predictions file.
    Prediction,
    /// The final workspace of an agent episode.
    Episode,
}

impl SubmissionKind {
    /// The kind's name in records.
    pub fn name(self) -> &'static str {
        match self {
            SubmissionKind::Gold => "gold",
            SubmissionKind::Noop => "noop",
            SubmissionKind::Rung => "rung",
            SubmissionKind::Prediction => "prediction",
            SubmissionKind::Episode => "episode",
        }
    }
}

/// The three variables of the reward.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Components {
    /// Passed FAIL_TO_PASS / len(FAIL_TO_PASS).
    pub hidden_pass_fraction: f64,
    /// Passed PASS_TO_PASS / len(PASS_TO_PASS).
    pub public_regression: f64,
    /// 1 when every `.py` file compiles and every test file collected.
    pub build_health: f64,
}

/// The policy decision on a submission's change set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PolicyReport {
    /// Paths whose change is forbidden (or symlinks, or escaping paths).
    pub violations: Vec<String>,
    /// Changed paths that matched no glob and were left out of the graded tree.
    pub dropped: Vec<String>,
}

/// One line of a graded change that a review rule matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspiciousLine {
    /// Repository-relative path.
    pub path: String,
    /// Line number in the graded file.
    pub line: usize,
    /// The rule that matched.
    pub rule: String,
    /// The line (trimmed, at most 200 characters).
    pub text: String,
}

impl From<crate::suspicious::SuspiciousMatch> for SuspiciousLine {
    fn from(m: crate::suspicious::SuspiciousMatch) -> Self {
        SuspiciousLine {
            path: m.path,
            line: m.line,
            rule: m.rule.to_string(),
            text: m.text,
        }
    }
}

/// The Python environment a grading ran in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnvironmentInfo {
    /// Digest of the Python version and every installed package.
    pub digest: String,
    /// Python version.
    pub python_version: String,
    /// Installed packages as `name==version`.
    pub packages: Vec<String>,
}

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Provenance {
    /// The grader's version.
    pub harness_version: String,
    /// The task's digest.
    pub task_digest: String,
    /// Digest of the submitted patch (or of the graded change set of a workspace).
    pub submission_digest: String,
    /// The Python environment.
    pub environment: EnvironmentInfo,
    /// What the sandbox actually enforced on the test run.
    #[serde(default)]
    pub sandbox: pdl_sandbox::Enforcement,
    /// The bound on the test run, in seconds.
    pub test_timeout_s: f64,
    /// When grading started (RFC 3339, UTC).
    pub started_at: String,
}

/// One graded submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    /// The task version.
    pub instance_id: String,
    /// The model or system that produced the submission (predictions, episodes).
    #[serde(default)]
    pub model_name_or_path: Option<String>,
    /// What was graded.
    pub kind: SubmissionKind,
    /// Its name (rung name, `gold`, `noop`, a prediction's model, an episode key).
    pub name: String,
    /// The reward, full precision.
    pub reward: f64,
    /// The reward's three variables.
    pub components: Components,
    /// How grading ended.
    pub verdict: Verdict,
    /// Why, when the verdict is not `graded` (or something notable happened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The outcome of every FAIL_TO_PASS and PASS_TO_PASS node ID.
    pub tests: BTreeMap<String, TestOutcome>,
    /// The policy decision.
    pub policy: PolicyReport,
    /// The rung whose per-test hidden outcomes (and reward) this result equals.
    pub landed_rung: Option<String>,
    /// Files that failed to compile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compile_errors: Vec<String>,
    /// Test files (or conftest files) that failed to collect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collection_errors: Vec<String>,
    /// Wall time of the grading, in seconds.
    pub duration_s: f64,
    /// Where that time went, in seconds, phase by phase.
    #[serde(default)]
    pub phases_s: Phases,
    /// Where the record came from.
    pub provenance: Provenance,
    /// Lines of the graded change set that use the grading machinery or
    /// introspection, for a person to review (not a verdict).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspicious: Vec<SuspiciousLine>,
    /// Episode fields (tokens, end reason, trajectory), for episode records.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "episode::episode_object"
    )]
    pub episode: Option<EpisodeInfo>,
    /// The record's resume key ([`crate::pipeline::JobKey`]), as written by
    /// this release; readers compute it from the other fields, so records
    /// written before it existed resume alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_key: Option<String>,
}

/// Seconds spent in each phase of one grading; a phase that did not run is 0.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Preparing (or finding) the task's Python environment.
    pub environment: f64,
    /// Writing the pristine tree and applying the patch in the sandbox.
    pub apply: f64,
    /// Reading, comparing and policing the resulting tree.
    pub police: f64,
    /// Writing the graded tree and reading it for compile errors.
    pub layout: f64,
    /// The test run in the sandbox, from start to the last result read.
    pub tests: f64,
}

impl ResultRecord {
    /// The set of hidden node IDs that passed.
    pub fn passed_ids<'a>(&self, ids: &'a [String]) -> Vec<&'a str> {
        ids.iter()
            .filter(|id| self.tests.get(*id).is_some_and(|o| o.passed()))
            .map(String::as_str)
            .collect()
    }
}

/// A JSON Lines file of result records that is appended to as results arrive:
/// every record is flushed on its own line, so an interrupted run loses nothing
/// that was reported. Opening it cuts off a torn last line (a run killed
/// mid-write) and reads back the complete records; a line that is not a record
/// is kept in the file and reported by [`RecordLog::skipped`].
///
/// The file is opened without following a symbolic link and must be a regular
/// file: a link planted at its path is an error naming the path, never followed.
pub struct RecordLog {
    path: std::path::PathBuf,
    file: std::fs::File,
    existing: Vec<ResultRecord>,
    skipped: Vec<SkippedLine>,
}

/// A line of a record log that could not be read as a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedLine {
    /// Its one-based line number.
    pub line: usize,
    /// Why it is not a record.
    pub reason: String,
}

impl std::fmt::Display for SkippedLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl RecordLog {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::{Read, Seek, SeekFrom};
        let with_path =
            |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let mut file = pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::ReadAppend)
            .map_err(std::io::Error::from)?;
        let mut content = Vec::new();
        file.read_to_end(&mut content).map_err(with_path)?;
        if content.is_empty() {
            // Results name the hidden tests and their outcomes: a new file is
            // the user's alone (an agent path may come to hold it).
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(with_path)?;
        }
        if !content.is_empty() && !content.ends_with(b"\n") {
            let keep = content
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            content.truncate(keep);
            file.set_len(keep as u64).map_err(with_path)?;
            file.seek(SeekFrom::End(0)).map_err(with_path)?;
        }
        let mut existing = Vec::new();
        let mut skipped = Vec::new();
        for (index, line) in content.split(|b| *b == b'\n').enumerate() {
            let text = String::from_utf8_lossy(line);
            if text.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<ResultRecord>(&text) {
                Ok(record) => existing.push(record),
                Err(e) => skipped.push(SkippedLine {
                    line: index + 1,
                    reason: format!("not a result record ({e})"),
                }),
            }
        }
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
            existing,
            skipped,
        })
    }

    /// The complete records the file held when it was opened.
    pub fn existing(&self) -> &[ResultRecord] {
        &self.existing
    }

    /// The lines of the file that could not be read as records (left in place).
    pub fn skipped(&self) -> &[SkippedLine] {
        &self.skipped
    }

    /// Appends one record and flushes it.
    pub fn append(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_vec(record).expect("records serialize");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod record_log_tests {
    use super::*;

    #[test]
    fn a_new_results_file_is_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        drop(RecordLog::open(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // An existing file keeps the mode its owner gave it.
        std::fs::write(&path, "not a record\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        drop(RecordLog::open(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn a_symlinked_log_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(
            &victim,
            "important line 1\nimportant line 2 without newline",
        )
        .unwrap();
        let path = dir.path().join("results.jsonl");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = RecordLog::open(&path).err().unwrap();
        assert!(err.to_string().contains("results.jsonl"), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "important line 1\nimportant line 2 without newline"
        );
    }

    #[test]
    fn unreadable_lines_are_reported_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        std::fs::write(&path, "not a record\n\n{\"x\": 1}\n{\"torn").unwrap();
        let log = RecordLog::open(&path).unwrap();
        assert!(log.existing().is_empty());
        let lines: Vec<usize> = log.skipped().iter().map(|s| s.line).collect();
        assert_eq!(lines, [1, 3]);
        assert!(log.skipped()[0]
            .to_string()
            .starts_with("line 1: not a result record"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "not a record\n\n{\"x\": 1}\n"
        );
    }
}
