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
    /// What a namespaces run is held to on this machine.
    enforcement: Option<pdl_sandbox::Enforcement>,
    plain: StartCost,
}

/// Times `runs` starts of `/bin/true`, each in a scratch folder of its own,
/// and returns the limits the last run was held to.
fn start_cost(
    runner: &dyn ProcessRunner,
    runs: usize,
) -> Result<(StartCost, pdl_sandbox::Enforcement), String> {
    let mut samples = Vec::with_capacity(runs);
    let mut enforcement = None;
    for _ in 0..runs {
        let scratch = tempfile::Builder::new()
            .prefix("pdl-swe-doctor-")
            .tempdir()
            .map_err(|e| format!("cannot create a scratch folder: {e}"))?;
        let cmd = SandboxCommand::new("/bin/true", "/", scratch.path())
            .wall_time(Duration::from_secs(20));
        let started = Instant::now();
        let report = runner.run(&cmd);
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if !matches!(report.status, pdl_sandbox::RunStatus::Exited { code: 0 }) {
            return Err(format!("/bin/true ended as {:?}", report.status));
        }
        enforcement = Some(report.enforced);
    }
    samples.sort_by(f64::total_cmp);
    let cost = StartCost {
        runs,
        median_ms: samples[samples.len() / 2],
        p90_ms: samples[(samples.len() * 9 / 10).min(samples.len() - 1)],
    };
    Ok((cost, enforcement.expect("at least one run")))
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
    let (namespaces, enforcement) = match namespaces {
        Ok((cost, enforced)) => (Ok(cost), Some(enforced)),
        Err(e) => (Err(e), None),
    };
    let (plain, _) =
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
        enforcement,
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
            if let Some(e) = &report.enforcement {
                let scope = |s: pdl_sandbox::LimitScope| match s {
                    pdl_sandbox::LimitScope::CgroupV2 => "for the whole run (cgroup v2)",
                    pdl_sandbox::LimitScope::CgroupV1 => "for the whole run (cgroup v1)",
                    pdl_sandbox::LimitScope::PerProcess => "per process only (no writable cgroup)",
                    pdl_sandbox::LimitScope::None => "not enforced",
                };
                t.add_row(vec![
                    "limits: memory".to_string(),
                    scope(e.memory_scope).to_string(),
                ]);
                t.add_row(vec![
                    "limits: processes".to_string(),
                    scope(e.processes_scope).to_string(),
                ]);
                t.add_row(vec![
                    "network".to_string(),
                    match e.network {
                        pdl_sandbox::NetworkScope::LoopbackOnly => "loopback only".to_string(),
                        pdl_sandbox::NetworkScope::Gateway => {
                            "loopback and the gateway".to_string()
                        }
                        pdl_sandbox::NetworkScope::Host => "the host network".to_string(),
                    },
                ]);
            }
            t.add_row(vec![
                "sandbox: none (plain process)".to_string(),
                cost(&report.plain),
            ]);
            println!("{t}");
        }
    }
    Ok(if ok { exit::SUCCESS } else { exit::ENVIRONMENT })
}
