//! End to end: a realistic run folder (four tasks × two agents × three samples,
//! calibration records, trajectory and patch files, a retried harness error, a
//! malformed line and a torn last line) through every rendering.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use pdl_grader::record::Provenance;
use pdl_grader::{Components, PolicyReport, ResultRecord, SubmissionKind, Verdict};
use pdl_report::{
    render_html, render_markdown, render_table, to_json, write_all, CalibrationStatus, RunReport,
};
use serde_json::{json, Value};

const BUILTIN: &str = "builtin";
const MINI: &str = "cmd:mini-swe-agent --model gpt-x";

fn record(instance_id: &str, kind: SubmissionKind, reward: f64) -> ResultRecord {
    ResultRecord {
        instance_id: instance_id.to_string(),
        model_name_or_path: None,
        kind,
        name: kind.name().to_string(),
        reward,
        components: Components::default(),
        verdict: Verdict::Graded,
        detail: None,
        tests: BTreeMap::new(),
        policy: PolicyReport::default(),
        landed_rung: None,
        compile_errors: Vec::new(),
        collection_errors: Vec::new(),
        duration_s: 3.0,
        phases_s: Default::default(),
        provenance: Provenance {
            harness_version: "0.1.0".to_string(),
            started_at: "2025-03-01T10:00:00Z".to_string(),
            ..Provenance::default()
        },
        suspicious: Vec::new(),
        episode: None,
        job_key: None,
    }
}

/// One planned episode: reward, end reason, landed rung, verdict.
struct Plan(f64, &'static str, Option<&'static str>, Verdict);

fn ok(reward: f64) -> Plan {
    Plan(reward, "finished", None, Verdict::Graded)
}

fn episode(dir: &Path, instance_id: &str, agent: &str, sample: u64, plan: &Plan) -> ResultRecord {
    let mut r = record(instance_id, SubmissionKind::Episode, plan.0);
    let slug = if agent == BUILTIN { "builtin" } else { "mini" };
    let key = format!("{instance_id}/{slug}/{sample}");
    let trajectory = format!("trajectories/{instance_id}/{slug}-{sample}.jsonl");
    let patch = format!("patches/{instance_id}-{slug}-{sample}.diff");
    // Every file exists but one trajectory, to show a missing file.
    if !(instance_id == "cache-ttl-v1" && slug == "mini" && sample == 2) {
        write(dir, &trajectory, "{\"role\": \"user\"}\n");
    }
    write(dir, &patch, "--- a/x.py\n+++ b/x.py\n");
    r.name = key.clone();
    r.model_name_or_path = Some("gpt-x".to_string());
    r.verdict = plan.3;
    r.landed_rung = plan.2.map(str::to_string);
    let tokens_in = 10_000 + 1000 * sample;
    r.episode = Some(
        serde_json::from_value(json!({
            "key": key, "agent": agent, "model": "gpt-x", "sample": sample,
            "tokens_in": tokens_in, "tokens_out": 500, "token_budget": 250_000,
            "end_reason": plan.1, "steps": 12, "wall_s": 30.5,
            "trajectory": trajectory, "patch": patch, "error": null,
        }))
        .unwrap(),
    );
    r
}

