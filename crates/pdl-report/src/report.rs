//! The report model ([`RunReport`]) and the aggregation that builds it from the
//! records of a run.
//!
//! Rewards are aggregated per (task, agent, model), per (tier, agent, model) and
//! per (agent, model). In every group:
//!
//! - `episodes` counts every episode (after de-duplication by key: a key seen
//!   twice counts once, with its last record);
//! - episodes with verdict `harness_error` are counted in `harness_errors`,
//!   `verdicts`, `end_reasons` and `budget_exhausted` but left out of the mean
//!   reward, the interval and the landed rungs: they say nothing about the
//!   agent's result. Their tokens count in the token means: they were spent
//!   (and a later attempt of the same episode starts from them);
//! - `reruns` counts the runs an episode needed beyond its first: earlier records
//!   with its key in the file (replaced by the later one, never counted twice)
//!   or the earlier outcomes its record carries (`episode.previous_outcomes`);
//! - a record whose reward or components are not finite numbers in [0, 1], or
//!   an episode record whose key is not in `campaign.json`'s `episode_keys`
//!   (when it has them), is skipped with a warning;
//! - `mean_reward` is the mean of the remaining (`scored`) episode rewards, pooled
//!   over tasks for tiers and overall, with the 95% interval of
//!   [`crate::stats::mean_ci`] over the same episodes.
//!
//! Calibration: a task is calibrated when it has gold and noop records, every
//! gold record is graded with reward 1.0 and every noop record is graded with
//! reward 0.2 (both ±1e-9); uncalibrated when it has some but misses; not run when
//! it has none.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use pdl_grader::{EpisodeInfo, ResultRecord, SubmissionKind, Verdict};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{ReportError, Warning};
use crate::load::{read_run_dir, LineRecord, CAMPAIGN_FILE, RESULTS_FILE};
use crate::stats::{mean, mean_ci, Interval};

/// The tier shown for a task whose tier the caller did not give.
pub const UNKNOWN_TIER: &str = "?";

/// The reward of a calibrated gold patch.
pub const GOLD_REWARD: f64 = 1.0;

/// The reward of a calibrated empty patch.
pub const NOOP_REWARD: f64 = 0.2;

/// The tolerance of the calibration rewards.
pub const CALIBRATION_TOLERANCE: f64 = 1e-9;

/// The end reason that means the token budget ran out.
pub const BUDGET_EXHAUSTED: &str = "budget_exhausted";

/// Everything the reports show about one run folder.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// The run folder; trajectory and patch paths are relative to it.
    pub run_dir: PathBuf,
    /// The campaign, from `campaign.json` or inferred from the records.
    pub campaign: CampaignInfo,
    /// How many lines and records were read and how they were used.
    pub counts: RecordCounts,
    /// Every task of the campaign or the records, sorted by instance ID.
    pub tasks: Vec<TaskInfo>,
    /// Every episode after de-duplication, sorted by task, agent, model, sample.
    pub episodes: Vec<EpisodeRow>,
    /// Per (task, agent, model), sorted.
    pub by_task: Vec<TaskGroup>,
    /// Per (tier, agent, model), sorted.
    pub by_tier: Vec<TierGroup>,
    /// Per (agent, model), sorted.
    pub overall: Vec<OverallGroup>,
    /// Everything skipped or suspicious, in the order found.
    pub warnings: Vec<Warning>,
}

/// Where the campaign description came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CampaignSource {
    /// `campaign.json`, with missing fields filled in from the records.
    CampaignJson,
    /// No usable `campaign.json`: everything inferred from the records.
    Inferred,
}

/// The campaign: what was run, with which model and agents.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignInfo {
    /// Where this description came from.
    pub source: CampaignSource,
    /// When the campaign started (RFC 3339), or the earliest record's start.
    pub started_at: Option<String>,
    /// When the campaign was last resumed (RFC 3339).
    pub resumed_at: Option<String>,
    /// The harness version.
    pub harness_version: Option<String>,
    /// The dataset (a path or a name).
    pub dataset: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The model API (`openai`, `anthropic`, …).
    pub api: Option<String>,
    /// The upstream base URL.
    pub base_url: Option<String>,
    /// The agents.
    pub agents: Vec<String>,
    /// Samples per task and agent.
    pub samples: Option<u64>,
    /// The instance IDs of the tasks.
    pub tasks: Vec<String>,
    /// The campaign's settings, as written (`null` when unknown).
    pub settings: Value,
}

/// How the lines of `results.jsonl` were used.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RecordCounts {
    /// Non-blank lines read.
    pub lines: usize,
    /// Lines skipped as malformed (each has a warning).
    pub malformed: usize,
    /// The line number of a torn last line that was ignored.
    pub torn_line: Option<usize>,
    /// Records read.
    pub records: usize,
    /// Gold and noop records.
    pub calibration_records: usize,
    /// Episode and prediction records, before de-duplication.
    pub episode_records: usize,
    /// Episode records replaced by a later record with the same key.
    pub duplicates: usize,
    /// Episodes after de-duplication.
    pub episodes: usize,
    /// Episodes with verdict `harness_error`.
    pub harness_errors: usize,
    /// Other records (rungs), not reported.
    pub ignored_records: usize,
    /// Records skipped because their reward or components are not numbers in
    /// [0, 1], or because they are episodes `campaign.json` does not list
    /// (each has a warning).
    pub implausible: usize,
    /// tasks × agents × samples, when `campaign.json` gives all three.
    pub expected_episodes: Option<usize>,
    /// Tasks calibrated, uncalibrated and not calibrated.
    pub calibration: CalibrationCounts,
}

/// A task, its tier and its calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskInfo {
    /// The instance ID.
    pub instance_id: String,
    /// The tier, or `?` when unknown.
    pub tier: String,
    /// The calibration status and the rewards behind it.
    pub calibration: TaskCalibration,
    /// Episodes on this task (all agents).
    pub episodes: usize,
}

