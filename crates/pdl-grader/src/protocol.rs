//! The outcome channel of a test run ([`read_channel`], [`Protocol`]).
//!
//! The trusted bootstrap in the sandbox (`plugin/pdl_boot.py`) writes one line
//! per event to a pipe the harness opened and drains itself:
//! `<json>\t<hex mac>`, where the mac is HMAC-SHA256 under the run's key of the
//! line's sequence number (8 bytes, big-endian) and the SHA-256 of its JSON. A
//! line `ABORT <json string>` is the bootstrap's report that it saw tampering.
//! Events, in the order the protocol allows them:
//!
//! ```text
//! {"e":"start","v":1,"py":"3.11.7"}                           exactly once, first
//! {"e":"compile_error","path":"src/x.py","line":3,"kind":"SyntaxError"}
//! {"e":"collect_error","id":"tests/t.py","kind":"ImportError"}
//! {"e":"collected","ids":["tests/t.py::test_a", ...]}         exactly once
//! {"e":"begin","id":"tests/t.py::test_a"}                       then per test, in
//! {"e":"phase","id":...,"when":"setup","outcome":"passed","xfail":0}   collected
//! {"e":"phase","id":...,"when":"call", ...}   (no call after a setup that did not pass)
//! {"e":"phase","id":...,"when":"teardown", ...}
//! {"e":"end","id":...}
//! {"e":"finish","status":0}                                    exactly once, last
//! ```
//!
//! Any breach (a line that does not verify, an event out of place, a test
//! begun twice or out of order, an unknown node ID, anything after `finish`) is
//! [`Breach`]: the grading is `tampered`. A stream that simply stops (the
//! process was killed or died) is not a breach: tests that did not finish do not
//! pass.

use std::collections::BTreeSet;

use hmac::{KeyInit, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::outcome::{CompileError, TestLog};

/// The most bytes of outcome stream the harness reads from one run; an honest
/// run of thousands of tests stays far below it.
pub const MAX_CHANNEL_BYTES: usize = 16 << 20;

/// Why a run's outcomes cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Breach(pub String);

/// One event of the channel.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Event {
    /// The bootstrap is up, before any code of the repository ran.
    Start {
        /// The protocol version.
        v: u32,
        /// The Python version.
        py: String,
    },
    /// A changed file that does not compile.
    CompileError {
        /// Repository-relative path.
        path: String,
        /// Line of the error (0 when unknown).
        line: u64,
        /// The exception's class name.
        kind: String,
    },
    /// A collector (usually a test file) that failed.
    CollectError {
        /// Its node ID.
        id: String,
        /// The exception's class name.
        kind: String,
    },
    /// The tests that will run, in order.
    Collected {
        /// Node IDs.
        ids: Vec<String>,
    },
    /// A test started.
    Begin {
        /// Its node ID.
        id: String,
    },
    /// One phase of the running test ended.
    Phase {
        /// Its node ID.
        id: String,
        /// `setup`, `call` or `teardown`.
        when: String,
        /// `passed`, `failed` or `skipped`.
        outcome: String,
        /// 1 when the test is an expected failure.
        xfail: u8,
    },
    /// The running test ended.
    End {
        /// Its node ID.
        id: String,
    },
    /// pytest returned this exit status.
    Finish {
        /// The status.
        status: i64,
    },
}

/// Verifies and parses the raw channel bytes. `Ok` holds every event up to the
/// end of the stream (a torn last line, from a run killed mid-write, is
/// dropped); `Err` names the first thing that is not an honest event.
pub fn read_channel(bytes: &[u8], key: &[u8; 32]) -> Result<Vec<Event>, Breach> {
    if bytes.len() > MAX_CHANNEL_BYTES {
        return Err(Breach(format!(
            "the outcome stream is over {MAX_CHANNEL_BYTES} bytes"
        )));
    }
    let mut events = Vec::new();
    let complete = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(i) => &bytes[..=i],
        None => &bytes[..0],
    };
    for (seq, line) in complete
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        if let Some(reason) = line.strip_prefix(b"ABORT ") {
            let reason: String = serde_json::from_slice(reason)
                .unwrap_or_else(|_| String::from_utf8_lossy(reason).into_owned());
            return Err(Breach(sanitize(&format!(
                "the grader's checks saw {reason}"
            ))));
        }
        let Some(tab) = line.iter().rposition(|b| *b == b'\t') else {
            return Err(Breach("an outcome line without its signature".into()));
        };
        let (payload, mac) = (&line[..tab], &line[tab + 1..]);
        let Ok(mac) = hex::decode(mac) else {
            return Err(Breach("an outcome line with a malformed signature".into()));
        };
        let mut check = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key)
            .expect("HMAC takes any key length");
        check.update(&(seq as u64).to_be_bytes());
        check.update(&Sha256::digest(payload));
        if check.verify_slice(&mac).is_err() {
            return Err(Breach("an outcome line that does not verify".into()));
        }
        let event: Event = serde_json::from_slice(payload)
            .map_err(|e| Breach(format!("a signed outcome line that is not an event: {e}")))?;
        events.push(event);
    }
    Ok(events)
}