fn write(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn tiers() -> BTreeMap<String, String> {
    [
        ("calc-add-v1", "easy"),
        ("calc-div-v1", "easy"),
        ("parser-nest-v1", "hard"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Builds the run folder.
fn build_run(dir: &Path) {
    let campaign = json!({
        "started_at": "2025-03-01T09:59:00Z", "harness_version": "0.1.0",
        "dataset": "bundled", "model": "gpt-x", "api": "openai",
        "base_url": "https://api.example.com/v1", "agents": [BUILTIN, MINI], "samples": 3,
        "tasks": ["calc-add-v1", "calc-div-v1", "parser-nest-v1", "cache-ttl-v1"],
        "settings": {"jobs": 4, "token_budget": 250000},
    });
    std::fs::write(
        dir.join("campaign.json"),
        serde_json::to_string_pretty(&campaign).unwrap(),
    )
    .unwrap();

    let mut lines: Vec<String> = Vec::new();
    let push = |lines: &mut Vec<String>, r: &ResultRecord| {
        lines.push(serde_json::to_string(r).unwrap());
    };

    // Calibration: two calibrated tasks, one whose gold misses, one not run.
    for (task, gold) in [
        ("calc-add-v1", 1.0),
        ("calc-div-v1", 1.0),
        ("parser-nest-v1", 0.6),
    ] {
        push(&mut lines, &record(task, SubmissionKind::Gold, gold));
        push(&mut lines, &record(task, SubmissionKind::Noop, 0.2));
    }

    // A harness error later retried: the retry replaces it.
    let mut first_try = episode(dir, "calc-add-v1", BUILTIN, 0, &ok(0.0));
    first_try.verdict = Verdict::HarnessError;
    push(&mut lines, &first_try);

    let plans: Vec<(&str, &str, [Plan; 3])> = vec![
        ("calc-add-v1", BUILTIN, [ok(1.0), ok(1.0), ok(1.0)]),
        ("calc-add-v1", MINI, [ok(1.0), ok(0.2), ok(1.0)]),
        (
            "calc-div-v1",
            BUILTIN,
            [
                Plan(0.6, "finished", Some("half"), Verdict::Graded),
                Plan(0.6, "step_limit", Some("half"), Verdict::Graded),
                ok(1.0),
            ],
        ),
        (
            "calc-div-v1",
            MINI,
            [
                Plan(0.2, "budget_exhausted", None, Verdict::Graded),
                ok(0.2),
                ok(0.2),
            ],
        ),
        (
            "parser-nest-v1",
            BUILTIN,
            [
                Plan(0.0, "finished", None, Verdict::PatchFailed),
                ok(0.2),
                Plan(0.0, "finished", None, Verdict::HarnessError),
            ],
        ),
        (
            "parser-nest-v1",
            MINI,
            [
                Plan(0.2, "time_limit", None, Verdict::Graded),
                Plan(0.6, "finished", Some("partial"), Verdict::Graded),
                ok(0.2),
            ],
        ),
        ("cache-ttl-v1", BUILTIN, [ok(1.0), ok(0.6), ok(0.2)]),
        ("cache-ttl-v1", MINI, [ok(0.2), ok(0.2), ok(1.0)]),
    ];
    for (task, agent, samples) in &plans {
        for (sample, plan) in samples.iter().enumerate() {
            push(&mut lines, &episode(dir, task, agent, sample as u64, plan));
        }
        if *task == "calc-div-v1" && *agent == BUILTIN {
            lines.push("{\"instance_id\": \"calc-div-v1\", \"kind\": \"episode\"".to_string());
        }
    }
    let mut file = std::fs::File::create(dir.join("results.jsonl")).unwrap();
    for line in &lines {
        writeln!(file, "{line}").unwrap();
    }
    // A torn last line, as a killed run leaves it.
    write!(file, "{{\"instance_id\": \"cache-ttl-v1\", \"kind\": \"epi").unwrap();
}

fn group<'a>(r: &'a RunReport, task: &str, agent: &str) -> &'a pdl_report::Stats {
    &r.by_task
        .iter()
        .find(|g| g.instance_id == task && g.agent == agent)
        .unwrap()
        .stats
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-12)
}

#[test]
fn a_realistic_run_folder_gives_every_report() {
    let dir = tempfile::tempdir().unwrap();
    build_run(dir.path());
    let report = RunReport::load(dir.path(), &tiers()).unwrap();

    // Loading.
    assert_eq!(report.counts.malformed, 1);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert_eq!(report.warnings[0].line, Some(17));
    assert!(report.counts.torn_line.is_some());
    assert_eq!(report.counts.calibration_records, 6);
    assert_eq!(report.counts.episode_records, 25);
    assert_eq!(report.counts.duplicates, 1);
    assert_eq!(report.counts.episodes, 24);
    assert_eq!(report.counts.expected_episodes, Some(24));
    assert_eq!(report.counts.harness_errors, 1);

    // Per task.
    let s = group(&report, "calc-add-v1", BUILTIN);
    assert_eq!((s.episodes, s.scored, s.harness_errors), (3, 3, 0));
    assert_eq!(s.mean_reward, Some(1.0));
    assert_eq!(s.ci95.map(|c| (c.lo, c.hi)), Some((1.0, 1.0)));
    let s = group(&report, "calc-div-v1", BUILTIN);
    assert!(close(s.mean_reward, 2.2 / 3.0));
    assert_eq!(s.landed_rungs, BTreeMap::from([("half".to_string(), 2)]));
    let ci = s.ci95.unwrap();
    assert!(ci.lo >= 0.6 - 1e-12 && ci.hi <= 1.0 + 1e-12 && ci.lo < ci.hi);
    let s = group(&report, "calc-div-v1", MINI);
    assert_eq!(s.budget_exhausted, 1);
    assert_eq!(s.end_reasons["budget_exhausted"], 1);
    let s = group(&report, "parser-nest-v1", BUILTIN);
    assert_eq!((s.episodes, s.scored, s.harness_errors), (3, 2, 1));
    assert!(close(s.mean_reward, 0.1));
    assert_eq!(s.verdicts["patch_failed"], 1);
    // Tokens count whatever the verdict: the harness error's are spent too.
    assert_eq!(s.mean_tokens_in, Some(11_000.0));

    // Calibration.
    let status = |id: &str| report.task(id).unwrap().calibration.status;
    assert_eq!(status("calc-add-v1"), CalibrationStatus::Calibrated);
    assert_eq!(status("parser-nest-v1"), CalibrationStatus::Uncalibrated);
    assert_eq!(status("cache-ttl-v1"), CalibrationStatus::NotRun);
    assert_eq!(report.task("cache-ttl-v1").unwrap().tier, "?");

    // Per tier and overall.
    let tier = |t: &str, a: &str| {
        report
            .by_tier
            .iter()
            .find(|g| g.tier == t && g.agent == a)
            .unwrap()
    };
    assert!(close(tier("easy", BUILTIN).stats.mean_reward, 5.2 / 6.0));
    assert!(close(tier("easy", MINI).stats.mean_reward, 2.8 / 6.0));
    assert_eq!(tier("easy", BUILTIN).tasks, 2);
    assert_eq!(tier("easy", BUILTIN).calibration.calibrated, 2);
    assert_eq!(tier("hard", BUILTIN).calibration.uncalibrated, 1);
    let builtin = report.overall.iter().find(|g| g.agent == BUILTIN).unwrap();
    assert_eq!((builtin.tasks, builtin.stats.scored), (4, 11));
    assert!(close(builtin.stats.mean_reward, 7.2 / 11.0));

    // Missing files are noticed.
    let missing: Vec<_> = report
        .episodes
        .iter()
        .filter(|e| e.trajectory_exists == Some(false))
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(missing, ["cache-ttl-v1/mini/2"]);

    // The terminal table.
    let table = render_table(&report);
    for want in [
        "Per task",
        "Per tier",
        "Overall",
        "calc-div-v1",
        "0.733",
        "[1.000, 1.000]",
        "half: 2",
        "1/3",
        "uncalibrated (gold 0.600, noop 0.200)",
        "not run",
        "0.867",
        "0.467",
        "0.655",
        "24 of 24 expected",
        "results.jsonl:17",
        "2/2 calibrated",
    ] {
        assert!(table.contains(want), "table lacks {want:?}:\n{table}");
    }

    // JSON.
    let json = to_json(&report);
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["confidence"]["method"], "percentile_bootstrap");
    assert_eq!(json["campaign"]["model"], "gpt-x");
    assert_eq!(json["campaign"]["source"], "campaign_json");
    assert_eq!(json["counts"]["episodes"], 24);
    assert_eq!(json["by_task"].as_array().unwrap().len(), 8);
    assert_eq!(json["by_tier"].as_array().unwrap().len(), 6);
    assert_eq!(json["overall"].as_array().unwrap().len(), 2);
    let first = &json["by_task"][0];
    assert_eq!(first["instance_id"], "cache-ttl-v1");
    assert_eq!(first["calibration"], "not_run");
    assert!(first["ci95"]["lo"].is_f64());
    assert!(first["end_reasons"]["finished"].is_u64());
    let parser = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["instance_id"] == "parser-nest-v1")
        .unwrap();
    assert_eq!(parser["calibration"]["status"], "uncalibrated");
    assert_eq!(parser["calibration"]["gold"][0]["reward"], 0.6);
    assert_eq!(parser["calibration"]["gold"][0]["verdict"], "graded");
    let episode = &json["episodes"][0];
    for field in [
        "instance_id",
        "agent",
        "model",
        "sample",
        "reward",
        "verdict",
        "end_reason",
        "tokens_in",
        "tokens_out",
        "trajectory",
        "patch",
        "landed_rung",
    ] {
        assert!(episode.get(field).is_some(), "episode lacks {field}");
    }
    assert_eq!(json["warnings"][0]["line"], 17);

    // Markdown.
    let md = render_markdown(&report);
    for want in [
        "# Campaign report",
        "## Per tier",
        "## Per task",
        "## Calibration",
        "## Ladder landings",
        "[trajectory](trajectories/calc-add-v1/builtin-0.jsonl)",
        "0.867",
        "uncalibrated (gold 0.600, noop 0.200)",
    ] {
        assert!(md.contains(want), "markdown lacks {want:?}");
    }
    assert!(md.contains("half: 2"));

    // HTML.
    let html = render_html(&report);
    for want in [
        "<!DOCTYPE html>",
        "id=\"tiers\"",
        "id=\"tasks\"",
        "id=\"calibration\"",
        "id=\"ladder\"",
        "id=\"episodes\"",
        "href=\"trajectories/calc-div-v1/builtin-0.jsonl\"",
        "href=\"patches/calc-div-v1-builtin-0.diff\"",
        "(missing)",
        "0.867",
        "[1.000, 1.000]",
        "budget_exhausted",
        "patch_failed",
        "Content-Security-Policy",
        "cmd:mini-swe-agent --model gpt-x",
    ] {
        assert!(html.contains(want), "html lacks {want:?}");
    }
    assert_eq!(html.matches("<script").count(), 1);
    assert!(!html.contains("http://") && !html.contains("src="));

    // Files, with links from a report folder inside the run folder.
    let out = dir.path().join("report");
    let written = write_all(&report, &out).unwrap();
    assert_eq!(written.len(), 3);
    for name in ["report.json", "report.md", "index.html"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(page.contains("href=\"../trajectories/calc-div-v1/builtin-0.jsonl\""));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("(../patches/calc-div-v1-builtin-0.diff)"));
    let back: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(back, json);
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The same folder always gives the same report.
    let again = RunReport::load(dir.path(), &tiers()).unwrap();
    assert_eq!(to_json(&again), json);
}

