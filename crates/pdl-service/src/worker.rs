//! Workers: each claims one job at a time from the database under a lease,
//! grades it through the pipeline ([`pdl_grader::pipeline::Pipeline`], the
//! same plan `pdl-swe grade` makes for one prediction), and stores its record
//! the moment the pipeline writes it ([`Db::complete`]: once per run and
//! prediction, whatever crashes and restarts happen around it).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pdl_grader::pipeline::{Pipeline, RecordSink};
use pdl_grader::predictions::{plan_predictions, InvalidPrediction, Prediction, PredictionEntry};
use pdl_grader::{Grader, ResultRecord};
use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;

use crate::db::{ClaimedJob, Db};
use crate::server::{Log, LogEvent};
use crate::store::TaskCache;

/// A prediction as queued: the parsed entry of the submitted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredEntry {
    /// A gradable prediction.
    Valid {
        /// Instance.
        instance_id: String,
        /// Model.
        model_name_or_path: String,
        /// Patch.
        model_patch: String,
        /// Where it was in the file.
        location: String,
    },
    /// An entry recorded as `invalid_prediction`.
    Invalid {
        /// Instance, when readable.
        instance_id: Option<String>,
        /// Model, when readable.
        model_name_or_path: Option<String>,
        /// Where it was in the file.
        location: String,
        /// What is wrong.
        reason: String,
        /// Digest of the entry.
        digest: String,
    },
}

impl From<&PredictionEntry> for StoredEntry {
    fn from(e: &PredictionEntry) -> Self {
        match e {
            PredictionEntry::Valid(p) => StoredEntry::Valid {
                instance_id: p.instance_id.clone(),
                model_name_or_path: p.model_name_or_path.clone(),
                model_patch: p.model_patch.clone(),
                location: p.location.clone(),
            },
            PredictionEntry::Invalid(i) => StoredEntry::Invalid {
                instance_id: i.instance_id.clone(),
                model_name_or_path: i.model_name_or_path.clone(),
                location: i.location.clone(),
                reason: i.reason.clone(),
                digest: i.digest.clone(),
            },
        }
    }
}

impl From<StoredEntry> for PredictionEntry {
    fn from(e: StoredEntry) -> Self {
        match e {
            StoredEntry::Valid {
                instance_id,
                model_name_or_path,
                model_patch,
                location,
            } => PredictionEntry::Valid(Prediction {
                instance_id,
                model_name_or_path,
                model_patch,
                location,
            }),
            StoredEntry::Invalid {
                instance_id,
                model_name_or_path,
                location,
                reason,
                digest,
            } => PredictionEntry::Invalid(InvalidPrediction {
                instance_id,
                model_name_or_path,
                location,
                reason,
                digest,
            }),
        }
    }
}

/// Claims after which a job is no longer graded: its grading stopped the
/// service (or its worker) this many times, so it gets a `harness_error`
/// record instead of stopping it again.
pub const MAX_ATTEMPTS: i64 = 3;

/// What a worker needs.
pub struct WorkerContext<'a> {
    /// The database.
    pub db: Db,
    /// The runtime the database runs on.
    pub handle: Handle,
    /// The grader.
    pub grader: &'a Grader,
    /// The data folder (datasets).
    pub data_dir: &'a Path,
    /// Ladder fingerprints are cached here.
    pub cache_dir: &'a Path,
    /// Loaded datasets.
    pub tasks: Arc<TaskCache>,
    /// How long a claim holds before another worker may take the job.
    pub lease: Duration,
    /// How long an idle worker waits before looking for work again.
    pub poll: Duration,
    /// True once the service is stopping.
    pub should_stop: &'a (dyn Fn() -> bool + Sync),
    /// Where events go.
    pub log: &'a Log,
}

/// The record sink of one job: stores the record in the database at once.
struct DbSink<'c, 'a> {
    ctx: &'c WorkerContext<'a>,
    job: &'c ClaimedJob,
    owner: &'c str,
    stored: bool,
}

impl RecordSink for DbSink<'_, '_> {
    fn append(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        // A record made while the service is being stopped may be the
        // harness's own interruption: the job goes back to the queue instead.
        if (self.ctx.should_stop)() {
            return Ok(());
        }
        let json = serde_json::to_string(record).map_err(std::io::Error::other)?;
        let model = record.model_name_or_path.clone().unwrap_or_default();
        self.ctx
            .handle
            .block_on(self.ctx.db.complete(
                self.job,
                self.owner,
                &record.instance_id,
                &model,
                record.reward,
                record.verdict.name(),
                &json,
            ))
            .map_err(std::io::Error::other)?;
        self.stored = true;
        Ok(())
    }
}