/// A task's calibration status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CalibrationStatus {
    /// Every gold record scored 1.0 and every noop record 0.2, graded.
    Calibrated,
    /// Some gold or noop record missed, or one of the two is missing.
    Uncalibrated,
    /// No gold and no noop record.
    NotRun,
}

impl CalibrationStatus {
    /// The status's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            CalibrationStatus::Calibrated => "calibrated",
            CalibrationStatus::Uncalibrated => "uncalibrated",
            CalibrationStatus::NotRun => "not run",
        }
    }
}

/// One gold or noop grading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observation {
    /// The reward.
    pub reward: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// A task's calibration and the records behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskCalibration {
    /// The status.
    pub status: CalibrationStatus,
    /// Every gold grading, in file order.
    pub gold: Vec<Observation>,
    /// Every noop grading, in file order.
    pub noop: Vec<Observation>,
}

impl TaskCalibration {
    /// Judges the gold and noop gradings of one task.
    pub fn judge(gold: Vec<Observation>, noop: Vec<Observation>) -> Self {
        let hits = |obs: &[Observation], want: f64| {
            !obs.is_empty()
                && obs.iter().all(|o| {
                    o.verdict == Verdict::Graded && (o.reward - want).abs() <= CALIBRATION_TOLERANCE
                })
        };
        let status = if gold.is_empty() && noop.is_empty() {
            CalibrationStatus::NotRun
        } else if hits(&gold, GOLD_REWARD) && hits(&noop, NOOP_REWARD) {
            CalibrationStatus::Calibrated
        } else {
            CalibrationStatus::Uncalibrated
        };
        TaskCalibration { status, gold, noop }
    }

    /// `calibrated`, `not run`, or `uncalibrated (gold 0.600, noop 0.200)` with
    /// every observed reward (and any verdict other than graded).
    pub fn summary(&self) -> String {
        match self.status {
            CalibrationStatus::Uncalibrated => format!(
                "uncalibrated (gold {}, noop {})",
                observed(&self.gold),
                observed(&self.noop)
            ),
            status => status.name().to_string(),
        }
    }
}

fn observed(obs: &[Observation]) -> String {
    if obs.is_empty() {
        return "not run".to_string();
    }
    obs.iter()
        .map(|o| match o.verdict {
            Verdict::Graded => format!("{:.3}", o.reward),
            v => format!("{:.3} {}", o.reward, v.name()),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// How many tasks are calibrated, uncalibrated and not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CalibrationCounts {
    /// Calibrated tasks.
    pub calibrated: usize,
    /// Uncalibrated tasks.
    pub uncalibrated: usize,
    /// Tasks with no calibration records.
    pub not_run: usize,
}

impl CalibrationCounts {
    fn add(&mut self, status: CalibrationStatus) {
        match status {
            CalibrationStatus::Calibrated => self.calibrated += 1,
            CalibrationStatus::Uncalibrated => self.uncalibrated += 1,
            CalibrationStatus::NotRun => self.not_run += 1,
        }
    }

    /// `3/4 calibrated`, with the uncalibrated and not run counts when non-zero.
    pub fn summary(&self) -> String {
        let total = self.calibrated + self.uncalibrated + self.not_run;
        let mut s = format!("{}/{} calibrated", self.calibrated, total);
        if self.uncalibrated > 0 {
            s.push_str(&format!(", {} uncalibrated", self.uncalibrated));
        }
        if self.not_run > 0 {
            s.push_str(&format!(", {} not run", self.not_run));
        }
        s
    }
}

/// One episode (or graded prediction), as the reports show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeRow {
    /// The task.
    pub instance_id: String,
    /// The task's tier.
    pub tier: String,
    /// The record kind: `episode` or `prediction`.
    pub kind: SubmissionKind,
    /// The de-duplication key (the episode key; `prediction:<model>` for
    /// predictions).
    pub key: String,
    /// The agent (`builtin`, `cmd:<command>`; `prediction` for predictions).
    pub agent: String,
    /// The model.
    pub model: String,
    /// The sample index.
    pub sample: Option<u64>,
    /// The reward, full precision.
    pub reward: f64,
    /// How grading ended.
    pub verdict: Verdict,
    /// The grader's detail.
    pub detail: Option<String>,
    /// Why the episode ended (`finished`, `budget_exhausted`, `step_limit`,
    /// `time_limit`, `agent_error`).
    pub end_reason: Option<String>,
    /// True when the end reason is `budget_exhausted` or the tokens used reached
    /// the budget.
    pub budget_exhausted: bool,
    /// Input tokens.
    pub tokens_in: Option<u64>,
    /// Output tokens.
    pub tokens_out: Option<u64>,
    /// The token budget.
    pub token_budget: Option<u64>,
    /// Agent steps.
    pub steps: Option<u64>,
    /// Wall time of the episode, in seconds.
    pub wall_s: Option<f64>,
    /// The rung the result landed on.
    pub landed_rung: Option<String>,
    /// The trajectory file, relative to the run folder.
    pub trajectory: Option<String>,
    /// Whether the trajectory file exists (`None` without a path).
    pub trajectory_exists: Option<bool>,
    /// The final patch file, relative to the run folder.
    pub patch: Option<String>,
    /// Whether the patch file exists (`None` without a path).
    pub patch_exists: Option<bool>,
    /// Why the final patch could not be saved, when it could not.
    pub patch_error: Option<String>,
    /// The agent's log file (external agents), relative to the run folder.
    pub log: Option<String>,
    /// Whether the log file exists (`None` without a path).
    pub log_exists: Option<bool>,
    /// The agent's error, when it failed.
    pub error: Option<String>,
    /// Runs of this episode before the one shown (earlier records with its key,
    /// or the earlier outcomes its record lists, whichever is more).
    pub reruns: usize,
    /// The line of `results.jsonl` the record came from.
    pub line: Option<usize>,
}

impl EpisodeRow {
    /// True when the harness, not the agent, is at fault.
    pub fn is_harness_error(&self) -> bool {
        self.verdict.is_infrastructure()
    }
}

/// The aggregate figures of a group of episodes.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Stats {
    /// Episodes in the group.
    pub episodes: usize,
    /// Episodes whose reward counts (all but harness errors).
    pub scored: usize,
    /// Episodes with verdict `harness_error`.
    pub harness_errors: usize,
    /// Runs beyond the first, summed over the episodes (re-runs of harness errors).
    pub reruns: usize,
    /// Mean reward of the scored episodes.
    pub mean_reward: Option<f64>,
    /// 95% interval of the mean reward.
    pub ci95: Option<Interval>,
    /// Episodes per end reason (`unknown` when not recorded).
    pub end_reasons: BTreeMap<String, usize>,
    /// Episodes that ran out of token budget.
    pub budget_exhausted: usize,
    /// Episodes per verdict.
    pub verdicts: BTreeMap<String, usize>,
    /// Mean input tokens of the episodes that report them, harness errors
    /// included (what they spent was spent).
    pub mean_tokens_in: Option<f64>,
    /// Mean output tokens of the episodes that report them, harness errors
    /// included.
    pub mean_tokens_out: Option<f64>,
    /// Scored episodes per landed rung.
    pub landed_rungs: BTreeMap<String, usize>,
}

