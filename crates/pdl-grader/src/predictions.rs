//! SWE-bench style predictions files ([`parse_predictions`]) and grading them
//! ([`grade_predictions`]): one record per prediction, written as soon as it is
//! known; a bad prediction gets a record of its own and never stops the others.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use pdl_task::Task;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::execute::execute;
use crate::grade::{Grader, Submission, SubmissionContent, HARNESS_VERSION};
use crate::ladder::LadderFingerprints;
use crate::record::{Components, PolicyReport, Provenance, ResultRecord, SubmissionKind, Verdict};

/// One prediction as read from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    /// The task version it is for.
    pub instance_id: String,
    /// The model or system that made it.
    pub model_name_or_path: String,
    /// The patch (empty: do nothing).
    pub model_patch: String,
    /// Where it was in the file (`line 3`, `item 3`).
    pub location: String,
}

/// An entry that is not a usable prediction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPrediction {
    /// Its instance ID, when readable.
    pub instance_id: Option<String>,
    /// Its model, when readable.
    pub model_name_or_path: Option<String>,
    /// Where it was in the file.
    pub location: String,
    /// What is wrong.
    pub reason: String,
    /// Digest of the entry's text (for resuming).
    pub digest: String,
}

/// One entry of a predictions file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PredictionEntry {
    /// Gradable.
    Valid(Prediction),
    /// Not gradable; recorded with verdict `invalid_prediction`.
    Invalid(InvalidPrediction),
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn entry_from_value(value: &Value, location: String, raw: &str) -> PredictionEntry {
    let invalid = |id: Option<String>, model: Option<String>, reason: String| {
        PredictionEntry::Invalid(InvalidPrediction {
            instance_id: id,
            model_name_or_path: model,
            location: location.clone(),
            reason,
            digest: digest(raw.as_bytes()),
        })
    };
    let Some(obj) = value.as_object() else {
        return invalid(
            None,
            None,
            "expected a JSON object with instance_id, model_name_or_path and model_patch".into(),
        );
    };
    let id = obj
        .get("instance_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    let model = obj
        .get("model_name_or_path")
        .and_then(Value::as_str)
        .map(str::to_string);
    let Some(instance_id) = id.clone().filter(|s| !s.is_empty()) else {
        return invalid(id, model, "missing or non-string `instance_id`".into());
    };
    let model_name_or_path = match obj.get("model_name_or_path") {
        None | Some(Value::Null) => "unknown".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return invalid(
                Some(instance_id),
                None,
                "`model_name_or_path` must be a string".into(),
            )
        }
    };
    let model_patch = match obj.get("model_patch") {
        None => {
            return invalid(
                Some(instance_id),
                Some(model_name_or_path),
                "missing `model_patch`".into(),
            )
        }
        Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return invalid(
                Some(instance_id),
                Some(model_name_or_path),
                "`model_patch` must be a string or null".into(),
            )
        }
    };
    PredictionEntry::Valid(Prediction {
        instance_id,
        model_name_or_path,
        model_patch,
        location,
    })
}

/// Reads a predictions file: a JSON list, or JSONL. A file that cannot be read at
/// all is an error; a bad entry is an [`PredictionEntry::Invalid`]. Repeated
/// (instance, model) pairs after the first are invalid as duplicates.
pub fn parse_predictions(bytes: &[u8], source: &str) -> Result<Vec<PredictionEntry>, String> {
    let mut entries = Vec::new();
    if bytes.trim_ascii_start().starts_with(b"[") {
        // One JSON document: it is text as a whole or not at all.
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1;
            format!("{source}: line {line}: not UTF-8 text")
        })?;
        let list: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| format!("{source}: not a valid JSON list: {e}"))?;
        for (i, v) in list.iter().enumerate() {
            entries.push(entry_from_value(
                v,
                format!("item {}", i + 1),
                &v.to_string(),
            ));
        }
    } else {
        // JSONL: each line on its own, so one bad line costs only itself.
        for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.trim_ascii().is_empty() {
                continue;
            }
            let location = format!("line {}", i + 1);
            let invalid = |reason: String| {
                PredictionEntry::Invalid(InvalidPrediction {
                    instance_id: None,
                    model_name_or_path: None,
                    location: location.clone(),
                    reason,
                    digest: digest(raw),
                })
            };
            let Ok(line) = std::str::from_utf8(raw) else {
                entries.push(invalid("not UTF-8 text".into()));
                continue;
            };
            match serde_json::from_str::<Value>(line) {
                Ok(v) => entries.push(entry_from_value(&v, location, line)),
                Err(e) => entries.push(invalid(format!("invalid JSON: {e}"))),
            }
        }
    }
    let mut first: HashMap<(String, String), String> = HashMap::new();
    for entry in entries.iter_mut() {
        if let PredictionEntry::Valid(p) = entry {
            let key = (p.instance_id.clone(), p.model_name_or_path.clone());
            if let Some(at) = first.get(&key) {
                *entry = PredictionEntry::Invalid(InvalidPrediction {
                    instance_id: Some(p.instance_id.clone()),
                    model_name_or_path: Some(p.model_name_or_path.clone()),
                    location: p.location.clone(),
                    reason: format!("duplicate prediction for this instance and model (first at {at}); only the first is graded"),
                    digest: digest(format!("{}{}{}", p.location, p.instance_id, p.model_patch).as_bytes()),
                });
            } else {
                first.insert(key, p.location.clone());
            }
        }
    }
    Ok(entries)
}

