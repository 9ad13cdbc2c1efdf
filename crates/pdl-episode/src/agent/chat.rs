//! A minimal tool-calling chat client ([`ChatClient`]) for the built-in agent:
//! one conversation ([`Conversation`]) rendered in either provider's format and
//! sent to the gateway over plain HTTP, exactly as an outside agent would.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::provider::ApiKind;

/// One tool the model may call.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Its name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The provider's call ID.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed (an object), or the raw text when it was not JSON.
    pub arguments: Result<Value, String>,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
enum Message {
    User(String),
    Assistant {
        text: Option<String>,
        calls: Vec<Call>,
    },
    ToolResult {
        id: String,
        content: String,
    },
}

/// A conversation with a system prompt and the tools on offer.
#[derive(Debug, Clone)]
pub struct Conversation {
    system: String,
    tools: Vec<ToolSpec>,
    messages: Vec<Message>,
}

/// The model's reply to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Its text, if any.
    pub text: Option<String>,
    /// Its tool calls, in order.
    pub calls: Vec<Call>,
}

/// Why a request got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    /// The gateway refused: the episode's token budget is spent.
    #[error("token budget exhausted: {0}")]
    BudgetExhausted(String),
    /// Any other HTTP error status, with the body's message.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// The error message from the body.
        message: String,
    },
    /// The connection failed or timed out.
    #[error("cannot reach the gateway: {0}")]
    Transport(String),
    /// The body is not a reply this client understands.
    #[error("unreadable reply: {0}")]
    Protocol(String),
}

impl Conversation {
    /// A conversation opening with the user's first message.
    pub fn new(system: String, tools: Vec<ToolSpec>, first_user_message: String) -> Self {
        Conversation {
            system,
            tools,
            messages: vec![Message::User(first_user_message)],
        }
    }

    /// Appends the model's reply.
    pub fn push_reply(&mut self, reply: &Reply) {
        self.messages.push(Message::Assistant {
            text: reply.text.clone(),
            calls: reply.calls.clone(),
        });
    }

    /// Appends a tool's result.
    pub fn push_tool_result(&mut self, id: &str, content: String) {
        self.messages.push(Message::ToolResult {
            id: id.to_string(),
            content,
        });
    }

    /// Appends a user message.
    pub fn push_user(&mut self, text: String) {
        self.messages.push(Message::User(text));
    }

    /// The request body in the given API's format.
    pub fn request_body(&self, api: ApiKind, model: &str, max_tokens: u64) -> Value {
        match api {
            ApiKind::OpenAi => self.openai_body(model, max_tokens),
            ApiKind::Anthropic => self.anthropic_body(model, max_tokens),
        }
    }

    fn openai_body(&self, model: &str, max_tokens: u64) -> Value {
        let mut messages = vec![json!({"role": "system", "content": self.system})];
        for m in &self.messages {
            messages.push(match m {
                Message::User(text) => json!({"role": "user", "content": text}),
                Message::Assistant { text, calls } => {
                    let mut msg = json!({"role": "assistant", "content": text});
                    if !calls.is_empty() {
                        msg["tool_calls"] = calls
                            .iter()
                            .map(|c| {
                                json!({"id": c.id, "type": "function", "function": {
                                    "name": c.name,
                                    "arguments": match &c.arguments { Ok(v) => v.to_string(), Err(raw) => raw.clone() },
                                }})
                            })
                            .collect();
                    }
                    msg
                }
                Message::ToolResult { id, content } => {
                    json!({"role": "tool", "tool_call_id": id, "content": content})
                }
            });
        }
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        json!({"model": model, "messages": messages, "tools": tools, "max_tokens": max_tokens})
    }