impl Stats {
    /// Aggregates a group of episodes.
    pub fn of<'a>(episodes: impl IntoIterator<Item = &'a EpisodeRow>) -> Stats {
        let mut s = Stats::default();
        let mut rewards = Vec::new();
        let mut tokens_in = Vec::new();
        let mut tokens_out = Vec::new();
        for e in episodes {
            s.episodes += 1;
            *s.verdicts.entry(e.verdict.name().to_string()).or_default() += 1;
            let reason = e.end_reason.as_deref().unwrap_or("unknown");
            *s.end_reasons.entry(reason.to_string()).or_default() += 1;
            s.budget_exhausted += usize::from(e.budget_exhausted);
            s.reruns += e.reruns;
            tokens_in.extend(e.tokens_in.map(|t| t as f64));
            tokens_out.extend(e.tokens_out.map(|t| t as f64));
            if e.is_harness_error() {
                s.harness_errors += 1;
                continue;
            }
            s.scored += 1;
            rewards.push(e.reward);
            if let Some(rung) = &e.landed_rung {
                *s.landed_rungs.entry(rung.clone()).or_default() += 1;
            }
        }
        s.mean_reward = mean(&rewards);
        s.ci95 = mean_ci(&rewards);
        s.mean_tokens_in = mean(&tokens_in);
        s.mean_tokens_out = mean(&tokens_out);
        s
    }
}

/// The figures of one (task, agent, model).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskGroup {
    /// The task.
    pub instance_id: String,
    /// Its tier.
    pub tier: String,
    /// The agent.
    pub agent: String,
    /// The model.
    pub model: String,
    /// The task's calibration status.
    pub calibration: CalibrationStatus,
    /// The figures.
    #[serde(flatten)]
    pub stats: Stats,
}

/// The figures of one (tier, agent, model), pooled over the tier's tasks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierGroup {
    /// The tier.
    pub tier: String,
    /// The agent.
    pub agent: String,
    /// The model.
    pub model: String,
    /// Tasks with episodes in the group.
    pub tasks: usize,
    /// Their calibration.
    pub calibration: CalibrationCounts,
    /// The figures.
    #[serde(flatten)]
    pub stats: Stats,
}

/// The figures of one (agent, model), pooled over every task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverallGroup {
    /// The agent.
    pub agent: String,
    /// The model.
    pub model: String,
    /// Tasks with episodes in the group.
    pub tasks: usize,
    /// Their calibration.
    pub calibration: CalibrationCounts,
    /// The figures.
    #[serde(flatten)]
    pub stats: Stats,
}

impl RunReport {
    /// Reads the run folder `run_dir` and aggregates it. `tiers` maps instance IDs
    /// to tiers; a task not in it takes its tier from the `tiers` map of
    /// `campaign.json` when there is one, else `?`.
    ///
    /// Fails only when the folder or one of its files cannot be read, or when it
    /// has neither `campaign.json` nor `results.jsonl`; malformed lines become
    /// warnings and a torn last line is ignored.
    pub fn load(
        run_dir: &Path,
        tiers: &BTreeMap<String, String>,
    ) -> Result<RunReport, ReportError> {
        let loaded = read_run_dir(run_dir)?;
        let mut report = build(
            run_dir,
            loaded.campaign.as_ref(),
            loaded.records,
            tiers,
            loaded.warnings,
        );
        report.counts.lines = loaded.lines;
        report.counts.malformed = loaded.malformed;
        report.counts.torn_line = loaded.torn_line;
        Ok(report)
    }

    /// Aggregates records already in memory, in file order, as if read from a run
    /// folder `run_dir` with `campaign` as its `campaign.json`.
    pub fn from_records(
        run_dir: &Path,
        campaign: Option<&Value>,
        records: &[ResultRecord],
        tiers: &BTreeMap<String, String>,
    ) -> RunReport {
        let records = records
            .iter()
            .map(|r| LineRecord {
                line: None,
                record: r.clone(),
            })
            .collect();
        let mut report = build(run_dir, campaign, records, tiers, Vec::new());
        report.counts.lines = report.counts.records;
        report
    }

    /// The task with this instance ID.
    pub fn task(&self, instance_id: &str) -> Option<&TaskInfo> {
        self.tasks
            .binary_search_by(|t| t.instance_id.as_str().cmp(instance_id))
            .ok()
            .map(|i| &self.tasks[i])
    }
}

