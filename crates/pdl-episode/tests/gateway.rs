//! The gateway end to end: real HTTP to a gateway in front of the replay model or
//! a purpose-built test upstream.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::Method;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use common::{bearer, script, trajectory, Answer, Http, TestServer, REAL_KEY};
use pdl_episode::{
    ApiKind, EpisodeHandle, EpisodeSpec, Gateway, GatewayConfig, ReplayConfig, ReplayScript,
    ReplayServer, UpstreamConfig,
};
use serde_json::{json, Value};

/// A replay model with a gateway in front of it.
struct Stack {
    dir: tempfile::TempDir,
    _model: ReplayServer,
    gateway: Gateway,
    http: Http,
}

impl Stack {
    fn new(api: ApiKind, script: ReplayScript) -> Stack {
        Stack::with_config(api, ReplayConfig::new(script))
    }

    fn with_config(api: ApiKind, config: ReplayConfig) -> Stack {
        let model = ReplayServer::start(config).unwrap();
        let gateway = gateway_for(api, &model.base_url(), None);
        Stack {
            dir: tempfile::tempdir().unwrap(),
            _model: model,
            gateway,
            http: Http::new(),
        }
    }

    fn episode(&self, id: &str, budget: u64) -> EpisodeHandle {
        self.gateway
            .open_episode(EpisodeSpec {
                id: id.into(),
                token_budget: budget,
                trajectory_path: self.trajectory_path(id),
            })
            .unwrap()
    }

    fn trajectory_path(&self, id: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.jsonl"))
    }

    fn openai(&self, token: &str, body: &Value) -> Answer {
        self.http.post(
            &format!("{}/v1/chat/completions", self.gateway.base_url()),
            &[("authorization", &bearer(token))],
            body,
        )
    }

    fn anthropic(&self, token: &str, body: &Value) -> Answer {
        self.http.post(
            &format!("{}/v1/messages", self.gateway.base_url()),
            &[("x-api-key", token), ("anthropic-version", "2023-06-01")],
            body,
        )
    }
}

fn gateway_for(api: ApiKind, base_url: &str, unix: Option<&Path>) -> Gateway {
    let mut upstream = UpstreamConfig::new(api, base_url).with_api_key(REAL_KEY);
    upstream.request_timeout = Duration::from_secs(10);
    upstream.retry_base_delay = Duration::from_millis(10);
    upstream.retry_max_delay = Duration::from_millis(200);
    let mut config = GatewayConfig::new(upstream);
    config.unix_socket = unix.map(Path::to_path_buf);
    config.models = vec!["gpt-test".into()];
    Gateway::start(config).unwrap()
}

/// A trajectory line's usage without the reservation.
fn charged(usage: &Value) -> Value {
    let mut usage = usage.clone();
    usage.as_object_mut().unwrap().remove("reserved");
    usage
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// A two-turn script: a tool call, then a final answer, with scripted usage.
fn two_turns() -> ReplayScript {
    script(json!({"conversations": [{"replies": [
        {"content": "Let me look at the files.",
         "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls -la"}}],
         "usage": {"input_tokens": 120, "output_tokens": 30}},
        {"content": "The bug is fixed.", "finish": true,
         "usage": {"input_tokens": 200, "output_tokens": 12}}
    ]}]}))
}

#[test]
fn openai_replies_pass_through_and_usage_is_counted_as_reported() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("openai", 100_000);
    let first = stack.openai(
        episode.token(),
        &json!({"model": "gpt-test", "messages": [user("fix it")]}),
    );
    assert_eq!(first.status, 200, "{}", first.text());
    let body = first.json();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], "Let me look at the files.");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "run_shell");
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        "{\"command\":\"ls -la\"}"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(body["usage"]["prompt_tokens"], 120);

    let second = stack.openai(
        episode.token(),
        &json!({"model": "gpt-test", "messages": [user("fix it"), assistant("looked"), user("ok")]}),
    );
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "The bug is fixed."
    );

    assert!(!episode.budget_exhausted());
    let usage = episode.close();
    assert_eq!((usage.input_tokens, usage.output_tokens), (320, 42));
    assert_eq!(
        (usage.calls, usage.refused_calls, usage.upstream_errors),
        (2, 0, 0)
    );
    assert_eq!(usage.estimated_calls, 0);

    let lines = trajectory(&stack.trajectory_path("openai"));
    assert_eq!(lines.len(), 2);
    let line = &lines[0];
    assert_eq!(line["endpoint"], "/v1/chat/completions");
    assert_eq!(line["status"], 200);
    assert_eq!(line["refused"], false);
    assert_eq!(
        charged(&line["usage"]),
        json!({"input_tokens": 120, "output_tokens": 30, "estimated": false})
    );
    // The reservation: the request's bytes, the overhead and the output cap.
    assert!(line["usage"]["reserved"].as_u64().unwrap() >= 150);
    assert_eq!(
        line["response"]["choices"][0]["message"]["content"],
        "Let me look at the files."
    );
    assert_eq!(line["request"]["messages"][0]["content"], "fix it");
    assert!(line["ts"].as_str().unwrap().ends_with('Z'));
    assert!(line["latency_ms"].is_u64());
    assert!(line.get("error").is_none());
}

