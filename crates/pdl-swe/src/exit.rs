//! Exit codes, in one place.

/// Everything passed.
pub const SUCCESS: i32 = 0;
/// The command ran and found failures (a check failed, a calibration deviated,
/// a grading hit a harness error).
pub const FAILURES: i32 = 1;
/// The input was unusable (bad arguments, unreadable dataset or predictions).
pub const USAGE: i32 = 2;
/// The machine cannot run the command (no Python, no sandbox).
pub const ENVIRONMENT: i32 = 3;
/// The command was stopped by SIGINT (Ctrl-C) or SIGTERM: its sandboxes were
/// killed and the records written before the signal are kept (128 + SIGINT,
/// as shells report it).
pub const INTERRUPTED: i32 = 130;

/// An error that carries its exit code.
#[derive(Debug)]
pub struct ExitError {
    /// The exit code.
    pub code: i32,
    /// The error.
    pub error: anyhow::Error,
}

impl ExitError {
    /// Bad input.
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        ExitError {
            code: USAGE,
            error: error.into(),
        }
    }

    /// The machine cannot run the command.
    pub fn environment(error: impl Into<anyhow::Error>) -> Self {
        ExitError {
            code: ENVIRONMENT,
            error: error.into(),
        }
    }
}

impl From<anyhow::Error> for ExitError {
    fn from(error: anyhow::Error) -> Self {
        ExitError {
            code: FAILURES,
            error,
        }
    }
}

impl From<std::io::Error> for ExitError {
    fn from(error: std::io::Error) -> Self {
        ExitError {
            code: FAILURES,
            error: error.into(),
        }
    }
}