/// Keeps a message printable and short.
pub fn sanitize(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    clean
}

/// What the run was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode<'a> {
    /// Run exactly these node IDs (the ones that exist).
    Select(&'a [String]),
    /// Collect everything and run nothing.
    Collect,
}

/// Checks the events against the protocol and turns them into a [`TestLog`].
pub fn to_test_log(events: &[Event], mode: RunMode<'_>) -> Result<TestLog, Breach> {
    let breach = |what: String| Err(Breach(what));
    let mut log = TestLog::default();
    let mut it = events.iter().peekable();
    match it.next() {
        None => return Ok(log),
        Some(Event::Start { v: 1, py }) => {
            log.started = true;
            log.python = Some(py.clone());
        }
        Some(other) => return breach(format!("the stream starts with {}", name(other))),
    }
    // Before collection: compile and collection errors.
    let mut collected: Option<Vec<String>> = None;
    while let Some(event) = it.peek() {
        match event {
            Event::CompileError { path, line, kind } => {
                log.compile_errors.push(CompileError {
                    path: sanitize(path),
                    message: format!("line {line}: {}", sanitize(kind)),
                });
            }
            Event::CollectError { id, kind } => {
                log.collect_errors.push((id.clone(), sanitize(kind)));
            }
            Event::Collected { ids } => {
                let unique: BTreeSet<&String> = ids.iter().collect();
                if unique.len() != ids.len() {
                    return breach("a test collected twice".into());
                }
                if let RunMode::Select(wanted) = mode {
                    let wanted: BTreeSet<&String> = wanted.iter().collect();
                    if let Some(extra) = ids.iter().find(|i| !wanted.contains(i)) {
                        return breach(format!(
                            "a test that was not asked for ran: {}",
                            sanitize(extra)
                        ));
                    }
                }
                log.collected = ids.clone();
                log.collection_done = true;
                collected = Some(ids.clone());
                it.next();
                break;
            }
            Event::Finish { status } => {
                // pytest ended before collection finished (an internal error,
                // an interrupted session).
                log.finished = true;
                log.exit_status = Some(*status);
                it.next();
                if let Some(extra) = it.next() {
                    return breach(format!("{} after finish", name(extra)));
                }
                return Ok(log);
            }
            other => return breach(format!("{} before collection", name(other))),
        }
        it.next();
    }
    let Some(ids) = collected else {
        return Ok(log);
    };
    if matches!(mode, RunMode::Collect) {
        return match it.next() {
            Some(Event::Finish { status }) => {
                log.finished = true;
                log.exit_status = Some(*status);
                match it.next() {
                    Some(extra) => breach(format!("{} after finish", name(extra))),
                    None => Ok(log),
                }
            }
            Some(other) => breach(format!("{} in a collect-only run", name(other))),
            None => Ok(log),
        };
    }
    let phases = ["setup", "call", "teardown"];
    let mut next_test = 0usize;
    loop {
        let Some(event) = it.next() else {
            return Ok(log);
        };
        match event {
            Event::Begin { id } => {
                if next_test >= ids.len() || &ids[next_test] != id {
                    return breach(format!("a test begun out of order: {}", sanitize(id)));
                }
                next_test += 1;
                log.begin(id);
                let mut phase = 0usize;
                loop {
                    let Some(event) = it.next() else {
                        return Ok(log);
                    };
                    match event {
                        Event::Phase {
                            id: pid,
                            when,
                            outcome,
                            xfail,
                        } => {
                            if pid != id || phase >= 3 || when != phases[phase] {
                                return breach(format!(
                                    "a {} phase out of order for {}",
                                    sanitize(when),
                                    sanitize(pid)
                                ));
                            }
                            if !matches!(outcome.as_str(), "passed" | "failed" | "skipped") {
                                return breach(format!("an unknown outcome {}", sanitize(outcome)));
                            }
                            log.phase(id, when, outcome, *xfail != 0);
                            phase += 1;
                            if when == "setup" && outcome != "passed" {
                                phase = 2;
                            }
                        }
                        Event::End { id: eid } => {
                            if eid != id || phase != 3 {
                                return breach(format!("a test ended early: {}", sanitize(eid)));
                            }
                            break;
                        }
                        other => {
                            return breach(format!("{} inside a test", name(other)));
                        }
                    }
                }
            }
            Event::Finish { status } => {
                log.finished = true;
                log.exit_status = Some(*status);
                if let Some(extra) = it.next() {
                    return breach(format!("{} after finish", name(extra)));
                }
                return Ok(log);
            }
            other => return breach(format!("{} between tests", name(other))),
        }
    }
}

