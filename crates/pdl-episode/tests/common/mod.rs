//! Shared helpers of the integration tests: a small real HTTP client, scripts,
//! and test upstreams (real HTTP servers with behaviour of their own).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method, Request};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pdl_episode::sse::SseParser;
use pdl_episode::ReplayScript;
use serde_json::Value;

/// The real key the tests give the gateway.
pub const REAL_KEY: &str = "sk-test-upstream-secret-0123456789abcdef";

/// A blocking HTTP/1.1 client over a runtime of its own.
pub struct Http {
    pub rt: tokio::runtime::Runtime,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response read to its end.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When each body frame arrived, from the request's start.
    pub frame_times: Vec<Duration>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The SSE data payloads, parsed; `[DONE]` as the string "[DONE]".
    pub fn events(&self) -> Vec<Value> {
        let mut parser = SseParser::new();
        let mut events = parser.push(&self.body).expect("events within the bound");
        events.extend(parser.finish());
        events
            .into_iter()
            .filter_map(|e| e.data)
            .map(|data| serde_json::from_str(&data).unwrap_or(Value::String(data)))
            .collect()
    }

    /// The SSE `event:` names, in order.
    pub fn event_names(&self) -> Vec<String> {
        let mut parser = SseParser::new();
        parser
            .push(&self.body)
            .expect("events within the bound")
            .into_iter()
            .filter_map(|e| e.event)
            .collect()
    }

    /// The error message in either API's error format.
    pub fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl Http {
    pub fn new() -> Http {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = Client::builder(TokioExecutor::new()).build_http();
        Http { rt, client }
    }

    pub fn client(&self) -> Client<HttpConnector, Full<Bytes>> {
        self.client.clone()
    }

    pub fn post(&self, url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
        self.rt.block_on(send(
            &self.client,
            Method::POST,
            url,
            headers,
            Some(body.to_string()),
        ))
    }

    pub fn get(&self, url: &str, headers: &[(&str, &str)]) -> Answer {
        self.rt
            .block_on(send(&self.client, Method::GET, url, headers, None))
    }
}

/// Sends one request and reads the whole response, timing each frame.
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Answer {
    let started = Instant::now();
    let mut request = Request::builder().method(method).uri(url);
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let response = client.request(request).await.expect("request failed");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    let mut frame_times = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body broke off").into_data() {
            frame_times.push(started.elapsed());
            bytes.extend_from_slice(&data);
        }
    }
    Answer {
        status,
        headers,
        body: Bytes::from(bytes),
        frame_times,
    }
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A script from JSON.
pub fn script(value: Value) -> ReplayScript {
    ReplayScript::parse(&value.to_string(), Path::new("test-script.json")).unwrap()
}

/// The lines of a trajectory file, parsed.
pub fn trajectory(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A real HTTP server for a test upstream, on its own runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    pub fn start(router: axum::Router) -> TestServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        TestServer { addr, rt: Some(rt) }
    }

    /// The base URL with `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// What a [`CountingUpstream`] received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    pub bytes: usize,
}

