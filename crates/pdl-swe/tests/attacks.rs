//! The regression corpus of known attacks on the grader, run through the real
//! binary on the bundled tasks: every attack of the security reviews (each a
//! predictions file in `fixtures/attacks/preds`, its deserved verdicts in
//! `fixtures/attacks/expected.json`), the forgeries written against the
//! signed outcome channel (`fixtures/attacks/forgeries`), graded from a
//! predictions file and written into an agent's workspace by an external agent.
//!
//! For each attack the test checks, as the reviews did: the verdict and reward
//! are among the deserved ones; nothing was written outside the work folder
//! (the payloads leave markers under `/tmp/pdl-attack` on success); no secret of
//! the harness's environment reached a result; the harness's own memory stayed
//! under the attack's bound and the host's free memory did not fall by more than
//! its bound; no process outlived the grading; the run ended in time; and hidden
//! test source appears in no result.
//!
//! The attacks run one after another in one test: several fork storms or memory
//! hogs at once would measure each other.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SECRET: &str = "xyz-host-secret-123";
const WORK: &str = "/tmp/pdl-attack";
const MARKERS: &[&str] = &["RCE_PROOF", "DOTDOT_ESCAPE"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attacks")
}

fn tasks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks")
}

fn mem_available_mb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How one run of the binary went.
struct Measured {
    finished: bool,
    peak_rss_mb: f64,
    host_drop_mb: f64,
    seconds: f64,
    output: String,
}

/// Runs the binary, sampling its memory and the host's, killing it at `limit`.
fn measured(args: &[String], limit: Duration, env: &[(&str, String)]) -> Measured {
    measured_program(Path::new(env!("CARGO_BIN_EXE_pdl-swe")), args, limit, env)
}

/// Runs `program` (the binary or an installed copy of it) the same way.
fn measured_program(
    program: &Path,
    args: &[String],
    limit: Duration,
    env: &[(&str, String)],
) -> Measured {
    let base = mem_available_mb();
    let mut low = base;
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let readers = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = err.read_to_string(&mut text);
        text
    });
    let pid = child.id();
    let mut peak = 0u64;
    let mut finished = true;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        peak = peak.max(rss_kb(pid));
        low = low.min(mem_available_mb());
        if started.elapsed() > limit || peak > 2048 * 1024 || low < 2048.0 {
            // SAFETY: signalling the process group we started.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            let _ = child.wait();
            finished = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Measured {
        finished,
        peak_rss_mb: peak as f64 / 1024.0,
        host_drop_mb: base - low,
        seconds: started.elapsed().as_secs_f64(),
        output: readers.join().unwrap_or_default(),
    }
}

/// Whether a record's verdict and reward are among `allow`'s
/// `[verdict, max]` or `[verdict, min, max]` entries.
fn allowed(record: &Value, allow: &Value) -> bool {
    let verdict = record["verdict"].as_str().unwrap_or("");
    let reward = record["reward"].as_f64().unwrap_or(-1.0);
    allow.as_array().unwrap().iter().any(|a| {
        let a = a.as_array().unwrap();
        let (lo, hi) = if a.len() == 3 {
            (a[1].as_f64().unwrap(), a[2].as_f64().unwrap())
        } else {
            (0.0, a[1].as_f64().unwrap())
        };
        a[0] == verdict && lo - 1e-9 <= reward && reward <= hi + 1e-9
    })
}

fn processes_matching(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let mut buf = Vec::new();
        if std::fs::File::open(entry.path().join("cmdline"))
            .and_then(|mut f| f.read_to_end(&mut buf))
            .is_ok()
            && String::from_utf8_lossy(&buf)
                .replace('\0', " ")
                .contains(needle)
        {
            found.push(pid);
        }
    }
    found
}