fn build(
    run_dir: &Path,
    campaign_json: Option<&Value>,
    records: Vec<LineRecord>,
    tiers: &BTreeMap<String, String>,
    mut warnings: Vec<Warning>,
) -> RunReport {
    // The caller's tiers first, then those campaign.json records.
    let campaign_tiers: BTreeMap<String, String> = campaign_json
        .and_then(|c| c.get("tiers"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let tier_of = |id: &str| {
        tiers
            .get(id)
            .or_else(|| campaign_tiers.get(id))
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TIER.to_string())
    };
    let mut campaign = match campaign_json.and_then(Value::as_object) {
        Some(obj) => parse_campaign(obj, &mut warnings),
        None => CampaignInfo {
            source: CampaignSource::Inferred,
            started_at: None,
            resumed_at: None,
            harness_version: None,
            dataset: None,
            model: None,
            api: None,
            base_url: None,
            agents: Vec::new(),
            samples: None,
            tasks: Vec::new(),
            settings: Value::Null,
        },
    };

    let mut counts = RecordCounts {
        records: records.len(),
        ..RecordCounts::default()
    };
    let mut gold: BTreeMap<String, Vec<Observation>> = BTreeMap::new();
    let mut noop: BTreeMap<String, Vec<Observation>> = BTreeMap::new();
    let mut task_ids: BTreeSet<String> = campaign.tasks.iter().cloned().collect();
    let mut episodes: Vec<EpisodeRow> = Vec::new();
    let mut by_key: HashMap<(String, String), usize> = HashMap::new();
    let mut earliest_start: Option<String> = None;
    let mut harness_version: Option<String> = None;

    // The episodes campaign.json says the campaign planned, when it says.
    let planned: Option<BTreeSet<&str>> = campaign_json
        .and_then(|c| c.get("episode_keys"))
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect());
    for LineRecord { line, record } in records {
        let problem = implausible(&record).or_else(|| {
            let planned = planned.as_ref()?;
            if record.kind != SubmissionKind::Episode {
                return None;
            }
            let key = record
                .episode
                .as_ref()
                .and_then(|e| e.key.as_deref())
                .unwrap_or("");
            (!planned.contains(key)).then(|| {
                format!("its key `{key}` is not one of the campaign's episodes (campaign.json)")
            })
        });
        if let Some(problem) = problem {
            counts.implausible += 1;
            warnings.push(Warning::new(
                RESULTS_FILE,
                line,
                format!(
                    "skipped the {} record `{}` for {}: {problem}",
                    record.kind.name(),
                    record.name,
                    record.instance_id
                ),
            ));
            continue;
        }
        task_ids.insert(record.instance_id.clone());
        let prov = &record.provenance;
        if !prov.started_at.is_empty()
            && earliest_start.as_ref().is_none_or(|s| prov.started_at < *s)
        {
            earliest_start = Some(prov.started_at.clone());
        }
        if harness_version.is_none() && !prov.harness_version.is_empty() {
            harness_version = Some(prov.harness_version.clone());
        }
        let obs = Observation {
            reward: record.reward,
            verdict: record.verdict,
        };
        match record.kind {
            SubmissionKind::Gold => {
                counts.calibration_records += 1;
                gold.entry(record.instance_id).or_default().push(obs);
            }
            SubmissionKind::Noop => {
                counts.calibration_records += 1;
                noop.entry(record.instance_id).or_default().push(obs);
            }
            SubmissionKind::Rung => counts.ignored_records += 1,
            SubmissionKind::Episode | SubmissionKind::Prediction => {
                counts.episode_records += 1;
                let mut row = episode_row(line, &record, &tier_of, run_dir, &mut warnings);
                let id = (row.instance_id.clone(), row.key.clone());
                match by_key.get(&id) {
                    Some(&i) => {
                        counts.duplicates += 1;
                        row.reruns = row.reruns.max(episodes[i].reruns + 1);
                        episodes[i] = row;
                    }
                    None => {
                        by_key.insert(id, episodes.len());
                        episodes.push(row);
                    }
                }
            }
        }
    }
    episodes.sort_by(|a, b| {
        (&a.instance_id, &a.agent, &a.model, a.sample, &a.key).cmp(&(
            &b.instance_id,
            &b.agent,
            &b.model,
            b.sample,
            &b.key,
        ))
    });
    counts.episodes = episodes.len();
    counts.harness_errors = episodes.iter().filter(|e| e.is_harness_error()).count();

    let mut episodes_per_task: HashMap<&str, usize> = HashMap::new();
    for e in &episodes {
        *episodes_per_task.entry(&e.instance_id).or_default() += 1;
    }
    let tasks: Vec<TaskInfo> = task_ids
        .iter()
        .map(|id| {
            let calibration = TaskCalibration::judge(
                gold.remove(id).unwrap_or_default(),
                noop.remove(id).unwrap_or_default(),
            );
            counts.calibration.add(calibration.status);
            TaskInfo {
                instance_id: id.clone(),
                tier: tier_of(id),
                calibration,
                episodes: episodes_per_task.get(id.as_str()).copied().unwrap_or(0),
            }
        })
        .collect();
    let status_of = |id: &str| {
        tasks
            .binary_search_by(|t| t.instance_id.as_str().cmp(id))
            .map_or(CalibrationStatus::NotRun, |i| tasks[i].calibration.status)
    };

    // Fill in what campaign.json did not say.
    if campaign.tasks.is_empty() {
        campaign.tasks = task_ids.iter().cloned().collect();
    }
    if campaign.agents.is_empty() {
        let agents: BTreeSet<&str> = episodes.iter().map(|e| e.agent.as_str()).collect();
        campaign.agents = agents.into_iter().map(str::to_string).collect();
    }
    if campaign.samples.is_none() {
        campaign.samples = episodes
            .iter()
            .filter_map(|e| e.sample)
            .max()
            .map(|m| m + 1);
    }
    if campaign.model.is_none() {
        let models: BTreeSet<&str> = episodes.iter().map(|e| e.model.as_str()).collect();
        if models.len() == 1 {
            campaign.model = models.into_iter().next().map(str::to_string);
        }
    }
    if campaign.harness_version.is_none() {
        campaign.harness_version = harness_version;
    }
    if campaign.started_at.is_none() {
        campaign.started_at = earliest_start;
    }
    if campaign.source == CampaignSource::CampaignJson {
        if let (Some(obj), Some(samples)) =
            (campaign_json.and_then(Value::as_object), campaign.samples)
        {
            let listed = |k: &str| obj.get(k).and_then(Value::as_array).map(Vec::len);
            if let (Some(t), Some(a)) = (listed("tasks"), listed("agents")) {
                counts.expected_episodes = Some(t * a * samples as usize);
            }
        }
    }

    let by_task = group(&episodes, |e| {
        (e.instance_id.clone(), e.agent.clone(), e.model.clone())
    })
    .into_iter()
    .map(|((instance_id, agent, model), eps)| TaskGroup {
        tier: tier_of(&instance_id),
        calibration: status_of(&instance_id),
        instance_id,
        agent,
        model,
        stats: Stats::of(eps),
    })
    .collect();
    let calibration_of = |eps: &[&EpisodeRow]| {
        let ids: BTreeSet<&str> = eps.iter().map(|e| e.instance_id.as_str()).collect();
        let mut c = CalibrationCounts::default();
        for id in &ids {
            c.add(status_of(id));
        }
        (ids.len(), c)
    };
    let by_tier = group(&episodes, |e| {
        (e.tier.clone(), e.agent.clone(), e.model.clone())
    })
    .into_iter()
    .map(|((tier, agent, model), eps)| {
        let (tasks, calibration) = calibration_of(&eps);
        TierGroup {
            tier,
            agent,
            model,
            tasks,
            calibration,
            stats: Stats::of(eps),
        }
    })
    .collect();
    let overall = group(&episodes, |e| (e.agent.clone(), e.model.clone()))
        .into_iter()
        .map(|((agent, model), eps)| {
            let (tasks, calibration) = calibration_of(&eps);
            OverallGroup {
                agent,
                model,
                tasks,
                calibration,
                stats: Stats::of(eps),
            }
        })
        .collect();

    RunReport {
        run_dir: run_dir.to_path_buf(),
        campaign,
        counts,
        tasks,
        episodes,
        by_task,
        by_tier,
        overall,
        warnings,
    }
}

