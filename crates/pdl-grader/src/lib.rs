//! Grading PDL-SWE-Bench submissions exactly.
//!
//! The [`Grader`] takes a task and a [`Submission`] (the gold patch, the empty
//! patch, a rung, a prediction, or an episode's final workspace) through the
//! specification's steps: materialize the pristine tree, work out the change set,
//! police it with the task's [`PatchPolicy`], apply it all or nothing, apply the
//! hidden tests, run pytest once in the sandbox with an outcome plugin, and score
//! with the task's parsed reward formula. The result is a [`ResultRecord`] with a
//! closed [`Verdict`].
//!
//! Every command that grades runs the same plan → execute → record path, the
//! [`pipeline`] ([`pipeline::Pipeline`], one [`pipeline::Job`] type, one
//! [`pipeline::Event`] stream, one resume key); [`validation`] plans and judges
//! validation and calibration, [`predictions`] plans SWE-bench style
//! predictions files. Python environments come from the [`EnvManager`].
//! Nothing here prints: progress goes to the event stream.

pub mod apply;
pub mod changes;
pub mod env;
pub mod exact_apply;
pub mod execute;
pub mod grade;
pub mod ladder;
pub mod outcome;
pub mod pipeline;
pub mod policy;
pub mod predictions;
pub mod protocol;
pub mod pytest;
pub mod record;
pub mod suspicious;
pub mod validation;
pub mod workspace;

pub use env::{find_interpreter, EnvError, EnvManager, PythonEnv, PythonInterpreter};
pub use grade::{GradeSettings, Grader, Submission, SubmissionContent, HARNESS_VERSION};
pub use ladder::LadderFingerprints;
pub use outcome::TestOutcome;
pub use policy::{PatchPolicy, PathDecision};
pub use record::{
    Components, EpisodeInfo, Phases, PolicyReport, ResultRecord, SubmissionKind, SuspiciousLine,
    Verdict,
};
