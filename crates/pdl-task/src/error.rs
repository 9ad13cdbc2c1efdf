//! Errors of reading and writing datasets ([`LoadError`], [`WriteError`]). A load
//! error names the file, the row (or line) and the field, so a bad task can be
//! found and fixed without guessing.

use std::fmt;
use std::path::PathBuf;

/// A task or row that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The file or folder read.
    pub source_name: String,
    /// The row (Parquet, one-based), line (JSONL, one-based) or task folder, when known.
    pub row: Option<String>,
    /// The row's instance ID, when it could be read.
    pub instance_id: Option<String>,
    /// The column, manifest key or file at fault, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl LoadError {
    /// An error about a whole source.
    pub fn source(source_name: impl Into<String>, message: impl Into<String>) -> Self {
        LoadError {
            source_name: source_name.into(),
            row: None,
            instance_id: None,
            field: None,
            message: message.into(),
        }
    }

    /// Adds the row or line.
    pub fn at_row(mut self, row: impl Into<String>) -> Self {
        self.row = Some(row.into());
        self
    }

    /// Adds the instance ID.
    pub fn for_instance(mut self, instance_id: Option<&str>) -> Self {
        if let Some(id) = instance_id {
            if !id.is_empty() {
                self.instance_id = Some(id.to_string());
            }
        }
        self
    }

    /// Adds the field.
    pub fn in_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source_name)?;
        if let Some(row) = &self.row {
            write!(f, ": {row}")?;
        }
        if let Some(id) = &self.instance_id {
            write!(f, " ({id})")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A dataset that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path written.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The Parquet or Arrow writer failed.
    #[error("{path}: {message}")]
    Format {
        /// The path written.
        path: PathBuf,
        /// The failure.
        message: String,
    },
    /// A path beneath the destination could not be used safely (a link, a
    /// file where a folder belongs, a path that would leave it).
    #[error("{0}")]
    Fs(pdl_fs::FsError),
    /// A task's folder already exists and is not empty.
    #[error("{0}: already exists and is not empty; export writes new task folders only (remove it first)")]
    Exists(PathBuf),
    /// The destination's extension names no known format.
    #[error("{0}: unknown dataset format (use a .parquet or .jsonl file, or a folder)")]
    UnknownFormat(PathBuf),
}

impl WriteError {
    pub(crate) fn fs(e: pdl_fs::FsError) -> Self {
        WriteError::Fs(e)
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WriteError::Io {
            path: path.into(),
            source,
        }
    }
}
