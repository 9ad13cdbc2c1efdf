//! Checks of a task ([`TaskValidation`]): the static ones that need no test
//! run ([`static_checks`]) and every check of the specification's section 7
//! over a task's measurements ([`validate`]).

use std::collections::BTreeSet;

use pdl_task::diff::parse_patch;
use pdl_task::task::HIDDEN_DIR;
use pdl_task::{Fraction, RewardFormula, Task};
use serde::Serialize;

use super::calibration::NOOP_REWARD;
use super::plan::TaskMeasurements;
use crate::ladder::REWARD_TOLERANCE;
use crate::policy::{PatchPolicy, PathDecision};
use crate::pytest::test_files;
use crate::record::{ResultRecord, Verdict};

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckFailure {
    /// The check's name (`counts`, `test_patch`, `gold`, `rung cheat.diff`, `determinism` …).
    pub check: String,
    /// What is wrong.
    pub detail: String,
}

/// The validation of one task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskValidation {
    /// The task version.
    pub instance_id: String,
    /// Its tier.
    pub tier: String,
    /// Every failed check (empty: the task is valid).
    pub failures: Vec<CheckFailure>,
    /// Checks run.
    pub checks: usize,
    /// Grading time spent on the task, in seconds.
    pub busy_s: f64,
}

impl TaskValidation {
    /// True when every check passed.
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }
}

struct Checker {
    failures: Vec<CheckFailure>,
    checks: usize,
}

impl Checker {
    fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.failures.push(CheckFailure {
                check: name.to_string(),
                detail: detail(),
            });
        }
    }
}

fn duplicates(list: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    list.iter()
        .filter(|x| !seen.insert(x.as_str()))
        .cloned()
        .collect()
}

pub(crate) fn list_names(items: impl IntoIterator<Item = impl AsRef<str>>, max: usize) -> String {
    let all: Vec<String> = items.into_iter().map(|s| s.as_ref().to_string()).collect();
    let mut shown = all.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if all.len() > max {
        shown.push_str(&format!(" (and {} more)", all.len() - max));
    }
    shown
}

/// The checks that need no test run: schema, counts, formula, test lists,
/// test_patch, gold policy, ladder registration.
pub fn static_checks(task: &Task) -> Vec<CheckFailure> {
    let mut c = Checker {
        failures: Vec::new(),
        checks: 0,
    };
    static_checks_into(task, &mut c);
    c.failures
}

