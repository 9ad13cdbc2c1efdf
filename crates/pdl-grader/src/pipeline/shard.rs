//! Shards: a deterministic 1/N slice of a [`Plan`] ([`Shard`],
//! [`Plan::shard`]) and the manifest a shard writes beside its results
//! ([`ShardManifest`]), from which `pdl-swe merge` puts the shards' records
//! back together in plan order.
//!
//! ## The rule (`pdl-shard/1`)
//!
//! Every shard plans the whole work, exactly as one machine would, then keeps
//! its slice. A job belongs to shard `1 + (u64(SHA-256("pdl-shard/1" NUL
//! unit)[..8]) mod N)` (big-endian), where the unit is
//!
//! | job | unit |
//! |---|---|
//! | gold, do-nothing, a rung, a collection | `task:<task_id>`: a task's calibration and ladder stay together |
//! | a prediction (valid or not), an episode | its resume key ([`JobKey`]) |
//!
//! Nothing else enters the hash: not the machine, the order of the input, the
//! number of cores or the time, so a shard is the same slice on every machine
//! and every rerun, the slices are disjoint, and together they cover the
//! plan. Adding predictions to a file moves no earlier prediction to another
//! shard.
//!
//! A shard that grades a prediction or an episode of a task whose ladder
//! another shard records measures that ladder too, for its fingerprints only
//! (not recorded; `grade` also reads and fills the ladder cache), so every
//! record's `landed_rung` is what one machine would have written.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pdl_task::Task;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::event::Phase;
use super::job::{Job, JobKind};
use super::key::JobKey;
use super::{PhasePlan, Plan};
use crate::record::SubmissionKind;

/// The version of the assignment rule, hashed into every unit.
pub const SHARD_RULE: &str = "pdl-shard/1";

/// The schema of a [`ShardManifest`].
pub const MANIFEST_SCHEMA: &str = "pdl-swe-shard/1";

/// One slice of N: `index` from 1 to `count` (as `sbatch --array=1-N` numbers
/// its tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// Which slice, from 1.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

/// A `--shard` value that is not `I/N` with 1 ≤ I ≤ N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a shard: expected I/N with 1 <= I <= N (such as 2/4)")]
pub struct ShardSyntaxError {
    /// What was given.
    pub given: String,
}

impl Shard {
    /// Shard `index` of `count`, when 1 ≤ index ≤ count.
    pub fn new(index: usize, count: usize) -> Option<Shard> {
        (index >= 1 && index <= count).then_some(Shard { index, count })
    }

    /// Every shard of `count`, in order.
    pub fn all(count: usize) -> impl Iterator<Item = Shard> {
        (1..=count).map(move |index| Shard { index, count })
    }

    /// The shard (1-based) of `count` that owns `unit`.
    pub fn owner(unit: &str, count: usize) -> usize {
        let mut h = Sha256::new();
        h.update(SHARD_RULE.as_bytes());
        h.update([0]);
        h.update(unit.as_bytes());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        (u64::from_be_bytes(first) % count.max(1) as u64) as usize + 1
    }

    /// True when this shard owns `unit`.
    pub fn owns(&self, unit: &str) -> bool {
        Shard::owner(unit, self.count) == self.index
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardSyntaxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ShardSyntaxError { given: s.into() };
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let parse = |v: &str| {
            v.trim()
                .parse::<usize>()
                .ok()
                .filter(|_| v.trim().bytes().all(|b| b.is_ascii_digit()))
        };
        let (i, n) = (parse(i).ok_or_else(err)?, parse(n).ok_or_else(err)?);
        Shard::new(i, n).ok_or_else(err)
    }
}

/// The unit a job is assigned by (see the module docs).
pub fn unit_of(job: &Job, tasks: &[Task]) -> String {
    let reference = match &job.kind {
        JobKind::Collect => true,
        JobKind::Grade { submission, .. } => matches!(
            submission.kind,
            SubmissionKind::Gold | SubmissionKind::Noop | SubmissionKind::Rung
        ),
        JobKind::Episode(_) | JobKind::Invalid(_) => false,
    };
    match job.task {
        Some(t) if reference => format!("task:{}", tasks[t].row.task_id),
        _ => job.key.as_str().to_string(),
    }
}

impl Plan {
    /// The keys of the jobs whose records this plan writes, in plan order
    /// (phase by phase, each phase's jobs in order).
    pub fn recorded_keys(&self) -> Vec<JobKey> {
        self.phases
            .iter()
            .filter(|p| p.recorded)
            .flat_map(|p| p.jobs.iter().map(|j| j.key.clone()))
            .collect()
    }