/// A test upstream that bills like an honest provider: input = its request
/// bytes / 4 (never more tokens than bytes) plus each image by the provider's
/// published formula ([`image_tokens`]), output = the whole cap it was sent
/// (the worst case a real model can produce) times `n`, or 5 000 when no cap
/// was sent. A message containing `SLOW` is answered after `delay`; one
/// containing `REJECT` gets a 400, unbilled, as a provider answers a malformed
/// request. It records every request and the most it served at once.
pub struct CountingUpstream {
    pub server: TestServer,
    pub received: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
    pub peak_concurrency: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingUpstream {
    pub fn start(delay: Duration) -> CountingUpstream {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let peak = Arc::new(AtomicUsize::new(0));
        let current = Arc::new(AtomicUsize::new(0));
        let (log, peak2) = (received.clone(), peak.clone());
        let handler = move |uri: axum::http::Uri, headers: HeaderMap, raw: Bytes| {
            let (log, peak, current) = (log.clone(), peak2.clone(), current.clone());
            async move {
                let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                log.lock().unwrap().push(Received {
                    path: uri.path().to_string(),
                    headers,
                    body: body.clone(),
                    bytes: raw.len(),
                });
                if String::from_utf8_lossy(&raw).contains("SLOW") {
                    tokio::time::sleep(delay).await;
                }
                let status = if String::from_utf8_lossy(&raw).contains("REJECT") {
                    axum::http::StatusCode::BAD_REQUEST
                } else {
                    axum::http::StatusCode::OK
                };
                current.fetch_sub(1, Ordering::SeqCst);
                let anthropic = uri.path().ends_with("/messages");
                let cap = body
                    .get("max_completion_tokens")
                    .or_else(|| body.get("max_tokens"))
                    .and_then(Value::as_u64)
                    .unwrap_or(5000);
                let n = body.get("n").and_then(Value::as_u64).unwrap_or(1);
                let input = (raw.len() / 4) as u64 + image_tokens(&body);
                let output = cap * n;
                let model = body["model"].clone();
                let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
                let (content_type, text) = match (anthropic, stream) {
                    (false, false) => (
                        "application/json",
                        serde_json::json!({"id": "c", "object": "chat.completion", "model": model,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": input, "completion_tokens": output}})
                        .to_string(),
                    ),
                    (true, false) => (
                        "application/json",
                        serde_json::json!({"id": "m", "type": "message", "role": "assistant", "model": model,
                            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                            "usage": {"input_tokens": input, "output_tokens": output}})
                        .to_string(),
                    ),
                    (false, true) => {
                        let mut events = vec![serde_json::json!({"choices": [{"index": 0, "delta": {"content": "ok"}}], "model": model})];
                        if body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)) {
                            events.push(serde_json::json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}}));
                        }
                        let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                        text.push_str("data: [DONE]\n\n");
                        ("text/event-stream", text)
                    }
                    (true, true) => {
                        let events = [
                            ("message_start", serde_json::json!({"type": "message_start", "message": {"model": model, "usage": {"input_tokens": input, "output_tokens": 1}}})),
                            ("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}})),
                            ("message_delta", serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}})),
                            ("message_stop", serde_json::json!({"type": "message_stop"})),
                        ];
                        let text = events.iter().map(|(n, e)| format!("event: {n}\ndata: {e}\n\n")).collect();
                        ("text/event-stream", text)
                    }
                };
                if status != axum::http::StatusCode::OK {
                    let error = r#"{"error": {"message": "invalid temperature", "type": "invalid_request_error"}}"#;
                    return (
                        status,
                        [("content-type", "application/json")],
                        error.to_string(),
                    );
                }
                (status, [("content-type", content_type)], text)
            }
        };
        let router = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(handler.clone()))
            .route("/v1/messages", axum::routing::post(handler))
            .layer(axum::extract::DefaultBodyLimit::max(256 << 20));
        CountingUpstream {
            server: TestServer::start(router),
            received,
            peak_concurrency: peak,
        }
    }

    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Decodes standard base64 (padding and unknown characters skipped).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for sextet in text.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The start of a PNG of `width` × `height` pixels, as a data URL: enough for a
/// provider to read its size from the header (the pixels are not needed to
/// bill it).
pub fn png_data_url(width: u32, height: u32) -> String {
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    png.extend(width.to_be_bytes());
    png.extend(height.to_be_bytes());
    png.extend([1, 0, 0, 0, 0, 0, 0, 0, 0]);
    format!("data:image/png;base64,{}", base64_encode(&png))
}

/// The size a data URL's PNG header gives, or 512 × 512.
fn png_size(url: &str) -> (u64, u64) {
    let data = base64_decode(url.split_once(',').map_or("", |(_, d)| d));
    if data.len() >= 24 && data.starts_with(b"\x89PNG") {
        let word = |at: usize| u64::from(u32::from_be_bytes(data[at..at + 4].try_into().unwrap()));
        (word(16), word(20))
    } else {
        (512, 512)
    }
}

/// The input tokens OpenAI bills for the images of a Chat Completions request,
/// by its published formula for the tile models: with `detail: "low"` the
/// base, otherwise the image scaled down to fit 2048 × 2048, then down to a
/// shortest side of 768, and each 512-pixel tile on top of the base (gpt-4o-mini:
/// 2 833 + 5 667 per tile; gpt-4o and the others: 85 + 170).
pub fn image_tokens(body: &Value) -> u64 {
    let model = body["model"].as_str().unwrap_or("");
    let (base, tile) = if model.contains("4o-mini") {
        (2_833, 5_667)
    } else {
        (85, 170)
    };
    let mut total = 0;
    let mut stack = vec![body.get("messages").cloned().unwrap_or(Value::Null)];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(object) => {
                if object.get("type").and_then(Value::as_str) == Some("image_url") {
                    let image = &object["image_url"];
                    total += if image["detail"] == "low" {
                        base
                    } else {
                        let (w, h) = png_size(image["url"].as_str().unwrap_or(""));
                        let (mut w, mut h) = (w as f64, h as f64);
                        let fit = (2048.0 / w.max(h)).min(1.0);
                        (w, h) = (w * fit, h * fit);
                        let short = (768.0 / w.min(h)).min(1.0);
                        (w, h) = (w * short, h * short);
                        base + tile * ((w / 512.0).ceil() * (h / 512.0).ceil()) as u64
                    };
                }
                stack.extend(object.into_iter().map(|(_, v)| v));
            }
            _ => {}
        }
    }
    total
}
