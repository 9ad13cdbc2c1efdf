//! The JSON bodies of the HTTP API, shared by the server and the client.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Every error response: `{"error": "…"}` with a 4xx or 5xx status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong, naming the file, line or field when it is the input's
    /// fault.
    pub error: String,
}

/// `GET /api/whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The key's name.
    pub name: String,
    /// `admin` or `submitter`.
    pub role: String,
    /// The key's quotas.
    pub quotas: QuotaInfo,
    /// What the key was charged in the last 24 hours.
    pub used: Usage,
}

/// A key's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaInfo {
    /// Runs a day.
    pub runs_per_day: i64,
    /// Predictions in one run.
    pub predictions_per_run: i64,
    /// Bytes of predictions and datasets a day.
    pub upload_bytes_per_day: i64,
    /// Requests a minute.
    pub requests_per_minute: i64,
}

/// What a key was charged in the quota window (deleting refunds nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Runs started.
    pub runs: i64,
    /// Bytes uploaded.
    pub bytes: i64,
}

/// A dataset as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetInfo {
    /// Its name.
    pub name: String,
    /// Tasks in it.
    pub tasks: i64,
    /// Whether rung names and landed rungs are shown to submitters.
    pub public_ladders: bool,
    /// When it was uploaded (RFC 3339).
    pub created_at: String,
    /// The keys that may use it (admins only; empty: every submitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<String>>,
}

/// What an agent may see of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    /// `<task_id>-v<version>`.
    pub instance_id: String,
    /// The task.
    pub task_id: String,
    /// `T1` … `T5`.
    pub tier: String,
    /// One line about the codebase.
    pub domain: String,
    /// The issue.
    pub problem_statement: String,
    /// Globs the agent may change.
    pub patch_policy_allowed: Vec<String>,
    /// Globs it must not change.
    pub patch_policy_forbidden: Vec<String>,
    /// The token budget of an episode.
    pub token_budget: i64,
    /// The public tests' node IDs (they are in the repository).
    pub public_tests: Vec<String>,
    /// How many hidden tests there are (never which).
    pub hidden_test_count: i64,
    /// The ladder's rung names, when the dataset's ladders are public.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ladder: Option<Vec<String>>,
}

/// `GET /api/datasets/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetDetail {
    /// The dataset.
    pub dataset: DatasetInfo,
    /// Its tasks.
    pub tasks: Vec<TaskView>,
}

/// A run's state and progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Its identifier.
    pub id: String,
    /// The dataset it grades against.
    pub dataset: String,
    /// The key that submitted it.
    pub submitted_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// `queued`, `running` or `finished`.
    pub state: String,
    /// Predictions in it.
    pub total: i64,
    /// Records stored.
    pub done: i64,
    /// Predictions being graded now.
    pub running: i64,
    /// Mean reward over the records stored (harness errors left out).
    pub mean_reward: Option<f64>,
    /// Records per verdict.
    pub verdicts: BTreeMap<String, i64>,
}

impl RunInfo {
    /// True when every prediction has its record.
    pub fn finished(&self) -> bool {
        self.done >= self.total
    }
}

/// `GET /api/runs/{id}/report`: the run and the submitter's view of each
/// record (section-10 keys, hidden node IDs left out of `tests`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run.
    pub run: RunInfo,
    /// One record per prediction, in file order.
    pub records: Vec<serde_json::Value>,
}

/// One row of `GET /api/datasets/{name}/leaderboard`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaderboardRow {
    /// The name of the key that submitted these runs (rows are per key and
    /// model).
    pub submitter: String,
    /// The model (`model_name_or_path`).
    pub model: String,
    /// Mean reward over its records (harness errors left out).
    pub mean_reward: Option<f64>,
    /// Its records.
    pub records: i64,
    /// Runs it appears in.
    pub runs: i64,
}

/// `GET /api/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The harness version.
    pub version: String,
}

/// RFC 3339 of milliseconds since the epoch.
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}
