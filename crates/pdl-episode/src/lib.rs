//! Agent episodes: the model gateway, the replay model, the agents and campaigns.
//!
//! - [`campaign::run_campaign`] runs tasks × agents × samples: each episode gets a
//!   fresh git workspace, an agent ([`agent::builtin`] or an external command)
//!   working under the token budget through the gateway, and the final workspace
//!   graded by `pdl-grader`; calibration runs in the campaign too.
//!
//! - [`Gateway`] is the local HTTP server an agent talks to instead of the real
//!   model provider. It speaks the OpenAI Chat Completions API and the Anthropic
//!   Messages API, forwards to one real upstream with the real API key, gives each
//!   episode its own bearer token, meters the tokens the provider reports, enforces
//!   each episode's token budget and appends every exchange to the episode's
//!   trajectory file (JSON Lines).
//! - [`ReplayServer`] speaks the same two APIs but answers from a [`ReplayScript`]
//!   of canned replies: for tests, demos and re-running a recorded trajectory
//!   exactly ([`ReplayScript::from_trajectory`]).
//!
//! Both servers run on a tokio runtime of their own behind a blocking facade, so
//! plain threads can start, use and stop them.
//!
//! ```no_run
//! use pdl_episode::{ApiKind, Gateway, GatewayConfig, ReplayConfig, ReplayScript, ReplayServer};
//! use pdl_episode::{EpisodeSpec, UpstreamConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let script = ReplayScript::load("script.json".as_ref())?;
//! let model = ReplayServer::start(ReplayConfig::new(script))?;
//! let gateway = Gateway::start(GatewayConfig::new(UpstreamConfig::new(
//!     ApiKind::OpenAi,
//!     model.base_url(),
//! )))?;
//! let episode = gateway.open_episode(EpisodeSpec {
//!     id: "task-1".into(),
//!     token_budget: 250_000,
//!     trajectory_path: "trajectory.jsonl".into(),
//! })?;
//! // Hand `gateway.openai_base_url()` and `episode.token()` to the agent, run it, then:
//! let usage = episode.close();
//! let spent = usage.total_tokens();
//! # Ok(())
//! # }
//! ```

pub mod agent;
pub mod campaign;
pub mod gateway;
pub mod provider;
pub mod replay;
pub mod server;
pub mod sse;

pub use gateway::{
    EpisodeHandle, EpisodeSpec, Gateway, GatewayConfig, GatewayError, GatewayLimits, Ledger,
    LedgerError, RequestPolicy, Spent, UpstreamConfig, Usage,
};
pub use provider::ApiKind;
pub use replay::{
    ConsoleError, ConsoleMailbox, Conversation, NextRequest, PendingRequest, ReplayConfig,
    ReplayError, ReplayScript, ReplayServer, Reply, ReplyUsage, ToolCall,
};
pub use server::{ServerLimits, StartError};
