//! SWE-bench style predictions files ([`parse_predictions`]) and the plan that
//! grades them on the [`pipeline`](crate::pipeline) ([`plan_predictions`]): one
//! record per prediction, written as soon as it is known; a bad prediction gets
//! a record of its own and never stops the others.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use pdl_task::Task;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::grade::{Grader, Submission, SubmissionContent};
use crate::ladder::LadderFingerprints;
use crate::pipeline::{InvalidJob, Job, JobKey, JobKind, Phase, PhasePlan, Plan};
use crate::record::SubmissionKind;

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

impl PredictionEntry {
    /// The job that records this entry: grading it, or recording why it
    /// cannot be graded (an invalid entry, an instance the dataset does not
    /// hold).
    pub fn job(&self, tasks: &[Task], by_id: &HashMap<&str, usize>) -> Job {
        match self {
            PredictionEntry::Invalid(i) => {
                let id = i.instance_id.clone().unwrap_or_default();
                Job::invalid(
                    by_id.get(id.as_str()).copied(),
                    InvalidJob {
                        instance_id: id,
                        model_name_or_path: i.model_name_or_path.clone(),
                        detail: format!("{}: {}", i.location, i.reason),
                        submission_digest: i.digest.clone(),
                    },
                )
            }
            PredictionEntry::Valid(p) => match by_id.get(p.instance_id.as_str()) {
                None => Job::invalid(
                    None,
                    InvalidJob {
                        instance_id: p.instance_id.clone(),
                        model_name_or_path: Some(p.model_name_or_path.clone()),
                        detail: format!(
                            "{}: unknown instance_id `{}` (not in the dataset)",
                            p.location, p.instance_id
                        ),
                        submission_digest: digest(p.model_patch.as_bytes()),
                    },
                ),
                Some(&task) => Job::grade(
                    tasks,
                    task,
                    Submission {
                        kind: SubmissionKind::Prediction,
                        name: p.model_name_or_path.clone(),
                        model_name_or_path: Some(p.model_name_or_path.clone()),
                        content: SubmissionContent::Patch(p.model_patch.clone()),
                    },
                    0,
                ),
            },
        }
    }
}

/// The plan for a predictions file: every entry whose key is not in `done`
/// (the keys of the records `--out` already holds), after a ladder phase for
/// the tasks involved whose fingerprints are not in the cache under
/// `cache_root` (its rungs are graded for their fingerprints only, and the
/// ladders it completes are cached).
pub fn plan_predictions(
    grader: &Grader,
    tasks: &[Task],
    entries: &[PredictionEntry],
    done: &HashSet<JobKey>,
    cache_root: &Path,
) -> Plan {
    let by_id: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.row.instance_id.as_str(), i))
        .collect();
    let mut plan = Plan {
        ladder_cache: Some(cache_root.to_path_buf()),
        ..Plan::default()
    };
    let mut predictions = PhasePlan::new(Phase::Predictions, true);
    for entry in entries {
        predictions.push_unless_done(entry.job(tasks, &by_id), done);
    }
    let mut involved = Vec::new();
    for job in &predictions.jobs {
        if let (Some(t), JobKind::Grade { .. }) = (job.task, &job.kind) {
            if !involved.contains(&t) && !tasks[t].extras.ladder.is_empty() {
                involved.push(t);
            }
        }
    }
    let mut measure = Vec::new();
    for t in involved {
        let task = &tasks[t];
        let env_digest = grader
            .envs()
            .ensure(task.row.requirements_lock())
            .map(|e| e.info.digest.clone())
            .unwrap_or_default();
        match LadderFingerprints::load_cached(cache_root, task, &env_digest) {
            Some(f) => {
                plan.known_rungs.insert(t, f.rungs);
            }
            None => measure.push(t),
        }
    }
    plan.add_ladders(tasks, &measure, false, &HashSet::new());
    plan.phases.push(predictions);
    plan
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
