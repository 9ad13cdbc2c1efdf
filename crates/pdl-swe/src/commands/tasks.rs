//! `pdl-swe tasks list` and `pdl-swe tasks export`.

use std::collections::HashMap;

use pdl_report::certify::Gates;
use serde::Serialize;

use pdl_report::terminal_safe;

use crate::cli::{Format, TasksCommand};
use crate::commands::certify::{certificate_source, certify_all};
use crate::commands::report_load_errors;
use crate::exit::{self, ExitError};
use crate::render::{print_json, table};
use crate::settings::load_dataset;

#[derive(Serialize)]
struct TaskLine<'a> {
    instance_id: &'a str,
    tier: &'a str,
    domain: &'a str,
    hidden_tests: usize,
    public_tests: usize,
    token_budget: i64,
    rungs: &'a [String],
    /// The certification status (`T5 holds (3)`, `stale`, `-`).
    certified: String,
}

/// Runs a `tasks` subcommand.
pub fn run(cmd: &TasksCommand) -> Result<i32, ExitError> {
    match cmd {
        TasksCommand::List { dataset, format } => {
            let ds = load_dataset(dataset)?;
            let mut status: HashMap<String, String> = HashMap::new();
            if let Some(source) = certificate_source(dataset, None) {
                match certify_all(&ds, &source, &Gates::default()) {
                    Ok((certified, warnings)) => {
                        for w in &warnings {
                            eprintln!("warning: {}", terminal_safe(&w.to_string()));
                        }
                        for c in certified {
                            status.insert(c.task_id.clone(), c.short_status());
                        }
                    }
                    Err(e) => eprintln!(
                        "warning: certificates not read: {}",
                        terminal_safe(&format!("{:#}", e.error))
                    ),
                }
            }
            let lines: Vec<TaskLine> = ds
                .tasks
                .iter()
                .map(|t| TaskLine {
                    certified: status
                        .get(&t.row.task_id)
                        .cloned()
                        .unwrap_or_else(|| "-".into()),
                    instance_id: &t.row.instance_id,
                    tier: &t.row.tier,
                    domain: &t.row.domain,
                    hidden_tests: t.row.fail_to_pass.len(),
                    public_tests: t.row.pass_to_pass.len(),
                    token_budget: t.row.token_budget,
                    rungs: &t.row.graded_ladder_rungs,
                })
                .collect();
            match format {
                Format::Json => print_json(&lines)?,
                Format::Table => {
                    let mut t = table(&[
                        "task",
                        "tier",
                        "domain",
                        "hidden",
                        "public",
                        "budget",
                        "rungs",
                        "certified",
                    ]);
                    for l in &lines {
                        t.add_row(vec![
                            l.instance_id.to_string(),
                            l.tier.to_string(),
                            l.domain.to_string(),
                            l.hidden_tests.to_string(),
                            l.public_tests.to_string(),
                            l.token_budget.to_string(),
                            if l.rungs.is_empty() {
                                "-".into()
                            } else {
                                l.rungs.join(", ")
                            },
                            l.certified.clone(),
                        ]);
                    }
                    println!("{}", terminal_safe(&t.to_string()));
                    println!("{} tasks from {}", lines.len(), terminal_safe(&ds.source));
                }
            }
            report_load_errors(&ds.errors);
            Ok(if ds.errors.is_empty() {
                exit::SUCCESS
            } else {
                exit::FAILURES
            })
        }
        TasksCommand::Export {
            dataset,
            agent_view: Some(dir),
            ..
        } => {
            let ds = load_dataset(dataset)?;
            // git runs inside each repository: the folder is named absolutely.
            let dir = std::path::absolute(dir).map_err(|e| {
                ExitError::usage(anyhow::anyhow!("--agent-view {}: {e}", dir.display()))
            })?;
            let mut failed = 0usize;
            for task in &ds.tasks {
                let at = dir.join(&task.row.task_id);
                if let Err(e) = pdl_episode::agent::view::write_agent_view(task, &at) {
                    failed += 1;
                    eprintln!(
                        "error: {}: {}",
                        terminal_safe(&task.row.task_id),
                        terminal_safe(&e.to_string())
                    );
                }
            }
            eprintln!(
                "wrote the agent's view of {} tasks from {} to {}",
                ds.tasks.len() - failed,
                terminal_safe(&ds.source),
                dir.display()
            );
            Ok(export_exit(failed > 0, &ds.errors))
        }
        TasksCommand::Export {
            dataset,
            to: Some(to),
            ..
        } => {
            let ds = load_dataset(dataset)?;
            let write_errors = match pdl_task::write_dataset(&ds.tasks, to) {
                Ok(()) => Vec::new(),
                Err(errors) => errors,
            };
            for e in &write_errors {
                eprintln!("error: {}", terminal_safe(&e.to_string()));
            }
            eprintln!(
                "wrote {} tasks from {} to {}",
                ds.tasks.len() - write_errors.len().min(ds.tasks.len()),
                terminal_safe(&ds.source),
                to.display()
            );
            Ok(export_exit(!write_errors.is_empty(), &ds.errors))
        }
        TasksCommand::Export { .. } => {
            eprintln!("error: tasks export needs --to PATH or --agent-view DIR");
            Ok(exit::USAGE)
        }
    }
}

/// Reports the tasks that did not load, and the exit code of an export: a
/// task that could not be written first, then one that did not load.
fn export_exit(unwritten: bool, load_errors: &[pdl_task::LoadError]) -> i32 {
    report_load_errors(load_errors);
    if unwritten {
        exit::USAGE
    } else if load_errors.is_empty() {
        exit::SUCCESS
    } else {
        exit::FAILURES
    }
}
