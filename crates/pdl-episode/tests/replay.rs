//! The replay model over real HTTP: turn selection, matching, both APIs' formats,
//! streaming, exhaustion, and re-running a recorded trajectory.

mod common;

use std::time::{Duration, Instant};

use common::{bearer, script, Answer, Http, REAL_KEY};
use pdl_episode::{
    ApiKind, EpisodeSpec, Gateway, GatewayConfig, ReplayConfig, ReplayError, ReplayScript,
    ReplayServer, UpstreamConfig,
};
use serde_json::{json, Value};

struct Replay {
    server: ReplayServer,
    http: Http,
}

impl Replay {
    fn new(script: ReplayScript) -> Replay {
        Replay {
            server: ReplayServer::start(ReplayConfig::new(script)).unwrap(),
            http: Http::new(),
        }
    }

    fn openai(&self, body: &Value) -> Answer {
        self.http.post(
            &format!("{}/chat/completions", self.server.base_url()),
            &[],
            body,
        )
    }

    fn anthropic(&self, body: &Value) -> Answer {
        self.http
            .post(&format!("{}/messages", self.server.base_url()), &[], body)
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

fn three_replies() -> ReplayScript {
    script(json!({"conversations": [{"replies": [
        {"content": "zero"}, {"content": "one"}, {"content": "two", "finish": true}
    ]}]}))
}

fn openai_content(answer: &Answer) -> String {
    answer.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_reply_is_chosen_by_the_number_of_assistant_messages() {
    let replay = Replay::new(three_replies());
    let mut messages = vec![user("hi")];
    for expected in ["zero", "one", "two"] {
        let answer = replay.openai(&json!({"model": "m", "messages": messages}));
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(openai_content(&answer), expected);
        messages.push(assistant(expected));
        messages.push(user("next"));
    }
    // Stateless: asking again with one assistant message gives reply 1 again.
    let again =
        replay.openai(&json!({"model": "m", "messages": [user("a"), assistant("b"), user("c")]}));
    assert_eq!(openai_content(&again), "one");
}

#[test]
fn the_first_matching_conversation_is_used() {
    let replay = Replay::new(script(json!({"conversations": [
        {"match": "alpha task", "replies": [{"content": "alpha reply"}]},
        {"match": "beta", "replies": [{"content": "beta reply"}]},
        {"replies": [{"content": "fallback reply"}]}
    ]})));
    let openai = |text: &str| openai_content(&replay.openai(&json!({"messages": [user(text)]})));
    assert_eq!(openai("please do the alpha task now"), "alpha reply");
    assert_eq!(openai("beta and alpha task both"), "alpha reply");
    assert_eq!(openai("just beta"), "beta reply");
    assert_eq!(openai("something else"), "fallback reply");
    // The system prompt is searched too, in either form.
    let anthropic = replay.anthropic(
        &json!({"max_tokens": 100, "system": [{"type": "text", "text": "you do beta"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}),
    );
    assert_eq!(anthropic.json()["content"][0]["text"], "beta reply");
    let openai_system = replay.openai(
        &json!({"messages": [{"role": "system", "content": "the alpha task"}, user("go")]}),
    );
    assert_eq!(openai_content(&openai_system), "alpha reply");
}

#[test]
fn no_matching_conversation_and_an_exhausted_script_are_400s() {
    let replay = Replay::new(script(json!({"conversations": [
        {"match": "only this", "replies": [{"content": "a"}, {"content": "b"}]}
    ]})));
    let unmatched = replay.openai(&json!({"messages": [user("other")]}));
    assert_eq!(unmatched.status, 400);
    assert!(unmatched.error_message().contains("no conversation"));

    let exhausted = replay.openai(&json!({"messages": [
        user("only this"), assistant("a"), user("x"), assistant("b"), user("y")]}));
    assert_eq!(exhausted.status, 400);
    assert!(
        exhausted
            .error_message()
            .starts_with("replay script exhausted after 2 replies"),
        "{}",
        exhausted.error_message()
    );
    let anthropic = replay.anthropic(&json!({"max_tokens": 5, "messages": [
        user("only this"), assistant("a"), user("x"), assistant("b"), user("y")]}));
    assert_eq!(anthropic.status, 400);
    assert_eq!(anthropic.json()["error"]["type"], "invalid_request_error");

    let not_json = replay.http.post(
        &format!("{}/chat/completions", replay.server.base_url()),
        &[],
        &json!("a string"),
    );
    assert_eq!(not_json.status, 400);
}

fn tool_script() -> ReplayScript {
    script(json!({"conversations": [{"replies": [
        {"content": "Running it.",
         "tool_calls": [{"name": "run_shell", "arguments": {"command": "pytest -q"}},
                        {"name": "view", "arguments": {"path": "src/lib.py"}}],
         "usage": {"input_tokens": 321, "output_tokens": 45}},
        {"content": "All green."}
    ]}]}))
}

#[test]
fn openai_streams_carry_content_tool_call_deltas_and_optional_usage() {
    let replay = Replay::new(tool_script());
    let answer = replay.openai(&json!({"model": "gpt-x", "stream": true,
        "stream_options": {"include_usage": true}, "messages": [user("test")]}));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let events = answer.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = &events[..events.len() - 1];
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-x"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content_pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert!(content_pieces.len() > 1, "content is streamed in pieces");
    assert_eq!(content_pieces.concat(), "Running it.");
    let mut arguments = [String::new(), String::new()];
    let mut names = Vec::new();
    for chunk in chunks {
        for call in chunk
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                names.push((name.to_string(), call["id"].as_str().unwrap().to_string()));
            }
            arguments[index].push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(
        names,
        [
            ("run_shell".to_string(), "call_0_0_0".to_string()),
            ("view".to_string(), "call_0_0_1".to_string())
        ]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&arguments[0]).unwrap(),
        json!({"command": "pytest -q"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&arguments[1]).unwrap(),
        json!({"path": "src/lib.py"})
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366})
    );

    // Without include_usage there is no usage chunk.
    let plain = replay.openai(&json!({"stream": true, "messages": [user("test")]}));
    let events = plain.events();
    assert!(events.iter().all(|e| e.get("usage").is_none()));
    assert_eq!(
        events[events.len() - 2]["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[test]
fn anthropic_streams_follow_the_messages_event_sequence() {
    let replay = Replay::new(tool_script());
    let answer = replay.anthropic(
        &json!({"model": "claude-x", "max_tokens": 1000, "stream": true,
        "messages": [user("test")]}),
    );
    assert_eq!(answer.status, 200);
    let names = answer.event_names();
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(
        names
            .iter()
            .skip(3)
            .take_while(|n| *n == "content_block_delta")
            .map(|_| "content_block_delta"),
    );
    assert_eq!(&names[..expected.len()], expected.as_slice());
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let events = answer.events();
    assert_eq!(events[0]["message"]["usage"]["input_tokens"], 321);
    assert_eq!(events[0]["message"]["model"], "claude-x");
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(starts.len(), 3);
    assert_eq!(starts[1]["content_block"]["type"], "tool_use");
    assert_eq!(starts[1]["content_block"]["id"], "toolu_0_0_0");
    assert_eq!(starts[2]["content_block"]["name"], "view");
    let json_for = |index: u64| -> Value {
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "content_block_delta" && e["index"] == index)
            .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_string())
            .collect();
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(json_for(1), json!({"command": "pytest -q"}));
    assert_eq!(json_for(2), json!({"path": "src/lib.py"}));
    let delta = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 45);
}

#[test]
fn usage_defaults_to_an_estimate() {
    let replay = Replay::new(three_replies());
    let messages = json!([user("a question of some length")]);
    let answer = replay.anthropic(&json!({"max_tokens": 100, "messages": messages}));
    let usage = &answer.json()["usage"];
    let expected_input = (serde_json::to_vec(&messages).unwrap().len() as u64).div_ceil(4);
    assert_eq!(usage["input_tokens"], expected_input);
    assert_eq!(
        usage["output_tokens"], 1,
        "\"zero\" is four bytes: one token"
    );
}

#[test]
fn latency_delays_each_reply() {
    let mut config = ReplayConfig::new(three_replies());
    config.latency = Duration::from_millis(250);
    let server = ReplayServer::start(config).unwrap();
    let http = Http::new();
    let started = Instant::now();
    let answer = http.post(
        &format!("{}/chat/completions", server.base_url()),
        &[],
        &json!({"messages": [user("x")]}),
    );
    assert_eq!(answer.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[test]
fn models_are_listed() {
    let replay = Replay::new(three_replies());
    let answer = replay
        .http
        .get(&format!("{}/models", replay.server.base_url()), &[]);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["data"][0]["id"], "replay");
}

#[test]
fn script_load_errors_name_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-script.json");
    std::fs::write(
        &path,
        r#"{"conversations": [{"replies": [{"content": "ok", "usage": {"input_tokens": 1}}]}]}"#,
    )
    .unwrap();
    let err = ReplayScript::load(&path).unwrap_err();
    match &err {
        ReplayError::Field { field, .. } => {
            assert_eq!(field, "conversations[0].replies[0].usage.output_tokens")
        }
        other => panic!("unexpected error {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("bad-script.json"), "{message}");
    assert!(
        message.contains("conversations[0].replies[0].usage.output_tokens"),
        "{message}"
    );
    assert!(message.contains("is missing"), "{message}");
}

/// Drives a two-turn agent conversation against `base` (with a token when it is
/// a gateway) and returns each response body.
fn converse(
    http: &Http,
    api: ApiKind,
    base: &str,
    token: Option<&str>,
    stream: bool,
) -> Vec<Value> {
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth.iter().map(|t| ("authorization", t.as_str())).collect();
    let mut messages = vec![user("record me")];
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let body =
            json!({"model": "m", "max_tokens": 4000, "stream": stream, "messages": messages});
        let answer = match api {
            ApiKind::OpenAi => http.post(&format!("{base}/chat/completions"), &headers, &body),
            ApiKind::Anthropic => http.post(&format!("{base}/messages"), &headers, &body),
        };
        assert_eq!(answer.status, 200, "{}", answer.text());
        let response = if stream {
            json!(answer.events())
        } else {
            answer.json()
        };
        bodies.push(response);
        messages.push(assistant("(reply)"));
        messages.push(user("continue"));
    }
    bodies
}

/// The parts of a response that must replay exactly (not ids of the response or
/// creation times).
fn essence(api: ApiKind, body: &Value) -> Value {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("id");
            map.remove("created");
        }
        v
    };
    match body {
        Value::Array(events) => json!(events
            .iter()
            .map(|e| match api {
                ApiKind::OpenAi => strip(e),
                ApiKind::Anthropic => {
                    let mut e = e.clone();
                    if let Some(message) = e.get_mut("message") {
                        *message = strip(message);
                    }
                    e
                }
            })
            .collect::<Vec<_>>()),
        other => strip(other),
    }
}

#[test]
fn a_recorded_trajectory_replays_the_same_replies() {
    for api in [ApiKind::OpenAi, ApiKind::Anthropic] {
        for stream in [false, true] {
            let original = ReplayServer::start(ReplayConfig::new(tool_script())).unwrap();
            let mut upstream = UpstreamConfig::new(api, original.base_url()).with_api_key(REAL_KEY);
            upstream.max_retries = 0;
            let gateway = Gateway::start(GatewayConfig::new(upstream)).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("recorded.jsonl");
            let episode = gateway
                .open_episode(EpisodeSpec {
                    id: "record".into(),
                    token_budget: 1_000_000,
                    trajectory_path: path.clone(),
                })
                .unwrap();
            let http = Http::new();
            let recorded = converse(
                &http,
                api,
                &gateway.openai_base_url(),
                Some(episode.token()),
                stream,
            );
            let usage = episode.close();

            let rebuilt = ReplayScript::from_trajectory(&path).unwrap();
            assert_eq!(rebuilt.conversations.len(), 1);
            assert_eq!(rebuilt.reply_count(), 2);
            let saved = dir.path().join("rebuilt.json");
            rebuilt.save(&saved).unwrap();
            let reloaded = ReplayScript::load(&saved).unwrap();
            assert_eq!(reloaded, rebuilt);

            let replay = ReplayServer::start(ReplayConfig::new(reloaded)).unwrap();
            let replayed = converse(&http, api, &replay.base_url(), None, stream);
            for (a, b) in recorded.iter().zip(&replayed) {
                assert_eq!(essence(api, a), essence(api, b), "{api} stream={stream}");
            }
            // The replayed usage is the recorded one, so a re-run is charged the same.
            let replayed_usage: u64 = rebuilt.conversations[0]
                .replies
                .iter()
                .map(|r| r.usage.map_or(0, |u| u.input_tokens + u.output_tokens))
                .sum();
            assert_eq!(
                replayed_usage,
                usage.total_tokens(),
                "{api} stream={stream}"
            );
        }
    }
}

#[test]
fn from_trajectory_reports_the_line_of_a_bad_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "{\"status\": 401, \"refused\": true}\nnot json\n").unwrap();
    let err = ReplayScript::from_trajectory(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("t.jsonl, line 2"), "{err}");
    std::fs::write(&path, "{\"status\": 401, \"refused\": true}\n").unwrap();
    let err = ReplayScript::from_trajectory(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no successful exchange"), "{err}");
}
