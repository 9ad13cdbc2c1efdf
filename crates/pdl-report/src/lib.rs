//! Reports on a campaign run folder: a terminal table, JSON, Markdown and a
//! static HTML page.
//!
//! A run folder holds `campaign.json` (optional), `results.jsonl` (one
//! [`pdl_grader::ResultRecord`] per line: episodes, predictions, and the gold and
//! noop calibration gradings) and the trajectory and patch files the episode
//! records point to. [`RunReport::load`] reads it and aggregates rewards per
//! (task, agent, model), per (tier, agent, model) and per (agent, model), with a
//! 95% percentile-bootstrap interval of each mean ([`stats`]), end reasons,
//! budget exhaustion, verdicts, tokens, ladder landings and each task's
//! calibration status. Harness errors are counted but left out of every reward
//! mean (the tokens they spent count in the token means); an
//! episode key seen twice counts once, with its last record. A malformed line is a
//! [`Warning`] in the report, never an error.
//!
//! The renderings are plain functions of the report: [`render_table`] for a
//! terminal, [`to_json`] (its layout documented there and
//! versioned by [`SCHEMA_VERSION`]), [`render_markdown`] and [`render_html`];
//! [`write_all`] writes `report.json`, `report.md` and `index.html`. Nothing here
//! prints.
//!
//! [`certify`] reads graded results (prediction records and run folders) into
//! dated certificates per task and agent, and applies the tier gates to them.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::path::Path;
//!
//! let tiers = BTreeMap::from([("demo-task-v1".to_string(), "easy".to_string())]);
//! let report = pdl_report::RunReport::load(Path::new("runs/latest"), &tiers)?;
//! print!("{}", pdl_report::render_table(&report));
//! pdl_report::write_all(&report, Path::new("runs/latest"))?;
//! # Ok::<(), pdl_report::ReportError>(())
//! ```

pub mod certify;
pub mod error;
mod links;
pub mod load;
pub mod render;
pub mod report;
pub mod stats;
pub mod terminal;
#[cfg(test)]
mod testutil;

pub use error::{ReportError, ReportErrorKind, Warning};
pub use load::{CAMPAIGN_FILE, RESULTS_FILE};
pub use render::{
    render_html, render_html_for, render_markdown, render_markdown_for, render_table, to_json,
    write_all, HTML_FILE, JSON_FILE, MARKDOWN_FILE, SCHEMA_VERSION,
};
pub use report::{
    CalibrationCounts, CalibrationStatus, CampaignInfo, CampaignSource, EpisodeRow, Observation,
    OverallGroup, RecordCounts, RunReport, Stats, TaskCalibration, TaskGroup, TaskInfo, TierGroup,
};
pub use stats::Interval;
pub use terminal::terminal_safe;
