//! The model gateway: [`Gateway`].
//!
//! A local HTTP server that agents talk to instead of the real model provider.
//! It forwards to one real upstream ([`UpstreamConfig`]) with the real API key,
//! which the agent never sees: each episode opened with
//! [`Gateway::open_episode`] gets its own random bearer token
//! ([`EpisodeHandle::token`]).
//!
//! # Endpoints
//!
//! `POST /v1/chat/completions` (OpenAI Chat Completions), `POST /v1/messages`
//! (Anthropic Messages), both streamed and not, and `GET /v1/models` (the
//! [`GatewayConfig::models`] list); each also without the `/v1` prefix. The agent
//! authenticates with `Authorization: Bearer <token>` or `x-api-key: <token>`. A
//! request to the endpoint of the other API than the upstream's is answered 400:
//! the gateway does not translate between the APIs.
//!
//! # What is forwarded: the request policy
//!
//! The campaign, not the agent, decides the model and the provider features
//! ([`RequestPolicy`], in [`GatewayConfig::policy`]):
//!
//! - `model` is replaced by the policy's model in every forwarded request; the
//!   name the agent asked for is recorded as `requested_model`.
//! - Only an allowlist of body fields per API is forwarded (the generation
//!   parameters, messages, tools, streaming); everything else is dropped and
//!   named in the trajectory line's `dropped.fields`. Dropped on purpose: `store`,
//!   `service_tier`, `metadata`, `user`, `prompt_cache_key`,
//!   `safety_identifier`, `prediction`, `audio`, `modalities` (they change what
//!   the account is billed for, keeps or retains, not what the model answers).
//! - Only `anthropic-version` and the `anthropic-beta` values that change no
//!   reach of the model (prompt caching, fine-grained streaming, interleaved
//!   thinking, token-efficient tools) are forwarded from the agent's headers;
//!   every other header and beta is dropped and named in `dropped.headers`.
//! - A request that switches on a provider-side tool — web search
//!   (`web_search_options`, `web_search_*` tools), web fetch, remote MCP servers
//!   (`mcp_servers`), code execution (`container`, `code_execution_*`), any tool
//!   whose `type` is not a client-side one, or an image given by URL — is
//!   refused with 400 unless the policy enables that tool by name.
//! - `max_tokens`, `max_completion_tokens` and `n` must be integers (1 to
//!   10 000 000, and 1 to 16 for `n`), `stream` a boolean; documents, files and
//!   audio input are refused (their token count cannot be bounded beforehand).
//!
//! # Metering and the budget
//!
//! An episode's usage is the sum of the input and output tokens the provider
//! reports (OpenAI `prompt_tokens` + `completion_tokens`; Anthropic
//! `input_tokens` + cache writes + cache reads + `output_tokens`), streamed
//! responses included: the gateway asks OpenAI for a final usage chunk and reads
//! Anthropic's `message_start` and `message_delta` events. When a response carries
//! no usage it is estimated at one token per four bytes and the exchange is marked
//! `estimated`.
//!
//! The budget is a hard limit. Before a call goes upstream the gateway reserves,
//! under the episode's lock:
//!
//! - an input bound: the UTF-8 bytes of the JSON body it forwards (a
//!   byte-level tokenizer never makes more tokens than bytes) plus a fixed
//!   per-API overhead (64 tokens, plus 256 for OpenAI or 1 024 for Anthropic when
//!   tools are offered), plus, for each image, the most the model the request
//!   goes to can bill for one image, whatever its bytes: 48 169 tokens on an
//!   OpenAI upstream (gpt-4o-mini's eight 512-pixel tiles; 3 779 with
//!   `detail: "low"`), 8 848 on an Anthropic one (a square of the 2 576-pixel
//!   long edge), less for the models the gateway knows exactly (see
//!   `gateway/images.rs`);
//! - an output cap per choice: the smallest of what the agent asked for, the
//!   model's own maximum where known, and what is left after the input bound,
//!   divided by `n`. The cap is always sent: `max_completion_tokens` for the
//!   OpenAI reasoning families (o1, o3, o4, gpt-5), the field the agent used or
//!   `max_tokens` for other OpenAI models, `max_tokens` for Anthropic.
//!
//! What is left is the budget minus the tokens charged and the reservations of
//! the calls in flight, so concurrent calls cannot share the same remainder. A
//! call is refused when nothing is left (HTTP 401, "token budget exhausted")
//! or when its input bound alone does not fit (HTTP 400, same message, asking
//! for a shorter request); 401 stops the common SDKs instead of making them
//! retry. A body larger than the budget left (plus 64 KiB) is refused before it
//! is parsed.
//!
//! When a call ends its reservation is settled with the usage the provider
//! reported. A call given up before its response ended — the client went away
//! (hyper then drops the handler: the settlement is done by a drop guard), the
//! upstream broke off, fell silent or timed out after the request was sent — is
//! charged its whole reservation. A call the upstream answered with an error
//! status, or that never connected, is charged nothing.
//!
//! Guarantee: the tokens charged to an episode (input + output) never exceed
//! its budget, concurrent calls included, as long as the provider honours the
//! output cap it is sent and bills no more input than the request's bytes plus
//! the overhead and image bounds above. Usage beyond a call's
//! reservation is still charged (it is what the provider bills) and counted in
//! [`Usage::overrun_tokens`], so a provider breaking that rule is visible.
//!
//! # Attempts: the ledger
//!
//! The budget belongs to an episode slot, not to one attempt at it. An episode
//! opened with [`Gateway::open_episode_with`] starts from what the slot's
//! earlier attempts spent ([`Ledger::carried`], counted as used and reported in
//! [`Usage::carried_input_tokens`] and [`Usage::carried_output_tokens`]) and
//! appends one line to the slot's ledger file each time its spend changes: on
//! each reservation, before the call goes upstream, and on each settlement; the
//! campaign closes the attempt when its outcome is recorded ([`Ledger::close`]),
//! calls still in flight charged whole. Only closed attempts are carried: an
//! attempt the harness never closed (it was killed) is reported
//! ([`Ledger::interrupted`]) but leaves the next attempt its budget. A
//! reservation that cannot be written to the ledger is not forwarded (HTTP 503).
//!
//! # Bounded resources
//!
//! Request bodies are read up to [`GatewayLimits::max_request_bytes`] (16 MiB by
//! default) within [`GatewayLimits::body_read_timeout`]; request headers must
//! arrive within [`GatewayLimits::header_read_timeout`], and each listener serves
//! at most [`GatewayLimits::max_connections`] connections at once. Refused calls
//! are recorded with only the size, SHA-256 and first 4 KiB of their body, at most
//! 20 in a burst and 5 a second per episode; beyond that they are counted
//! ([`Usage::unrecorded_refusals`]) and answered after a one-second delay. Calls
//! the provider rejected without billing share that bucket and that form. The
//! calls of one episode hold at most 64 MiB of request bodies at once (the
//! gateway runs in the harness, outside every run's memory bound). An SSE
//! event from the upstream may hold at most 8 MiB.
//!
//! # Trajectory
//!
//! Every exchange is appended to the episode's trajectory file as one JSON line,
//! written in one piece by the gateway's writer thread (never on the async
//! runtime's threads):
//!
//! ```text
//! {"ts": "2026-01-02T03:04:05.678Z",        RFC 3339, when the request arrived
//!  "endpoint": "/v1/chat/completions",     or "/v1/messages"
//!  "requested_model": "o3-pro",            only when the agent asked for another model
//!  "request": {...},                       the JSON body as sent upstream; refused:
//!                                          {"bytes", "complete", "sha256", "head"}
//!  "dropped": {"fields": [...], "headers": [...]},   only when something was dropped
//!  "status": 200,                          the status the agent got
//!  "response": {...},                      the JSON body, or {"stream": [<each SSE data payload>]}
//!  "usage": {"input_tokens": 812, "output_tokens": 95, "estimated": false,
//!            "reserved": 20480},           reserved: forwarded calls only
//!  "latency_ms": 1532,                     until the last byte
//!  "refused": false,                       true when the gateway answered by itself
//!  "abandoned": true,                      only when charged the whole reservation
//!  "error": "..."}                         only when something went wrong
//! ```
//!
//! The real API key and the episode token are redacted from every line.