fn name(event: &Event) -> &'static str {
    match event {
        Event::Start { .. } => "a start event",
        Event::CompileError { .. } => "a compile error",
        Event::CollectError { .. } => "a collection error",
        Event::Collected { .. } => "a collection",
        Event::Begin { .. } => "a test's beginning",
        Event::Phase { .. } => "a phase",
        Event::End { .. } => "a test's end",
        Event::Finish { .. } => "a finish",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(key: &[u8; 32], lines: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, line) in lines.iter().enumerate() {
            let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
            mac.update(&(seq as u64).to_be_bytes());
            mac.update(&Sha256::digest(line.as_bytes()));
            out.extend_from_slice(line.as_bytes());
            out.push(b'\t');
            out.extend_from_slice(hex::encode(mac.finalize().into_bytes()).as_bytes());
            out.push(b'\n');
        }
        out
    }

    fn honest() -> Vec<&'static str> {
        vec![
            r#"{"e":"start","v":1,"py":"3.11.7"}"#,
            r#"{"e":"collected","ids":["t.py::a","t.py::b"]}"#,
            r#"{"e":"begin","id":"t.py::a"}"#,
            r#"{"e":"phase","id":"t.py::a","when":"setup","outcome":"passed","xfail":0}"#,
            r#"{"e":"phase","id":"t.py::a","when":"call","outcome":"failed","xfail":0}"#,
            r#"{"e":"phase","id":"t.py::a","when":"teardown","outcome":"passed","xfail":0}"#,
            r#"{"e":"end","id":"t.py::a"}"#,
            r#"{"e":"begin","id":"t.py::b"}"#,
            r#"{"e":"phase","id":"t.py::b","when":"setup","outcome":"skipped","xfail":0}"#,
            r#"{"e":"phase","id":"t.py::b","when":"teardown","outcome":"passed","xfail":0}"#,
            r#"{"e":"end","id":"t.py::b"}"#,
            r#"{"e":"finish","status":1}"#,
        ]
    }

    fn ids() -> Vec<String> {
        vec!["t.py::a".into(), "t.py::b".into()]
    }

    #[test]
    fn an_honest_stream_verifies_and_classifies() {
        let key = [7u8; 32];
        let events = read_channel(&sign(&key, &honest()), &key).unwrap();
        let log = to_test_log(&events, RunMode::Select(&ids())).unwrap();
        assert!(log.started && log.finished);
        assert_eq!(log.exit_status, Some(1));
        assert_eq!(log.outcome("t.py::a", false), crate::TestOutcome::Failed);
        assert_eq!(log.outcome("t.py::b", false), crate::TestOutcome::Skipped);
    }

    #[test]
    fn forged_reordered_or_duplicated_lines_are_breaches() {
        let key = [7u8; 32];
        // Signed with another key (or not at all).
        assert!(read_channel(&sign(&[8u8; 32], &honest()), &key).is_err());
        let mut unsigned = honest().join("\t00\n");
        unsigned.push('\n');
        assert!(read_channel(unsigned.as_bytes(), &key).is_err());
        // A line dropped: the sequence no longer verifies.
        let mut lines = honest();
        lines.remove(4);
        let events = read_channel(&sign(&key, &lines), &key).unwrap();
        assert!(to_test_log(&events, RunMode::Select(&ids())).is_err());
        // Events out of protocol, each signed.
        let cases: Vec<Vec<&str>> = vec![
            // a second begin of the same test
            {
                let mut l = honest();
                l.insert(7, r#"{"e":"begin","id":"t.py::a"}"#);
                l
            },
            // a test that was not asked for
            vec![
                r#"{"e":"start","v":1,"py":"3"}"#,
                r#"{"e":"collected","ids":["t.py::zzz"]}"#,
            ],
            // a call after a skipped setup
            {
                let mut l = honest();
                l.insert(
                    9,
                    r#"{"e":"phase","id":"t.py::b","when":"call","outcome":"passed","xfail":0}"#,
                );
                l
            },
            // anything after finish
            {
                let mut l = honest();
                l.push(r#"{"e":"finish","status":0}"#);
                l
            },
            // a report for a test that is not the running one
            {
                let mut l = honest();
                l[4] = r#"{"e":"phase","id":"t.py::b","when":"call","outcome":"passed","xfail":0}"#;
                l
            },
        ];
        for lines in cases {
            let events = read_channel(&sign(&key, &lines), &key).unwrap();
            assert!(
                to_test_log(&events, RunMode::Select(&ids())).is_err(),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn an_abort_line_is_a_breach_that_says_why() {
        let key = [7u8; 32];
        let mut bytes = sign(&key, &honest()[..3]);
        bytes.extend_from_slice(b"ABORT \"gc.get_objects\"\n");
        let err = read_channel(&bytes, &key).unwrap_err();
        assert!(err.0.contains("gc.get_objects"), "{err}");
    }

    #[test]
    fn a_stream_cut_short_is_not_a_breach() {
        let key = [7u8; 32];
        let mut bytes = sign(&key, &honest()[..5]);
        bytes.extend_from_slice(b"{\"e\":\"phase\",\"id\":\"t.p");
        let events = read_channel(&bytes, &key).unwrap();
        let log = to_test_log(&events, RunMode::Select(&ids())).unwrap();
        assert!(!log.finished);
        assert_eq!(log.outcome("t.py::a", true), crate::TestOutcome::Failed);
        assert_eq!(log.outcome("t.py::b", true), crate::TestOutcome::Timeout);
    }
}
