//! What can go wrong: a fatal [`ReportError`] (the run folder cannot be read, a
//! report cannot be written) and a non-fatal [`Warning`] (a malformed line,
//! a missing file), which is kept in the report and shown with it.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// A run folder that cannot be read, or a report that cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {kind}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ReportError {
    /// The file or folder at fault.
    pub path: PathBuf,
    /// The one-based line, when the fault is in one line.
    pub line: Option<usize>,
    /// What went wrong.
    pub kind: ReportErrorKind,
}

/// What went wrong, for a [`ReportError`].
#[derive(Debug, thiserror::Error)]
pub enum ReportErrorKind {
    /// The folder has neither `campaign.json` nor `results.jsonl`.
    #[error("not a run folder (no campaign.json and no results.jsonl)")]
    NotARunFolder,
    /// Reading failed.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// Writing failed.
    #[error("cannot write: {0}")]
    Write(#[source] std::io::Error),
}

impl ReportError {
    pub(crate) fn new(path: impl Into<PathBuf>, kind: ReportErrorKind) -> Self {
        ReportError {
            path: path.into(),
            line: None,
            kind,
        }
    }
}

/// Something in the run folder that was skipped or looks wrong. Never fatal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The file, relative to the run folder (`results.jsonl`, `campaign.json`, …).
    pub file: String,
    /// The one-based line, when the warning is about one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl Warning {
    pub(crate) fn new(file: &str, line: Option<usize>, message: impl Into<String>) -> Self {
        Warning {
            file: file.to_string(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}", self.message)
    }
}
