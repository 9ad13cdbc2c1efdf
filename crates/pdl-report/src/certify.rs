//! Certification: dated certificates of agents' attempts on tasks, and the
//! tier gates that decide whether a task's tier is supported by them.
//!
//! [`Collected`] reads graded results: `grade` output files (prediction
//! records) and campaign run folders (their `results.jsonl`, episode records
//! only). It groups the attempts by task and by agent ([`AgentKey`]: a
//! prediction's `model_name_or_path`, or an episode's agent, model and token
//! budget). [`Certificate::new`] turns one group into a certificate, which a
//! [`CertificateStore`] writes into the task tree's `certificates/` folder
//! (never through a link, never over an existing file) and reads back.
//! [`certify_task`] applies the [`Gates`] to a task's certificates: a
//! certificate whose task digest is not the task's is stale and not counted,
//! and in a tier the gates hold to the token contract (T4 and T5 by default,
//! after the card), neither is one whose attempts were not metered against the
//! task's own token budget.
//!
//! Nothing here prints: unreadable lines, records of unknown tasks and
//! unreadable certificates are [`Warning`]s naming the file and line.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use pdl_grader::{ResultRecord, SubmissionKind, Verdict};
use pdl_task::tree::CERTIFICATES_DIR;
use pdl_task::{Dataset, Task};
use serde::{Deserialize, Serialize};

use crate::error::Warning;
use crate::load::RESULTS_FILE;

/// The version of the certificate layout, written into every certificate.
pub const CERTIFICATE_SCHEMA_VERSION: u32 = 1;

/// The largest certificate read.
const MAX_CERTIFICATE_BYTES: u64 = 16 << 20;

/// The largest gates file read.
const MAX_GATES_BYTES: u64 = 64 << 10;

/// The largest results file read.
const MAX_RESULTS_BYTES: u64 = 4 << 30;

/// The most certificates of one agent, task and date (`-2` … suffixes).
const MAX_SUFFIX: usize = 10_000;

/// A results source or certificate folder that cannot be used, or a gates
/// file that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum CertifyError {
    /// A results file or folder cannot be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file or folder beneath a certificate folder cannot be used.
    #[error(transparent)]
    Fs(#[from] pdl_fs::FsError),
    /// A certificate cannot be written.
    #[error("{}: cannot write: {message}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A gates file is not what [`Gates::parse`] accepts.
    #[error("{file}: {message}")]
    Gates {
        /// The gates file.
        file: String,
        /// What is wrong, with its line when known.
        message: String,
    },
}

/// Who made an attempt: a prediction's `model_name_or_path` (as agent and
/// model, no budget), or an episode's agent, model and token budget.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct AgentKey {
    /// The agent (an episode's agent label; a prediction's model).
    pub agent: String,
    /// The model.
    pub model: String,
    /// The token budget the attempts were metered against (episodes only).
    pub budget: Option<i64>,
}

impl AgentKey {
    /// `agent`, with `/model` when it differs and `@budget` when metered.
    pub fn label(&self) -> String {
        let mut s = self.agent.clone();
        if self.model != self.agent {
            s.push('/');
            s.push_str(&self.model);
        }
        if let Some(b) = self.budget {
            s.push_str(&format!("@{b}"));
        }
        s
    }

    /// A file-name-safe form: lowercase letters, digits, `.`, `_` and `-`,
    /// at most 64 bytes (`agent` when nothing is left).
    pub fn slug(&self) -> String {
        let raw = if self.model == self.agent {
            self.agent.clone()
        } else {
            format!("{}-{}", self.agent, self.model)
        };
        let mut out = String::new();
        for c in raw.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                out.push(c);
            } else if !out.ends_with('-') {
                out.push('-');
            }
        }
        let trimmed: String = out
            .trim_matches(|c| c == '-' || c == '.')
            .chars()
            .take(64)
            .collect();
        let trimmed = trimmed.trim_end_matches(['-', '.']).to_string();
        if trimmed.is_empty() {
            "agent".to_string()
        } else {
            trimmed
        }
    }
}

/// One graded attempt, as read from a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The reward (meaningless for harness errors and invalid predictions).
    pub reward: f64,
    /// The share of hidden tests it passed.
    pub hidden_pass_fraction: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// The rung the attempt landed on.
    pub landed_rung: Option<String>,
    /// `file:line` the record came from.
    pub origin: String,
    /// The file it came from.
    pub file: String,
    /// What makes two records the same attempt.
    identity: String,
    /// When the attempt started (RFC 3339), as its record says.
    started_at: String,
}

impl Attempt {
    /// True when the attempt has a reward that counts (not a harness error,
    /// not an invalid prediction).
    pub fn counts(&self) -> bool {
        !matches!(
            self.verdict,
            Verdict::HarnessError | Verdict::InvalidPrediction
        )
    }
}

/// Where graded results come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultsSource {
    /// A JSONL file of result records (`grade --out`): its prediction and
    /// episode records are read.
    File(PathBuf),
    /// A campaign run folder: the episode records of its `results.jsonl`.
    RunFolder(PathBuf),
}

impl ResultsSource {
    /// A folder is a run folder, anything else a file.
    pub fn of_path(path: &Path) -> ResultsSource {
        if path.is_dir() {
            ResultsSource::RunFolder(path.to_path_buf())
        } else {
            ResultsSource::File(path.to_path_buf())
        }
    }

    /// How warnings name the file.
    pub fn file_label(&self) -> String {
        match self {
            ResultsSource::File(p) => p.display().to_string(),
            ResultsSource::RunFolder(p) => p.join(RESULTS_FILE).display().to_string(),
        }
    }

    /// Reads the records' bytes: a file as named, a run folder's
    /// `results.jsonl` without following a link.
    pub fn read(&self) -> Result<Vec<u8>, CertifyError> {
        match self {
            ResultsSource::File(path) => {
                use std::io::Read;
                let read_err = |source| CertifyError::Read {
                    path: path.clone(),
                    source,
                };
                let meta = std::fs::metadata(path).map_err(read_err)?;
                if !meta.is_file() {
                    return Err(read_err(io::Error::other("not a regular file")));
                }
                let mut bytes = Vec::new();
                std::fs::File::open(path)
                    .and_then(|f| f.take(MAX_RESULTS_BYTES + 1).read_to_end(&mut bytes))
                    .map_err(read_err)?;
                if bytes.len() as u64 > MAX_RESULTS_BYTES {
                    return Err(read_err(io::Error::other(format!(
                        "larger than {MAX_RESULTS_BYTES} bytes"
                    ))));
                }
                Ok(bytes)
            }
            ResultsSource::RunFolder(path) => {
                let dir = pdl_fs::Dir::open(path)?;
                dir.read(Path::new(RESULTS_FILE), MAX_RESULTS_BYTES)?
                    .ok_or_else(|| CertifyError::Read {
                        path: path.join(RESULTS_FILE),
                        source: io::Error::new(
                            io::ErrorKind::NotFound,
                            "missing (not a campaign run folder?)",
                        ),
                    })
            }
        }
    }
}

/// Graded attempts grouped by task ID and agent, with what was skipped.
#[derive(Debug, Default)]
pub struct Collected {
    /// Attempts per (task ID, agent), in the order they were read.
    pub groups: BTreeMap<(String, AgentKey), Vec<Attempt>>,
    /// Lines that could not be used, each naming its file and line.
    pub warnings: Vec<Warning>,
    /// Records read (every kind).
    pub records: usize,
    /// Records of kinds that certify no agent (gold, do-nothing, rungs; and
    /// predictions in a run folder).
    pub skipped: usize,
    /// Where each attempt identity is: (task ID, agent, index).
    seen: HashMap<String, (String, AgentKey)>,
}

impl Collected {
    /// Reads every source; fails only when a source cannot be read.
    pub fn read(sources: &[ResultsSource], dataset: &Dataset) -> Result<Collected, CertifyError> {
        let mut collected = Collected::default();
        for source in sources {
            let bytes = source.read()?;
            let episodes_only = matches!(source, ResultsSource::RunFolder(_));
            collected.add_bytes(&bytes, &source.file_label(), episodes_only, dataset);
        }
        Ok(collected)
    }

