//! JSONL datasets: one instance row per line, as a JSON object with the eighteen
//! columns; our own files add a `pdl_extras` object holding the ladder and limits.
//! Other keys are ignored, so files written by other tools load.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{LoadError, WriteError};
use crate::row::{ColumnType, InstanceRow, RepoFile, COLUMNS};
use crate::safe::MAX_TASK_BYTES;
use crate::task::{Task, TaskExtras};

/// The key our JSONL rows use for [`TaskExtras`].
pub const EXTRAS_KEY: &str = "pdl_extras";

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn string_list(value: &Value) -> Result<Vec<String>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("expected a list of strings, found {}", json_type(value)))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("item {i}: expected a string, found {}", json_type(item)))
        })
        .collect()
}

fn file_list(value: &Value) -> Result<Vec<RepoFile>, String> {
    let items = value.as_array().ok_or_else(|| {
        format!(
            "expected a list of {{path, content}} objects, found {}",
            json_type(value)
        )
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj = item.as_object().ok_or_else(|| {
                format!("item {i}: expected an object, found {}", json_type(item))
            })?;
            let get = |key: &str| -> Result<String, String> {
                match obj.get(key) {
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(other) => Err(format!(
                        "item {i}: `{key}` must be a string, found {}",
                        json_type(other)
                    )),
                    None => Err(format!("item {i}: missing `{key}`")),
                }
            };
            Ok(RepoFile {
                path: get("path")?,
                content: get("content")?,
            })
        })
        .collect()
}

/// Reads one JSON object into a row, checking every column's presence and type.
pub fn row_from_object(obj: &Map<String, Value>) -> Result<InstanceRow, (String, String)> {
    for (column, column_type) in COLUMNS {
        let value = obj
            .get(column)
            .ok_or_else(|| (column.to_string(), "missing column".to_string()))?;
        let ok = match column_type {
            ColumnType::String => value.is_string(),
            ColumnType::Int64 => value.as_i64().is_some(),
            ColumnType::StringList | ColumnType::FileList => value.is_array(),
        };
        if !ok {
            return Err((
                column.to_string(),
                format!(
                    "expected {}, found {}",
                    column_type.describe(),
                    if value.is_number() {
                        "a number that is not a 64-bit integer"
                    } else {
                        json_type(value)
                    }
                ),
            ));
        }
    }
    let s = |c: &str| obj[c].as_str().unwrap_or_default().to_string();
    let i = |c: &str| obj[c].as_i64().unwrap_or_default();
    let l = |c: &str| string_list(&obj[c]).map_err(|m| (c.to_string(), m));
    Ok(InstanceRow {
        instance_id: s("instance_id"),
        task_id: s("task_id"),
        task_version: i("task_version"),
        tier: s("tier"),
        domain: s("domain"),
        problem_statement: s("problem_statement"),
        patch: s("patch"),
        test_patch: s("test_patch"),
        fail_to_pass: l("FAIL_TO_PASS")?,
        pass_to_pass: l("PASS_TO_PASS")?,
        files: file_list(&obj["files"]).map_err(|m| ("files".to_string(), m))?,
        patch_policy_allowed: l("patch_policy_allowed")?,
        patch_policy_forbidden: l("patch_policy_forbidden")?,
        token_budget: i("token_budget"),
        hidden_test_count: i("hidden_test_count"),
        public_test_count: i("public_test_count"),
        graded_ladder_rungs: l("graded_ladder_rungs")?,
        reward_formula: s("reward_formula"),
    })
}

/// Parses JSONL text. Each bad line becomes its own error; good lines still load.
/// Blank lines are skipped.
pub fn parse_jsonl(text: &str, source: &str) -> (Vec<Task>, Vec<LoadError>) {
    parse_jsonl_bytes(text.as_bytes(), source)
}

/// Parses JSONL bytes. Each bad line (not UTF-8, longer than
/// [`MAX_TASK_BYTES`], not JSON, not a valid row) becomes its own error naming
/// the line; good lines still load. Blank lines are skipped.
pub fn parse_jsonl_bytes(bytes: &[u8], source: &str) -> (Vec<Task>, Vec<LoadError>) {
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let mut raw_lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if raw_lines.last().is_some_and(|l| l.is_empty()) {
        raw_lines.pop();
    }
    for (index, raw) in raw_lines.into_iter().enumerate() {
        let line_name = format!("line {}", index + 1);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() as u64 > MAX_TASK_BYTES {
            errors.push(
                LoadError::source(
                    source,
                    format!(
                        "{} bytes; a row may hold at most {MAX_TASK_BYTES}",
                        raw.len()
                    ),
                )
                .at_row(line_name),
            );
            continue;
        }
        let line = match std::str::from_utf8(raw) {
            Ok(line) => line,
            Err(e) => {
                errors.push(
                    LoadError::source(
                        source,
                        format!(
                            "not UTF-8 text (invalid byte at column {})",
                            e.valid_up_to() + 1
                        ),
                    )
                    .at_row(line_name),
                );
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                errors.push(
                    LoadError::source(source, format!("invalid JSON: {e}")).at_row(line_name),
                );
                continue;
            }
        };
        let Value::Object(obj) = value else {
            errors.push(
                LoadError::source(
                    source,
                    format!("expected a JSON object, found {}", json_type(&value)),
                )
                .at_row(line_name),
            );
            continue;
        };
        let instance_id = obj.get("instance_id").and_then(Value::as_str);
        let row = match row_from_object(&obj) {
            Ok(row) => row,
            Err((field, message)) => {
                errors.push(
                    LoadError::source(source, message)
                        .at_row(line_name)
                        .for_instance(instance_id)
                        .in_field(field),
                );
                continue;
            }
        };
        let extras = match obj.get(EXTRAS_KEY) {
            None | Some(Value::Null) => TaskExtras::default(),
            Some(v) => match serde_json::from_value(v.clone()) {
                Ok(e) => e,
                Err(e) => {
                    errors.push(
                        LoadError::source(source, e.to_string())
                            .at_row(line_name)
                            .for_instance(instance_id)
                            .in_field(EXTRAS_KEY),
                    );
                    continue;
                }
            },
        };
        tasks.push(Task { row, extras });
    }
    (tasks, errors)
}