#[test]
fn openai_streams_are_counted_from_the_final_usage_chunk() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("stream", 100_000);

    // The client did not ask for usage: the gateway asks for it, counts it and
    // keeps the usage-only chunk to itself.
    let answer = stack.openai(
        episode.token(),
        &json!({"model": "gpt-test", "stream": true, "messages": [user("go")]}),
    );
    assert_eq!(answer.status, 200);
    assert!(answer.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = answer.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert!(events
        .iter()
        .all(|e| e.get("usage").is_none_or(Value::is_null)));
    let text: String = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(text, "Let me look at the files.");
    assert!(episode.wait_idle(Duration::from_secs(5)));
    let usage = episode.usage();
    assert_eq!((usage.input_tokens, usage.output_tokens), (120, 30));

    let lines = trajectory(&stack.trajectory_path("stream"));
    let recorded = lines[0]["response"]["stream"].as_array().unwrap();
    assert_eq!(recorded.last().unwrap()["usage"]["completion_tokens"], 30);
    assert_eq!(
        lines[0]["request"]["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(lines[0]["usage"]["estimated"], false);

    // A client that asks for usage gets the chunk.
    let answer = stack.openai(
        episode.token(),
        &json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
                "messages": [user("go"), assistant("x"), user("more")]}),
    );
    let events = answer.events();
    let usage_chunk = &events[events.len() - 2];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 200);
    let usage = episode.close();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.calls),
        (320, 42, 2)
    );
}

#[test]
fn anthropic_replies_pass_through_and_usage_is_counted_streamed_and_not() {
    let stack = Stack::new(ApiKind::Anthropic, two_turns());
    let episode = stack.episode("anthropic", 100_000);
    let answer = stack.anthropic(
        episode.token(),
        &json!({"model": "claude-test", "max_tokens": 1024, "messages": [user("fix it")]}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body = answer.json();
    assert_eq!(
        body["content"][0],
        json!({"type": "text", "text": "Let me look at the files."})
    );
    assert_eq!(body["content"][1]["type"], "tool_use");
    assert_eq!(body["content"][1]["input"], json!({"command": "ls -la"}));
    assert_eq!(body["stop_reason"], "tool_use");

    let answer = stack.anthropic(
        episode.token(),
        &json!({"model": "claude-test", "max_tokens": 1024, "stream": true,
                "messages": [user("fix it"), assistant("looked"), user("go on")]}),
    );
    assert_eq!(answer.status, 200);
    let names = answer.event_names();
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let text: String = answer
        .events()
        .iter()
        .filter_map(|e| e.pointer("/delta/text").and_then(Value::as_str))
        .collect();
    assert_eq!(text, "The bug is fixed.");

    let usage = episode.close();
    assert_eq!((usage.input_tokens, usage.output_tokens), (320, 42));
    let lines = trajectory(&stack.trajectory_path("anthropic"));
    assert_eq!(lines[1]["endpoint"], "/v1/messages");
    assert_eq!(
        charged(&lines[1]["usage"]),
        json!({"input_tokens": 200, "output_tokens": 12, "estimated": false})
    );
    assert_eq!(lines[1]["response"]["stream"][0]["type"], "message_start");
}

#[test]
fn both_auth_headers_and_paths_without_v1_are_accepted() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("auth", 100_000);
    let body = json!({"model": "m", "messages": [user("x")]});
    let base = stack.gateway.base_url();
    let by_key = stack.http.post(
        &format!("{base}/chat/completions"),
        &[("x-api-key", episode.token())],
        &body,
    );
    assert_eq!(by_key.status, 200, "{}", by_key.text());
    let by_bearer = stack.http.post(
        &format!("{}/chat/completions", stack.gateway.openai_base_url()),
        &[("authorization", &bearer(episode.token()))],
        &body,
    );
    assert_eq!(by_bearer.status, 200);
    assert_eq!(episode.usage().calls, 2);
}

#[test]
fn unknown_missing_and_closed_tokens_get_401_in_the_providers_format() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let body = json!({"model": "m", "messages": [user("x")]});

    let unknown = stack.openai("pdl-ep-00000000000000000000000000000000", &body);
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.json()["error"]["code"], "invalid_api_key");
    assert!(unknown.error_message().contains("invalid API key"));

    let missing = stack.http.post(
        &format!("{}/v1/chat/completions", stack.gateway.base_url()),
        &[],
        &body,
    );
    assert_eq!(missing.status, 401);
    assert!(missing.error_message().contains("missing API key"));

    let anthropic = stack.anthropic(
        "nope",
        &json!({"model": "m", "max_tokens": 5, "messages": []}),
    );
    assert_eq!(anthropic.status, 401);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "authentication_error");

    let episode = stack.episode("closed", 100_000);
    let token = episode.token().to_string();
    assert_eq!(stack.openai(&token, &body).status, 200);
    let usage = episode.close();
    assert_eq!(usage.calls, 1);
    let after = stack.openai(&token, &body);
    assert_eq!(after.status, 401);
    // The refused calls of unknown tokens are nobody's: nothing more was recorded.
    assert_eq!(trajectory(&stack.trajectory_path("closed")).len(), 1);
}

