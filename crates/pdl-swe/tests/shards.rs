//! Shards and merge end to end: the real binary grades a predictions file and
//! runs a campaign (against the replay model) in three shards, merges them,
//! and gets what one machine writes, record for record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pdl_episode::{ReplayConfig, ReplayScript, ReplayServer};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn pdl_swe(args: &[String]) -> Output {
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

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The records by key, timings and host details aside.
fn by_key(records: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut map: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in records {
        map.entry(r["job_key"].as_str().unwrap().to_string())
            .or_default()
            .push(pdl_scale::comparable(r));
    }
    map
}

/// The keys of the whole plan, in order, from a shard's manifest.
fn plan_of(manifest: &Path) -> Vec<String> {
    let m: Value = serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap();
    m["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn grade_in_three_shards_merges_into_what_one_machine_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Every fixture prediction but the one that times out (a timeout's
    // unfinished tests depend on the machine's load).
    let all = std::fs::read_to_string(fixtures().join("predictions.jsonl")).unwrap();
    let kept: String = all
        .lines()
        .filter(|l| !l.contains("\"timeout\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let predictions = dir.path().join("predictions.jsonl");
    std::fs::write(&predictions, kept).unwrap();
    let grade = |out: &Path, extra: &[&str]| {
        let mut args = s(&[
            "grade",
            "--dataset",
            &p(&fixtures().join("tasks")),
            "--predictions",
            &p(&predictions),
            "--out",
            &p(out),
            "--test-timeout",
            "20",
            "-j",
            "2",
        ]);
        args.extend(s(extra));
        let run = pdl_swe(&args);
        // 1: the broken fixture task is a harness error.
        assert!(matches!(run.status.code(), Some(0 | 1)), "{}", text(&run));
        run
    };
    let one = dir.path().join("one.jsonl");
    grade(&one, &[]);
    let shards: Vec<PathBuf> = (1..=3)
        .map(|i| {
            let out = dir.path().join(format!("shard-{i}.jsonl"));
            grade(&out, &["--shard", &format!("{i}/3")]);
            out
        })
        .collect();
    let sizes: Vec<usize> = shards.iter().map(|s| records(s).len()).collect();
    let single = records(&one);
    assert_eq!(sizes.iter().sum::<usize>(), single.len(), "{sizes:?}");

    // A missing shard is an error naming it; nothing is written.
    let merged = dir.path().join("merged.jsonl");
    let partial = pdl_swe(&s(&["merge", &p(&merged), &p(&shards[0]), &p(&shards[2])]));
    assert_eq!(partial.status.code(), Some(1), "{}", text(&partial));
    assert!(
        String::from_utf8_lossy(&partial.stderr).contains("shard 2/3 is missing"),
        "{}",
        text(&partial)
    );
    assert!(!merged.exists());

    let merge = pdl_swe(&s(&[
        "merge",
        &p(&merged),
        &p(&shards[2]),
        &p(&shards[0]),
        &p(&shards[1]),
    ]));
    assert_eq!(merge.status.code(), Some(0), "{}", text(&merge));
    let merged_records = records(&merged);
    // Plan order: the predictions file's order, as the manifest lists it.
    let plan = plan_of(&shards[0].with_file_name("shard-1.jsonl.shard.json"));
    let order: Vec<String> = merged_records
        .iter()
        .map(|r| r["job_key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, plan);
    assert_eq!(
        by_key(&merged_records),
        by_key(&single),
        "record for record"
    );

    // `report` reads the merged file as it reads one machine's.
    for results in [&one, &merged] {
        let folder = dir.path().join(format!(
            "report-{}",
            results.file_stem().unwrap().to_string_lossy()
        ));
        std::fs::create_dir(&folder).unwrap();
        std::fs::copy(results, folder.join("results.jsonl")).unwrap();
        let report = pdl_swe(&s(&[
            "report",
            &p(&folder),
            "--dataset",
            &p(&fixtures().join("tasks")),
            "--format",
            "json",
        ]));
        assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    }

    // A shard's output is resumed only by that shard of that plan.
    let wrong = pdl_swe(&s(&[
        "grade",
        "--dataset",
        &p(&fixtures().join("tasks")),
        "--predictions",
        &p(&predictions),
        "--out",
        &p(&shards[0]),
        "--shard",
        "2/3",
    ]));
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("grade --shard 1/3"),
        "{}",
        text(&wrong)
    );
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

#[test]
fn a_campaign_in_three_shards_merges_into_what_one_machine_writes() {
    let replies = json!([
        call("view_file", json!({"path": "src/calc.py"})),
        call(
            "replace_in_file",
            json!({"path": "src/calc.py", "old_text": "range(abs(b) - 1)", "new_text": "range(abs(b))"})
        ),
        call("finish", json!({"summary": "mul now adds a |b| times"})),
    ]);
    let script = json!({"conversations": [{"replies": replies}]}).to_string();
    let script = ReplayScript::parse(&script, Path::new("script.json")).unwrap();
    let model = ReplayServer::start(ReplayConfig::new(script)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let campaign = |out: &Path, extra: &[&str]| {
        let mut args = s(&[
            "run",
            "--dataset",
            &p(&fixtures().join("tasks")),
            "--task",
            "pdl_fixture_calc_001",
            "--agent",
            "builtin",
            "--samples",
            "4",
            "--model",
            "replay",
            "--base-url",
            &model.base_url(),
            "--api",
            "openai",
            "--out",
            &p(out),
            "--test-timeout",
            "30",
            "--format",
            "json",
        ]);
        args.extend(s(extra));
        let run = pdl_swe(&args);
        assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    };
    let one = dir.path().join("one");
    campaign(&one, &[]);
    let shards: Vec<PathBuf> = (1..=3)
        .map(|i| {
            let out = dir.path().join(format!("shard-{i}"));
            campaign(&out, &["--shard", &format!("{i}/3")]);
            assert!(out.join("shard.json").is_file());
            out
        })
        .collect();
    let merged = dir.path().join("merged");
    let mut args = s(&["merge", &p(&merged)]);
    args.extend(shards.iter().map(|s| p(s)));
    let merge = pdl_swe(&args);
    assert_eq!(merge.status.code(), Some(0), "{}", text(&merge));

    let single = records(&one.join("results.jsonl"));
    let merged_records = records(&merged.join("results.jsonl"));
    assert_eq!(
        single.len(),
        3 + 4,
        "gold, noop, one rung and four episodes"
    );
    assert_eq!(
        by_key(&merged_records),
        by_key(&single),
        "record for record"
    );
    let plan = plan_of(&shards[0].join("shard.json"));
    let order: Vec<String> = merged_records
        .iter()
        .map(|r| r["job_key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, plan, "plan order: ladder, calibration, episodes");
    // Every episode's files came along, and the campaign knows every episode.
    let settings: Value =
        serde_json::from_slice(&std::fs::read(merged.join("campaign.json")).unwrap()).unwrap();
    let keys = settings["episode_keys"].as_array().unwrap();
    assert_eq!(keys.len(), 4);
    for r in merged_records.iter().filter(|r| r["kind"] == "episode") {
        for file in ["trajectory", "patch"] {
            let rel = r["episode"][file].as_str().unwrap();
            assert!(merged.join(rel).is_file(), "{rel}");
        }
    }
    // The reports of the merged folder are those of one machine.
    let report = |folder: &Path| {
        let out = pdl_swe(&s(&[
            "report",
            &p(folder),
            "--dataset",
            &p(&fixtures().join("tasks")),
            "--format",
            "json",
        ]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
        strip_timings(&mut v);
        v
    };
    assert_eq!(report(&merged), report(&one));
}

/// Removes what depends on the clock and the machine from a report. A
/// record's line in results.jsonl is also left out: one machine running
/// episodes in parallel writes them in the order they finish, the merge in
/// plan order.
fn strip_timings(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| {
                !(k.contains("duration")
                    || k.contains("wall")
                    || k.ends_with("_at")
                    || k.contains("path")
                    || k == "run_dir"
                    || k == "line"
                    || k.contains("time"))
            });
            map.values_mut().for_each(strip_timings);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_timings),
        _ => {}
    }
}
