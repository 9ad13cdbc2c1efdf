//! The four renderings of a [`crate::RunReport`]: a terminal table, JSON,
//! Markdown and a static HTML page, and [`write_all`], which writes the last three.

mod html;
mod json;
mod markdown;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use html::{render_html, render_html_for};
pub use json::{to_json, SCHEMA_VERSION};
pub use markdown::{render_markdown, render_markdown_for};
pub use text::render_table;

use crate::error::{ReportError, ReportErrorKind};
use crate::links::prefix_from;
use crate::stats::{Interval, BOOTSTRAP_RESAMPLES};
use crate::RunReport;

/// The JSON report's file name.
pub const JSON_FILE: &str = "report.json";

/// The Markdown report's file name.
pub const MARKDOWN_FILE: &str = "report.md";

/// The HTML page's file name.
pub const HTML_FILE: &str = "index.html";

/// Writes `report.json`, `report.md` and `index.html` into `out_dir` (created if
/// needed), with links relative to `out_dir`. Each file is written to a temporary
/// name and renamed into place. Returns the paths written.
pub fn write_all(report: &RunReport, out_dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    // Inside the run folder no link is followed, the report folder included;
    // a folder elsewhere is the caller's choice and opened as named.
    let dir = match out_dir.strip_prefix(&report.run_dir) {
        Ok(rel) if !rel.as_os_str().is_empty() => {
            pdl_fs::Dir::open(&report.run_dir).and_then(|run| run.open_dir(rel, true))
        }
        _ => pdl_fs::Dir::create(out_dir),
    }
    .map_err(|e| ReportError::new(out_dir, ReportErrorKind::Write(e.into())))?;
    let prefix = prefix_from(out_dir, &report.run_dir);
    let mut json = serde_json::to_string_pretty(&to_json(report))
        .map_err(|e| ReportError::new(out_dir.join(JSON_FILE), ReportErrorKind::Write(e.into())))?;
    json.push('\n');
    let files = [
        (JSON_FILE, json),
        (MARKDOWN_FILE, markdown::markdown(report, &prefix)),
        (HTML_FILE, html::html(report, &prefix)),
    ];
    let mut written = Vec::new();
    for (name, content) in files {
        // Written beside and renamed over: a link planted at the name is
        // replaced, never followed.
        let path = out_dir.join(name);
        dir.write_atomic(Path::new(name), content.as_bytes())
            .map_err(|e| ReportError::new(&path, ReportErrorKind::Write(e.into())))?;
        written.push(path);
    }
    Ok(written)
}

/// A reward with three decimals, or a dash.
pub(crate) fn reward(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.3}"))
}

/// An interval as `[lo, hi]` with three decimals, or a dash.
pub(crate) fn interval(ci: Option<Interval>) -> String {
    ci.map_or_else(
        || "-".to_string(),
        |ci| format!("[{:.3}, {:.3}]", ci.lo, ci.hi),
    )
}

/// A mean token count, rounded, or a dash.
pub(crate) fn tokens(t: Option<f64>) -> String {
    t.map_or_else(|| "-".to_string(), |t| format!("{t:.0}"))
}

/// An optional value, or a dash.
pub(crate) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Counts as `a: 2, b: 1`, or a dash when there are none.
pub(crate) fn counts(map: &BTreeMap<String, usize>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `n/total` for budget exhaustion and the like.
pub(crate) fn of(n: usize, total: usize) -> String {
    format!("{n}/{total}")
}

/// The episode count, with the expected count when known.
pub(crate) fn episode_total(report: &RunReport) -> String {
    match report.counts.expected_episodes {
        Some(expected) => format!("{} of {} expected", report.counts.episodes, expected),
        None => report.counts.episodes.to_string(),
    }
}

/// One sentence on how the intervals are computed.
pub(crate) fn interval_method() -> String {
    format!(
        "95% intervals: percentile bootstrap of the mean ({BOOTSTRAP_RESAMPLES} resamples, fixed seed); \
         harness errors are left out of every reward mean (their tokens count)."
    )
}

/// `s` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}