#[test]
fn a_spent_budget_is_refused_with_401_and_a_clear_message() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("budget", 150);
    let body = json!({"model": "m", "messages": [user("x")]});
    assert_eq!(stack.openai(episode.token(), &body).status, 200);
    assert!(episode.budget_exhausted());

    let refused = stack.openai(episode.token(), &body);
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.json(),
        json!({"error": {"message": "token budget exhausted: 150 of 150 tokens used or held by calls in flight",
                         "type": "token_budget_exhausted", "param": null,
                         "code": "token_budget_exhausted"}})
    );
    let streamed = stack.openai(
        episode.token(),
        &json!({"model": "m", "stream": true, "messages": [user("x")]}),
    );
    assert_eq!(streamed.status, 401);

    let usage = episode.close();
    assert_eq!(
        (usage.calls, usage.refused_calls, usage.total_tokens()),
        (1, 2, 150)
    );
    let lines = trajectory(&stack.trajectory_path("budget"));
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["refused"], true);
    assert_eq!(lines[1]["status"], 401);
    assert_eq!(
        lines[1]["error"],
        "token budget exhausted: 150 of 150 tokens used or held by calls in flight"
    );
    // A refused body is kept as a digest, not as the request.
    let sent = body.to_string();
    assert_eq!(lines[1]["request"]["bytes"], sent.len());
    assert_eq!(lines[1]["request"]["head"], sent);
    assert_eq!(lines[1]["request"]["sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn anthropic_budget_refusals_use_the_anthropic_error_format() {
    // The provider reports more input than the request's bytes: the call is
    // charged what it reports (an overrun) and the budget is spent.
    let greedy = script(json!({"conversations": [{"replies": [
        {"content": "a", "usage": {"input_tokens": 500, "output_tokens": 1}}]}]}));
    let stack = Stack::new(ApiKind::Anthropic, greedy);
    let episode = stack.episode("budget-anthropic", 300);
    let body = json!({"model": "m", "max_tokens": 4000, "messages": [user("x")]});
    assert_eq!(stack.anthropic(episode.token(), &body).status, 200);
    let usage = episode.usage();
    assert_eq!(usage.total_tokens(), 501);
    assert_eq!(usage.overrun_tokens, 201);
    let refused = stack.anthropic(episode.token(), &body);
    assert_eq!(refused.status, 401);
    let json = refused.json();
    assert_eq!(json["type"], "error");
    assert_eq!(json["error"]["type"], "authentication_error");
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("token budget exhausted: "));

    // A request whose bytes alone exceed what is left: 400, same message start.
    let small = stack.episode("budget-anthropic-small", 100);
    let too_big = small_request_over(100);
    let refused = stack.anthropic(small.token(), &too_big);
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["error"]["type"], "invalid_request_error");
    assert!(refused
        .error_message()
        .starts_with("token budget exhausted: "));
    assert!(small.budget_exhausted());
    assert_eq!(small.usage().calls, 0);
}

/// A request of more than `bytes` bytes.
fn small_request_over(bytes: usize) -> Value {
    json!({"model": "m", "max_tokens": 10, "messages": [user(&"y".repeat(bytes))]})
}

/// The input bound the gateway reserves for a request without tools: its
/// JSON bytes (keys sorted, as forwarded) plus 64.
fn input_bound(body: &Value) -> u64 {
    serde_json::to_vec(body).unwrap().len() as u64 + 64
}

