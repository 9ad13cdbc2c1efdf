//! Turning a gateway trajectory back into a [`ReplayScript`].

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::script::{Conversation, ReplayScript, Reply, ReplyUsage, ToolCall};
use super::ReplayError;

impl ReplayScript {
    /// Rebuilds a script from a gateway trajectory file: one conversation (without
    /// `match`) holding the assistant replies of the successful exchanges in order,
    /// each with its recorded usage and tool-call ids. Refused and failed exchanges
    /// are skipped.
    ///
    /// Replaying it reproduces the episode exactly when the agent sends its whole
    /// history with each request (reply `n` answers the request with `n` assistant
    /// messages).
    pub fn from_trajectory(path: &Path) -> Result<ReplayScript, ReplayError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
            what: "trajectory",
            path: path.to_path_buf(),
            source,
        })?;
        let error = |line: usize, message: String| ReplayError::Trajectory {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut replies = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record: Value = serde_json::from_str(line)
                .map_err(|e| error(n + 1, format!("not a JSON object: {e}")))?;
            if let Some(reply) = reply_of(&record).map_err(|message| error(n + 1, message))? {
                replies.push(reply);
            }
        }
        if replies.is_empty() {
            return Err(error(0, "no successful exchange to replay".into()));
        }
        Ok(ReplayScript {
            conversations: vec![Conversation {
                match_text: None,
                replies,
            }],
        })
    }
}

/// The assistant reply recorded in one exchange, if it succeeded.
fn reply_of(record: &Value) -> Result<Option<Reply>, String> {
    let refused = record.get("refused").and_then(Value::as_bool) == Some(true);
    let status = record.get("status").and_then(Value::as_u64).unwrap_or(0);
    if refused || !(200..300).contains(&status) {
        return Ok(None);
    }
    let endpoint = record
        .get("endpoint")
        .and_then(Value::as_str)
        .ok_or("the exchange has no `endpoint`")?;
    let response = record
        .get("response")
        .ok_or("the exchange has no `response`")?;
    let stream = response.get("stream").and_then(Value::as_array);
    let (content, tool_calls) = match (endpoint.trim_start_matches("/v1"), stream) {
        ("/chat/completions", None) => openai_message(response),
        ("/chat/completions", Some(chunks)) => openai_stream(chunks),
        ("/messages", None) => anthropic_message(response),
        ("/messages", Some(events)) => anthropic_stream(events),
        (other, _) => return Err(format!("unknown endpoint {other:?}")),
    };
    let usage = record.get("usage").and_then(|u| {
        Some(ReplyUsage {
            input_tokens: u.get("input_tokens")?.as_u64()?,
            output_tokens: u.get("output_tokens")?.as_u64()?,
        })
    });
    let content = if content.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(content)
    };
    Ok(Some(Reply {
        content,
        tool_calls,
        usage,
        finish: false,
    }))
}

/// A tool call's arguments: the JSON they encode, or the text itself when it is
/// not a JSON object (so that it is sent back verbatim).
fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::String(text.to_string()),
    }
}

fn string_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn openai_message(response: &Value) -> (String, Vec<ToolCall>) {
    let Some(message) = response.pointer("/choices/0/message") else {
        return (String::new(), Vec::new());
    };
    let content = string_at(message, "/content").unwrap_or("").to_string();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| ToolCall {
            id: string_at(call, "/id").map(str::to_string),
            name: string_at(call, "/function/name").unwrap_or("").to_string(),
            arguments: parse_arguments(string_at(call, "/function/arguments").unwrap_or("")),
        })
        .collect();
    (content, calls)
}