#[test]
fn markup_in_the_run_is_escaped_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "evil<script>alert(1)</script>-v1";
    let mut r = episode(dir.path(), evil, BUILTIN, 0, &ok(0.0));
    r.verdict = Verdict::PatchFailed;
    r.detail = Some("patch does not apply: <script>steal()</script> & \"quotes\"".to_string());
    let ep = r.episode.as_mut().unwrap();
    ep.agent = Some("cmd:<img src=x onerror=alert(2)>".to_string());
    ep.trajectory = Some("javascript:alert(3)".to_string());
    ep.patch = Some("patches/a\"><script>alert(4)</script>.diff".to_string());
    let mut gold = record(evil, SubmissionKind::Gold, 0.5);
    gold.detail = Some("<b>bold</b>".to_string());
    let text = format!(
        "{}\n{}\n",
        serde_json::to_string(&gold).unwrap(),
        serde_json::to_string(&r).unwrap()
    );
    std::fs::write(dir.path().join("results.jsonl"), text).unwrap();
    let tiers = BTreeMap::from([(evil.to_string(), "<i>tier</i>".to_string())]);
    let report = RunReport::load(dir.path(), &tiers).unwrap();

    let html = render_html(&report);
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
    assert!(!html.contains("<img"));
    assert!(!html.contains("<i>tier"));
    assert!(html.contains("<code>javascript:alert(3)</code>"));
    assert!(!html.contains("href=\"javascript"));
    assert!(html.contains("evil&lt;script&gt;alert(1)&lt;/script&gt;-v1"));
    assert!(html.contains("&lt;script&gt;steal()&lt;/script&gt; &amp; &quot;quotes&quot;"));
    assert!(html.contains("cmd:&lt;img src=x onerror=alert(2)&gt;"));
    assert!(html.contains("href=\"patches/a%22%3E%3Cscript%3Ealert%284%29%3C/script%3E.diff\""));

    let md = render_markdown(&report);
    let bare_tag = md
        .char_indices()
        .any(|(i, c)| c == '<' && !md[..i].ends_with('\\'));
    assert!(!bare_tag, "an unescaped < in:\n{md}");
    assert!(md.contains("evil\\<script\\>"));
    assert!(!md.contains("](javascript"));

    // The JSON keeps the text as it is; escaping is the renderer's job.
    let json = to_json(&report);
    assert_eq!(json["episodes"][0]["instance_id"], evil);
}

#[test]
fn a_folder_without_campaign_json_is_inferred_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..2)
        .map(|s| serde_json::to_string(&episode(dir.path(), "t-v1", MINI, s, &ok(0.2))).unwrap())
        .collect();
    std::fs::write(dir.path().join("results.jsonl"), lines.join("\n") + "\n").unwrap();
    let report = RunReport::load(dir.path(), &BTreeMap::new()).unwrap();
    let c = &report.campaign;
    assert_eq!(c.source, pdl_report::CampaignSource::Inferred);
    assert_eq!(c.agents, [MINI]);
    assert_eq!(c.samples, Some(2));
    assert_eq!(c.model.as_deref(), Some("gpt-x"));
    assert_eq!(c.tasks, ["t-v1"]);
    assert_eq!(c.harness_version.as_deref(), Some("0.1.0"));
    assert_eq!(report.counts.expected_episodes, None);
    assert!(report.warnings.is_empty());
    let table = render_table(&report);
    assert!(table.contains("[0.200, 0.200]"), "{table}");
}