    fn anthropic_body(&self, model: &str, max_tokens: u64) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for m in &self.messages {
            match m {
                Message::User(text) => messages
                    .push(json!({"role": "user", "content": [{"type": "text", "text": text}]})),
                Message::Assistant { text, calls } => {
                    let mut blocks = Vec::new();
                    if let Some(t) = text.as_ref().filter(|t| !t.is_empty()) {
                        blocks.push(json!({"type": "text", "text": t}));
                    }
                    for c in calls {
                        let input = c
                            .arguments
                            .clone()
                            .unwrap_or_else(|raw| json!({"_raw": raw}));
                        blocks.push(
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
                Message::ToolResult { id, content } => {
                    let block =
                        json!({"type": "tool_result", "tool_use_id": id, "content": content});
                    // Consecutive results travel in one user message.
                    match messages.last_mut() {
                        Some(last)
                            if last["role"] == "user"
                                && last["content"][0]["type"] == "tool_result" =>
                        {
                            last["content"]
                                .as_array_mut()
                                .expect("content is a list")
                                .push(block);
                        }
                        _ => messages.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        json!({"model": model, "system": self.system, "messages": messages, "tools": tools, "max_tokens": max_tokens})
    }
}

/// Reads a reply body in the given API's format.
pub fn parse_reply(api: ApiKind, body: &Value) -> Result<Reply, ChatError> {
    match api {
        ApiKind::OpenAi => {
            let message = body
                .pointer("/choices/0/message")
                .ok_or_else(|| ChatError::Protocol("no choices[0].message".into()))?;
            let text = message
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_string);
            let calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| {
                            let raw = c
                                .pointer("/function/arguments")
                                .and_then(Value::as_str)
                                .unwrap_or("{}");
                            Call {
                                id: c
                                    .get("id")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_string(),
                                name: c
                                    .pointer("/function/name")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_string(),
                                arguments: serde_json::from_str::<Value>(raw)
                                    .ok()
                                    .filter(Value::is_object)
                                    .ok_or_else(|| raw.to_string()),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Reply { text, calls })
        }
        ApiKind::Anthropic => {
            let blocks = body
                .get("content")
                .and_then(Value::as_array)
                .ok_or_else(|| ChatError::Protocol("no content list".into()))?;
            let mut text = String::new();
            let mut calls = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    Some("tool_use") => calls.push(Call {
                        id: b
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        name: b
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        arguments: b.get("input").cloned().filter(Value::is_object).ok_or_else(
                            || b.get("input").map(Value::to_string).unwrap_or_default(),
                        ),
                    }),
                    _ => {}
                }
            }
            Ok(Reply {
                text: (!text.is_empty()).then_some(text),
                calls,
            })
        }
    }
}

fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message").and_then(Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned())
}

/// Sends conversations to the gateway.
pub struct ChatClient {
    runtime: tokio::runtime::Handle,
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
    token: String,
    api: ApiKind,
    timeout: Duration,
}

impl ChatClient {
    /// A client for `base_url` (the gateway, e.g. `http://127.0.0.1:PORT`) that
    /// authenticates with the episode's `token`.
    pub fn new(
        runtime: tokio::runtime::Handle,
        base_url: &str,
        token: &str,
        api: ApiKind,
        timeout: Duration,
    ) -> Self {
        let _guard = runtime.enter();
        let client = Client::builder(TokioExecutor::new()).build_http();
        ChatClient {
            runtime,
            client,
            url: format!("{}{}", base_url.trim_end_matches('/'), api.endpoint_path()),
            token: token.to_string(),
            api,
            timeout,
        }
    }

    /// Sends one request and reads the reply. Blocks the calling thread.
    pub fn send(&self, body: &Value) -> Result<Reply, ChatError> {
        let mut builder = Request::post(&self.url).header("content-type", "application/json");
        builder = match self.api {
            ApiKind::OpenAi => builder.header("authorization", format!("Bearer {}", self.token)),
            ApiKind::Anthropic => builder
                .header("x-api-key", &self.token)
                .header("anthropic-version", "2023-06-01"),
        };
        let request = builder
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ChatError::Protocol(e.to_string()))?;
        let client = self.client.clone();
        let timeout = self.timeout;
        let (status, bytes) = self.runtime.block_on(async move {
            let response = tokio::time::timeout(timeout, client.request(request))
                .await
                .map_err(|_| {
                    ChatError::Transport(format!("no reply within {} s", timeout.as_secs()))
                })?
                .map_err(|e| ChatError::Transport(e.to_string()))?;
            let status = response.status().as_u16();
            let bytes = tokio::time::timeout(timeout, response.into_body().collect())
                .await
                .map_err(|_| ChatError::Transport("the reply body stalled".into()))?
                .map_err(|e| ChatError::Transport(e.to_string()))?
                .to_bytes();
            Ok::<_, ChatError>((status, bytes))
        })?;
        if status != 200 {
            let message = error_message(&bytes);
            if (status == 401 || status == 400) && message.starts_with("token budget exhausted") {
                return Err(ChatError::BudgetExhausted(message));
            }
            return Err(ChatError::Status { status, message });
        }
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| ChatError::Protocol(e.to_string()))?;
        parse_reply(self.api, &value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Conversation {
        let mut c = Conversation::new(
            "sys".into(),
            vec![ToolSpec {
                name: "finish",
                description: "done",
                parameters: json!({"type": "object"}),
            }],
            "fix it".into(),
        );
        c.push_reply(&Reply {
            text: Some("looking".into()),
            calls: vec![
                Call {
                    id: "a".into(),
                    name: "run_shell".into(),
                    arguments: Ok(json!({"command": "ls"})),
                },
                Call {
                    id: "b".into(),
                    name: "view_file".into(),
                    arguments: Ok(json!({"path": "x"})),
                },
            ],
        });
        c.push_tool_result("a", "file".into());
        c.push_tool_result("b", "content".into());
        c
    }

    #[test]
    fn openai_rendering_keeps_tool_call_ids_and_results() {
        let body = conversation().request_body(ApiKind::OpenAi, "m", 100);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 5);
        assert_eq!(
            msgs[2]["tool_calls"][1]["function"]["arguments"],
            "{\"path\":\"x\"}"
        );
        assert_eq!(msgs[4]["tool_call_id"], "b");
        assert_eq!(body["tools"][0]["function"]["name"], "finish");
    }

    #[test]
    fn anthropic_rendering_groups_consecutive_results() {
        let body = conversation().request_body(ApiKind::Anthropic, "m", 100);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
        assert_eq!(msgs[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(body["system"], "sys");
    }

    #[test]
    fn replies_parse_in_both_formats() {
        let openai = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "finish", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "run_shell", "arguments": "not json"}}]}}]});
        let r = parse_reply(ApiKind::OpenAi, &openai).unwrap();
        assert_eq!(r.calls[0].arguments, Ok(json!({})));
        assert_eq!(r.calls[1].arguments, Err("not json".into()));
        let anthropic = json!({"content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "finish", "input": {}}]});
        let r = parse_reply(ApiKind::Anthropic, &anthropic).unwrap();
        assert_eq!(r.text.as_deref(), Some("hi"));
        assert_eq!(r.calls[0].name, "finish");
    }
}
