//! Calibration of a task ([`CalibrationRow`]): gold, do-nothing and every
//! rung against their registered rewards ([`calibrate`]).

use pdl_task::Task;
use serde::Serialize;

use super::checks::{static_checks, verdict_note};
use super::plan::TaskMeasurements;
use crate::ladder::REWARD_TOLERANCE;
use crate::record::{ResultRecord, Verdict};

/// The do-nothing floor of the standard formula.
pub const NOOP_REWARD: f64 = 0.2;

/// One rung's calibration.
#[derive(Debug, Clone, Serialize)]
pub struct RungCalibration {
    /// The rung's name.
    pub name: String,
    /// Its registered reward.
    pub expected: f64,
    /// Its measured reward (`None` when it did not grade).
    pub got: Option<f64>,
    /// Landed within tolerance.
    pub ok: bool,
}

/// One task's calibration.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationRow {
    /// The task version.
    pub instance_id: String,
    /// The task.
    pub task_id: String,
    /// Its tier.
    pub tier: String,
    /// Gold's reward (`None` when it did not grade).
    pub gold: Option<f64>,
    /// Do-nothing's reward.
    pub noop: Option<f64>,
    /// Each rung.
    pub rungs: Vec<RungCalibration>,
    /// Grading time spent on the task, in seconds.
    pub busy_s: f64,
    /// What deviates (empty: calibrated).
    pub deviations: Vec<String>,
}

impl CalibrationRow {
    /// True when gold is 1.0, do-nothing 0.2 and every rung lands.
    pub fn ok(&self) -> bool {
        self.deviations.is_empty()
    }
}

fn graded_reward(r: Option<&ResultRecord>) -> Option<f64> {
    r.filter(|r| r.verdict == Verdict::Graded).map(|r| r.reward)
}

/// The calibration row of one task: gold, do-nothing and every rung against
/// their registered rewards, plus the static checks of [`static_checks`].
pub fn calibrate(task: &Task, m: &TaskMeasurements) -> CalibrationRow {
    let gold = graded_reward(m.gold.first());
    let noop = graded_reward(m.noop.first());
    let mut deviations = Vec::new();
    let describe =
        |label: &str, r: Option<&ResultRecord>, want: f64, got: Option<f64>| -> Option<String> {
            match (r, got) {
                (None, _) => Some(format!("{label} did not run")),
                (Some(rec), None) => Some(format!("{label}: {}", verdict_note(rec))),
                (Some(_), Some(g)) if (g - want).abs() > REWARD_TOLERANCE => {
                    Some(format!("{label} scores {g} instead of {want}"))
                }
                _ => None,
            }
        };
    deviations.extend(describe("gold", m.gold.first(), 1.0, gold));
    deviations.extend(describe("do-nothing", m.noop.first(), NOOP_REWARD, noop));
    let mut rungs = Vec::new();
    for rung in &task.extras.ladder {
        let rec = m.rungs.get(&rung.name);
        let got = graded_reward(rec);
        let problem = describe(&format!("rung {}", rung.name), rec, rung.reward, got);
        rungs.push(RungCalibration {
            name: rung.name.clone(),
            expected: rung.reward,
            got,
            ok: problem.is_none(),
        });
        deviations.extend(problem);
    }
    // The checks that need no test run come along: a task whose counts, lists,
    // test_patch or ladder are wrong is not calibrated, whatever it scores.
    deviations.extend(
        static_checks(task)
            .into_iter()
            .map(|f| format!("{}: {}", f.check, f.detail)),
    );
    deviations.dedup();
    CalibrationRow {
        instance_id: task.row.instance_id.clone(),
        task_id: task.row.task_id.clone(),
        tier: task.row.tier.clone(),
        gold,
        noop,
        rungs,
        busy_s: m.busy_s,
        deviations,
    }
}