    /// Adds the records of one JSONL text. `episodes_only` keeps only episode
    /// records (a run folder).
    pub fn add_bytes(&mut self, bytes: &[u8], file: &str, episodes_only: bool, dataset: &Dataset) {
        for (index, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = index + 1;
            let warn = |message: String| Warning::new(file, Some(line), message);
            let Ok(text) = std::str::from_utf8(raw) else {
                self.warnings
                    .push(warn("not UTF-8 text; line skipped".to_string()));
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let record: ResultRecord = match serde_json::from_str(text) {
                Ok(r) => r,
                Err(e) => {
                    self.warnings
                        .push(warn(format!("not a result record ({e}); line skipped")));
                    continue;
                }
            };
            self.records += 1;
            if let Err(message) = self.add_record(record, file, line, episodes_only, dataset) {
                self.warnings.push(warn(message));
            }
        }
    }

    /// Adds one record; `Err` is a warning's message.
    fn add_record(
        &mut self,
        record: ResultRecord,
        file: &str,
        line: usize,
        episodes_only: bool,
        dataset: &Dataset,
    ) -> Result<(), String> {
        let (key, identity) = match record.kind {
            SubmissionKind::Episode => {
                let episode = record
                    .episode
                    .as_ref()
                    .ok_or("an episode record without its `episode` object; skipped")?;
                let text = |value: &Option<String>, field: &str| {
                    value.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                        format!("an episode record without `episode.{field}`; skipped")
                    })
                };
                let budget = episode
                    .token_budget
                    .ok_or("an episode record without `episode.token_budget`; skipped")?;
                let key = AgentKey {
                    agent: text(&episode.agent, "agent")?,
                    model: text(&episode.model, "model")?,
                    budget: Some(budget),
                };
                // Independent campaigns of one configuration share episode
                // keys (and may start in the same second), so only a record
                // repeated exactly is the same attempt; a re-run (`rerun_of`)
                // replaces its key's earlier record.
                let identity = format!(
                    "episode\n{}\n{}",
                    text(&episode.key, "key")?,
                    serde_json::to_string(&record).unwrap_or_default()
                );
                (key, identity)
            }
            SubmissionKind::Prediction if !episodes_only => {
                let model = record
                    .model_name_or_path
                    .clone()
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| record.name.clone());
                let key = AgentKey {
                    agent: model.clone(),
                    model,
                    budget: None,
                };
                let identity = format!(
                    "prediction\n{}\n{}\n{}\n{}\n{}",
                    record.instance_id,
                    key.model,
                    record.provenance.submission_digest,
                    record.provenance.started_at,
                    record.verdict.name()
                );
                (key, identity)
            }
            _ => {
                self.skipped += 1;
                return Ok(());
            }
        };
        let task = dataset.get(&record.instance_id).ok_or_else(|| {
            match dataset.tasks.iter().find(|t| {
                record
                    .instance_id
                    .strip_prefix(t.row.task_id.as_str())
                    .is_some_and(|rest| rest.starts_with("-v"))
            }) {
                Some(t) => format!(
                    "`{}` is another version of a task of the dataset (it holds `{}`); skipped",
                    record.instance_id, t.row.instance_id
                ),
                None => format!(
                    "unknown task `{}` (not in the dataset); skipped",
                    record.instance_id
                ),
            }
        })?;
        // Harness errors and invalid predictions carry no grading of the task.
        let graded = !matches!(
            record.verdict,
            Verdict::HarnessError | Verdict::InvalidPrediction
        );
        if graded && record.provenance.task_digest != task.digest() {
            return Err(format!(
                "`{}` was graded against another content of the task (task digest {} is not the dataset's {}); skipped",
                record.instance_id,
                if record.provenance.task_digest.is_empty() { "missing" } else { &record.provenance.task_digest },
                task.digest()
            ));
        }
        if graded && !(record.reward.is_finite() && (0.0..=1.0).contains(&record.reward)) {
            return Err(format!(
                "reward {} is not a number in [0, 1]; skipped",
                record.reward
            ));
        }
        let attempt = Attempt {
            reward: record.reward,
            hidden_pass_fraction: record.components.hidden_pass_fraction,
            verdict: record.verdict,
            landed_rung: record.landed_rung.clone(),
            origin: format!("{file}:{line}"),
            file: file.to_string(),
            identity: identity.clone(),
            started_at: record.provenance.started_at.clone(),
        };
        let group = (task.row.task_id.clone(), key);
        let mut repeated = None;
        if let Some(earlier) = self.seen.get(&identity) {
            if let Some(list) = self.groups.get_mut(earlier) {
                if let Some(i) = list.iter().position(|a| a.identity == identity) {
                    repeated = Some(list.remove(i));
                }
            }
        }
        // A re-run episode replaces the record of the outcome it re-ran: one
        // of its key, in the same file, that started when one of its earlier
        // outcomes did. Campaigns of one configuration share keys, so nothing
        // else of that key is replaced.
        let rerun = record.episode.as_ref().and_then(|e| {
            let first = e.rerun_of.as_ref()?;
            let mut starts: Vec<&str> = vec![first.started_at.as_str()];
            starts.extend(
                e.previous_outcomes
                    .iter()
                    .flatten()
                    .map(|o| o.started_at.as_str()),
            );
            Some((format!("episode\n{}\n", e.key.as_deref()?), starts))
        });
        let mut unmatched_rerun = false;
        if let (None, Some((prefix, starts))) = (&repeated, &rerun) {
            let replaced = self.groups.get_mut(&group).and_then(|list| {
                let i = list.iter().rposition(|a| {
                    a.identity.starts_with(prefix.as_str())
                        && a.file == file
                        && starts.contains(&a.started_at.as_str())
                })?;
                Some(list.remove(i))
            });
            match replaced {
                Some(old) => {
                    self.seen.remove(&old.identity);
                }
                None => unmatched_rerun = true,
            }
        }
        self.seen.insert(identity, group.clone());
        self.groups.entry(group).or_default().push(attempt);
        match repeated {
            Some(earlier) => Err(format!(
                "repeats the record at {}; counted once",
                earlier.origin
            )),
            None if unmatched_rerun => Err(
                "a re-run of an outcome this file does not hold; counted as an attempt of its own"
                    .to_string(),
            ),
            None => Ok(()),
        }
    }
}

/// One agent's attempts on one task, dated; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// [`CERTIFICATE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The task.
    pub task_id: String,
    /// The task version certified.
    pub instance_id: String,
    /// The task's tier when certified.
    pub tier: String,
    /// The task's digest when certified (`Task::digest`).
    pub task_digest: String,
    /// The harness that wrote the certificate.
    pub harness_version: String,
    /// The agent.
    pub agent: String,
    /// The model.
    pub model: String,
    /// The token budget of metered attempts (episodes); null otherwise.
    pub budget: Option<i64>,
    /// When the certificate was written (RFC 3339, UTC).
    pub date: String,
    /// Every attempt's reward, in the order read (harness errors and invalid
    /// predictions left out).
    pub rewards: Vec<f64>,
    /// Every attempt's hidden pass fraction, in the order of `rewards`
    /// (empty in certificates written before it was recorded).
    #[serde(default)]
    pub hidden_pass_fractions: Vec<f64>,
    /// = `rewards.len()`.
    pub attempts: usize,
    /// Attempts that scored exactly 1.0.
    pub solved: usize,
    /// `solved / attempts`; null without attempts.
    pub solve_rate: Option<f64>,
    /// Records with verdict `harness_error` (not attempts).
    pub harness_errors: usize,
    /// Records per verdict, harness errors included.
    pub verdicts: BTreeMap<String, usize>,
    /// Attempts per landed rung.
    pub landed_rungs: BTreeMap<String, usize>,
    /// The results files the records came from.
    pub sources: Vec<String>,
    /// Each attempt's identity, in the order of `rewards`: the first 16 bytes
    /// of the SHA-256 of what makes the attempt itself (an episode record as a
    /// whole; a prediction's instance, model, submission and start), in hex.
    /// `certify --check` counts an attempt once however many certificates
    /// hold it (empty in certificates written before it was recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempt_ids: Vec<String>,
}

/// The identity recorded for an attempt (see [`Certificate::attempt_ids`]).
fn attempt_id(identity: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(identity.as_bytes())[..16])
}

