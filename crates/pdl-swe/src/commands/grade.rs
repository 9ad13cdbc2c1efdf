//! `pdl-swe grade --predictions FILE --out FILE`.

use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use pdl_grader::predictions::{grade_predictions, parse_predictions, resume_key, GradeEvent};
use pdl_grader::record::RecordLog;
use pdl_grader::{ResultRecord, Verdict};
use serde::Serialize;

use crate::cli::{Format, GradeArgs};
use crate::commands::report_load_errors;
use crate::exit::{self, ExitError};
use crate::render::{print_json, progress_bar, reward, table};
use crate::settings::{load_dataset, resolve};

#[derive(Serialize, Default)]
struct ModelSummary {
    predictions: usize,
    mean_reward: f64,
    verdicts: BTreeMap<&'static str, usize>,
    landed_rungs: usize,
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
    let previous: Vec<ResultRecord> = out.existing().to_vec();
    let done: HashSet<_> = previous.iter().map(resume_key).collect();
    let bar = progress_bar(entries.len(), "grade");
    let mut records: Vec<ResultRecord> = previous;
    let mut write_error = None;
    let skipped = grade_predictions(
        &settings.grader,
        &ds.tasks,
        &entries,
        &done,
        settings.parallelism,
        &settings.cache_dir,
        |event| match event {
            GradeEvent::Ladder { done, total } => {
                bar.set_message(format!("measuring ladders {done}/{total}"))
            }
            GradeEvent::Record(rec) => {
                bar.set_message(String::new());
                bar.inc(1);
                if let Err(e) = out.append(rec) {
                    write_error.get_or_insert(e);
                }
                records.push(rec.clone());
            }
        },
    );
    bar.finish_and_clear();
    if let Some(e) = write_error {
        return Err(e.into());
    }
    let mut by_model: BTreeMap<String, ModelSummary> = BTreeMap::new();
    for r in &records {
        let s = by_model
            .entry(
                r.model_name_or_path
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
            )
            .or_default();
        s.predictions += 1;
        s.mean_reward += r.reward;
        *s.verdicts.entry(r.verdict.name()).or_default() += 1;
        s.landed_rungs += r.landed_rung.is_some() as usize;
    }
    for s in by_model.values_mut() {
        s.mean_reward /= s.predictions.max(1) as f64;
    }
    match args.format {
        Format::Json => print_json(&by_model)?,
        Format::Table => {
            let mut t = table(&[
                "model",
                "predictions",
                "mean reward",
                "verdicts",
                "landed rungs",
            ]);
            for (model, s) in &by_model {
                t.add_row(vec![
                    model.clone(),
                    s.predictions.to_string(),
                    reward(Some(s.mean_reward)),
                    s.verdicts
                        .iter()
                        .map(|(v, n)| format!("{v} {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.landed_rungs.to_string(),
                ]);
            }
            println!("{t}");
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
