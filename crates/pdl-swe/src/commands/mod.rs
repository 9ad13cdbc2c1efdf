//! One module per command; each turns arguments into settings, calls the
//! libraries, and renders what they return.

pub mod calibrate;
pub mod certify;
pub mod doctor;
pub mod grade;
pub mod merge;
pub mod model;
pub mod report;
pub mod run;
pub mod service;
pub mod slurm;
pub mod tasks;
pub mod validate;

use std::path::Path;

use pdl_grader::pipeline::{Pipeline, PipelineError, Plan};
use pdl_grader::record::RecordLog;
use pdl_grader::validation::TaskMeasurements;
use pdl_report::terminal_safe;
use pdl_task::{Dataset, LoadError, Task};

use crate::exit::ExitError;
use crate::progress::PlanBar;
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
    plan: &Plan,
    out: Option<&Path>,
    label: &str,
) -> Result<Vec<TaskMeasurements>, ExitError> {
    let mut log = out.map(RecordLog::open).transpose()?;
    let pipeline = Pipeline {
        grader: &settings.grader,
        tasks,
        parallelism: settings.parallelism,
        episodes: None,
    };
    let mut bar = PlanBar::new(label, tasks);
    let outcome = pipeline.run(plan, &mut log.as_mut(), &mut |e| bar.on_event(e));
    bar.finish();
    if crate::interrupt::requested() {
        return Err(crate::interrupt::stopped(&match out {
            Some(path) => format!("the records of finished gradings are in {}", path.display()),
            None => "nothing was recorded (use --out to keep records)".to_string(),
        }));
    }
    let outcome = outcome.map_err(|e| match e {
        PipelineError::Write(e) => ExitError::from(e),
        other => ExitError::from(anyhow::Error::from(other)),
    })?;
    Ok(TaskMeasurements::from_outcome(tasks, plan, &outcome))
}
