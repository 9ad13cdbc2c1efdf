//! `pdl-swe validate`: every check of the specification's section 7.

use pdl_grader::validation::{plan, validate, CheckFailure, PlanOptions, TaskValidation};
use serde::Serialize;

use pdl_report::terminal_safe;

use crate::cli::{Format, ValidateArgs};
use crate::commands::{measure, select};
use crate::exit::{self, ExitError};
use crate::render::{print_json, table};
use crate::settings::{load_dataset, resolve};

#[derive(Serialize)]
struct ValidationSummary<'a> {
    dataset: &'a str,
    ok: bool,
    tasks: &'a [TaskValidation],
    load_errors: Vec<String>,
}

/// Runs `validate`.
pub fn run(args: &ValidateArgs) -> Result<i32, ExitError> {
    let mut ds = load_dataset(&args.dataset)?;
    select(&mut ds, &args.tasks)?;
    let settings = resolve(&args.run)?;
    let plan = plan(
        &ds.tasks,
        PlanOptions {
            collect: true,
            repeats: args.repeat.max(1),
            rungs: true,
        },
    );
    let measured = measure(&settings, &ds.tasks, &plan, args.out.as_deref(), "validate")?;
    let results: Vec<TaskValidation> = ds
        .tasks
        .iter()
        .zip(&measured)
        .map(|(t, m)| validate(t, m))
        .collect();
    let load_errors: Vec<String> = ds.errors.iter().map(ToString::to_string).collect();
    let ok = load_errors.is_empty() && results.iter().all(TaskValidation::ok);
    match args.format {
        Format::Json => print_json(&ValidationSummary {
            dataset: &ds.source,
            ok,
            tasks: &results,
            load_errors: load_errors.clone(),
        })?,
        Format::Table => {
            let mut t = table(&["task", "tier", "checks", "result", "failures"]);
            for r in &results {
                let failures = r
                    .failures
                    .iter()
                    .map(|CheckFailure { check, detail }| format!("{check}: {detail}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                t.add_row(vec![
                    r.instance_id.clone(),
                    r.tier.clone(),
                    r.checks.to_string(),
                    if r.ok() { "ok".into() } else { "FAIL".into() },
                    failures,
                ]);
            }
            for e in &load_errors {
                t.add_row(vec![
                    "(not loaded)".into(),
                    "-".into(),
                    "1".into(),
                    "FAIL".into(),
                    format!("load: {e}"),
                ]);
            }
            println!("{}", terminal_safe(&t.to_string()));
            let failed = results.iter().filter(|r| !r.ok()).count() + load_errors.len();
            println!(
                "{} of {} tasks valid: {} ({}, sandbox {}, {} repeats)",
                results.len() + load_errors.len() - failed,
                results.len() + load_errors.len(),
                if ok {
                    "all checks passed"
                } else {
                    "failures above"
                },
                ds.source,
                settings.grader.runner().kind().name(),
                args.repeat.max(1),
            );
        }
    }
    Ok(if ok { exit::SUCCESS } else { exit::FAILURES })
}
