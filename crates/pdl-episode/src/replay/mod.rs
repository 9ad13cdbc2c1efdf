//! The replay model: [`ReplayServer`] answers OpenAI Chat Completions and
//! Anthropic Messages requests (streamed and not) from a [`ReplayScript`].
//!
//! Turn selection is stateless: the reply for a request is the one whose index is
//! the number of assistant messages already in the request's `messages`, taken
//! from the first conversation whose `match` text occurs in the request's system
//! prompt or messages. So any number of conversations can run at once, and a
//! conversation replays the same way every time. A conversation whose replies
//! are used up is answered 400 ("replay script exhausted after N replies").
//!
//! Usage is reported as scripted, or else estimated at one token per four bytes
//! (input: the JSON of the request's messages, system prompt and tools; output:
//! the reply's text and tool-call arguments; at least 1 each). A request whose
//! output cap is below the reply's output tokens gets the reply cut to the cap
//! (`finish_reason: "length"`, `stop_reason: "max_tokens"`), like a real model.
//!
//! [`ReplayServer::start_console`] serves the console model instead: the same
//! API, with every reply written by hand through a [`ConsoleMailbox`].
//!
//! [`ReplayScript::from_trajectory`] turns a gateway trajectory back into a script
//! so that a recorded episode can be re-run exactly.

mod console;
mod import;
mod render;
mod script;

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{self, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde_json::Value;

pub use console::{ConsoleError, ConsoleMailbox, NextRequest, PendingRequest};
pub use script::{Conversation, ReplayScript, Reply, ReplyUsage, ToolCall};

use crate::provider::{error_response, json_response, models_body, not_found, ApiKind, ErrorKind};
use crate::server::{HttpServer, ServerLimits, StartError};
use render::Rendered;

/// The largest request body accepted.
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The model id `GET /v1/models` lists.
const MODEL_ID: &str = "replay";

/// A replay script could not be read, or the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file could not be read.
    #[error("cannot read the {what} {}: {source}", path.display())]
    Read {
        /// What the file is.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A script is not JSON.
    #[error("replay script {} is not valid JSON: {source}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A script field is missing or wrong.
    #[error("replay script {}: `{field}` {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field's path in the document, like `conversations[0].replies[2].usage`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A trajectory cannot be turned into a script.
    #[error("trajectory {}, line {line}: {message}", path.display())]
    Trajectory {
        /// The file.
        path: PathBuf,
        /// The 1-based line (0 for the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A script could not be written.
    #[error("cannot write the replay script {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The server could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The console model's mailbox could not be opened.
    #[error(transparent)]
    Mailbox(Box<ConsoleError>),
    /// Waiting for Ctrl-C or SIGTERM failed.
    #[error("cannot wait for a shutdown signal: {0}")]
    Signal(#[source] io::Error),
}

/// How to run a [`ReplayServer`].
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The canned replies.
    pub script: ReplayScript,
    /// The TCP address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// A wait before each reply, to imitate a model's latency.
    pub latency: Duration,
    /// A wait between the events of a streamed reply.
    pub stream_chunk_delay: Duration,
}

impl ReplayConfig {
    /// Serves `script` on a free loopback port with no added latency.
    pub fn new(script: ReplayScript) -> ReplayConfig {
        ReplayConfig {
            script,
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            latency: Duration::ZERO,
            stream_chunk_delay: Duration::ZERO,
        }
    }
}

/// The running replay model. See the [module docs](self).
///
/// Dropping it shuts it down like [`ReplayServer::shutdown`].
pub struct ReplayServer {
    server: HttpServer,
}

impl ReplayServer {
    /// Binds the address and starts serving.
    pub fn start(config: ReplayConfig) -> Result<ReplayServer, ReplayError> {
        let state = ReplayState {
            source: ReplySource::Script(config.script),
            latency: config.latency,
            chunk_delay: config.stream_chunk_delay,
        };
        ReplayServer::serve(state, config.listen, "pdl-replay")
    }

    /// Binds `listen` and serves the console model: each request is written to
    /// `mailbox` and answered with the reply written there (see
    /// [`ConsoleMailbox`]). Usage is always estimated, never taken from a reply.
    pub fn start_console(
        mailbox: ConsoleMailbox,
        listen: SocketAddr,
    ) -> Result<ReplayServer, ReplayError> {
        let console = console::ConsoleServerState::new(mailbox)
            .map_err(|e| ReplayError::Mailbox(Box::new(e)))?;
        let state = ReplayState {
            source: ReplySource::Console(console),
            latency: Duration::ZERO,
            chunk_delay: Duration::ZERO,
        };
        ReplayServer::serve(state, listen, "pdl-console")
    }

    fn serve(
        state: ReplayState,
        listen: SocketAddr,
        name: &'static str,
    ) -> Result<ReplayServer, ReplayError> {
        let state = Arc::new(state);
        let router = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .route("/v1/messages", post(messages))
            .route("/messages", post(messages))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .fallback(fallback)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(state);
        let server = HttpServer::start(name, router, listen, None, ServerLimits::default())?;
        Ok(ReplayServer { server })
    }

    /// The base URL with `/v1`, e.g. `http://127.0.0.1:41234/v1`: an OpenAI
    /// `base_url`, or a gateway [`UpstreamConfig::base_url`](crate::UpstreamConfig::base_url)
    /// for either API.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.tcp_addr())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.tcp_addr()
    }

    /// Blocks until the process gets Ctrl-C (SIGINT) or SIGTERM, then shuts down.
    /// For a command that serves until it is stopped.
    pub fn wait_for_shutdown_signal(mut self) -> Result<(), ReplayError> {
        let waited = self.server.wait_for_signal().map_err(ReplayError::Signal);
        self.server.stop();
        waited
    }

    /// Stops accepting connections, lets responses in flight finish for a few
    /// seconds, then stops. Called on drop too.
    pub fn shutdown(mut self) {
        self.server.stop();
    }
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("addr", &self.server.tcp_addr())
            .finish_non_exhaustive()
    }
}

