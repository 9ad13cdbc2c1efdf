use std::path::{Path, PathBuf};

use pdl_grader::pipeline::shard::{MANIFEST_SCHEMA, SHARD_RULE};
use pdl_grader::pipeline::{JobKey, Shard, ShardManifest};
use serde_json::{json, Value};

use super::*;

fn record(instance: &str, model: &str, reward: f64, duration: f64) -> Value {
    json!({
        "instance_id": instance, "model_name_or_path": model, "kind": "prediction",
        "name": model, "reward": reward,
        "components": {"hidden_pass_fraction": reward, "public_regression": 1.0, "build_health": 1.0},
        "verdict": "graded", "tests": {}, "policy": {"violations": [], "dropped": []},
        "landed_rung": null, "duration_s": duration,
        "provenance": {"harness_version": "t", "task_digest": "sha256:t",
            "submission_digest": format!("sha256:{instance}{model}"),
            "environment": {"digest": "e", "python_version": "3", "packages": []},
            "test_timeout_s": 10.0, "started_at": format!("2026-01-01T00:00:{:02}Z", duration as u64)},
    })
}

fn key(r: &Value) -> String {
    let parsed: pdl_grader::ResultRecord = serde_json::from_value(r.clone()).unwrap();
    JobKey::of_record(&parsed).unwrap().as_str().to_string()
}

/// The whole plan: 12 predictions, in this order.
fn plan() -> Vec<Value> {
    (0..12)
        .map(|i| {
            record(
                &format!("task{}-v1", i % 4),
                &format!("m{i}"),
                (i % 5) as f64 / 4.0,
                1.0,
            )
        })
        .collect()
}

fn manifest(records: &[Value], shard: Shard) -> ShardManifest {
    let keys: Vec<String> = records.iter().map(key).collect();
    ShardManifest {
        schema: MANIFEST_SCHEMA.into(),
        command: "grade".into(),
        shard,
        rule: SHARD_RULE.into(),
        harness_version: "t".into(),
        plan_digest: "sha256:plan".into(),
        assigned: keys.iter().filter(|k| shard.owns(k)).cloned().collect(),
        plan: keys,
    }
}

/// Writes shard `shard`'s output (its records in the given order) and its
/// manifest into `dir`.
fn write_shard(
    dir: &Path,
    records: &[Value],
    shard: Shard,
    order: &dyn Fn(&mut Vec<Value>),
) -> PathBuf {
    let path = dir.join(format!("shard-{}.jsonl", shard.index));
    let mut mine: Vec<Value> = records
        .iter()
        .filter(|r| shard.owns(&key(r)))
        .cloned()
        .collect();
    order(&mut mine);
    let text: String = mine.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let m = manifest(records, shard);
    std::fs::write(
        ShardManifest::path_for_results(&path),
        serde_json::to_vec(&m).unwrap(),
    )
    .unwrap();
    path
}

fn read(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn shards_merge_into_plan_order() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    // Each shard wrote its records in completion order (reversed here).
    let shards: Vec<PathBuf> = Shard::all(3)
        .map(|s| write_shard(dir.path(), &records, s, &|v| v.reverse()))
        .collect();
    // In any order on the command line.
    let given = vec![shards[2].clone(), shards[0].clone(), shards[1].clone()];
    let out = dir.path().join("merged.jsonl");
    let merged = merge(&out, &given).unwrap();
    assert_eq!(merged.records, 12);
    assert_eq!(merged.duplicates, 0);
    assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
    assert_eq!(
        read(&out),
        records,
        "the records of one machine, in plan order"
    );
    // Nothing is overwritten.
    assert!(matches!(
        merge(&out, &given),
        Err(MergeError::OutputExists { .. })
    ));
}

#[test]
fn a_missing_shard_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    let one = write_shard(dir.path(), &records, Shard::new(1, 3).unwrap(), &|_| {});
    let three = write_shard(dir.path(), &records, Shard::new(3, 3).unwrap(), &|_| {});
    let out = dir.path().join("merged.jsonl");
    let err = merge(&out, &[one, three]).unwrap_err();
    assert!(matches!(&err, MergeError::MissingShards { missing, count: 3 } if missing == &[2]));
    assert_eq!(
        err.to_string(),
        "shard 2/3 is missing: no output of it was given"
    );
    assert!(!out.exists());
}