/// Why a record cannot be a grading's result, if it cannot: a reward or a
/// component that is not a finite number in [0, 1].
fn implausible(record: &ResultRecord) -> Option<String> {
    let c = &record.components;
    [
        ("reward", record.reward),
        ("hidden_pass_fraction", c.hidden_pass_fraction),
        ("public_regression", c.public_regression),
        ("build_health", c.build_health),
    ]
    .into_iter()
    .find(|(_, v)| !v.is_finite() || !(0.0..=1.0).contains(v))
    .map(|(name, v)| format!("its {name} {v} is not a number in [0, 1]"))
}

fn group<K: Ord>(
    episodes: &[EpisodeRow],
    key: impl Fn(&EpisodeRow) -> K,
) -> BTreeMap<K, Vec<&EpisodeRow>> {
    let mut groups: BTreeMap<K, Vec<&EpisodeRow>> = BTreeMap::new();
    for e in episodes {
        groups.entry(key(e)).or_default().push(e);
    }
    groups
}

/// A JSON value as text: strings as they are, anything else as compact JSON.
fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn parse_campaign(obj: &Map<String, Value>, warnings: &mut Vec<Warning>) -> CampaignInfo {
    let text = |k: &str| obj.get(k).and_then(as_text);
    let mut warn = |m: String| warnings.push(Warning::new(CAMPAIGN_FILE, None, m));
    let list = |k: &str, warn: &mut dyn FnMut(String)| match obj.get(k) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().filter_map(as_text).collect(),
        Some(other) => {
            warn(format!("`{k}` is not a list: {other}"));
            Vec::new()
        }
    };
    let agents = list("agents", &mut warn);
    let tasks = list("tasks", &mut warn);
    let samples = match obj.get("samples") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let n = v.as_u64();
            if n.is_none() {
                warn(format!("`samples` is not a count: {v}"));
            }
            n
        }
    };
    CampaignInfo {
        source: CampaignSource::CampaignJson,
        started_at: text("started_at"),
        resumed_at: text("resumed_at"),
        harness_version: text("harness_version"),
        dataset: text("dataset"),
        model: text("model"),
        api: text("api"),
        base_url: text("base_url"),
        agents,
        samples,
        tasks,
        settings: obj.get("settings").cloned().unwrap_or(Value::Null),
    }
}

