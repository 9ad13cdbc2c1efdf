//! The gateway's HTTP side: routes, authentication by episode token, the budget
//! check, forwarding, and metering and recording of each exchange.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::episode::{Episode, EpisodeHandle, InFlight, Outcome, Registry};
use super::meter::{is_openai_usage_chunk, prepare, Metered, Prepared, StreamMeter};
use super::trajectory::{now_rfc3339, ExchangeRecord, RecordedUsage};
use super::upstream::{error_chain, SendError, Upstream};
use super::{EpisodeSpec, GatewayError};
use crate::provider::{
    error_body, error_response, estimate_input_tokens, estimate_output_tokens, json_response,
    models_body, not_found, reported_usage, tokens_for_bytes, ApiKind, ErrorKind, TokenCount,
};
use crate::sse::SseParser;

/// The largest request body accepted (long agent contexts are large).
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// How many stream pieces may wait for a slow client.
const STREAM_BUFFER: usize = 64;

/// What the handlers share.
pub(crate) struct Shared {
    upstream: Upstream,
    episodes: Arc<Registry>,
    models: Vec<String>,
}

impl Shared {
    pub(crate) fn new(upstream: Upstream, models: Vec<String>) -> Shared {
        Shared {
            upstream,
            episodes: Arc::new(Registry::default()),
            models,
        }
    }

    pub(crate) fn api(&self) -> ApiKind {
        self.upstream.api
    }

    pub(crate) fn open_episode(&self, spec: EpisodeSpec) -> Result<EpisodeHandle, GatewayError> {
        self.episodes.open(spec, self.upstream.key_text())
    }

    /// The open episode named by the request's `Authorization: Bearer` or
    /// `x-api-key` header; `Err(true)` when a key was presented but names none.
    fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Episode>, bool> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let api_key = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim);
        let mut presented = false;
        for token in [bearer, api_key].into_iter().flatten() {
            presented = true;
            if let Some(episode) = self.episodes.get(token) {
                return Ok(episode);
            }
        }
        Err(presented)
    }
}

/// The gateway's routes.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/messages", post(messages))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(shared)
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    call(shared, ApiKind::OpenAi, headers, body).await
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    call(shared, ApiKind::Anthropic, headers, body).await
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let api = if headers.contains_key("anthropic-version") {
        ApiKind::Anthropic
    } else {
        ApiKind::OpenAi
    };
    match shared.authenticate(&headers) {
        Ok(_) => json_response(StatusCode::OK, &models_body(&shared.models)),
        Err(presented) => unauthorized(api, presented),
    }
}

async fn fallback(method: Method, uri: Uri) -> Response {
    not_found(method.as_str(), uri.path())
}

/// The 401 for a request that names no open episode.
fn unauthorized(api: ApiKind, presented: bool) -> Response {
    let message = if presented {
        "invalid API key: the key names no open episode of this gateway"
    } else {
        "missing API key: send the episode token as `Authorization: Bearer <token>` or `x-api-key: <token>`"
    };
    error_response(
        api,
        StatusCode::UNAUTHORIZED,
        ErrorKind::Authentication,
        message,
    )
}

/// One generation call of the agent.
async fn call(shared: Arc<Shared>, api: ApiKind, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let ts = now_rfc3339();
    let episode = match shared.authenticate(&headers) {
        Ok(episode) => episode,
        Err(presented) => return unauthorized(api, presented),
    };
    let exchange = Exchange {
        in_flight: episode.begin(),
        api,
        ts,
        started,
    };
    let upstream = &shared.upstream;
    if api != upstream.api {
        let message = format!(
            "this gateway forwards to an {} upstream and does not translate between APIs: \
             call {} instead of {}",
            upstream.api,
            upstream.api.endpoint_path(),
            api.endpoint_path()
        );
        return exchange.refuse(
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            message,
            body_as_value(&body),
        );
    }
    let request = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(request)) => request,
        Ok(other) => {
            return exchange.refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                "the request body must be a JSON object".into(),
                other,
            )
        }
        Err(e) => {
            return exchange.refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                format!("the request body is not valid JSON: {e}"),
                body_as_value(&body),
            )
        }
    };
    let (used, budget) = (episode.used(), episode.budget);
    if used >= budget {
        return exchange.refuse(
            StatusCode::UNAUTHORIZED,
            ErrorKind::BudgetExhausted,
            format!("token budget exhausted: {used} of {budget} tokens used"),
            Value::Object(request),
        );
    }
    let prepared = prepare(api, request, budget - used);
    let upstream_body = match serde_json::to_vec(&prepared.body) {
        Ok(bytes) => Bytes::from(bytes),
        Err(e) => {
            return exchange.refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                format!("the request cannot be re-encoded: {e}"),
                prepared.body,
            )
        }
    };
    match upstream.send(&headers, upstream_body).await {
        Ok(response) => {
            let streamed = prepared.stream
                && response.status().is_success()
                && is_event_stream(response.headers());
            if streamed {
                stream_response(exchange, prepared, response, upstream.timeout)
            } else {
                complete_response(exchange, prepared, response, upstream.timeout).await
            }
        }
        Err(SendError::Connect(cause)) => exchange.fail(
            StatusCode::BAD_GATEWAY,
            ErrorKind::Upstream,
            format!(
                "cannot reach the upstream model API at {}: {cause}",
                upstream.base_url
            ),
            prepared.body,
        ),
        Err(SendError::Timeout(limit)) => exchange.fail(
            StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Timeout,
            format!(
                "the upstream model API did not answer within {}",
                humantime::format_duration(limit)
            ),
            prepared.body,
        ),
        Err(SendError::Failed(cause)) => exchange.fail(
            StatusCode::BAD_GATEWAY,
            ErrorKind::Upstream,
            format!("the request to the upstream model API failed: {cause}"),
            prepared.body,
        ),
    }
}

