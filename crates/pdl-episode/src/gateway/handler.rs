//! The gateway's HTTP side: routes, authentication by episode token, the
//! bounded body read, the request policy, the budget reservation, forwarding,
//! and settling and recording each exchange.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::episode::{
    Ask, BudgetRefusal, Episode, EpisodeHandle, HeldBody, InFlight, Registry, Reservation,
    Settlement, MAX_EPISODE_BODY_BYTES,
};
use super::meter::{is_openai_usage_chunk, prepare, Metered, Prepared, StreamMeter};
use super::policy::{forwarded_headers, model_output_limit, PolicyRefusal, RequestPolicy};
use super::trajectory::{
    body_digest, now_rfc3339, Dropped, ExchangeRecord, RecordedUsage, TrajectoryWriter,
    BODY_HEAD_BYTES,
};
use super::upstream::{error_chain, SendError, Upstream};
use super::{EpisodeSpec, GatewayError, GatewayLimits};
use crate::provider::{
    error_body, error_response, estimate_input_tokens, estimate_output_tokens, json_response,
    models_body, not_found, reported_usage, tokens_for_bytes, ApiKind, ErrorKind, TokenCount,
};
use crate::sse::SseParser;

/// How many stream pieces may wait for a slow client.
const STREAM_BUFFER: usize = 64;

/// Bytes read beyond the budget left before a body is refused as too large for
/// it: room for fields the policy drops.
const READ_SLACK: usize = 64 << 10;

/// What the handlers share.
pub(crate) struct Shared {
    upstream: Upstream,
    episodes: Arc<Registry>,
    models: Vec<String>,
    policy: RequestPolicy,
    limits: GatewayLimits,
}

impl Shared {
    pub(crate) fn new(
        upstream: Upstream,
        models: Vec<String>,
        policy: RequestPolicy,
        limits: GatewayLimits,
    ) -> Result<Shared, GatewayError> {
        let writer = TrajectoryWriter::start().map_err(GatewayError::Writer)?;
        Ok(Shared {
            upstream,
            episodes: Arc::new(Registry::new(writer)),
            models,
            policy,
            limits,
        })
    }

    pub(crate) fn api(&self) -> ApiKind {
        self.upstream.api
    }

    pub(crate) fn policy(&self) -> &RequestPolicy {
        &self.policy
    }

    pub(crate) fn open_episode(
        &self,
        spec: EpisodeSpec,
        file: Option<std::fs::File>,
        ledger: Option<super::Ledger>,
    ) -> Result<EpisodeHandle, GatewayError> {
        self.episodes
            .open(spec, file, ledger, self.upstream.key_text())
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
        .with_state(shared)
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    call(shared, ApiKind::OpenAi, headers, body).await
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
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

/// A request body read up to a limit.
struct ReadBody {
    /// The rest of the body, when reading stopped at the limit.
    rest: Option<Body>,
    bytes: Bytes,
    /// The body ended within the limit.
    complete: bool,
    /// Why reading stopped early, if it did for another reason than the limit.
    error: Option<String>,
}

/// Reads at most `limit` bytes of `body` (one more tells that it is longer),
/// within `timeout` in all, holding what it keeps against the episode's bound
/// on body bytes in flight when `held` is given.
async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
    mut held: Option<&mut HeldBody>,
) -> ReadBody {
    let mut body = body;
    let mut buf = BytesMut::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return ReadBody {
                    rest: None,
                    bytes: buf.freeze(),
                    complete: false,
                    error: Some(format!(
                        "the request body did not arrive within {}",
                        humantime::format_duration(timeout)
                    )),
                }
            }
            Ok(None) => {
                return ReadBody {
                    rest: None,
                    bytes: buf.freeze(),
                    complete: true,
                    error: None,
                }
            }
            Ok(Some(Err(e))) => {
                return ReadBody {
                    rest: None,
                    bytes: buf.freeze(),
                    complete: false,
                    error: Some(format!("the request body broke off: {e}")),
                }
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            let room = limit + 1 - buf.len();
            let take = data.len().min(room);
            if let Some(held) = held.as_deref_mut() {
                if !held.hold(take as u64) {
                    return ReadBody {
                        rest: Some(body),
                        bytes: buf.freeze(),
                        complete: false,
                        error: Some(format!(
                            "the episode's calls in flight hold more than {} MiB of request \
                             bodies; wait for them to end",
                            MAX_EPISODE_BODY_BYTES >> 20
                        )),
                    };
                }
            }
            buf.extend_from_slice(&data[..take]);
            if buf.len() > limit {
                return ReadBody {
                    rest: Some(body),
                    bytes: buf.freeze(),
                    complete: false,
                    error: None,
                };
            }
        }
    }
}