mod episode;
mod handler;
mod images;
mod ledger;
mod meter;
mod policy;
mod trajectory;
mod upstream;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use episode::{EpisodeHandle, EpisodeSpec, Usage};
pub use ledger::{Ledger, LedgerError, Spent};
pub use policy::RequestPolicy;

use crate::provider::ApiKind;
use crate::server::{HttpServer, ServerLimits, StartError};

/// The real model provider the gateway forwards to.
#[derive(Clone)]
pub struct UpstreamConfig {
    /// Which API the upstream speaks.
    pub api: ApiKind,
    /// The API's base URL, `/v1` included: requests go to
    /// `{base_url}/chat/completions` or `{base_url}/messages`. For example
    /// `https://api.openai.com/v1` or `http://127.0.0.1:9999/v1`.
    pub base_url: String,
    /// The real API key, sent as `Authorization: Bearer` (OpenAI) or `x-api-key`
    /// (Anthropic). `None` sends no key (a local server that needs none).
    pub api_key: Option<String>,
    /// How long one attempt may take until the whole response has arrived; for a
    /// streamed response, until its headers, and then the longest silence between
    /// two pieces of the stream.
    pub request_timeout: Duration,
    /// How many times a call answered 429 or 5xx, or that could not connect, is
    /// tried again.
    pub max_retries: u32,
    /// The wait before the first retry; it doubles with each further one. A
    /// `retry-after-ms` or `retry-after` header from the upstream takes precedence.
    pub retry_base_delay: Duration,
    /// The longest wait before a retry, whatever the upstream asks for.
    pub retry_max_delay: Duration,
    /// DER-encoded CA certificates trusted for an `https` upstream besides the
    /// platform's roots: for a self-hosted model server behind a private CA.
    pub extra_root_certificates: Vec<Vec<u8>>,
}

