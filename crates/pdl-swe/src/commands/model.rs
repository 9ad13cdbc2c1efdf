//! `pdl-swe model serve`: the replay model; `model console`, `model turn` and
//! `model reply`: the console model and its mailbox.

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use pdl_episode::{ConsoleMailbox, NextRequest, ReplayConfig, ReplayScript, ReplayServer};
use serde_json::json;

use crate::cli::ModelCommand;
use crate::exit::{self, ExitError};

/// Runs a `model` subcommand.
pub fn run(cmd: &ModelCommand) -> Result<i32, ExitError> {
    match cmd {
        ModelCommand::Serve {
            script,
            trajectory,
            listen,
            latency_ms,
        } => {
            let script = match (script, trajectory) {
                (Some(path), _) => ReplayScript::load(path).map_err(ExitError::usage)?,
                (None, Some(path)) => {
                    ReplayScript::from_trajectory(path).map_err(ExitError::usage)?
                }
                (None, None) => {
                    return Err(ExitError::usage(anyhow::anyhow!(
                        "pass --script FILE or --trajectory FILE"
                    )))
                }
            };
            let replies = script.reply_count();
            let mut config = ReplayConfig::new(script);
            config.listen = *listen;
            config.latency = Duration::from_millis(*latency_ms);
            let server = ReplayServer::start(config)
                .with_context(|| format!("cannot listen on {listen}"))
                .map_err(ExitError::environment)?;
            eprintln!("replay model: {} replies, serving {} (OpenAI) and {}/messages (Anthropic); Ctrl-C stops", replies, server.base_url(), server.base_url());
            server
                .wait_for_shutdown_signal()
                .map_err(anyhow::Error::from)?;
            Ok(exit::SUCCESS)
        }
        ModelCommand::Console { mailbox, listen } => {
            let mailbox = ConsoleMailbox::open(mailbox).map_err(ExitError::usage)?;
            let shown = mailbox.root().display().to_string();
            let server = ReplayServer::start_console(mailbox, *listen)
                .with_context(|| format!("cannot listen on {listen}"))
                .map_err(ExitError::environment)?;
            eprintln!(
                "console model: requests go to {shown}; serving {} (OpenAI) and {}/messages (Anthropic); Ctrl-C stops",
                server.base_url(),
                server.base_url()
            );
            server
                .wait_for_shutdown_signal()
                .map_err(anyhow::Error::from)?;
            Ok(exit::SUCCESS)
        }
        ModelCommand::Turn { mailbox, wait } => {
            let mailbox = ConsoleMailbox::open(mailbox).map_err(ExitError::usage)?;
            let next = mailbox
                .wait_for_request(0, seconds(*wait)?)
                .map_err(anyhow::Error::from)?;
            show(next, *wait)
        }
        ModelCommand::Reply {
            mailbox,
            file,
            shell,
            say,
            finish,
            request,
            wait,
        } => {
            let mailbox = ConsoleMailbox::open(mailbox).map_err(ExitError::usage)?;
            let text = if let Some(path) = file {
                if path.as_os_str() == "-" {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .context("cannot read the reply from standard input")
                        .map_err(ExitError::usage)?;
                    text
                } else {
                    std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read the reply {}", path.display()))
                        .map_err(ExitError::usage)?
                }
            } else if let Some(command) = shell {
                json!({"tool_calls": [{"name": "run_shell", "arguments": {"command": command}}]})
                    .to_string()
            } else if let Some(summary) = finish {
                json!({"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]})
                    .to_string()
            } else {
                json!({"content": say.as_deref().unwrap_or_default()}).to_string()
            };
            let wait_for = seconds(*wait)?;
            let seq = mailbox
                .submit_to(&text, *request)
                .map_err(ExitError::usage)?;
            let next = mailbox
                .wait_for_request_after_reply(seq, wait_for)
                .map_err(anyhow::Error::from)?;
            show(next, *wait)
        }
    }
}

fn seconds(value: f64) -> Result<Duration, ExitError> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| ExitError::usage(anyhow::anyhow!("--wait must be a number of seconds ≥ 0")))
}

/// Prints what a wait found; a wait that found nothing is a failure.
fn show(next: NextRequest, waited: f64) -> Result<i32, ExitError> {
    match next {
        NextRequest::Pending(request) => {
            print!("{}", request.render());
            Ok(exit::SUCCESS)
        }
        NextRequest::Closed(why) => {
            println!("=== the episode ended: {why} ===");
            Ok(exit::SUCCESS)
        }
        NextRequest::TimedOut => Err(anyhow::anyhow!(
            "no request came within {waited} s (is the episode still running?)"
        )
        .into()),
    }
}