fn static_checks_into(task: &Task, c: &mut Checker) {
    let r = &task.row;
    c.check(
        "instance_id",
        r.instance_id == r.expected_instance_id(),
        || {
            format!(
                "`{}` should be `{}` (<task_id>-v<task_version>)",
                r.instance_id,
                r.expected_instance_id()
            )
        },
    );
    c.check(
        "tier",
        ["T1", "T2", "T3", "T4", "T5"].contains(&r.tier.as_str()),
        || format!("`{}` is not one of T1 … T5", r.tier),
    );
    c.check(
        "counts",
        r.hidden_test_count == r.fail_to_pass.len() as i64,
        || {
            format!(
                "hidden_test_count is {} but FAIL_TO_PASS lists {}",
                r.hidden_test_count,
                r.fail_to_pass.len()
            )
        },
    );
    c.check(
        "counts",
        r.public_test_count == r.pass_to_pass.len() as i64,
        || {
            format!(
                "public_test_count is {} but PASS_TO_PASS lists {}",
                r.public_test_count,
                r.pass_to_pass.len()
            )
        },
    );
    c.check("counts", !r.fail_to_pass.is_empty(), || {
        "FAIL_TO_PASS is empty".into()
    });
    c.check("counts", r.token_budget > 0, || {
        format!("token_budget is {}", r.token_budget)
    });
    for (name, list) in [
        ("FAIL_TO_PASS", &r.fail_to_pass),
        ("PASS_TO_PASS", &r.pass_to_pass),
    ] {
        let d = duplicates(list);
        c.check("test_lists", d.is_empty(), || {
            format!("{name} repeats {}", list_names(&d, 5))
        });
    }
    let overlap: Vec<&String> = r
        .fail_to_pass
        .iter()
        .filter(|id| r.pass_to_pass.contains(id))
        .collect();
    c.check("test_lists", overlap.is_empty(), || {
        format!(
            "listed in both FAIL_TO_PASS and PASS_TO_PASS: {}",
            list_names(&overlap, 5)
        )
    });
    match RewardFormula::parse(&r.reward_formula) {
        Ok(f) => {
            let sum = f.coefficient_sum();
            c.check("formula", sum == Some(Fraction::ONE), || match sum {
                Some(s) => format!("coefficients sum to {}/{} instead of 1", s.num, s.den),
                None => "the coefficients' sum does not fit an exact fraction".into(),
            });
        }
        Err(e) => c.check("formula", false, || e.to_string()),
    }
    // test_patch: only adds files, all under tests/hidden/.
    match task.hidden_files() {
        None => c.check("test_patch", false, || {
            "test_patch must only add files under tests/hidden/".into()
        }),
        Some(files) => {
            let hidden_paths: BTreeSet<String> = files
                .iter()
                .map(|f| format!("{HIDDEN_DIR}{}", f.relative_path))
                .collect();
            c.check("test_patch", !files.is_empty(), || {
                "test_patch adds no file".into()
            });
            let outside: Vec<String> = test_files(&r.fail_to_pass)
                .into_iter()
                .filter(|f| !hidden_paths.contains(f))
                .collect();
            c.check("test_lists", outside.is_empty(), || {
                format!(
                    "FAIL_TO_PASS IDs outside the hidden files: {}",
                    list_names(&outside, 5)
                )
            });
            let inside: Vec<&String> = r
                .pass_to_pass
                .iter()
                .filter(|id| id.starts_with(HIDDEN_DIR))
                .collect();
            c.check("test_lists", inside.is_empty(), || {
                format!(
                    "PASS_TO_PASS IDs in hidden files: {}",
                    list_names(&inside, 5)
                )
            });
        }
    }
    let in_fixtures: Vec<&str> = r
        .files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| p.starts_with(HIDDEN_DIR))
        .collect();
    c.check("fixtures", in_fixtures.is_empty(), || {
        format!(
            "the starting repository already holds hidden files: {}",
            list_names(&in_fixtures, 5)
        )
    });
    // Gold policy.
    match PatchPolicy::new(&r.patch_policy_allowed, &r.patch_policy_forbidden) {
        Err(e) => c.check("policy", false, || e.to_string()),
        Ok(policy) => match parse_patch(&r.patch) {
            Err(e) => c.check("gold_policy", false, || {
                format!("the gold patch is not a valid diff: {e}")
            }),
            Ok(set) => {
                c.check("gold_policy", !set.files.is_empty(), || {
                    "the gold patch changes nothing".into()
                });
                let bad: Vec<String> = set
                    .files
                    .iter()
                    .flat_map(|f| {
                        f.touched_paths()
                            .into_iter()
                            .map(move |p| (p, f.involves_symlink()))
                    })
                    .filter(|(p, link)| *link || policy.decide(p) != PathDecision::Allowed)
                    .map(|(p, _)| p.to_string())
                    .collect();
                c.check("gold_policy", bad.is_empty(), || {
                    format!(
                        "the gold patch touches paths that are not allowed: {}",
                        list_names(&bad, 5)
                    )
                });
            }
        },
    }
    // Ladder registration.
    let registered: Vec<&str> = task.extras.ladder.iter().map(|l| l.name.as_str()).collect();
    for name in &r.graded_ladder_rungs {
        c.check(&format!("rung {name}"), registered.contains(&name.as_str()), || "named in graded_ladder_rungs but not present in the dataset (no diff or registered reward)".into());
    }
    for rung in &task.extras.ladder {
        c.check(
            &format!("rung {}", rung.name),
            r.graded_ladder_rungs.contains(&rung.name),
            || "registered in the ladder but not named in graded_ladder_rungs".into(),
        );
        c.check(
            &format!("rung {}", rung.name),
            rung.reward < 1.0 - REWARD_TOLERANCE,
            || format!("registered reward {} is not below 1.0", rung.reward),
        );
    }
}

fn failing(record: &ResultRecord, ids: &[String], want_pass: bool) -> Vec<String> {
    ids.iter()
        .filter(|id| record.tests.get(*id).is_some_and(|o| o.passed()) != want_pass)
        .map(|id| {
            format!(
                "{id} ({})",
                record.tests.get(id).map_or("missing", |o| o.name())
            )
        })
        .collect()
}

fn flaky(records: &[ResultRecord]) -> Vec<String> {
    let Some(first) = records.first() else {
        return Vec::new();
    };
    let mut out = BTreeSet::new();
    for r in &records[1..] {
        for (id, outcome) in &r.tests {
            if first.tests.get(id) != Some(outcome) {
                out.insert(id.clone());
            }
        }
    }
    out.into_iter().collect()
}

pub(crate) fn verdict_note(r: &ResultRecord) -> String {
    match &r.detail {
        Some(d) => format!("verdict {} ({d})", r.verdict.name()),
        None => format!("verdict {}", r.verdict.name()),
    }
}

