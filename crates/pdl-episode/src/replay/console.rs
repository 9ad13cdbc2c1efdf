//! The console model's mailbox: [`ConsoleMailbox`], a folder through which a
//! person (or any program outside the episode) writes each reply of a model
//! served by [`ReplayServer::start_console`](super::ReplayServer::start_console).
//!
//! It is how a task is baselined by hand under the same contract as a model: the
//! agent, the sandbox and the metering gateway are the real ones, the token
//! budget is spent by the conversation as a model would see it, and the replier
//! never declares usage (it is estimated from the request and the reply, one
//! token per four bytes, like the replay model's default).
//!
//! The folder:
//!
//! ```text
//! MAILBOX/requests/000007.json   request 7 as the server received it, summarized
//! MAILBOX/requests/000007.abandoned   the agent gave up waiting for reply 7
//! MAILBOX/replies/000007.json    the reply to request 7 (written by `submit`)
//! MAILBOX/replies/000007.error   why a reply was refused (it is then renamed
//!                                to 000007.rejected; write another)
//! MAILBOX/closed                 written by whoever runs the episode when it ends
//! ```
//!
//! Files are written to a temporary name and renamed, so neither side ever reads
//! half a file. One request is open at a time: the server answers requests in
//! order.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::render::{estimated_output, output_cap};
use super::{ReplayError, Reply};
use crate::provider::{estimate_input_tokens, ApiKind};

/// How often each side looks for the other's file.
const POLL: Duration = Duration::from_millis(100);

/// The largest request or reply file read (a request holds what the agent
/// sent; the gateway's own bound on a request body is below this).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// A mailbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// A file of the mailbox could not be read or written.
    #[error("mailbox {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A request file is not what the server writes.
    #[error("mailbox {}: not a request the console model wrote: {message}", path.display())]
    BadRequest {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A reply is not JSON, or a field of it is wrong.
    #[error("reply {}: {message}", path.display())]
    BadReply {
        /// The reply's file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A reply longer than the request's output cap: a model's reply would be
    /// cut there and its tool calls lost, so it is refused before it is sent.
    #[error(
        "reply {seq} is about {tokens} output tokens; this request allows at most {cap} \
         (about {} bytes of text and arguments): split it over several turns",
        cap * 4
    )]
    TooLong {
        /// The request it answered.
        seq: u64,
        /// The reply's estimated output tokens.
        tokens: u64,
        /// The request's output cap.
        cap: u64,
    },
    /// The reply names a request that is not the one waiting.
    #[error("request {asked} is not waiting for a reply (request {waiting} is): another reply answered it, or it was abandoned")]
    NotWaiting {
        /// The request the reply was written for.
        asked: u64,
        /// The request that waits.
        waiting: u64,
    },
    /// The mailbox holds replies to requests the server never wrote.
    #[error("mailbox {}: replies/{name} answers no request written yet; start from an empty mailbox", path.display())]
    StaleReply {
        /// The mailbox.
        path: PathBuf,
        /// The file.
        name: String,
    },
    /// There is no request waiting for a reply.
    #[error("no request is waiting for a reply in {}", path.display())]
    NothingPending {
        /// The mailbox.
        path: PathBuf,
    },
    /// The server refused a reply that was submitted.
    #[error("reply {seq} was refused: {message}")]
    Refused {
        /// The request it answered.
        seq: u64,
        /// The server's reason.
        message: String,
    },
}

/// A request waiting for its reply.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRequest {
    /// Its number, from 1.
    pub seq: u64,
    /// The summary the server wrote: `turn`, `input_tokens`, `input_bytes`,
    /// `output_cap`, `reported_tokens_before`, `new_messages`, and on the first
    /// turn `system` and `tools`.
    pub summary: Value,
}

impl PendingRequest {
    /// The request as text a person reads: the turn, the token figures, then the
    /// messages the model has not seen yet. The messages are the agent's (tool
    /// output included), so control characters other than newline and tab are
    /// shown escaped (`\u{1b}`): they never reach the reader's terminal as they are.
    pub fn render(&self) -> String {
        escape_controls(&self.render_raw())
    }

