//! `pdl-swe slurm grade|run … --shards N` and `pdl-swe slurm status RUN_DIR`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use pdl_report::terminal_safe;
use pdl_scale::slurm::{ShardedCommand, SlurmJob};

use crate::cli::{Format, SlurmCommand, SlurmOptions};
use crate::exit::{self, ExitError};
use crate::render::{print_json, table};

/// Options of `slurm grade|run` that are Slurm's, not the command's, with
/// whether each takes a value; `--out` is replaced per shard.
const OWN_OPTIONS: &[(&str, bool)] = &[
    ("--shards", true),
    ("--partition", true),
    ("--time", true),
    ("--cpus-per-task", true),
    ("--sbatch-arg", true),
    ("--dry-run", false),
    ("--out", true),
];

/// The command's own arguments: everything after `slurm grade` (or `run`)
/// on the command line but the Slurm options and `--out`, as given (clap has
/// already checked them).
fn forwarded(argv: &[OsString], command: &str) -> Result<Vec<String>, ExitError> {
    let argv: Vec<String> = argv
        .iter()
        .map(|a| {
            a.to_str().map(str::to_string).ok_or_else(|| {
                ExitError::usage(anyhow::anyhow!(
                    "{}: arguments must be UTF-8 text to go into a Slurm script",
                    a.to_string_lossy()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let start = argv
        .windows(2)
        .position(|w| w[0] == "slurm" && w[1] == command)
        .map(|i| i + 2)
        .unwrap_or(argv.len());
    let mut out = Vec::new();
    let mut rest = argv[start..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            out.push(arg.clone());
            out.extend(rest.by_ref().cloned());
            break;
        }
        let own = OWN_OPTIONS.iter().find(|(name, _)| {
            arg == name || arg.strip_prefix(name).is_some_and(|v| v.starts_with('='))
        });
        match own {
            Some((name, true)) if arg == name => {
                rest.next();
            }
            Some(_) => {}
            None => out.push(arg.clone()),
        }
    }
    Ok(out)
}

fn absolute(path: &Path) -> Result<PathBuf, ExitError> {
    std::path::absolute(path)
        .map_err(|e| ExitError::usage(anyhow::anyhow!("{}: {e}", path.display())))
}

fn submit(
    command: ShardedCommand,
    slurm: &SlurmOptions,
    out: &Path,
    shard_given: bool,
    jobs_given: bool,
) -> Result<i32, ExitError> {
    if shard_given {
        return Err(ExitError::usage(anyhow::anyhow!(
            "slurm {} sets --shard for each array task; give --shards N instead",
            command.name()
        )));
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    let job = SlurmJob {
        command,
        binary: std::env::current_exe()
            .map_err(|e| ExitError::environment(anyhow::anyhow!("cannot find this binary: {e}")))?,
        args: forwarded(&argv, command.name())?,
        shards: slurm.shards as usize,
        out: absolute(out)?,
        workdir: std::env::current_dir()
            .map_err(|e| ExitError::usage(anyhow::anyhow!("no current folder: {e}")))?,
        partition: slurm.partition.clone(),
        time: slurm.time.clone(),
        cpus_per_task: slurm.cpus_per_task as usize,
        jobs_from_slurm: !jobs_given,
        extra: slurm.sbatch_args.clone(),
    };
    job.check().map_err(ExitError::usage)?;
    if slurm.dry_run {
        println!("# {}/slurm/array.sbatch", job.out.display());
        print!("{}", job.array_script());
        println!();
        println!("# {}/slurm/merge.sbatch", job.out.display());
        print!("{}", job.merge_script());
        println!();
        println!(
            "# dry run: nothing written or submitted; without --dry-run: sbatch --parsable array.sbatch, then sbatch --parsable --dependency=afterok:<array job> merge.sbatch"
        );
        return Ok(exit::SUCCESS);
    }
    let submitted = job.submit().map_err(|e| match e {
        pdl_scale::SlurmError::Command { .. } => ExitError::environment(e),
        other => ExitError::usage(other),
    })?;
    println!(
        "submitted job array {} ({} shards) and merge job {} (afterok:{})",
        submitted.array_job, submitted.shards, submitted.merge_job, submitted.array_job
    );
    println!(
        "recorded in {}; progress: pdl-swe slurm status {}",
        terminal_safe(&job.out.join("slurm/submitted.json").display().to_string()),
        terminal_safe(&job.out.display().to_string())
    );
    Ok(exit::SUCCESS)
}

/// Runs `slurm`.
pub fn run(cmd: &SlurmCommand) -> Result<i32, ExitError> {
    match cmd {
        SlurmCommand::Grade(args) => submit(
            ShardedCommand::Grade,
            &args.slurm,
            &args.grade.out,
            args.grade.shard.is_some(),
            args.grade.run.jobs.is_some(),
        ),
        SlurmCommand::Run(args) => submit(
            ShardedCommand::Run,
            &args.slurm,
            &args.run.out,
            args.run.shard.is_some(),
            args.run.run.jobs.is_some(),
        ),
        SlurmCommand::Status { dir, format } => status(dir, *format),
    }
}

fn status(dir: &Path, format: Format) -> Result<i32, ExitError> {
    let status = pdl_scale::slurm::status(dir).map_err(ExitError::usage)?;
    for w in &status.warnings {
        eprintln!("warning: {}", terminal_safe(w));
    }
    if format == Format::Json {
        print_json(&status)?;
        return Ok(exit::SUCCESS);
    }
    let s = &status.submitted;
    println!(
        "{} as {} shards: job array {}, merge job {} (Slurm states from {})",
        s.command.name(),
        s.shards,
        s.array_job,
        s.merge_job,
        status.source
    );
    let mut t = table(&[
        "shard",
        "array task",
        "state",
        "records",
        "harness errors",
        "output",
    ]);
    for shard in &status.shards {
        let (id, state) = match &shard.slurm {
            Some(j) => (j.id.clone(), j.state.clone()),
            None => (format!("{}_{}", s.array_job, shard.shard), "-".into()),
        };
        t.add_row(vec![
            format!("{}/{}", shard.shard, s.shards),
            id,
            state,
            match shard.assigned {
                Some(n) => format!("{}/{n}", shard.recorded),
                None => "not started".into(),
            },
            shard.harness_errors.to_string(),
            shard.output.clone(),
        ]);
    }
    println!("{}", terminal_safe(&t.to_string()));
    println!(
        "merge job {}: {}; merged results: {}",
        s.merge_job,
        status
            .merge
            .as_ref()
            .map_or("-".to_string(), |j| j.state.clone()),
        status
            .merged_records
            .map_or("not yet".to_string(), |n| format!("{n} records"))
    );
    Ok(exit::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn slurm_options_and_out_are_not_forwarded() {
        let argv = os(&[
            "pdl-swe",
            "slurm",
            "grade",
            "--predictions",
            "p.jsonl",
            "--shards",
            "4",
            "--partition=cpu",
            "--time",
            "1:00:00",
            "--dry-run",
            "--out",
            "dir",
            "--test-timeout",
            "30",
            "--sbatch-arg",
            "--mem=8G",
            "--cpus-per-task=2",
        ]);
        assert_eq!(
            forwarded(&argv, "grade").unwrap(),
            ["--predictions", "p.jsonl", "--test-timeout", "30"]
        );
    }
}