    /// This plan's slice for `shard` (see the module docs): the recorded jobs
    /// the shard owns, plus, unrecorded, the rungs of every task whose
    /// ladder a kept job needs and another shard records (or, for a
    /// fingerprints-only ladder, that a kept job needs).
    pub fn shard(self, tasks: &[Task], shard: Shard) -> Plan {
        let Plan {
            phases,
            known_rungs,
            ladder_cache,
        } = self;
        let mut kept: Vec<PhasePlan> = Vec::new();
        let mut ladder_jobs: Vec<Job> = Vec::new();
        let mut recorded_ladders: BTreeSet<usize> = BTreeSet::new();
        for phase in phases {
            let PhasePlan {
                phase: which,
                jobs,
                skipped,
                recorded,
            } = phase;
            let mut slice = PhasePlan {
                phase: which,
                jobs: Vec::new(),
                skipped,
                recorded,
            };
            for job in jobs {
                let mine = shard.owns(&unit_of(&job, tasks));
                if which == Phase::Ladder {
                    if recorded && mine {
                        recorded_ladders.extend(job.task);
                        slice.jobs.push(job);
                    } else {
                        ladder_jobs.push(job);
                    }
                } else if mine {
                    slice.jobs.push(job);
                }
            }
            if which != Phase::Ladder || recorded {
                kept.push(slice);
            }
        }
        // The tasks whose ladders the kept jobs need for their landed rung.
        let needed: BTreeSet<usize> = kept
            .iter()
            .filter(|p| p.phase != Phase::Ladder)
            .flat_map(|p| p.jobs.iter())
            .filter(|j| matches!(j.kind, JobKind::Grade { .. } | JobKind::Episode(_)))
            .filter_map(|j| j.task)
            .filter(|t| !recorded_ladders.contains(t))
            .collect();
        let mut fingerprints = PhasePlan::new(Phase::Ladder, false);
        fingerprints.jobs = ladder_jobs
            .into_iter()
            .filter(|j| j.task.is_some_and(|t| needed.contains(&t)))
            .collect();
        // Rungs of another shard's task that this shard never recorded and
        // the plan skipped as done elsewhere cannot occur: done keys come from
        // this shard's own results.
        let mut phases = Vec::with_capacity(kept.len() + 1);
        if !fingerprints.jobs.is_empty() {
            phases.push(fingerprints);
        }
        phases.extend(kept);
        Plan {
            phases,
            known_rungs,
            ladder_cache,
        }
    }
}

/// What a shard writes beside its results (`<out>.shard.json` for `grade`,
/// `RUN_DIR/shard.json` for `run`) before it starts: which slice it is, and
/// the whole plan's recorded jobs in order, from which `merge` checks that
/// every shard is there and complete and writes the records in plan order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardManifest {
    /// [`MANIFEST_SCHEMA`].
    pub schema: String,
    /// The command that wrote it: `grade` or `run`.
    pub command: String,
    /// This shard.
    pub shard: Shard,
    /// The assignment rule ([`SHARD_RULE`]).
    pub rule: String,
    /// The harness that wrote it.
    pub harness_version: String,
    /// SHA-256 of the whole plan's recorded keys, in order: shards of one
    /// plan agree on it.
    pub plan_digest: String,
    /// The whole plan's recorded jobs, in plan order.
    pub plan: Vec<String>,
    /// This shard's recorded jobs, in plan order.
    pub assigned: Vec<String>,
}

/// A manifest that cannot be read or written, or does not match.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The manifest.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a shard manifest.
    #[error("{}: not a shard manifest ({message})", path.display())]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The output was started as another shard, or for another plan.
    #[error("{}: {message}; use another output for this shard", path.display())]
    Mismatch {
        /// The manifest.
        path: PathBuf,
        /// How it differs.
        message: String,
    },
}

