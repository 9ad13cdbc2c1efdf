//! `pdl-swe grade --predictions FILE --out FILE`.

use std::collections::BTreeMap;

use anyhow::Context;
use pdl_grader::pipeline::{done_keys, Pipeline, PipelineError, Resume, ShardManifest};
use pdl_grader::predictions::{parse_predictions, plan_predictions};
use pdl_grader::record::RecordLog;
use pdl_grader::{ResultRecord, Verdict};
use pdl_report::{RunReport, Stats};
use serde::Serialize;

use pdl_report::terminal_safe;

use crate::cli::{Format, GradeArgs};
use crate::commands::report_load_errors;
use crate::exit::{self, ExitError};
use crate::progress::GradeBar;
use crate::render::{print_json, reward, table};
use crate::settings::{load_dataset, resolve};

/// One model's predictions, summarized by the report library's own
/// statistics: harness errors are counted but kept out of the mean.
#[derive(Serialize)]
struct ModelSummary {
    predictions: usize,
    #[serde(flatten)]
    stats: Stats,
}

/// Runs `grade`.
pub fn run(args: &GradeArgs) -> Result<i32, ExitError> {
    let ds = load_dataset(&args.dataset)?;
    let bytes = std::fs::read(&args.predictions)
        .with_context(|| format!("cannot read {}", args.predictions.display()))
        .map_err(ExitError::usage)?;
    let entries = parse_predictions(&bytes, &args.predictions.display().to_string())
        .map_err(|e| ExitError::usage(anyhow::anyhow!(e)))?;
    let settings = resolve(&args.run)?;
    let mut out = RecordLog::open(&args.out).map_err(anyhow::Error::from)?;
    let mut records: Vec<ResultRecord> = out.existing().to_vec();
    let done = done_keys(&records, Resume::Every);
    let mut plan = plan_predictions(
        &settings.grader,
        &ds.tasks,
        &entries,
        &done,
        &settings.cache_dir,
    );
    let mut entries_total = entries.len();
    if let Some(shard) = args.shard {
        // The whole plan, as one machine would run it, names every shard's
        // records in order; this shard runs its slice.
        let whole = plan_predictions(
            &settings.grader,
            &ds.tasks,
            &entries,
            &Default::default(),
            &settings.cache_dir,
        );
        let manifest = ShardManifest::new("grade", shard, &whole, &ds.tasks);
        manifest
            .write_or_check(&ShardManifest::path_for_results(&args.out))
            .map_err(ExitError::usage)?;
        entries_total = manifest.assigned.len();
        plan = plan.shard(&ds.tasks, shard);
    }
    let skipped = plan.skipped();
    let pipeline = Pipeline {
        grader: &settings.grader,
        tasks: &ds.tasks,
        parallelism: settings.parallelism,
        episodes: None,
    };
    let mut bar = GradeBar::new(entries_total);
    let outcome = pipeline.run(&plan, &mut out, &mut |e| bar.on_event(e));
    bar.finish();
    if crate::interrupt::requested() {
        return Err(crate::interrupt::stopped(&format!(
            "the records of finished gradings are in {}",
            args.out.display()
        )));
    }
    let outcome = outcome.map_err(|e| match e {
        PipelineError::Write(e) => ExitError::from(e),
        other => ExitError::from(anyhow::Error::from(other)),
    })?;
    records.extend(outcome.records().cloned());
    let report = RunReport::from_records(&args.out, None, &records, &BTreeMap::new());
    let mut rows_by_model: BTreeMap<&str, Vec<&pdl_report::EpisodeRow>> = BTreeMap::new();
    for row in &report.episodes {
        rows_by_model
            .entry(row.model.as_str())
            .or_default()
            .push(row);
    }
    let by_model: BTreeMap<String, ModelSummary> = rows_by_model
        .into_iter()
        .map(|(model, rows)| {
            (
                model.to_string(),
                ModelSummary {
                    predictions: rows.len(),
                    stats: Stats::of(rows),
                },
            )
        })
        .collect();
    match args.format {
        Format::Json => print_json(&by_model)?,
        Format::Table => {
            let mut t = table(&[
                "model",
                "predictions",
                "mean reward (95% CI)",
                "verdicts",
                "landed rungs",
            ]);
            for (model, s) in &by_model {
                let interval = s
                    .stats
                    .ci95
                    .as_ref()
                    .map(|ci| format!(" ({:.3}–{:.3})", ci.lo, ci.hi))
                    .unwrap_or_default();
                t.add_row(vec![
                    model.clone(),
                    s.predictions.to_string(),
                    format!("{}{interval}", reward(s.stats.mean_reward)),
                    s.stats
                        .verdicts
                        .iter()
                        .map(|(v, n)| format!("{v} {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.stats.landed_rungs.values().sum::<usize>().to_string(),
                ]);
            }
            println!("{}", terminal_safe(&t.to_string()));
            println!(
                "{} records in {} ({} already graded and skipped)",
                records.len(),
                args.out.display(),
                skipped
            );
        }
    }
    report_load_errors(&ds.errors);
    let harness_errors = records.iter().any(|r| r.verdict == Verdict::HarnessError);
    Ok(if harness_errors {
        exit::FAILURES
    } else {
        exit::SUCCESS
    })
}
