//! One module per command; each turns arguments into settings, calls the
//! libraries, and renders what they return.

pub mod calibrate;
pub mod certify;
pub mod doctor;
pub mod grade;
pub mod model;
pub mod report;
pub mod run;
pub mod tasks;
pub mod validate;

use std::path::Path;

use pdl_grader::certify::{run_plan, Job, JobResult, TaskMeasurements};
use pdl_grader::record::RecordLog;
use pdl_report::terminal_safe;
use pdl_task::{Dataset, LoadError, Task};

use crate::exit::ExitError;
use crate::render::progress_bar;
use crate::settings::RunSettings;

/// Prints load errors to stderr (with the dataset's control characters
/// escaped).
pub fn report_load_errors(errors: &[LoadError]) {
    for e in errors {
        eprintln!("error: {}", terminal_safe(&e.to_string()));
    }
}

/// Prints load warnings to stderr (with the dataset's control characters
/// escaped).
pub fn report_load_warnings(warnings: &[LoadError]) {
    for w in warnings {
        eprintln!("warning: {}", terminal_safe(&w.to_string()));
    }
}

/// Keeps the tasks named on the command line; unknown names are a usage error.
pub fn select(dataset: &mut Dataset, ids: &[String]) -> Result<(), ExitError> {
    let unknown = dataset.retain_ids(ids);
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ExitError::usage(anyhow::anyhow!(
            "no task called {} in {}",
            unknown.join(", "),
            dataset.source
        )))
    }
}

/// Runs a validation or calibration plan with a progress bar, appending every
/// grading's record to `out` (when given) as soon as it is known.
pub fn measure(
    settings: &RunSettings,
    tasks: &[Task],
    jobs: &[Job],
    out: Option<&Path>,
    label: &str,
) -> Result<Vec<TaskMeasurements>, ExitError> {
    let mut log = out.map(RecordLog::open).transpose()?;
    let bar = progress_bar(jobs.len(), label);
    let mut write_error = None;
    let measured = run_plan(&settings.grader, tasks, jobs, settings.parallelism, |p| {
        bar.set_position(p.done as u64);
        bar.set_message(terminal_safe(&p.job.label(tasks)).into_owned());
        if let (Some(log), JobResult::Graded(r)) = (log.as_mut(), p.result) {
            if let Err(e) = log.append(r.as_ref()) {
                write_error.get_or_insert(e);
            }
        }
    });
    bar.finish_and_clear();
    if crate::interrupt::requested() {
        return Err(crate::interrupt::stopped(&match out {
            Some(path) => format!("the records of finished gradings are in {}", path.display()),
            None => "nothing was recorded (use --out to keep records)".to_string(),
        }));
    }
    match write_error {
        Some(e) => Err(e.into()),
        None => Ok(measured),
    }
}
