//! Per-test outcomes ([`TestOutcome`]) and how the plugin's event stream is
//! classified into them ([`TestLog`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The outcome of one node ID in one grading. Only `Passed` passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    /// Setup, call and teardown all passed (and the test was not marked xfail).
    Passed,
    /// The call failed, or an xfail-marked test failed or unexpectedly passed.
    Failed,
    /// Setup or teardown errored, the test's file did not collect, or the test
    /// process died while it ran.
    Error,
    /// The test was skipped.
    Skipped,
    /// The test was never collected.
    Missing,
    /// The run's time bound passed before the test finished.
    Timeout,
}

impl TestOutcome {
    /// True only for `Passed`.
    pub fn passed(self) -> bool {
        self == TestOutcome::Passed
    }

    /// The outcome's name in records.
    pub fn name(self) -> &'static str {
        match self {
            TestOutcome::Passed => "passed",
            TestOutcome::Failed => "failed",
            TestOutcome::Error => "error",
            TestOutcome::Skipped => "skipped",
            TestOutcome::Missing => "missing",
            TestOutcome::Timeout => "timeout",
        }
    }
}

/// One phase report of one test.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct PhaseReports {
    begun: bool,
    setup: Option<(String, bool)>,
    call: Option<(String, bool)>,
    teardown: Option<(String, bool)>,
}

/// A compile error the plugin found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileError {
    /// Repository-relative path.
    pub path: String,
    /// The error.
    pub message: String,
}

/// Everything the plugin reported for one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestLog {
    /// The plugin loaded (`start` seen): pytest ran in a working environment.
    pub started: bool,
    /// The Python version the plugin reported.
    pub python: Option<String>,
    /// pytest reached the end of the session.
    pub finished: bool,
    /// pytest's exit status, when it finished.
    pub exit_status: Option<i64>,
    /// Every collected node ID, in collection order.
    pub collected: Vec<String>,
    /// Node IDs (usually file paths) that failed to collect, with messages.
    pub collect_errors: Vec<(String, String)>,
    /// Files that did not compile.
    pub compile_errors: Vec<CompileError>,
    reports: BTreeMap<String, PhaseReports>,
}

impl TestLog {
    /// Parses the plugin's JSON lines. A torn last line (the process was killed
    /// mid-write) is ignored.
    pub fn parse(text: &str) -> TestLog {
        let mut log = TestLog::default();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let str_field = |k: &str| {
                event
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            match event.get("event").and_then(|e| e.as_str()) {
                Some("start") => {
                    log.started = true;
                    log.python = Some(str_field("python"));
                }
                Some("collected") => {
                    if let Some(ids) = event.get("nodeids").and_then(|v| v.as_array()) {
                        log.collected
                            .extend(ids.iter().filter_map(|v| v.as_str().map(str::to_string)));
                    }
                }
                Some("collect_error") => {
                    log.collect_errors
                        .push((str_field("nodeid"), str_field("message")));
                }
                Some("compile_error") => log.compile_errors.push(CompileError {
                    path: str_field("path"),
                    message: str_field("message"),
                }),
                Some("begin") => {
                    log.reports.entry(str_field("nodeid")).or_default().begun = true;
                }
                Some("report") => {
                    let entry = log.reports.entry(str_field("nodeid")).or_default();
                    let xfail = event
                        .get("xfail")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false);
                    let value = Some((str_field("outcome"), xfail));
                    match str_field("when").as_str() {
                        "setup" => entry.setup = value,
                        "call" => entry.call = value,
                        "teardown" => entry.teardown = value,
                        _ => {}
                    }
                }
                Some("finish") => {
                    log.finished = true;
                    log.exit_status = event.get("exitstatus").and_then(|v| v.as_i64());
                }
                _ => {}
            }
        }
        log
    }

    /// The outcome of one node ID. `timed_out` says the run's time bound passed.
    pub fn outcome(&self, nodeid: &str, timed_out: bool) -> TestOutcome {
        let ended_abnormally = !self.finished;
        let abnormal = if timed_out {
            TestOutcome::Timeout
        } else {
            TestOutcome::Error
        };
        let file = nodeid.split("::").next().unwrap_or(nodeid);
        let Some(r) = self.reports.get(nodeid) else {
            if self.collect_errors.iter().any(|(id, _)| {
                id == file || id.is_empty() || nodeid.starts_with(&format!("{id}::"))
            }) {
                return TestOutcome::Error;
            }
            return if ended_abnormally {
                abnormal
            } else {
                TestOutcome::Missing
            };
        };
        let teardown_failed = matches!(outcome_of(&r.teardown), Some(("failed", _)));
        match outcome_of(&r.setup) {
            None => {
                return if ended_abnormally {
                    abnormal
                } else {
                    TestOutcome::Missing
                }
            }
            Some(("failed", _)) => return TestOutcome::Error,
            Some(("skipped", true)) => return TestOutcome::Failed,
            Some(("skipped", false)) => {
                return if teardown_failed {
                    TestOutcome::Error
                } else {
                    TestOutcome::Skipped
                }
            }
            Some(_) => {}
        }
        let call = match outcome_of(&r.call) {
            None => return abnormal_or(ended_abnormally, abnormal, TestOutcome::Error),
            Some((_, true)) => TestOutcome::Failed,
            Some(("passed", false)) => TestOutcome::Passed,
            Some(("skipped", false)) => TestOutcome::Skipped,
            Some(_) => TestOutcome::Failed,
        };
        if teardown_failed {
            return TestOutcome::Error;
        }
        if r.teardown.is_none() && call == TestOutcome::Passed {
            // The process ended between the call and its teardown.
            return abnormal;
        }
        call
    }

    /// The set of node IDs that collected, as a set.
    pub fn collected_set(&self) -> BTreeSet<String> {
        self.collected.iter().cloned().collect()
    }

    /// The node ID that was running when the process stopped, if any.
    pub fn running_when_stopped(&self) -> Option<&str> {
        self.reports
            .iter()
            .find(|(_, r)| r.begun && r.teardown.is_none())
            .map(|(id, _)| id.as_str())
    }
}

