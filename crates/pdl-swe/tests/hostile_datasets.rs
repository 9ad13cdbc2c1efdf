//! Hostile datasets through the real binary, in JSONL and Parquet: each case
//! of `tests/fixtures/hostile_datasets/cases.json` changes one field of the
//! fixture task and names the load error it deserves (field and message).
//! Every hostile row is refused with that error, the healthy row beside it
//! still loads and grades, and nothing is written outside the work folders.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn pdl_swe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn added_file(path: &str) -> String {
    format!("diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+import os\n")
}

/// One hostile row: the healthy row with the case's changes.
fn hostile_row(healthy: &Value, case: &Value, index: usize, outside: &Path) -> Value {
    let mut row = healthy.clone();
    let id = format!("pdl_hostile_{index:03}");
    row["task_id"] = id.clone().into();
    row["instance_id"] = format!("{id}-v1").into();
    for (key, value) in case["set"].as_object().unwrap() {
        let value = match value.as_str() {
            Some(s) => {
                let s = s.replace("OUTSIDE", outside.to_str().unwrap());
                if let Some(path) = s.strip_prefix("@HIDDEN:") {
                    Value::from(format!(
                        "{}{}",
                        row["test_patch"].as_str().unwrap(),
                        added_file(path)
                    ))
                } else if let Some(path) = s.strip_prefix("@FILE:") {
                    let mut files = row["files"].clone();
                    files
                        .as_array_mut()
                        .unwrap()
                        .push(serde_json::json!({"path": path, "content": "x"}));
                    files
                } else if let Some(n) = s.strip_prefix("@DEEP:") {
                    let n: usize = n.parse().unwrap();
                    Value::from(format!("deep: {}{}\n", "[".repeat(n), "]".repeat(n)))
                } else {
                    Value::from(s)
                }
            }
            None => value.clone(),
        };
        match key.strip_prefix("pdl_extras.") {
            Some(extra) => {
                let extras = row
                    .as_object_mut()
                    .unwrap()
                    .entry("pdl_extras")
                    .or_insert_with(|| serde_json::json!({}));
                let mut target = extras;
                let parts: Vec<&str> = extra.split('.').collect();
                for part in &parts[..parts.len() - 1] {
                    target = target
                        .as_object_mut()
                        .unwrap()
                        .entry(*part)
                        .or_insert_with(|| serde_json::json!({}));
                }
                target[parts[parts.len() - 1]] = value;
            }
            None => row[key.as_str()] = value,
        }
    }
    row
}

#[test]
fn hostile_rows_are_refused_by_name_and_the_healthy_row_is_graded() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let d = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let task = fixtures().join("tasks/pdl_fixture_calc_001");
    let out = pdl_swe(&[
        "tasks",
        "export",
        "--dataset",
        task.to_str().unwrap(),
        "--to",
        &d("healthy.jsonl"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let healthy: Value =
        serde_json::from_str(std::fs::read_to_string(d("healthy.jsonl")).unwrap().trim()).unwrap();
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("hostile_datasets/cases.json")).unwrap(),
    )
    .unwrap();
    let mut lines = vec![healthy.to_string()];
    for (i, case) in cases.iter().enumerate() {
        lines.push(hostile_row(&healthy, case, i, &outside).to_string());
    }
    std::fs::write(d("d.jsonl"), lines.join("\n") + "\n").unwrap();
    // The same rows as Parquet, written without any check.
    let (tasks, errors) = pdl_task::jsonl::parse_jsonl(&lines.join("\n"), "d.jsonl");
    assert!(errors.is_empty(), "{errors:?}");
    std::fs::write(
        d("d.parquet"),
        pdl_task::parquet_io::parquet_bytes(&tasks).unwrap(),
    )
    .unwrap();

    for dataset in [d("d.jsonl"), d("d.parquet")] {
        let out = pdl_swe(&["tasks", "list", "--dataset", &dataset, "--format", "json"]);
        assert_eq!(out.status.code(), Some(1));
        let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed.len(), 1, "{dataset}");
        assert_eq!(listed[0]["instance_id"], "pdl_fixture_calc_001-v1");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains('\u{1b}'), "raw escape on stderr: {stderr}");
        let error_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(error_lines.len(), cases.len(), "{stderr}");
        for (i, case) in cases.iter().enumerate() {
            let field = format!("`{}`", case["field"].as_str().unwrap());
            let message = case["message"].as_str().unwrap();
            let id = format!("pdl_hostile_{i:03}");
            let hit = error_lines.iter().any(|l| {
                (l.contains(&id) || case["name"].as_str().unwrap().starts_with("task_id"))
                    && l.contains(&field)
                    && l.contains(message)
            });
            assert!(
                hit,
                "{dataset}: case {}: no error with {field} and `{message}`:\n{stderr}",
                case["name"]
            );
        }

        // Grading (an empty prediction for every row) writes nothing outside.
        let preds: String = lines
            .iter()
            .map(|l| {
                let row: Value = serde_json::from_str(l).unwrap();
                serde_json::json!({"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": ""})
                    .to_string()
                    + "\n"
            })
            .collect();
        std::fs::write(d("preds.jsonl"), preds).unwrap();
        let records = d("out.jsonl");
        let _ = std::fs::remove_file(&records);
        let out = pdl_swe(&[
            "grade",
            "--dataset",
            &dataset,
            "--predictions",
            &d("preds.jsonl"),
            "--out",
            &records,
            "--work-dir",
            &d("work"),
            "--test-timeout",
            "20",
            "-j",
            "2",
        ]);
        assert!(
            out.status.code().is_some(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let graded: Vec<Value> = std::fs::read_to_string(&records)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|r: &Value| r["verdict"] == "graded")
            .collect();
        assert_eq!(graded.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(graded[0]["instance_id"], "pdl_fixture_calc_001-v1");
        assert!((graded[0]["reward"].as_f64().unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "something was written outside"
        );
        assert!(!Path::new("/OUTSIDE").exists());
    }

    // Exporting to a folder refuses every hostile row and leaves nothing outside.
    let out = pdl_swe(&[
        "tasks",
        "export",
        "--dataset",
        &d("d.jsonl"),
        "--to",
        &d("tree"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Vec<String> = std::fs::read_dir(d("tree"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, ["pdl_fixture_calc_001"]);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // A second export into the same folder overwrites nothing.
    let out = pdl_swe(&[
        "tasks",
        "export",
        "--dataset",
        &d("healthy.jsonl"),
        "--to",
        &d("tree"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists and is not empty"));
}