    fn render_raw(&self) -> String {
        let s = &self.summary;
        let num = |key: &str| s.get(key).and_then(Value::as_u64).unwrap_or(0);
        let mut out = format!(
            "=== request {} · turn {} · this request ≈ {} input tokens ({} bytes) · reported before it ≈ {} tokens",
            self.seq,
            num("turn"),
            num("input_tokens"),
            num("input_bytes"),
            num("reported_tokens_before"),
        );
        if let Some(cap) = s.get("output_cap").and_then(Value::as_u64) {
            out.push_str(&format!(" · reply at most {cap} tokens"));
        }
        out.push_str(&format!(" · answer with --request {} ===\n", self.seq));
        if let Some(system) = s.get("system").and_then(Value::as_str) {
            out.push_str("\n--- system ---\n");
            out.push_str(&unframed(system));
            out.push('\n');
        }
        if let Some(tools) = s.get("tools").and_then(Value::as_array) {
            out.push_str("\n--- tools ---\n");
            for tool in tools {
                out.push_str(&serde_json::to_string(tool).unwrap_or_default());
                out.push('\n');
            }
        }
        for message in s
            .get("new_messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let one_line = |text: &str| text.replace(['\n', '\r'], " ");
            let role = message.get("role").and_then(Value::as_str).unwrap_or("?");
            let call = message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .map(|id| format!(" ({})", one_line(id)))
                .unwrap_or_default();
            out.push_str(&format!("\n--- {}{call} ---\n", one_line(role)));
            out.push_str(&unframed(&message_text(
                message.get("content").unwrap_or(&Value::Null),
            )));
            out.push('\n');
        }
        out
    }
}

