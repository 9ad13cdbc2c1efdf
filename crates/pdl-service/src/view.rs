//! What a submitter may see: tasks as an agent sees them ([`task_view`]) and
//! result records without hidden node IDs ([`submitter_record`]).

use std::collections::BTreeSet;

use pdl_grader::ResultRecord;
use pdl_task::Task;
use serde_json::Value;

use crate::api::TaskView;

/// What an agent may see of `task`; rung names only when `public_ladders`.
pub fn task_view(task: &Task, public_ladders: bool) -> TaskView {
    let row = &task.row;
    TaskView {
        instance_id: row.instance_id.clone(),
        task_id: row.task_id.clone(),
        tier: row.tier.clone(),
        domain: row.domain.clone(),
        problem_statement: row.problem_statement.clone(),
        patch_policy_allowed: row.patch_policy_allowed.clone(),
        patch_policy_forbidden: row.patch_policy_forbidden.clone(),
        token_budget: row.token_budget,
        public_tests: row.pass_to_pass.clone(),
        hidden_test_count: row.fail_to_pass.len() as i64,
        ladder: public_ladders.then(|| task.extras.ladder.iter().map(|r| r.name.clone()).collect()),
    }
}

/// The hidden node IDs and hidden file paths of `task`.
fn hidden_names(task: Option<&Task>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    if let Some(task) = task {
        for id in &task.row.fail_to_pass {
            names.insert(id.clone());
            if let Some((file, _)) = id.split_once("::") {
                names.insert(file.to_string());
            }
        }
    }
    names
}

/// Whether a node ID or path is a hidden test's.
fn is_hidden(name: &str, hidden: &BTreeSet<String>) -> bool {
    name.starts_with("tests/hidden/") || hidden.contains(name)
}

/// `text` with every hidden name replaced.
fn scrub(text: &str, hidden: &BTreeSet<String>) -> String {
    let mut out = text.to_string();
    // Longest first, so a node ID goes before its file's path.
    let mut names: Vec<&String> = hidden.iter().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        out = out.replace(name.as_str(), "<hidden test>");
    }
    out.replace("tests/hidden/", "<hidden tests>/")
}

/// The submitter's view of a record: the section-10 keys with hidden node IDs
/// left out of `tests` (their share is `components.hidden_pass_fraction`), no
/// hidden test named anywhere else, `landed_rung` only when the dataset's
/// ladders are public, and no episode object.
pub fn submitter_record(record: &ResultRecord, task: Option<&Task>, public_ladders: bool) -> Value {
    let hidden = hidden_names(task);
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    let Some(obj) = value.as_object_mut() else {
        return Value::Null;
    };
    if let Some(Value::Object(tests)) = obj.get_mut("tests") {
        tests.retain(|id, _| !is_hidden(id, &hidden));
    }
    if !public_ladders {
        obj.insert("landed_rung".into(), Value::Null);
    }
    obj.remove("episode");
    if let Some(Value::Array(errors)) = obj.get_mut("collection_errors") {
        errors.retain(|e| {
            let path = e.as_str().unwrap_or_default();
            let file = path.split(':').next().unwrap_or_default();
            !is_hidden(file, &hidden)
        });
    }
    if let Some(Value::String(detail)) = obj.get_mut("detail") {
        *detail = scrub(detail, &hidden);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_hidden_names() {
        let hidden: BTreeSet<String> = [
            "tests/hidden/test_h.py::test_a".to_string(),
            "tests/hidden/test_h.py".to_string(),
        ]
        .into_iter()
        .collect();
        let s = scrub(
            "node tests/hidden/test_h.py::test_a failed; tests/hidden/other.py",
            &hidden,
        );
        assert!(!s.contains("test_a") && !s.contains("tests/hidden/"), "{s}");
    }
}