fn outcome_of(phase: &Option<(String, bool)>) -> Option<(&str, bool)> {
    phase.as_ref().map(|(o, x)| (o.as_str(), *x))
}

fn abnormal_or(ended_abnormally: bool, abnormal: TestOutcome, normal: TestOutcome) -> TestOutcome {
    if ended_abnormally {
        abnormal
    } else {
        normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: &str, when: &str, outcome: &str, xfail: bool) -> String {
        serde_json::json!({"event": "report", "nodeid": id, "when": when, "outcome": outcome, "xfail": xfail}).to_string()
    }

    fn run(
        id: &str,
        setup: &str,
        call: Option<(&str, bool)>,
        teardown: Option<&str>,
    ) -> Vec<String> {
        let mut lines = vec![serde_json::json!({"event": "begin", "nodeid": id}).to_string()];
        lines.push(report(id, "setup", setup, false));
        if let Some((c, x)) = call {
            lines.push(report(id, "call", c, x));
        }
        if let Some(t) = teardown {
            lines.push(report(id, "teardown", t, false));
        }
        lines
    }

    fn log(lines: Vec<Vec<String>>, finished: bool) -> TestLog {
        let mut all = vec![r#"{"event": "start", "python": "3.11.7"}"#.to_string()];
        for l in lines {
            all.extend(l);
        }
        if finished {
            all.push(r#"{"event": "finish", "exitstatus": 1}"#.to_string());
        }
        TestLog::parse(&all.join("\n"))
    }

    #[test]
    fn each_pytest_result_is_classified() {
        let l = log(
            vec![
                run("t::pass", "passed", Some(("passed", false)), Some("passed")),
                run("t::fail", "passed", Some(("failed", false)), Some("passed")),
                run("t::setup_error", "failed", None, Some("passed")),
                run(
                    "t::teardown_error",
                    "passed",
                    Some(("passed", false)),
                    Some("failed"),
                ),
                run("t::skip", "skipped", None, Some("passed")),
                run(
                    "t::skip_in_call",
                    "passed",
                    Some(("skipped", false)),
                    Some("passed"),
                ),
                run(
                    "t::xfail",
                    "passed",
                    Some(("skipped", true)),
                    Some("passed"),
                ),
                run("t::xpass", "passed", Some(("passed", true)), Some("passed")),
            ],
            true,
        );
        let o = |id| l.outcome(id, false);
        assert_eq!(o("t::pass"), TestOutcome::Passed);
        assert_eq!(o("t::fail"), TestOutcome::Failed);
        assert_eq!(o("t::setup_error"), TestOutcome::Error);
        assert_eq!(o("t::teardown_error"), TestOutcome::Error);
        assert_eq!(o("t::skip"), TestOutcome::Skipped);
        assert_eq!(o("t::skip_in_call"), TestOutcome::Skipped);
        assert_eq!(o("t::xfail"), TestOutcome::Failed);
        assert_eq!(o("t::xpass"), TestOutcome::Failed);
        assert_eq!(o("t::never_collected"), TestOutcome::Missing);
        assert!(l.started && l.finished);
    }

    #[test]
    fn a_killed_run_marks_unfinished_tests() {
        let mut lines = run("t::done", "passed", Some(("passed", false)), Some("passed"));
        lines.extend(run("t::hangs", "passed", None, None));
        let l = log(vec![lines], false);
        assert_eq!(l.outcome("t::done", true), TestOutcome::Passed);
        assert_eq!(l.outcome("t::hangs", true), TestOutcome::Timeout);
        assert_eq!(l.outcome("t::never_reached", true), TestOutcome::Timeout);
        assert_eq!(l.outcome("t::hangs", false), TestOutcome::Error);
        assert_eq!(l.running_when_stopped(), Some("t::hangs"));
    }

    #[test]
    fn tests_in_a_file_that_did_not_collect_are_errors() {
        let text = [
            r#"{"event": "start", "python": "3.11.7"}"#,
            r#"{"event": "collect_error", "nodeid": "tests/hidden/test_h.py", "message": "ImportError"}"#,
            r#"{"event": "finish", "exitstatus": 2}"#,
            r#"{"event": "report", "nodeid": "torn"#,
        ]
        .join("\n");
        let l = TestLog::parse(&text);
        assert_eq!(
            l.outcome("tests/hidden/test_h.py::test_a", false),
            TestOutcome::Error
        );
        assert_eq!(
            l.outcome("tests/public/test_p.py::test_b", false),
            TestOutcome::Missing
        );
        assert_eq!(l.collect_errors.len(), 1);
    }
}