/// A response read to its end, then passed on.
async fn complete_response(
    exchange: Exchange,
    prepared: Prepared,
    response: hyper::Response<Incoming>,
    limit: Duration,
) -> Response {
    let status = response.status();
    let headers = passed_headers(response.headers());
    let bytes = match tokio::time::timeout(limit, response.into_body().collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            return exchange.fail(
                StatusCode::BAD_GATEWAY,
                ErrorKind::Upstream,
                format!("the upstream response broke off: {}", error_chain(&e)),
                prepared.body,
            )
        }
        Err(_) => {
            return exchange.fail(
                StatusCode::GATEWAY_TIMEOUT,
                ErrorKind::Timeout,
                format!(
                    "the upstream response did not arrive within {}",
                    humantime::format_duration(limit)
                ),
                prepared.body,
            )
        }
    };
    let parsed = serde_json::from_slice::<Value>(&bytes).ok();
    let api = exchange.api;
    let (metered, error) = if status.is_success() {
        let metered = match parsed.as_ref().and_then(|v| reported_usage(api, v)) {
            Some(tokens) => Metered {
                tokens,
                estimated: false,
            },
            None => Metered {
                tokens: TokenCount {
                    input: estimate_input_tokens(&prepared.body),
                    output: parsed.as_ref().map_or_else(
                        || tokens_for_bytes(bytes.len()),
                        |v| estimate_output_tokens(api, v),
                    ),
                },
                estimated: true,
            },
        };
        (metered, None)
    } else {
        (
            Metered::default(),
            Some(format!("the upstream answered {status}")),
        )
    };
    let recorded = parsed.unwrap_or_else(|| body_as_value(&bytes));
    exchange.forwarded(
        prepared.body,
        status,
        recorded,
        metered,
        error.is_some(),
        error,
    );
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// A streamed response: passed on event by event as it arrives, metered and
/// recorded when it ends (or when the client goes away).
fn stream_response(
    exchange: Exchange,
    prepared: Prepared,
    response: hyper::Response<Incoming>,
    idle_limit: Duration,
) -> Response {
    let status = response.status();
    let mut headers = passed_headers(response.headers());
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(STREAM_BUFFER);
    tokio::spawn(pump(
        exchange,
        prepared,
        status,
        response.into_body(),
        tx,
        idle_limit,
    ));
    let chunks =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut response = Response::new(Body::from_stream(chunks));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Moves a stream from the upstream to the client, then meters and records it.
async fn pump(
    exchange: Exchange,
    prepared: Prepared,
    status: StatusCode,
    mut body: Incoming,
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    idle_limit: Duration,
) {
    let api = exchange.api;
    let mut parser = SseParser::new();
    let mut meter = StreamMeter::new(api);
    let mut payloads = Vec::new();
    let mut upstream_error: Option<String> = None;
    let mut client_gone = false;
    'stream: loop {
        let frame = tokio::select! {
            _ = tx.closed() => {
                client_gone = true;
                break 'stream;
            }
            frame = tokio::time::timeout(idle_limit, body.frame()) => frame,
        };
        let (events, ended) = match frame {
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => (parser.push(&data), false),
                Err(_) => continue,
            },
            Ok(None) => (parser.finish().into_iter().collect(), true),
            Ok(Some(Err(e))) => {
                let message = format!("the upstream stream broke off: {}", error_chain(&e));
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        message.clone(),
                    )))
                    .await;
                upstream_error = Some(message);
                break 'stream;
            }
            Err(_) => {
                let message = format!(
                    "the upstream stream was silent for {}",
                    humantime::format_duration(idle_limit)
                );
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        message.clone(),
                    )))
                    .await;
                upstream_error = Some(message);
                break 'stream;
            }
        };
        for event in events {
            let mut forward = true;
            if let Some(data) = &event.data {
                if data.trim() != "[DONE]" {
                    match serde_json::from_str::<Value>(data) {
                        Ok(payload) => {
                            meter.observe(&payload);
                            if prepared.hide_usage_chunk && is_openai_usage_chunk(&payload) {
                                forward = false;
                            }
                            if event.event.as_deref() == Some("error")
                                || payload.get("type").and_then(Value::as_str) == Some("error")
                            {
                                upstream_error =
                                    Some(format!("the upstream sent an error event: {data}"));
                            }
                            payloads.push(payload);
                        }
                        Err(_) => payloads.push(Value::String(data.clone())),
                    }
                }
            }
            if forward && tx.send(Ok(event.raw)).await.is_err() {
                client_gone = true;
                break 'stream;
            }
        }
        if ended {
            break;
        }
    }
    // Dropping the body closes the upstream connection if the stream is unfinished.
    drop(body);
    drop(tx);
    let error = match (&upstream_error, client_gone) {
        (Some(message), _) => Some(message.clone()),
        (None, true) => Some("the client went away before the stream ended".to_string()),
        (None, false) => None,
    };
    let metered = meter.finish(&prepared.body);
    exchange.forwarded(
        prepared.body,
        status,
        json!({ "stream": payloads }),
        metered,
        upstream_error.is_some(),
        error,
    );
}