#[test]
fn the_output_cap_is_what_is_left_after_the_input_bound() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("clamp", 1_000);
    let first = json!({"model": "m", "max_tokens": 4096, "messages": [user("x")]});
    stack.openai(episode.token(), &first);
    // 150 used: 850 left.
    let second = json!({"model": "m", "max_completion_tokens": 4096,
            "messages": [user("x"), assistant("y"), user("z")]});
    stack.openai(episode.token(), &second);
    episode.close();
    let lines = trajectory(&stack.trajectory_path("clamp"));
    assert_eq!(
        lines[0]["request"]["max_tokens"],
        1000 - input_bound(&first)
    );
    assert_eq!(lines[0]["usage"]["reserved"], 1000);
    assert_eq!(
        lines[1]["request"]["max_completion_tokens"],
        850 - input_bound(&second)
    );
    assert!(lines[1]["request"].get("max_tokens").is_none());

    // Without a cap in the request, one is always added; a known model's own
    // limit applies; reasoning models get max_completion_tokens.
    let large = stack.episode("no-cap", 1_000_000);
    for model in ["m", "gpt-4o-mini", "o3-mini"] {
        let answer = stack.openai(
            large.token(),
            &json!({"model": model, "messages": [user("x")]}),
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    large.close();
    let lines = trajectory(&stack.trajectory_path("no-cap"));
    let unknown = json!({"model": "m", "messages": [user("x")]});
    assert_eq!(
        lines[0]["request"]["max_tokens"],
        1_000_000 - input_bound(&unknown)
    );
    assert_eq!(lines[1]["request"]["max_tokens"], 16_384);
    assert!(lines[2]["request"]["max_completion_tokens"].is_u64());
    assert!(lines[2]["request"].get("max_tokens").is_none());
}

#[test]
fn total_tokens_never_exceed_the_budget() {
    let upstream = common::CountingUpstream::start(Duration::ZERO);
    for api in [ApiKind::OpenAi, ApiKind::Anthropic] {
        let gateway = gateway_for(api, &upstream.base_url(), None);
        let dir = tempfile::tempdir().unwrap();
        let episode = gateway
            .open_episode(EpisodeSpec {
                id: "cap".into(),
                token_budget: 2_000,
                trajectory_path: dir.path().join("cap.jsonl"),
            })
            .unwrap();
        let http = Http::new();
        let url = format!("{}{}", gateway.base_url(), api.endpoint_path());
        let mut messages = vec![user("start")];
        let mut statuses = Vec::new();
        for _ in 0..8 {
            let body =
                json!({"model": "m", "max_tokens": 4096, "stream": true, "messages": messages});
            statuses.push(
                http.post(&url, &[("authorization", &bearer(episode.token()))], &body)
                    .status,
            );
            messages.push(assistant("..."));
            messages.push(user("continue"));
        }
        let usage = episode.close();
        // Every call is billed its whole cap by this upstream: the first
        // reservation takes all that is left, and every later call is refused.
        assert_eq!(statuses[0], 200, "{api}");
        assert!(
            statuses[1..].iter().all(|s| *s == 400 || *s == 401),
            "{api}: {statuses:?}"
        );
        assert!(usage.total_tokens() <= 2_000, "{api}: {usage:?}");
        assert_eq!(usage.overrun_tokens, 0, "{api}");
        assert!(episode_budget_refused(&usage), "{api}");
    }
}

fn episode_budget_refused(usage: &pdl_episode::Usage) -> bool {
    usage.budget_refusals > 0
}

#[test]
fn the_trajectory_never_contains_the_real_key_or_the_episode_token() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("secrets", 100_000);
    let token = episode.token().to_string();
    let leaky = format!("my key is {REAL_KEY} and my token is {token}");
    for stream in [false, true] {
        let answer = stack.openai(
            &token,
            &json!({"model": "m", "stream": stream, "messages": [user(&leaky)]}),
        );
        assert_eq!(answer.status, 200);
        assert!(!answer.text().contains(REAL_KEY));
    }
    // A refused call records the request as received.
    stack.openai(
        &token,
        &json!({"model": "m", "messages": "not a list", "x": leaky}),
    );
    let wrong_api = stack.anthropic(&token, &json!({"note": leaky}));
    assert_eq!(wrong_api.status, 400);
    episode.close();
    let text = std::fs::read_to_string(stack.trajectory_path("secrets")).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(!text.contains(REAL_KEY));
    assert!(!text.contains(&token));
    assert!(text.contains("my key is [redacted] and my token is [redacted]"));
}

