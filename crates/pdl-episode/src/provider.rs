//! What the two provider APIs have in common here: [`ApiKind`], errors in each
//! API's own format, the usage a provider reports, token estimates and the
//! synthesized models list.

use std::fmt;
use std::str::FromStr;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A model provider API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiKind {
    /// The OpenAI Chat Completions API (`POST /v1/chat/completions`).
    OpenAi,
    /// The Anthropic Messages API (`POST /v1/messages`).
    Anthropic,
}

impl ApiKind {
    /// The lowercase name: `openai` or `anthropic`.
    pub fn name(self) -> &'static str {
        match self {
            ApiKind::OpenAi => "openai",
            ApiKind::Anthropic => "anthropic",
        }
    }

    /// The path of the API's generation endpoint, with the `/v1` prefix.
    pub fn endpoint_path(self) -> &'static str {
        match self {
            ApiKind::OpenAi => "/v1/chat/completions",
            ApiKind::Anthropic => "/v1/messages",
        }
    }

    /// The endpoint path below an upstream base URL that already ends in `/v1`.
    pub(crate) fn upstream_suffix(self) -> &'static str {
        match self {
            ApiKind::OpenAi => "/chat/completions",
            ApiKind::Anthropic => "/messages",
        }
    }
}

impl fmt::Display for ApiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not an [`ApiKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown model API {0:?}: expected `openai` or `anthropic`")]
pub struct UnknownApiKind(pub String);

impl FromStr for ApiKind {
    type Err = UnknownApiKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Ok(ApiKind::OpenAi),
            "anthropic" => Ok(ApiKind::Anthropic),
            _ => Err(UnknownApiKind(s.to_string())),
        }
    }
}

/// What went wrong, as far as the error body is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The request cannot be served as sent.
    InvalidRequest,
    /// No key, or a key that names no open episode.
    Authentication,
    /// The episode's token budget is spent.
    BudgetExhausted,
    /// What is left of the budget cannot hold the request.
    BudgetTooSmall,
    /// The upstream could not be reached.
    Upstream,
    /// The upstream did not answer in time.
    Timeout,
}

/// An error body in the API's own format.
pub(crate) fn error_body(api: ApiKind, kind: ErrorKind, message: &str) -> Value {
    match api {
        ApiKind::OpenAi => {
            let (kind, code) = match kind {
                ErrorKind::InvalidRequest => ("invalid_request_error", Value::Null),
                ErrorKind::Authentication => ("invalid_request_error", json!("invalid_api_key")),
                ErrorKind::BudgetExhausted | ErrorKind::BudgetTooSmall => {
                    ("token_budget_exhausted", json!("token_budget_exhausted"))
                }
                ErrorKind::Upstream => ("api_error", json!("upstream_unreachable")),
                ErrorKind::Timeout => ("api_error", json!("upstream_timeout")),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        ApiKind::Anthropic => {
            let kind = match kind {
                ErrorKind::InvalidRequest | ErrorKind::BudgetTooSmall => "invalid_request_error",
                ErrorKind::Authentication | ErrorKind::BudgetExhausted => "authentication_error",
                ErrorKind::Upstream | ErrorKind::Timeout => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

/// A JSON response.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// An error response in the API's own format.
pub(crate) fn error_response(
    api: ApiKind,
    status: StatusCode,
    kind: ErrorKind,
    message: &str,
) -> Response {
    json_response(status, &error_body(api, kind, message))
}

/// The answer to an unknown route, readable by clients of either API.
pub(crate) fn not_found(method: &str, path: &str) -> Response {
    let message = format!(
        "no route for {method} {path}: use /v1/chat/completions, /v1/messages or /v1/models"
    );
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"type": "error", "error": {"type": "not_found_error", "message": message, "code": "not_found"}}),
    )
}

/// A synthesized model list that both the OpenAI and the Anthropic SDKs accept.
pub(crate) fn models_body(ids: &[String]) -> Value {
    let data: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "object": "model",
                "created": 0,
                "owned_by": "pdl-swe",
                "type": "model",
                "display_name": id,
                "created_at": "1970-01-01T00:00:00Z",
            })
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "has_more": false,
        "first_id": ids.first(),
        "last_id": ids.last(),
    })
}

/// Input and output tokens of one exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TokenCount {
    pub input: u64,
    pub output: u64,
}

/// Tokens for `bytes` bytes of text: one token per four bytes, rounded up.
pub(crate) fn tokens_for_bytes(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// The input tokens of a request, estimated from the JSON size of its messages,
/// system prompt and tools; at least 1.
pub(crate) fn estimate_input_tokens(request: &Value) -> u64 {
    let bytes: usize = ["messages", "system", "tools"]
        .iter()
        .filter_map(|key| request.get(*key))
        .map(|value| serde_json::to_vec(value).map(|v| v.len()).unwrap_or(0))
        .sum();
    tokens_for_bytes(bytes).max(1)
}

/// The input tokens in an Anthropic `usage` object, cache writes and reads included.
pub(crate) fn anthropic_input_tokens(usage: &Value) -> Option<u64> {
    let base = usage.get("input_tokens").and_then(Value::as_u64);
    let cache_write = usage
        .get("cache_creation_input_tokens")
        .and_then(Value::as_u64);
    let cache_read = usage.get("cache_read_input_tokens").and_then(Value::as_u64);
    if base.is_none() && cache_write.is_none() && cache_read.is_none() {
        return None;
    }
    Some(base.unwrap_or(0) + cache_write.unwrap_or(0) + cache_read.unwrap_or(0))
}

/// The usage a provider reports in a complete (not streamed) response.
pub(crate) fn reported_usage(api: ApiKind, response: &Value) -> Option<TokenCount> {
    let usage = response.get("usage").filter(|u| u.is_object())?;
    match api {
        ApiKind::OpenAi => {
            let input = usage.get("prompt_tokens").and_then(Value::as_u64);
            let output = usage.get("completion_tokens").and_then(Value::as_u64);
            if input.is_none() && output.is_none() {
                return None;
            }
            Some(TokenCount {
                input: input.unwrap_or(0),
                output: output.unwrap_or(0),
            })
        }
        ApiKind::Anthropic => {
            let input = anthropic_input_tokens(usage);
            let output = usage.get("output_tokens").and_then(Value::as_u64);
            if input.is_none() && output.is_none() {
                return None;
            }
            Some(TokenCount {
                input: input.unwrap_or(0),
                output: output.unwrap_or(0),
            })
        }
    }
}

/// The output tokens of a complete response, estimated from the size of the text
/// and tool calls it carries.
pub(crate) fn estimate_output_tokens(api: ApiKind, response: &Value) -> u64 {
    let mut bytes = 0usize;
    match api {
        ApiKind::OpenAi => {
            for choice in response
                .get("choices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(message) = choice.get("message") else {
                    continue;
                };
                for key in ["content", "reasoning_content", "refusal"] {
                    bytes += message.get(key).and_then(Value::as_str).map_or(0, str::len);
                }
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let function = call.get("function");
                    for key in ["name", "arguments"] {
                        bytes += function
                            .and_then(|f| f.get(key))
                            .and_then(Value::as_str)
                            .map_or(0, str::len);
                    }
                }
            }
        }
        ApiKind::Anthropic => {
            for block in response
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for key in ["text", "thinking"] {
                    bytes += block.get(key).and_then(Value::as_str).map_or(0, str::len);
                }
                if let Some(input) = block.get("input") {
                    bytes += serde_json::to_vec(input).map(|v| v.len()).unwrap_or(0);
                }
                bytes += block
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or(0, str::len);
            }
        }
    }
    tokens_for_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_kind_names_round_trip() {
        for api in [ApiKind::OpenAi, ApiKind::Anthropic] {
            assert_eq!(api.name().parse::<ApiKind>().unwrap(), api);
            assert_eq!(
                serde_json::to_value(api).unwrap(),
                Value::String(api.name().into())
            );
        }
        assert!("gemini".parse::<ApiKind>().is_err());
    }

    #[test]
    fn anthropic_usage_counts_cache_tokens_as_input() {
        let response = json!({"usage": {"input_tokens": 10, "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 100, "output_tokens": 7}});
        assert_eq!(
            reported_usage(ApiKind::Anthropic, &response),
            Some(TokenCount {
                input: 115,
                output: 7
            })
        );
    }

    #[test]
    fn openai_usage_is_read_from_prompt_and_completion_tokens() {
        let response =
            json!({"usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}});
        assert_eq!(
            reported_usage(ApiKind::OpenAi, &response),
            Some(TokenCount {
                input: 12,
                output: 3
            })
        );
        assert_eq!(
            reported_usage(ApiKind::OpenAi, &json!({"usage": null})),
            None
        );
    }

    #[test]
    fn estimates_round_up_and_input_is_at_least_one() {
        assert_eq!(tokens_for_bytes(0), 0);
        assert_eq!(tokens_for_bytes(1), 1);
        assert_eq!(tokens_for_bytes(8), 2);
        assert_eq!(estimate_input_tokens(&json!({})), 1);
        let request = json!({"messages": [{"role": "user", "content": "hello"}]});
        let bytes = serde_json::to_vec(&request["messages"]).unwrap().len();
        assert_eq!(estimate_input_tokens(&request), tokens_for_bytes(bytes));
    }

    #[test]
    fn error_bodies_follow_each_api() {
        let openai = error_body(ApiKind::OpenAi, ErrorKind::BudgetExhausted, "spent");
        assert_eq!(openai["error"]["type"], "token_budget_exhausted");
        assert_eq!(openai["error"]["code"], "token_budget_exhausted");
        assert_eq!(openai["error"]["message"], "spent");
        let anthropic = error_body(ApiKind::Anthropic, ErrorKind::BudgetExhausted, "spent");
        assert_eq!(anthropic["type"], "error");
        assert_eq!(anthropic["error"]["type"], "authentication_error");
        assert_eq!(anthropic["error"]["message"], "spent");
    }
}
