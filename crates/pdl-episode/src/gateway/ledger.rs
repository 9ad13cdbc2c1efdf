//! An episode slot's spending, kept in a file across attempts: [`Ledger`].
//!
//! The budget belongs to an episode *slot* (a task, an agent, a model, a
//! sample), not to one attempt at it: when an attempt ends in a harness error
//! the attempt that runs next gets only what the earlier ones left, so an agent
//! that provokes a harness error buys no fresh budget. The gateway appends one
//! JSON line to the slot's ledger file each time the spend changes, before a
//! call goes upstream (its reservation) and when it is settled; the campaign
//! appends a `closed` line when the attempt's outcome is recorded:
//!
//! ```text
//! {"ts": "2026-01-02T03:04:05.678Z", "episode": "<id>", "attempt": "<start>",
//!  "tokens_in": 81234, "tokens_out": 5120,     charged so far, earlier attempts included
//!  "held_in": 2048, "held_out": 16384,         reserved by calls in flight
//!  "closed": false}                            true on the line that ends an attempt
//! ```
//!
//! Each line is written with one `write` to a file opened for appending, so a
//! harness killed at any point leaves whole lines and at most a torn last one.
//! [`Ledger::resume`] starts the next attempt from the last `closed` line: what
//! was charged plus what calls in flight held (charged as abandoned calls are).
//! An attempt that was never closed was cut short by the harness itself (it was
//! killed or the machine went down), which no agent can cause: its spend is
//! reported ([`Ledger::interrupted`]) but not charged to the next attempt, so
//! resuming an interrupted campaign gives every episode its whole budget.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::trajectory::now_rfc3339;

/// The longest ledger file read: one line per reservation and settlement,
/// under 300 bytes each, so far beyond any episode's calls.
const MAX_LEDGER_BYTES: u64 = 64 << 20;

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
    /// The file holds no ledger line, or is too large to be one.
    #[error(
        "the token ledger {} holds no ledger line or is larger than {} MiB, so what earlier attempts of the episode spent is unknown",
        path.display(), MAX_LEDGER_BYTES >> 20
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
    #[serde(default)]
    attempt: String,
    tokens_in: u64,
    tokens_out: u64,
    #[serde(default)]
    held_in: u64,
    #[serde(default)]
    held_out: u64,
    #[serde(default)]
    closed: bool,
}

impl Line {
    /// Charged plus held: what the slot spent by this line, calls in flight counted whole.
    fn spent(&self) -> Spent {
        Spent {
            input_tokens: self.tokens_in.saturating_add(self.held_in),
            output_tokens: self.tokens_out.saturating_add(self.held_out),
        }
    }
}

/// The ledger of an episode slot, open for appending, with what its earlier
/// attempts spent. Hand it to [`crate::Gateway::open_episode_with`].
#[derive(Debug)]
pub struct Ledger {
    file: File,
    path: PathBuf,
    carried: Spent,
    interrupted: Spent,
}

impl Ledger {
    /// Reads what earlier attempts spent from `file` (opened for reading and
    /// appending; empty for a slot's first attempt): the last closed line's
    /// charged tokens plus the tokens its calls in flight held, and apart, what
    /// attempts that were never closed spent beyond it. `path` names the file
    /// in messages.
    pub fn resume(mut file: File, path: PathBuf) -> Result<Ledger, LedgerError> {
        let text = read_whole(&mut file, &path)?;
        let io_err = |source| LedgerError::Io {
            path: path.clone(),
            source,
        };
        let (carried, interrupted) = match read_lines(&text) {
            Some(spend) => spend,
            // Nothing but a torn first write: nothing was forwarded yet.
            None if !text.contains(&b'\n') => (Spent::default(), Spent::default()),
            None => return Err(LedgerError::Malformed { path }),
        };
        // A torn last line is ended, so that the next line stands on its own.
        if text.last().is_some_and(|b| *b != b'\n') {
            file.write_all(b"\n").map_err(io_err)?;
        }
        Ok(Ledger {
            file,
            path,
            carried,
            interrupted,
        })
    }

