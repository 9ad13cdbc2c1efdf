//! Slurm job arrays of shards ([`SlurmJob`]): an `sbatch` script whose array
//! task `I` runs the same `pdl-swe grade` or `run` command with
//! `--shard $SLURM_ARRAY_TASK_ID/N` and an output of its own, and a merge job
//! that starts when every array task succeeded
//! (`--dependency=afterok:<array job>`). Slurm does all the scheduling.
//!
//! The output folder of a submission:
//!
//! ```text
//! OUT/
//!   results.jsonl              the merged results (written by the merge job)
//!   (run: campaign.json, trajectories/, patches/, logs/, ledger/: the merged run folder)
//!   shards/<I>.jsonl           grade: shard I's results (and <I>.jsonl.shard.json)
//!   shards/<I>/                run: shard I's run folder
//!   slurm/array.sbatch         the job array
//!   slurm/merge.sbatch         the merge job
//!   slurm/submitted.json       what was submitted: job ids, shards, command
//!   slurm/logs/                each job's standard output and error
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use pdl_grader::pipeline::ShardManifest;
use pdl_grader::Verdict;
use serde::{Deserialize, Serialize};

/// Which command the shards run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardedCommand {
    /// `pdl-swe grade`: each shard writes a results file.
    Grade,
    /// `pdl-swe run`: each shard writes a run folder.
    Run,
}

impl ShardedCommand {
    /// The subcommand's name.
    pub fn name(self) -> &'static str {
        match self {
            ShardedCommand::Grade => "grade",
            ShardedCommand::Run => "run",
        }
    }
}

/// A Slurm submission of a sharded command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// The command every shard runs.
    pub command: ShardedCommand,
    /// The `pdl-swe` binary the jobs run (absolute).
    pub binary: PathBuf,
    /// The command's arguments, without `--out` and `--shard` (they are
    /// added per shard).
    pub args: Vec<String>,
    /// N: array tasks, one per shard.
    pub shards: usize,
    /// The output folder (absolute).
    pub out: PathBuf,
    /// The folder the jobs start in (absolute; relative paths in `args` are
    /// relative to it).
    pub workdir: PathBuf,
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time` of each job.
    pub time: Option<String>,
    /// CPUs per array task (`--cpus-per-task`).
    pub cpus_per_task: usize,
    /// Whether to pass `-j $SLURM_CPUS_PER_TASK` (when `args` sets no `-j`).
    pub jobs_from_slurm: bool,
    /// More `#SBATCH` options, as given (`--mem=8G`, `--account=x`).
    pub extra: Vec<String>,
}

/// Why a submission or a status query failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// A file of the output folder cannot be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A Slurm command could not run or failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output, or why it did not start.
        message: String,
    },
    /// The folder holds no submission.
    #[error("{}: no Slurm submission here (no slurm/submitted.json)", path.display())]
    NotSubmitted {
        /// The folder.
        path: PathBuf,
    },
    /// The folder already holds a submission.
    #[error("{} already holds a submission ({}); choose a new output folder", path.display(), path.join("slurm/submitted.json").display())]
    AlreadySubmitted {
        /// The folder.
        path: PathBuf,
    },
    /// An option would break the generated script.
    #[error("{0}")]
    Invalid(String),
}

/// What was submitted, as recorded in `slurm/submitted.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// `grade` or `run`.
    pub command: ShardedCommand,
    /// N.
    pub shards: usize,
    /// The job array's id.
    pub array_job: String,
    /// The merge job's id.
    pub merge_job: String,
    /// When (RFC 3339, UTC).
    pub submitted_at: String,
    /// The scripts, relative to the output folder.
    pub scripts: Vec<String>,
    /// The shards' outputs, relative to the output folder, shard 1 first.
    pub shard_outputs: Vec<String>,
    /// The merged output, relative to the output folder (`results.jsonl`, or
    /// `.` for a run folder).
    pub merged: String,
    /// The command line of shard I, with `$SLURM_ARRAY_TASK_ID` for I.
    pub shard_command: Vec<String>,
}

/// Quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl SlurmJob {
    /// Checks what goes into `#SBATCH` lines (one line each, no newline).
    pub fn check(&self) -> Result<(), SlurmError> {
        if self.shards == 0 {
            return Err(SlurmError::Invalid("--shards must be at least 1".into()));
        }
        let values = [self.partition.as_deref(), self.time.as_deref()];
        for v in values
            .into_iter()
            .flatten()
            .chain(self.extra.iter().map(String::as_str))
        {
            if v.is_empty() || v.chars().any(|c| c.is_control() || c == '\'' || c == '"') {
                return Err(SlurmError::Invalid(format!(
                    "`{}` cannot go into an #SBATCH line",
                    v.escape_default()
                )));
            }
        }
        for p in [&self.binary, &self.out, &self.workdir] {
            if p.to_str().is_none_or(|s| s.contains('\n')) || !p.is_absolute() {
                return Err(SlurmError::Invalid(format!(
                    "{} must be an absolute path in UTF-8 without newlines",
                    p.display()
                )));
            }
        }
        Ok(())
    }

    /// Shard `index`'s output, relative to the output folder (`index` may be
    /// `${SLURM_ARRAY_TASK_ID}`).
    pub fn shard_output(&self, index: &str) -> String {
        match self.command {
            ShardedCommand::Grade => format!("shards/{index}.jsonl"),
            ShardedCommand::Run => format!("shards/{index}"),
        }
    }

    /// The merged output, relative to the output folder.
    pub fn merged_output(&self) -> &'static str {
        match self.command {
            ShardedCommand::Grade => "results.jsonl",
            ShardedCommand::Run => ".",
        }
    }

    fn header(&self, name: &str, log: &str) -> String {
        let mut s = String::from("#!/bin/bash\n");
        s.push_str(&format!("#SBATCH --job-name={name}\n"));
        s.push_str(&format!("#SBATCH --chdir={}\n", self.workdir.display()));
        s.push_str(&format!(
            "#SBATCH --output={}/slurm/logs/{log}\n",
            self.out.display()
        ));
        if let Some(p) = &self.partition {
            s.push_str(&format!("#SBATCH --partition={p}\n"));
        }
        if let Some(t) = &self.time {
            s.push_str(&format!("#SBATCH --time={t}\n"));
        }
        s
    }

    /// The command line of one shard, `$SLURM_ARRAY_TASK_ID` left for the
    /// shell.
    pub fn shard_command(&self) -> Vec<String> {
        let mut argv = vec![
            self.binary.display().to_string(),
            self.command.name().to_string(),
        ];
        argv.extend(self.args.iter().cloned());
        if self.jobs_from_slurm {
            argv.push("-j".into());
            argv.push("${SLURM_CPUS_PER_TASK:-1}".into());
        }
        argv.push("--shard".into());
        argv.push(format!("${{SLURM_ARRAY_TASK_ID}}/{}", self.shards));
        argv.push("--out".into());
        argv.push(format!(
            "{}/{}",
            self.out.display(),
            self.shard_output("${SLURM_ARRAY_TASK_ID}")
        ));
        argv
    }

    /// The job array script: array task I runs shard I/N.
    pub fn array_script(&self) -> String {
        let mut s = self.header(&format!("pdl-swe-{}", self.command.name()), "shard-%a.out");
        s.push_str(&format!("#SBATCH --array=1-{}\n", self.shards));
        s.push_str(&format!("#SBATCH --cpus-per-task={}\n", self.cpus_per_task));
        for e in &self.extra {
            s.push_str(&format!("#SBATCH {e}\n"));
        }
        s.push_str(
            "# One shard of the work per array task; `pdl-swe merge` (the dependent\n\
             # job) combines them. Exit status 1 means the shard finished and recorded\n\
             # harness errors: its records are complete, so the merge still runs.\n\
             set -uo pipefail\n",
        );
        let argv: Vec<String> = self
            .shard_command()
            .iter()
            .map(|a| {
                if a.contains("${") {
                    // The shell fills in the array task's number.
                    format!("\"{a}\"")
                } else {
                    shell_quote(a)
                }
            })
            .collect();
        s.push_str(&continued(&argv));
        s.push_str(
            "\nstatus=$?\n\
             if [ \"$status\" -eq 1 ]; then\n    \
             echo \"shard ${SLURM_ARRAY_TASK_ID}: finished with harness errors recorded\" >&2\n    \
             exit 0\n\
             fi\n\
             exit \"$status\"\n",
        );
        s
    }

    /// The merge script: `pdl-swe merge` of every shard's output.
    pub fn merge_script(&self) -> String {
        let mut s = self.header(
            &format!("pdl-swe-{}-merge", self.command.name()),
            "merge.out",
        );
        s.push_str("#SBATCH --kill-on-invalid-dep=yes\n");
        s.push_str(
            "# Runs after every array task succeeded (--dependency=afterok); it fails,\n\
             # naming the shard, when a shard's records are missing or incomplete.\n\
             set -euo pipefail\n",
        );
        let out = self.out.display().to_string();
        let merged = match self.command {
            ShardedCommand::Grade => format!("{out}/results.jsonl"),
            ShardedCommand::Run => out.clone(),
        };
        let mut argv = vec![
            shell_quote(&self.binary.display().to_string()),
            "merge".into(),
            shell_quote(&merged),
        ];
        for i in 1..=self.shards {
            argv.push(shell_quote(&format!(
                "{out}/{}",
                self.shard_output(&i.to_string())
            )));
        }
        s.push_str("exec ");
        s.push_str(&continued(&argv));
        s.push('\n');
        s
    }

    /// Writes the scripts, submits the array and then the merge job (`sbatch
    /// --parsable`, the merge with `--dependency=afterok:<array>`), and
    /// records the submission in `slurm/submitted.json`.
    pub fn submit(&self) -> Result<Submitted, SlurmError> {
        self.check()?;
        let slurm = self.out.join("slurm");
        if slurm.join("submitted.json").exists() {
            return Err(SlurmError::AlreadySubmitted {
                path: self.out.clone(),
            });
        }
        for dir in [slurm.join("logs"), self.out.join("shards")] {
            std::fs::create_dir_all(&dir).map_err(|source| SlurmError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            // Results name hidden tests and their outcomes: the user's alone.
            std::fs::set_permissions(&self.out, std::fs::Permissions::from_mode(0o700)).map_err(
                |source| SlurmError::Io {
                    path: self.out.clone(),
                    source,
                },
            )?;
        }
        let array = slurm.join("array.sbatch");
        let merge = slurm.join("merge.sbatch");
        write(&array, &self.array_script())?;
        write(&merge, &self.merge_script())?;
        let array_job = sbatch(&[array.display().to_string()])?;
        let merge_job = sbatch(&[
            format!("--dependency=afterok:{array_job}"),
            merge.display().to_string(),
        ])?;
        let submitted = Submitted {
            command: self.command,
            shards: self.shards,
            array_job,
            merge_job,
            submitted_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
            scripts: vec!["slurm/array.sbatch".into(), "slurm/merge.sbatch".into()],
            shard_outputs: (1..=self.shards)
                .map(|i| self.shard_output(&i.to_string()))
                .collect(),
            merged: self.merged_output().into(),
            shard_command: self.shard_command(),
        };
        write(
            &slurm.join("submitted.json"),
            &serde_json::to_string_pretty(&submitted).expect("JSON serializes"),
        )?;
        Ok(submitted)
    }
}

