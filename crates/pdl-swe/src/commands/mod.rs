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

use pdl_task::{Dataset, LoadError};

use crate::exit::ExitError;

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