    /// Ends the attempt the ledger's last lines belong to: appends its final
    /// spend as a `closed` line, calls still in flight charged whole. The
    /// campaign calls it when the attempt's outcome is about to be recorded.
    pub fn close(mut file: File, path: &Path) -> Result<(), LedgerError> {
        let text = read_whole(&mut file, path)?;
        let Some(last) = whole_lines(&text).pop() else {
            return Ok(());
        };
        if last.closed {
            return Ok(());
        }
        let spent = last.spent();
        let line = Line {
            ts: now_rfc3339(),
            episode: last.episode.clone(),
            attempt: last.attempt.clone(),
            tokens_in: spent.input_tokens,
            tokens_out: spent.output_tokens,
            held_in: 0,
            held_out: 0,
            closed: true,
        };
        let mut bytes = Vec::with_capacity(256);
        if text.last().is_some_and(|b| *b != b'\n') {
            bytes.push(b'\n');
        }
        serde_json::to_writer(&mut bytes, &line).expect("ledger lines serialize");
        bytes.push(b'\n');
        file.write_all(&bytes).map_err(|source| LedgerError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// What attempts of the slot that were never closed (the harness was
    /// killed during them) spent beyond [`Ledger::carried`]: reported, not
    /// charged.
    pub fn interrupted(&self) -> Spent {
        self.interrupted
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
            attempt: now_rfc3339(),
            error: None,
            torn: false,
        }
    }
}

/// The whole ledger file, from its start, refused past [`MAX_LEDGER_BYTES`].
fn read_whole(file: &mut File, path: &Path) -> Result<Vec<u8>, LedgerError> {
    let io_err = |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    };
    if file.metadata().map_err(io_err)?.len() > MAX_LEDGER_BYTES {
        return Err(LedgerError::Malformed {
            path: path.to_path_buf(),
        });
    }
    file.seek(SeekFrom::Start(0)).map_err(io_err)?;
    let mut text = Vec::new();
    file.take(MAX_LEDGER_BYTES)
        .read_to_end(&mut text)
        .map_err(io_err)?;
    Ok(text)
}

/// The ledger lines among the whole lines of `text` (a torn last line and
/// lines that are no ledger line are skipped).
fn whole_lines(text: &[u8]) -> Vec<Line> {
    let Some(end) = text.iter().rposition(|b| *b == b'\n') else {
        return Vec::new();
    };
    text[..end]
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Line>(line).ok())
        .collect()
}

/// What the next attempt starts from (the last closed line's spend) and what
/// the attempts after it, never closed, spent beyond that. `None` when the
/// text holds no ledger line.
fn read_lines(text: &[u8]) -> Option<(Spent, Spent)> {
    let lines = whole_lines(text);
    if lines.is_empty() {
        return None;
    }
    let closed_at = lines.iter().rposition(|line| line.closed);
    let carried = closed_at.map(|i| lines[i].spent()).unwrap_or_default();
    let mut interrupted = Spent::default();
    let mut peak: std::collections::BTreeMap<&str, Spent> = Default::default();
    for line in &lines[closed_at.map_or(0, |i| i + 1)..] {
        let spent = line.spent();
        let entry = peak.entry(line.attempt.as_str()).or_default();
        entry.input_tokens = entry.input_tokens.max(spent.input_tokens);
        entry.output_tokens = entry.output_tokens.max(spent.output_tokens);
    }
    for spent in peak.values() {
        interrupted.input_tokens = interrupted
            .input_tokens
            .saturating_add(spent.input_tokens.saturating_sub(carried.input_tokens));
        interrupted.output_tokens = interrupted
            .output_tokens
            .saturating_add(spent.output_tokens.saturating_sub(carried.output_tokens));
    }
    Some((carried, interrupted))
}

/// The gateway's side of a ledger: appends a line each time the spend changes.
#[derive(Debug)]
pub(crate) struct LedgerWriter {
    file: File,
    path: PathBuf,
    episode: String,
    /// When the attempt started: tells its lines from an earlier attempt's.
    attempt: String,
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
            attempt: self.attempt.clone(),
            tokens_in: charged.input_tokens,
            tokens_out: charged.output_tokens,
            held_in: held.input_tokens,
            held_out: held.output_tokens,
            closed: false,
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