#[test]
fn a_call_to_the_other_apis_endpoint_is_refused_with_400() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("mismatch", 100_000);
    let answer = stack.anthropic(
        episode.token(),
        &json!({"model": "m", "max_tokens": 5, "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["type"], "error");
    let message = answer.error_message();
    assert!(
        message.contains("openai upstream") && message.contains("/v1/chat/completions"),
        "{message}"
    );
    let usage = episode.usage();
    assert_eq!((usage.calls, usage.refused_calls), (0, 1));
}

#[test]
fn an_unreachable_upstream_is_a_502_in_the_providers_format() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    for api in [ApiKind::OpenAi, ApiKind::Anthropic] {
        let gateway = gateway_for(api, &format!("http://127.0.0.1:{closed_port}/v1"), None);
        let path = dir.path().join(format!("{api}.jsonl"));
        let episode = gateway
            .open_episode(EpisodeSpec {
                id: "down".into(),
                token_budget: 1000,
                trajectory_path: path.clone(),
            })
            .unwrap();
        let answer = http.post(
            &format!("{}{}", gateway.base_url(), api.endpoint_path()),
            &[("authorization", &bearer(episode.token()))],
            &json!({"model": "m", "max_tokens": 5, "messages": [user("x")]}),
        );
        assert_eq!(answer.status, 502, "{api}");
        let message = answer.error_message();
        assert!(
            message.contains("cannot reach the upstream model API"),
            "{message}"
        );
        assert!(!answer.text().contains(REAL_KEY));
        match api {
            ApiKind::OpenAi => assert_eq!(answer.json()["error"]["type"], "api_error"),
            ApiKind::Anthropic => assert_eq!(answer.json()["type"], "error"),
        }
        let usage = episode.close();
        assert_eq!((usage.calls, usage.upstream_errors), (1, 1));
        let lines = trajectory(&path);
        assert_eq!(lines[0]["status"], 502);
        assert!(lines[0]["error"].as_str().unwrap().contains("cannot reach"));
    }
}

/// A test upstream that answers 429 to the first `failures` requests, then
/// a fixed completion; it records the headers it got.
fn flaky_upstream(failures: usize, seen: Arc<Mutex<Vec<HeaderMap>>>) -> TestServer {
    let count = Arc::new(AtomicUsize::new(0));
    let handler = move |headers: HeaderMap| {
        let count = count.clone();
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(headers);
            if count.fetch_add(1, Ordering::SeqCst) < failures {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "0"), ("content-type", "application/json")],
                    r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
                )
                    .into_response();
            }
            (
                StatusCode::OK,
                [
                    ("content-type", "application/json"),
                    ("x-request-id", "req-7"),
                ],
                json!({"id": "c", "object": "chat.completion",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 1}})
                .to_string(),
            )
                .into_response()
        }
    };
    TestServer::start(Router::new().route("/v1/chat/completions", post(handler)))
}

#[test]
fn a_429_is_retried_and_the_success_passed_on() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = flaky_upstream(2, seen.clone());
    let gateway = gateway_for(ApiKind::OpenAi, &upstream.base_url(), None);
    let dir = tempfile::tempdir().unwrap();
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "retry".into(),
            token_budget: 1000,
            trajectory_path: dir.path().join("t.jsonl"),
        })
        .unwrap();
    let answer = Http::new().post(
        &format!("{}/v1/chat/completions", gateway.base_url()),
        &[("authorization", &bearer(episode.token()))],
        &json!({"model": "m", "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["choices"][0]["message"]["content"], "ok");
    assert_eq!(answer.headers["x-request-id"], "req-7");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    // The real key went upstream; the episode token did not.
    for headers in seen.iter() {
        assert_eq!(
            headers["authorization"],
            format!("Bearer {REAL_KEY}").as_str()
        );
        assert!(!format!("{headers:?}").contains(episode.token()));
    }
    let usage = episode.usage();
    assert_eq!(
        (usage.calls, usage.upstream_errors, usage.total_tokens()),
        (1, 0, 8)
    );
}

#[test]
fn retries_give_up_after_max_retries_and_pass_the_429_on() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = flaky_upstream(100, seen.clone());
    let gateway = gateway_for(ApiKind::OpenAi, &upstream.base_url(), None);
    let dir = tempfile::tempdir().unwrap();
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "give-up".into(),
            token_budget: 1000,
            trajectory_path: dir.path().join("t.jsonl"),
        })
        .unwrap();
    let answer = Http::new().post(
        &format!("{}/v1/chat/completions", gateway.base_url()),
        &[("authorization", &bearer(episode.token()))],
        &json!({"model": "m", "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 429);
    assert_eq!(answer.error_message(), "slow down");
    assert_eq!(answer.headers["retry-after"], "0");
    assert_eq!(seen.lock().unwrap().len(), 4, "one try and three retries");
    assert_eq!(episode.usage().upstream_errors, 1);
}

#[test]
fn an_upstream_400_is_passed_through_and_recorded() {
    let handler = || async {
        (
            StatusCode::BAD_REQUEST,
            [("content-type", "application/json")],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
        )
    };
    let upstream = TestServer::start(Router::new().route("/v1/messages", post(handler)));
    let gateway = gateway_for(ApiKind::Anthropic, &upstream.base_url(), None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "bad".into(),
            token_budget: 1000,
            trajectory_path: path.clone(),
        })
        .unwrap();
    let answer = Http::new().post(
        &format!("{}/v1/messages", gateway.base_url()),
        &[("x-api-key", episode.token())],
        &json!({"model": "m", "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_message(), "max_tokens: Field required");
    let usage = episode.close();
    assert_eq!(
        (usage.calls, usage.upstream_errors, usage.total_tokens()),
        (1, 1, 0)
    );
    let lines = trajectory(&path);
    assert_eq!(lines[0]["status"], 400);
    assert_eq!(
        lines[0]["response"]["error"]["message"],
        "max_tokens: Field required"
    );
    assert_eq!(lines[0]["error"], "the upstream answered 400 Bad Request");
}

#[test]
fn anthropic_headers_are_set_and_passed_through() {
    let seen = Arc::new(Mutex::new(Vec::<HeaderMap>::new()));
    let recorder = {
        let seen = seen.clone();
        move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(headers);
                (
                    [("content-type", "application/json")],
                    json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "hi"}],
                           "stop_reason": "end_turn",
                           "usage": {"input_tokens": 3, "cache_read_input_tokens": 10, "output_tokens": 1}})
                    .to_string(),
                )
            }
        }
    };
    let upstream = TestServer::start(Router::new().route("/v1/messages", post(recorder)));
    let gateway = gateway_for(ApiKind::Anthropic, &upstream.base_url(), None);
    let dir = tempfile::tempdir().unwrap();
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "headers".into(),
            token_budget: 1000,
            trajectory_path: dir.path().join("t.jsonl"),
        })
        .unwrap();
    let http = Http::new();
    let url = format!("{}/v1/messages", gateway.base_url());
    let body = json!({"model": "m", "max_tokens": 10, "messages": [user("x")]});
    http.post(&url, &[("authorization", &bearer(episode.token()))], &body);
    http.post(
        &url,
        &[
            ("x-api-key", episode.token()),
            ("anthropic-version", "2024-01-01"),
            ("anthropic-beta", "prompt-caching-2024-07-31"),
        ],
        &body,
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0]["x-api-key"], REAL_KEY);
    assert_eq!(seen[0]["anthropic-version"], "2023-06-01");
    assert!(seen[0].get("authorization").is_none());
    assert_eq!(seen[1]["x-api-key"], REAL_KEY);
    assert_eq!(seen[1]["anthropic-version"], "2024-01-01");
    assert_eq!(seen[1]["anthropic-beta"], "prompt-caching-2024-07-31");
    // Cache reads count as input.
    assert_eq!(episode.usage().input_tokens, 26);
}

