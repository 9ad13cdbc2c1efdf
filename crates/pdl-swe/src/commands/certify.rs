//! `pdl-swe certify RESULTS…` (dated certificates per task and agent) and
//! `pdl-swe certify --check` (the tier gates over them).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use pdl_report::certify::{
    certificates, certify_task, parse_certificate, CertificateStore, Collected, Gates,
    ResultsSource, StoredCertificate, TaskCertification,
};
use pdl_report::{terminal_safe, Warning};
use pdl_task::tree::MANIFEST;
use pdl_task::{Dataset, DatasetFormat};

use crate::cli::{CertifyArgs, DatasetArgs, Format};
use crate::exit::{self, ExitError};
use crate::render::{print_json, reward, table};
use crate::settings::load_dataset;

/// The harness version certificates carry.
const HARNESS_VERSION: &str = concat!("pdl-swe ", env!("CARGO_PKG_VERSION"));

/// Where a dataset's certificates are.
pub enum CertificateSource {
    /// A folder of task folders, or one task folder.
    Store(CertificateStore),
    /// Embedded in the binary with the bundled suite.
    Bundled,
}

/// The certificates of the dataset named by `dataset`: `out` when given, the
/// dataset's own tree, the bundled suite's embedded certificates; `None` for
/// a dataset file without `out`.
pub fn certificate_source(dataset: &DatasetArgs, out: Option<&Path>) -> Option<CertificateSource> {
    if let Some(out) = out {
        return Some(CertificateSource::Store(CertificateStore::task_folders(
            out,
        )));
    }
    match &dataset.dataset {
        None => Some(CertificateSource::Bundled),
        Some(path)
            if path.is_dir() && DatasetFormat::of_path(path) == Some(DatasetFormat::Tree) =>
        {
            Some(CertificateSource::Store(
                if std::fs::symlink_metadata(path.join(MANIFEST)).is_ok() {
                    CertificateStore::one_task(path)
                } else {
                    CertificateStore::task_folders(path)
                },
            ))
        }
        Some(_) => None,
    }
}

/// Reads every task's certificates and applies the gates.
pub fn certify_all(
    ds: &Dataset,
    source: &CertificateSource,
    gates: &Gates,
) -> Result<(Vec<TaskCertification>, Vec<Warning>), ExitError> {
    let mut bundled: BTreeMap<String, Vec<StoredCertificate>> = BTreeMap::new();
    let mut warnings = Vec::new();
    if let CertificateSource::Bundled = source {
        for (folder, name, bytes) in pdl_suite::certificates() {
            let file = format!("tasks/{folder}/certificates/{name}");
            if !name.ends_with(".json") || name.contains('/') {
                continue;
            }
            match parse_certificate(&bytes, &file) {
                Ok(c) => bundled.entry(folder).or_default().push(c),
                Err(w) => warnings.push(w),
            }
        }
    }
    let mut out = Vec::new();
    for task in &ds.tasks {
        let stored = match source {
            CertificateSource::Store(store) => {
                let (stored, w) = store
                    .read(&task.row.task_id)
                    .map_err(|e| ExitError::usage(anyhow::Error::from(e)))?;
                warnings.extend(w);
                stored
            }
            CertificateSource::Bundled => bundled.remove(&task.row.task_id).unwrap_or_default(),
        };
        let (certification, w) = certify_task(task, &stored, gates);
        warnings.extend(w);
        out.push(certification);
    }
    Ok((out, warnings))
}

/// Prints warnings to stderr, escaped.
fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("warning: {}", terminal_safe(&w.to_string()));
    }
}

/// Runs `certify`.
pub fn run(args: &CertifyArgs) -> Result<i32, ExitError> {
    let format = if args.json { Format::Json } else { args.format };
    if args.check {
        check(args, format)
    } else {
        write(args, format)
    }
}

#[derive(Serialize)]
struct Written<'a> {
    path: String,
    certificate: &'a pdl_report::certify::Certificate,
}

#[derive(Serialize)]
struct WriteSummary<'a> {
    certificates: Vec<Written<'a>>,
    already_certified: Vec<String>,
    records: usize,
    skipped: usize,
    warnings: &'a [Warning],
    errors: Vec<String>,
}