#[test]
fn an_incomplete_shard_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    let shards: Vec<PathBuf> = Shard::all(2)
        .map(|s| {
            write_shard(dir.path(), &records, s, &|v| {
                v.pop();
            })
        })
        .collect();
    let err = merge(&dir.path().join("m.jsonl"), &shards).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("shard 1/2 ("), "{text}");
    assert!(text.contains("is incomplete: 1 of its"), "{text}");
}

#[test]
fn an_exact_duplicate_is_kept_once_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    let shards: Vec<PathBuf> = Shard::all(2)
        .map(|s| write_shard(dir.path(), &records, s, &|_| {}))
        .collect();
    // Shard 2 also graded one of shard 1's jobs, with other timings.
    let stray = records
        .iter()
        .find(|r| Shard::new(1, 2).unwrap().owns(&key(r)))
        .unwrap();
    let mut again = stray.clone();
    again["duration_s"] = json!(7.5);
    again["provenance"]["started_at"] = json!("2026-02-02T00:00:00Z");
    let mut text = std::fs::read_to_string(&shards[1]).unwrap();
    text.push_str(&format!("{again}\n"));
    std::fs::write(&shards[1], text).unwrap();
    let out = dir.path().join("merged.jsonl");
    let merged = merge(&out, &shards).unwrap();
    assert_eq!(merged.duplicates, 1);
    assert_eq!(merged.warnings.len(), 1, "{:?}", merged.warnings);
    assert!(
        merged.warnings[0].contains("identically"),
        "{:?}",
        merged.warnings
    );
    assert_eq!(read(&out), records);
    // The same shard given twice is such a duplicate for each of its records.
    let out2 = dir.path().join("merged2.jsonl");
    let merged = merge(
        &out2,
        &[shards[0].clone(), shards[0].clone(), shards[1].clone()],
    )
    .unwrap();
    assert!(merged.duplicates >= 2);
    assert_eq!(read(&out2), records);
}

#[test]
fn conflicting_duplicates_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    let shards: Vec<PathBuf> = Shard::all(2)
        .map(|s| write_shard(dir.path(), &records, s, &|_| {}))
        .collect();
    let stray = records
        .iter()
        .find(|r| Shard::new(1, 2).unwrap().owns(&key(r)))
        .unwrap();
    let mut other = stray.clone();
    other["reward"] = json!(0.123);
    let mut text = std::fs::read_to_string(&shards[1]).unwrap();
    text.push_str(&format!("{other}\n"));
    std::fs::write(&shards[1], text).unwrap();
    let out = dir.path().join("merged.jsonl");
    let err = merge(&out, &shards).unwrap_err();
    assert!(
        matches!(&err, MergeError::Conflict { key: k, .. } if *k == key(stray)),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn shards_of_another_plan_or_without_a_manifest_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let records = plan();
    let shards: Vec<PathBuf> = Shard::all(2)
        .map(|s| write_shard(dir.path(), &records, s, &|_| {}))
        .collect();
    let manifest_path = ShardManifest::path_for_results(&shards[1]);
    let mut m: ShardManifest =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    m.plan_digest = "sha256:other".into();
    std::fs::write(&manifest_path, serde_json::to_vec(&m).unwrap()).unwrap();
    let err = merge(&dir.path().join("m.jsonl"), &shards).unwrap_err();
    assert!(matches!(err, MergeError::DifferentPlans { .. }), "{err}");
    std::fs::remove_file(&manifest_path).unwrap();
    let err = merge(&dir.path().join("m.jsonl"), &shards).unwrap_err();
    assert!(matches!(err, MergeError::NotAShard { .. }), "{err}");
}

#[test]
fn timings_and_host_details_are_not_compared() {
    let a = record("t-v1", "m", 0.5, 1.0);
    let mut b = a.clone();
    b["duration_s"] = json!(9.0);
    b["phases_s"] = json!({"tests": 3.0});
    b["provenance"]["sandbox"] = json!({"host_uid": 5});
    b["provenance"]["started_at"] = json!("later");
    assert_eq!(comparable(&a), comparable(&b));
    b["tests"] = json!({"t::x": "failed"});
    assert_ne!(comparable(&a), comparable(&b));
}
