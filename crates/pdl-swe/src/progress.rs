//! Reporters: the pipeline's typed event stream
//! ([`pdl_grader::pipeline::Event`]) rendered for people as progress bars on
//! stderr. Every command that runs a plan hands its events to one of these.

use std::path::Path;

use indicatif::ProgressBar;
use pdl_grader::pipeline::{Event, Phase, PhaseTotals};
use pdl_report::terminal_safe;
use pdl_task::Task;

use crate::render::progress_bar;

/// Prints a warning above the bar (a hidden bar, when stderr is no terminal,
/// would drop it).
fn warn(bar: Option<&ProgressBar>, message: &str) {
    match bar {
        Some(b) if !b.is_hidden() => b.println(format!("warning: {}", terminal_safe(message))),
        _ => eprintln!("warning: {}", terminal_safe(message)),
    }
}

/// One bar over the whole plan (`validate`, `calibrate`): each finished job
/// moves it and names itself.
pub struct PlanBar<'a> {
    label: &'a str,
    tasks: &'a [Task],
    bar: Option<ProgressBar>,
}

impl<'a> PlanBar<'a> {
    /// A reporter whose bar is labelled `label`.
    pub fn new(label: &'a str, tasks: &'a [Task]) -> Self {
        PlanBar {
            label,
            tasks,
            bar: None,
        }
    }

    /// Renders one event.
    pub fn on_event(&mut self, event: Event<'_>) {
        match event {
            Event::PlanStarted { phases } => {
                let total = phases.iter().map(|p| p.total).sum();
                self.bar = Some(progress_bar(total, self.label));
            }
            Event::Recorded { job, .. } | Event::Measured { job, .. } => {
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                    bar.set_message(terminal_safe(&job.label(self.tasks)).into_owned());
                }
            }
            Event::Warning(message) => warn(self.bar.as_ref(), &message),
            Event::PhaseStarted(_) | Event::JobStarted { .. } => {}
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The bar of `grade`: one step per entry of the predictions file; while the
/// ladder phase runs, it says how far the ladders are.
pub struct GradeBar {
    bar: ProgressBar,
    ladder_total: usize,
    ladder_done: usize,
}

impl GradeBar {
    /// A bar over `entries` entries.
    pub fn new(entries: usize) -> Self {
        GradeBar {
            bar: progress_bar(entries, "grade"),
            ladder_total: 0,
            ladder_done: 0,
        }
    }

    /// Renders one event.
    pub fn on_event(&mut self, event: Event<'_>) {
        match event {
            Event::PhaseStarted(PhaseTotals {
                phase: Phase::Ladder,
                total,
                ..
            }) => self.ladder_total = total,
            Event::Measured {
                phase: Phase::Ladder,
                ..
            } => {
                self.ladder_done += 1;
                self.bar.set_message(format!(
                    "measuring ladders {}/{}",
                    self.ladder_done, self.ladder_total
                ));
            }
            Event::Recorded { .. } => {
                self.bar.set_message(String::new());
                self.bar.inc(1);
            }
            Event::Warning(message) => warn(Some(&self.bar), &message),
            _ => {}
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// The bars of `run`: one for the in-campaign calibration (its ladder and
/// calibration phases together), one for the episodes; a phase that found
/// records already done says so.
pub struct CampaignBars<'a> {
    run_dir: &'a Path,
    phases: Vec<PhaseTotals>,
    bar: Option<ProgressBar>,
}

impl<'a> CampaignBars<'a> {
    /// Bars for a campaign writing into `run_dir`.
    pub fn new(run_dir: &'a Path) -> Self {
        CampaignBars {
            run_dir,
            phases: Vec::new(),
            bar: None,
        }
    }

    fn start_bar(&mut self, name: &str, total: usize, skipped: usize) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if skipped > 0 {
            eprintln!(
                "{name}: {skipped} already done in {}, {total} to run",
                self.run_dir.display()
            );
        }
        self.bar = Some(progress_bar(total, name));
    }

    /// Renders one event.
    pub fn on_event(&mut self, event: Event<'_>) {
        match event {
            Event::PlanStarted { phases } => self.phases = phases.to_vec(),
            Event::PhaseStarted(totals) => match totals.phase {
                // The ladder is the first part of the calibration.
                Phase::Ladder | Phase::Calibration => {
                    if self.bar.is_none() {
                        let part =
                            |p: &PhaseTotals| matches!(p.phase, Phase::Ladder | Phase::Calibration);
                        let total = self.phases.iter().filter(|p| part(p)).map(|p| p.total);
                        let skipped = self.phases.iter().filter(|p| part(p)).map(|p| p.skipped);
                        self.start_bar("calibration", total.sum(), skipped.sum());
                    }
                }
                phase => self.start_bar(phase.name(), totals.total, totals.skipped),
            },
            Event::Recorded { record, .. } => {
                if let Some(b) = &self.bar {
                    b.inc(1);
                    b.set_message(format!(
                        "{} {:.3}",
                        terminal_safe(&record.instance_id),
                        record.reward
                    ));
                }
            }
            Event::Warning(message) => warn(self.bar.as_ref(), &message),
            Event::JobStarted { .. } | Event::Measured { .. } => {}
        }
    }

    /// Clears the bar.
    pub fn finish(mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
