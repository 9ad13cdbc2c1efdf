//! One module per command; each turns arguments into settings, calls the
//! libraries, and renders what they return.

pub mod calibrate;
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
use pdl_task::{Dataset, LoadError, Task};

use crate::exit::ExitError;
use crate::render::progress_bar;
use crate::settings::RunSettings;

/// Prints load errors to stderr.
pub fn report_load_errors(errors: &[LoadError]) {
    for e in errors {
        eprintln!("error: {e}");
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
        bar.set_message(p.job.label(tasks));
        if let (Some(log), JobResult::Graded(r)) = (log.as_mut(), p.result) {
            if let Err(e) = log.append(r.as_ref()) {
                write_error.get_or_insert(e);
            }
        }
    });
    bar.finish_and_clear();
    match write_error {
        Some(e) => Err(e.into()),
        None => Ok(measured),
    }
}
