//! The per-episode trajectory file: one JSON line per exchange
//! ([`ExchangeRecord`]), secrets redacted, each line written in one piece.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

/// What replaces a secret in a trajectory line.
const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not searched for (they would match by chance).
const MIN_SECRET_LEN: usize = 8;

/// One exchange between the agent and the upstream, as recorded.
#[derive(Debug, Serialize)]
pub(crate) struct ExchangeRecord {
    /// When the request arrived, RFC 3339 in UTC.
    pub ts: String,
    /// The endpoint called, with the `/v1` prefix.
    pub endpoint: &'static str,
    /// The request body as sent upstream (as received, when refused).
    pub request: Value,
    /// The HTTP status the agent got.
    pub status: u16,
    /// The response body, or `{"stream": [...]}` for a streamed one.
    pub response: Value,
    /// The tokens counted for the exchange.
    pub usage: RecordedUsage,
    /// Milliseconds from the request's arrival to the response's last byte.
    pub latency_ms: u64,
    /// True when the gateway answered by itself without calling the upstream.
    pub refused: bool,
    /// What went wrong, if anything did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `usage` field of an [`ExchangeRecord`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct RecordedUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub estimated: bool,
}

/// The current time in RFC 3339 with milliseconds, UTC.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// An open trajectory file.
#[derive(Debug)]
pub(crate) struct TrajectoryWriter {
    file: File,
    path: PathBuf,
    secrets: Vec<String>,
    error: Option<String>,
}

impl TrajectoryWriter {
    /// Opens `path` for appending, creating it and its parent directories.
    pub(crate) fn open(path: &Path, secrets: Vec<String>) -> io::Result<TrajectoryWriter> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(TrajectoryWriter {
            file,
            path: path.to_path_buf(),
            secrets: secrets
                .into_iter()
                .filter(|s| s.len() >= MIN_SECRET_LEN)
                .collect(),
            error: None,
        })
    }

    /// Appends one record as a line. A failure is kept (the first one) for
    /// [`TrajectoryWriter::error`] rather than failing the exchange.
    pub(crate) fn append(&mut self, record: &ExchangeRecord) {
        let mut line = match serde_json::to_string(record) {
            Ok(line) => line,
            Err(e) => {
                self.note_error(format!("cannot serialize an exchange: {e}"));
                return;
            }
        };
        for secret in &self.secrets {
            if line.contains(secret.as_str()) {
                line = line.replace(secret.as_str(), REDACTED);
            }
        }
        line.push('\n');
        if let Err(e) = self
            .file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
        {
            let message = format!("cannot write to {}: {e}", self.path.display());
            self.note_error(message);
        }
    }

    /// The first write failure, if any.
    pub(crate) fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn note_error(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_appended_with_secrets_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/trajectory.jsonl");
        let mut writer =
            TrajectoryWriter::open(&path, vec!["sk-real-key-123".into(), "short".into()]).unwrap();
        for n in 0..2 {
            writer.append(&ExchangeRecord {
                ts: now_rfc3339(),
                endpoint: "/v1/chat/completions",
                request: json!({"messages": [{"role": "user", "content": "my key is sk-real-key-123"}]}),
                status: 200,
                response: json!({"n": n, "note": "short"}),
                usage: RecordedUsage::default(),
                latency_ms: 3,
                refused: false,
                error: None,
            });
        }
        assert!(writer.error().is_none());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(!text.contains("sk-real-key-123"));
        assert!(text.contains("my key is [redacted]"));
        let first: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["response"]["note"], "short");
        assert!(first.get("error").is_none());
        assert!(first["ts"].as_str().unwrap().ends_with('Z'));
    }
}