fn openai_stream(chunks: &[Value]) -> (String, Vec<ToolCall>) {
    #[derive(Default)]
    struct Partial {
        id: Option<String>,
        name: String,
        arguments: String,
    }
    let mut content = String::new();
    let mut calls: BTreeMap<u64, Partial> = BTreeMap::new();
    for chunk in chunks {
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            continue;
        };
        content.push_str(string_at(delta, "/content").unwrap_or(""));
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let partial = calls.entry(index).or_default();
            if let Some(id) = string_at(call, "/id") {
                partial.id = Some(id.to_string());
            }
            partial
                .name
                .push_str(string_at(call, "/function/name").unwrap_or(""));
            partial
                .arguments
                .push_str(string_at(call, "/function/arguments").unwrap_or(""));
        }
    }
    let calls = calls
        .into_values()
        .map(|p| ToolCall {
            id: p.id,
            name: p.name,
            arguments: parse_arguments(&p.arguments),
        })
        .collect();
    (content, calls)
}

fn anthropic_message(response: &Value) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for block in response
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match string_at(block, "/type") {
            Some("text") => content.push_str(string_at(block, "/text").unwrap_or("")),
            Some("tool_use") => calls.push(ToolCall {
                id: string_at(block, "/id").map(str::to_string),
                name: string_at(block, "/name").unwrap_or("").to_string(),
                arguments: block
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
            }),
            _ => {}
        }
    }
    (content, calls)
}

fn anthropic_stream(events: &[Value]) -> (String, Vec<ToolCall>) {
    enum Block {
        Text,
        Tool {
            id: Option<String>,
            name: String,
            json: String,
        },
        Other,
    }
    let mut content = String::new();
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    for event in events {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match string_at(event, "/type") {
            Some("content_block_start") => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let kind = match string_at(block, "/type") {
                    Some("text") => {
                        content.push_str(string_at(block, "/text").unwrap_or(""));
                        Block::Text
                    }
                    Some("tool_use") => Block::Tool {
                        id: string_at(block, "/id").map(str::to_string),
                        name: string_at(block, "/name").unwrap_or("").to_string(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                blocks.insert(index, kind);
            }
            Some("content_block_delta") => match blocks.get_mut(&index) {
                Some(Block::Text) => {
                    content.push_str(string_at(event, "/delta/text").unwrap_or(""));
                }
                Some(Block::Tool { json, .. }) => {
                    json.push_str(string_at(event, "/delta/partial_json").unwrap_or(""));
                }
                _ => {}
            },
            _ => {}
        }
    }
    let calls = blocks
        .into_values()
        .filter_map(|block| match block {
            Block::Tool { id, name, json } => Some(ToolCall {
                id,
                name,
                arguments: parse_arguments(&json),
            }),
            _ => None,
        })
        .collect();
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn streams_of_both_apis_are_reassembled() {
        let openai = vec![
            json!({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"delta": {"content": "Let me "}}]}),
            json!({"choices": [{"delta": {"content": "look."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                "function": {"name": "run_shell", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
        ];
        let (content, calls) = openai_stream(&openai);
        assert_eq!(content, "Let me look.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id.as_deref(), Some("call_a"));
        assert_eq!(calls[0].arguments, json!({"command": "ls"}));

        let anthropic = vec![
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_x", "name": "view", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ":\"a.py\"}"}}),
        ];
        let (content, calls) = anthropic_stream(&anthropic);
        assert_eq!(content, "Hi");
        assert_eq!(calls[0].name, "view");
        assert_eq!(calls[0].arguments, json!({"path": "a.py"}));
    }

    #[test]
    fn refused_and_failed_exchanges_are_skipped() {
        assert_eq!(
            reply_of(&json!({"refused": true, "status": 401, "endpoint": "/v1/messages"})),
            Ok(None)
        );
        assert_eq!(
            reply_of(
                &json!({"refused": false, "status": 500, "endpoint": "/v1/messages", "response": {}})
            ),
            Ok(None)
        );
        let reply = reply_of(
            &json!({"refused": false, "status": 200, "endpoint": "/v1/messages",
            "response": {"content": [{"type": "text", "text": "ok"}]},
            "usage": {"input_tokens": 5, "output_tokens": 1, "estimated": false}}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(reply.content.as_deref(), Some("ok"));
        assert_eq!(
            reply.usage,
            Some(ReplyUsage {
                input_tokens: 5,
                output_tokens: 1
            })
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_kept_verbatim() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(parse_arguments("{\"a\":"), json!("{\"a\":"));
    }
}