    fn spent(i: u64, o: u64) -> Spent {
        Spent {
            input_tokens: i,
            output_tokens: o,
        }
    }

    /// One attempt: its lines, closed or not.
    fn attempt(path: &Path, lines: &[(Spent, Spent)], close: bool) -> Ledger {
        let ledger = Ledger::resume(open(path), path.to_path_buf()).unwrap();
        let mut writer = ledger.into_writer("e".into());
        writer.attempt.push_str(&format!("{}", lines.len()));
        for (charged, held) in lines {
            writer.write(*charged, *held).unwrap();
        }
        assert!(writer.error().is_none());
        drop(writer);
        if close {
            Ledger::close(open(path), path).unwrap();
        }
        Ledger::resume(open(path), path.to_path_buf()).unwrap()
    }

    #[test]
    fn a_closed_attempt_carries_what_it_charged_and_held_into_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let first = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(first.carried(), Spent::default());
        drop(first);
        let next = attempt(
            &path,
            &[
                (spent(0, 0), spent(0, 0)),
                (spent(0, 0), spent(100, 900)),
                (spent(40, 60), spent(0, 0)),
                (spent(40, 60), spent(200, 700)),
            ],
            true,
        );
        // The call that was in flight when the attempt ended is charged whole.
        assert_eq!(next.carried(), spent(240, 760));
        assert_eq!(next.interrupted(), Spent::default());
        // Closing twice adds nothing.
        Ledger::close(open(&path), &path).unwrap();
        let again = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(again.carried(), spent(240, 760));
    }

    #[test]
    fn an_attempt_the_harness_never_closed_is_reported_not_charged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        attempt(&path, &[(spent(10, 20), spent(0, 0))], true);
        // Two attempts cut short by a killed harness, each from the closed spend.
        attempt(
            &path,
            &[(spent(10, 20), spent(0, 0)), (spent(10, 20), spent(5, 100))],
            false,
        );
        let after = attempt(
            &path,
            &[
                (spent(10, 20), spent(0, 0)),
                (spent(13, 24), spent(0, 0)),
                (spent(13, 24), spent(1, 1)),
            ],
            false,
        );
        assert_eq!(after.carried(), spent(10, 20));
        assert_eq!(after.interrupted(), spent(5 + 4, 100 + 5));
        // A first attempt that was never closed: a fresh budget.
        let fresh = dir.path().join("fresh.jsonl");
        let after = attempt(&fresh, &[(spent(7, 8), spent(1, 1))], false);
        assert_eq!(after.carried(), Spent::default());
        assert_eq!(after.interrupted(), spent(8, 9));
    }

    #[test]
    fn a_torn_last_line_is_ended_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(
            &path,
            "{\"tokens_in\": 5, \"tokens_out\": 6, \"held_in\": 1, \"held_out\": 2, \"closed\": true}\n{\"tokens_in\": 9",
        )
        .unwrap();
        let ledger = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(ledger.carried().total(), 14);
        let mut writer = ledger.into_writer("e".into());
        writer.write(spent(20, 0), Spent::default()).unwrap();
        drop(writer);
        Ledger::close(open(&path), &path).unwrap();
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
    fn a_long_ledger_resumes_from_its_last_closed_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut text = String::new();
        for i in 0..5_000u64 {
            text.push_str(&format!(
                "{{\"ts\": \"t\", \"episode\": \"e\", \"tokens_in\": {i}, \"tokens_out\": 1, \"closed\": {}}}\n",
                i % 1000 == 0
            ));
        }
        std::fs::write(&path, text).unwrap();
        let ledger = Ledger::resume(open(&path), path.clone()).unwrap();
        assert_eq!(ledger.carried().input_tokens, 4_000);
        assert_eq!(ledger.interrupted().input_tokens, 999);
    }
}