impl UpstreamConfig {
    /// An upstream with no key, a 10 minute timeout and 3 retries (0.5 s, 1 s, 2 s,
    /// at most 30 s).
    pub fn new(api: ApiKind, base_url: impl Into<String>) -> UpstreamConfig {
        UpstreamConfig {
            api,
            base_url: base_url.into(),
            api_key: None,
            request_timeout: Duration::from_secs(600),
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
            retry_max_delay: Duration::from_secs(30),
            extra_root_certificates: Vec::new(),
        }
    }

    /// The same upstream with this API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> UpstreamConfig {
        self.api_key = Some(key.into());
        self
    }
}

impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field(
                "extra_root_certificates",
                &self.extra_root_certificates.len(),
            )
            .finish()
    }
}

/// How to run a [`Gateway`].
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The real model provider.
    pub upstream: UpstreamConfig,
    /// The TCP address to listen on; `None` means `127.0.0.1:0` (a free port).
    pub listen_tcp: Option<SocketAddr>,
    /// Also listen on this Unix socket (the sandbox reaches the gateway through
    /// it). A stale socket file at the path is replaced; the file is removed on
    /// shutdown.
    pub unix_socket: Option<PathBuf>,
    /// The model ids `GET /v1/models` lists.
    pub models: Vec<String>,
    /// What is forwarded: the model, the provider-side tools enabled.
    pub policy: RequestPolicy,
    /// Bounds on requests and connections.
    pub limits: GatewayLimits,
}

impl GatewayConfig {
    /// A gateway for `upstream` on a free loopback port, with no Unix socket, an
    /// empty model list, a policy that keeps the agent's model and enables no
    /// provider-side tool, and the default limits.
    pub fn new(upstream: UpstreamConfig) -> GatewayConfig {
        GatewayConfig {
            upstream,
            listen_tcp: None,
            unix_socket: None,
            models: Vec::new(),
            policy: RequestPolicy::default(),
            limits: GatewayLimits::default(),
        }
    }
}

/// Bounds on what one request and one listener may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayLimits {
    /// The largest request body read (long agent contexts are large); a larger
    /// one is refused with 413 before it is parsed.
    pub max_request_bytes: usize,
    /// How long a request body may take to arrive.
    pub body_read_timeout: Duration,
    /// How long a client may take to send a request's headers (an idle
    /// keep-alive connection is closed after this long).
    pub header_read_timeout: Duration,
    /// Connections served at once per listener.
    pub max_connections: usize,
}

impl Default for GatewayLimits {
    /// 16 MiB bodies read within 60 s, headers within 30 s, 512 connections.
    fn default() -> Self {
        let server = ServerLimits::default();
        GatewayLimits {
            max_request_bytes: 16 << 20,
            body_read_timeout: Duration::from_secs(60),
            header_read_timeout: server.header_read_timeout,
            max_connections: server.max_connections,
        }
    }
}

