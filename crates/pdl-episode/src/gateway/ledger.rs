//! An episode slot's spending, kept in a file across attempts: [`Ledger`].
//!
//! The budget belongs to an episode *slot* (a task, an agent, a model, a
//! sample), not to one attempt at it: when an attempt ends in a harness error,
//! or the harness dies in the middle of it, the attempt that runs next gets
//! only what the earlier ones left. The gateway appends one JSON line to the
//! slot's ledger file each time the spend changes, before a call goes upstream
//! (its reservation) and when it is settled:
//!
//! ```text
//! {"ts": "2026-01-02T03:04:05.678Z", "episode": "<id>",
//!  "tokens_in": 81234, "tokens_out": 5120,     charged so far, earlier attempts included
//!  "held_in": 2048, "held_out": 16384}         reserved by calls in flight
//! ```
//!
//! Each line is written with one `write` to a file opened for appending, so a
//! harness killed at any point leaves whole lines and at most a torn last one.
//! [`Ledger::resume`] reads the last whole line: what was charged, plus what
//! was held by calls in flight (they may have been billed, and are charged as
//! abandoned calls are), is what the next attempt starts from.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::trajectory::now_rfc3339;

/// How much of the end of a ledger file is read: many times the longest line.
const TAIL_BYTES: u64 = 64 << 10;

/// Tokens an episode slot spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl Spent {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// A ledger file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The file could not be read or written.
    #[error("the token ledger {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The end of the file holds no ledger line.
    #[error(
        "the token ledger {} does not end with a ledger line, so what earlier attempts of the episode spent is unknown",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// One line of a ledger file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    #[serde(default)]
    ts: String,
    #[serde(default)]
    episode: String,
    tokens_in: u64,
    tokens_out: u64,
    #[serde(default)]
    held_in: u64,
    #[serde(default)]
    held_out: u64,
}

/// The ledger of an episode slot, open for appending, with what its earlier
/// attempts spent. Hand it to [`crate::Gateway::open_episode_with`].
#[derive(Debug)]
pub struct Ledger {
    file: File,
    path: PathBuf,
    carried: Spent,
}

impl Ledger {
    /// Reads what earlier attempts spent from `file` (opened for reading and
    /// appending; empty for a slot's first attempt): the last whole line's
    /// charged tokens plus the tokens its calls in flight held. `path` names the
    /// file in messages.
    pub fn resume(mut file: File, path: PathBuf) -> Result<Ledger, LedgerError> {
        let io_err = |source| LedgerError::Io {
            path: path.clone(),
            source,
        };
        let len = file.metadata().map_err(io_err)?.len();
        let start = len.saturating_sub(TAIL_BYTES);
        file.seek(SeekFrom::Start(start)).map_err(io_err)?;
        let mut tail = Vec::new();
        (&mut file)
            .take(TAIL_BYTES)
            .read_to_end(&mut tail)
            .map_err(io_err)?;
        let carried = last_line(&tail, start > 0)
            .map(|line| Spent {
                input_tokens: line.tokens_in.saturating_add(line.held_in),
                output_tokens: line.tokens_out.saturating_add(line.held_out),
            })
            .or_else(|| {
                // Nothing but a torn first write: nothing was forwarded yet.
                (!tail.contains(&b'\n')).then_some(Spent::default())
            })
            .ok_or_else(|| LedgerError::Malformed { path: path.clone() })?;
        // A torn last line is ended, so that the next line stands on its own.
        if tail.last().is_some_and(|b| *b != b'\n') {
            file.write_all(b"\n").map_err(io_err)?;
        }
        Ok(Ledger {
            file,
            path,
            carried,
        })
    }