fn plan_digest(keys: &[String]) -> String {
    let mut h = Sha256::new();
    for k in keys {
        h.update(k.as_bytes());
        h.update([0]);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

impl ShardManifest {
    /// The manifest of `shard` of the whole plan `whole`, as `command` runs
    /// it (the plan before slicing, with nothing skipped as done).
    pub fn new(command: &str, shard: Shard, whole: &Plan, tasks: &[Task]) -> Self {
        let plan: Vec<String> = whole
            .recorded_keys()
            .iter()
            .map(|k| k.as_str().to_string())
            .collect();
        let assigned = whole
            .phases
            .iter()
            .filter(|p| p.recorded)
            .flat_map(|p| p.jobs.iter())
            .filter(|j| shard.owns(&unit_of(j, tasks)))
            .map(|j| j.key.as_str().to_string())
            .collect();
        ShardManifest {
            schema: MANIFEST_SCHEMA.into(),
            command: command.into(),
            shard,
            rule: SHARD_RULE.into(),
            harness_version: crate::HARNESS_VERSION.into(),
            plan_digest: plan_digest(&plan),
            plan,
            assigned,
        }
    }

    /// Where a `grade` shard's manifest lives: beside its results file.
    pub fn path_for_results(results: &Path) -> PathBuf {
        let mut name = results.file_name().unwrap_or_default().to_os_string();
        name.push(".shard.json");
        results.with_file_name(name)
    }

    /// Where a `run` shard's manifest lives: in its run folder.
    pub fn path_for_run_dir(run_dir: &Path) -> PathBuf {
        run_dir.join("shard.json")
    }

    /// Reads the manifest at `path`; `Ok(None)` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>, ManifestError> {
        let io = |source| ManifestError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(io(e.into())),
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io)?;
        let manifest: ShardManifest =
            serde_json::from_slice(&bytes).map_err(|e| ManifestError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        if manifest.schema != MANIFEST_SCHEMA || manifest.rule != SHARD_RULE {
            return Err(ManifestError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "schema `{}` and rule `{}`, this release writes `{MANIFEST_SCHEMA}` and `{SHARD_RULE}`",
                    manifest.schema, manifest.rule
                ),
            });
        }
        if Shard::new(manifest.shard.index, manifest.shard.count).is_none() {
            return Err(ManifestError::Invalid {
                path: path.to_path_buf(),
                message: format!("shard {} is out of range", manifest.shard),
            });
        }
        Ok(Some(manifest))
    }

    /// Writes this manifest at `path`, or, when one is there, checks that it
    /// is this one (the same shard of the same plan): an output is resumed
    /// only by the shard that started it.
    pub fn write_or_check(&self, path: &Path) -> Result<(), ManifestError> {
        if let Some(earlier) = ShardManifest::read(path)? {
            let mismatch = |message: String| ManifestError::Mismatch {
                path: path.to_path_buf(),
                message,
            };
            if earlier.shard != self.shard || earlier.command != self.command {
                return Err(mismatch(format!(
                    "this output belongs to `{} --shard {}`, not `{} --shard {}`",
                    earlier.command, earlier.shard, self.command, self.shard
                )));
            }
            if earlier.plan_digest != self.plan_digest {
                return Err(mismatch(
                    "this output was started for another plan (other predictions, tasks, agents or samples)".into(),
                ));
            }
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(self).expect("manifests serialize");
        let mut file =
            pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::Truncate).map_err(|e| {
                ManifestError::Io {
                    path: path.to_path_buf(),
                    source: e.into(),
                }
            })?;
        std::io::Write::write_all(&mut file, &bytes).map_err(|source| ManifestError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The position of every key in the whole plan (its first, when a key
    /// repeats).
    pub fn positions(&self) -> HashMap<&str, usize> {
        let mut at = HashMap::new();
        for (i, k) in self.plan.iter().enumerate() {
            at.entry(k.as_str()).or_insert(i);
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_syntax() {
        assert_eq!(
            "2/4".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 4 }
        );
        assert_eq!("1/1".parse::<Shard>().unwrap().to_string(), "1/1");
        for bad in ["0/4", "5/4", "4", "a/b", "1/0", "-1/4", "+1/4", "1/4/2", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn assignment_is_stable_disjoint_and_covering() {
        let units: Vec<String> = (0..2000).map(|i| format!("prediction:{i:032x}")).collect();
        for count in [1, 2, 3, 4, 7, 16] {
            let mut seen = vec![0usize; count];
            for unit in &units {
                let owners: Vec<Shard> = Shard::all(count).filter(|s| s.owns(unit)).collect();
                assert_eq!(owners.len(), 1, "{unit} of {count}: exactly one owner");
                assert_eq!(owners[0].index, Shard::owner(unit, count));
                seen[owners[0].index - 1] += 1;
            }
            // Balanced within a generous bound (binomial spread).
            let mean = units.len() / count;
            for n in &seen {
                assert!(n.abs_diff(mean) < mean / 4 + 30, "{seen:?}");
            }
        }
        // Stable: fixed values, the same on every machine and every release
        // of this rule.
        assert_eq!(Shard::owner("task:pdl_open_retry_cap_001", 4), 3);
        assert_eq!(
            Shard::owner("prediction:00000000000000000000000000000000", 4),
            2
        );
    }
}