/// Runs one worker until the service stops.
pub fn work(ctx: &WorkerContext<'_>, owner: &str) {
    let lease_ms = ctx.lease.as_millis() as i64;
    while !(ctx.should_stop)() {
        match ctx.handle.block_on(ctx.db.claim(owner, lease_ms)) {
            Ok(Some(job)) => grade_job(ctx, owner, &job),
            Ok(None) => std::thread::sleep(ctx.poll),
            Err(e) => {
                (ctx.log)(LogEvent::Worker(format!("{owner}: {e}")));
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

fn grade_job(ctx: &WorkerContext<'_>, owner: &str, job: &ClaimedJob) {
    let lease_ms = ctx.lease.as_millis() as i64;
    // The lease is renewed while the job is graded; a worker that dies stops
    // renewing it and the job is claimed again once it runs out.
    let renewer = {
        let db = ctx.db.clone();
        let (id, who) = (job.id.clone(), owner.to_string());
        let every = ctx.lease / 3;
        ctx.handle.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if !matches!(db.renew(&id, &who, lease_ms).await, Ok(true)) {
                    break;
                }
            }
        })
    };
    let outcome = grade_claimed(ctx, owner, job);
    renewer.abort();
    match outcome {
        Ok(true) => {}
        Ok(false) => {
            let _ = ctx.handle.block_on(ctx.db.release(&job.id, owner, true));
        }
        Err(message) => {
            (ctx.log)(LogEvent::Worker(format!(
                "{owner}: run {} prediction {}: {message}",
                job.run_id, job.seq
            )));
            let _ = ctx.handle.block_on(ctx.db.release(&job.id, owner, false));
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// Grades one job; `Ok(true)` when its record was stored.
fn grade_claimed(ctx: &WorkerContext<'_>, owner: &str, job: &ClaimedJob) -> Result<bool, String> {
    let entry: StoredEntry =
        serde_json::from_str(&job.entry).map_err(|e| format!("unreadable job: {e}"))?;
    let dataset = ctx
        .handle
        .block_on(ctx.db.dataset_by_id(&job.dataset_id))
        .map_err(|e| e.to_string())?
        .ok_or("its dataset is gone")?;
    let tasks = ctx.tasks.get(ctx.data_dir, &dataset.id, &dataset.file)?;
    let mut sink = DbSink {
        ctx,
        job,
        owner,
        stored: false,
    };
    if job.attempts > MAX_ATTEMPTS {
        let record = abandoned_record(&entry, job.attempts - 1);
        sink.append(&record).map_err(|e| e.to_string())?;
        return Ok(sink.stored);
    }
    let entries = [PredictionEntry::from(entry)];
    let plan = plan_predictions(ctx.grader, &tasks, &entries, &HashSet::new(), ctx.cache_dir);
    let pipeline = Pipeline {
        grader: ctx.grader,
        tasks: &tasks,
        parallelism: 1,
        episodes: None,
    };
    pipeline
        .run(&plan, &mut sink, &mut |_| {})
        .map_err(|e| e.to_string())?;
    Ok(sink.stored)
}

/// The record of a job whose gradings never finished.
fn abandoned_record(entry: &StoredEntry, attempts: i64) -> ResultRecord {
    let (instance_id, model) = match entry {
        StoredEntry::Valid {
            instance_id,
            model_name_or_path,
            ..
        } => (instance_id.clone(), Some(model_name_or_path.clone())),
        StoredEntry::Invalid {
            instance_id,
            model_name_or_path,
            ..
        } => (
            instance_id.clone().unwrap_or_default(),
            model_name_or_path.clone(),
        ),
    };
    ResultRecord {
        instance_id,
        name: model.clone().unwrap_or_else(|| "unknown".into()),
        model_name_or_path: model,
        kind: pdl_grader::SubmissionKind::Prediction,
        reward: 0.0,
        components: Default::default(),
        verdict: pdl_grader::Verdict::HarnessError,
        detail: Some(format!(
            "the service stopped during each of {attempts} gradings of this prediction; it is not graded again"
        )),
        tests: Default::default(),
        policy: Default::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 0.0,
        phases_s: Default::default(),
        provenance: pdl_grader::record::Provenance {
            harness_version: pdl_grader::HARNESS_VERSION.into(),
            ..Default::default()
        },
        suspicious: Vec::new(),
        episode: None,
        job_key: None,
    }
}