    /// What earlier attempts of the slot spent.
    pub fn carried(&self) -> Spent {
        self.carried
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn into_writer(self, episode: String) -> LedgerWriter {
        LedgerWriter {
            file: self.file,
            path: self.path,
            episode,
            error: None,
            torn: false,
        }
    }
}

/// The last whole line of `tail` that is a ledger line. `partial_start`: the
/// tail starts in the middle of the file, so its first line may be cut.
fn last_line(tail: &[u8], partial_start: bool) -> Option<Line> {
    let whole = match tail.iter().rposition(|b| *b == b'\n') {
        Some(end) => &tail[..end],
        None => return None,
    };
    let mut lines: Vec<&[u8]> = whole.split(|b| *b == b'\n').collect();
    if partial_start && !lines.is_empty() {
        lines.remove(0);
    }
    lines
        .into_iter()
        .rev()
        .find_map(|line| serde_json::from_slice::<Line>(line).ok())
}

/// The gateway's side of a ledger: appends a line each time the spend changes.
#[derive(Debug)]
pub(crate) struct LedgerWriter {
    file: File,
    path: PathBuf,
    episode: String,
    error: Option<String>,
    /// A write failed, perhaps halfway: the next line starts on a line of its own.
    torn: bool,
}

impl LedgerWriter {
    /// Appends the slot's spend: `charged` so far (earlier attempts included)
    /// and `held` by calls in flight. The first failure is kept, and each one
    /// is returned.
    pub(crate) fn write(&mut self, charged: Spent, held: Spent) -> Result<(), String> {
        let line = Line {
            ts: now_rfc3339(),
            episode: self.episode.clone(),
            tokens_in: charged.input_tokens,
            tokens_out: charged.output_tokens,
            held_in: held.input_tokens,
            held_out: held.output_tokens,
        };
        let mut bytes = Vec::with_capacity(256);
        if self.torn {
            bytes.push(b'\n');
        }
        serde_json::to_writer(&mut bytes, &line).expect("ledger lines serialize");
        bytes.push(b'\n');
        match self.file.write_all(&bytes) {
            Ok(()) => {
                self.torn = false;
                Ok(())
            }
            Err(e) => {
                self.torn = true;
                let reason = format!("{}: {e}", self.path.display());
                self.error.get_or_insert_with(|| reason.clone());
                Err(reason)
            }
        }
    }

    /// The first failure to write, if any.
    pub(crate) fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_slot_carries_what_was_charged_and_held_across_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let first = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(first.carried(), Spent::default());
        let mut writer = first.into_writer("e".into());
        let spent = |i, o| Spent {
            input_tokens: i,
            output_tokens: o,
        };
        for (charged, held) in [
            (spent(0, 0), spent(0, 0)),
            (spent(0, 0), spent(100, 900)),
            (spent(40, 60), spent(0, 0)),
            (spent(40, 60), spent(200, 700)),
        ] {
            writer.write(charged, held).unwrap();
        }
        assert!(writer.error().is_none());
        drop(writer);
        // The second attempt starts from the charged tokens and the call that
        // was in flight when the first one ended.
        let second = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(second.carried(), spent(240, 760));
    }

    #[test]
    fn a_torn_last_line_is_ended_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(
            &path,
            "{\"tokens_in\": 5, \"tokens_out\": 6, \"held_in\": 1, \"held_out\": 2}\n{\"tokens_in\": 9",
        )
        .unwrap();
        let ledger = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(ledger.carried().total(), 14);
        let mut writer = ledger.into_writer("e".into());
        writer
            .write(
                Spent {
                    input_tokens: 20,
                    output_tokens: 0,
                },
                Spent::default(),
            )
            .unwrap();
        drop(writer);
        let again = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(again.carried().total(), 20);
        // Only a torn first write: nothing was forwarded yet.
        std::fs::write(&path, "{\"tokens_in\"").unwrap();
        assert_eq!(
            Ledger::resume(open(&path), path.clone()).unwrap().carried(),
            Spent::default()
        );
    }

    #[test]
    fn a_file_that_is_no_ledger_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(&path, "not a ledger\nat all\n").unwrap();
        let err = Ledger::resume(open(&path), path.clone()).unwrap_err();
        assert!(err.to_string().contains("ledger.jsonl"), "{err}");
    }

    #[test]
    fn only_the_tail_of_a_long_ledger_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut text = String::new();
        for i in 0..5_000u64 {
            text.push_str(&format!(
                "{{\"ts\": \"t\", \"episode\": \"e\", \"tokens_in\": {i}, \"tokens_out\": 1}}\n"
            ));
        }
        std::fs::write(&path, text).unwrap();
        let ledger = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(ledger.carried().input_tokens, 4_999);
    }
}