/// The key a record is resumed by: instance, model, submission digest.
pub fn resume_key(record: &ResultRecord) -> (String, String, String) {
    (
        record.instance_id.clone(),
        record.model_name_or_path.clone().unwrap_or_default(),
        record.provenance.submission_digest.clone(),
    )
}

fn entry_key(entry: &PredictionEntry) -> (String, String, String) {
    match entry {
        PredictionEntry::Valid(p) => (
            p.instance_id.clone(),
            p.model_name_or_path.clone(),
            digest(p.model_patch.as_bytes()),
        ),
        PredictionEntry::Invalid(i) => (
            i.instance_id.clone().unwrap_or_default(),
            i.model_name_or_path.clone().unwrap_or_default(),
            i.digest.clone(),
        ),
    }
}

fn invalid_record(
    instance_id: &str,
    model: Option<String>,
    detail: String,
    digest: String,
    task: Option<&Task>,
) -> ResultRecord {
    ResultRecord {
        instance_id: instance_id.to_string(),
        model_name_or_path: model.clone(),
        kind: SubmissionKind::Prediction,
        name: model.unwrap_or_else(|| "unknown".into()),
        reward: 0.0,
        components: Components::default(),
        verdict: Verdict::InvalidPrediction,
        detail: Some(detail),
        tests: BTreeMap::new(),
        policy: PolicyReport::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 0.0,
        phases_s: Default::default(),
        provenance: Provenance {
            harness_version: HARNESS_VERSION.into(),
            task_digest: task.map(Task::digest).unwrap_or_default(),
            submission_digest: digest,
            ..Provenance::default()
        },
        suspicious: Vec::new(),
        episode: None,
    }
}

/// What a predictions run reports as it goes.
#[derive(Debug)]
pub enum GradeEvent<'a> {
    /// A rung was measured to fingerprint its ladder (`done` of `total`).
    Ladder {
        /// Rungs measured so far.
        done: usize,
        /// Rungs to measure.
        total: usize,
    },
    /// A prediction's record is ready (graded, or invalid).
    Record(&'a ResultRecord),
}

