//! The instance row ([`InstanceRow`]): one task version, exactly the eighteen
//! columns of the dataset schema.

use serde::{Deserialize, Serialize};

/// One file of the starting repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoFile {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// The file's full text.
    pub content: String,
}

/// One row of the dataset: a task version with everything needed to grade it.
///
/// Field order is the column order of the published schema; serde names match the
/// column names exactly (`FAIL_TO_PASS`, `PASS_TO_PASS` are upper case).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRow {
    /// `<task_id>-v<task_version>`.
    pub instance_id: String,
    /// Stable task identity.
    pub task_id: String,
    /// Bumped whenever anything graded changes.
    pub task_version: i64,
    /// `T1` … `T5`.
    pub tier: String,
    /// One-line description of the codebase.
    pub domain: String,
    /// The issue text the agent receives.
    pub problem_statement: String,
    /// The reference (gold) patch, a unified diff.
    pub patch: String,
    /// Additive diff that creates the hidden tests under `tests/hidden/`.
    pub test_patch: String,
    /// Hidden node IDs: fail at base, pass with `patch`.
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    /// Public node IDs: pass at base, must keep passing.
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    /// The full starting repository.
    pub files: Vec<RepoFile>,
    /// Globs the agent may modify.
    pub patch_policy_allowed: Vec<String>,
    /// Globs the agent must not modify (wins over allowed).
    pub patch_policy_forbidden: Vec<String>,
    /// The episode's total token contract (input + output).
    pub token_budget: i64,
    /// Must equal `FAIL_TO_PASS.len()`.
    pub hidden_test_count: i64,
    /// Must equal `PASS_TO_PASS.len()`.
    pub public_test_count: i64,
    /// Names of the registered partial-solution rungs.
    pub graded_ladder_rungs: Vec<String>,
    /// The reward formula, e.g. `0.80*hidden_pass_fraction + 0.15*public_regression + 0.05*build_health`.
    pub reward_formula: String,
}

/// The physical type of a column, as the Parquet and JSONL readers check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// A UTF-8 string.
    String,
    /// A 64-bit signed integer.
    Int64,
    /// A list of strings.
    StringList,
    /// A list of `{path, content}` structs.
    FileList,
}

impl ColumnType {
    /// How the type is written in schema listings and error messages.
    pub fn describe(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Int64 => "int64",
            ColumnType::StringList => "list<string>",
            ColumnType::FileList => "list<struct<path: string, content: string>>",
        }
    }
}

/// The eighteen columns of the instance row, in schema order.
pub const COLUMNS: [(&str, ColumnType); 18] = [
    ("instance_id", ColumnType::String),
    ("task_id", ColumnType::String),
    ("task_version", ColumnType::Int64),
    ("tier", ColumnType::String),
    ("domain", ColumnType::String),
    ("problem_statement", ColumnType::String),
    ("patch", ColumnType::String),
    ("test_patch", ColumnType::String),
    ("FAIL_TO_PASS", ColumnType::StringList),
    ("PASS_TO_PASS", ColumnType::StringList),
    ("files", ColumnType::FileList),
    ("patch_policy_allowed", ColumnType::StringList),
    ("patch_policy_forbidden", ColumnType::StringList),
    ("token_budget", ColumnType::Int64),
    ("hidden_test_count", ColumnType::Int64),
    ("public_test_count", ColumnType::Int64),
    ("graded_ladder_rungs", ColumnType::StringList),
    ("reward_formula", ColumnType::String),
];

impl InstanceRow {
    /// The instance ID this row's task ID and version call for.
    pub fn expected_instance_id(&self) -> String {
        format!("{}-v{}", self.task_id, self.task_version)
    }

    /// The content of a starting-repository file, if present.
    pub fn file(&self, path: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.content.as_str())
    }

    /// The `requirements.lock` content (empty when the file is absent).
    pub fn requirements_lock(&self) -> &str {
        self.file("requirements.lock").unwrap_or("")
    }
}
