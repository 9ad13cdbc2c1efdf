//! The JSON rendering; the layout is documented on [`to_json`].

use serde::Serialize;
use serde_json::{json, Value};

use crate::stats::{BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE};
use crate::RunReport;

/// The version of the JSON report's layout.
pub const SCHEMA_VERSION: u64 = 1;

fn value<T: Serialize + ?Sized>(t: &T) -> Value {
    // The report types have string keys and no paths, so this cannot fail.
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// The report as JSON:
///
/// ```text
/// {
///   "schema_version": 1,
///   "run_dir": "runs/2025-01-01",
///   "confidence": {"level": 0.95, "method": "percentile_bootstrap",
///                  "resamples": 2000, "seed": "0x5eed5eed5eed5eed"},
///   "campaign": {"source": "campaign_json" | "inferred", "started_at", "resumed_at",
///                "harness_version",
///                "dataset", "model", "api", "base_url" (strings or null),
///                "agents": [str], "samples": int|null, "tasks": [str], "settings": any},
///   "counts": {"lines", "malformed", "torn_line" (int|null), "records",
///              "calibration_records", "episode_records", "duplicates", "episodes",
///              "harness_errors", "ignored_records", "implausible",
///              "expected_episodes" (int|null),
///              "calibration": CALIBRATION_COUNTS},
///   "overall":  [{"agent", "model", "tasks", "calibration": CALIBRATION_COUNTS, ...STATS}],
///   "by_tier":  [{"tier", "agent", "model", "tasks", "calibration": CALIBRATION_COUNTS, ...STATS}],
///   "by_task":  [{"instance_id", "tier", "agent", "model",
///                 "calibration": "calibrated" | "uncalibrated" | "not_run", ...STATS}],
///   "tasks":    [{"instance_id", "tier", "episodes",
///                 "calibration": {"status": "calibrated" | "uncalibrated" | "not_run",
///                                 "gold": [{"reward", "verdict"}], "noop": [{"reward", "verdict"}]}}],
///   "episodes": [{"instance_id", "tier", "kind", "key", "agent", "model", "sample",
///                 "reward", "verdict", "detail", "end_reason", "budget_exhausted",
///                 "tokens_in", "tokens_out", "token_budget", "steps", "wall_s",
///                 "landed_rung", "trajectory", "trajectory_exists", "patch",
///                 "patch_exists", "patch_error", "log", "log_exists", "error",
///                 "reruns", "line"}],
///   "warnings": [{"file", "line" (int|null), "message"}]
/// }
///
/// CALIBRATION_COUNTS = {"calibrated": int, "uncalibrated": int, "not_run": int}
/// STATS = "episodes", "scored", "harness_errors", "reruns": int,
///         "mean_reward": float|null, "ci95": {"lo", "hi"}|null,
///         "end_reasons": {reason: int}, "budget_exhausted": int,
///         "verdicts": {verdict: int}, "mean_tokens_in", "mean_tokens_out": float|null,
///         "landed_rungs": {rung: int}
/// ```
///
/// Rewards keep full precision. Lists are sorted as in [`crate::RunReport`];
/// maps have sorted keys. Absent values are `null`, never missing keys.
/// Fields may be added in a later version; renaming or removing one bumps
/// `schema_version`.
pub fn to_json(report: &RunReport) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "run_dir": report.run_dir.display().to_string(),
        "confidence": {
            "level": CONFIDENCE,
            "method": "percentile_bootstrap",
            "resamples": BOOTSTRAP_RESAMPLES,
            "seed": format!("{BOOTSTRAP_SEED:#x}"),
        },
        "campaign": value(&report.campaign),
        "counts": value(&report.counts),
        "overall": value(&report.overall),
        "by_tier": value(&report.by_tier),
        "by_task": value(&report.by_task),
        "tasks": value(&report.tasks),
        "episodes": value(&report.episodes),
        "warnings": value(&report.warnings),
    })
}
