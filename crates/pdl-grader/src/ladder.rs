//! Ladder fingerprints ([`LadderFingerprints`]): each registered rung's per-test
//! hidden outcomes and reward, measured by grading the rung, so that any other
//! result can say which rung it landed on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pdl_task::Task;
use serde::{Deserialize, Serialize};

use crate::record::{ResultRecord, Verdict};

/// Tolerance when comparing rewards.
pub const REWARD_TOLERANCE: f64 = 1e-9;

/// One rung's measured landing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RungFingerprint {
    /// The rung's name.
    pub name: String,
    /// The hidden node IDs the rung passes.
    pub hidden_passed: BTreeSet<String>,
    /// The reward the rung scored.
    pub reward: f64,
}

/// Every rung's fingerprint for one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LadderFingerprints {
    /// The task digest they were measured for.
    pub task_digest: String,
    /// The fingerprints, in ladder order.
    pub rungs: Vec<RungFingerprint>,
}

impl LadderFingerprints {
    /// Fingerprints from the rungs' own records (records that did not grade are skipped).
    pub fn from_records<'a>(
        task: &Task,
        records: impl IntoIterator<Item = &'a ResultRecord>,
    ) -> Self {
        let rungs: Vec<RungFingerprint> = records
            .into_iter()
            .filter(|r| r.verdict == Verdict::Graded)
            .map(|r| RungFingerprint {
                name: r.name.clone(),
                hidden_passed: r
                    .passed_ids(&task.row.fail_to_pass)
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                reward: r.reward,
            })
            .collect();
        Self::from_rungs(task, rungs)
    }

    /// Fingerprints of `task` from measured rungs, put in ladder order.
    pub fn from_rungs(task: &Task, mut rungs: Vec<RungFingerprint>) -> Self {
        let order = |name: &str| {
            task.extras
                .ladder
                .iter()
                .position(|l| l.name == name)
                .unwrap_or(usize::MAX)
        };
        rungs.sort_by_key(|r| order(&r.name));
        LadderFingerprints {
            task_digest: task.digest(),
            rungs,
        }
    }

    /// The rung whose hidden outcomes and reward this record equals.
    pub fn landed(&self, task: &Task, record: &ResultRecord) -> Option<String> {
        let passed: BTreeSet<String> = record
            .passed_ids(&task.row.fail_to_pass)
            .into_iter()
            .map(str::to_string)
            .collect();
        self.rungs
            .iter()
            .find(|r| {
                r.hidden_passed == passed && (r.reward - record.reward).abs() <= REWARD_TOLERANCE
            })
            .map(|r| r.name.clone())
    }

    fn cache_path(cache_root: &Path, task: &Task, env_digest: &str) -> PathBuf {
        let key = format!("{}{}", task.digest(), env_digest);
        let name = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()));
        cache_root
            .join("ladders")
            .join(format!("{}.json", &name[..24]))
    }

    /// Reads cached fingerprints for a task in an environment.
    pub fn load_cached(cache_root: &Path, task: &Task, env_digest: &str) -> Option<Self> {
        let text = std::fs::read_to_string(Self::cache_path(cache_root, task, env_digest)).ok()?;
        let f: LadderFingerprints = serde_json::from_str(&text).ok()?;
        (f.task_digest == task.digest() && f.rungs.len() == task.extras.ladder.len()).then_some(f)
    }

    /// Stores fingerprints for later runs.
    pub fn store(&self, cache_root: &Path, task: &Task, env_digest: &str) -> std::io::Result<()> {
        let path = Self::cache_path(cache_root, task, env_digest);
        std::fs::create_dir_all(path.parent().expect("cache path has a parent"))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(self).expect("fingerprints serialize"),
        )?;
        std::fs::rename(tmp, path)
    }
}
