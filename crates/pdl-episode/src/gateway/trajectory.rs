//! The per-episode trajectory file: one JSON line per exchange
//! ([`ExchangeRecord`]), secrets redacted, each line written in one piece.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::episode::InFlight;

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
    /// The `model` the agent asked for, when the gateway sent another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<Value>,
    /// The request body as sent upstream; for a refused call only a
    /// [`body_digest`] of what was received.
    pub request: Value,
    /// Request fields and headers the gateway did not forward.
    #[serde(skip_serializing_if = "Dropped::is_empty")]
    pub dropped: Dropped,
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
    /// True when the call was given up before its response ended and was
    /// charged its whole reservation.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
    /// What went wrong, if anything did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The request fields and headers left out of a forwarded call.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Dropped {
    /// Top-level body fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Header names (and `anthropic-beta: <value>` for dropped betas).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
}

impl Dropped {
    fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.headers.is_empty()
    }
}

/// The `usage` field of an [`ExchangeRecord`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct RecordedUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub estimated: bool,
    /// The tokens held for the call while it was in flight (input bound plus
    /// output cap); absent for refused calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
}

/// How much of a refused body the trajectory keeps.
pub(crate) const BODY_HEAD_BYTES: usize = 4096;

/// What the trajectory keeps of a body the gateway refused: its size, the
/// SHA-256 of the bytes received, and their first [`BODY_HEAD_BYTES`] as text.
/// `complete` is false when the gateway stopped reading before the body ended.
pub(crate) fn body_digest(bytes: &[u8], complete: bool) -> Value {
    use sha2::{Digest, Sha256};
    let mut end = bytes.len().min(BODY_HEAD_BYTES);
    while end > 0 && end < bytes.len() && std::str::from_utf8(&bytes[..end]).is_err() {
        end -= 1;
    }
    serde_json::json!({
        "bytes": bytes.len(),
        "complete": complete,
        "sha256": hex::encode(Sha256::digest(bytes)),
        "head": String::from_utf8_lossy(&bytes[..end]),
    })
}

/// The current time in RFC 3339 with milliseconds, UTC.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// An open trajectory file.
#[derive(Debug)]
pub(crate) struct TrajectoryFile {
    file: File,
    path: PathBuf,
    secrets: Vec<String>,
    error: Option<String>,
}

impl TrajectoryFile {
    /// Opens `path` for appending, creating it and its parent directories; its
    /// last component must be a regular file or nothing (a link is refused).
    pub(crate) fn open(path: &Path, secrets: Vec<String>) -> io::Result<TrajectoryFile> {
        let file = pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::Append)?;
        Ok(TrajectoryFile::new(file, path, secrets))
    }

    /// A trajectory in a file the caller opened for appending.
    pub(crate) fn new(file: File, path: &Path, secrets: Vec<String>) -> TrajectoryFile {
        TrajectoryFile {
            file,
            path: path.to_path_buf(),
            secrets: secrets
                .into_iter()
                .filter(|s| s.len() >= MIN_SECRET_LEN)
                .collect(),
            error: None,
        }
    }

    /// Appends one record as a line. A failure is kept (the first one) for
    /// [`TrajectoryFile::error`] rather than failing the exchange.
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

/// A line waiting to be written, with the guard that keeps its exchange in
/// flight until it is.
struct Job {
    target: Arc<Mutex<TrajectoryFile>>,
    record: ExchangeRecord,
    in_flight: InFlight,
}

/// The gateway's trajectory writer: one thread that serializes, redacts and
/// writes every line, so no request handler does file I/O on the async
/// runtime's threads. Cloning it gives another sender to the same thread, which
/// ends when the last sender is gone.
#[derive(Clone)]
pub(crate) struct TrajectoryWriter {
    tx: mpsc::Sender<Job>,
}

impl TrajectoryWriter {
    /// Starts the writer thread.
    pub(crate) fn start() -> io::Result<TrajectoryWriter> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("pdl-trajectory".into())
            .spawn(move || {
                for job in rx {
                    job.target
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .append(&job.record);
                    drop(job.in_flight);
                }
            })?;
        Ok(TrajectoryWriter { tx })
    }

    /// Queues a line; the exchange stays in flight until it is written.
    pub(crate) fn send(
        &self,
        target: Arc<Mutex<TrajectoryFile>>,
        record: ExchangeRecord,
        in_flight: InFlight,
    ) {
        let job = Job {
            target,
            record,
            in_flight,
        };
        if let Err(mpsc::SendError(job)) = self.tx.send(job) {
            // The thread is gone (it never panics on a record): write here.
            job.target
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(&job.record);
        }
    }
}

impl std::fmt::Debug for TrajectoryWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrajectoryWriter").finish_non_exhaustive()
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
            TrajectoryFile::open(&path, vec!["sk-real-key-123".into(), "short".into()]).unwrap();
        for n in 0..2 {
            writer.append(&ExchangeRecord {
                ts: now_rfc3339(),
                endpoint: "/v1/chat/completions",
                requested_model: None,
                request: json!({"messages": [{"role": "user", "content": "my key is sk-real-key-123"}]}),
                dropped: Dropped::default(),
                status: 200,
                response: json!({"n": n, "note": "short"}),
                usage: RecordedUsage::default(),
                latency_ms: 3,
                refused: false,
                abandoned: false,
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

    #[test]
    fn a_refused_body_is_kept_as_its_size_digest_and_head() {
        let body = "é".repeat(3000);
        let digest = body_digest(body.as_bytes(), false);
        assert_eq!(digest["bytes"], 6000);
        assert_eq!(digest["complete"], false);
        // The head ends on a character boundary within the limit.
        let head = digest["head"].as_str().unwrap();
        assert_eq!(head.len(), BODY_HEAD_BYTES);
        assert!(head.chars().all(|c| c == 'é'));
        assert_eq!(
            body_digest(b"abc", true)["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