/// Reads and discards what is left of a body, at most `limit` bytes within
/// `timeout`, so that the client gets the answer instead of a reset connection.
async fn drain(rest: Option<Body>, limit: usize, timeout: Duration) {
    let Some(mut body) = rest else {
        return;
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = 0usize;
    while seen <= limit {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => seen += frame.data_ref().map_or(0, |d| d.len()),
            _ => return,
        }
    }
}

/// One generation call of the agent.
async fn call(shared: Arc<Shared>, api: ApiKind, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let ts = now_rfc3339();
    let episode = match shared.authenticate(&headers) {
        Ok(episode) => episode,
        Err(presented) => return unauthorized(api, presented),
    };
    let refusal = Refusal {
        in_flight: episode.begin(),
        api,
        ts,
        started,
    };
    let limits = &shared.limits;
    let upstream = &shared.upstream;
    // Refusals that need no body read only its head.
    let early = if api != upstream.api {
        Some((
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            format!(
                "this gateway forwards to an {} upstream and does not translate between APIs: \
                 call {} instead of {}",
                upstream.api,
                upstream.api.endpoint_path(),
                api.endpoint_path()
            ),
        ))
    } else {
        episode.exhausted().map(|r| {
            (
                StatusCode::UNAUTHORIZED,
                ErrorKind::BudgetExhausted,
                r.message(),
            )
        })
    };
    if let Some((status, kind, message)) = early {
        let head = read_body(body, BODY_HEAD_BYTES, limits.body_read_timeout, None).await;
        drain(
            head.rest,
            limits.max_request_bytes,
            limits.body_read_timeout,
        )
        .await;
        return refusal
            .refuse(status, kind, message, &head.bytes, head.complete)
            .await;
    }
    let limit = limits.max_request_bytes.min(
        usize::try_from(episode.remaining())
            .unwrap_or(usize::MAX)
            .saturating_add(READ_SLACK),
    );
    // Held until the handler returns, with the body and what is made of it.
    let mut held = HeldBody::new(&episode);
    let read = read_body(body, limit, limits.body_read_timeout, Some(&mut held)).await;
    if let Some(error) = read.error {
        // What is left is read and dropped (not held), so that the client
        // gets the answer rather than a reset connection.
        drain(
            read.rest,
            limits.max_request_bytes,
            limits.body_read_timeout,
        )
        .await;
        return refusal
            .refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                error,
                &read.bytes,
                false,
            )
            .await;
    }
    if !read.complete {
        drain(
            read.rest,
            limits.max_request_bytes,
            limits.body_read_timeout,
        )
        .await;
        let (status, kind, message) = if limit == limits.max_request_bytes {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::InvalidRequest,
                format!(
                    "the request body is larger than the gateway accepts ({} bytes)",
                    limits.max_request_bytes
                ),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                ErrorKind::BudgetTooSmall,
                format!(
                    "token budget exhausted: the request body is over {limit} bytes and only {} \
                     of the {} tokens are left; send a shorter request",
                    episode.remaining(),
                    episode.budget
                ),
            )
        };
        return refusal
            .refuse(status, kind, message, &read.bytes, false)
            .await;
    }
    let body = read.bytes;
    let request = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(request)) => request,
        Ok(_) => {
            return refusal
                .refuse(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    "the request body must be a JSON object".into(),
                    &body,
                    true,
                )
                .await
        }
        Err(e) => {
            return refusal
                .refuse(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    format!("the request body is not valid JSON: {e}"),
                    &body,
                    true,
                )
                .await
        }
    };
    let vetted = match shared.policy.inspect(api, request) {
        Ok(vetted) => vetted,
        Err(refused) => {
            let prefix = match &refused {
                PolicyRefusal::Invalid(_) => "invalid request",
                PolicyRefusal::ProviderTool(_) => "refused by the campaign",
            };
            let message = format!("{prefix}: {}", refused.message());
            return refusal
                .refuse(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    message,
                    &body,
                    true,
                )
                .await;
        }
    };
    drop(body);
    let (upstream_headers, dropped_headers) = forwarded_headers(api, &shared.policy, &headers);
    // A byte-level tokenizer never makes more tokens than bytes: the JSON of
    // what goes upstream (before the cap is added) bounds its text; the
    // overhead adds the provider's wrapping and the most its images can be
    // billed, which their bytes do not bound.
    let vetted_bytes = serde_json::to_vec(&vetted.body).map_or(u64::MAX, |v| v.len() as u64);
    let ask = Ask {
        input_bound: vetted_bytes.saturating_add(vetted.overhead),
        requested_cap: vetted.requested_cap,
        model_limit: model_output_limit(vetted.model()),
        choices: vetted.choices,
    };
    let reservation = match episode.reserve(ask) {
        Ok(reservation) => reservation,
        Err(budget) => {
            let (status, kind) = match budget {
                BudgetRefusal::Exhausted { .. } => {
                    (StatusCode::UNAUTHORIZED, ErrorKind::BudgetExhausted)
                }
                BudgetRefusal::InputTooLarge { .. } => {
                    (StatusCode::BAD_REQUEST, ErrorKind::BudgetTooSmall)
                }
                BudgetRefusal::Unrecorded { .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, ErrorKind::Upstream)
                }
            };
            let mut message = budget.message();
            if vetted.images > 0 {
                message.push_str(&format!(
                    " (its {} image(s) count for up to {} input tokens: the most `{}` can bill for them, whatever their bytes)",
                    vetted.images,
                    vetted.image_tokens,
                    vetted.model()
                ));
            }
            let bytes = serde_json::to_vec(&vetted.body).unwrap_or_default();
            return refusal.refuse(status, kind, message, &bytes, true).await;
        }
    };
    let requested_model = vetted.requested_model.clone().filter(|m| {
        shared
            .policy
            .model
            .as_deref()
            .is_some_and(|forced| m.as_str() != Some(forced))
    });
    let dropped = Dropped {
        fields: vetted.dropped_fields.clone(),
        headers: dropped_headers,
    };
    let prepared = prepare(api, vetted, reservation.cap);
    let upstream_body = match serde_json::to_vec(&prepared.body) {
        Ok(bytes) => Bytes::from(bytes),
        Err(e) => {
            let message = format!("the request cannot be re-encoded: {e}");
            reservation.settle(Settlement::Metered {
                tokens: TokenCount::default(),
                estimated: false,
                failed: true,
            });
            return refusal
                .refuse(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    message,
                    &[],
                    true,
                )
                .await;
        }
    };
    let exchange = Exchange {
        in_flight: Some(refusal.in_flight),
        reservation: Some(reservation),
        api,
        ts: refusal.ts,
        started,
        requested_model,
        dropped,
        request: Some(prepared.body.clone()),
    };
    match upstream.send(&upstream_headers, upstream_body).await {
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
            false,
        ),
        Err(SendError::Timeout(limit)) => exchange.fail(
            StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Timeout,
            format!(
                "the upstream model API did not answer within {}",
                humantime::format_duration(limit)
            ),
            true,
        ),
        Err(SendError::Failed(cause)) => exchange.fail(
            StatusCode::BAD_GATEWAY,
            ErrorKind::Upstream,
            format!("the request to the upstream model API failed: {cause}"),
            true,
        ),
    }
}

