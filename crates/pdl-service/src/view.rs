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

/// What a submitter reads of a record's `detail`. Where the text comes from
/// the test runs (their notes, the checks' reasons), the code under test has
/// shaped it, and it ran beside the hidden tests: the submitter gets a fixed
/// sentence per kind of note instead, never the text. Details of verdicts the
/// harness reaches before any test runs (policy, patch, prediction) describe
/// the submission itself and are kept, hidden names replaced.
fn submitter_detail(verdict: &str, detail: &str, hidden: &BTreeSet<String>) -> String {
    const NOTES: [(&str, &str); 5] = [
        (
            "did not start within the time bound",
            "the test process did not start within the time bound",
        ),
        (
            "passed its",
            "a test run passed its time bound; unfinished tests count as failed",
        ),
        (
            "ended before pytest finished",
            "a test process ended before pytest finished; unfinished tests count as errors",
        ),
        (
            "stopped at the memory bound",
            "processes of the run were stopped at the memory bound",
        ),
        ("test output was cut", "test output was cut at its bound"),
    ];
    match verdict {
        "tampered" => "the grader's checks found the code under test interfering with the test run \
                       (the service's operator has the details)"
            .to_string(),
        "harness_error" => {
            "the harness could not grade this prediction (not counted; the service's operator has the details)"
                .to_string()
        }
        "graded" | "timeout" => NOTES
            .iter()
            .filter(|(seen, _)| detail.contains(seen))
            .map(|(_, said)| *said)
            .collect::<Vec<_>>()
            .join("; "),
        _ => scrub(detail, hidden),
    }
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
        // As a record with none has it: absent.
        if errors.is_empty() {
            obj.remove("collection_errors");
        }
    }
    let verdict = obj
        .get("verdict")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(detail) = obj.get_mut("detail") {
        if let Value::String(text) = detail {
            let said = submitter_detail(&verdict, text, &hidden);
            *detail = if said.is_empty() {
                Value::Null
            } else {
                Value::String(said)
            };
        }
    }
    // When the grading started tells, beside the next one's start, how long
    // the one before took: only the day is shown.
    if let Some(Value::String(started)) = obj
        .get_mut("provenance")
        .and_then(|p| p.get_mut("started_at"))
    {
        if let Some(day) = started.get(..10) {
            *started = format!("{day}T00:00:00Z");
        }
    }
    // How long the grading took would tell what the hidden tests do (a
    // submission can time itself on them): the times are zero.
    if let Some(d) = obj.get_mut("duration_s") {
        *d = Value::from(0.0);
    }
    if let Some(Value::Object(phases)) = obj.get_mut("phases_s") {
        for v in phases.values_mut() {
            *v = Value::from(0.0);
        }
    }
    // The task's digest covers the hidden tests and the gold patch: with it a
    // submitter could test guesses at them offline, without limit.
    if let Some(Value::String(digest)) = obj
        .get_mut("provenance")
        .and_then(|p| p.get_mut("task_digest"))
    {
        digest.clear();
    }
    // Facts of the service's machine, not of the grading: the user it runs
    // as and where its binary lies.
    if let Some(Value::Object(sandbox)) =
        obj.get_mut("provenance").and_then(|p| p.get_mut("sandbox"))
    {
        sandbox.remove("host_uid");
        sandbox.remove("masked");
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

    /// Text the code under test shaped never reaches the submitter.
    #[test]
    fn details_from_the_test_runs_are_fixed_sentences() {
        let none = BTreeSet::new();
        let leak = "the hidden test run's outcomes cannot be trusted: the grader's checks saw \
                    process memory or descriptors (/proc/self/fd/0/Lfrom datetime import date)";
        let said = submitter_detail("tampered", leak, &none);
        assert!(
            !said.contains("datetime") && !said.contains("/proc"),
            "{said}"
        );
        let notes = "the hidden test run passed its 120 s bound while running tests/hidden/t.py::test_x; \
                     unfinished tests count as failed; the test process of the public test run ended \
                     before pytest finished (exit code 37); unfinished tests count as errors";
        assert_eq!(
            submitter_detail("timeout", notes, &none),
            "a test run passed its time bound; unfinished tests count as failed; \
             a test process ended before pytest finished; unfinished tests count as errors"
        );
        assert_eq!(submitter_detail("graded", "anything else 1234", &none), "");
        let hidden: BTreeSet<String> = ["tests/hidden/t.py".to_string()].into_iter().collect();
        let policy = "the patch changes forbidden paths: src/x.py, tests/hidden/t.py";
        assert_eq!(
            submitter_detail("policy_violation", policy, &hidden),
            "the patch changes forbidden paths: src/x.py, <hidden test>"
        );
    }

    #[test]
    fn the_submitters_record_names_nothing_of_the_service_machine() {
        // A record as the grader writes it, run on a machine whose user is
        // 1234 and whose binary lies in /opt/service/bin.
        let record: ResultRecord =
            serde_json::from_str(include_str!("testdata_record.json")).unwrap();
        assert_eq!(record.provenance.sandbox.host_uid, Some(1234));
        let view = submitter_record(&record, None, false).to_string();
        assert!(
            !view.contains("1234") && !view.contains("/opt/service"),
            "{view}"
        );
        assert!(
            !view.contains("host_uid") && !view.contains("test_a"),
            "{view}"
        );
        assert!(view.contains("tests/test_public.py::test_b"), "{view}");
        let view = submitter_record(&record, None, false);
        assert_eq!(view["provenance"]["started_at"], "2026-11-30T00:00:00Z");
        assert_eq!(view["provenance"]["task_digest"], "");
        assert_eq!(view["duration_s"], 0.0);
        assert!(view["phases_s"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == 0.0));
    }
}