#[derive(Serialize)]
struct JsonlRecord<'a> {
    #[serde(flatten)]
    row: &'a InstanceRow,
    #[serde(skip_serializing_if = "Option::is_none")]
    pdl_extras: Option<&'a TaskExtras>,
}

/// One task as a JSONL line (without the newline).
pub fn task_to_line(task: &Task) -> String {
    let record = JsonlRecord {
        row: &task.row,
        pdl_extras: (!task.extras.is_empty()).then_some(&task.extras),
    };
    serde_json::to_string(&record).expect("rows always serialize")
}

/// Writes tasks as JSONL.
pub fn write_jsonl(tasks: &[Task], path: &Path) -> Result<(), WriteError> {
    // Replaced, never written through a link at its path.
    let file =
        pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::Truncate).map_err(WriteError::fs)?;
    let mut out = std::io::BufWriter::new(file);
    for task in tasks {
        writeln!(out, "{}", task_to_line(task)).map_err(|e| WriteError::io(path, e))?;
    }
    out.flush().map_err(|e| WriteError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(overrides: &[(&str, Value)]) -> String {
        let mut obj = serde_json::json!({
            "instance_id": "t-v1", "task_id": "t", "task_version": 1, "tier": "T1",
            "domain": "d", "problem_statement": "p", "patch": "", "test_patch": "",
            "FAIL_TO_PASS": ["tests/hidden/a.py::t"], "PASS_TO_PASS": [],
            "files": [{"path": "a.py", "content": "x"}],
            "patch_policy_allowed": ["src/**"], "patch_policy_forbidden": [],
            "token_budget": 10, "hidden_test_count": 1, "public_test_count": 0,
            "graded_ladder_rungs": [], "reward_formula": "1*build_health"
        });
        for (k, v) in overrides {
            if v.is_null() {
                obj.as_object_mut().unwrap().remove(*k);
            } else {
                obj[*k] = v.clone();
            }
        }
        obj.to_string()
    }

    #[test]
    fn good_lines_load_and_bad_lines_are_named() {
        let text = [
            line(&[]),
            "{ not json".to_string(),
            line(&[("token_budget", Value::String("big".into()))]),
            line(&[("files", Value::Null)]),
            String::new(),
            line(&[("FAIL_TO_PASS", serde_json::json!([1]))]),
            "[1,2]".to_string(),
        ]
        .join("\n");
        let (tasks, errors) = parse_jsonl(&text, "d.jsonl");
        assert_eq!(tasks.len(), 1);
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 5, "{shown:#?}");
        assert!(
            shown[0].starts_with("d.jsonl: line 2: invalid JSON"),
            "{}",
            shown[0]
        );
        assert_eq!(
            shown[1],
            "d.jsonl: line 3 (t-v1): `token_budget`: expected int64, found string"
        );
        assert_eq!(shown[2], "d.jsonl: line 4 (t-v1): `files`: missing column");
        assert!(
            shown[3].contains("`FAIL_TO_PASS`: item 0: expected a string"),
            "{}",
            shown[3]
        );
        assert!(
            shown[4].contains("line 7: expected a JSON object"),
            "{}",
            shown[4]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_costs_only_itself() {
        let mut bytes = line(&[]).into_bytes();
        bytes.extend_from_slice(b"\n{\"instance_id\": \"x\xff\"}\r\n");
        bytes.extend_from_slice(
            line(&[("instance_id", "u-v1".into()), ("task_id", "u".into())]).as_bytes(),
        );
        bytes.extend_from_slice(b"\r\n");
        let (tasks, errors) = parse_jsonl_bytes(&bytes, "d.jsonl");
        assert_eq!(tasks.len(), 2, "{errors:?}");
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "d.jsonl: line 2: not UTF-8 text (invalid byte at column 19)"
        );
    }

    #[test]
    fn extras_round_trip() {
        let (tasks, errors) = parse_jsonl(&line(&[]), "x");
        assert!(errors.is_empty());
        let mut task = tasks[0].clone();
        task.extras.limits.test_timeout_s = Some(5);
        let back = parse_jsonl(&task_to_line(&task), "x").0;
        assert_eq!(back[0], task);
    }
}