/// Grades every entry not already in `done` (resume keys). Ladders missing from
/// the cache are measured first, so every prediction's `landed_rung` is known
/// when its record is handed to `on_event`. Returns how many entries were
/// skipped as already done.
pub fn grade_predictions(
    grader: &Grader,
    tasks: &[Task],
    entries: &[PredictionEntry],
    done: &HashSet<(String, String, String)>,
    parallelism: usize,
    cache_root: &Path,
    mut on_event: impl FnMut(GradeEvent<'_>),
) -> usize {
    let by_id: HashMap<&str, &Task> = tasks
        .iter()
        .map(|t| (t.row.instance_id.as_str(), t))
        .collect();
    let mut skipped = 0;
    let mut todo: Vec<(&Task, Submission)> = Vec::new();
    for entry in entries {
        if done.contains(&entry_key(entry)) {
            skipped += 1;
            continue;
        }
        match entry {
            PredictionEntry::Invalid(i) => {
                let id = i.instance_id.clone().unwrap_or_default();
                let rec = invalid_record(
                    &id,
                    i.model_name_or_path.clone(),
                    format!("{}: {}", i.location, i.reason),
                    i.digest.clone(),
                    by_id.get(id.as_str()).copied(),
                );
                on_event(GradeEvent::Record(&rec));
            }
            PredictionEntry::Valid(p) => match by_id.get(p.instance_id.as_str()) {
                None => {
                    let rec = invalid_record(
                        &p.instance_id,
                        Some(p.model_name_or_path.clone()),
                        format!(
                            "{}: unknown instance_id `{}` (not in the dataset)",
                            p.location, p.instance_id
                        ),
                        digest(p.model_patch.as_bytes()),
                        None,
                    );
                    on_event(GradeEvent::Record(&rec));
                }
                Some(task) => todo.push((
                    task,
                    Submission {
                        kind: SubmissionKind::Prediction,
                        name: p.model_name_or_path.clone(),
                        model_name_or_path: Some(p.model_name_or_path.clone()),
                        content: SubmissionContent::Patch(p.model_patch.clone()),
                    },
                )),
            },
        }
    }
    // Phase 1: ladders of the tasks involved.
    let mut ladders: HashMap<String, LadderFingerprints> = HashMap::new();
    let mut rung_jobs: Vec<(&Task, Submission)> = Vec::new();
    let mut seen = HashSet::new();
    for (task, _) in &todo {
        if !seen.insert(task.row.instance_id.clone()) || task.extras.ladder.is_empty() {
            continue;
        }
        let env_digest = grader
            .envs()
            .ensure(task.row.requirements_lock())
            .map(|e| e.info.digest.clone())
            .unwrap_or_default();
        match LadderFingerprints::load_cached(cache_root, task, &env_digest) {
            Some(f) => {
                ladders.insert(task.row.instance_id.clone(), f);
            }
            None => rung_jobs.extend(
                task.extras
                    .ladder
                    .iter()
                    .filter_map(|r| Submission::rung(task, &r.name).map(|s| (*task, s))),
            ),
        }
    }
    let mut rung_records: HashMap<String, Vec<ResultRecord>> = HashMap::new();
    let total = rung_jobs.len();
    let mut finished = 0;
    execute(
        &rung_jobs,
        parallelism,
        |(task, s)| grader.grade(task, s, None),
        |i, rec| {
            finished += 1;
            on_event(GradeEvent::Ladder {
                done: finished,
                total,
            });
            rung_records
                .entry(rung_jobs[i].0.row.instance_id.clone())
                .or_default()
                .push(rec);
        },
    );
    for (id, records) in rung_records {
        let task = by_id[id.as_str()];
        let f = LadderFingerprints::from_records(task, &records);
        if f.rungs.len() == task.extras.ladder.len() {
            let env_digest = records
                .first()
                .map(|r| r.provenance.environment.digest.clone())
                .unwrap_or_default();
            let _ = f.store(cache_root, task, &env_digest);
        }
        ladders.insert(id, f);
    }
    // Phase 2: the predictions.
    execute(
        &todo,
        parallelism,
        |(task, s)| grader.grade(task, s, ladders.get(&task.row.instance_id)),
        |_, rec| {
            on_event(GradeEvent::Record(&rec));
        },
    );
    skipped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_and_json_list_forms_parse_alike() {
        let jsonl = "{\"instance_id\": \"a-v1\", \"model_name_or_path\": \"m\", \"model_patch\": \"\"}\n\n{\"instance_id\": \"b-v1\", \"model_name_or_path\": \"m\", \"model_patch\": null}\n";
        let list = "[{\"instance_id\": \"a-v1\", \"model_name_or_path\": \"m\", \"model_patch\": \"\"}, {\"instance_id\": \"b-v1\", \"model_name_or_path\": \"m\", \"model_patch\": null}]";
        let a = parse_predictions(jsonl.as_bytes(), "p.jsonl").unwrap();
        let b = parse_predictions(list.as_bytes(), "p.json").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(b.len(), 2);
        assert!(a
            .iter()
            .chain(&b)
            .all(|e| matches!(e, PredictionEntry::Valid(_))));
    }

    #[test]
    fn bad_entries_are_kept_as_invalid_with_their_location() {
        let text = [
            r#"{"instance_id": "a-v1", "model_name_or_path": "m", "model_patch": "x"}"#,
            r#"{"instance_id": "a-v1", "model_name_or_path": "m", "model_patch": "y"}"#,
            r#"{"model_name_or_path": "m", "model_patch": ""}"#,
            r#"{"instance_id": "c-v1", "model_patch": 7}"#,
            r#"not json"#,
            r#"[1]"#,
        ]
        .join("\n");
        let entries = parse_predictions(text.as_bytes(), "p.jsonl").unwrap();
        let reasons: Vec<String> = entries
            .iter()
            .map(|e| match e {
                PredictionEntry::Valid(_) => "ok".to_string(),
                PredictionEntry::Invalid(i) => format!("{}: {}", i.location, i.reason),
            })
            .collect();
        assert_eq!(reasons[0], "ok");
        assert!(
            reasons[1].starts_with("line 2: duplicate"),
            "{}",
            reasons[1]
        );
        assert!(reasons[2].contains("instance_id"), "{}", reasons[2]);
        assert!(reasons[3].contains("model_patch"), "{}", reasons[3]);
        assert!(
            reasons[4].starts_with("line 5: invalid JSON"),
            "{}",
            reasons[4]
        );
        assert!(reasons[5].contains("JSON object"), "{}", reasons[5]);
    }

    #[test]
    fn unreadable_files_are_errors() {
        assert!(parse_predictions(b"[{\"a\": ", "p.json")
            .unwrap_err()
            .contains("not a valid JSON list"));
        assert!(parse_predictions(b"[{}, \"\xff\"]", "p.json")
            .unwrap_err()
            .contains("line 1: not UTF-8"));
    }

    #[test]
    fn a_line_that_is_not_text_costs_only_itself() {
        let good = br#"{"instance_id": "t-v1", "model_name_or_path": "m", "model_patch": ""}"#;
        let mut file = b"{\"instance_id\": \"\xff\"}\n".to_vec();
        file.extend_from_slice(good);
        let entries = parse_predictions(&file, "p.jsonl").unwrap();
        assert_eq!(entries.len(), 2);
        match &entries[0] {
            PredictionEntry::Invalid(i) => {
                assert_eq!(i.location, "line 1");
                assert!(i.reason.contains("not UTF-8"), "{}", i.reason);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(entries[1], PredictionEntry::Valid(_)));
    }
}
