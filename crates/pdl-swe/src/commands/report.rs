//! `pdl-swe report RUN_DIR`: the reports of a campaign.

use std::collections::BTreeMap;

use crate::cli::{Format, ReportArgs};
use crate::exit::{self, ExitError};
use crate::render::print_json;
use crate::settings::load_dataset;

/// Runs `report`.
pub fn run(args: &ReportArgs) -> Result<i32, ExitError> {
    if !args.run_dir.join("results.jsonl").is_file() {
        return Err(ExitError::usage(anyhow::anyhow!(
            "{} holds no results.jsonl",
            args.run_dir.display()
        )));
    }
    // Tiers come from the dataset (the bundled suite unless --dataset says otherwise).
    let ds = load_dataset(&args.dataset)?;
    let tiers: BTreeMap<String, String> = ds
        .tasks
        .iter()
        .map(|t| (t.row.instance_id.clone(), t.row.tier.clone()))
        .collect();
    let report = pdl_report::RunReport::load(&args.run_dir, &tiers).map_err(ExitError::usage)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dir.join("report"));
    pdl_report::write_all(&report, &out).map_err(anyhow::Error::from)?;
    match args.format {
        Format::Json => print_json(&pdl_report::to_json(&report))?,
        Format::Table => {
            println!("{}", pdl_report::render_table(&report));
            println!(
                "wrote {}, {} and {}",
                out.join("report.json").display(),
                out.join("report.md").display(),
                out.join("index.html").display()
            );
        }
    }
    Ok(exit::SUCCESS)
}