impl Certificate {
    /// The certificate of `attempts` by `agent` on `task`.
    pub fn new(
        task: &Task,
        agent: &AgentKey,
        attempts: &[Attempt],
        harness_version: &str,
        date: &str,
    ) -> Certificate {
        let rewards: Vec<f64> = attempts
            .iter()
            .filter(|a| a.counts())
            .map(|a| a.reward)
            .collect();
        let hidden_pass_fractions: Vec<f64> = attempts
            .iter()
            .filter(|a| a.counts())
            .map(|a| a.hidden_pass_fraction)
            .collect();
        let attempt_ids: Vec<String> = attempts
            .iter()
            .filter(|a| a.counts())
            .map(|a| attempt_id(&a.identity))
            .collect();
        let solved = rewards.iter().filter(|r| **r == 1.0).count();
        let mut verdicts = BTreeMap::new();
        let mut landed_rungs = BTreeMap::new();
        let mut sources: Vec<String> = Vec::new();
        for a in attempts {
            *verdicts.entry(a.verdict.name().to_string()).or_insert(0) += 1;
            if let (true, Some(rung)) = (a.counts(), &a.landed_rung) {
                *landed_rungs.entry(rung.clone()).or_insert(0) += 1;
            }
            if !sources.contains(&a.file) {
                sources.push(a.file.clone());
            }
        }
        Certificate {
            schema_version: CERTIFICATE_SCHEMA_VERSION,
            task_id: task.row.task_id.clone(),
            instance_id: task.row.instance_id.clone(),
            tier: task.row.tier.clone(),
            task_digest: task.digest(),
            harness_version: harness_version.to_string(),
            agent: agent.agent.clone(),
            model: agent.model.clone(),
            budget: agent.budget,
            date: date.to_string(),
            attempts: rewards.len(),
            solved,
            solve_rate: (!rewards.is_empty()).then(|| solved as f64 / rewards.len() as f64),
            rewards,
            hidden_pass_fractions,
            harness_errors: attempts
                .iter()
                .filter(|a| a.verdict == Verdict::HarnessError)
                .count(),
            verdicts,
            landed_rungs,
            sources,
            attempt_ids,
        }
    }

    /// Whether `other` records the same measurement: the same task digest,
    /// agent and attempts read from the same sources. Only the date and the
    /// certifying harness may differ, so writing it again would count its
    /// attempts twice.
    pub fn same_measurement(&self, other: &Certificate) -> bool {
        if !self.attempt_ids.is_empty() && !other.attempt_ids.is_empty() {
            // The same attempts, however the results files were named.
            let sorted = |ids: &[String]| {
                let mut ids = ids.to_vec();
                ids.sort();
                ids
            };
            return self.task_digest == other.task_digest
                && self.agent_key() == other.agent_key()
                && sorted(&self.attempt_ids) == sorted(&other.attempt_ids);
        }
        let mut a = self.clone();
        a.date.clone_from(&other.date);
        a.harness_version.clone_from(&other.harness_version);
        &a == other
    }

    /// The agent the certificate is about.
    pub fn agent_key(&self) -> AgentKey {
        AgentKey {
            agent: self.agent.clone(),
            model: self.model.clone(),
            budget: self.budget,
        }
    }

    /// The certificate's file name for attempt `n` (1 is the plain name, then
    /// `-2`, `-3`, …): `<agent-slug>-<YYYY-MM-DD>.json`.
    pub fn file_name(&self, n: usize) -> String {
        let day: String = self
            .date
            .chars()
            .take(10)
            .map(|c| if c.is_ascii_digit() { c } else { '-' })
            .collect();
        let slug = self.agent_key().slug();
        if n <= 1 {
            format!("{slug}-{day}.json")
        } else {
            format!("{slug}-{day}-{n}.json")
        }
    }

    /// Checks that the numbers agree with each other; `Err` says what does not.
    pub fn check(&self) -> Result<(), String> {
        if self.attempts != self.rewards.len() {
            return Err(format!(
                "`attempts` is {} but `rewards` holds {}",
                self.attempts,
                self.rewards.len()
            ));
        }
        if let Some(r) = self
            .rewards
            .iter()
            .find(|r| !(r.is_finite() && (0.0..=1.0).contains(*r)))
        {
            return Err(format!("`rewards` holds {r}, not a number in [0, 1]"));
        }
        if !self.hidden_pass_fractions.is_empty() {
            if self.hidden_pass_fractions.len() != self.attempts {
                return Err(format!(
                    "`hidden_pass_fractions` holds {} but `attempts` is {}",
                    self.hidden_pass_fractions.len(),
                    self.attempts
                ));
            }
            if let Some(f) = self
                .hidden_pass_fractions
                .iter()
                .find(|f| !(f.is_finite() && (0.0..=1.0).contains(*f)))
            {
                return Err(format!(
                    "`hidden_pass_fractions` holds {f}, not a number in [0, 1]"
                ));
            }
        }
        if !self.attempt_ids.is_empty() && self.attempt_ids.len() != self.attempts {
            return Err(format!(
                "`attempt_ids` has {} entries for {} attempts",
                self.attempt_ids.len(),
                self.attempts
            ));
        }
        let solved = self.rewards.iter().filter(|r| **r == 1.0).count();
        if self.solved != solved {
            return Err(format!(
                "`solved` is {} but {solved} rewards are 1.0",
                self.solved
            ));
        }
        Ok(())
    }
}

/// Builds one certificate per (task, agent) group.
pub fn certificates(
    collected: &Collected,
    dataset: &Dataset,
    harness_version: &str,
    date: &str,
) -> Vec<Certificate> {
    collected
        .groups
        .iter()
        .filter(|(_, attempts)| !attempts.is_empty())
        .filter_map(|((task_id, agent), attempts)| {
            let task = dataset.tasks.iter().find(|t| &t.row.task_id == task_id)?;
            Some(Certificate::new(
                task,
                agent,
                attempts,
                harness_version,
                date,
            ))
        })
        .collect()
}

/// The current time as RFC 3339 UTC, to the second.
pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A certificate read back, with the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCertificate {
    /// The file, as warnings and tables name it.
    pub file: String,
    /// Its content.
    pub certificate: Certificate,
}

/// Parses a certificate file's bytes; `Err` is a warning naming `file`.
pub fn parse_certificate(bytes: &[u8], file: &str) -> Result<StoredCertificate, Warning> {
    let certificate: Certificate = serde_json::from_slice(bytes).map_err(|e| {
        Warning::new(
            file,
            Some(e.line()),
            format!("not a certificate ({e}); skipped"),
        )
    })?;
    certificate
        .check()
        .map_err(|why| Warning::new(file, None, format!("{why}; skipped")))?;
    Ok(StoredCertificate {
        file: file.to_string(),
        certificate,
    })
}

/// Where a dataset's certificates live: `<root>/<task_id>/certificates/` for
/// a folder of task folders, `<root>/certificates/` for one task folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateStore {
    root: PathBuf,
    one_task: bool,
}

impl CertificateStore {
    /// A folder of task folders named by task ID.
    pub fn task_folders(root: impl Into<PathBuf>) -> Self {
        CertificateStore {
            root: root.into(),
            one_task: false,
        }
    }

    /// One task's own folder.
    pub fn one_task(folder: impl Into<PathBuf>) -> Self {
        CertificateStore {
            root: folder.into(),
            one_task: true,
        }
    }

    /// The folder the store is rooted at.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The certificates folder of a task, relative to the root.
    fn folder(&self, task_id: &str) -> PathBuf {
        if self.one_task {
            PathBuf::from(CERTIFICATES_DIR)
        } else {
            Path::new(task_id).join(CERTIFICATES_DIR)
        }
    }