fn write(args: &CertifyArgs, format: Format) -> Result<i32, ExitError> {
    let store = match certificate_source(&args.dataset, args.out.as_deref()) {
        Some(CertificateSource::Store(store)) => store,
        Some(CertificateSource::Bundled) => {
            return Err(ExitError::usage(anyhow::anyhow!(
                "the bundled suite is not a task tree on disk: name the folder of task folders with --out (the repository's `tasks` folder holds the bundled suite)"
            )))
        }
        None => {
            return Err(ExitError::usage(anyhow::anyhow!(
                "{} is not a task tree: name the folder of task folders the certificates go into with --out DIR",
                args.dataset
                    .dataset
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )))
        }
    };
    let ds = load_dataset(&args.dataset)?;
    let sources: Vec<ResultsSource> = args
        .results
        .iter()
        .map(|p| ResultsSource::of_path(p))
        .collect();
    let collected =
        Collected::read(&sources, &ds).map_err(|e| ExitError::usage(anyhow::Error::from(e)))?;
    print_warnings(&collected.warnings);
    let made = certificates(
        &collected,
        &ds,
        HARNESS_VERSION,
        &pdl_report::certify::utc_now(),
    );
    if made.is_empty() {
        return Err(ExitError::usage(anyhow::anyhow!(
            "no attempt of a task of {} in {} records ({} of other kinds skipped); nothing certified",
            ds.source,
            collected.records,
            collected.skipped
        )));
    }
    let mut written = Vec::new();
    let mut already = Vec::new();
    let mut errors = Vec::new();
    for c in &made {
        // Certifying the same results again must not count their attempts twice.
        let existing = match store.read(&c.task_id) {
            // A store that does not exist yet holds nothing.
            Err(_) if !store.root().exists() => None,
            Ok((stored, _)) => stored
                .into_iter()
                .find(|s| c.same_measurement(&s.certificate)),
            Err(e) => {
                errors.push(format!("{}: {e}", c.task_id));
                continue;
            }
        };
        if let Some(s) = existing {
            already.push(s.file);
            continue;
        }
        match store.write(c) {
            Ok(path) => written.push(Written {
                path: path.display().to_string(),
                certificate: c,
            }),
            Err(e) => errors.push(format!("{}: {e}", c.task_id)),
        }
    }
    for e in &errors {
        eprintln!("error: {}", terminal_safe(e));
    }
    let all_written = errors.is_empty();
    match format {
        Format::Json => print_json(&WriteSummary {
            certificates: written,
            already_certified: already,
            records: collected.records,
            skipped: collected.skipped,
            warnings: &collected.warnings,
            errors,
        })?,
        Format::Table => {
            let mut t = table(&[
                "task",
                "agent",
                "model",
                "budget",
                "attempts",
                "solved",
                "harness errors",
                "file",
            ]);
            for w in &written {
                let c = w.certificate;
                t.add_row(vec![
                    c.task_id.clone(),
                    c.agent.clone(),
                    c.model.clone(),
                    c.budget.map_or_else(|| "-".to_string(), |b| b.to_string()),
                    c.attempts.to_string(),
                    format!("{}/{}", c.solved, c.attempts),
                    c.harness_errors.to_string(),
                    w.path.clone(),
                ]);
            }
            if !written.is_empty() {
                println!("{}", terminal_safe(&t.to_string()));
            }
            for file in &already {
                println!(
                    "already certified by {}: not written again",
                    terminal_safe(file)
                );
            }
            println!(
                "wrote {} certificates into {} ({} records read, {} of other kinds skipped, {} warnings)",
                written.len(),
                terminal_safe(&store.root().display().to_string()),
                collected.records,
                collected.skipped,
                collected.warnings.len()
            );
        }
    }
    Ok(if all_written {
        exit::SUCCESS
    } else {
        exit::USAGE
    })
}

#[derive(Serialize)]
struct CheckSummary<'a> {
    gates: &'a Gates,
    supported: bool,
    tasks: &'a [TaskCertification],
    warnings: &'a [Warning],
}

fn check(args: &CertifyArgs, format: Format) -> Result<i32, ExitError> {
    let gates = match &args.gates {
        Some(path) => Gates::load(path).map_err(|e| ExitError::usage(anyhow::Error::from(e)))?,
        None => Gates::default(),
    };
    let source = certificate_source(&args.dataset, args.out.as_deref()).ok_or_else(|| {
        ExitError::usage(anyhow::anyhow!(
            "the dataset is not a task tree: name the folder of task folders that holds the certificates with --out DIR"
        ))
    })?;
    let ds = load_dataset(&args.dataset)?;
    let (tasks, warnings) = certify_all(&ds, &source, &gates)?;
    print_warnings(&warnings);
    let supported = tasks.iter().all(|t| t.supported);
    match format {
        Format::Json => print_json(&CheckSummary {
            gates: &gates,
            supported,
            tasks: &tasks,
            warnings: &warnings,
        })?,
        Format::Table => {
            let mut t = table(&[
                "task",
                "tier",
                "certificates",
                "attempts",
                "solve rate",
                "hidden passed",
                "landed rungs",
                "gate",
            ]);
            for c in &tasks {
                t.add_row(vec![
                    c.instance_id.clone(),
                    c.tier.clone(),
                    certificate_count(c),
                    c.attempts.to_string(),
                    if c.attempts == 0 {
                        "-".to_string()
                    } else {
                        format!("{} ({}/{})", reward(c.solve_rate), c.solved, c.attempts)
                    },
                    c.mean_hidden_pass
                        .map_or_else(|| "-".to_string(), |m| reward(Some(m))),
                    if c.landed_rungs.is_empty() {
                        "-".to_string()
                    } else {
                        c.landed_rungs
                            .iter()
                            .map(|(r, n)| format!("{r} ×{n}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    c.gate_text(),
                ]);
            }
            println!("{}", terminal_safe(&t.to_string()));
            let unsupported = tasks.iter().filter(|t| !t.supported).count();
            println!(
                "{} tasks from {}: {} supported, {} not supported",
                tasks.len(),
                terminal_safe(&ds.source),
                tasks.len() - unsupported,
                unsupported
            );
        }
    }
    crate::commands::report_load_errors(&ds.errors);
    Ok(if supported && ds.errors.is_empty() {
        exit::SUCCESS
    } else {
        exit::FAILURES
    })
}

/// Counted certificates, with those not counted: `3 (+1 stale, +2 unmetered)`.
fn certificate_count(c: &pdl_report::certify::TaskCertification) -> String {
    let mut extra = Vec::new();
    if !c.stale.is_empty() {
        extra.push(format!("+{} stale", c.stale.len()));
    }
    if !c.unmetered.is_empty() {
        extra.push(format!("+{} unmetered", c.unmetered.len()));
    }
    if extra.is_empty() {
        c.certificates.to_string()
    } else {
        format!("{} ({})", c.certificates, extra.join(", "))
    }
}
