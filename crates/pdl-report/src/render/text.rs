//! The terminal rendering: a heading, then tables per task, per tier and overall.

use std::fmt::Write as _;

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

use super::{counts, episode_total, interval, interval_method, of, opt, reward, shorten, tokens};
use crate::report::{CalibrationStatus, Stats};
use crate::RunReport;

/// Agent names longer than this are cut in the terminal.
const AGENT_WIDTH: usize = 40;

fn table(header: &[&str], numeric: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    for &i in numeric {
        if let Some(column) = t.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn figures(s: &Stats) -> Vec<String> {
    vec![
        s.episodes.to_string(),
        reward(s.mean_reward),
        interval(s.ci95),
        of(s.budget_exhausted, s.episodes),
        s.harness_errors.to_string(),
        s.reruns.to_string(),
        counts(&s.landed_rungs),
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

/// The report as terminal tables: a heading, then per task, per tier and overall
/// (reward with three decimals, interval as `[lo, hi]`, landed rungs, budget
/// exhaustion, calibration), uncalibrated tasks and warnings.
pub fn render_table(report: &RunReport) -> String {
    let mut out = String::new();
    let c = &report.campaign;
    let _ = writeln!(out, "Run {}", report.run_dir.display());
    let _ = writeln!(
        out,
        "model {} · agents {} · tasks {} · samples {} · episodes {} · harness errors {} · {}",
        opt(c.model.as_deref()),
        c.agents.len(),
        report.tasks.len(),
        opt(c.samples),
        episode_total(report),
        report.counts.harness_errors,
        report.counts.calibration.summary(),
    );

    let numeric: Vec<usize> = (4..10).collect();
    let mut header = vec!["Task", "Tier", "Agent", "Model"];
    header.extend(FIGURES);
    header.push("Calibration");
    let mut t = table(&header, &numeric);
    for g in &report.by_task {
        let calibration = report
            .task(&g.instance_id)
            .map_or_else(|| "not run".to_string(), |t| t.calibration.summary());
        let mut row = vec![
            g.instance_id.clone(),
            g.tier.clone(),
            shorten(&g.agent, AGENT_WIDTH),
            g.model.clone(),
        ];
        row.extend(figures(&g.stats));
        row.push(calibration);
        t.add_row(row);
    }
    let _ = writeln!(out, "\nPer task\n{t}");

    let numeric: Vec<usize> = (3..9).collect();
    let mut header = vec!["Tier", "Agent", "Model", "Tasks"];
    header.extend(FIGURES);
    header.push("Calibration");
    let mut t = table(&header, &numeric);
    for g in &report.by_tier {
        let mut row = vec![
            g.tier.clone(),
            shorten(&g.agent, AGENT_WIDTH),
            g.model.clone(),
            g.tasks.to_string(),
        ];
        row.extend(figures(&g.stats));
        row.push(g.calibration.summary());
        t.add_row(row);
    }
    let _ = writeln!(out, "\nPer tier\n{t}");

    let numeric: Vec<usize> = (2..8).chain(9..11).collect();
    let mut header = vec!["Agent", "Model", "Tasks"];
    header.extend(FIGURES);
    header.extend(["Tokens in", "Tokens out", "Calibration"]);
    let mut t = table(&header, &numeric);
    for g in &report.overall {
        let mut row = vec![
            shorten(&g.agent, AGENT_WIDTH),
            g.model.clone(),
            g.tasks.to_string(),
        ];
        row.extend(figures(&g.stats));
        row.push(tokens(g.stats.mean_tokens_in));
        row.push(tokens(g.stats.mean_tokens_out));
        row.push(g.calibration.summary());
        t.add_row(row);
    }
    let _ = writeln!(out, "\nOverall\n{t}");
    let _ = writeln!(out, "{}", interval_method());

    let uncalibrated: Vec<_> = report
        .tasks
        .iter()
        .filter(|t| t.calibration.status == CalibrationStatus::Uncalibrated)
        .collect();
    if !uncalibrated.is_empty() {
        let _ = writeln!(out, "\nUncalibrated tasks:");
        for t in uncalibrated {
            let _ = writeln!(out, "  {}: {}", t.instance_id, t.calibration.summary());
        }
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out);
        for w in &report.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    // Task IDs, agents, models and warnings come from data.
    crate::terminal::terminal_safe(&out).into_owned()
}