/// An exchange being handled; it is in flight until recorded.
struct Exchange {
    in_flight: InFlight,
    api: ApiKind,
    ts: String,
    started: Instant,
}

impl Exchange {
    /// Records a call the gateway answered by itself and returns the answer.
    fn refuse(
        self,
        status: StatusCode,
        kind: ErrorKind,
        message: String,
        request: Value,
    ) -> Response {
        let body = error_body(self.api, kind, &message);
        let record = self.record(
            request,
            status,
            body.clone(),
            Metered::default(),
            true,
            Some(message),
        );
        self.in_flight.episode().finish(Outcome::Refused, &record);
        json_response(status, &body)
    }

    /// Records a forwarded call that got no usable upstream response and returns
    /// the gateway's error answer.
    fn fail(
        self,
        status: StatusCode,
        kind: ErrorKind,
        message: String,
        request: Value,
    ) -> Response {
        let body = error_body(self.api, kind, &message);
        self.forwarded(
            request,
            status,
            body.clone(),
            Metered::default(),
            true,
            Some(message),
        );
        json_response(status, &body)
    }

    /// Counts and records a forwarded call.
    fn forwarded(
        self,
        request: Value,
        status: StatusCode,
        response: Value,
        metered: Metered,
        failed: bool,
        error: Option<String>,
    ) {
        let outcome = Outcome::Forwarded {
            tokens: metered.tokens,
            estimated: metered.estimated,
            failed,
        };
        let record = self.record(request, status, response, metered, false, error);
        self.in_flight.episode().finish(outcome, &record);
    }

    fn record(
        &self,
        request: Value,
        status: StatusCode,
        response: Value,
        metered: Metered,
        refused: bool,
        error: Option<String>,
    ) -> ExchangeRecord {
        ExchangeRecord {
            ts: self.ts.clone(),
            endpoint: self.api.endpoint_path(),
            request,
            status: status.as_u16(),
            response,
            usage: RecordedUsage {
                input_tokens: metered.tokens.input,
                output_tokens: metered.tokens.output,
                estimated: metered.estimated,
            },
            latency_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            refused,
            error,
        }
    }
}

/// A body that is not JSON, kept as text.
fn body_as_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// The upstream response headers the client gets: the content type, retry hints,
/// request ids and rate-limit information.
fn passed_headers(upstream: &HeaderMap) -> HeaderMap {
    const NAMES: &[&str] = &[
        "content-type",
        "retry-after",
        "retry-after-ms",
        "x-request-id",
        "request-id",
        "openai-processing-ms",
    ];
    let mut headers = HeaderMap::new();
    for (name, value) in upstream {
        let text = name.as_str();
        if NAMES.contains(&text)
            || text.starts_with("x-ratelimit-")
            || text.starts_with("anthropic-ratelimit-")
        {
            headers.append(name.clone(), value.clone());
        }
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    headers
}