fn episode_row(
    line: Option<usize>,
    r: &ResultRecord,
    tier_of: &dyn Fn(&str) -> String,
    run_dir: &Path,
    warnings: &mut Vec<Warning>,
) -> EpisodeRow {
    let empty = EpisodeInfo::default();
    let e = match &r.episode {
        Some(e) => e,
        None => {
            if r.kind == SubmissionKind::Episode {
                warnings.push(Warning::new(
                    RESULTS_FILE,
                    line,
                    format!(
                        "episode record `{}` for {} has no episode fields",
                        r.name, r.instance_id
                    ),
                ));
            }
            &empty
        }
    };
    for m in &e.malformed {
        let message = format!("episode field `{}` is not {}; ignored", m.field, m.expected);
        warnings.push(Warning::new(RESULTS_FILE, line, message));
    }
    let token_budget = e.token_budget.and_then(|b| {
        let budget = u64::try_from(b).ok();
        if budget.is_none() {
            let message =
                "episode field `token_budget` is not a non-negative integer; ignored".to_string();
            warnings.push(Warning::new(RESULTS_FILE, line, message));
        }
        budget
    });
    let model = e
        .model
        .clone()
        .or_else(|| r.model_name_or_path.clone())
        .unwrap_or_else(|| UNKNOWN_TIER.to_string());
    let (key, agent) = match r.kind {
        SubmissionKind::Prediction => (format!("prediction:{model}"), "prediction".to_string()),
        _ => (
            e.key.clone().unwrap_or_else(|| r.name.clone()),
            e.agent.clone().unwrap_or_else(|| UNKNOWN_TIER.to_string()),
        ),
    };
    let (tokens_in, tokens_out) = (e.tokens_in, e.tokens_out);
    let end_reason = e.end_reason.clone();
    let budget_exhausted = end_reason.as_deref() == Some(BUDGET_EXHAUSTED)
        || matches!(
            (tokens_in, tokens_out, token_budget),
            (Some(i), Some(o), Some(b)) if b > 0 && i.saturating_add(o) >= b
        );
    // Checked without following links: a link in a run folder is not the file.
    let folder = pdl_fs::Dir::open(run_dir).ok();
    let exists = |p: &Option<String>| {
        p.as_ref()
            .map(|p| folder.as_ref().is_some_and(|d| d.is_file(Path::new(p))))
    };
    EpisodeRow {
        instance_id: r.instance_id.clone(),
        tier: tier_of(&r.instance_id),
        kind: r.kind,
        key,
        agent,
        model,
        sample: e.sample,
        reward: r.reward,
        verdict: r.verdict,
        detail: r.detail.clone(),
        end_reason,
        budget_exhausted,
        tokens_in,
        tokens_out,
        token_budget,
        steps: e.steps,
        wall_s: e.wall_s,
        landed_rung: r.landed_rung.clone(),
        trajectory_exists: exists(&e.trajectory),
        trajectory: e.trajectory.clone(),
        patch_exists: exists(&e.patch),
        patch: e.patch.clone(),
        patch_error: e.patch_error.clone(),
        log_exists: exists(&e.log),
        log: e.log.clone(),
        error: e.error.clone().flatten(),
        reruns: e.reruns(),
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{episode, record, set_episode_field};
    use serde_json::json;

    fn report(records: &[ResultRecord]) -> RunReport {
        let tiers = BTreeMap::from([("a".to_string(), "easy".to_string())]);
        RunReport::from_records(Path::new("/nonexistent"), None, records, &tiers)
    }

    fn cal(reward: f64, verdict: Verdict) -> Observation {
        Observation { reward, verdict }
    }

    #[test]
    fn calibration_status_follows_the_rule() {
        let g = Verdict::Graded;
        let judge = |gold, noop| TaskCalibration::judge(gold, noop).status;
        assert_eq!(judge(vec![], vec![]), CalibrationStatus::NotRun);
        assert_eq!(
            judge(vec![cal(1.0, g)], vec![cal(0.2, g)]),
            CalibrationStatus::Calibrated
        );
        assert_eq!(
            judge(
                vec![cal(1.0 - 1e-12, g), cal(1.0, g)],
                vec![cal(0.2 + 1e-12, g)]
            ),
            CalibrationStatus::Calibrated
        );
        assert_eq!(
            judge(vec![cal(1.0, g), cal(0.6, g)], vec![cal(0.2, g)]),
            CalibrationStatus::Uncalibrated
        );
        assert_eq!(
            judge(vec![cal(1.0, g)], vec![cal(0.2, Verdict::Timeout)]),
            CalibrationStatus::Uncalibrated
        );
        assert_eq!(
            judge(vec![cal(1.0, g)], vec![]),
            CalibrationStatus::Uncalibrated
        );
    }

    #[test]
    fn calibration_summary_shows_what_was_observed() {
        let g = Verdict::Graded;
        let c = TaskCalibration::judge(
            vec![cal(1.0, g), cal(0.6, g)],
            vec![cal(0.0, Verdict::HarnessError)],
        );
        assert_eq!(
            c.summary(),
            "uncalibrated (gold 1.000/0.600, noop 0.000 harness_error)"
        );
        let c = TaskCalibration::judge(vec![cal(1.0, g)], vec![]);
        assert_eq!(c.summary(), "uncalibrated (gold 1.000, noop not run)");
        assert_eq!(TaskCalibration::judge(vec![], vec![]).summary(), "not run");
    }

    #[test]
    fn calibration_records_make_the_task_status() {
        let mut bad_gold = record("b", "gold", 0.6);
        bad_gold.verdict = Verdict::Graded;
        let r = report(&[
            record("a", "gold", 1.0),
            record("a", "noop", 0.2),
            bad_gold,
            record("b", "noop", 0.2),
            episode("c", "builtin", 0, 0.5),
        ]);
        let status: Vec<_> = r.tasks.iter().map(|t| t.calibration.status).collect();
        assert_eq!(
            status,
            vec![
                CalibrationStatus::Calibrated,
                CalibrationStatus::Uncalibrated,
                CalibrationStatus::NotRun
            ]
        );
        assert_eq!(r.task("b").unwrap().calibration.gold[0].reward, 0.6);
        assert_eq!(r.by_task[0].calibration, CalibrationStatus::NotRun);
        assert_eq!(r.counts.calibration_records, 4);
        assert_eq!(
            r.counts.calibration,
            CalibrationCounts {
                calibrated: 1,
                uncalibrated: 1,
                not_run: 1
            }
        );
    }

    #[test]
    fn harness_errors_are_counted_but_left_out_of_reward_means() {
        let mut err = episode("a", "builtin", 2, 0.0);
        err.verdict = Verdict::HarnessError;
        set_episode_field(&mut err, "tokens_in", json!(4_000));
        let r = report(&[
            episode("a", "builtin", 0, 1.0),
            episode("a", "builtin", 1, 0.2),
            err,
        ]);
        let s = &r.by_task[0].stats;
        assert_eq!(s.episodes, 3);
        assert_eq!(s.scored, 2);
        assert_eq!(s.harness_errors, 1);
        assert_eq!(s.mean_reward, Some(0.6));
        // The tokens a harness error spent were spent: they count.
        assert_eq!(s.mean_tokens_in, Some(2000.0));
        assert_eq!(s.verdicts["harness_error"], 1);
        assert_eq!(s.verdicts["graded"], 2);
        let ci = s.ci95.unwrap();
        assert!(ci.lo >= 0.2 && ci.hi <= 1.0);
        assert_eq!(r.counts.harness_errors, 1);
        assert_eq!(r.overall[0].stats.mean_reward, Some(0.6));
    }

    #[test]
    fn only_harness_errors_give_no_mean() {
        let mut err = episode("a", "builtin", 0, 0.0);
        err.verdict = Verdict::HarnessError;
        let r = report(&[err]);
        let s = &r.by_task[0].stats;
        assert_eq!((s.episodes, s.scored), (1, 0));
        assert_eq!(s.mean_reward, None);
        assert_eq!(s.ci95, None);
        assert_eq!(s.mean_tokens_in, Some(1000.0), "its tokens are shown");
    }

    #[test]
    fn a_single_sample_has_the_point_as_interval() {
        let r = report(&[episode("a", "builtin", 0, 0.6)]);
        let s = &r.by_task[0].stats;
        assert_eq!(s.mean_reward, Some(0.6));
        assert_eq!(s.ci95, Some(Interval { lo: 0.6, hi: 0.6 }));
    }

    #[test]
    fn a_duplicate_key_counts_once_with_its_last_record() {
        let mut retried = episode("a", "builtin", 0, 0.0);
        retried.verdict = Verdict::HarnessError;
        let r = report(&[
            retried,
            episode("a", "builtin", 1, 0.2),
            episode("a", "builtin", 0, 1.0),
        ]);
        assert_eq!(r.counts.episode_records, 3);
        assert_eq!(r.counts.duplicates, 1);
        assert_eq!(r.episodes.len(), 2);
        let s = &r.by_task[0].stats;
        assert_eq!((s.episodes, s.harness_errors), (2, 0));
        assert_eq!(s.mean_reward, Some(0.6));
        assert_eq!(r.episodes[0].sample, Some(0));
        assert_eq!(r.episodes[0].reward, 1.0);
    }

    #[test]
    fn groups_split_by_task_tier_agent_and_model() {
        let mut other_model = episode("a", "builtin", 0, 0.2);
        set_episode_field(&mut other_model, "model", json!("gpt-y"));
        set_episode_field(&mut other_model, "key", json!("a/builtin/gpt-y/0"));
        let r = report(&[
            episode("a", "builtin", 0, 1.0),
            episode("a", "cmd:mini", 0, 0.2),
            episode("b", "builtin", 0, 0.6),
            other_model,
        ]);
        let keys: Vec<_> = r
            .by_task
            .iter()
            .map(|g| format!("{} {} {} {}", g.instance_id, g.tier, g.agent, g.model))
            .collect();
        assert_eq!(
            keys,
            [
                "a easy builtin gpt-x",
                "a easy builtin gpt-y",
                "a easy cmd:mini gpt-x",
                "b ? builtin gpt-x"
            ]
        );
        let tiers: Vec<_> = r
            .by_tier
            .iter()
            .map(|g| format!("{} {} {} {}", g.tier, g.agent, g.model, g.tasks))
            .collect();
        assert_eq!(
            tiers,
            [
                "? builtin gpt-x 1",
                "easy builtin gpt-x 1",
                "easy builtin gpt-y 1",
                "easy cmd:mini gpt-x 1"
            ]
        );
        let builtin = &r.overall[0];
        assert_eq!((builtin.agent.as_str(), builtin.tasks), ("builtin", 2));
        assert_eq!(builtin.stats.mean_reward, Some(0.8));
        assert_eq!(r.campaign.source, CampaignSource::Inferred);
        assert_eq!(r.campaign.agents, ["builtin", "cmd:mini"]);
        assert_eq!(r.campaign.model, None, "two models");
        assert_eq!(r.campaign.samples, Some(1));
    }

    #[test]
    fn end_reasons_budget_and_rungs_are_counted() {
        let mut out = episode("a", "builtin", 0, 0.2);
        set_episode_field(&mut out, "end_reason", json!("budget_exhausted"));
        let mut over = episode("a", "builtin", 1, 0.2);
        set_episode_field(&mut over, "tokens_in", json!(4950));
        set_episode_field(&mut over, "end_reason", json!("step_limit"));
        let mut landed = episode("a", "builtin", 2, 0.6);
        landed.landed_rung = Some("half".to_string());
        let r = report(&[out, over, landed]);
        let s = &r.by_task[0].stats;
        assert_eq!(s.budget_exhausted, 2);
        assert_eq!(
            s.end_reasons,
            BTreeMap::from([
                ("budget_exhausted".to_string(), 1),
                ("finished".to_string(), 1),
                ("step_limit".to_string(), 1)
            ])
        );
        assert_eq!(s.landed_rungs, BTreeMap::from([("half".to_string(), 1)]));
        assert_eq!(s.mean_tokens_out, Some(100.0));
    }

    #[test]
    fn odd_episode_fields_are_warnings_not_failures() {
        let mut odd = episode("a", "builtin", 0, 0.6);
        set_episode_field(&mut odd, "tokens_in", json!("lots"));
        let mut bare = record("a", "episode", 0.2);
        bare.name = "bare-key".to_string();
        let r = RunReport::from_records(
            Path::new("/nonexistent"),
            None,
            &[odd, bare],
            &BTreeMap::new(),
        );
        assert_eq!(r.episodes.len(), 2);
        let messages: Vec<_> = r.warnings.iter().map(|w| w.message.as_str()).collect();
        assert!(messages[0].contains("`tokens_in` is not a non-negative integer"));
        assert!(messages[1].contains("has no episode fields"));
        let bare = r.episodes.iter().find(|e| e.key == "bare-key").unwrap();
        assert_eq!(bare.agent, "?");
    }

    #[test]
    fn predictions_are_reported_per_model() {
        let mut p = record("a", "prediction", 0.6);
        p.model_name_or_path = Some("sys-1".to_string());
        let mut again = p.clone();
        again.reward = 1.0;
        let r = report(&[p, again, record("a", "rung", 0.6)]);
        assert_eq!(r.counts.ignored_records, 1);
        assert_eq!(r.episodes.len(), 1);
        assert_eq!(r.by_task[0].agent, "prediction");
        assert_eq!(r.by_task[0].model, "sys-1");
        assert_eq!(r.by_task[0].stats.mean_reward, Some(1.0));
    }

    #[test]
    fn tiers_come_from_the_caller_then_from_campaign_json() {
        let campaign = json!({"tiers": {"a": "from-campaign", "b": "from-campaign"}});
        let tiers = BTreeMap::from([("a".to_string(), "from-caller".to_string())]);
        let r = RunReport::from_records(
            Path::new("/run"),
            Some(&campaign),
            &[
                episode("a", "builtin", 0, 1.0),
                episode("b", "builtin", 0, 1.0),
            ],
            &tiers,
        );
        let t: Vec<_> = r.by_tier.iter().map(|g| g.tier.as_str()).collect();
        assert_eq!(t, ["from-caller", "from-campaign"]);
    }

    #[test]
    fn campaign_json_fields_are_used_and_filled_in() {
        let campaign = json!({
            "started_at": "2025-01-01T00:00:00Z", "model": "gpt-x",
            "dataset": {"path": "suite"}, "agents": ["builtin", "cmd:mini"],
            "samples": 3, "tasks": ["a", "z"], "settings": {"jobs": 4},
        });
        let r = RunReport::from_records(
            Path::new("/run"),
            Some(&campaign),
            &[episode("a", "builtin", 0, 1.0)],
            &BTreeMap::new(),
        );
        assert_eq!(r.campaign.source, CampaignSource::CampaignJson);
        assert_eq!(r.campaign.dataset.as_deref(), Some(r#"{"path":"suite"}"#));
        assert_eq!(r.counts.expected_episodes, Some(12));
        let ids: Vec<_> = r.tasks.iter().map(|t| t.instance_id.as_str()).collect();
        assert_eq!(ids, ["a", "z"]);
        assert_eq!(r.task("z").unwrap().episodes, 0);
        assert_eq!(r.task("a").unwrap().tier, "?");
        let bad = json!({"samples": "three", "agents": "builtin"});
        let r = RunReport::from_records(Path::new("/run"), Some(&bad), &[], &BTreeMap::new());
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    }

    #[test]
    fn reruns_are_counted_per_agent_and_the_later_record_replaces_the_earlier() {
        let mut failed = episode("a", "builtin", 0, 0.0);
        failed.verdict = Verdict::HarnessError;
        let mut rerun = episode("a", "builtin", 0, 1.0);
        set_episode_field(
            &mut rerun,
            "previous_outcomes",
            json!([{"verdict": "harness_error", "detail": "sandbox failed"}]),
        );
        // A re-run whose earlier record is no longer in the file still counts.
        let mut lone_rerun = episode("a", "cmd:mini", 0, 0.2);
        set_episode_field(
            &mut lone_rerun,
            "previous_outcomes",
            json!([{"verdict": "harness_error"}, {"verdict": "harness_error"}]),
        );
        let r = report(&[failed, episode("a", "builtin", 1, 0.2), rerun, lone_rerun]);
        let builtin = r.overall.iter().find(|g| g.agent == "builtin").unwrap();
        assert_eq!(builtin.stats.reruns, 1);
        assert_eq!(builtin.stats.episodes, 2);
        assert_eq!(builtin.stats.harness_errors, 0);
        assert_eq!(builtin.stats.mean_reward, Some(0.6));
        let mini = r.overall.iter().find(|g| g.agent == "cmd:mini").unwrap();
        assert_eq!(mini.stats.reruns, 2);
        for rendered in [
            crate::render_table(&r),
            crate::render_markdown(&r),
            crate::render_html(&r),
            crate::to_json(&r).to_string(),
        ] {
            assert!(
                rendered.contains("Re-runs") || rendered.contains("\"reruns\":1"),
                "{rendered}"
            );
        }
    }

    #[test]
    fn a_record_with_an_impossible_reward_is_skipped_with_a_warning() {
        let forged = episode("a", "builtin", 1, 5.0);
        let mut nan = episode("a", "builtin", 2, 0.5);
        nan.components.build_health = f64::NAN;
        let r = report(&[episode("a", "builtin", 0, 0.2), forged, nan]);
        assert_eq!(r.counts.implausible, 2);
        assert_eq!(r.episodes.len(), 1);
        assert_eq!(r.overall[0].stats.mean_reward, Some(0.2));
        assert!(r.warnings[0]
            .message
            .contains("reward 5 is not a number in [0, 1]"));
        assert!(r.warnings[1].message.contains("build_health"));
    }

    #[test]
    fn episodes_campaign_json_does_not_list_are_skipped() {
        let campaign = json!({"episode_keys": ["a/builtin/gpt-x/0"]});
        let r = RunReport::from_records(
            Path::new("/run"),
            Some(&campaign),
            &[
                episode("a", "builtin", 0, 0.2),
                episode("a", "builtin", 1, 1.0),
                record("a", "gold", 1.0),
            ],
            &BTreeMap::new(),
        );
        assert_eq!(r.episodes.len(), 1);
        assert_eq!(r.counts.implausible, 1);
        assert_eq!(r.counts.calibration_records, 1);
        assert!(r.warnings[0].message.contains("a/builtin/gpt-x/1"));
    }
}