/// A snippet made harmless to itself: its top-level call wrapped so that an
/// attack that finds nothing to tamper with changes nothing.
fn wrapped(snippet: &str) -> String {
    snippet
        .lines()
        .map(|line| {
            let trimmed = line.trim_end();
            if trimmed.starts_with("_pdl_") && trimmed.ends_with("()") && !trimmed.contains(' ') {
                format!("try:\n    {trimmed}\nexcept BaseException:\n    pass")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A patch appending `code` to the retry task's `src/retry.py`.
fn appending_patch(code: &str) -> String {
    let path = tasks().join("pdl_open_retry_cap_001/fixtures/src/retry.py");
    let original = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    let n = lines.len();
    let context = &lines[n - 3..];
    let added: Vec<&str> = code.lines().collect();
    let mut patch = format!(
        "--- a/src/retry.py\n+++ b/src/retry.py\n@@ -{},3 +{},{} @@\n",
        n - 2,
        n - 2,
        3 + added.len()
    );
    for l in context {
        patch.push_str(&format!(" {l}\n"));
    }
    for l in added {
        patch.push_str(&format!("+{l}\n"));
    }
    patch
}

struct Outcome {
    name: String,
    problems: Vec<String>,
    seconds: f64,
    peak_rss_mb: f64,
}

/// Grades one predictions file the way the attack's spec says.
fn grade_attack(name: &str, spec: &Value, preds: &Path, scratch: &Path) -> Outcome {
    let out = scratch.join(format!("{name}.results.jsonl"));
    let dataset = spec["dataset"].as_str().unwrap_or("pdl_open_retry_cap_001");
    let mut args: Vec<String> = vec![
        "grade".into(),
        "--predictions".into(),
        preds.display().to_string(),
        "--out".into(),
        out.display().to_string(),
        "--test-timeout".into(),
        spec["test_timeout"].as_u64().unwrap_or(20).to_string(),
        "-j".into(),
        spec["jobs"].as_u64().unwrap_or(1).to_string(),
    ];
    if dataset != "bundled" {
        args.push("--dataset".into());
        // A task the suite has since replaced by a new version is kept, as
        // the attack was written against it, under fixtures/attacks/datasets.
        let kept = fixtures().join("datasets").join(dataset);
        let dir = if kept.is_dir() {
            kept
        } else {
            tasks().join(dataset)
        };
        args.push(dir.display().to_string());
    }
    let work = scratch.join(format!("{name}.work"));
    if spec["keep"].as_bool() == Some(true) {
        args.extend([
            "--work-dir".into(),
            work.display().to_string(),
            "--keep-workdirs".into(),
        ]);
    }
    let mut problems = Vec::new();
    let limit = Duration::from_secs(spec["limit_s"].as_u64().unwrap_or(120));
    let env = [("MY_SECRET", SECRET.to_string())];
    let run = if spec["installed_copy"].as_bool() == Some(true) {
        // The harness installed under a system folder every sandbox sees, as a
        // pip-installed binary would be: that copy is the program that runs.
        let copy = PathBuf::from("/usr/local/bin/pdl-swe-attack-copy");
        if let Err(e) = std::fs::copy(env!("CARGO_BIN_EXE_pdl-swe"), &copy) {
            assert!(
                std::env::var("PDL_SWE_ALLOW_NO_ROOT").as_deref() == Ok("1"),
                "cannot install a copy of the binary in /usr/local/bin ({e}); \
                 run as root, or set PDL_SWE_ALLOW_NO_ROOT=1 to leave this attack out"
            );
            return Outcome {
                name: name.into(),
                problems,
                seconds: 0.0,
                peak_rss_mb: 0.0,
            };
        }
        let run = measured_program(&copy, &args, limit, &env);
        let _ = std::fs::remove_file(&copy);
        run
    } else {
        measured(&args, limit, &env)
    };
    if !run.finished {
        problems.push(format!("did not end within {} s", limit.as_secs()));
    }
    let rss_bound = spec["rss_mb"].as_f64().unwrap_or(300.0);
    if run.peak_rss_mb > rss_bound {
        problems.push(format!(
            "harness peak RSS {:.0} MiB > {rss_bound}",
            run.peak_rss_mb
        ));
    }
    let drop_bound = spec["host_mem_drop_mb"].as_f64().unwrap_or(4096.0);
    if run.host_drop_mb > drop_bound {
        problems.push(format!(
            "host memory fell by {:.0} MiB during one grading",
            run.host_drop_mb
        ));
    }
    if let Some(needle) = spec["orphan"].as_str() {
        std::thread::sleep(Duration::from_secs(1));
        let left = processes_matching(needle);
        if !left.is_empty() {
            problems.push(format!("{} process(es) outlived the grading", left.len()));
            for pid in left {
                // SAFETY: killing a leftover the attack started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    // Patterns of what the attack writes when it succeeds: a literal, or a
    // literal followed by `[1-9]` (a non-zero count).
    for pattern in spec["work_no_regex"].as_array().into_iter().flatten() {
        let pattern = pattern.as_str().unwrap();
        let (literal, counted) = match pattern.strip_suffix("[1-9]") {
            Some(head) => (head, true),
            None => (pattern, false),
        };
        for entry in walkdir(&work) {
            let text = std::fs::read(&entry)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let found = text.match_indices(literal).any(|(i, _)| {
                !counted
                    || text[i + literal.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| ('1'..='9').contains(&c))
            });
            if found {
                problems.push(format!(
                    "task code extracted {pattern:?} (in {})",
                    entry.display()
                ));
            }
        }
    }
    check_results(name, spec, &out, &run, &mut problems);
    Outcome {
        name: name.into(),
        problems,
        seconds: run.seconds,
        peak_rss_mb: run.peak_rss_mb,
    }
}

fn walkdir(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out
}

fn check_results(name: &str, spec: &Value, out: &Path, run: &Measured, problems: &mut Vec<String>) {
    for marker in MARKERS {
        if Path::new(WORK).join(marker).exists() {
            problems.push(format!("{marker} written outside the work folder"));
            let _ = std::fs::remove_file(Path::new(WORK).join(marker));
        }
    }
    for entry in std::fs::read_dir(WORK).into_iter().flatten().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("MODELNAME_ESC")
        {
            problems.push("a model name escaped into a path".into());
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let text = std::fs::read_to_string(out).unwrap_or_default();
    if text.contains(SECRET) {
        problems.push("a harness secret appears in the results".into());
    }
    for needle in spec["no_text"].as_array().into_iter().flatten() {
        let needle = needle.as_str().unwrap();
        if text.contains(needle) {
            problems.push(format!("the results contain {needle:?}"));
        }
    }
    let mut records = Vec::new();
    for line in text.lines() {
        match serde_json::from_str::<Value>(line) {
            Ok(r) if r["kind"].as_str().unwrap_or("prediction") == "prediction" => records.push(r),
            Ok(_) => {}
            Err(_) => problems.push("a torn or non-JSON line in the results".into()),
        }
    }
    if let Some(want) = spec["records"].as_u64() {
        if records.len() as u64 != want {
            problems.push(format!("{} records, expected {want}", records.len()));
        }
    }
    if records.is_empty() && run.finished {
        problems.push(format!("no record written ({})", run.output.trim()));
    }
    for r in &records {
        let who = r["model_name_or_path"].as_str().unwrap_or("?");
        let allow = spec["per_model"].get(who).unwrap_or(&spec["allow"]);
        if let Some(want) = spec["detail_contains"].as_str() {
            let detail = r["detail"].as_str().unwrap_or("");
            if !detail.contains(want) {
                problems.push(format!("{name}: detail {detail:?} lacks {want:?}"));
            }
        }
        if !allowed(r, allow) {
            problems.push(format!(
                "{name}/{}: {} {:.3} not in {allow} ({})",
                &who[..who.len().min(20)],
                r["verdict"],
                r["reward"].as_f64().unwrap_or(-1.0),
                r["detail"].as_str().unwrap_or("")
            ));
        }
    }
}

/// An external agent appends `snippet` to `src/retry.py` in its workspace; the
/// episode is graded like any other.
fn campaign_attack(name: &str, snippet: &str, allow: &Value, scratch: &Path) -> Outcome {
    let agent_dir = scratch.join(format!("{name}.agent"));
    std::fs::create_dir_all(&agent_dir).unwrap();
    let file = agent_dir.join("attack.py");
    std::fs::write(&file, wrapped(snippet)).unwrap();
    let run_dir = scratch.join(format!("{name}.run"));
    let args: Vec<String> = vec![
        "run".into(),
        "--agent-cmd".into(),
        format!("cat {} >> src/retry.py", file.display()),
        "--agent-path".into(),
        agent_dir.display().to_string(),
        "--model".into(),
        "dummy".into(),
        "--base-url".into(),
        "http://127.0.0.1:9/v1".into(),
        "--out".into(),
        run_dir.display().to_string(),
        "--dataset".into(),
        tasks().join("pdl_open_retry_cap_001").display().to_string(),
        "--test-timeout".into(),
        "20".into(),
        "-j".into(),
        "1".into(),
    ];
    let env = [
        ("MY_SECRET", SECRET.to_string()),
        ("OPENAI_API_KEY", format!("sk-upstream-{SECRET}")),
    ];
    let run = measured(&args, Duration::from_secs(300), &env);
    let report = Command::new(env!("CARGO_BIN_EXE_pdl-swe"))
        .args(["report".to_string(), run_dir.display().to_string()])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let mut problems = Vec::new();
    if !run.finished {
        problems.push("the campaign did not finish".into());
    }
    if !report.status.success() {
        problems.push(format!(
            "the report failed: {}",
            String::from_utf8_lossy(&report.stderr)
        ));
    }
    for entry in walkdir(&run_dir) {
        let text = std::fs::read(&entry)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if text.contains(SECRET) {
            problems.push(format!(
                "a harness secret appears in {}",
                entry.strip_prefix(&run_dir).unwrap().display()
            ));
        }
    }
    let results = std::fs::read_to_string(run_dir.join("results.jsonl")).unwrap_or_default();
    let episodes: Vec<Value> = results
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["episode"].is_object())
        .collect();
    if episodes.is_empty() {
        problems.push(format!("no episode record ({})", run.output.trim()));
    }
    for e in &episodes {
        if !allowed(e, allow) {
            problems.push(format!(
                "episode: {} {:.3} not in {allow} ({})",
                e["verdict"],
                e["reward"].as_f64().unwrap_or(-1.0),
                e["detail"].as_str().unwrap_or("")
            ));
        }
    }
    Outcome {
        name: name.into(),
        problems,
        seconds: run.seconds,
        peak_rss_mb: run.peak_rss_mb,
    }
}

/// The 100 MB text patch of C27, made here rather than kept in the repository.
fn huge_text_patch(path: &Path) {
    let n = 1_000_000;
    let pad = "x".repeat(80);
    let mut body = String::with_capacity(n * 100);
    for i in 0..n {
        body.push_str(&format!("+x_{i:07} = '{pad}'\n"));
    }
    let patch = format!(
        "diff --git a/src/huge.py b/src/huge.py\nnew file mode 100644\n--- /dev/null\n+++ b/src/huge.py\n@@ -0,0 +1,{n} @@\n{body}"
    );
    let line = json!({"instance_id": "pdl_open_retry_cap_001-v1", "model_name_or_path": "redteam", "model_patch": patch});
    std::fs::write(path, format!("{line}\n")).unwrap();
}

fn unzip(from: &Path, to: &Path) {
    let bytes = std::fs::read(from).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .unwrap();
    std::fs::write(to, text).unwrap();
}

#[test]
fn the_known_attacks_are_contained() {
    std::fs::create_dir_all(WORK).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let expected: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    let only: Vec<String> = std::env::var("PDL_SWE_ATTACKS")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut outcomes = Vec::new();
    for (name, spec) in &expected {
        if name.starts_with('_') || !wanted(name) {
            continue;
        }
        let outcome = if spec["campaign"].as_bool() == Some(true) {
            let snippet = std::fs::read_to_string(
                fixtures()
                    .join("snippets")
                    .join(spec["snippet"].as_str().unwrap()),
            )
            .unwrap();
            campaign_attack(name, &snippet, &spec["allow"], scratch.path())
        } else {
            let preds = scratch.path().join(format!("{name}.jsonl"));
            let stored = fixtures().join("preds").join(format!("{name}.jsonl"));
            let zipped = fixtures().join("preds").join(format!("{name}.jsonl.gz"));
            if spec["generate"].as_bool() == Some(true) {
                huge_text_patch(&preds);
            } else if zipped.exists() {
                unzip(&zipped, &preds);
            } else {
                std::fs::copy(&stored, &preds).unwrap();
            }
            grade_attack(name, spec, &preds, scratch.path())
        };
        outcomes.push(outcome);
    }
    // The forgeries written against the signed channel: tampered, or exactly
    // the do-nothing 0.2, both from a predictions file and from a workspace.
    let allow = json!([["tampered", 0, 0], ["graded", 0.2, 0.2]]);
    let mut forgeries: Vec<PathBuf> = std::fs::read_dir(fixtures().join("forgeries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    forgeries.sort();
    for path in forgeries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if !wanted(&name) {
            continue;
        }
        let snippet = std::fs::read_to_string(&path).unwrap();
        let preds = scratch.path().join(format!("{name}.jsonl"));
        let line = json!({
            "instance_id": "pdl_open_retry_cap_001-v1",
            "model_name_or_path": name,
            "model_patch": appending_patch(&wrapped(&snippet)),
        });
        std::fs::write(&preds, format!("{line}\n")).unwrap();
        // A snippet may demand to be caught: `# expect: tampered` on its first line.
        let allow = if snippet.starts_with("# expect: tampered") {
            json!([["tampered", 0, 0]])
        } else {
            allow.clone()
        };
        let spec = json!({"allow": allow, "records": 1});
        outcomes.push(grade_attack(&name, &spec, &preds, scratch.path()));
        outcomes.push(campaign_attack(
            &format!("{name}-campaign"),
            &snippet,
            &allow,
            scratch.path(),
        ));
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.problems.is_empty())
        .map(|o| format!("{}: {}", o.name, o.problems.join("; ")))
        .collect();
    for o in &outcomes {
        eprintln!(
            "{} {} ({:.1} s, {:.0} MiB)",
            if o.problems.is_empty() {
                "ok  "
            } else {
                "FAIL"
            },
            o.name,
            o.seconds,
            o.peak_rss_mb
        );
    }
    assert!(!outcomes.is_empty(), "no attack matched PDL_SWE_ATTACKS");
    assert!(
        failed.is_empty(),
        "{} of {} attacks not contained:\n{}",
        failed.len(),
        outcomes.len(),
        failed.join("\n")
    );
}
