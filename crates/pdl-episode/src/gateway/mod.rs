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
//! Before forwarding, the request's output cap is clamped to the budget still
//! left, so a reply cannot overshoot it. Once the usage reaches the budget every
//! further call is refused at once with HTTP 401 and a body, in the provider's
//! error format, saying the token budget is exhausted: 401 stops the common SDKs
//! instead of making them retry.
//!
//! # Trajectory
//!
//! Every exchange is appended to the episode's trajectory file as one JSON line,
//! written in one piece:
//!
//! ```text
//! {"ts": "2026-01-02T03:04:05.678Z",        RFC 3339, when the request arrived
//!  "endpoint": "/v1/chat/completions",     or "/v1/messages"
//!  "request": {...},                       the JSON body as sent upstream
//!  "status": 200,                          the status the agent got
//!  "response": {...},                      the JSON body, or {"stream": [<each SSE data payload>]}
//!  "usage": {"input_tokens": 812, "output_tokens": 95, "estimated": false},
//!  "latency_ms": 1532,                     until the last byte
//!  "refused": false,                       true when the gateway answered by itself
//!  "error": "..."}                         only when something went wrong
//! ```
//!
//! The real API key and the episode token are redacted from every line.

mod episode;
mod handler;
mod meter;
mod trajectory;
mod upstream;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use episode::{EpisodeHandle, EpisodeSpec, Usage};

use crate::provider::ApiKind;
use crate::server::{HttpServer, StartError};

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
}

impl GatewayConfig {
    /// A gateway for `upstream` on a free loopback port, with no Unix socket and
    /// an empty model list.
    pub fn new(upstream: UpstreamConfig) -> GatewayConfig {
        GatewayConfig {
            upstream,
            listen_tcp: None,
            unix_socket: None,
            models: Vec::new(),
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
        let shared = Arc::new(handler::Shared::new(upstream, config.models));
        let listen = config
            .listen_tcp
            .unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let server = HttpServer::start(
            "pdl-gateway",
            handler::router(shared.clone()),
            listen,
            config.unix_socket.as_deref(),
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

    /// Opens an episode: makes its token and opens (appending, creating parent
    /// directories) its trajectory file. The token works until the handle is
    /// closed or dropped.
    pub fn open_episode(&self, spec: EpisodeSpec) -> Result<EpisodeHandle, GatewayError> {
        self.shared.open_episode(spec)
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