/// Every check of the specification's section 7, for one task.
pub fn validate(task: &Task, m: &TaskMeasurements) -> TaskValidation {
    let mut c = Checker {
        failures: Vec::new(),
        checks: 0,
    };
    static_checks_into(task, &mut c);
    let r = &task.row;
    match &m.collection {
        None => {}
        Some(Err(e)) => c.check("collection", false, || e.clone()),
        Some(Ok(col)) => {
            c.check("collection", col.errors.is_empty(), || {
                format!(
                    "collection errors at base: {}",
                    list_names(
                        col.errors
                            .iter()
                            .map(|(id, msg)| format!("{id}: {}", msg.lines().last().unwrap_or(""))),
                        3
                    )
                )
            });
            let hidden: BTreeSet<&str> = col
                .collected
                .iter()
                .map(String::as_str)
                .filter(|id| id.starts_with(HIDDEN_DIR))
                .collect();
            let public: BTreeSet<&str> = col
                .collected
                .iter()
                .map(String::as_str)
                .filter(|id| !id.starts_with(HIDDEN_DIR))
                .collect();
            let f2p: BTreeSet<&str> = r.fail_to_pass.iter().map(String::as_str).collect();
            let p2p: BTreeSet<&str> = r.pass_to_pass.iter().map(String::as_str).collect();
            c.check("collection", hidden == f2p, || {
                format!("collected hidden tests differ from FAIL_TO_PASS: unlisted {}; not collected {}", list_names(hidden.difference(&f2p), 5), list_names(f2p.difference(&hidden), 5))
            });
            c.check("collection", public == p2p, || {
                format!("collected public tests differ from PASS_TO_PASS: unlisted {}; not collected {}", list_names(public.difference(&p2p), 5), list_names(p2p.difference(&public), 5))
            });
        }
    }
    if let Some(base) = m.noop.first() {
        c.check("base", base.verdict == Verdict::Graded, || {
            verdict_note(base)
        });
        let p2p_failing = failing(base, &r.pass_to_pass, true);
        c.check("base", p2p_failing.is_empty(), || {
            format!(
                "PASS_TO_PASS tests that do not pass at base: {}",
                list_names(&p2p_failing, 5)
            )
        });
        let f2p_passing = failing(base, &r.fail_to_pass, false);
        c.check("base", f2p_passing.is_empty(), || {
            format!(
                "FAIL_TO_PASS tests that already pass at base: {}",
                list_names(&f2p_passing, 5)
            )
        });
        c.check(
            "do_nothing",
            (base.reward - NOOP_REWARD).abs() <= REWARD_TOLERANCE,
            || format!("do-nothing scores {} instead of 0.2", base.reward),
        );
    }
    if let Some(gold) = m.gold.first() {
        c.check("gold", gold.verdict == Verdict::Graded, || {
            verdict_note(gold)
        });
        let not_passing: Vec<String> = failing(gold, &r.fail_to_pass, true)
            .into_iter()
            .chain(failing(gold, &r.pass_to_pass, true))
            .collect();
        c.check("gold", not_passing.is_empty(), || {
            format!(
                "tests that do not pass with gold: {}",
                list_names(&not_passing, 5)
            )
        });
        c.check(
            "gold",
            (gold.reward - 1.0).abs() <= REWARD_TOLERANCE,
            || format!("gold scores {} instead of 1.0", gold.reward),
        );
    }
    for rung in &task.extras.ladder {
        let name = format!("rung {}", rung.name);
        match m.rungs.get(&rung.name) {
            None => {}
            Some(rec) => {
                c.check(&name, rec.verdict == Verdict::Graded, || verdict_note(rec));
                c.check(
                    &name,
                    (rec.reward - rung.reward).abs() <= REWARD_TOLERANCE,
                    || {
                        format!(
                            "lands on {} but is registered at {}",
                            rec.reward, rung.reward
                        )
                    },
                );
            }
        }
    }
    for (label, records) in [("gold", &m.gold), ("do-nothing", &m.noop)] {
        if records.len() > 1 {
            let f = flaky(records);
            c.check("determinism", f.is_empty(), || {
                format!(
                    "{label} gave different outcomes over {} runs for: {}",
                    records.len(),
                    list_names(&f, 5)
                )
            });
        }
    }
    TaskValidation {
        instance_id: r.instance_id.clone(),
        tier: r.tier.clone(),
        failures: c.failures,
        checks: c.checks,
        busy_s: m.busy_s,
    }
}
