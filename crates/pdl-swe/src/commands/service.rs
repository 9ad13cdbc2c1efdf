//! `pdl-swe serve` (and `serve keys create`), and the client commands
//! `datasets`, `submit` and `runs`.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pdl_report::terminal_safe;
use pdl_service::api::RunInfo;
use pdl_service::client::{Client, ClientError};
use pdl_service::server::{self, Limits, LogEvent, ServeConfig};
use pdl_service::{Quotas, Role};

use crate::cli::{
    DatasetsCommand, Format, KeysCommand, RoleChoice, RunsCommand, ServeArgs, ServeCommand,
    StoreArgs, SubmitArgs,
};
use crate::exit::{self, ExitError};
use crate::render::{print_json, progress_bar, reward, table};
use crate::settings::resolve;

fn data_dir(store: &StoreArgs) -> Result<&std::path::Path, ExitError> {
    store
        .data_dir
        .as_deref()
        .ok_or_else(|| ExitError::usage(anyhow::anyhow!("--data-dir DIR is needed")))
}

/// Runs `serve`, or `serve keys create`.
pub fn serve(args: &ServeArgs) -> Result<i32, ExitError> {
    if let Some(ServeCommand::Keys(KeysCommand::Create(k))) = &args.command {
        let role = match k.role {
            RoleChoice::Admin => Role::Admin,
            RoleChoice::Submitter => Role::Submitter,
        };
        let quotas = Quotas {
            runs_per_day: k.runs_per_day,
            predictions_per_run: k.predictions_per_run,
            upload_bytes_per_day: k.upload_bytes_per_day,
            requests_per_minute: k.requests_per_minute,
        };
        // Key names are shown to others (the leaderboard's `submitter`).
        if pdl_service::keys::may_hold_a_key(&k.name) {
            return Err(ExitError::usage(anyhow::anyhow!(
                "--name: looks like an API key; key names are shown to other submitters"
            )));
        }
        let key = server::create_key(
            data_dir(&k.store)?,
            k.store.database.as_deref(),
            &k.name,
            role,
            quotas,
        )
        .map_err(|e| ExitError::usage(anyhow::Error::from(e)))?;
        println!("{key}");
        eprintln!(
            "created {} key `{}`: it is shown only now; set PDL_SWE_API_KEY to it",
            role.name(),
            terminal_safe(&k.name)
        );
        return Ok(exit::SUCCESS);
    }
    let settings = resolve(&args.run)?;
    let config = ServeConfig {
        listen: args.listen,
        data_dir: data_dir(&args.store)?.to_path_buf(),
        database: args.store.database.clone(),
        workers: settings.parallelism,
        cache_dir: settings.cache_dir.clone(),
        limits: Limits {
            max_dataset_bytes: args.max_dataset_bytes,
            max_predictions_bytes: args.max_predictions_bytes,
            request_timeout: Duration::from_secs(args.request_timeout.max(1)),
            ..Limits::default()
        },
        lease: Duration::from_secs(args.lease_seconds.max(1)),
        poll: Duration::from_millis(250),
        publish_every: Duration::try_from_secs_f64(args.publish_every.max(0.001))
            .map_err(|e| ExitError::usage(anyhow::anyhow!("--publish-every: {e}")))?,
    };
    let log: Arc<server::Log> = Arc::new(|event: LogEvent| match event {
        LogEvent::Listening(addr) => {
            println!("listening on http://{addr}");
            let _ = std::io::stdout().flush();
        }
        LogEvent::Request {
            method,
            path,
            status,
            millis,
            key,
        } => eprintln!(
            "{method} {} {status} {millis}ms{}",
            terminal_safe(&path),
            key.map(|k| format!(" key={}", terminal_safe(&k)))
                .unwrap_or_default()
        ),
        LogEvent::Worker(message) => eprintln!("worker: {}", terminal_safe(&message)),
        LogEvent::Stopping => eprintln!("stopping: jobs in progress go back to the queue"),
    });
    server::serve(&config, &settings.grader, &crate::interrupt::requested, log)
        .map_err(|e| ExitError::environment(anyhow::Error::from(e)))?;
    Ok(if crate::interrupt::requested() {
        exit::INTERRUPTED
    } else {
        exit::SUCCESS
    })
}

/// A client error as an exit error: the server refusing the input is a usage
/// error, anything else a failure.
fn client_error(e: ClientError) -> ExitError {
    if e.is_client_fault() || matches!(e, ClientError::NoKey | ClientError::Read { .. }) {
        ExitError::usage(anyhow::Error::from(e))
    } else {
        ExitError::from(anyhow::Error::from(e))
    }
}