#[test]
fn a_stream_without_usage_is_estimated_and_marked() {
    let handler = || async {
        let body = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "0123456789abcdef"}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ]
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect::<String>()
            + "data: [DONE]\n\n";
        ([("content-type", "text/event-stream")], body)
    };
    let upstream = TestServer::start(Router::new().route("/v1/chat/completions", post(handler)));
    let gateway = gateway_for(ApiKind::OpenAi, &upstream.base_url(), None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "estimate".into(),
            token_budget: 1000,
            trajectory_path: path.clone(),
        })
        .unwrap();
    let answer = Http::new().post(
        &format!("{}/v1/chat/completions", gateway.base_url()),
        &[("authorization", &bearer(episode.token()))],
        &json!({"model": "m", "stream": true, "messages": [user("hello there")]}),
    );
    assert_eq!(answer.status, 200);
    assert_eq!(answer.events().len(), 4);
    let usage = episode.close();
    assert_eq!(usage.estimated_calls, 1);
    assert_eq!(usage.output_tokens, 4);
    assert!(usage.input_tokens >= 1);
    let line = &trajectory(&path)[0];
    assert_eq!(line["usage"]["estimated"], true);
    assert_eq!(line["usage"]["output_tokens"], 4);
}

#[test]
fn streams_are_passed_on_as_they_arrive() {
    let mut config = ReplayConfig::new(two_turns());
    config.stream_chunk_delay = Duration::from_millis(120);
    let stack = Stack::with_config(ApiKind::OpenAi, config);
    let episode = stack.episode("live", 100_000);
    let answer = stack.openai(
        episode.token(),
        &json!({"model": "m", "stream": true, "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 200);
    let (first, last) = (answer.frame_times[0], *answer.frame_times.last().unwrap());
    // The replay stream has more than ten events 120 ms apart: a buffering
    // gateway would deliver everything at once at the end.
    assert!(answer.frame_times.len() >= 5, "{:?}", answer.frame_times);
    assert!(
        last - first >= Duration::from_millis(600),
        "first frame at {first:?}, last at {last:?}"
    );
}

#[test]
fn the_unix_socket_listener_serves_raw_http() {
    let model = ReplayServer::start(ReplayConfig::new(two_turns())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gateway.sock");
    let gateway = gateway_for(ApiKind::OpenAi, &model.base_url(), Some(&socket));
    assert_eq!(gateway.unix_socket(), Some(socket.as_path()));
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "unix".into(),
            token_budget: 1000,
            trajectory_path: dir.path().join("t.jsonl"),
        })
        .unwrap();
    let body = json!({"model": "m", "messages": [user("x")]}).to_string();
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        episode.token(),
        body.len(),
        body
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    let json: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        json["choices"][0]["message"]["content"],
        "Let me look at the files."
    );
    assert_eq!(episode.usage().total_tokens(), 150);
    drop(episode);
    gateway.shutdown();
    assert!(!socket.exists(), "the socket file is removed on shutdown");
}

#[test]
fn models_are_listed_for_a_valid_token_only() {
    let stack = Stack::new(ApiKind::OpenAi, two_turns());
    let episode = stack.episode("models", 10);
    let url = format!("{}/v1/models", stack.gateway.base_url());
    let listed = stack
        .http
        .get(&url, &[("authorization", &bearer(episode.token()))]);
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["data"][0]["id"], "gpt-test");
    assert_eq!(listed.json()["object"], "list");
    let anthropic = stack.http.get(
        &format!("{}/models", stack.gateway.base_url()),
        &[
            ("x-api-key", episode.token()),
            ("anthropic-version", "2023-06-01"),
        ],
    );
    assert_eq!(anthropic.json()["data"][0]["type"], "model");
    let denied = stack.http.get(&url, &[]);
    assert_eq!(denied.status, 401);
    let unknown_route = stack
        .http
        .get(&format!("{}/v1/other", stack.gateway.base_url()), &[]);
    assert_eq!(unknown_route.status, 404);
}

