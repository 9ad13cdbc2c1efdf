//! The HTML rendering: one self-contained static page with inline CSS and a few
//! lines of inline script to sort tables by a click on a column header.
//!
//! Every piece of text from the run is escaped; links come only from plain
//! relative paths (see [`crate::links`]). The page also carries a content
//! security policy that allows no resource loads and no script but its own
//! (pinned by hash), as a second line of defence.

use std::fmt::Write as _;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{counts, episode_total, interval, interval_method, of, opt, reward, shorten, tokens};
use crate::links::{href, prefix_from};
use crate::report::{CalibrationStatus, EpisodeRow, Stats};
use crate::RunReport;

/// Escapes text for HTML content and quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { --fg: #1d2330; --muted: #667085; --line: #d9dee7; --head: #f3f5f9; --ok: #1a7f37;
        --bad: #b42318; --warn: #9a6700; --bar: #4f7cff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.5rem 2rem 3rem; max-width: 1600px; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; }
h2 { font-size: 1.2rem; margin: 2.2rem 0 .6rem; padding-bottom: .2rem; border-bottom: 1px solid var(--line); }
.sub, .note, footer { color: var(--muted); }
nav { margin: .8rem 0 0; display: flex; gap: 1rem; flex-wrap: wrap; }
a { color: #2456d6; }
dl.overview { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1.2rem; margin: 0; }
dl.overview dt { color: var(--muted); }
dl.overview dd { margin: 0; overflow-wrap: anywhere; }
pre { background: var(--head); padding: .6rem; border-radius: 4px; overflow-x: auto; margin: 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: .3rem .55rem; text-align: left; vertical-align: top; }
th { background: var(--head); position: sticky; top: 0; white-space: nowrap; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
td.num { text-align: right; white-space: nowrap; }
tbody tr:hover { background: #f8fafc; }
.bar { display: inline-block; width: 60px; height: 6px; background: var(--line); border-radius: 3px;
       margin-left: .4rem; vertical-align: middle; overflow: hidden; }
.bar i { display: block; height: 100%; background: var(--bar); }
.ok { color: var(--ok); } .bad { color: var(--bad); } .warn { color: var(--warn); } .muted { color: var(--muted); }
ul.warnings li { color: var(--warn); }
code { font-size: 12px; }
"#;

/// Sorts a table by a click (or Enter) on a column header: by `data-v` when it is
/// a number, else by text; cells without a number sort last either way.
const SCRIPT: &str = r#"
(function () {
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v !== null && v !== "" && !isNaN(Number(v))) return [0, Number(v), ""];
    return [1, 0, cell.textContent.trim().toLowerCase()];
  }
  function cmp(a, b, dir) {
    if (a[0] !== b[0]) return a[0] - b[0];
    if (a[1] !== b[1]) return dir * (a[1] < b[1] ? -1 : 1);
    return dir * (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.tabIndex = 0;
      function sort() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (x, y) { return cmp(key(x.cells[col]), key(y.cells[col]), dir); });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sort(); });
    });
  });
})();
"#;

fn content_security_policy() -> String {
    format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{}'; \
         base-uri 'none'; form-action 'none'",
        BASE64.encode(Sha256::digest(SCRIPT.as_bytes()))
    )
}

/// A table cell builder.
struct Row(String);

impl Row {
    fn new() -> Self {
        Row(String::from("<tr>"))
    }

    /// A text cell.
    fn text(mut self, s: &str) -> Self {
        let _ = write!(self.0, "<td>{}</td>", esc(s));
        self
    }

    /// A text cell with a class (none when empty).
    fn class(mut self, class: &str, s: &str) -> Self {
        if class.is_empty() {
            return self.text(s);
        }
        let _ = write!(self.0, "<td class=\"{}\">{}</td>", esc(class), esc(s));
        self
    }

    /// A number cell that sorts by `v` (sorted last when `None`).
    fn num(mut self, v: Option<f64>, shown: &str) -> Self {
        let v = v.map(|v| v.to_string()).unwrap_or_default();
        let _ = write!(
            self.0,
            "<td class=\"num\" data-v=\"{}\">{}</td>",
            esc(&v),
            esc(shown)
        );
        self
    }

    /// A reward cell with a small bar.
    fn reward(mut self, r: Option<f64>) -> Self {
        match r {
            Some(r) => {
                let width = (r.clamp(0.0, 1.0) * 100.0).round();
                let _ = write!(
                    self.0,
                    "<td class=\"num\" data-v=\"{r}\">{}<span class=\"bar\"><i style=\"width:{width}%\"></i></span></td>",
                    esc(&reward(Some(r)))
                );
            }
            None => {
                let _ = write!(self.0, "<td class=\"num\" data-v=\"\">-</td>");
            }
        }
        self
    }