/// A command line over continued lines: the program and its subcommand,
/// then each option with its value, and each other word, on a line of its
/// own.
fn continued(argv: &[String]) -> String {
    let is_option = |w: &str| w.starts_with('-') || w.starts_with("'-");
    let mut lines: Vec<String> = Vec::new();
    for (i, word) in argv.iter().enumerate() {
        let joins = i == 1 || (i > 1 && !is_option(word) && is_option(&argv[i - 1]));
        match lines.last_mut() {
            Some(line) if joins => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.clone()),
        }
    }
    lines.join(" \\\n    ")
}

fn write(path: &Path, text: &str) -> Result<(), SlurmError> {
    std::fs::write(path, text).map_err(|source| SlurmError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs a Slurm command and returns its standard output.
fn slurm_command(program: &str, args: &[String]) -> Result<String, SlurmError> {
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| SlurmError::Command {
            command: line.clone(),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(SlurmError::Command {
            command: line,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sbatch --parsable ARGS`: the job id (`12345`, or `12345;cluster`).
fn sbatch(args: &[String]) -> Result<String, SlurmError> {
    let mut all = vec!["--parsable".to_string()];
    all.extend(args.iter().cloned());
    let out = slurm_command("sbatch", &all)?;
    let id = out.trim().split(';').next().unwrap_or_default().to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::Command {
            command: format!("sbatch {}", all.join(" ")),
            message: format!("printed no job id: `{}`", out.trim()),
        });
    }
    Ok(id)
}

/// One Slurm job (an array task or the merge) as Slurm reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobState {
    /// `12345_3` (array task 3) or `12346`.
    pub id: String,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, …
    pub state: String,
    /// `0:0` when known.
    pub exit_code: Option<String>,
}

/// One shard's progress, from its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardProgress {
    /// I.
    pub shard: usize,
    /// Its output, relative to the folder.
    pub output: String,
    /// Jobs it was assigned (once it started).
    pub assigned: Option<usize>,
    /// Records written so far.
    pub recorded: usize,
    /// Of them, harness errors.
    pub harness_errors: usize,
    /// Its array task's state, when Slurm says.
    pub slurm: Option<JobState>,
}

/// The status of a submission.
#[derive(Debug, Clone, Serialize)]
pub struct SlurmStatus {
    /// What was submitted.
    pub submitted: Submitted,
    /// Where Slurm's answer came from: `sacct`, `scontrol` or `none`.
    pub source: String,
    /// Each shard.
    pub shards: Vec<ShardProgress>,
    /// The merge job's state.
    pub merge: Option<JobState>,
    /// Records in the merged output, once written.
    pub merged_records: Option<usize>,
    /// What could not be asked.
    pub warnings: Vec<String>,
}

/// The status of the submission in `dir`: each array task's and the merge
/// job's state from `sacct` (or, without accounting, `scontrol show job`,
/// which knows jobs until `MinJobAge` after they end), and each shard's
/// progress from its output.
pub fn status(dir: &Path) -> Result<SlurmStatus, SlurmError> {
    let path = dir.join("slurm/submitted.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SlurmError::NotSubmitted {
                path: dir.to_path_buf(),
            })
        }
        Err(source) => return Err(SlurmError::Io { path, source }),
    };
    let submitted: Submitted = serde_json::from_str(&text).map_err(|e| SlurmError::Io {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let mut warnings = Vec::new();
    let ids = [submitted.array_job.clone(), submitted.merge_job.clone()];
    let (source, jobs) = match sacct(&ids) {
        Ok(jobs) => ("sacct", jobs),
        Err(sacct_error) => match scontrol(&ids) {
            Ok(jobs) => ("scontrol", jobs),
            Err(e) => {
                warnings.push(sacct_error.to_string());
                warnings.push(e.to_string());
                ("none", Vec::new())
            }
        },
    };
    let find = |id: &str| jobs.iter().find(|j| j.id == id).cloned();
    let shards = submitted
        .shard_outputs
        .iter()
        .enumerate()
        .map(|(i, output)| {
            let (assigned, recorded, harness_errors) =
                progress(&dir.join(output), submitted.command);
            ShardProgress {
                shard: i + 1,
                output: output.clone(),
                assigned,
                recorded,
                harness_errors,
                slurm: find(&format!("{}_{}", submitted.array_job, i + 1)),
            }
        })
        .collect();
    // The merged results file (a run folder's is its results.jsonl too).
    let merged_records = std::fs::read_to_string(dir.join("results.jsonl"))
        .ok()
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count());
    Ok(SlurmStatus {
        merge: find(&submitted.merge_job),
        submitted,
        source: source.into(),
        shards,
        merged_records,
        warnings,
    })
}

/// A shard output's manifest size, records and harness errors.
fn progress(output: &Path, command: ShardedCommand) -> (Option<usize>, usize, usize) {
    let (manifest, results) = match command {
        ShardedCommand::Grade => (
            ShardManifest::path_for_results(output),
            output.to_path_buf(),
        ),
        ShardedCommand::Run => (
            ShardManifest::path_for_run_dir(output),
            output.join("results.jsonl"),
        ),
    };
    let assigned = ShardManifest::read(&manifest)
        .ok()
        .flatten()
        .map(|m| m.assigned.len());
    let text = std::fs::read_to_string(results).unwrap_or_default();
    let mut recorded = 0;
    let mut harness_errors = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        recorded += 1;
        let verdict = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| serde_json::from_value::<Verdict>(v["verdict"].clone()).ok());
        if verdict == Some(Verdict::HarnessError) {
            harness_errors += 1;
        }
    }
    (assigned, recorded, harness_errors)
}

/// `sacct -X` for the jobs `ids` (array tasks listed one by one).
fn sacct(ids: &[String]) -> Result<Vec<JobState>, SlurmError> {
    let out = slurm_command(
        "sacct",
        &[
            "--noheader".into(),
            "--parsable2".into(),
            "--allocations".into(),
            "--format=JobID,State,ExitCode".into(),
            format!("--jobs={}", ids.join(",")),
        ],
    )?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut f = line.split('|');
            let id = f.next()?.trim().to_string();
            let state = f.next()?.split_whitespace().next()?.to_string();
            let exit_code = f.next().map(|s| s.trim().to_string());
            (!id.is_empty()).then_some(JobState {
                id,
                state,
                exit_code,
            })
        })
        .collect())
}

/// `scontrol -o show job` for the jobs `ids` (one line per array task).
fn scontrol(ids: &[String]) -> Result<Vec<JobState>, SlurmError> {
    let mut jobs = Vec::new();
    for id in ids {
        let out = slurm_command(
            "scontrol",
            &["--oneliner".into(), "show".into(), "job".into(), id.clone()],
        )?;
        for line in out.lines() {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_string)
            };
            let Some(state) = field("JobState") else {
                continue;
            };
            let id = match (field("ArrayJobId"), field("ArrayTaskId")) {
                (Some(array), Some(task)) => format!("{array}_{task}"),
                _ => field("JobId").unwrap_or_default(),
            };
            jobs.push(JobState {
                id,
                state,
                exit_code: field("ExitCode"),
            });
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(command: ShardedCommand) -> SlurmJob {
        SlurmJob {
            command,
            binary: "/opt/pdl/bin/pdl-swe".into(),
            args: vec![
                "--predictions".into(),
                "my preds.jsonl".into(),
                "--test-timeout".into(),
                "60".into(),
            ],
            shards: 4,
            out: "/scratch/run1".into(),
            workdir: "/home/u/work".into(),
            partition: Some("cpu".into()),
            time: Some("01:00:00".into()),
            cpus_per_task: 2,
            jobs_from_slurm: true,
            extra: vec!["--mem=8G".into()],
        }
    }

    #[test]
    fn the_array_script_runs_one_shard_per_array_task() {
        let script = job(ShardedCommand::Grade).array_script();
        assert!(script.starts_with("#!/bin/bash\n"), "{script}");
        for line in [
            "#SBATCH --array=1-4",
            "#SBATCH --partition=cpu",
            "#SBATCH --time=01:00:00",
            "#SBATCH --cpus-per-task=2",
            "#SBATCH --mem=8G",
            "#SBATCH --chdir=/home/u/work",
            "#SBATCH --output=/scratch/run1/slurm/logs/shard-%a.out",
            "/opt/pdl/bin/pdl-swe grade \\\n    --predictions 'my preds.jsonl' \\\n",
            "'my preds.jsonl'",
            "--shard \"${SLURM_ARRAY_TASK_ID}/4\"",
            "\"/scratch/run1/shards/${SLURM_ARRAY_TASK_ID}.jsonl\"",
            "\"${SLURM_CPUS_PER_TASK:-1}\"",
        ] {
            assert!(script.contains(line), "{line} in\n{script}");
        }
        let merge = job(ShardedCommand::Grade).merge_script();
        assert!(
            merge.contains("pdl-swe merge \\\n    /scratch/run1/results.jsonl \\\n"),
            "{merge}"
        );
        assert!(merge.contains("/scratch/run1/shards/4.jsonl\n"), "{merge}");
        let run = job(ShardedCommand::Run).merge_script();
        assert!(
            run.contains("pdl-swe merge \\\n    /scratch/run1 \\\n"),
            "{run}"
        );
        assert!(run.contains("/scratch/run1/shards/2 \\\n"), "{run}");
    }

    #[test]
    fn quoting_and_sbatch_lines_are_safe() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote("/x/y-1.jsonl"), "/x/y-1.jsonl");
        let mut bad = job(ShardedCommand::Grade);
        bad.partition = Some("cpu\n#SBATCH --uid=0".into());
        assert!(bad.check().is_err());
        let mut relative = job(ShardedCommand::Grade);
        relative.out = "out".into();
        assert!(relative.check().is_err());
        assert!(job(ShardedCommand::Run).check().is_ok());
    }
}