/// Runs `datasets upload|list`.
pub fn datasets(cmd: &DatasetsCommand) -> Result<i32, ExitError> {
    match cmd {
        DatasetsCommand::Upload {
            server,
            name,
            path,
            grants,
            public_ladders,
        } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            let info = client
                .upload_dataset(name, path, grants, *public_ladders)
                .map_err(client_error)?;
            println!(
                "uploaded {} ({} tasks){}",
                terminal_safe(&info.name),
                info.tasks,
                match info.grants.as_deref() {
                    Some(g) if !g.is_empty() => format!(" for {}", terminal_safe(&g.join(", "))),
                    _ => " for every submitter".into(),
                }
            );
        }
        DatasetsCommand::List { server, format } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            let sets = client.datasets().map_err(client_error)?;
            match format {
                Format::Json => print_json(&sets)?,
                Format::Table => {
                    let mut t = table(&["dataset", "tasks", "ladders", "uploaded"]);
                    for d in &sets {
                        t.add_row(vec![
                            d.name.clone(),
                            d.tasks.to_string(),
                            if d.public_ladders {
                                "public"
                            } else {
                                "private"
                            }
                            .into(),
                            d.created_at.clone(),
                        ]);
                    }
                    println!("{}", terminal_safe(&t.to_string()));
                }
            }
        }
    }
    Ok(exit::SUCCESS)
}

fn runs_table(runs: &[RunInfo]) -> String {
    let mut t = table(&[
        "run",
        "dataset",
        "by",
        "submitted",
        "state",
        "done",
        "mean reward",
    ]);
    for r in runs {
        t.add_row(vec![
            r.id.clone(),
            r.dataset.clone(),
            r.submitted_by.clone(),
            r.created_at.clone(),
            r.state.clone(),
            format!("{}/{}", r.done, r.total),
            reward(r.mean_reward),
        ]);
    }
    terminal_safe(&t.to_string()).into_owned()
}

/// Writes records as JSON lines to `path`.
fn write_records(path: &std::path::Path, records: &[serde_json::Value]) -> Result<(), ExitError> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(anyhow::Error::from)?);
        text.push('\n');
    }
    std::fs::write(path, text)
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(ExitError::from)
}

fn records_table(records: &[serde_json::Value]) -> String {
    let mut t = table(&["instance", "model", "reward", "verdict", "hidden pass"]);
    for r in records {
        t.add_row(vec![
            r["instance_id"].as_str().unwrap_or_default().to_string(),
            r["model_name_or_path"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            reward(r["reward"].as_f64()),
            r["verdict"].as_str().unwrap_or_default().to_string(),
            reward(r["components"]["hidden_pass_fraction"].as_f64()),
        ]);
    }
    terminal_safe(&t.to_string()).into_owned()
}

/// Runs `submit`.
pub fn submit(args: &SubmitArgs) -> Result<i32, ExitError> {
    let client = Client::from_env(&args.server.server).map_err(client_error)?;
    let run = client
        .submit(&args.dataset, &args.file)
        .map_err(client_error)?;
    println!("run {} queued: {} predictions", run.id, run.total);
    if !args.wait {
        return Ok(exit::SUCCESS);
    }
    let bar = progress_bar(run.total.max(0) as usize, "graded");
    let done = client
        .wait(
            &run.id,
            Duration::from_millis(500),
            &mut |r| bar.set_position(r.done.max(0) as u64),
            &crate::interrupt::requested,
        )
        .map_err(client_error)?;
    bar.finish_and_clear();
    if !done.finished() {
        return Err(crate::interrupt::stopped(&format!(
            "run {} goes on on the server; fetch it with `pdl-swe runs report`",
            run.id
        )));
    }
    let report = client.report(&run.id).map_err(client_error)?;
    match &args.out {
        Some(path) => write_records(path, &report.records)?,
        None => println!("{}", records_table(&report.records)),
    }
    println!(
        "run {}: {} records, mean reward {}",
        run.id,
        report.records.len(),
        reward(report.run.mean_reward)
    );
    let harness_errors = report
        .run
        .verdicts
        .get("harness_error")
        .copied()
        .unwrap_or(0);
    Ok(if harness_errors > 0 {
        exit::FAILURES
    } else {
        exit::SUCCESS
    })
}

/// Runs `runs list|show|report|delete`.
pub fn runs(cmd: &RunsCommand) -> Result<i32, ExitError> {
    match cmd {
        RunsCommand::List { server, format } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            let runs = client.runs().map_err(client_error)?;
            match format {
                Format::Json => print_json(&runs)?,
                Format::Table => println!("{}", runs_table(&runs)),
            }
        }
        RunsCommand::Show { server, id, format } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            let run = client.run(id).map_err(client_error)?;
            match format {
                Format::Json => print_json(&run)?,
                Format::Table => println!("{}", runs_table(std::slice::from_ref(&run))),
            }
        }
        RunsCommand::Report {
            server,
            id,
            out,
            format,
        } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            let report = client.report(id).map_err(client_error)?;
            match (out, format) {
                (Some(path), _) => write_records(path, &report.records)?,
                (None, Format::Json) => print_json(&report)?,
                (None, Format::Table) => println!("{}", records_table(&report.records)),
            }
        }
        RunsCommand::Delete { server, id } => {
            let client = Client::from_env(&server.server).map_err(client_error)?;
            client.delete(id).map_err(client_error)?;
            println!("deleted run {}", terminal_safe(id));
        }
    }
    Ok(exit::SUCCESS)
}