/// A response read to its end, then passed on.
async fn complete_response(
    mut exchange: Exchange,
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
                true,
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
                true,
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
    let recorded = parsed.unwrap_or_else(|| text_value(&bytes));
    exchange.finish(status, recorded, metered, error.is_some(), error);
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
/// A stream that does not end normally (the client went away, the upstream
/// broke off or fell silent) is charged its whole reservation.
async fn pump(
    mut exchange: Exchange,
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
    let mut broke_off = false;
    let mut client_gone = false;
    'stream: loop {
        let frame = tokio::select! {
            _ = tx.closed() => {
                client_gone = true;
                break 'stream;
            }
            frame = tokio::time::timeout(idle_limit, body.frame()) => frame,
        };
        let broken = |message: String| (message, io::ErrorKind::BrokenPipe);
        let (events, ended) = match frame {
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => match parser.push(&data) {
                    Ok(events) => (events, false),
                    Err(overflow) => {
                        let (message, kind) =
                            broken(format!("the upstream stream is malformed: {overflow}"));
                        let _ = tx.send(Err(io::Error::new(kind, message.clone()))).await;
                        upstream_error = Some(message);
                        broke_off = true;
                        break 'stream;
                    }
                },
                Err(_) => continue,
            },
            Ok(None) => (parser.finish().into_iter().collect(), true),
            Ok(Some(Err(e))) => {
                let (message, kind) = broken(format!(
                    "the upstream stream broke off: {}",
                    error_chain(&e)
                ));
                let _ = tx.send(Err(io::Error::new(kind, message.clone()))).await;
                upstream_error = Some(message);
                broke_off = true;
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
                broke_off = true;
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
    let response = json!({ "stream": payloads });
    if client_gone || broke_off {
        let error = upstream_error
            .unwrap_or_else(|| "the client went away before the stream ended".to_string());
        exchange.abandon(status, response, broke_off, error);
    } else {
        let metered = meter.finish(&prepared.body);
        let failed = upstream_error.is_some();
        exchange.finish(status, response, metered, failed, upstream_error);
    }
    // The client sees the end of the stream once the call is settled.
    drop(tx);
}

/// A call the gateway answers by itself, before anything is reserved.
struct Refusal {
    in_flight: InFlight,
    api: ApiKind,
    ts: String,
    started: Instant,
}

impl Refusal {
    /// Records the refused call (a digest of its body, rate-limited) and
    /// returns the answer, held back when refusals come too fast.
    async fn refuse(
        self,
        status: StatusCode,
        kind: ErrorKind,
        message: String,
        body: &[u8],
        complete: bool,
    ) -> Response {
        let answer = error_body(self.api, kind, &message);
        let episode = self.in_flight.episode().clone();
        let pace = episode.pace_refusal();
        if pace.record {
            let record = ExchangeRecord {
                ts: self.ts,
                endpoint: self.api.endpoint_path(),
                requested_model: None,
                request: body_digest(body, complete),
                dropped: Dropped::default(),
                status: status.as_u16(),
                response: answer.clone(),
                usage: RecordedUsage::default(),
                latency_ms: elapsed_ms(self.started),
                refused: true,
                abandoned: false,
                error: Some(message),
            };
            episode.record(record, self.in_flight);
        } else {
            drop(self.in_flight);
        }
        if !pace.delay.is_zero() {
            tokio::time::sleep(pace.delay).await;
        }
        json_response(status, &answer)
    }
}

/// A forwarded call. Finishing it settles its reservation and records it;
/// dropped unfinished (the client went away and hyper dropped the handler) it
/// is recorded as abandoned and charged its whole reservation.
struct Exchange {
    in_flight: Option<InFlight>,
    reservation: Option<Reservation>,
    api: ApiKind,
    ts: String,
    started: Instant,
    requested_model: Option<Value>,
    dropped: Dropped,
    request: Option<Value>,
}

impl Exchange {
    /// Settles and records a call whose response was read to its end.
    fn finish(
        &mut self,
        status: StatusCode,
        response: Value,
        metered: Metered,
        failed: bool,
        error: Option<String>,
    ) {
        let (input, output) = (metered.tokens.input, metered.tokens.output);
        self.close(
            status,
            response,
            Settlement::Metered {
                tokens: metered.tokens,
                estimated: metered.estimated,
                failed,
            },
            (input, output, metered.estimated),
            error,
        );
    }

    /// Settles a call given up before its response ended: its whole reservation.
    fn abandon(&mut self, status: StatusCode, response: Value, failed: bool, error: String) {
        let (input, output) = self
            .reservation
            .as_ref()
            .map_or((0, 0), |r| (r.input, r.output));
        self.close(
            status,
            response,
            Settlement::Abandoned { failed },
            (input, output, false),
            Some(error),
        );
    }

    /// Records a forwarded call that got no usable upstream response and returns
    /// the gateway's error answer. `charged` says whether the request may have
    /// been worked on upstream (it was sent): then the whole reservation is
    /// charged, else nothing.
    fn fail(
        mut self,
        status: StatusCode,
        kind: ErrorKind,
        message: String,
        charged: bool,
    ) -> Response {
        let body = error_body(self.api, kind, &message);
        if charged {
            self.abandon(status, body.clone(), true, message);
        } else {
            self.finish(
                status,
                body.clone(),
                Metered::default(),
                true,
                Some(message),
            );
        }
        json_response(status, &body)
    }

    fn close(
        &mut self,
        status: StatusCode,
        response: Value,
        settlement: Settlement,
        (input, output, estimated): (u64, u64, bool),
        error: Option<String>,
    ) {
        let (Some(reservation), Some(in_flight)) = (self.reservation.take(), self.in_flight.take())
        else {
            return;
        };
        let reserved = reservation.input + reservation.output;
        let abandoned = matches!(settlement, Settlement::Abandoned { .. });
        reservation.settle(settlement);
        let mut request = self.request.take().unwrap_or(Value::Null);
        if !abandoned && input == 0 && output == 0 {
            // A call that cost nothing (the provider rejected it) is kept as
            // the size, digest and head of its body, and paced like the
            // gateway's own refusals: free calls cannot fill the disk.
            let episode = in_flight.episode().clone();
            if !episode.pace_unbilled().record {
                return;
            }
            let bytes = serde_json::to_vec(&request).unwrap_or_default();
            request = body_digest(&bytes, true);
        }
        let record = ExchangeRecord {
            ts: std::mem::take(&mut self.ts),
            endpoint: self.api.endpoint_path(),
            requested_model: self.requested_model.take(),
            request,
            dropped: std::mem::take(&mut self.dropped),
            status: status.as_u16(),
            response,
            usage: RecordedUsage {
                input_tokens: input,
                output_tokens: output,
                estimated,
                reserved: Some(reserved),
            },
            latency_ms: elapsed_ms(self.started),
            refused: false,
            abandoned,
            error,
        };
        let episode = in_flight.episode().clone();
        episode.record(record, in_flight);
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.reservation.is_some() {
            self.abandon(
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
                Value::Null,
                false,
                "the client went away before the response was complete".into(),
            );
        }
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A body that is not JSON, kept as text.
fn text_value(bytes: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(bytes).into_owned())
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
