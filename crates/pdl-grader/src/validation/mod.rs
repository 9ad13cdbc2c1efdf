//! Validation and calibration of tasks, on the [`pipeline`](crate::pipeline).
//!
//! [`plan()`] lists the work for a set of tasks as a pipeline
//! [`Plan`](crate::pipeline::Plan) (the ladder phase: every rung; then
//! collection, gold and do-nothing, possibly repeated), and
//! [`TaskMeasurements::from_outcome`] groups what the pipeline measured by
//! task. [`validate`] turns a task's measurements into named check failures
//! ([`TaskValidation`], the checks live in [`checks`]) and [`calibrate`] into a
//! [`CalibrationRow`] ([`calibration`]).

pub mod calibration;
pub mod checks;
pub mod plan;

pub use calibration::{calibrate, CalibrationRow, RungCalibration, NOOP_REWARD};
pub use checks::{static_checks, validate, CheckFailure, TaskValidation};
pub use plan::{plan, PlanOptions, TaskMeasurements};