    /// Writes a certificate as a new file (never over an existing one, never
    /// through a link: a taken name gets the next numeric suffix); returns
    /// its path.
    pub fn write(&self, certificate: &Certificate) -> Result<PathBuf, CertifyError> {
        use std::io::Write;
        let root = pdl_fs::Dir::create(&self.root)?;
        let folder = self.folder(&certificate.task_id);
        let dir = root.open_dir(&folder, true)?;
        let mut bytes =
            serde_json::to_vec_pretty(certificate).map_err(|e| CertifyError::Write {
                path: self.root.join(&folder),
                message: e.to_string(),
            })?;
        bytes.push(b'\n');
        for n in 1..=MAX_SUFFIX {
            let name = certificate.file_name(n);
            match dir.open_file(Path::new(&name), pdl_fs::OpenMode::CreateNew) {
                Ok(mut file) => {
                    let path = self.root.join(&folder).join(&name);
                    file.write_all(&bytes)
                        .and_then(|()| file.sync_data())
                        .map_err(|e| CertifyError::Write {
                            path: path.clone(),
                            message: e.to_string(),
                        })?;
                    return Ok(path);
                }
                Err(e) if matches!(&e.kind, pdl_fs::FsErrorKind::Io(io) if io.kind() == io::ErrorKind::AlreadyExists) => {
                    continue
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(CertifyError::Write {
            path: self.root.join(&folder).join(certificate.file_name(1)),
            message: format!("this name and its suffixes up to -{MAX_SUFFIX} are taken"),
        })
    }

    /// Reads a task's certificates (every `*.json` regular file of its
    /// folder, in name order). A missing folder holds none; a file that is a
    /// link or cannot be parsed is a warning.
    pub fn read(
        &self,
        task_id: &str,
    ) -> Result<(Vec<StoredCertificate>, Vec<Warning>), CertifyError> {
        let root = pdl_fs::Dir::open(&self.root)?;
        let folder = self.folder(task_id);
        let shown = |name: &str| self.root.join(&folder).join(name).display().to_string();
        match root.entry(&folder) {
            Ok(None) => return Ok((Vec::new(), Vec::new())),
            Ok(Some(pdl_fs::EntryKind::Dir)) => {}
            Ok(Some(_)) => {
                return Ok((
                    Vec::new(),
                    vec![Warning::new(
                        &self.root.join(&folder).display().to_string(),
                        None,
                        "not a folder (a link or a file); no certificate read",
                    )],
                ))
            }
            Err(e) if e.is_not_found() => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(e.into()),
        }
        let dir = root.open_dir(&folder, false)?;
        let mut certificates = Vec::new();
        let mut warnings = Vec::new();
        for (name, kind) in dir.list()? {
            if !name.ends_with(".json") {
                continue;
            }
            if !matches!(kind, pdl_fs::EntryKind::File(_)) {
                warnings.push(Warning::new(
                    &shown(&name),
                    None,
                    "not a regular file (links are not followed); skipped",
                ));
                continue;
            }
            match dir.read(Path::new(&name), MAX_CERTIFICATE_BYTES) {
                Ok(Some(bytes)) => match parse_certificate(&bytes, &shown(&name)) {
                    Ok(c) => certificates.push(c),
                    Err(w) => warnings.push(w),
                },
                Ok(None) => {}
                Err(e) => warnings.push(Warning::new(
                    &shown(&name),
                    None,
                    format!("{}; skipped", e.kind),
                )),
            }
        }
        Ok((certificates, warnings))
    }
}

/// The minimum attempts each tier's gate needs; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gates {
    /// Minimum attempts (of fresh certificates, in all) per tier; a tier not
    /// named needs none.
    pub min_attempts: BTreeMap<String, usize>,
    /// The least mean hidden pass fraction over a gated tier's attempts. A
    /// T5 task nobody dents is more likely unfair than hard, so its gate
    /// needs the attempts to make real progress.
    pub min_mean_hidden_pass: BTreeMap<String, f64>,
    /// Tiers whose gates count only attempts metered against the task's own
    /// token budget (episodes through the gateway): the card defines them by
    /// what agents reach under that contract, which an unmetered attempt does
    /// not show.
    pub metered_tiers: Vec<String>,
}

impl Default for Gates {
    /// After the card: T4 needs 2 attempts (one below 1.0 and one at 1.0), T5
    /// needs 3, all below 1.0, passing on average at least 30% of the hidden
    /// tests; both count only attempts metered against the task's budget.
    fn default() -> Self {
        Gates {
            min_attempts: BTreeMap::from([("T4".to_string(), 2), ("T5".to_string(), 3)]),
            min_mean_hidden_pass: BTreeMap::from([("T5".to_string(), 0.3)]),
            metered_tiers: vec!["T4".to_string(), "T5".to_string()],
        }
    }
}

/// A gates file's layout.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatesFile {
    #[serde(default)]
    min_attempts: BTreeMap<String, usize>,
    #[serde(default)]
    min_mean_hidden_pass: BTreeMap<String, f64>,
    #[serde(default)]
    metered_tiers: Option<Vec<String>>,
}

/// The tiers a gates file may name.
const TIERS: [&str; 5] = ["T1", "T2", "T3", "T4", "T5"];

impl Gates {
    /// Parses a gates file (YAML, `min_attempts: {T5: 5}`): the tiers it names
    /// override the defaults.
    pub fn parse(text: &str, file: &str) -> Result<Gates, CertifyError> {
        let err = |message: String| CertifyError::Gates {
            file: file.to_string(),
            message,
        };
        let parsed: GatesFile = serde_yaml_ng::from_str(text).map_err(|e| {
            err(match e.location() {
                Some(l) => format!("line {}: {e}", l.line()),
                None => e.to_string(),
            })
        })?;
        let mut gates = Gates::default();
        for (tier, min) in parsed.min_attempts {
            if !TIERS.contains(&tier.as_str()) {
                return Err(err(format!("`min_attempts.{tier}`: not a tier (T1 … T5)")));
            }
            gates.min_attempts.insert(tier, min);
        }
        for (tier, min) in parsed.min_mean_hidden_pass {
            if !TIERS.contains(&tier.as_str()) {
                return Err(err(format!(
                    "`min_mean_hidden_pass.{tier}`: not a tier (T1 … T5)"
                )));
            }
            if !(min.is_finite() && (0.0..=1.0).contains(&min)) {
                return Err(err(format!(
                    "`min_mean_hidden_pass.{tier}`: {min} is not a fraction in [0, 1]"
                )));
            }
            gates.min_mean_hidden_pass.insert(tier, min);
        }
        if let Some(tiers) = parsed.metered_tiers {
            if let Some(tier) = tiers.iter().find(|t| !TIERS.contains(&t.as_str())) {
                return Err(err(format!(
                    "`metered_tiers`: {tier} is not a tier (T1 … T5)"
                )));
            }
            gates.metered_tiers = tiers;
        }
        Ok(gates)
    }

    /// Reads and parses a gates file.
    pub fn load(path: &Path) -> Result<Gates, CertifyError> {
        use std::io::Read;
        let read_err = |source| CertifyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_GATES_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_GATES_BYTES {
            return Err(read_err(io::Error::other(format!(
                "larger than {MAX_GATES_BYTES} bytes"
            ))));
        }
        let text = String::from_utf8(bytes).map_err(|_| CertifyError::Gates {
            file: path.display().to_string(),
            message: "not UTF-8 text".into(),
        })?;
        Gates::parse(&text, &path.display().to_string())
    }

    /// The minimum attempts of a tier.
    pub fn min_attempts(&self, tier: &str) -> usize {
        self.min_attempts.get(tier).copied().unwrap_or(0)
    }

    /// Whether a tier's gate counts only attempts metered against the task's budget.
    pub fn needs_metering(&self, tier: &str) -> bool {
        self.metered_tiers.iter().any(|t| t == tier)
    }

    /// The least mean hidden pass fraction of a tier (0 when none is set).
    pub fn min_mean_hidden_pass(&self, tier: &str) -> f64 {
        self.min_mean_hidden_pass.get(tier).copied().unwrap_or(0.0)
    }
}

/// What a task's gate says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum GateStatus {
    /// A tier without a gate (T1–T3): its solve rate is reported.
    NoGate,
    /// The gate holds.
    Holds,
    /// The certificates contradict the tier.
    Fails(String),
    /// Too few fresh certificates or attempts to decide.
    Insufficient(String),
}

/// One task's certification under the gates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskCertification {
    /// The task.
    pub task_id: String,
    /// Its current version.
    pub instance_id: String,
    /// Its tier.
    pub tier: String,
    /// Fresh certificates (counted).
    pub certificates: usize,
    /// Stale certificates (another task digest; not counted), by file.
    pub stale: Vec<String>,
    /// Certificates not counted because the tier's gate needs attempts
    /// metered against the task's token budget and theirs were not, by file.
    pub unmetered: Vec<String>,
    /// The agents of the fresh certificates (`AgentKey::label`).
    pub agents: Vec<String>,
    /// Attempts of the fresh certificates.
    pub attempts: usize,
    /// Of them, attempts that scored 1.0.
    pub solved: usize,
    /// `solved / attempts`, null without attempts.
    pub solve_rate: Option<f64>,
    /// The mean hidden pass fraction of the attempts; null without attempts
    /// or when a certificate does not record them.
    pub mean_hidden_pass: Option<f64>,
    /// Attempts per landed rung.
    pub landed_rungs: BTreeMap<String, usize>,
    /// Attempts the tier's gate needs.
    pub min_attempts: usize,
    /// The gate's verdict.
    pub gate: GateStatus,
    /// True when the tier is supported (its gate holds, or it has none).
    pub supported: bool,
}

impl TaskCertification {
    /// A short status for task lists: `T5 holds (3)`, `T5 fails (3)`,
    /// `T5 needs 3 (1)`, `T2 1/2 solved`, `stale`, or `-` (the number in
    /// brackets counts attempts).
    pub fn short_status(&self) -> String {
        if self.certificates == 0 {
            return if !self.unmetered.is_empty() {
                format!("{} unmetered", self.tier)
            } else if self.stale.is_empty() {
                "-".into()
            } else {
                "stale".into()
            };
        }
        match &self.gate {
            GateStatus::NoGate => format!("{} {}/{} solved", self.tier, self.solved, self.attempts),
            GateStatus::Holds => format!("{} holds ({})", self.tier, self.attempts),
            GateStatus::Fails(_) => format!("{} fails ({})", self.tier, self.attempts),
            GateStatus::Insufficient(_) => {
                format!(
                    "{} needs {} ({})",
                    self.tier, self.min_attempts, self.attempts
                )
            }
        }
    }

