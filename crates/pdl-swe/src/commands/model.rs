//! `pdl-swe model serve`: the replay model.

use std::time::Duration;

use anyhow::Context;
use pdl_episode::{ReplayConfig, ReplayScript, ReplayServer};

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
    }
}
