//! `pdl-swe merge OUT SHARD_OUT…`: shard outputs into one results file or run
//! folder.

use pdl_report::terminal_safe;
use pdl_scale::{MergeError, MergeKind};

use crate::cli::{Format, MergeArgs};
use crate::exit::{self, ExitError};
use crate::render::print_json;

/// Runs `merge`.
pub fn run(args: &MergeArgs) -> Result<i32, ExitError> {
    let merged = pdl_scale::merge::merge(&args.out, &args.shards).map_err(|e| match e {
        // The shards are not (yet) a whole: a failure found, not bad input.
        MergeError::MissingShards { .. }
        | MergeError::Incomplete { .. }
        | MergeError::Conflict { .. }
        | MergeError::FileConflict { .. } => ExitError::from(anyhow::Error::from(e)),
        other => ExitError::usage(other),
    })?;
    for w in &merged.warnings {
        eprintln!("warning: {}", terminal_safe(w));
    }
    match args.format {
        Format::Json => print_json(&merged)?,
        Format::Table => {
            let what = match merged.kind {
                MergeKind::Results => "results file",
                MergeKind::RunFolder => "run folder",
            };
            println!(
                "merged {} shards into the {what} {}: {} records in plan order{}{}",
                merged.shards,
                terminal_safe(&args.out.display().to_string()),
                merged.records,
                if merged.duplicates > 0 {
                    format!(", {} duplicates kept once", merged.duplicates)
                } else {
                    String::new()
                },
                if merged.files > 0 {
                    format!(", {} episode files", merged.files)
                } else {
                    String::new()
                },
            );
            if merged.kind == MergeKind::RunFolder {
                println!(
                    "report: pdl-swe report {}",
                    terminal_safe(&args.out.display().to_string())
                );
            }
        }
    }
    Ok(exit::SUCCESS)
}
