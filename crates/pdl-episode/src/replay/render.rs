//! Rendering a scripted [`Reply`] as a response of either API ([`Rendered`]):
//! complete JSON or a realistic server-sent event stream.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::script::{Reply, ReplyUsage, ToolCall};
use crate::provider::{estimate_input_tokens, tokens_for_bytes, ApiKind};

/// How many pieces a streamed text or argument string is cut into.
const STREAM_PIECES: usize = 3;

/// Why the reply stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// It ended normally.
    End,
    /// It calls tools.
    ToolUse,
    /// It was cut at the request's output cap.
    MaxTokens,
}

/// One reply, ready to render for one request.
#[derive(Debug)]
pub(crate) struct Rendered<'a> {
    api: ApiKind,
    conversation: usize,
    turn: usize,
    model: String,
    content: Option<String>,
    tool_calls: &'a [ToolCall],
    usage: ReplyUsage,
    stop: Stop,
    created: u64,
}

impl<'a> Rendered<'a> {
    /// The reply for `request`: usage as scripted or estimated, cut to the
    /// request's output cap when it asks for fewer tokens than the reply has.
    pub(crate) fn new(
        api: ApiKind,
        conversation: usize,
        turn: usize,
        reply: &'a Reply,
        request: &Value,
    ) -> Rendered<'a> {
        let mut usage = reply.usage.unwrap_or_else(|| ReplyUsage {
            input_tokens: estimate_input_tokens(request),
            output_tokens: estimated_output(reply),
        });
        let mut content = reply.content.clone();
        let mut tool_calls: &[ToolCall] = &reply.tool_calls;
        let mut stop = if tool_calls.is_empty() {
            Stop::End
        } else {
            Stop::ToolUse
        };
        if let Some(cap) = output_cap(api, request).filter(|cap| *cap < usage.output_tokens) {
            content = Some(truncate(
                content.as_deref().unwrap_or(""),
                cap,
                usage.output_tokens,
            ));
            tool_calls = &[];
            stop = Stop::MaxTokens;
            usage.output_tokens = cap;
        }
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("replay")
            .to_string();
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Rendered {
            api,
            conversation,
            turn,
            model,
            content,
            tool_calls,
            usage,
            stop,
            created,
        }
    }

    /// The input and output tokens the response reports.
    pub(crate) fn total_tokens(&self) -> u64 {
        self.usage.input_tokens + self.usage.output_tokens
    }

    /// The complete (not streamed) response body.
    pub(crate) fn json(&self) -> Value {
        match self.api {
            ApiKind::OpenAi => self.openai_json(),
            ApiKind::Anthropic => self.anthropic_json(),
        }
    }

    /// The streamed response, one item per event. `include_usage` adds OpenAI's
    /// usage chunk (Anthropic streams always carry usage).
    pub(crate) fn events(&self, include_usage: bool) -> Vec<Bytes> {
        match self.api {
            ApiKind::OpenAi => self.openai_events(include_usage),
            ApiKind::Anthropic => self.anthropic_events(),
        }
    }

    fn tool_id(&self, n: usize, call: &ToolCall) -> String {
        if let Some(id) = &call.id {
            return id.clone();
        }
        let prefix = match self.api {
            ApiKind::OpenAi => "call",
            ApiKind::Anthropic => "toolu",
        };
        format!("{prefix}_{}_{}_{n}", self.conversation, self.turn)
    }

    fn openai_finish_reason(&self) -> &'static str {
        match self.stop {
            Stop::End => "stop",
            Stop::ToolUse => "tool_calls",
            Stop::MaxTokens => "length",
        }
    }

    fn anthropic_stop_reason(&self) -> &'static str {
        match self.stop {
            Stop::End => "end_turn",
            Stop::ToolUse => "tool_use",
            Stop::MaxTokens => "max_tokens",
        }
    }

    fn openai_id(&self) -> String {
        format!("chatcmpl-replay-{}-{}", self.conversation, self.turn)
    }

    fn openai_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.usage.input_tokens,
            "completion_tokens": self.usage.output_tokens,
            "total_tokens": self.usage.input_tokens + self.usage.output_tokens,
        })
    }

    fn openai_json(&self) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .enumerate()
                .map(|(n, call)| {
                    json!({
                        "id": self.tool_id(n, call),
                        "type": "function",
                        "function": {"name": call.name, "arguments": arguments_text(call)},
                    })
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        message.insert("refusal".into(), Value::Null);
        json!({
            "id": self.openai_id(),
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.openai_finish_reason(),
            }],
            "usage": self.openai_usage(),
        })
    }

    fn openai_chunk(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        sse_data(&json!({
            "id": self.openai_id(),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        }))
    }

    fn openai_events(&self, include_usage: bool) -> Vec<Bytes> {
        let mut events = vec![self.openai_chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(content) = self.content.as_deref().filter(|c| !c.is_empty()) {
            for piece in pieces(content) {
                events.push(self.openai_chunk(json!({"content": piece}), None));
            }
        }
        for (n, call) in self.tool_calls.iter().enumerate() {
            events.push(self.openai_chunk(
                json!({"tool_calls": [{
                    "index": n,
                    "id": self.tool_id(n, call),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}),
                None,
            ));
            for piece in pieces(&arguments_text(call)) {
                events.push(self.openai_chunk(
                    json!({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        events.push(self.openai_chunk(json!({}), Some(self.openai_finish_reason())));
        if include_usage {
            events.push(sse_data(&json!({
                "id": self.openai_id(),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.openai_usage(),
            })));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        events
    }

    fn anthropic_id(&self) -> String {
        format!("msg_replay_{}_{}", self.conversation, self.turn)
    }

    fn anthropic_blocks(&self) -> Vec<Value> {
        let mut blocks = Vec::new();
        let text = self.content.as_deref().unwrap_or("");
        if !text.is_empty() || self.tool_calls.is_empty() {
            blocks.push(json!({"type": "text", "text": text}));
        }
        for (n, call) in self.tool_calls.iter().enumerate() {
            blocks.push(json!({
                "type": "tool_use",
                "id": self.tool_id(n, call),
                "name": call.name,
                "input": arguments_object(call),
            }));
        }
        blocks
    }

    fn anthropic_json(&self) -> Value {
        json!({
            "id": self.anthropic_id(),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.anthropic_blocks(),
            "stop_reason": self.anthropic_stop_reason(),
            "stop_sequence": null,
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
        })
    }

    fn anthropic_events(&self) -> Vec<Bytes> {
        let mut events = vec![
            sse_event(
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": self.anthropic_id(),
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {
                        "input_tokens": self.usage.input_tokens,
                        "output_tokens": self.usage.output_tokens.min(1),
                    },
                }}),
            ),
            sse_event("ping", &json!({"type": "ping"})),
        ];
        for (index, block) in self.anthropic_blocks().into_iter().enumerate() {
            let (start, deltas) = if block["type"] == "text" {
                let text = block["text"].as_str().unwrap_or("").to_string();
                let deltas: Vec<Value> = pieces(&text)
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| json!({"type": "text_delta", "text": p}))
                    .collect();
                (json!({"type": "text", "text": ""}), deltas)
            } else {
                let input = serde_json::to_string(&block["input"]).unwrap_or_default();
                let deltas: Vec<Value> = pieces(&input)
                    .into_iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect();
                (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    deltas,
                )
            };
            events.push(sse_event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            for delta in deltas {
                events.push(sse_event(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index, "delta": delta}),
                ));
            }
            events.push(sse_event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
        events.push(sse_event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.anthropic_stop_reason(), "stop_sequence": null},
                "usage": {"output_tokens": self.usage.output_tokens},
            }),
        ));
        events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
        events
    }
}

/// The output cap a request asks for: OpenAI `max_completion_tokens` or
/// `max_tokens` (the smaller), Anthropic `max_tokens`.
pub(crate) fn output_cap(api: ApiKind, request: &Value) -> Option<u64> {
    let keys: &[&str] = match api {
        ApiKind::OpenAi => &["max_completion_tokens", "max_tokens"],
        ApiKind::Anthropic => &["max_tokens"],
    };
    keys.iter()
        .filter_map(|key| request.get(*key).and_then(Value::as_u64))
        .min()
}

/// The estimated output tokens of a reply: its text and its tool calls
/// (arguments, names and ids) at four bytes a token, at least 1.
pub(crate) fn estimated_output(reply: &Reply) -> u64 {
    let bytes = reply.content.as_deref().map_or(0, str::len)
        + reply
            .tool_calls
            .iter()
            .map(|call| {
                arguments_text(call).len()
                    + call.name.len()
                    + call.id.as_deref().map_or(0, str::len)
            })
            .sum::<usize>();
    tokens_for_bytes(bytes).max(1)
}

/// The first `cap / total` of `text`, by characters.
fn truncate(text: &str, cap: u64, total: u64) -> String {
    let chars = text.chars().count() as u64;
    let keep = chars.saturating_mul(cap) / total.max(1);
    text.chars()
        .take(usize::try_from(keep).unwrap_or(usize::MAX))
        .collect()
}

/// Arguments as OpenAI's JSON text: a string verbatim, anything else serialized.
fn arguments_text(call: &ToolCall) -> String {
    match &call.arguments {
        Value::String(text) => text.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Arguments as Anthropic's `input` object: a string is parsed, and kept under
/// `"arguments"` when it is not a JSON object.
fn arguments_object(call: &ToolCall) -> Value {
    match &call.arguments {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({ "arguments": text }),
        },
        other => other.clone(),
    }
}

/// `text` cut into a few pieces at character boundaries.
fn pieces(text: &str) -> Vec<&str> {
    let chars = text.chars().count();
    if chars <= 1 {
        return vec![text];
    }
    let size = chars.div_ceil(STREAM_PIECES);
    let mut out = Vec::with_capacity(STREAM_PIECES);
    let mut start = 0;
    for (n, (offset, _)) in text.char_indices().enumerate() {
        if n > 0 && n % size == 0 {
            out.push(&text[start..offset]);
            start = offset;
        }
    }
    out.push(&text[start..]);
    out
}

fn sse_data(payload: &Value) -> Bytes {
    Bytes::from(format!("data: {payload}\n\n"))
}

fn sse_event(name: &str, payload: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {payload}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(content: &str, calls: Vec<ToolCall>) -> Reply {
        Reply {
            content: Some(content.into()),
            tool_calls: calls,
            ..Reply::default()
        }
    }

    #[test]
    fn pieces_cover_the_text_at_char_boundaries() {
        for text in ["", "a", "héllo wörld", "abcdefghij"] {
            let parts = pieces(text);
            assert!(parts.len() <= STREAM_PIECES);
            assert_eq!(parts.concat(), text);
        }
        assert_eq!(pieces("abcdefghij").len(), 3);
    }

    #[test]
    fn default_usage_is_estimated_from_the_request_and_the_reply() {
        let request = json!({"messages": [{"role": "user", "content": "hi"}]});
        let r = reply("12345678", vec![]);
        let rendered = Rendered::new(ApiKind::OpenAi, 0, 0, &r, &request);
        assert_eq!(rendered.usage.output_tokens, 2);
        assert_eq!(rendered.usage.input_tokens, estimate_input_tokens(&request));
        let body = rendered.json();
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["completion_tokens"], 2);
    }

    #[test]
    fn the_output_cap_truncates_the_reply() {
        let call = ToolCall {
            id: None,
            name: "run".into(),
            arguments: json!({"command": "ls"}),
        };
        let mut r = reply("0123456789", vec![call]);
        r.usage = Some(ReplyUsage {
            input_tokens: 5,
            output_tokens: 10,
        });
        let request = json!({"messages": [], "max_tokens": 4});
        let rendered = Rendered::new(ApiKind::Anthropic, 0, 0, &r, &request);
        let body = rendered.json();
        assert_eq!(body["stop_reason"], "max_tokens");
        assert_eq!(body["usage"]["output_tokens"], 4);
        assert_eq!(body["content"], json!([{"type": "text", "text": "0123"}]));
    }

    #[test]
    fn tool_calls_use_each_apis_format_and_deterministic_ids() {
        let call = ToolCall {
            id: None,
            name: "run_shell".into(),
            arguments: json!({"command": "ls"}),
        };
        let r = reply("", vec![call]);
        let request = json!({"messages": []});
        let openai = Rendered::new(ApiKind::OpenAi, 2, 5, &r, &request).json();
        let tool = &openai["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(tool["id"], "call_2_5_0");
        assert_eq!(tool["function"]["arguments"], "{\"command\":\"ls\"}");
        assert_eq!(openai["choices"][0]["finish_reason"], "tool_calls");
        let anthropic = Rendered::new(ApiKind::Anthropic, 2, 5, &r, &request).json();
        assert_eq!(
            anthropic["content"],
            json!([{"type": "tool_use", "id": "toolu_2_5_0", "name": "run_shell", "input": {"command": "ls"}}])
        );
        assert_eq!(anthropic["stop_reason"], "tool_use");
    }
}