    /// A cell of already-escaped HTML.
    fn raw(mut self, html: &str) -> Self {
        let _ = write!(self.0, "<td>{html}</td>");
        self
    }

    fn end(mut self, out: &mut String) {
        self.0.push_str("</tr>\n");
        out.push_str(&self.0);
    }
}

fn table_start(out: &mut String, id: &str, headers: &[&str]) {
    let _ = write!(
        out,
        "<div class=\"scroll\"><table class=\"sortable\" id=\"{}\"><thead><tr>",
        esc(id)
    );
    for h in headers {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
}

fn table_end(out: &mut String) {
    out.push_str("</tbody></table></div>\n");
}

const FIGURES: [&str; 7] = [
    "Episodes",
    "Reward",
    "95% CI",
    "Out of budget",
    "Harness errors",
    "Re-runs",
    "Landed rungs",
];

fn figures(row: Row, s: &Stats) -> Row {
    row.num(Some(s.episodes as f64), &s.episodes.to_string())
        .reward(s.mean_reward)
        .num(s.ci95.map(|c| c.lo), &interval(s.ci95))
        .num(
            Some(s.budget_exhausted as f64),
            &of(s.budget_exhausted, s.episodes),
        )
        .num(Some(s.harness_errors as f64), &s.harness_errors.to_string())
        .num(Some(s.reruns as f64), &s.reruns.to_string())
        .text(&counts(&s.landed_rungs))
}

fn status_class(status: CalibrationStatus) -> &'static str {
    match status {
        CalibrationStatus::Calibrated => "ok",
        CalibrationStatus::Uncalibrated => "bad",
        CalibrationStatus::NotRun => "muted",
    }
}

/// The report as one self-contained HTML page, with links relative to the run
/// folder (for a page written into the run folder).
pub fn render_html(report: &RunReport) -> String {
    html(report, "")
}

/// The report as one HTML page written into `page_dir`: links lead from
/// `page_dir` to the run folder's trajectory and patch files.
pub fn render_html_for(report: &RunReport, page_dir: &Path) -> String {
    html(report, &prefix_from(page_dir, &report.run_dir))
}