/// The gateway could not start or open an episode.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The upstream base URL is not an `http` or `https` URL.
    #[error("invalid upstream base URL {url:?}: {reason}")]
    InvalidUpstream {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key cannot be sent in an HTTP header.
    #[error("the upstream API key contains characters that cannot be sent in an HTTP header")]
    InvalidApiKey,
    /// TLS for the upstream could not be set up.
    #[error("cannot set up TLS for the upstream: {0}")]
    Tls(String),
    /// The server could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// An episode's trajectory file could not be opened.
    #[error("cannot open the trajectory file {} of episode {id:?}: {source}", path.display())]
    Trajectory {
        /// The episode.
        id: String,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// No random episode token could be made.
    #[error("cannot generate an episode token: {0}")]
    Token(#[source] io::Error),
    /// The trajectory writer thread could not start.
    #[error("cannot start the trajectory writer: {0}")]
    Writer(#[source] io::Error),
}

/// The running model gateway. See the [module docs](self).
///
/// Dropping it shuts it down like [`Gateway::shutdown`].
pub struct Gateway {
    server: HttpServer,
    shared: Arc<handler::Shared>,
}

impl Gateway {
    /// Binds the listeners and starts serving.
    pub fn start(config: GatewayConfig) -> Result<Gateway, GatewayError> {
        let upstream = upstream::Upstream::new(&config.upstream)?;
        let shared = Arc::new(handler::Shared::new(
            upstream,
            config.models,
            config.policy,
            config.limits,
        )?);
        let listen = config
            .listen_tcp
            .unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let server = HttpServer::start(
            "pdl-gateway",
            handler::router(shared.clone()),
            listen,
            config.unix_socket.as_deref(),
            ServerLimits {
                header_read_timeout: config.limits.header_read_timeout,
                max_connections: config.limits.max_connections,
            },
        )?;
        Ok(Gateway { server, shared })
    }

    /// The TCP base URL without a path, e.g. `http://127.0.0.1:41234`: what the
    /// Anthropic SDKs expect in `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.tcp_addr())
    }

    /// The TCP base URL with `/v1`: what the OpenAI SDKs expect in `OPENAI_BASE_URL`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// The bound TCP address.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.server.tcp_addr()
    }

    /// The Unix socket the gateway also listens on, if any.
    pub fn unix_socket(&self) -> Option<&Path> {
        self.server.unix_path()
    }

    /// The API the upstream speaks.
    pub fn api(&self) -> ApiKind {
        self.shared.api()
    }

    /// The request policy.
    pub fn policy(&self) -> &RequestPolicy {
        self.shared.policy()
    }

    /// Opens an episode: makes its token and opens (appending, creating parent
    /// directories) its trajectory file, whose last component must be a regular
    /// file or nothing (a symbolic link is refused). The token works until the
    /// handle is closed or dropped.
    pub fn open_episode(&self, spec: EpisodeSpec) -> Result<EpisodeHandle, GatewayError> {
        self.shared.open_episode(spec, None, None)
    }

    /// Opens an episode whose trajectory is `file`, already open for appending
    /// (`spec.trajectory_path` only names it in messages).
    pub fn open_episode_in(
        &self,
        spec: EpisodeSpec,
        file: std::fs::File,
    ) -> Result<EpisodeHandle, GatewayError> {
        self.shared.open_episode(spec, Some(file), None)
    }

    /// Opens one attempt at an episode slot: its trajectory is `file`, already
    /// open for appending, and its budget is what the slot's earlier attempts
    /// left ([`Ledger::carried`] counts as used from the start). Its spend is
    /// appended to the ledger as the calls are reserved and settled.
    pub fn open_episode_with(
        &self,
        spec: EpisodeSpec,
        file: std::fs::File,
        ledger: Ledger,
    ) -> Result<EpisodeHandle, GatewayError> {
        self.shared.open_episode(spec, Some(file), Some(ledger))
    }

    /// Stops accepting connections, lets responses in flight finish for a few
    /// seconds, then stops. Called on drop too.
    pub fn shutdown(mut self) {
        self.server.stop();
    }
}

impl fmt::Debug for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gateway")
            .field("tcp_addr", &self.server.tcp_addr())
            .field("unix_socket", &self.server.unix_path())
            .field("api", &self.shared.api())
            .finish_non_exhaustive()
    }
}
