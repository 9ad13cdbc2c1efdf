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
    /// Collection finished (every test file was collected or failed to).
    pub collection_done: bool,
    /// Node IDs (usually file paths) that failed to collect, with messages.
    pub collect_errors: Vec<(String, String)>,
    /// Files that did not compile.
    pub compile_errors: Vec<CompileError>,
    reports: BTreeMap<String, PhaseReports>,
}

impl TestLog {
    /// Records that a test began.
    pub fn begin(&mut self, nodeid: &str) {
        self.reports.entry(nodeid.to_string()).or_default().begun = true;
    }

    /// Records one phase of a test.
    pub fn phase(&mut self, nodeid: &str, when: &str, outcome: &str, xfail: bool) {
        let entry = self.reports.entry(nodeid.to_string()).or_default();
        let value = Some((outcome.to_string(), xfail));
        match when {
            "setup" => entry.setup = value,
            "call" => entry.call = value,
            "teardown" => entry.teardown = value,
            _ => {}
        }
    }

    /// How many selected tests passed, failed and errored as pytest counts them
    /// in its summary line (errors: setup and teardown failures, and
    /// collection errors).
    pub fn pytest_counts(&self) -> PytestCounts {
        let mut counts = PytestCounts {
            errors: self.collect_errors.len() as u64,
            ..PytestCounts::default()
        };
        for r in self.reports.values() {
            let setup = outcome_of(&r.setup);
            let call = outcome_of(&r.call);
            let teardown = outcome_of(&r.teardown);
            match setup {
                Some(("failed", _)) => counts.errors += 1,
                Some(("skipped", true)) => counts.xfailed += 1,
                Some(("skipped", false)) => counts.skipped += 1,
                _ => {}
            }
            match call {
                Some(("passed", false)) => counts.passed += 1,
                Some(("passed", true)) => counts.xpassed += 1,
                Some(("failed", true)) => counts.failed += 1,
                Some(("failed", false)) => counts.failed += 1,
                Some(("skipped", true)) => counts.xfailed += 1,
                Some(("skipped", false)) => counts.skipped += 1,
                _ => {}
            }
            if let Some(("failed", _)) = teardown {
                counts.errors += 1;
            }
        }
        counts
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

/// The counts of pytest's summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PytestCounts {
    /// Tests whose call passed.
    pub passed: u64,
    /// Tests whose call failed (and strict expected failures that passed).
    pub failed: u64,
    /// Setup, teardown and collection errors.
    pub errors: u64,
    /// Skipped tests.
    pub skipped: u64,
    /// Expected failures that failed.
    pub xfailed: u64,
    /// Expected failures that passed.
    pub xpassed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        log: &mut TestLog,
        id: &str,
        setup: &str,
        call: Option<(&str, bool)>,
        teardown: Option<&str>,
    ) {
        log.begin(id);
        log.phase(id, "setup", setup, false);
        if let Some((c, x)) = call {
            log.phase(id, "call", c, x);
        }
        if let Some(t) = teardown {
            log.phase(id, "teardown", t, false);
        }
    }

    fn started() -> TestLog {
        TestLog {
            started: true,
            ..TestLog::default()
        }
    }

    #[test]
    fn each_pytest_result_is_classified() {
        let mut l = started();
        run(
            &mut l,
            "t::pass",
            "passed",
            Some(("passed", false)),
            Some("passed"),
        );
        run(
            &mut l,
            "t::fail",
            "passed",
            Some(("failed", false)),
            Some("passed"),
        );
        run(&mut l, "t::setup_error", "failed", None, Some("passed"));
        run(
            &mut l,
            "t::teardown_error",
            "passed",
            Some(("passed", false)),
            Some("failed"),
        );
        run(&mut l, "t::skip", "skipped", None, Some("passed"));
        run(
            &mut l,
            "t::skip_in_call",
            "passed",
            Some(("skipped", false)),
            Some("passed"),
        );
        run(
            &mut l,
            "t::xfail",
            "passed",
            Some(("skipped", true)),
            Some("passed"),
        );
        run(
            &mut l,
            "t::xpass",
            "passed",
            Some(("passed", true)),
            Some("passed"),
        );
        l.finished = true;
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
        let c = l.pytest_counts();
        assert_eq!(
            (c.passed, c.failed, c.errors, c.skipped, c.xfailed, c.xpassed),
            (2, 1, 2, 2, 1, 1)
        );
    }

    #[test]
    fn a_killed_run_marks_unfinished_tests() {
        let mut l = started();
        run(
            &mut l,
            "t::done",
            "passed",
            Some(("passed", false)),
            Some("passed"),
        );
        run(&mut l, "t::hangs", "passed", None, None);
        assert_eq!(l.outcome("t::done", true), TestOutcome::Passed);
        assert_eq!(l.outcome("t::hangs", true), TestOutcome::Timeout);
        assert_eq!(l.outcome("t::never_reached", true), TestOutcome::Timeout);
        assert_eq!(l.outcome("t::hangs", false), TestOutcome::Error);
        assert_eq!(l.running_when_stopped(), Some("t::hangs"));
    }

    #[test]
    fn tests_in_a_file_that_did_not_collect_are_errors() {
        let mut l = started();
        l.collect_errors
            .push(("tests/hidden/test_h.py".into(), "ImportError".into()));
        l.finished = true;
        assert_eq!(
            l.outcome("tests/hidden/test_h.py::test_a", false),
            TestOutcome::Error
        );
        assert_eq!(
            l.outcome("tests/public/test_p.py::test_b", false),
            TestOutcome::Missing
        );
    }
}