pub(crate) fn html(report: &RunReport, prefix: &str) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let c = &report.campaign;
    let title = match &c.model {
        Some(m) => format!("Campaign report · {m}"),
        None => "Campaign report".to_string(),
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(&content_security_policy()),
        esc(&title),
    );
    let _ = write!(
        out,
        "<header><h1>{}</h1><div class=\"sub\">{}</div>\n<nav>\
         <a href=\"#overview\">Overview</a><a href=\"#overall\">Overall</a>\
         <a href=\"#tiers\">Per tier</a><a href=\"#tasks\">Per task</a>\
         <a href=\"#calibration\">Calibration</a><a href=\"#ladder\">Ladder landings</a>\
         <a href=\"#episodes\">Episodes</a>{}</nav></header>\n",
        esc(&title),
        esc(&report.run_dir.display().to_string()),
        if report.warnings.is_empty() {
            ""
        } else {
            "<a href=\"#warnings\">Warnings</a>"
        },
    );

    // Overview.
    out.push_str("<section id=\"overview\"><h2>Overview</h2><dl class=\"overview\">\n");
    let overview = [
        ("Run folder", Some(report.run_dir.display().to_string())),
        ("Started", c.started_at.clone()),
        ("Resumed", c.resumed_at.clone()),
        ("Harness version", c.harness_version.clone()),
        ("Dataset", c.dataset.clone()),
        ("Model", c.model.clone()),
        ("API", c.api.clone()),
        ("Base URL", c.base_url.clone()),
        ("Agents", Some(c.agents.join(", "))),
        ("Samples", c.samples.map(|s| s.to_string())),
        ("Tasks", Some(report.tasks.len().to_string())),
        ("Episodes", Some(episode_total(report))),
        (
            "Duplicates replaced",
            Some(report.counts.duplicates.to_string()),
        ),
        (
            "Harness errors",
            Some(report.counts.harness_errors.to_string()),
        ),
        ("Calibration", Some(report.counts.calibration.summary())),
        (
            "Campaign description",
            Some(
                match c.source {
                    crate::report::CampaignSource::CampaignJson => "campaign.json",
                    crate::report::CampaignSource::Inferred => "inferred from the records",
                }
                .to_string(),
            ),
        ),
    ];
    for (name, v) in overview {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(name), esc(&opt(v)));
    }
    if !c.settings.is_null() {
        let settings = serde_json::to_string_pretty(&c.settings).unwrap_or_default();
        let _ = writeln!(
            out,
            "<dt>Settings</dt><dd><pre>{}</pre></dd>",
            esc(&settings)
        );
    }
    let _ = writeln!(
        out,
        "</dl><p class=\"note\">{}</p></section>",
        esc(&interval_method())
    );

    if !report.warnings.is_empty() {
        out.push_str("<section id=\"warnings\"><h2>Warnings</h2><ul class=\"warnings\">\n");
        for w in &report.warnings {
            let _ = writeln!(out, "<li>{}</li>", esc(&w.to_string()));
        }
        out.push_str("</ul></section>\n");
    }

    // Overall.
    out.push_str("<section id=\"overall\"><h2>Overall</h2>\n");
    let mut headers = vec!["Agent", "Model", "Tasks"];
    headers.extend(FIGURES);
    headers.extend(["Tokens in", "Tokens out", "Calibration"]);
    table_start(&mut out, "overall-table", &headers);
    for g in &report.overall {
        let row = Row::new()
            .text(&g.agent)
            .text(&g.model)
            .num(Some(g.tasks as f64), &g.tasks.to_string());
        figures(row, &g.stats)
            .num(g.stats.mean_tokens_in, &tokens(g.stats.mean_tokens_in))
            .num(g.stats.mean_tokens_out, &tokens(g.stats.mean_tokens_out))
            .text(&g.calibration.summary())
            .end(&mut out);
    }
    table_end(&mut out);
    out.push_str("</section>\n");

    // Per tier.
    out.push_str("<section id=\"tiers\"><h2>Per tier</h2>\n");
    let mut headers = vec!["Tier", "Agent", "Model", "Tasks"];
    headers.extend(FIGURES);
    headers.extend(["Tokens in", "Tokens out", "Calibration"]);
    table_start(&mut out, "tier-table", &headers);
    for g in &report.by_tier {
        let row = Row::new()
            .text(&g.tier)
            .text(&g.agent)
            .text(&g.model)
            .num(Some(g.tasks as f64), &g.tasks.to_string());
        figures(row, &g.stats)
            .num(g.stats.mean_tokens_in, &tokens(g.stats.mean_tokens_in))
            .num(g.stats.mean_tokens_out, &tokens(g.stats.mean_tokens_out))
            .text(&g.calibration.summary())
            .end(&mut out);
    }
    table_end(&mut out);
    out.push_str("</section>\n");

    // Per task.
    out.push_str("<section id=\"tasks\"><h2>Per task</h2>\n");
    let mut headers = vec!["Task", "Tier", "Agent", "Model"];
    headers.extend(FIGURES);
    headers.extend([
        "End reasons",
        "Verdicts",
        "Tokens in",
        "Tokens out",
        "Calibration",
    ]);
    table_start(&mut out, "task-table", &headers);
    for g in &report.by_task {
        let row = Row::new()
            .text(&g.instance_id)
            .text(&g.tier)
            .text(&g.agent)
            .text(&g.model);
        figures(row, &g.stats)
            .text(&counts(&g.stats.end_reasons))
            .text(&counts(&g.stats.verdicts))
            .num(g.stats.mean_tokens_in, &tokens(g.stats.mean_tokens_in))
            .num(g.stats.mean_tokens_out, &tokens(g.stats.mean_tokens_out))
            .class(status_class(g.calibration), g.calibration.name())
            .end(&mut out);
    }
    table_end(&mut out);
    out.push_str("</section>\n");

    // Calibration.
    out.push_str("<section id=\"calibration\"><h2>Calibration</h2>\n");
    let _ = writeln!(
        out,
        "<p class=\"note\">{}. A task is calibrated when every gold grading scores 1.0 and \
         every noop grading 0.2.</p>",
        esc(&report.counts.calibration.summary())
    );
    table_start(
        &mut out,
        "calibration-table",
        &["Task", "Tier", "Status", "Gold", "Noop", "Episodes"],
    );
    for t in &report.tasks {
        let observed = |obs: &[crate::report::Observation]| {
            if obs.is_empty() {
                "-".to_string()
            } else {
                obs.iter()
                    .map(|o| match o.verdict {
                        pdl_grader::Verdict::Graded => format!("{:.3}", o.reward),
                        v => format!("{:.3} ({})", o.reward, v.name()),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        Row::new()
            .text(&t.instance_id)
            .text(&t.tier)
            .class(
                status_class(t.calibration.status),
                t.calibration.status.name(),
            )
            .text(&observed(&t.calibration.gold))
            .text(&observed(&t.calibration.noop))
            .num(Some(t.episodes as f64), &t.episodes.to_string())
            .end(&mut out);
    }
    table_end(&mut out);
    out.push_str("</section>\n");

    // Ladder landings.
    out.push_str("<section id=\"ladder\"><h2>Ladder landings</h2>\n");
    let landed: Vec<_> = report
        .by_task
        .iter()
        .filter(|g| !g.stats.landed_rungs.is_empty())
        .collect();
    if landed.is_empty() {
        out.push_str("<p class=\"note\">No episode landed on a rung.</p>\n");
    } else {
        table_start(
            &mut out,
            "ladder-table",
            &[
                "Task",
                "Tier",
                "Agent",
                "Model",
                "Scored",
                "Landed rungs",
                "On no rung",
            ],
        );
        for g in landed {
            let on_rungs: usize = g.stats.landed_rungs.values().sum();
            let none = g.stats.scored.saturating_sub(on_rungs);
            Row::new()
                .text(&g.instance_id)
                .text(&g.tier)
                .text(&g.agent)
                .text(&g.model)
                .num(Some(g.stats.scored as f64), &g.stats.scored.to_string())
                .text(&counts(&g.stats.landed_rungs))
                .num(Some(none as f64), &none.to_string())
                .end(&mut out);
        }
        table_end(&mut out);
    }
    out.push_str("</section>\n");

    // Episodes.
    out.push_str("<section id=\"episodes\"><h2>Episodes</h2>\n");
    table_start(
        &mut out,
        "episode-table",
        &[
            "Task",
            "Tier",
            "Agent",
            "Model",
            "Sample",
            "Reward",
            "Verdict",
            "End reason",
            "Tokens in",
            "Tokens out",
            "Budget",
            "Steps",
            "Wall s",
            "Landed rung",
            "Trajectory",
            "Patch",
            "Log",
            "Detail",
        ],
    );
    for e in &report.episodes {
        episode_row(&mut out, e, prefix);
    }
    table_end(&mut out);
    out.push_str("</section>\n");

    let _ = write!(
        out,
        "<footer><p>pdl-swe report · harness {}</p></footer>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        esc(&opt(c.harness_version.as_deref()))
    );
    out
}

/// A link to a run file, `(missing)` when it does not exist; the path as text
/// when it is not a safe relative path.
fn link(prefix: &str, label: &str, path: Option<&str>, exists: Option<bool>) -> String {
    let Some(path) = path else {
        return "<span class=\"muted\">-</span>".to_string();
    };
    let missing = if exists == Some(false) {
        " <span class=\"warn\">(missing)</span>"
    } else {
        ""
    };
    match href(prefix, path) {
        Some(h) => format!(
            "<a href=\"{}\" title=\"{}\">{}</a>{missing}",
            esc(&h),
            esc(path),
            esc(label)
        ),
        None => format!("<code>{}</code>{missing}", esc(path)),
    }
}

fn episode_row(out: &mut String, e: &EpisodeRow, prefix: &str) {
    let verdict_class = match e.verdict {
        pdl_grader::Verdict::Graded => "",
        pdl_grader::Verdict::HarnessError => "warn",
        _ => "bad",
    };
    let end_class = if e.budget_exhausted { "warn" } else { "" };
    let trajectory = link(
        prefix,
        "trajectory",
        e.trajectory.as_deref(),
        e.trajectory_exists,
    );
    let patch = link(prefix, "patch", e.patch.as_deref(), e.patch_exists);
    let log = link(prefix, "log", e.log.as_deref(), e.log_exists);
    let detail = [
        e.detail.as_deref(),
        e.error.as_deref(),
        e.patch_error.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" · ");
    let detail_cell = if detail.is_empty() {
        String::new()
    } else {
        format!(
            "<span title=\"{}\">{}</span>",
            esc(&shorten(&detail, 4000)),
            esc(&shorten(&detail, 160))
        )
    };
    let mut end_reason = opt(e.end_reason.as_deref());
    if e.budget_exhausted && e.end_reason.as_deref() != Some(crate::report::BUDGET_EXHAUSTED) {
        end_reason.push_str(" (budget spent)");
    }
    let as_f64 = |v: Option<u64>| v.map(|v| v as f64);
    Row::new()
        .text(&e.instance_id)
        .text(&e.tier)
        .text(&e.agent)
        .text(&e.model)
        .num(as_f64(e.sample), &opt(e.sample))
        .reward(Some(e.reward))
        .class(verdict_class, e.verdict.name())
        .class(end_class, &end_reason)
        .num(as_f64(e.tokens_in), &opt(e.tokens_in))
        .num(as_f64(e.tokens_out), &opt(e.tokens_out))
        .num(as_f64(e.token_budget), &opt(e.token_budget))
        .num(as_f64(e.steps), &opt(e.steps))
        .num(
            e.wall_s,
            &e.wall_s.map_or("-".to_string(), |w| format!("{w:.1}")),
        )
        .text(&opt(e.landed_rung.as_deref()))
        .raw(&trajectory)
        .raw(&patch)
        .raw(&log)
        .raw(&detail_cell)
        .end(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }

    #[test]
    fn the_policy_pins_the_script() {
        let csp = content_security_policy();
        assert!(csp.starts_with("default-src 'none'"));
        let hash = csp.split("'sha256-").nth(1).unwrap();
        assert_eq!(hash.find('\'').unwrap(), 44, "{csp}");
    }
}
