//! `pdl-swe doctor`: what this machine offers the harness, and what the sandbox
//! costs per run.

use std::time::{Duration, Instant};

use pdl_grader::env::Installer;
use pdl_grader::{find_interpreter, EnvManager};
use pdl_sandbox::{PlainRunner, ProcessRunner, SandboxCommand, SandboxKind};
use serde::Serialize;

use crate::cli::{DoctorArgs, Format};
use crate::exit::{self, ExitError};
use crate::render::{print_json, table};
use crate::settings::default_cache_dir;

#[derive(Serialize)]
struct StartCost {
    runs: usize,
    median_ms: f64,
    p90_ms: f64,
}

#[derive(Serialize)]
struct Report {
    version: &'static str,
    python: Result<String, String>,
    installer: String,
    cache_dir: String,
    git: Result<String, String>,
    namespaces: Result<StartCost, String>,
    plain: StartCost,
}

fn start_cost(runner: &dyn ProcessRunner, runs: usize) -> Result<StartCost, String> {
    let scratch = std::env::temp_dir().join(format!("pdl-swe-doctor-{}", std::process::id()));
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let cmd =
            SandboxCommand::new("/bin/true", "/", &scratch).wall_time(Duration::from_secs(20));
        let started = Instant::now();
        let report = runner.run(&cmd);
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if !matches!(report.status, pdl_sandbox::RunStatus::Exited { code: 0 }) {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(format!("/bin/true ended as {:?}", report.status));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    samples.sort_by(f64::total_cmp);
    Ok(StartCost {
        runs,
        median_ms: samples[samples.len() / 2],
        p90_ms: samples[(samples.len() * 9 / 10).min(samples.len() - 1)],
    })
}

/// Runs `doctor`.
pub fn run(args: &DoctorArgs) -> Result<i32, ExitError> {
    let runs = args.runs.max(1);
    let interpreter = find_interpreter(args.python.as_deref());
    let cache_dir = args.cache_dir.clone().unwrap_or_else(default_cache_dir);
    let installer = match &interpreter {
        Ok(i) => match EnvManager::new(cache_dir.clone(), i.clone()).installer() {
            Installer::Uv(path) => format!("uv ({})", path.display()),
            Installer::Pip => "pip (the interpreter's own)".to_string(),
        },
        Err(_) => "-".into(),
    };
    let git = std::process::Command::new("git")
        .arg("--version")
        .output()
        .map_err(|e| e.to_string())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let namespaces = pdl_sandbox::runner(SandboxKind::Namespaces)
        .map_err(|e| e.to_string())
        .and_then(|r| start_cost(r.as_ref(), runs));
    let plain =
        start_cost(&PlainRunner, runs).map_err(|e| ExitError::environment(anyhow::anyhow!(e)))?;
    let report = Report {
        version: pdl_grader::HARNESS_VERSION,
        python: interpreter
            .as_ref()
            .map(|i| format!("{} ({})", i.version, i.executable.display()))
            .map_err(ToString::to_string),
        installer,
        cache_dir: cache_dir.display().to_string(),
        git,
        namespaces,
        plain,
    };
    let ok = report.python.is_ok() && report.git.is_ok() && report.namespaces.is_ok();
    match args.format {
        Format::Json => print_json(&report)?,
        Format::Table => {
            let show = |r: &Result<String, String>| match r {
                Ok(s) => s.clone(),
                Err(e) => format!("MISSING: {e}"),
            };
            let cost = |c: &StartCost| {
                format!(
                    "median {:.1} ms, p90 {:.1} ms over {} runs",
                    c.median_ms, c.p90_ms, c.runs
                )
            };
            let mut t = table(&["component", "status"]);
            t.add_row(vec!["harness".to_string(), report.version.to_string()]);
            t.add_row(vec!["python".to_string(), show(&report.python)]);
            t.add_row(vec!["installer".to_string(), report.installer.clone()]);
            t.add_row(vec!["cache".to_string(), report.cache_dir.clone()]);
            t.add_row(vec!["git".to_string(), show(&report.git)]);
            t.add_row(vec![
                "sandbox: namespaces".to_string(),
                match &report.namespaces {
                    Ok(c) => cost(c),
                    Err(e) => format!("UNAVAILABLE: {e}"),
                },
            ]);
            t.add_row(vec![
                "sandbox: none (plain process)".to_string(),
                cost(&report.plain),
            ]);
            println!("{t}");
        }
    }
    Ok(if ok { exit::SUCCESS } else { exit::ENVIRONMENT })
}