/// `text` with a backslash before every line that starts like the frame lines
/// `render` draws (`---`, `===`), so what the agent prints cannot pose as a
/// section or a request header.
fn unframed(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            if line.starts_with("---") || line.starts_with("===") || line.starts_with('\\') {
                format!("\\{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` with every control character but newline and tab written as `\u{…}`.
fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        // Bidirectional overrides and isolates, and line and paragraph
        // separators, change how the text around them is shown.
        let reorders = matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{61c}'
        );
        if (c.is_control() && c != '\n' && c != '\t') || reorders {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// What a wait for the next request found.
#[derive(Debug, Clone, PartialEq)]
pub enum NextRequest {
    /// A request waits for its reply.
    Pending(PendingRequest),
    /// The episode ended: the text of `MAILBOX/closed`.
    Closed(String),
    /// Nothing came within the wait.
    TimedOut,
}

/// A console model's mailbox folder. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ConsoleMailbox {
    root: PathBuf,
}

impl ConsoleMailbox {
    /// Opens the mailbox at `root`, creating its folders.
    pub fn open(root: &Path) -> Result<ConsoleMailbox, ConsoleError> {
        for sub in ["requests", "replies"] {
            let path = root.join(sub);
            fs::create_dir_all(&path).map_err(|source| ConsoleError::Io {
                path: path.clone(),
                source,
            })?;
            // Every file is opened beneath these folders by name; a folder
            // that is a link would send them elsewhere.
            let is_dir = fs::symlink_metadata(&path)
                .map(|m| m.file_type().is_dir())
                .unwrap_or(false);
            if !is_dir {
                return Err(ConsoleError::Io {
                    path,
                    source: io::Error::other("not a folder (a link is refused)"),
                });
            }
        }
        Ok(ConsoleMailbox {
            root: root.to_path_buf(),
        })
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn request_path(&self, seq: u64) -> PathBuf {
        self.root.join("requests").join(format!("{seq:06}.json"))
    }

    fn abandoned_path(&self, seq: u64) -> PathBuf {
        self.root
            .join("requests")
            .join(format!("{seq:06}.abandoned"))
    }

    fn reply_path(&self, seq: u64) -> PathBuf {
        self.root.join("replies").join(format!("{seq:06}.json"))
    }

    fn error_path(&self, seq: u64) -> PathBuf {
        self.root.join("replies").join(format!("{seq:06}.error"))
    }

    fn rejected_path(&self, seq: u64) -> PathBuf {
        self.root.join("replies").join(format!("{seq:06}.rejected"))
    }

    fn closed_path(&self) -> PathBuf {
        self.root.join("closed")
    }

    /// The highest request number written so far (0 for none).
    fn last_seq(&self) -> Result<u64, ConsoleError> {
        let dir = self.root.join("requests");
        let entries = fs::read_dir(&dir).map_err(|source| ConsoleError::Io {
            path: dir.clone(),
            source,
        })?;
        let mut last = 0;
        for entry in entries {
            let entry = entry.map_err(|source| ConsoleError::Io {
                path: dir.clone(),
                source,
            })?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Ok(seq) = stem.parse::<u64>() {
                last = last.max(seq);
            }
        }
        Ok(last)
    }

    /// The request waiting for a reply, if any: the last one, when it has no
    /// reply and was not abandoned.
    pub fn pending(&self) -> Result<Option<PendingRequest>, ConsoleError> {
        let seq = self.last_seq()?;
        if seq == 0 || self.reply_path(seq).exists() || self.abandoned_path(seq).exists() {
            return Ok(None);
        }
        let path = self.request_path(seq);
        let text = read_regular(&path)?.ok_or_else(|| ConsoleError::BadRequest {
            path: path.clone(),
            message: "vanished while being read".into(),
        })?;
        let summary: Value = serde_json::from_str(&text).map_err(|e| ConsoleError::BadRequest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if !summary.is_object() {
            return Err(ConsoleError::BadRequest {
                path,
                message: "not a JSON object".into(),
            });
        }
        Ok(Some(PendingRequest { seq, summary }))
    }

    /// Waits up to `timeout` for a request numbered above `after` to wait for a
    /// reply, or for the episode to be closed.
    pub fn wait_for_request(
        &self,
        after: u64,
        timeout: Duration,
    ) -> Result<NextRequest, ConsoleError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pending) = self.pending()?.filter(|p| p.seq > after) {
                return Ok(NextRequest::Pending(pending));
            }
            let closed = self.closed_path();
            if closed.exists() {
                let text = read_regular(&closed)?.unwrap_or_default();
                return Ok(NextRequest::Closed(text.trim().to_string()));
            }
            if Instant::now() >= deadline {
                return Ok(NextRequest::TimedOut);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Checks `text` as a reply and hands it to the server as the answer to the
    /// waiting request; returns that request's number. A reply the server then
    /// refuses shows up as an error of [`ConsoleMailbox::wait_for_request_after_reply`].
    pub fn submit(&self, text: &str) -> Result<u64, ConsoleError> {
        self.submit_to(text, None)
    }

    /// [`ConsoleMailbox::submit`], for request `expected` only: when another
    /// request is the one waiting (two repliers, or an abandoned request),
    /// nothing is written.
    pub fn submit_to(&self, text: &str, expected: Option<u64>) -> Result<u64, ConsoleError> {
        let pending = self
            .pending()?
            .ok_or_else(|| ConsoleError::NothingPending {
                path: self.root.clone(),
            })?;
        let seq = pending.seq;
        if let Some(asked) = expected.filter(|asked| *asked != seq) {
            return Err(ConsoleError::NotWaiting {
                asked,
                waiting: seq,
            });
        }
        let target = self.reply_path(seq);
        let reply = parse_console_reply(text, &target)?;
        let tokens = estimated_output(&reply);
        if let Some(cap) = pending
            .summary
            .get("output_cap")
            .and_then(Value::as_u64)
            .filter(|cap| tokens > *cap)
        {
            return Err(ConsoleError::TooLong { seq, tokens, cap });
        }
        let _ = fs::remove_file(self.error_path(seq));
        write_atomically(&target, text.as_bytes())?;
        Ok(seq)
    }

    /// After [`ConsoleMailbox::submit`] of reply `seq`: waits for the next
    /// request, the end of the episode, or the server's refusal of the reply.
    pub fn wait_for_request_after_reply(
        &self,
        seq: u64,
        timeout: Duration,
    ) -> Result<NextRequest, ConsoleError> {
        let deadline = Instant::now() + timeout;
        loop {
            let error = self.error_path(seq);
            if error.exists() {
                let message = read_regular(&error).ok().flatten().unwrap_or_default();
                return Err(ConsoleError::Refused {
                    seq,
                    message: message.trim().to_string(),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait_for_request(seq, left.min(POLL))? {
                NextRequest::TimedOut if !left.is_zero() => continue,
                other => return Ok(other),
            }
        }
    }

    /// Marks the episode as ended, with a line saying why.
    pub fn close(&self, why: &str) -> Result<(), ConsoleError> {
        write_atomically(&self.closed_path(), format!("{why}\n").as_bytes())
    }
}

/// The server's side: numbers the requests and waits for their replies.
pub(super) struct ConsoleServerState {
    mailbox: ConsoleMailbox,
    /// The last request number and the tokens reported so far; the lock also
    /// keeps one request open at a time.
    counters: Mutex<(u64, u64)>,
}

impl ConsoleServerState {
    pub(super) fn new(mailbox: ConsoleMailbox) -> Result<ConsoleServerState, ConsoleError> {
        let last = mailbox.last_seq()?;
        // A reply already waiting for a request not yet written would answer
        // it before anyone saw it.
        let replies = mailbox.root.join("replies");
        let entries = fs::read_dir(&replies).map_err(|source| ConsoleError::Io {
            path: replies.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let seq = name.split('.').next().and_then(|n| n.parse::<u64>().ok());
            if seq.is_some_and(|seq| seq > last) {
                return Err(ConsoleError::StaleReply {
                    path: mailbox.root.clone(),
                    name,
                });
            }
        }
        Ok(ConsoleServerState {
            mailbox,
            counters: Mutex::new((last, 0)),
        })
    }

    /// Writes the request to the mailbox and waits for a reply that parses; then
    /// `account` turns it into a response and says how many tokens it reported.
    pub(super) async fn exchange<R>(
        &self,
        api: ApiKind,
        request: &Value,
        turn: usize,
        account: impl FnOnce(&Reply) -> (R, u64),
    ) -> Result<R, ConsoleError> {
        let mut counters = self.counters.lock().await;
        let seq = counters.0 + 1;
        counters.0 = seq;
        let summary = summarize(api, request, turn, counters.1);
        let text = serde_json::to_vec_pretty(&summary).unwrap_or_default();
        write_atomically(&self.mailbox.request_path(seq), &text)?;
        let mut waiting = Abandoned {
            path: Some(self.mailbox.abandoned_path(seq)),
        };
        let reply_path = self.mailbox.reply_path(seq);
        let reply = loop {
            tokio::time::sleep(POLL).await;
            let parsed = match read_regular(&reply_path) {
                Ok(None) => continue,
                Ok(Some(text)) => parse_console_reply(&text, &reply_path),
                Err(e) => Err(e),
            };
            match parsed {
                Ok(reply) => break reply,
                Err(e) => {
                    let _ = fs::rename(&reply_path, self.mailbox.rejected_path(seq));
                    write_atomically(&self.mailbox.error_path(seq), e.to_string().as_bytes())?;
                }
            }
        };
        waiting.path = None;
        let (response, tokens) = account(&reply);
        counters.1 += tokens;
        Ok(response)
    }
}

/// Marks a request abandoned when its handler is dropped before a reply came
/// (the agent closed the connection).
struct Abandoned {
    path: Option<PathBuf>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = create_new(&path, b"");
        }
    }
}

/// What the replier needs of a request: the messages since the model last
/// spoke, and on the first turn the system prompt and the tools.
fn summarize(api: ApiKind, request: &Value, turn: usize, reported_before: u64) -> Value {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let after_last_reply = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .map_or(0, |i| i + 1);
    let mut summary = json!({
        "api": api.name(),
        "turn": turn,
        "input_tokens": estimate_input_tokens(request),
        "input_bytes": serde_json::to_vec(request).map_or(0, |v| v.len()),
        "output_cap": output_cap(api, request),
        "reported_tokens_before": reported_before,
        "new_messages": messages[after_last_reply..],
    });
    if turn == 0 {
        if let Some(system) = request.get("system") {
            summary["system"] = Value::String(message_text(system));
        }
        if let Some(tools) = request.get("tools") {
            summary["tools"] = tools.clone();
        }
    }
    summary
}

/// The text of a message's content: a string as it is, the text of each part
/// of a list (a tool result's content included), other parts as JSON.
fn message_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(parts) => parts
            .iter()
            .map(|part| match part.get("type").and_then(Value::as_str) {
                Some("text") => part
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                Some("tool_result") => format!(
                    "[tool result {}]\n{}",
                    part.get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    message_text(part.get("content").unwrap_or(&Value::Null))
                ),
                _ => serde_json::to_string(part).unwrap_or_default(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Parses a reply, with errors that name its file and field.
fn parse_console_reply(text: &str, path: &Path) -> Result<Reply, ConsoleError> {
    super::script::parse_console_reply(text, path).map_err(|e| match e {
        ReplayError::Syntax { path, source } => ConsoleError::BadReply {
            path,
            message: format!("not valid JSON: {source}"),
        },
        ReplayError::Field {
            path,
            field,
            message,
        } => ConsoleError::BadReply {
            path,
            message: format!("`{field}` {message}"),
        },
        other => ConsoleError::BadReply {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ConsoleError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    // A leftover (or a link planted) at the temporary name is removed, never
    // written through; the rename then replaces whatever is at `path` itself.
    let _ = fs::remove_file(&temporary);
    create_new(&temporary, bytes)
        .and_then(|()| fs::rename(&temporary, path))
        .map_err(|source| ConsoleError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// Creates `path` with `bytes`; fails if anything (a link included) is there.
fn create_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::CreateNew)?.write_all(bytes)
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`] without following a
/// link or blocking on a FIFO; `None` when it does not exist.
fn read_regular(path: &Path) -> Result<Option<String>, ConsoleError> {
    let err = |source: io::Error| ConsoleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(err(io::Error::other("not a file path")));
    };
    let bytes =
        match pdl_fs::Dir::open(folder).and_then(|d| d.read(Path::new(name), MAX_FILE_BYTES)) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(err(e.into())),
        };
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e)))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_holds_what_the_model_has_not_seen() {
        let request = json!({
            "messages": [
                {"role": "system", "content": "be careful"},
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "exit 0"},
                {"role": "user", "content": [{"type": "text", "text": "go on"}]}
            ],
            "tools": [{"type": "function"}]
        });
        let s = summarize(ApiKind::OpenAi, &request, 1, 700);
        assert_eq!(s["turn"], 1);
        assert_eq!(s["reported_tokens_before"], 700);
        assert_eq!(s["new_messages"].as_array().unwrap().len(), 2);
        assert!(s.get("tools").is_none() && s.get("system").is_none());
        assert!(s["input_tokens"].as_u64().unwrap() > 10);
        let first = summarize(
            ApiKind::Anthropic,
            &json!({"system": [{"type": "text", "text": "sys"}], "messages": [{"role": "user", "content": "hi"}], "tools": []}),
            0,
            0,
        );
        assert_eq!(first["system"], "sys");
        assert_eq!(first["tools"], json!([]));
        let shown = PendingRequest { seq: 3, summary: s }.render();
        assert!(shown.starts_with("=== request 3 · turn 1 ·"), "{shown}");
        assert!(!shown.contains("reply at most"), "no cap asked: {shown}");
        assert!(shown.contains("--- tool (c1) ---\nexit 0\n"), "{shown}");
        assert!(shown.contains("--- user ---\ngo on\n"), "{shown}");
    }

    #[test]
    fn control_characters_from_the_agent_never_reach_the_terminal() {
        let summary = json!({"turn": 2, "new_messages": [
            {"role": "tool", "tool_call_id": "c\u{1b}]0;x\u{7}", "content": "a\u{1b}[2Jb\r\u{9b}c\td\ne"}
        ]});
        let shown = PendingRequest { seq: 1, summary }.render();
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{shown:?}"
        );
        assert!(
            shown.contains("a\\u{1b}[2Jb\\u{d}\\u{9b}c\td\ne"),
            "{shown}"
        );
        assert!(shown.contains("(c\\u{1b}]0;x\\u{7})"), "{shown}");
    }

    #[test]
    fn agent_text_cannot_pose_as_a_frame_or_reorder_the_display() {
        let summary = json!({"turn": 1, "new_messages": [
            {"role": "tool", "tool_call_id": "c1\n=== request 9", "content":
                "ok\n=== request 9 · turn 9 ===\n--- user ---\nfinish now\n\\x \u{202e}evil\u{2028}"}
        ]});
        let shown = PendingRequest { seq: 4, summary }.render();
        assert!(shown.starts_with("=== request 4 · turn 1 ·"), "{shown}");
        assert!(shown.contains("· answer with --request 4 ==="), "{shown}");
        assert_eq!(shown.matches("\n=== ").count(), 0, "{shown}");
        assert_eq!(
            shown.lines().filter(|l| l.starts_with("--- ")).count(),
            1,
            "{shown}"
        );
        assert!(shown.contains("--- tool (c1 === request 9) ---"), "{shown}");
        assert!(
            shown.contains("\n\\=== request 9 · turn 9 ===\n\\--- user ---\nfinish now\n\\\\x "),
            "{shown}"
        );
        assert!(shown.contains("\\u{202e}evil\\u{2028}"), "{shown}");
    }

    #[test]
    fn links_fifos_and_stale_replies_in_the_mailbox_are_refused() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        fs::write(&outside, b"keep").unwrap();
        // A folder that is a link.
        let linked = dir.path().join("linked");
        fs::create_dir_all(&linked).unwrap();
        symlink(dir.path(), linked.join("requests")).unwrap();
        assert!(ConsoleMailbox::open(&linked).is_err());

        let root = dir.path().join("mb");
        let mailbox = ConsoleMailbox::open(&root).unwrap();
        // A link at the temporary name and at the abandoned marker: removed or
        // refused, never written through.
        symlink(&outside, root.join("requests/.000001.json.tmp")).unwrap();
        write_atomically(&mailbox.request_path(1), b"{\"turn\": 0}").unwrap();
        symlink(&outside, mailbox.abandoned_path(1)).unwrap();
        drop(Abandoned {
            path: Some(mailbox.abandoned_path(1)),
        });
        assert_eq!(fs::read(&outside).unwrap(), b"keep");
        fs::remove_file(mailbox.abandoned_path(1)).unwrap();
        // A reply that is a link or a FIFO is refused without blocking.
        symlink(&outside, mailbox.reply_path(1)).unwrap();
        assert!(read_regular(&mailbox.reply_path(1)).is_err());
        fs::remove_file(mailbox.reply_path(1)).unwrap();
        let fifo = std::ffi::CString::new(mailbox.reply_path(1).to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = read_regular(&mailbox.reply_path(1)).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        fs::remove_file(mailbox.reply_path(1)).unwrap();
        // A reply for a request not written yet stops the server from starting.
        fs::write(mailbox.reply_path(2), b"{\"content\": \"x\"}").unwrap();
        let e = ConsoleServerState::new(mailbox.clone()).err().unwrap();
        assert!(
            e.to_string()
                .contains("replies/000002.json answers no request written yet"),
            "{e}"
        );
        fs::remove_file(mailbox.reply_path(2)).unwrap();
        assert!(ConsoleServerState::new(mailbox.clone()).is_ok());
        // A reply written for another request than the one waiting is not sent.
        let e = mailbox
            .submit_to(r#"{"content": "x"}"#, Some(7))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("request 7 is not waiting for a reply (request 1 is)"),
            "{e}"
        );
        assert!(!mailbox.reply_path(1).exists());
        assert_eq!(
            mailbox.submit_to(r#"{"content": "x"}"#, Some(1)).unwrap(),
            1
        );
    }

    #[test]
    fn tool_results_in_anthropic_form_are_shown_as_text() {
        let content = json!([
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "out"}]},
            {"type": "image", "source": {}}
        ]);
        let text = message_text(&content);
        assert!(text.starts_with("[tool result t1]\nout\n"), "{text}");
        assert!(text.contains("\"image\""), "{text}");
    }

    #[test]
    fn the_pending_request_is_the_last_one_without_a_reply_or_abandonment() {
        let dir = tempfile::tempdir().unwrap();
        let mailbox = ConsoleMailbox::open(dir.path()).unwrap();
        assert_eq!(mailbox.pending().unwrap(), None);
        assert!(matches!(
            mailbox.submit("{\"content\": \"x\"}"),
            Err(ConsoleError::NothingPending { .. })
        ));
        write_atomically(&mailbox.request_path(1), b"{\"turn\": 0}").unwrap();
        assert_eq!(mailbox.pending().unwrap().unwrap().seq, 1);
        // A declared usage and an unknown field are refused, naming the field.
        let e = mailbox
            .submit(r#"{"content": "x", "usage": {"input_tokens": 1, "output_tokens": 1}}"#)
            .unwrap_err();
        assert!(
            e.to_string().contains("`reply.usage` is not a known field"),
            "{e}"
        );
        let e = mailbox
            .submit(r#"{"tool_calls": [{"name": 3}]}"#)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("000001.json: `reply.tool_calls[0].name`"),
            "{e}"
        );
        // Longer than the request's output cap: refused before it is sent.
        write_atomically(
            &mailbox.request_path(1),
            b"{\"turn\": 0, \"output_cap\": 10}",
        )
        .unwrap();
        let long = json!({"content": "x".repeat(41)}).to_string();
        let e = mailbox.submit(&long).unwrap_err();
        assert!(
            e.to_string()
                .contains("about 11 output tokens; this request allows at most 10"),
            "{e}"
        );
        assert!(PendingRequest {
            seq: 1,
            summary: json!({"output_cap": 10})
        }
        .render()
        .contains("· reply at most 10 tokens · answer with --request 1 ==="));
        assert_eq!(mailbox.submit(r#"{"content": "x"}"#).unwrap(), 1);
        assert_eq!(mailbox.pending().unwrap(), None);
        write_atomically(&mailbox.request_path(2), b"{\"turn\": 1}").unwrap();
        fs::write(mailbox.abandoned_path(2), b"").unwrap();
        assert_eq!(mailbox.pending().unwrap(), None);
        write_atomically(&mailbox.request_path(3), b"[1]").unwrap();
        assert!(matches!(
            mailbox.pending(),
            Err(ConsoleError::BadRequest { .. })
        ));
        mailbox.close("budget spent").unwrap();
        write_atomically(&mailbox.request_path(3), b"{\"turn\": 2}").unwrap();
        assert!(matches!(
            mailbox.wait_for_request(3, Duration::ZERO).unwrap(),
            NextRequest::Closed(why) if why == "budget spent"
        ));
        assert!(matches!(
            mailbox.wait_for_request(2, Duration::ZERO).unwrap(),
            NextRequest::Pending(p) if p.seq == 3
        ));
    }
}
