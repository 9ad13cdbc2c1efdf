//! `pdl-swe calibrate`: gold, do-nothing and every rung, one table.

use pdl_grader::validation::{calibrate, plan, CalibrationRow, PlanOptions};
use serde::Serialize;

use pdl_report::terminal_safe;

use crate::cli::{CalibrateArgs, Format};
use crate::commands::{measure, report_load_errors, select};
use crate::exit::{self, ExitError};
use crate::render::{print_json, reward, table};
use crate::settings::{load_dataset, resolve};

#[derive(Serialize)]
struct CalibrationSummary<'a> {
    dataset: &'a str,
    ok: bool,
    wall_s: f64,
    tasks: &'a [CalibrationRow],
    load_errors: Vec<String>,
}

/// Runs `calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<i32, ExitError> {
    let started = std::time::Instant::now();
    let mut ds = load_dataset(&args.dataset)?;
    select(&mut ds, &args.tasks)?;
    let settings = resolve(&args.run)?;
    let plan = plan(
        &ds.tasks,
        PlanOptions {
            collect: false,
            repeats: 1,
            rungs: true,
        },
    );
    let measured = measure(
        &settings,
        &ds.tasks,
        &plan,
        args.out.as_deref(),
        "calibrate",
    )?;
    let rows: Vec<CalibrationRow> = ds
        .tasks
        .iter()
        .zip(&measured)
        .map(|(t, m)| calibrate(t, m))
        .collect();
    let ok = ds.errors.is_empty() && rows.iter().all(CalibrationRow::ok);
    let wall_s = started.elapsed().as_secs_f64();
    match args.format {
        Format::Json => print_json(&CalibrationSummary {
            dataset: &ds.source,
            ok,
            wall_s,
            tasks: &rows,
            load_errors: ds.errors.iter().map(ToString::to_string).collect(),
        })?,
        Format::Table => {
            let mut t = table(&[
                "task",
                "tier",
                "gold",
                "noop",
                "rungs (registered → measured)",
                "time",
                "status",
            ]);
            for r in &rows {
                let rungs = if r.rungs.is_empty() {
                    "-".to_string()
                } else {
                    r.rungs
                        .iter()
                        .map(|g| {
                            format!(
                                "{} {} → {} {}",
                                g.name,
                                reward(Some(g.expected)),
                                reward(g.got),
                                if g.ok { "✓" } else { "✗" }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                t.add_row(vec![
                    r.task_id.clone(),
                    r.tier.clone(),
                    reward(r.gold),
                    reward(r.noop),
                    rungs,
                    format!("{:.1}s", r.busy_s),
                    if r.ok() {
                        "ok".into()
                    } else {
                        format!("DEVIATES: {}", r.deviations.join("; "))
                    },
                ]);
            }
            println!("{}", terminal_safe(&t.to_string()));
            let calibrated = rows.iter().filter(|r| r.ok()).count();
            println!(
                "{calibrated} of {} tasks calibrated in {:.1}s ({} gradings, -j {}, sandbox {}, {})",
                rows.len(),
                wall_s,
                plan.total(),
                settings.parallelism,
                settings.grader.runner().kind().name(),
                ds.source
            );
        }
    }
    report_load_errors(&ds.errors);
    Ok(if ok { exit::SUCCESS } else { exit::FAILURES })
}