#[test]
fn sixty_four_concurrent_streamed_sessions_are_metered_apart() {
    const SESSIONS: usize = 64;
    let conversations: Vec<Value> = (0..SESSIONS)
        .map(|k| {
            json!({"match": format!("session-{k:02}"), "replies": [
                {"content": format!("first answer of {k}"),
                 "tool_calls": [{"name": "run_shell", "arguments": {"command": format!("echo {k}")}}],
                 "usage": {"input_tokens": 100 + k, "output_tokens": 10 + k}},
                {"content": format!("done {k}"), "usage": {"input_tokens": 1000 + k, "output_tokens": 1}}
            ]})
        })
        .collect();
    let mut config = ReplayConfig::new(script(json!({"conversations": conversations})));
    config.stream_chunk_delay = Duration::from_millis(2);
    let stack = Stack::with_config(ApiKind::OpenAi, config);
    let episodes: Vec<EpisodeHandle> = (0..SESSIONS)
        .map(|k| stack.episode(&format!("ep{k}"), 1_000_000))
        .collect();
    let url = format!("{}/v1/chat/completions", stack.gateway.base_url());
    let client = stack.http.client();
    let tasks: Vec<_> = episodes
        .iter()
        .enumerate()
        .map(|(k, episode)| {
            let (client, url, token) = (client.clone(), url.clone(), bearer(episode.token()));
            stack.http.rt.spawn(async move {
                let mut messages = vec![user(&format!("session-{k:02}: fix it"))];
                let mut texts = Vec::new();
                for _ in 0..2 {
                    let body =
                        json!({"model": "m", "stream": true, "messages": messages}).to_string();
                    let answer = common::send(
                        &client,
                        Method::POST,
                        &url,
                        &[("authorization", &token)],
                        Some(body),
                    )
                    .await;
                    assert_eq!(answer.status, 200);
                    let text: String = answer
                        .events()
                        .iter()
                        .filter_map(|e| {
                            e.pointer("/choices/0/delta/content")
                                .and_then(Value::as_str)
                        })
                        .collect();
                    messages.push(assistant(&text));
                    messages.push(user("go on"));
                    texts.push(text);
                }
                texts
            })
        })
        .collect();
    for (k, task) in tasks.into_iter().enumerate() {
        let texts = stack.http.rt.block_on(task).unwrap();
        assert_eq!(texts, [format!("first answer of {k}"), format!("done {k}")]);
    }
    for (k, episode) in episodes.into_iter().enumerate() {
        let k = k as u64;
        let usage = episode.close();
        assert_eq!(usage.input_tokens, 100 + k + 1000 + k, "session {k}");
        assert_eq!(usage.output_tokens, 10 + k + 1, "session {k}");
        assert_eq!((usage.calls, usage.estimated_calls), (2, 0), "session {k}");
    }
}