struct ReplayState {
    source: ReplySource,
    latency: Duration,
    chunk_delay: Duration,
}

/// Where replies come from.
enum ReplySource {
    /// Canned, from a script.
    Script(ReplayScript),
    /// Written by hand, one at a time.
    Console(console::ConsoleServerState),
}

async fn chat_completions(State(state): State<Arc<ReplayState>>, body: Bytes) -> Response {
    answer(&state, ApiKind::OpenAi, &body).await
}

async fn messages(State(state): State<Arc<ReplayState>>, body: Bytes) -> Response {
    answer(&state, ApiKind::Anthropic, &body).await
}

async fn models() -> Response {
    json_response(StatusCode::OK, &models_body(&[MODEL_ID.to_string()]))
}

async fn fallback(method: Method, uri: Uri) -> Response {
    not_found(method.as_str(), uri.path())
}

fn bad_request(api: ApiKind, message: &str) -> Response {
    error_response(
        api,
        StatusCode::BAD_REQUEST,
        ErrorKind::InvalidRequest,
        message,
    )
}

async fn answer(state: &ReplayState, api: ApiKind, body: &[u8]) -> Response {
    let request = match serde_json::from_slice::<Value>(body) {
        Ok(request @ Value::Object(_)) => request,
        Ok(_) => return bad_request(api, "the request body must be a JSON object"),
        Err(e) => return bad_request(api, &format!("the request body is not valid JSON: {e}")),
    };
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return bad_request(api, "the request has no `messages` array");
    };
    let turn = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .count();
    let script = match &state.source {
        ReplySource::Script(script) => script,
        ReplySource::Console(console) => {
            let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
            let include_usage = request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true);
            let exchanged = console
                .exchange(api, &request, turn, |reply| {
                    let rendered = Rendered::new(api, 0, turn, reply, &request);
                    let tokens = rendered.total_tokens();
                    let body = if stream {
                        Err(rendered.events(include_usage))
                    } else {
                        Ok(rendered.json())
                    };
                    (body, tokens)
                })
                .await;
            return match exchanged {
                Ok(Ok(json)) => json_response(StatusCode::OK, &json),
                Ok(Err(events)) => event_stream(events, Duration::ZERO),
                Err(e) => error_response(
                    api,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorKind::Upstream,
                    &e.to_string(),
                ),
            };
        }
    };
    let text = searchable_text(&request);
    let Some((index, conversation)) = script.conversations.iter().enumerate().find(|(_, c)| {
        c.match_text
            .as_deref()
            .is_none_or(|needle| text.contains(needle))
    }) else {
        return bad_request(
            api,
            "no conversation of the replay script matches the request",
        );
    };
    let Some(reply) = conversation.replies.get(turn) else {
        return bad_request(
            api,
            &format!(
                "replay script exhausted after {} replies (conversation {index}; the request \
                 already has {turn} assistant messages)",
                conversation.replies.len()
            ),
        );
    };
    let rendered = Rendered::new(api, index, turn, reply, &request);
    if !state.latency.is_zero() {
        tokio::time::sleep(state.latency).await;
    }
    if request.get("stream").and_then(Value::as_bool) != Some(true) {
        return json_response(StatusCode::OK, &rendered.json());
    }
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    event_stream(rendered.events(include_usage), state.chunk_delay)
}

/// A `text/event-stream` response of `events`, `delay` apart.
fn event_stream(events: Vec<Bytes>, delay: Duration) -> Response {
    let stream = futures_util::stream::unfold(
        (events.into_iter(), true),
        move |(mut events, first)| async move {
            let event = events.next()?;
            if !first && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Some((Ok::<Bytes, Infallible>(event), (events, false)))
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Every string in the request's system prompt and messages, one per line: what
/// a conversation's `match` is looked for in.
fn searchable_text(request: &Value) -> String {
    fn collect(value: &Value, out: &mut String) {
        match value {
            Value::String(text) => {
                out.push_str(text);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            Value::Object(map) => map.values().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    for key in ["system", "messages"] {
        if let Some(value) = request.get(key) {
            collect(value, &mut out);
        }
    }
    out
}
