//! The real binary on fixture tasks, with expected outcomes kept as data in
//! `tests/fixtures/expected_grades.json`: one prediction per verdict.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdl_swe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn grade_fixtures(out: &Path) -> Output {
    let tasks = fixtures().join("tasks");
    let predictions = fixtures().join("predictions.jsonl");
    pdl_swe(&[
        "grade",
        "--dataset",
        tasks.to_str().unwrap(),
        "--predictions",
        predictions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--test-timeout",
        "4",
        "-j",
        "2",
    ])
}

/// Checks one record against one expected entry (only the keys the entry names).
fn matches(record: &Value, expected: &Value) -> Result<(), String> {
    let e = expected.as_object().unwrap();
    if record["model_name_or_path"] != e["model"] || record["verdict"] != e["verdict"] {
        return Err("different model or verdict".into());
    }
    if let Some(reward) = e.get("reward") {
        let got = record["reward"].as_f64().unwrap();
        if (got - reward.as_f64().unwrap()).abs() > 1e-9 {
            return Err(format!("reward {got} != {reward}"));
        }
    }
    if let Some(rung) = e.get("landed_rung") {
        if &record["landed_rung"] != rung {
            return Err(format!("landed_rung {} != {rung}", record["landed_rung"]));
        }
    }
    for key in ["violations", "dropped"] {
        if let Some(v) = e.get(key) {
            if &record["policy"][key] != v {
                return Err(format!("policy.{key} {} != {v}", record["policy"][key]));
            }
        }
    }
    if let Some(tests) = e.get("tests").and_then(Value::as_object) {
        for (id, outcome) in tests {
            if &record["tests"][id] != outcome {
                return Err(format!("{id}: {} != {outcome}", record["tests"][id]));
            }
        }
    }
    if let Some(components) = e.get("components").and_then(Value::as_object) {
        for (k, v) in components {
            if record["components"][k].as_f64() != v.as_f64() {
                return Err(format!(
                    "components.{k}: {} != {v}",
                    record["components"][k]
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_verdict_is_graded_as_recorded_in_the_fixture_data() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.jsonl");
    let run = grade_fixtures(&out);
    // A harness error (the broken fixture task) makes the exit status 1.
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let got = records(&out);
    let expected: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_grades.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(got.len(), expected.len(), "{}", text(&run));
    let mut unused: Vec<&Value> = got.iter().collect();
    for e in &expected {
        let position = unused.iter().position(|r| matches(r, e).is_ok());
        match position {
            Some(i) => {
                unused.remove(i);
            }
            None => {
                let reasons: Vec<String> = got
                    .iter()
                    .filter(|r| r["model_name_or_path"] == e["model"])
                    .map(|r| format!("{}: {:?}", r["verdict"], matches(r, e)))
                    .collect();
                panic!("no record matches {e}: {reasons:?}");
            }
        }
    }
    // Every record carries the keys the specification names.
    for r in &got {
        for key in [
            "instance_id",
            "model_name_or_path",
            "kind",
            "reward",
            "components",
            "verdict",
            "tests",
            "policy",
            "landed_rung",
            "duration_s",
            "provenance",
        ] {
            assert!(r.get(key).is_some(), "{key} missing from {r}");
        }
    }
    let timeout = got
        .iter()
        .find(|r| r["model_name_or_path"] == "timeout")
        .unwrap();
    assert!(
        timeout["duration_s"].as_f64().unwrap() < 4.0 + 2.0 + 3.0,
        "{timeout}"
    );

    // Resuming grades nothing twice.
    let again = grade_fixtures(&out);
    assert!(
        String::from_utf8_lossy(&again.stdout)
            .contains(&format!("({} already graded and skipped)", expected.len())),
        "{}",
        text(&again)
    );
    assert_eq!(records(&out).len(), expected.len());

    // A torn last line (a killed run) is cut off and that prediction regraded.
    let mut content = std::fs::read_to_string(&out).unwrap();
    let last_start = content.trim_end().rfind('\n').unwrap() + 1;
    content.truncate(last_start + 10);
    std::fs::write(&out, &content).unwrap();
    let resumed = grade_fixtures(&out);
    let after = records(&out);
    assert_eq!(after.len(), expected.len(), "{}", text(&resumed));
}

#[test]
fn validate_and_calibrate_name_what_is_wrong() {
    let tasks = fixtures().join("tasks");
    let t = tasks.to_str().unwrap();
    let ok = pdl_swe(&[
        "validate",
        "--dataset",
        t,
        "pdl_fixture_calc_001",
        "--repeat",
        "2",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let broken = pdl_swe(&[
        "validate",
        "--dataset",
        t,
        "pdl_fixture_broken_002",
        "--format",
        "json",
    ]);
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    let report: Value = serde_json::from_slice(&broken.stdout).unwrap();
    let checks: Vec<&str> = report["tasks"][0]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(checks.contains(&"test_patch"), "{checks:?}");
    assert!(checks.contains(&"gold"), "{checks:?}");

    let cal = pdl_swe(&["calibrate", "--dataset", t, "--format", "json"]);
    assert_eq!(cal.status.code(), Some(1), "{}", text(&cal));
    let report: Value = serde_json::from_slice(&cal.stdout).unwrap();
    let rows = report["tasks"].as_array().unwrap();
    let calc = rows
        .iter()
        .find(|r| r["task_id"] == "pdl_fixture_calc_001")
        .unwrap();
    assert_eq!(calc["gold"], 1.0);
    assert_eq!(calc["noop"], 0.2);
    assert_eq!(calc["rungs"][0]["got"], 0.6);
    assert_eq!(calc["deviations"], serde_json::json!([]));
    let broken = rows
        .iter()
        .find(|r| r["task_id"] == "pdl_fixture_broken_002")
        .unwrap();
    assert!(!broken["deviations"].as_array().unwrap().is_empty());

    let unknown = pdl_swe(&["validate", "--dataset", t, "no_such_task"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no task called no_such_task"));
}

fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name == "__pycache__" || name.ends_with(".pyc") || name == ".pytest_cache" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_bundled_suite_survives_every_conversion_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let original = repo_root().join("tasks");
    for ext in ["parquet", "jsonl"] {
        let file = dir.path().join(format!("suite.{ext}"));
        let out = pdl_swe(&["tasks", "export", "--to", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let tree = dir.path().join(format!("tree-{ext}"));
        let out = pdl_swe(&[
            "tasks",
            "export",
            "--dataset",
            file.to_str().unwrap(),
            "--to",
            tree.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        // Certificates and reviews are not part of a task: conversion does
        // not carry them.
        let want: Vec<(String, Vec<u8>)> = read_tree(&original)
            .into_iter()
            .filter(|(name, _)| !matches!(name.split('/').nth(1), Some("certificates" | "reviews")))
            .collect();
        let got = read_tree(&tree);
        let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&got),
            names(&want),
            "tree → {ext} → tree changed the file list"
        );
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            assert!(
                a == b,
                "tree → {ext} → tree changed {name}:\n{}\n---\n{}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            );
        }
    }
    let list = pdl_swe(&["tasks", "list", "--format", "json"]);
    let tasks: Vec<Value> = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(tasks.len(), 18);
    let mut tiers: Vec<&str> = tasks.iter().map(|t| t["tier"].as_str().unwrap()).collect();
    tiers.sort();
    tiers.dedup_by(|a, b| a == b);
    assert_eq!(tiers, ["T1", "T2", "T3", "T4", "T5"]);
}

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = pdl_swe(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_datasets_and_predictions_are_named_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let tasks = fixtures().join("tasks");
    let t = tasks.to_str().unwrap();

    // A truncated Parquet file.
    pdl_swe(&["tasks", "export", "--dataset", t, "--to", &d("ok.parquet")]);
    let bytes = std::fs::read(d("ok.parquet")).unwrap();
    std::fs::write(d("cut.parquet"), &bytes[..bytes.len() / 2]).unwrap();
    let (code, err) = stderr_of(&["tasks", "list", "--dataset", &d("cut.parquet")]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cut.parquet: not a readable Parquet file"),
        "{err}"
    );

    // JSONL: a bad line, a wrong type, a missing column and a duplicate; the good row still loads.
    pdl_swe(&["tasks", "export", "--dataset", t, "--to", &d("ok.jsonl")]);
    let good = std::fs::read_to_string(d("ok.jsonl")).unwrap();
    let first = good.lines().next().unwrap().to_string();
    let mut wrong_type: Value = serde_json::from_str(&first).unwrap();
    wrong_type["instance_id"] = "x-v1".into();
    wrong_type["token_budget"] = "lots".into();
    let mut missing: Value = serde_json::from_str(&first).unwrap();
    missing["instance_id"] = "y-v1".into();
    missing.as_object_mut().unwrap().remove("PASS_TO_PASS");
    let bad = format!("{first}\n{{\"truncated\": \n{wrong_type}\n{missing}\n{first}\n");
    std::fs::write(d("bad.jsonl"), bad).unwrap();
    let out = pdl_swe(&[
        "tasks",
        "list",
        "--dataset",
        &d("bad.jsonl"),
        "--format",
        "json",
    ]);
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.len(), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.jsonl: line 2: invalid JSON"), "{err}");
    assert!(
        err.contains("bad.jsonl: line 3 (x-v1): `token_budget`: expected int64, found string"),
        "{err}"
    );
    assert!(
        err.contains("bad.jsonl: line 4 (y-v1): `PASS_TO_PASS`: missing column"),
        "{err}"
    );
    assert!(
        err.contains("`instance_id`: duplicate instance_id"),
        "{err}"
    );

    // A task tree with broken YAML and one with a non-UTF-8 fixture file.
    let trees = dir.path().join("trees");
    pdl_swe(&[
        "tasks",
        "export",
        "--dataset",
        t,
        "--to",
        trees.to_str().unwrap(),
    ]);
    let manifest = trees.join("pdl_fixture_calc_001/manifest.yaml");
    std::fs::write(&manifest, "instance_id: [unclosed\n").unwrap();
    std::fs::write(
        trees.join("pdl_fixture_broken_002/fixtures/src/blob.py"),
        [0xff, 0xfe, 0x00],
    )
    .unwrap();
    let (code, err) = stderr_of(&["tasks", "list", "--dataset", trees.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("pdl_fixture_calc_001: `manifest.yaml`"),
        "{err}"
    );
    assert!(
        err.contains("`fixtures/src/blob.py`: not UTF-8 text"),
        "{err}"
    );

    // Predictions that cannot be read at all are a usage error.
    let (code, err) = stderr_of(&[
        "grade",
        "--dataset",
        t,
        "--predictions",
        &d("missing.jsonl"),
        "--out",
        &d("o.jsonl"),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing.jsonl"), "{err}");
    std::fs::write(d("broken.json"), "[{\"instance_id\": ").unwrap();
    let (code, err) = stderr_of(&[
        "grade",
        "--dataset",
        t,
        "--predictions",
        &d("broken.json"),
        "--out",
        &d("o.jsonl"),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("broken.json: not a valid JSON list"), "{err}");
    let (code, err) = stderr_of(&["tasks", "list", "--dataset", &d("nothing.csv")]);
    assert_eq!(code, Some(2), "{err}");
}

/// `doctor` runs twice in a row (each run in scratch of its own) and reports
/// the limits a namespaces run is held to.
#[test]
fn doctor_reports_the_sandbox_and_can_run_again() {
    for _ in 0..2 {
        let out = pdl_swe(&["doctor", "--runs", "3", "--format", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["enforcement"]["sandbox"], "namespaces");
        assert_eq!(report["enforcement"]["network"], "loopback_only");
        assert_eq!(report["plain"]["runs"], 3);
    }
}

/// The summary `grade` prints keeps harness errors out of the mean (they are
/// the harness's, not the model's), with the report library's statistics.
#[test]
fn the_grade_summary_keeps_harness_errors_out_of_the_mean() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.jsonl");
    let first = grade_fixtures(&out);
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    // Resumed, everything is already graded: the summary is of the records.
    let tasks = fixtures().join("tasks");
    let predictions = fixtures().join("predictions.jsonl");
    let again = pdl_swe(&[
        "grade",
        "--dataset",
        tasks.to_str().unwrap(),
        "--predictions",
        predictions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let summary: Value = serde_json::from_slice(&again.stdout).expect("a JSON summary");
    let broken = &summary["broken-task"];
    assert_eq!(broken["harness_errors"], 1, "{summary}");
    assert_eq!(broken["scored"], 0, "{summary}");
    assert!(broken["mean_reward"].is_null(), "{summary}");
    assert_eq!(summary["empty"]["mean_reward"], 0.2, "{summary}");
}

/// A task whose own conftest decides how tests run (here: skipping every
/// test body when a comment is present) cannot calibrate: its runs are
/// refused, and the message names the hook.
#[test]
fn a_task_whose_conftest_decides_outcomes_does_not_calibrate() {
    let tasks = fixtures().join("hostile_tasks/pdl_open_backdoor_pyfunc");
    let out = pdl_swe(&["calibrate", "--dataset", tasks.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("implements pytest_pyfunc_call"),
        "{}",
        text(&out)
    );
}

/// A lock with hashes (pip's hash-checking mode) builds: the harness's own
/// pins then carry their hashes too.
#[test]
fn a_lock_with_hashes_builds_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("pdl_fixture_calc_001");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(fixtures().join("tasks/pdl_fixture_calc_001"))
        .arg(&task)
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::write(
        task.join("fixtures/requirements.lock"),
        "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let out = pdl_swe(&[
        "calibrate",
        "--dataset",
        task.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn the_agent_view_holds_no_hidden_test_reference_patch_or_rung() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.jsonl");
    let view = dir.path().join("view");
    let out = pdl_swe(&["tasks", "export", "--to", suite.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = pdl_swe(&["tasks", "export", "--agent-view", view.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows = records(&suite);
    assert_eq!(rows.len(), 18);
    for row in &rows {
        let task_id = row["task_id"].as_str().unwrap();
        let at = view.join(task_id);
        let mut names: Vec<String> = std::fs::read_dir(&at)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["ISSUE.md", "TASK.md", "repo", "task.json"],
            "{task_id}"
        );
        assert_eq!(
            std::fs::read_to_string(at.join("ISSUE.md"))
                .unwrap()
                .trim_end(),
            row["problem_statement"].as_str().unwrap().trim_end()
        );
        let meta: Value =
            serde_json::from_slice(&std::fs::read(at.join("task.json")).unwrap()).unwrap();
        assert_eq!(meta["token_budget"], row["token_budget"]);
        assert_eq!(meta["patch_policy"]["allowed"], row["patch_policy_allowed"]);
        // One commit, and the working tree is that commit.
        let repo = at.join("repo");
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .current_dir(&repo)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert_eq!(
            git(&["rev-list", "--count", "HEAD"]).trim(),
            "1",
            "{task_id}"
        );
        assert_eq!(git(&["status", "--porcelain"]).trim(), "", "{task_id}");
        // Every file of the view, and every blob of its repository.
        let mut seen = String::new();
        for (_, bytes) in read_tree(&at) {
            seen.push_str(&String::from_utf8_lossy(&bytes));
        }
        seen.push_str(&git(&["log", "-p", "--all"]));
        // The repository holds the task's files, exactly.
        let files: Vec<(String, Vec<u8>)> = read_tree(&repo)
            .into_iter()
            .filter(|(path, _)| !path.starts_with(".git/"))
            .collect();
        let mut expected: Vec<(String, Vec<u8>)> = row["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap().to_string(),
                    f["content"].as_str().unwrap().as_bytes().to_vec(),
                )
            })
            .collect();
        expected.sort();
        assert_eq!(files, expected, "{task_id}");
        // What the agent is meant to see: the files and the issue.
        let mut pristine: String = files
            .iter()
            .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
            .collect();
        pristine.push_str(row["problem_statement"].as_str().unwrap());
        // Lines the hidden tests, the gold patch and the rungs add that the
        // repository does not already hold must appear nowhere.
        let mut secret = vec![
            row["test_patch"].as_str().unwrap().to_string(),
            row["patch"].as_str().unwrap().to_string(),
        ];
        for rung in row["pdl_extras"]["ladder"].as_array().into_iter().flatten() {
            secret.push(rung["diff"].as_str().unwrap().to_string());
        }
        let mut checked = 0;
        for diff in &secret {
            for line in diff.lines() {
                let Some(added) = line.strip_prefix('+') else {
                    continue;
                };
                let added = added.trim();
                if line.starts_with("+++") || added.len() < 16 || pristine.contains(added) {
                    continue;
                }
                checked += 1;
                assert!(!seen.contains(added), "{task_id}: the view holds {added:?}");
            }
        }
        assert!(checked > 0, "{task_id}: nothing to look for");
    }
    // A view is never written over an earlier one.
    let out = pdl_swe(&["tasks", "export", "--agent-view", view.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not empty"), "{}", text(&out));
    // Nor through a link planted at a task's folder; a relative folder works.
    let linked = dir.path().join("linked");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("pdl_open_retry_cap_001")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(["tasks", "export", "--agent-view", "linked"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not a folder"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(linked.join("pdl_open_page_cursor_004/repo/.git").is_dir());
}

/// The certificates of a task in a task tree, as (file name, JSON), by name.
fn certificates_of(tree: &Path, task_id: &str) -> Vec<(String, Value)> {
    let dir = tree.join(task_id).join("certificates");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn certify_writes_dated_certificates_and_check_applies_the_tier_gates() {
    const T1: &str = "pdl_open_retry_cap_001";
    const T5: &str = "pdl_open_rule_cascade_017";
    let dir = tempfile::tempdir().unwrap();
    let gold = |id: &str| {
        std::fs::read_to_string(
            repo_root()
                .join("tasks")
                .join(id)
                .join("solution/gold.diff"),
        )
        .unwrap()
    };
    // The T1 task: solved once, missed once; the T5 task: three "agents" that
    // all submit the reference patch (so its gate must fail).
    let mut predictions = vec![
        serde_json::json!({"instance_id": format!("{T1}-v1"), "model_name_or_path": "solver/x-1", "model_patch": gold(T1)}),
        serde_json::json!({"instance_id": format!("{T1}-v1"), "model_name_or_path": "idle", "model_patch": ""}),
        serde_json::json!({"instance_id": "pdl_open_nowhere_999-v1", "model_name_or_path": "idle", "model_patch": ""}),
    ];
    // The T5 task's current version, whatever it is.
    let t5_instance =
        std::fs::read_to_string(repo_root().join("tasks").join(T5).join("manifest.yaml"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("instance_id: ").map(str::to_string))
            .unwrap();
    for m in ["frontier-a", "frontier-b", "frontier-c"] {
        predictions.push(serde_json::json!({"instance_id": t5_instance, "model_name_or_path": m, "model_patch": gold(T5)}));
    }
    let preds = dir.path().join("preds.jsonl");
    std::fs::write(
        &preds,
        predictions
            .iter()
            .map(|p| format!("{p}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let results = dir.path().join("results.jsonl");
    let out = pdl_swe(&[
        "grade",
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        results.to_str().unwrap(),
        "-j",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let graded = records(&results);
    assert_eq!(graded.len(), 6, "{}", text(&out));
    let unknown_line = graded
        .iter()
        .position(|r| r["instance_id"] == "pdl_open_nowhere_999-v1")
        .unwrap()
        + 1;

    let tree = dir.path().join("tree");
    let out = pdl_swe(&["tasks", "export", "--to", tree.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Without a task tree to write into, certify asks for --out.
    let out = pdl_swe(&["certify", results.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--out"), "{}", text(&out));

    let out = pdl_swe(&[
        "certify",
        results.to_str().unwrap(),
        "--dataset",
        tree.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:{unknown_line}: unknown task `pdl_open_nowhere_999-v1`",
            results.display()
        )),
        "{}",
        text(&out)
    );
    let t1 = certificates_of(&tree, T1);
    assert_eq!(t1.len(), 2, "{t1:?}");
    let (name, idle) = &t1[0];
    assert!(
        name.starts_with("idle-20") && name.ends_with(".json"),
        "{name}"
    );
    let task_record = graded
        .iter()
        .find(|r| r["instance_id"] == format!("{T1}-v1"))
        .unwrap();
    assert_eq!(idle["task_id"], T1);
    assert_eq!(idle["instance_id"], format!("{T1}-v1"));
    assert_eq!(idle["tier"], "T1");
    assert_eq!(
        idle["task_digest"],
        task_record["provenance"]["task_digest"]
    );
    assert_eq!(
        idle["harness_version"],
        task_record["provenance"]["harness_version"]
    );
    assert_eq!(idle["agent"], "idle");
    assert_eq!(idle["model"], "idle");
    assert_eq!(idle["budget"], Value::Null);
    assert_eq!(idle["rewards"], serde_json::json!([0.2]));
    assert_eq!(idle["attempts"], 1);
    assert_eq!(idle["solve_rate"], 0.0);
    assert_eq!(idle["verdicts"], serde_json::json!({"graded": 1}));
    let date = idle["date"].as_str().unwrap();
    assert!(date.ends_with('Z') && date.len() == 20, "{date}");
    assert!(name.contains(&date[..10]), "{name} {date}");
    let (name, solver) = &t1[1];
    assert!(name.starts_with("solver-x-1-"), "{name}");
    assert_eq!(solver["model"], "solver/x-1");
    assert_eq!(solver["rewards"], serde_json::json!([1.0]));
    assert_eq!(solver["solve_rate"], 1.0);
    let t5 = certificates_of(&tree, T5);
    assert_eq!(t5.len(), 3);
    assert!(t5
        .iter()
        .all(|(_, c)| c["rewards"] == serde_json::json!([1.0])));

    // Written again elsewhere, the same results are certified once: a second
    // run finds every certificate already there and writes none.
    let other = dir.path().join("other");
    for run in 0..2 {
        let out = pdl_swe(&[
            "certify",
            results.to_str().unwrap(),
            "--out",
            other.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (written, already) = if run == 0 { (5, 0) } else { (0, 5) };
        assert_eq!(summary["certificates"].as_array().unwrap().len(), written);
        assert_eq!(
            summary["already_certified"].as_array().unwrap().len(),
            already
        );
    }
    let names: Vec<String> = certificates_of(&other, T1)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let out = pdl_swe(&[
        "certify",
        results.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("already certified by") && text(&out).contains("wrote 0 certificates"),
        "{}",
        text(&out)
    );
    // Another spelling of the same results file is the same measurement.
    let respelled = dir.path().join(".").join("results.jsonl");
    let out = pdl_swe(&[
        "certify",
        respelled.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("wrote 0 certificates"),
        "{}",
        text(&out)
    );
    // A certificate never replaces an earlier one: a different measurement
    // under a taken name gets the next suffix.
    let first = other.join(T1).join("certificates").join(&names[0]);
    let mut edited: Value = serde_json::from_slice(&std::fs::read(&first).unwrap()).unwrap();
    let ids = edited["attempt_ids"].as_array().unwrap().len();
    edited["attempt_ids"] = serde_json::json!(vec!["0".repeat(32); ids]);
    std::fs::write(&first, serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
    let out = pdl_swe(&[
        "certify",
        results.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let names: Vec<String> = certificates_of(&other, T1)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("-2.json")), "{names:?}");

    // By default a T5 gate counts only episodes metered against the task's
    // budget: graded predictions certify nothing there.
    let out = pdl_swe(&[
        "certify",
        "--check",
        "--dataset",
        tree.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t5 = summary["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == T5)
        .unwrap()
        .clone();
    assert_eq!(t5["gate"]["status"], "insufficient", "{t5}");
    assert_eq!(t5["certificates"], 0, "{t5}");
    assert_eq!(t5["unmetered"].as_array().unwrap().len(), 3, "{t5}");

    // With the metering requirement dropped: the T1 task is reported, the T5
    // task fails its gate.
    let unmetered_gates = dir.path().join("unmetered-gates.yaml");
    std::fs::write(&unmetered_gates, "metered_tiers: []\n").unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "certify",
            "--check",
            "--dataset",
            tree.to_str().unwrap(),
            "--gates",
            unmetered_gates.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        pdl_swe(&args)
    };
    let out = check(&["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["supported"], false);
    let task = |id: &str| {
        summary["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_id"] == id)
            .unwrap()
            .clone()
    };
    let low = task(T1);
    assert_eq!(low["gate"]["status"], "no_gate");
    assert_eq!(low["supported"], true);
    assert_eq!(low["attempts"], 2);
    assert_eq!(low["solve_rate"], 0.5);
    let high = task(T5);
    assert_eq!(high["gate"]["status"], "fails");
    assert_eq!(high["supported"], false);
    assert_eq!(high["certificates"], 3);
    assert_eq!(high["attempts"], 3);
    assert_eq!(
        task("pdl_open_meter_rewind_016")["gate"]["status"],
        "insufficient"
    );

    let out = check(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |id: &str| {
        stdout
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("no line for {id}: {stdout}"))
            .to_string()
    };
    assert!(
        line(T1).contains("no gate") && line(T1).contains("0.500 (1/2)"),
        "{stdout}"
    );
    assert!(
        line(T5).contains("fails: 3 of 3 attempts scored 1.0"),
        "{stdout}"
    );
    assert!(stdout.contains("not supported: no certificate"), "{stdout}");

    // One task folder: its own certificates, its own verdict.
    let out = pdl_swe(&[
        "certify",
        "--check",
        "--dataset",
        tree.join(T1).to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A gates file can ask the T1 task for more attempts.
    let gates = dir.path().join("gates.yaml");
    std::fs::write(&gates, "min_attempts:\n  T1: 5\n").unwrap();
    let out = pdl_swe(&[
        "certify",
        "--check",
        "--dataset",
        tree.join(T1).to_str().unwrap(),
        "--gates",
        gates.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("2 attempts, the gate needs 5"),
        "{}",
        text(&out)
    );

    // The task list shows the status.
    let out = pdl_swe(&["tasks", "list", "--dataset", tree.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = |id: &str| stdout.lines().find(|l| l.contains(id)).unwrap().to_string();
    assert!(listed(T1).contains("T1 1/2 solved"), "{stdout}");
    assert!(listed(T5).contains("T5 unmetered"), "{stdout}");

    // Once the task changes, its certificates are stale and not counted.
    let manifest = tree.join(T1).join("manifest.yaml");
    let text_before = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text_before.replacen("domain: ", "domain: (revised) ", 1),
    )
    .unwrap();
    let out = check(&["--json"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let low = summary["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == T1)
        .unwrap();
    assert_eq!(low["certificates"], 0);
    assert_eq!(low["stale"].as_array().unwrap().len(), 2);
    assert_eq!(low["attempts"], 0);
    let out = pdl_swe(&["tasks", "list", "--dataset", tree.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout
            .lines()
            .find(|l| l.contains(T1))
            .unwrap()
            .contains("stale"),
        "{stdout}"
    );
}

/// Relative cache and work folders are the user's current folder's: a grade
/// run with both relative grades the gold patch to 1.0 (they are bound into
/// sandboxes whose working folder is elsewhere).
#[test]
fn relative_cache_and_work_folders_are_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let preds = fixtures().join("attacks/preds/00_gold.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .current_dir(dir.path())
        .args(["grade", "--predictions"])
        .arg(&preds)
        .args([
            "--out",
            "out.jsonl",
            "--cache-dir",
            "cache",
            "--work-dir",
            "work",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let records = records(&dir.path().join("out.jsonl"));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["verdict"], "graded", "{}", records[0]);
    assert_eq!(records[0]["reward"], 1.0, "{}", records[0]);
    assert!(dir.path().join("cache").is_dir() && dir.path().join("work").is_dir());
}