#[test]
fn an_upstream_that_does_not_answer_in_time_is_a_504() {
    let handler = || async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        "late"
    };
    let upstream = TestServer::start(Router::new().route("/v1/chat/completions", post(handler)));
    let mut config = UpstreamConfig::new(ApiKind::OpenAi, upstream.base_url());
    config.request_timeout = Duration::from_millis(300);
    let gateway = Gateway::start(GatewayConfig::new(config)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "slow".into(),
            token_budget: 1000,
            trajectory_path: dir.path().join("t.jsonl"),
        })
        .unwrap();
    let answer = Http::new().post(
        &format!("{}/v1/chat/completions", gateway.base_url()),
        &[("authorization", &bearer(episode.token()))],
        &json!({"model": "m", "messages": [user("x")]}),
    );
    assert_eq!(answer.status, 504);
    assert!(
        answer
            .error_message()
            .contains("did not answer within 300ms"),
        "{}",
        answer.text()
    );
    assert_eq!(episode.usage().upstream_errors, 1);
}

#[test]
fn a_client_that_goes_away_mid_stream_is_charged_its_whole_reservation() {
    let mut config = ReplayConfig::new(two_turns());
    config.stream_chunk_delay = Duration::from_millis(200);
    let stack = Stack::with_config(ApiKind::OpenAi, config);
    let episode = stack.episode("gone", 100_000);
    let url = format!("{}/v1/chat/completions", stack.gateway.base_url());
    let client = stack.http.client();
    let token = bearer(episode.token());
    stack.http.rt.block_on(async {
        use http_body_util::{BodyExt, Full};
        let request = axum::http::Request::post(url)
            .header("authorization", token)
            .body(Full::new(bytes::Bytes::from(
                json!({"model": "m", "max_tokens": 4000, "stream": true, "messages": [user("x")]})
                    .to_string(),
            )))
            .unwrap();
        let response = client.request(request).await.unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        // Dropping the body closes the connection.
    });
    let usage = episode.close();
    assert_eq!(
        (usage.calls, usage.abandoned_calls, usage.upstream_errors),
        (1, 1, 0)
    );
    let line = &trajectory(&stack.trajectory_path("gone"))[0];
    assert_eq!(
        line["error"],
        "the client went away before the stream ended"
    );
    assert_eq!(line["abandoned"], true);
    assert_eq!(line["usage"]["reserved"], usage.total_tokens());
    assert_eq!(line["request"]["max_tokens"], 4000);
}

/// A TLS model server with the fixture certificate (for `localhost` and
/// `127.0.0.1`, issued by the fixture CA) that answers every request with a
/// fixed completion and closes the connection.
fn tls_upstream() -> (tokio::runtime::Runtime, std::net::SocketAddr) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let fixture = |name: &str| {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/tls")
                .join(name),
        )
        .unwrap()
    };
    let certs = vec![CertificateDer::from(fixture("server.der"))];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(fixture("server.key.der")));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
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
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let body_len = loop {
                    let n = tls.read(&mut buf).await.unwrap();
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                        break end + 4 + length;
                    }
                };
                while request.len() < body_len {
                    let n = tls.read(&mut buf).await.unwrap();
                    request.extend_from_slice(&buf[..n]);
                }
                let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "over tls"}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
                .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                tls.write_all(response.as_bytes()).await.unwrap();
                tls.shutdown().await.ok();
            });
        }
    });
    (rt, addr)
}

#[test]
fn https_upstreams_are_verified_and_used() {
    let (_server, addr) = tls_upstream();
    let ca = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/ca.der"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    for trusted in [true, false] {
        let mut upstream = UpstreamConfig::new(
            ApiKind::OpenAi,
            format!("https://127.0.0.1:{}/v1", addr.port()),
        )
        .with_api_key(REAL_KEY);
        upstream.max_retries = 0;
        if trusted {
            upstream.extra_root_certificates = vec![ca.clone()];
        }
        let gateway = Gateway::start(GatewayConfig::new(upstream)).unwrap();
        let episode = gateway
            .open_episode(EpisodeSpec {
                id: format!("tls-{trusted}"),
                token_budget: 1000,
                trajectory_path: dir.path().join(format!("{trusted}.jsonl")),
            })
            .unwrap();
        let answer = http.post(
            &format!("{}/v1/chat/completions", gateway.base_url()),
            &[("authorization", &bearer(episode.token()))],
            &json!({"model": "m", "messages": [user("x")]}),
        );
        if trusted {
            assert_eq!(answer.status, 200, "{}", answer.text());
            assert_eq!(
                answer.json()["choices"][0]["message"]["content"],
                "over tls"
            );
            assert_eq!(episode.usage().total_tokens(), 7);
        } else {
            // The fixture CA is not among the platform's roots.
            assert_eq!(answer.status, 502, "{}", answer.text());
            let message = answer.error_message().to_lowercase();
            assert!(message.contains("certificate"), "{message}");
        }
    }
}