    /// The gate status for a table: `holds`, `no gate`, or the reason.
    pub fn gate_text(&self) -> String {
        match &self.gate {
            GateStatus::NoGate => "no gate".into(),
            GateStatus::Holds => "holds".into(),
            GateStatus::Fails(why) => format!("fails: {why}"),
            GateStatus::Insufficient(why) => format!("not supported: {why}"),
        }
    }
}

/// Applies the gates to a task's certificates. Certificates of another task
/// are warnings; those of another task digest are stale.
pub fn certify_task(
    task: &Task,
    stored: &[StoredCertificate],
    gates: &Gates,
) -> (TaskCertification, Vec<Warning>) {
    let digest = task.digest();
    let mut warnings = Vec::new();
    let mut stale = Vec::new();
    let mut unmetered = Vec::new();
    let mut fresh = Vec::new();
    let needs_metering = gates.needs_metering(&task.row.tier);
    for s in stored {
        let c = &s.certificate;
        if c.task_id != task.row.task_id {
            warnings.push(Warning::new(
                &s.file,
                None,
                format!(
                    "certifies task `{}`, not `{}`; skipped",
                    c.task_id, task.row.task_id
                ),
            ));
        } else if c.task_digest != digest {
            stale.push(s.file.clone());
        } else if needs_metering && c.budget != Some(task.row.token_budget) {
            unmetered.push(s.file.clone());
        } else {
            fresh.push((s.file.as_str(), c));
        }
    }
    // An attempt is counted once however many certificates hold it (a copied
    // certificate, or the same results certified under another path).
    let mut seen_ids: HashSet<&str> = HashSet::new();
    let mut counted = Vec::new();
    let mut attempts = 0;
    let mut solved = 0;
    let mut fractions: Option<Vec<f64>> = Some(Vec::new());
    let mut landed_rungs = BTreeMap::new();
    let mut agents = Vec::new();
    for (file, c) in &fresh {
        let has_fractions = c.hidden_pass_fractions.len() == c.attempts;
        let new: Vec<usize> = if c.attempt_ids.len() == c.attempts && c.attempts > 0 {
            (0..c.attempts)
                .filter(|&i| seen_ids.insert(c.attempt_ids[i].as_str()))
                .collect()
        } else {
            (0..c.attempts).collect()
        };
        if new.is_empty() && c.attempts > 0 {
            warnings.push(Warning::new(
                file,
                None,
                "repeats attempts other certificates hold; not counted again".to_string(),
            ));
            continue;
        }
        if new.len() < c.attempts {
            warnings.push(Warning::new(
                file,
                None,
                format!(
                    "{} of its {} attempts are in other certificates; counted once, and its landed rungs are not counted",
                    c.attempts - new.len(),
                    c.attempts
                ),
            ));
        } else {
            for (rung, n) in &c.landed_rungs {
                *landed_rungs.entry(rung.clone()).or_insert(0) += n;
            }
        }
        for &i in &new {
            attempts += 1;
            if c.rewards.get(i) == Some(&1.0) {
                solved += 1;
            }
            match (&mut fractions, has_fractions) {
                (Some(list), true) => list.push(c.hidden_pass_fractions[i]),
                (f, _) => *f = None,
            }
        }
        let label = c.agent_key().label();
        if !agents.contains(&label) {
            agents.push(label);
        }
        counted.push(*c);
    }
    let mean_hidden_pass = fractions
        .filter(|f| !f.is_empty())
        .map(|f| f.iter().sum::<f64>() / f.len() as f64);
    let tier = task.row.tier.as_str();
    let min_attempts = gates.min_attempts(tier);
    let min_mean = gates.min_mean_hidden_pass(tier);
    let gated = matches!(tier, "T4" | "T5");
    let gate = if (gated && fresh.is_empty()) || attempts < min_attempts {
        GateStatus::Insufficient(if fresh.is_empty() && !stale.is_empty() {
            format!("every certificate is stale ({})", stale.len())
        } else if fresh.is_empty() && !unmetered.is_empty() {
            format!(
                "no certificate metered against the task's budget of {} tokens ({} unmetered)",
                task.row.token_budget,
                unmetered.len()
            )
        } else if fresh.is_empty() {
            "no certificate".to_string()
        } else {
            format!("{attempts} attempts, the gate needs {min_attempts}")
        })
    } else if min_mean > 0.0 && mean_hidden_pass.is_none() {
        GateStatus::Insufficient("a certificate does not record hidden pass fractions".to_string())
    } else if let Some(mean) = mean_hidden_pass.filter(|m| *m < min_mean) {
        GateStatus::Fails(format!(
            "the attempts pass {mean:.3} of the hidden tests on average, below {min_mean}: \
             a task nobody dents is more likely unfair than hard"
        ))
    } else {
        match tier {
            "T5" if solved == 0 => GateStatus::Holds,
            "T5" => GateStatus::Fails(format!("{solved} of {attempts} attempts scored 1.0")),
            "T4" if solved > 0 && solved < attempts => GateStatus::Holds,
            "T4" if solved == 0 => GateStatus::Fails("no attempt scored 1.0".to_string()),
            "T4" => GateStatus::Fails("every attempt scored 1.0".to_string()),
            _ => GateStatus::NoGate,
        }
    };
    let supported = matches!(gate, GateStatus::NoGate | GateStatus::Holds);
    (
        TaskCertification {
            task_id: task.row.task_id.clone(),
            instance_id: task.row.instance_id.clone(),
            tier: tier.to_string(),
            certificates: counted.len(),
            stale,
            unmetered,
            agents,
            attempts,
            solved,
            solve_rate: (attempts > 0).then(|| solved as f64 / attempts as f64),
            mean_hidden_pass,
            landed_rungs,
            min_attempts,
            gate,
            supported,
        },
        warnings,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{episode, record};
    use pdl_task::row::{InstanceRow, RepoFile};
    use pdl_task::TaskExtras;

    fn task(id: &str, tier: &str) -> Task {
        Task {
            row: InstanceRow {
                instance_id: format!("{id}-v1"),
                task_id: id.into(),
                task_version: 1,
                tier: tier.into(),
                domain: "d".into(),
                problem_statement: "p".into(),
                patch: String::new(),
                test_patch: String::new(),
                fail_to_pass: vec![],
                pass_to_pass: vec![],
                files: vec![RepoFile {
                    path: "src/a.py".into(),
                    content: "x\n".into(),
                }],
                patch_policy_allowed: vec!["src/**".into()],
                patch_policy_forbidden: vec![],
                token_budget: 1000,
                hidden_test_count: 0,
                public_test_count: 0,
                graded_ladder_rungs: vec![],
                reward_formula: "1*build_health".into(),
            },
            extras: TaskExtras::default(),
        }
    }

    fn dataset() -> Dataset {
        Dataset::new("test", vec![task("a", "T1"), task("b", "T5")], vec![])
    }

    /// A prediction record of `model` on task `id`, graded against the
    /// dataset's task.
    fn prediction(ds: &Dataset, id: &str, model: &str, reward: f64, n: u32) -> ResultRecord {
        let instance = format!("{id}-v1");
        let mut r = record(&instance, "prediction", reward);
        r.model_name_or_path = Some(model.into());
        r.name = model.into();
        r.provenance.task_digest = ds.get(&instance).unwrap().digest();
        r.provenance.submission_digest = format!("sha256:{n}");
        r.provenance.started_at = format!("2026-01-01T00:00:{n:02}Z");
        r
    }

    fn jsonl(records: &[ResultRecord]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            out.extend(serde_json::to_vec(r).unwrap());
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn predictions_group_by_task_and_model_without_budget() {
        let ds = dataset();
        let mut harness = prediction(&ds, "a", "m1", 0.0, 3);
        harness.verdict = Verdict::HarnessError;
        let mut landed = prediction(&ds, "a", "m1", 0.5, 4);
        landed.landed_rung = Some("cheat.diff".into());
        let records = vec![
            prediction(&ds, "a", "m1", 1.0, 1),
            prediction(&ds, "a", "m2", 0.2, 2),
            harness,
            landed,
            prediction(&ds, "b", "m1", 0.2, 5),
        ];
        let mut c = Collected::default();
        c.add_bytes(&jsonl(&records), "g.jsonl", false, &ds);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.groups.len(), 3);
        let m1 = AgentKey {
            agent: "m1".into(),
            model: "m1".into(),
            budget: None,
        };
        let attempts = &c.groups[&("a".to_string(), m1.clone())];
        assert_eq!(attempts.len(), 3);
        let cert = Certificate::new(
            ds.get("a-v1").unwrap(),
            &m1,
            attempts,
            "pdl-swe 9",
            "2026-02-03T04:05:06Z",
        );
        assert_eq!(cert.rewards, vec![1.0, 0.5]);
        assert_eq!(cert.attempts, 2);
        assert_eq!(cert.solved, 1);
        assert_eq!(cert.solve_rate, Some(0.5));
        assert_eq!(cert.harness_errors, 1);
        assert_eq!(cert.verdicts["harness_error"], 1);
        assert_eq!(cert.verdicts["graded"], 2);
        assert_eq!(cert.landed_rungs["cheat.diff"], 1);
        assert_eq!(cert.budget, None);
        assert_eq!(cert.sources, vec!["g.jsonl".to_string()]);
        assert_eq!(cert.file_name(1), "m1-2026-02-03.json");
        assert_eq!(cert.file_name(2), "m1-2026-02-03-2.json");
        assert!(cert.check().is_ok());
        assert_eq!(certificates(&c, &ds, "v", "d").len(), 3);
    }

    #[test]
    fn episodes_group_by_agent_model_and_budget_and_reruns_replace() {
        let ds = dataset();
        let digest = ds.get("b-v1").unwrap().digest();
        let mut first = episode("b-v1", "builtin", 0, 0.0);
        first.verdict = Verdict::HarnessError;
        let mut rerun = episode("b-v1", "builtin", 0, 0.4);
        rerun.provenance.started_at = "2026-01-01T01:00:00Z".into();
        crate::testutil::set_episode_field(
            &mut rerun,
            "rerun_of",
            serde_json::json!({"verdict": "harness_error", "detail": "x",
                               "started_at": first.provenance.started_at.clone()}),
        );
        let mut other = episode("b-v1", "builtin", 1, 0.6);
        let mut cheaper = episode("b-v1", "builtin", 2, 0.2);
        set_budget(&mut cheaper, 100);
        let gold = record("b-v1", "gold", 1.0);
        for r in [&mut first, &mut rerun, &mut other, &mut cheaper] {
            r.provenance.task_digest = digest.clone();
        }
        let mut c = Collected::default();
        c.add_bytes(
            &jsonl(&[first, rerun, other, cheaper, gold]),
            "run/results.jsonl",
            true,
            &ds,
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.skipped, 1);
        let key = AgentKey {
            agent: "builtin".into(),
            model: "gpt-x".into(),
            budget: Some(5000),
        };
        let rewards: Vec<f64> = c.groups[&("b".to_string(), key.clone())]
            .iter()
            .map(|a| a.reward)
            .collect();
        assert_eq!(rewards, vec![0.4, 0.6]);
        assert_eq!(c.groups.len(), 2);
        assert_eq!(key.slug(), "builtin-gpt-x");
        assert_eq!(key.label(), "builtin/gpt-x@5000");
    }

    #[test]
    fn campaigns_of_one_configuration_are_separate_attempts_and_exact_repeats_count_once() {
        let ds = dataset();
        let digest = ds.get("b-v1").unwrap().digest();
        // Three campaigns with the same task, agent, model and sample: the
        // same episode key, started at different times.
        let attempts: Vec<ResultRecord> = [0.5, 1.0, 0.7]
            .iter()
            .enumerate()
            .map(|(i, reward)| {
                let mut r = episode("b-v1", "builtin", 0, *reward);
                r.provenance.task_digest = digest.clone();
                // Two of them start in the same second.
                r.provenance.started_at = format!("2026-01-0{}T00:00:00Z", i.min(1) + 1);
                r
            })
            .collect();
        let mut c = Collected::default();
        c.add_bytes(&jsonl(&attempts), "batch/results.jsonl", false, &ds);
        // The same file read again: every record repeats exactly.
        c.add_bytes(&jsonl(&attempts), "copy/results.jsonl", false, &ds);
        let key = AgentKey {
            agent: "builtin".into(),
            model: "gpt-x".into(),
            budget: Some(5000),
        };
        let rewards: Vec<f64> = c.groups[&("b".to_string(), key)]
            .iter()
            .map(|a| a.reward)
            .collect();
        assert_eq!(rewards, vec![0.5, 1.0, 0.7]);
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
        assert!(
            c.warnings[0].message.contains("counted once"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn a_rerun_replaces_only_the_outcome_it_reran_in_its_own_file() {
        let ds = dataset();
        let digest = ds.get("b-v1").unwrap().digest();
        let mut graded = episode("b-v1", "builtin", 0, 0.6);
        graded.provenance.task_digest = digest.clone();
        graded.provenance.started_at = "2026-01-01T00:00:00Z".into();
        // A re-run record of the same key from another campaign, of an outcome
        // that started at another time: it replaces nothing.
        let mut rerun = episode("b-v1", "builtin", 0, 1.0);
        rerun.provenance.task_digest = digest.clone();
        rerun.provenance.started_at = "2026-01-02T00:00:00Z".into();
        crate::testutil::set_episode_field(
            &mut rerun,
            "rerun_of",
            serde_json::json!({"verdict": "harness_error", "started_at": "2026-01-01T12:00:00Z"}),
        );
        let key = AgentKey {
            agent: "builtin".into(),
            model: "gpt-x".into(),
            budget: Some(5000),
        };
        for files in [
            ("a/results.jsonl", "a/results.jsonl"),
            ("a/results.jsonl", "b/results.jsonl"),
        ] {
            let mut c = Collected::default();
            c.add_bytes(&jsonl(std::slice::from_ref(&graded)), files.0, false, &ds);
            c.add_bytes(&jsonl(std::slice::from_ref(&rerun)), files.1, false, &ds);
            let rewards: Vec<f64> = c.groups[&("b".to_string(), key.clone())]
                .iter()
                .map(|a| a.reward)
                .collect();
            assert_eq!(rewards, vec![0.6, 1.0], "{files:?}");
            assert!(c.warnings[0]
                .message
                .contains("re-run of an outcome this file does not hold"));
        }
        // The same graded record in another file is not replaced either, even
        // when the start matches.
        crate::testutil::set_episode_field(
            &mut rerun,
            "rerun_of",
            serde_json::json!({"verdict": "harness_error", "started_at": "2026-01-01T00:00:00Z"}),
        );
        let mut c = Collected::default();
        c.add_bytes(
            &jsonl(std::slice::from_ref(&graded)),
            "a/results.jsonl",
            false,
            &ds,
        );
        c.add_bytes(
            &jsonl(std::slice::from_ref(&rerun)),
            "b/results.jsonl",
            false,
            &ds,
        );
        assert_eq!(c.groups[&("b".to_string(), key.clone())].len(), 2);
        let mut c = Collected::default();
        c.add_bytes(&jsonl(&[graded, rerun]), "a/results.jsonl", false, &ds);
        assert_eq!(c.groups[&("b".to_string(), key)].len(), 1);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn an_attempt_held_by_several_certificates_is_counted_once() {
        let t = task("b", "T5");
        let one = cert(&t, "x", &[0.5, 0.7, 0.9]);
        assert_eq!(one.certificate.attempt_ids.len(), 3);
        // A copy of the certificate, and one of the same attempts read from a
        // path spelled differently.
        let mut copy = one.clone();
        copy.file = "x-copy.json".into();
        let mut respelled = one.clone();
        respelled.file = "x-2.json".into();
        respelled.certificate.sources = vec!["./f".into()];
        assert!(respelled.certificate.same_measurement(&one.certificate));
        let (c, warnings) = certify_task(&t, &[one.clone(), copy, respelled], &Gates::default());
        assert_eq!((c.attempts, c.certificates), (3, 1));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].message.contains("not counted again"),
            "{warnings:?}"
        );
        // A certificate sharing part of its attempts counts its new ones only.
        let mut partial = cert(&t, "y", &[0.5, 0.6]);
        partial.certificate.attempt_ids[0] = one.certificate.attempt_ids[0].clone();
        let (c, warnings) = certify_task(&t, &[one, partial], &Gates::default());
        assert_eq!(c.attempts, 4);
        assert!(warnings[0]
            .message
            .contains("1 of its 2 attempts are in other certificates"));
        assert!(c.mean_hidden_pass.is_some());
    }

    fn set_budget(r: &mut ResultRecord, budget: i64) {
        crate::testutil::set_episode_field(r, "token_budget", serde_json::json!(budget));
    }

    #[test]
    fn unknown_tasks_bad_lines_and_other_digests_are_warnings_with_lines() {
        let ds = dataset();
        let mut stale = prediction(&ds, "a", "m", 1.0, 1);
        stale.provenance.task_digest = "sha256:old".into();
        let unknown = prediction(&ds, "a", "m", 1.0, 2);
        let mut unknown = serde_json::to_value(&unknown).unwrap();
        unknown["instance_id"] = "zzz-v1".into();
        let mut version = serde_json::to_value(prediction(&ds, "a", "m", 1.0, 3)).unwrap();
        version["instance_id"] = "a-v7".into();
        let good = prediction(&ds, "a", "m", 0.3, 4);
        let mut text = jsonl(&[stale]);
        text.extend(format!("{unknown}\n{{not json\n\n{version}\n").bytes());
        text.extend(jsonl(&[good.clone(), good]));
        text.extend(b"\xff\xfe\n");
        let mut c = Collected::default();
        c.add_bytes(&text, "p.jsonl", false, &ds);
        let lines: Vec<Option<usize>> = c.warnings.iter().map(|w| w.line).collect();
        assert_eq!(
            lines,
            vec![Some(1), Some(2), Some(3), Some(5), Some(7), Some(8)]
        );
        assert!(c.warnings.iter().all(|w| w.file == "p.jsonl"));
        assert!(
            c.warnings[0].message.contains("task digest"),
            "{}",
            c.warnings[0]
        );
        assert!(c.warnings[1].message.contains("unknown task `zzz-v1`"));
        assert!(
            c.warnings[3].message.contains("another version"),
            "{}",
            c.warnings[3]
        );
        assert!(
            c.warnings[4].message.contains("p.jsonl:6"),
            "{}",
            c.warnings[4]
        );
        let all: usize = c.groups.values().map(Vec::len).sum();
        assert_eq!(all, 1);
    }

    #[test]
    fn a_run_folder_gives_its_episodes_and_never_follows_a_link() {
        let ds = dataset();
        let digest = ds.get("b-v1").unwrap().digest();
        let mut ep = episode("b-v1", "builtin", 0, 0.4);
        ep.provenance.task_digest = digest;
        let pred = prediction(&ds, "b", "m", 1.0, 1);
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join(RESULTS_FILE), jsonl(&[ep, pred.clone()])).unwrap();
        let file = dir.path().join("graded.jsonl");
        std::fs::write(&file, jsonl(&[pred])).unwrap();
        let sources = [ResultsSource::of_path(&run), ResultsSource::of_path(&file)];
        assert!(matches!(sources[0], ResultsSource::RunFolder(_)));
        let c = Collected::read(&sources, &ds).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.skipped, 1);
        let agents: Vec<String> = c.groups.keys().map(|(_, k)| k.label()).collect();
        assert_eq!(
            agents,
            vec!["builtin/gpt-x@5000".to_string(), "m".to_string()]
        );
        let certs = certificates(&c, &ds, "v", "2026-01-01T00:00:00Z");
        assert_eq!(certs[0].budget, Some(5000));
        assert_eq!(certs[0].sources, vec![sources[0].file_label()]);
        // A linked results.jsonl is an error naming it, never read.
        let linked = dir.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(run.join(RESULTS_FILE), linked.join(RESULTS_FILE)).unwrap();
        let e = Collected::read(&[ResultsSource::of_path(&linked)], &ds).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = Collected::read(
            &[ResultsSource::of_path(&dir.path().join("none.jsonl"))],
            &ds,
        )
        .unwrap_err();
        assert!(e.to_string().contains("none.jsonl"), "{e}");
    }

    #[test]
    fn slugs_are_file_names() {
        let key = |a: &str, m: &str| AgentKey {
            agent: a.into(),
            model: m.into(),
            budget: None,
        };
        assert_eq!(key("org/Model 7B", "org/Model 7B").slug(), "org-model-7b");
        assert_eq!(key("../..", "../..").slug(), "agent");
        assert_eq!(key("é", "é").slug(), "agent");
        assert!(key(&"x".repeat(300), "y").slug().len() <= 64);
    }

    fn cert(t: &Task, agent: &str, rewards: &[f64]) -> StoredCertificate {
        let attempts: Vec<Attempt> = rewards
            .iter()
            .enumerate()
            .map(|(i, r)| Attempt {
                reward: *r,
                // As if every public test passed and the build was healthy.
                hidden_pass_fraction: ((*r - 0.2) / 0.8).clamp(0.0, 1.0),
                verdict: Verdict::Graded,
                landed_rung: (*r == 0.5).then(|| "cheat.diff".to_string()),
                origin: "f:1".into(),
                file: "f".into(),
                identity: format!("{agent}/{i}/{}", t.row.task_id),
                started_at: String::new(),
            })
            .collect();
        let key = AgentKey {
            agent: agent.into(),
            model: agent.into(),
            budget: Some(t.row.token_budget),
        };
        StoredCertificate {
            file: format!("{agent}.json"),
            certificate: Certificate::new(t, &key, &attempts, "v", "2026-01-01T00:00:00Z"),
        }
    }

    #[test]
    fn t5_holds_only_when_every_attempt_is_below_one_and_there_are_enough() {
        let t = task("b", "T5");
        let gates = Gates::default();
        let (c, _) = certify_task(
            &t,
            &[cert(&t, "x", &[0.5, 0.2]), cert(&t, "y", &[0.9])],
            &gates,
        );
        assert_eq!(c.gate, GateStatus::Holds);
        assert!(c.supported);
        assert_eq!(c.attempts, 3);
        assert_eq!(c.landed_rungs["cheat.diff"], 1);
        assert_eq!(c.short_status(), "T5 holds (3)");
        let (c, _) = certify_task(&t, &[cert(&t, "x", &[0.5, 1.0, 0.2])], &gates);
        assert!(matches!(c.gate, GateStatus::Fails(_)));
        assert!(!c.supported);
        assert_eq!(c.short_status(), "T5 fails (3)");
        let (c, _) = certify_task(&t, &[cert(&t, "x", &[0.5])], &gates);
        assert!(matches!(c.gate, GateStatus::Insufficient(_)));
        assert_eq!(c.short_status(), "T5 needs 3 (1)");
        let (c, _) = certify_task(&t, &[], &gates);
        assert_eq!(c.gate, GateStatus::Insufficient("no certificate".into()));
        assert_eq!(c.short_status(), "-");
    }

    #[test]
    fn t4_needs_a_solve_and_a_miss_and_low_tiers_are_not_gated() {
        let t4 = task("c", "T4");
        let gates = Gates::default();
        let (c, _) = certify_task(
            &t4,
            &[cert(&t4, "x", &[1.0]), cert(&t4, "y", &[0.4])],
            &gates,
        );
        assert_eq!(c.gate, GateStatus::Holds);
        let (c, _) = certify_task(&t4, &[cert(&t4, "x", &[1.0, 1.0])], &gates);
        assert_eq!(c.gate, GateStatus::Fails("every attempt scored 1.0".into()));
        let (c, _) = certify_task(&t4, &[cert(&t4, "x", &[0.2, 0.4])], &gates);
        assert_eq!(c.gate, GateStatus::Fails("no attempt scored 1.0".into()));

        let t1 = task("a", "T1");
        let (c, _) = certify_task(&t1, &[], &gates);
        assert_eq!(c.gate, GateStatus::NoGate);
        assert!(c.supported);
        let (c, _) = certify_task(&t1, &[cert(&t1, "x", &[1.0, 0.2])], &gates);
        assert_eq!(c.solve_rate, Some(0.5));
        assert_eq!(c.short_status(), "T1 1/2 solved");
        // A gates file can ask T1 for attempts too.
        let strict = Gates::parse("min_attempts:\n  T1: 3\n", "g.yaml").unwrap();
        let (c, _) = certify_task(&t1, &[cert(&t1, "x", &[1.0, 0.2])], &strict);
        assert!(!c.supported);
    }

    #[test]
    fn a_certificate_of_another_digest_is_stale_and_not_counted() {
        let t = task("b", "T5");
        let old = cert(&t, "x", &[0.5, 0.5, 0.5]);
        let mut changed = t.clone();
        changed.row.problem_statement.push_str(" (clarified)");
        let (c, w) = certify_task(&changed, std::slice::from_ref(&old), &Gates::default());
        assert!(w.is_empty());
        assert_eq!(c.stale, vec!["x.json".to_string()]);
        assert_eq!(c.certificates, 0);
        assert_eq!(c.attempts, 0);
        assert_eq!(c.short_status(), "stale");
        assert!(!c.supported);
        assert!(c.gate_text().contains("stale"), "{}", c.gate_text());
        // Still fresh for the task it was made for.
        let (c, _) = certify_task(&t, &[old], &Gates::default());
        assert_eq!(c.gate, GateStatus::Holds);
    }

    #[test]
    fn gated_tiers_count_only_attempts_metered_against_the_tasks_budget() {
        let t = task("b", "T5");
        let gates = Gates::default();
        let with_budget = |agent: &str, budget: Option<i64>| {
            let mut s = cert(&t, agent, &[0.5, 0.6, 0.7]);
            s.certificate.budget = budget;
            s.file = format!("{agent}.json");
            s
        };
        let budget = t.row.token_budget;
        // Unmetered attempts (a predictions file) and attempts metered against
        // another budget certify nothing in T5, however they scored.
        let (c, _) = certify_task(
            &t,
            &[
                with_budget("free", None),
                with_budget("big", Some(budget * 10)),
            ],
            &gates,
        );
        assert_eq!(c.certificates, 0);
        assert_eq!(c.unmetered, vec!["free.json", "big.json"]);
        assert!(!c.supported);
        assert!(
            c.gate_text()
                .contains("no certificate metered against the task's budget"),
            "{}",
            c.gate_text()
        );
        assert_eq!(c.short_status(), "T5 unmetered");
        let (c, _) = certify_task(
            &t,
            &[
                with_budget("free", None),
                with_budget("metered", Some(budget)),
            ],
            &gates,
        );
        assert_eq!(c.certificates, 1);
        assert_eq!(c.unmetered, vec!["free.json"]);
        assert_eq!(c.gate, GateStatus::Holds);
        // A gates file can drop the requirement; T1–T3 never have it by default.
        let relaxed = Gates::parse("metered_tiers: []\n", "g.yaml").unwrap();
        let (c, _) = certify_task(&t, &[with_budget("free", None)], &relaxed);
        assert_eq!((c.certificates, c.gate.clone()), (1, GateStatus::Holds));
        let low = task("c", "T3");
        let mut free = cert(&low, "free", &[1.0]);
        free.certificate.budget = None;
        let (c, _) = certify_task(&low, &[free], &gates);
        assert_eq!((c.certificates, c.gate.clone()), (1, GateStatus::NoGate));
        let e = Gates::parse("metered_tiers: [T6]\n", "g.yaml").unwrap_err();
        assert!(e.to_string().contains("`metered_tiers`: T6"), "{e}");
    }

    #[test]
    fn t5_needs_attempts_that_dent_the_task() {
        let t = task("b", "T5");
        let gates = Gates::default();
        // Hidden pass fractions 0, 0 and 0.125: nobody dents it.
        let (c, _) = certify_task(&t, &[cert(&t, "x", &[0.2, 0.2, 0.3])], &gates);
        let GateStatus::Fails(why) = &c.gate else {
            panic!("{:?}", c.gate)
        };
        assert!(why.contains("0.042") && why.contains("0.3"), "{why}");
        assert!((c.mean_hidden_pass.unwrap() - 0.125 / 3.0).abs() < 1e-12);
        // A gates file can lower the bar.
        let lenient = Gates::parse("min_mean_hidden_pass:\n  T5: 0\n", "g.yaml").unwrap();
        let (c, _) = certify_task(&t, &[cert(&t, "x", &[0.2, 0.2, 0.3])], &lenient);
        assert_eq!(c.gate, GateStatus::Holds);
        // A certificate that does not record the fractions cannot decide it.
        let mut old = cert(&t, "x", &[0.5, 0.5, 0.5]);
        old.certificate.hidden_pass_fractions.clear();
        assert_eq!(old.certificate.check(), Ok(()));
        let (c, _) = certify_task(&t, &[old], &gates);
        assert!(
            matches!(c.gate, GateStatus::Insufficient(_)),
            "{:?}",
            c.gate
        );
        assert_eq!(c.mean_hidden_pass, None);
        // Nor does the bar apply to T4 by default.
        let t4 = task("c", "T4");
        let (c, _) = certify_task(&t4, &[cert(&t4, "x", &[1.0, 0.2, 0.2, 0.2])], &gates);
        assert_eq!(c.gate, GateStatus::Holds);
    }

    #[test]
    fn a_certificate_with_fractions_that_disagree_is_refused() {
        let t = task("b", "T5");
        let mut c = cert(&t, "x", &[0.5, 0.5]).certificate;
        c.hidden_pass_fractions.pop();
        assert!(c.check().unwrap_err().contains("hidden_pass_fractions"));
        c.hidden_pass_fractions = vec![0.5, 1.5];
        assert!(c.check().unwrap_err().contains("1.5"));
    }

    #[test]
    fn gates_files_override_minimums_and_name_what_is_wrong() {
        let g = Gates::parse("min_attempts:\n  T5: 5\n", "g.yaml").unwrap();
        assert_eq!(g.min_attempts("T5"), 5);
        assert_eq!(g.min_attempts("T4"), 2);
        assert_eq!(g.min_attempts("T3"), 0);
        let e = Gates::parse("min_attempts:\n  T9: 5\n", "g.yaml").unwrap_err();
        assert!(e.to_string().contains("g.yaml: `min_attempts.T9`"), "{e}");
        let e = Gates::parse("min_attempts:\n  T5: -1\n", "g.yaml").unwrap_err();
        assert!(e.to_string().starts_with("g.yaml: line 2"), "{e}");
        let e = Gates::parse("minimum: 3\n", "g.yaml").unwrap_err();
        assert!(e.to_string().contains("minimum"), "{e}");
        let g = Gates::parse("min_mean_hidden_pass:\n  T4: 0.5\n", "g.yaml").unwrap();
        assert_eq!(g.min_mean_hidden_pass("T4"), 0.5);
        assert_eq!(g.min_mean_hidden_pass("T5"), 0.3);
        let e = Gates::parse("min_mean_hidden_pass:\n  T5: 1.5\n", "g.yaml").unwrap_err();
        assert!(
            e.to_string().contains("`min_mean_hidden_pass.T5`: 1.5"),
            "{e}"
        );
        let e = Gates::parse("min_mean_hidden_pass:\n  T0: 0.5\n", "g.yaml").unwrap_err();
        assert!(e.to_string().contains("`min_mean_hidden_pass.T0`"), "{e}");
    }

    #[test]
    fn a_certificate_of_the_same_attempts_is_the_same_measurement_whenever_written() {
        let t = task("b", "T5");
        let first = cert(&t, "x", &[0.5, 0.7]).certificate;
        let mut later = first.clone();
        later.date = "2027-01-01T00:00:00Z".into();
        later.harness_version = "pdl-swe 9".into();
        assert!(later.same_measurement(&first));
        let mut other = cert(&t, "x", &[0.5, 0.8]).certificate;
        other.attempt_ids[1] = "another attempt".into();
        assert!(!other.same_measurement(&first));
        // The same attempts read through another spelling of the path.
        let mut elsewhere = first.clone();
        elsewhere.sources = vec!["./f".into()];
        assert!(elsewhere.same_measurement(&first));
        // Certificates written before attempt ids existed compare whole.
        let (mut legacy, mut legacy_elsewhere) = (first.clone(), elsewhere.clone());
        legacy.attempt_ids.clear();
        legacy_elsewhere.attempt_ids.clear();
        assert!(!legacy_elsewhere.same_measurement(&legacy));
    }

    #[test]
    fn the_store_writes_new_files_only_and_reads_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let t = task("b", "T5");
        let store = CertificateStore::task_folders(dir.path());
        let c = cert(&t, "x", &[0.5]).certificate;
        let first = store.write(&c).unwrap();
        let second = store.write(&c).unwrap();
        assert_eq!(first, dir.path().join("b/certificates/x-2026-01-01.json"));
        assert_eq!(
            second,
            dir.path().join("b/certificates/x-2026-01-01-2.json")
        );
        // A link at the next name is never written through.
        let target = dir.path().join("target.json");
        std::os::unix::fs::symlink(
            &target,
            dir.path().join("b/certificates/x-2026-01-01-3.json"),
        )
        .unwrap();
        let fourth = store.write(&c).unwrap();
        assert!(fourth.ends_with("x-2026-01-01-4.json"));
        assert!(!target.exists());
        std::fs::write(dir.path().join("b/certificates/broken.json"), b"{").unwrap();
        let (read, warnings) = store.read("b").unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].certificate, c);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().any(|w| w.file.ends_with("broken.json")));
        assert!(warnings.iter().any(|w| w.file.ends_with("-3.json")));
        assert_eq!(store.read("nothing").unwrap().0.len(), 0);
        // A linked certificates folder is not followed.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("l")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("l/certificates")).unwrap();
        let mut other = c.clone();
        other.task_id = "l".into();
        assert!(store.write(&other).is_err());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        // One task folder keeps its certificates beside its manifest.
        let one = CertificateStore::one_task(dir.path().join("b"));
        assert_eq!(one.read("b").unwrap().0.len(), 3);
    }
}
