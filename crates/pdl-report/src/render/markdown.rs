//! The Markdown rendering: the overview, tables overall, per tier and per task,
//! calibration, ladder landings, every episode with links, and warnings. Every
//! piece of text from the run is escaped.

use std::fmt::Write as _;
use std::path::Path;

use super::{counts, episode_total, interval, interval_method, of, opt, reward, shorten, tokens};
use crate::links::{href, prefix_from};
use crate::report::Stats;
use crate::RunReport;

/// Escapes text for a Markdown table cell or paragraph: the punctuation that
/// Markdown or HTML gives a meaning to inside a line (emphasis, code, links,
/// tags, entities, table pipes) is backslash-escaped, and line breaks become
/// spaces. With brackets escaped, parentheses cannot form a link.
pub(crate) fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

/// Columns aligned to the right.
const NUMERIC: [&str; 13] = [
    "Tasks",
    "Episodes",
    "Reward",
    "95% CI",
    "Out of budget",
    "Harness errors",
    "Re-runs",
    "Tokens in",
    "Tokens out",
    "Sample",
    "Scored",
    "On no rung",
    "Budget",
];

fn header(out: &mut String, names: &[&str]) {
    let _ = writeln!(out, "| {} |", names.join(" | "));
    let rule: Vec<&str> = names
        .iter()
        .map(|n| if NUMERIC.contains(n) { "---:" } else { "---" })
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
}

fn figures(s: &Stats) -> Vec<String> {
    vec![
        s.episodes.to_string(),
        reward(s.mean_reward),
        interval(s.ci95),
        of(s.budget_exhausted, s.episodes),
        s.harness_errors.to_string(),
        s.reruns.to_string(),
        md(&counts(&s.landed_rungs)),
    ]
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

/// The report as Markdown, with links relative to the run folder (for a file
/// written into the run folder).
pub fn render_markdown(report: &RunReport) -> String {
    markdown(report, "")
}

/// The report as Markdown for a file written into `page_dir`: links lead from
/// `page_dir` to the run folder.
pub fn render_markdown_for(report: &RunReport, page_dir: &Path) -> String {
    markdown(report, &prefix_from(page_dir, &report.run_dir))
}

pub(crate) fn markdown(report: &RunReport, prefix: &str) -> String {
    let mut out = String::new();
    let c = &report.campaign;
    let _ = writeln!(out, "# Campaign report\n");
    let overview = [
        ("Run folder", Some(report.run_dir.display().to_string())),
        ("Started", c.started_at.clone()),
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
            "Harness errors",
            Some(report.counts.harness_errors.to_string()),
        ),
        ("Calibration", Some(report.counts.calibration.summary())),
    ];
    for (name, v) in overview {
        let _ = writeln!(out, "- **{name}:** {}", md(&opt(v)));
    }
    let _ = writeln!(out, "\n{}", md(&interval_method()));

    let _ = writeln!(out, "\n## Overall\n");
    let mut names = vec!["Agent", "Model", "Tasks"];
    names.extend(FIGURES);
    names.extend(["Tokens in", "Tokens out", "Calibration"]);
    header(&mut out, &names);
    for g in &report.overall {
        let mut cells = vec![md(&g.agent), md(&g.model), g.tasks.to_string()];
        cells.extend(figures(&g.stats));
        cells.push(tokens(g.stats.mean_tokens_in));
        cells.push(tokens(g.stats.mean_tokens_out));
        cells.push(md(&g.calibration.summary()));
        row(&mut out, &cells);
    }

    let _ = writeln!(out, "\n## Per tier\n");
    let mut names = vec!["Tier", "Agent", "Model", "Tasks"];
    names.extend(FIGURES);
    names.push("Calibration");
    header(&mut out, &names);
    for g in &report.by_tier {
        let mut cells = vec![md(&g.tier), md(&g.agent), md(&g.model), g.tasks.to_string()];
        cells.extend(figures(&g.stats));
        cells.push(md(&g.calibration.summary()));
        row(&mut out, &cells);
    }

    let _ = writeln!(out, "\n## Per task\n");
    let mut names = vec!["Task", "Tier", "Agent", "Model"];
    names.extend(FIGURES);
    names.push("Calibration");
    header(&mut out, &names);
    for g in &report.by_task {
        let mut cells = vec![md(&g.instance_id), md(&g.tier), md(&g.agent), md(&g.model)];
        cells.extend(figures(&g.stats));
        cells.push(md(g.calibration.name()));
        row(&mut out, &cells);
    }

    let _ = writeln!(out, "\n## Calibration\n");
    header(&mut out, &["Task", "Tier", "Status", "Episodes"]);
    for t in &report.tasks {
        row(
            &mut out,
            &[
                md(&t.instance_id),
                md(&t.tier),
                md(&t.calibration.summary()),
                t.episodes.to_string(),
            ],
        );
    }

    let _ = writeln!(out, "\n## Ladder landings\n");
    let landed: Vec<_> = report
        .by_task
        .iter()
        .filter(|g| !g.stats.landed_rungs.is_empty())
        .collect();
    if landed.is_empty() {
        let _ = writeln!(out, "No episode landed on a rung.");
    } else {
        header(
            &mut out,
            &["Task", "Agent", "Model", "Scored", "Landed rungs"],
        );
        for g in landed {
            row(
                &mut out,
                &[
                    md(&g.instance_id),
                    md(&g.agent),
                    md(&g.model),
                    g.stats.scored.to_string(),
                    md(&counts(&g.stats.landed_rungs)),
                ],
            );
        }
    }

    let _ = writeln!(out, "\n## Episodes\n");
    header(
        &mut out,
        &[
            "Task",
            "Agent",
            "Model",
            "Sample",
            "Reward",
            "Verdict",
            "End reason",
            "Tokens in",
            "Tokens out",
            "Landed rung",
            "Trajectory",
            "Patch",
        ],
    );
    let link = |label: &str, path: &Option<String>| match path {
        Some(p) => match href(prefix, p) {
            Some(h) => format!("[{label}]({h})"),
            None => md(p),
        },
        None => "-".to_string(),
    };
    for e in &report.episodes {
        row(
            &mut out,
            &[
                md(&e.instance_id),
                md(&shorten(&e.agent, 60)),
                md(&e.model),
                opt(e.sample),
                reward(Some(e.reward)),
                md(e.verdict.name()),
                md(&opt(e.end_reason.as_deref())),
                opt(e.tokens_in),
                opt(e.tokens_out),
                md(&opt(e.landed_rung.as_deref())),
                link("trajectory", &e.trajectory),
                link("patch", &e.patch),
            ],
        );
    }

    if !report.warnings.is_empty() {
        let _ = writeln!(out, "\n## Warnings\n");
        for w in &report.warnings {
            let _ = writeln!(out, "- {}", md(&w.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(md("<script>|a_b*\nx"), "\\<script\\>\\|a\\_b\\* x");
    }
}
