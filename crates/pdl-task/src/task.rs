//! A task ([`Task`]): the instance row plus what the row has no column for (the
//! ladder's diffs and registered rewards, limits), and the task's digest.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::diff::{parse_patch, render_added_file, ChangeKind};
use crate::row::InstanceRow;

/// Where the hidden tests live in the graded tree.
pub const HIDDEN_DIR: &str = "tests/hidden/";

/// Default bound on one grading's test run, in seconds.
pub const DEFAULT_TEST_TIMEOUT_S: u64 = 120;

/// One registered partial solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LadderRung {
    /// The rung's name, as listed in `graded_ladder_rungs` (e.g. `cheat.diff`).
    pub name: String,
    /// The reward the rung is registered to land on.
    pub reward: f64,
    /// What the rung gets right and what it misses.
    #[serde(default)]
    pub note: String,
    /// The rung's diff.
    #[serde(default)]
    pub diff: String,
}

/// Optional per-task limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bound on one grading's test run, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_timeout_s: Option<u64>,
}

impl Limits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.test_timeout_s.is_none()
    }
}

/// What a task carries beyond the eighteen columns. Parquet files keep it in the
/// file's key-value metadata, JSONL rows under the `pdl_extras` key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskExtras {
    /// The ladder: registered rewards, notes and diffs, in `graded_ladder_rungs` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ladder: Vec<LadderRung>,
    /// Optional limits.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// The task tree's `manifest.yaml` text when it is not in canonical form, so
    /// that converting back reproduces it byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_yaml: Option<String>,
}

impl TaskExtras {
    /// True when there is nothing to carry.
    pub fn is_empty(&self) -> bool {
        self.ladder.is_empty() && self.limits.is_empty() && self.manifest_yaml.is_none()
    }
}

/// A task: one instance row and its extras.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The eighteen columns.
    pub row: InstanceRow,
    /// The ladder and limits.
    pub extras: TaskExtras,
}

/// A hidden test file recovered from `test_patch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenFile {
    /// Path relative to `tests/hidden/`.
    pub relative_path: String,
    /// Content.
    pub content: String,
}

impl Task {
    /// The instance ID.
    pub fn id(&self) -> &str {
        &self.row.instance_id
    }

    /// The effective test timeout, in seconds.
    pub fn test_timeout_s(&self) -> u64 {
        self.extras
            .limits
            .test_timeout_s
            .unwrap_or(DEFAULT_TEST_TIMEOUT_S)
    }

    /// The registered rung called `name`.
    pub fn rung(&self, name: &str) -> Option<&LadderRung> {
        self.extras.ladder.iter().find(|r| r.name == name)
    }

    /// A digest of everything graded: the row and the ladder. Two tasks with the
    /// same digest grade identically.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        let row = serde_json::to_vec(&self.row).expect("rows always serialize");
        hasher.update(&row);
        for rung in &self.extras.ladder {
            hasher.update(rung.name.as_bytes());
            hasher.update([0]);
            hasher.update(rung.reward.to_bits().to_le_bytes());
            hasher.update(rung.diff.as_bytes());
            hasher.update([0]);
        }
        hasher.update(self.test_timeout_s().to_le_bytes());
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }

    /// The hidden test files `test_patch` creates, when it only adds files under
    /// `tests/hidden/`. `None` when the patch does anything else (validation names
    /// the problem).
    pub fn hidden_files(&self) -> Option<Vec<HiddenFile>> {
        hidden_files_from_patch(&self.row.test_patch)
    }
}

/// The files an add-only `test_patch` creates under `tests/hidden/`.
pub fn hidden_files_from_patch(test_patch: &str) -> Option<Vec<HiddenFile>> {
    let set = parse_patch(test_patch).ok()?;
    let mut out = Vec::new();
    for file in &set.files {
        if file.kind != ChangeKind::Added || file.binary || file.involves_symlink() {
            return None;
        }
        let path = file.new_path.as_deref()?;
        let relative = path.strip_prefix(HIDDEN_DIR)?;
        out.push(HiddenFile {
            relative_path: relative.to_string(),
            content: file.added_content()?,
        });
    }
    Some(out)
}

/// The canonical `test_patch` for a set of hidden files: one git-style added-file
/// section per file, in path order.
pub fn render_test_patch(files: &[HiddenFile]) -> String {
    let mut sorted: Vec<&HiddenFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.relative_path.cmp(&b.relative_path));
    sorted
        .iter()
        .map(|f| render_added_file(&format!("{HIDDEN_DIR}{}", f.relative_path), &f.content))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_patch_round_trips_through_hidden_files() {
        let files = vec![
            HiddenFile {
                relative_path: "test_b.py".into(),
                content: "def test_b():\n    assert True\n".into(),
            },
            HiddenFile {
                relative_path: "sub/test_a.py".into(),
                content: "x = 1".into(),
            },
        ];
        let patch = render_test_patch(&files);
        let back = hidden_files_from_patch(&patch).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].relative_path, "sub/test_a.py");
        assert_eq!(back[0].content, "x = 1");
        assert_eq!(render_test_patch(&back), patch);
    }

    #[test]
    fn a_test_patch_that_modifies_or_escapes_is_not_add_only() {
        let modifies = "--- a/tests/hidden/t.py\n+++ b/tests/hidden/t.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert!(hidden_files_from_patch(modifies).is_none());
        let outside = render_added_file("src/evil.py", "x\n");
        assert!(hidden_files_from_patch(&outside).is_none());
    }
}
