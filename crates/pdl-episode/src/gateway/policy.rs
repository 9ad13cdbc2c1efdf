//! What the campaign lets through ([`RequestPolicy`]): the model, the request
//! fields and headers forwarded for each API, the output caps and choice counts
//! accepted, the provider-side tools refused unless enabled, and the upper bound
//! of a request's input tokens.
//!
//! [`RequestPolicy::inspect`] turns a request body as the agent sent it into a
//! [`Vetted`] request (or a [`PolicyRefusal`]): `model` replaced by the
//! campaign's, every field not on the API's allowlist dropped (and named), caps
//! and `n` checked to be positive integers in range.

use std::collections::BTreeSet;

use axum::http::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use super::images::{image_bound, is_image_part};
use crate::provider::ApiKind;

/// Request fields forwarded to an OpenAI Chat Completions upstream. Everything
/// else (`store`, `service_tier`, `metadata`, `user`, `prediction`, `audio`,
/// `modalities`, `prompt_cache_key`, `safety_identifier`, ...) is dropped:
/// those change what the account pays, keeps or is billed for, not what the
/// model answers.
const OPENAI_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "seed",
    "reasoning_effort",
    "verbosity",
];

/// Request fields forwarded to an Anthropic Messages upstream (`metadata`,
/// `service_tier`, `context_management` ... are dropped).
const ANTHROPIC_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
];

/// Fields that switch on a provider-side tool, and the tool's name for
/// [`RequestPolicy::allowed_tools`].
const TOOL_FIELDS: &[(&str, &str)] = &[
    ("web_search_options", "web_search"),
    ("mcp_servers", "mcp"),
    ("container", "code_execution"),
];

/// Tool `type`s the client runs itself (so nothing leaves the sandbox through
/// the provider): OpenAI function and custom tools, Anthropic custom tools and
/// the Anthropic-defined client tools.
const CLIENT_TOOL_TYPES: &[&str] = &["function", "custom"];
const CLIENT_TOOL_PREFIXES: &[&str] = &["bash_", "text_editor_"];

/// `anthropic-beta` values forwarded without being enabled: they change how a
/// reply is streamed or formatted, not what the model can reach.
const HARMLESS_BETAS: &[&str] = &[
    "prompt-caching-2024-07-31",
    "token-efficient-tools-2025-02-19",
    "fine-grained-tool-streaming-2025-05-14",
    "interleaved-thinking-2025-05-14",
];

/// Largest accepted output cap (`max_tokens`, `max_completion_tokens`).
pub(crate) const MAX_OUTPUT_CAP: u64 = 10_000_000;

/// Largest accepted `n` (OpenAI choices per request).
pub(crate) const MAX_CHOICES: u64 = 16;

/// Tokens added to a request's byte count for what the provider wraps around
/// it (role markers, the tool preamble): per API, without and with tools.
const INPUT_OVERHEAD: u64 = 64;
const OPENAI_TOOLS_OVERHEAD: u64 = 256;
const ANTHROPIC_TOOLS_OVERHEAD: u64 = 1_024;

/// What the campaign allows through the gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestPolicy {
    /// The model every forwarded request names, whatever the agent asked for.
    /// `None` keeps the agent's (a gateway used outside a campaign).
    pub model: Option<String>,
    /// Provider-side tools the campaign enables by name (`web_search`,
    /// `web_fetch`, `mcp`, `code_execution`, `remote_media` or a tool `type`
    /// such as `web_search_20250305`). Empty: every one is refused.
    pub allowed_tools: BTreeSet<String>,
}

impl RequestPolicy {
    /// A policy that forces `model` and enables no provider-side tool.
    pub fn for_model(model: impl Into<String>) -> RequestPolicy {
        RequestPolicy {
            model: Some(model.into()),
            allowed_tools: BTreeSet::new(),
        }
    }

    fn allows_tool(&self, tool_type: &str) -> bool {
        self.allowed_tools.iter().any(|name| {
            tool_type == name
                || tool_type
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('_'))
        })
    }

    /// Checks and rewrites a request body for `api`.
    pub(crate) fn inspect(
        &self,
        api: ApiKind,
        mut body: Map<String, Value>,
    ) -> Result<Vetted, PolicyRefusal> {
        let requested_model = body.get("model").cloned();
        for (field, tool) in TOOL_FIELDS {
            if body.get(*field).is_some_and(|v| !v.is_null()) && !self.allows_tool(tool) {
                return Err(PolicyRefusal::ProviderTool(format!(
                    "`{field}` switches on the provider-side tool `{tool}`, which this campaign does not enable"
                )));
            }
        }
        let allowed: &[&str] = match api {
            ApiKind::OpenAi => OPENAI_FIELDS,
            ApiKind::Anthropic => ANTHROPIC_FIELDS,
        };
        let mut dropped = Vec::new();
        body.retain(|key, _| {
            let keep = allowed.contains(&key.as_str())
                || TOOL_FIELDS.iter().any(|(field, _)| field == key);
            if !keep {
                dropped.push(key.clone());
            }
            keep
        });
        if let Some(model) = &self.model {
            body.insert("model".into(), Value::String(model.clone()));
        } else if !body.get("model").is_some_and(Value::is_string) {
            return Err(PolicyRefusal::Invalid("`model` must be a string".into()));
        }
        if !body.get("messages").is_some_and(Value::is_array) {
            return Err(PolicyRefusal::Invalid("`messages` must be a list".into()));
        }
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(PolicyRefusal::Invalid(format!(
                    "`stream` must be true or false, not {other}"
                )))
            }
        };
        if let Some(options) = body.get("stream_options").filter(|v| !v.is_null()) {
            if !options.is_object() {
                return Err(PolicyRefusal::Invalid(
                    "`stream_options` must be an object".into(),
                ));
            }
        }
        let mut requested_cap: Option<u64> = None;
        let cap_fields: &[&str] = match api {
            ApiKind::OpenAi => &["max_completion_tokens", "max_tokens"],
            ApiKind::Anthropic => &["max_tokens"],
        };
        let mut cap_field = None;
        for field in cap_fields {
            if let Some(n) = count(&body, field, MAX_OUTPUT_CAP)? {
                requested_cap = Some(requested_cap.map_or(n, |c| c.min(n)));
                cap_field.get_or_insert(*field);
            }
        }
        let choices = match api {
            ApiKind::OpenAi => count(&body, "n", MAX_CHOICES)?.unwrap_or(1),
            ApiKind::Anthropic => 1,
        };
        if let Some(thinking) = body.get("thinking").filter(|v| !v.is_null()) {
            let budget = thinking.get("budget_tokens");
            if !thinking.is_object()
                || budget.is_some_and(|b| !b.is_null() && positive(b, MAX_OUTPUT_CAP).is_none())
            {
                return Err(PolicyRefusal::Invalid(format!(
                    "`thinking` must be an object whose `budget_tokens` is an integer from 1 to {MAX_OUTPUT_CAP}"
                )));
            }
        }
        let tools_offered = self.check_tools(api, &body)?;
        let media = self.check_media(api, &body)?;
        let overhead = INPUT_OVERHEAD
            + match (api, tools_offered) {
                (_, false) => 0,
                (ApiKind::OpenAi, true) => OPENAI_TOOLS_OVERHEAD,
                (ApiKind::Anthropic, true) => ANTHROPIC_TOOLS_OVERHEAD,
            }
            + media.image_tokens;
        Ok(Vetted {
            body,
            requested_model,
            dropped_fields: dropped,
            requested_cap,
            cap_field,
            choices,
            stream,
            overhead,
            images: media.images,
            image_tokens: media.image_tokens,
        })
    }

    /// Refuses provider-side tools; true when the request offers any tool.
    fn check_tools(&self, api: ApiKind, body: &Map<String, Value>) -> Result<bool, PolicyRefusal> {
        let mut offered = false;
        for key in ["tools", "functions"] {
            let Some(tools) = body.get(key).filter(|v| !v.is_null()) else {
                continue;
            };
            let Some(tools) = tools.as_array() else {
                return Err(PolicyRefusal::Invalid(format!("`{key}` must be a list")));
            };
            offered |= !tools.is_empty();
            for tool in tools {
                let kind = tool.get("type").and_then(Value::as_str);
                let client_side = match (api, kind) {
                    (ApiKind::Anthropic, None) => true,
                    (ApiKind::OpenAi, None) => key == "functions",
                    (_, Some(kind)) => {
                        CLIENT_TOOL_TYPES.contains(&kind)
                            || (api == ApiKind::Anthropic
                                && CLIENT_TOOL_PREFIXES.iter().any(|p| kind.starts_with(p)))
                    }
                };
                if !client_side {
                    let name = kind.unwrap_or("(no type)");
                    if !self.allows_tool(name) {
                        return Err(PolicyRefusal::ProviderTool(format!(
                            "the tool of type `{name}` runs on the provider's side (it reaches the network or outside information), which this campaign does not enable"
                        )));
                    }
                }
            }
        }
        Ok(offered)
    }

    /// Refuses content the gateway cannot bound or that makes the provider fetch
    /// a URL; counts the image parts and the most they can be billed on the
    /// model the request goes to ([`image_bound`]).
    fn check_media(&self, api: ApiKind, body: &Map<String, Value>) -> Result<Media, PolicyRefusal> {
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        let mut media = Media::default();
        let mut stack: Vec<&Value> = ["messages", "system"]
            .iter()
            .filter_map(|k| body.get(*k))
            .collect();
        while let Some(value) = stack.pop() {
            match value {
                Value::Array(items) => stack.extend(items),
                Value::Object(object) => {
                    let kind = object.get("type").and_then(Value::as_str);
                    if let Some(kind @ ("document" | "file" | "input_file" | "input_audio")) = kind
                    {
                        return Err(PolicyRefusal::Invalid(format!(
                            "content of type `{kind}` is not accepted by the gateway: its token count cannot be bounded before the call"
                        )));
                    }
                    if is_image_part(object) {
                        media.images += 1;
                        media.image_tokens = media
                            .image_tokens
                            .saturating_add(image_bound(api, model, object));
                        if remote_source(object) && !self.allows_tool("remote_media") {
                            return Err(PolicyRefusal::ProviderTool(
                                "an image given by URL makes the provider fetch it from the network, which this campaign does not enable (`remote_media`); send it inline (base64)".into(),
                            ));
                        }
                    }
                    // The arguments of a tool call the model made are its own
                    // output echoed back, never content the provider reads as
                    // an image or a document.
                    let tool_use = kind.is_some_and(|k| k.ends_with("tool_use"));
                    stack.extend(
                        object
                            .iter()
                            .filter(|(key, _)| !(tool_use && key.as_str() == "input"))
                            .map(|(_, v)| v),
                    );
                }
                _ => {}
            }
        }
        Ok(media)
    }
}

/// The images of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Media {
    /// Image parts.
    images: u64,
    /// The most they can be billed, together.
    image_tokens: u64,
}

/// True when an image part names an `http(s)` URL rather than inline data.
fn remote_source(part: &Map<String, Value>) -> bool {
    let url = part
        .get("image_url")
        .and_then(|u| u.get("url").or(Some(u)))
        .and_then(Value::as_str)
        .or_else(|| {
            part.get("source")
                .and_then(|s| s.get("url"))
                .and_then(Value::as_str)
        })
        .or_else(|| part.get("image_url").and_then(Value::as_str));
    url.is_some_and(|u| !u.trim_start().starts_with("data:"))
        || part
            .get("source")
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            == Some("url")
}

/// A positive integer no larger than `max`, or `None`.
fn positive(value: &Value, max: u64) -> Option<u64> {
    value.as_u64().filter(|n| (1..=max).contains(n))
}

/// The field as a positive integer up to `max`; absent or null is `None`.
fn count(body: &Map<String, Value>, field: &str, max: u64) -> Result<Option<u64>, PolicyRefusal> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => positive(value, max).map(Some).ok_or_else(|| {
            PolicyRefusal::Invalid(format!(
                "`{field}` must be an integer from 1 to {max}, not {value}"
            ))
        }),
    }
}

/// A request the policy accepted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Vetted {
    /// The body: model replaced, unlisted fields dropped (caps not yet set).
    pub body: Map<String, Value>,
    /// The `model` the agent sent, if any.
    pub requested_model: Option<Value>,
    /// Top-level fields that were dropped.
    pub dropped_fields: Vec<String>,
    /// The smallest output cap the agent asked for.
    pub requested_cap: Option<u64>,
    /// The cap field the agent used (`max_tokens`, `max_completion_tokens`).
    pub cap_field: Option<&'static str>,
    /// Choices per request (OpenAI `n`).
    pub choices: u64,
    /// Whether the agent asked for a stream.
    pub stream: bool,
    /// Tokens the provider may add to the request's bytes: the wrapping of
    /// messages and tools, and [`Vetted::image_tokens`].
    pub overhead: u64,
    /// Image parts in the request.
    pub images: u64,
    /// The most input tokens its images can be billed, together.
    pub image_tokens: u64,
}

impl Vetted {
    /// The model the request will name upstream.
    pub(crate) fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }
}

/// Why the policy refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PolicyRefusal {
    /// The request is malformed for the gateway (a bad cap, `n`, `stream` ...).
    Invalid(String),
    /// The request switches on a provider-side tool the campaign does not enable.
    ProviderTool(String),
}

impl PolicyRefusal {
    pub(crate) fn message(&self) -> &str {
        match self {
            PolicyRefusal::Invalid(m) | PolicyRefusal::ProviderTool(m) => m,
        }
    }
}

/// True for the OpenAI reasoning model families, which take
/// `max_completion_tokens` and refuse `max_tokens`.
pub(crate) fn is_openai_reasoning_model(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    ["o1", "o3", "o4", "gpt-5"].iter().any(|family| {
        name == *family
            || name
                .strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('.'))
    })
}

/// The most output tokens one reply of `model` can have, where known (from
/// the providers' model documentation; the longest matching prefix wins).
pub(crate) fn model_output_limit(model: &str) -> Option<u64> {
    const LIMITS: &[(&str, u64)] = &[
        ("gpt-3.5-turbo", 4_096),
        ("gpt-4-turbo", 4_096),
        ("gpt-4o", 16_384),
        ("gpt-4.1", 32_768),
        ("gpt-5", 128_000),
        ("o1-mini", 65_536),
        ("o1", 100_000),
        ("o3", 100_000),
        ("o4-mini", 100_000),
        ("claude-3-haiku", 4_096),
        ("claude-3-opus", 4_096),
        ("claude-3-5-haiku", 8_192),
        ("claude-3-5-sonnet", 8_192),
        ("claude-3-7-sonnet", 64_000),
        ("claude-sonnet-4", 64_000),
        ("claude-haiku-4", 64_000),
        ("claude-opus-4", 32_000),
    ];
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    LIMITS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, limit)| *limit)
}

/// The request headers forwarded upstream (besides the ones the gateway sets:
/// content type, user agent, the real key), and the names of those dropped.
pub(crate) fn forwarded_headers(
    api: ApiKind,
    policy: &RequestPolicy,
    client: &HeaderMap,
) -> (Vec<(&'static str, HeaderValue)>, Vec<String>) {
    /// Set by the gateway, or transport-level: neither forwarded nor reported.
    const OWN: &[&str] = &[
        "host",
        "content-type",
        "content-length",
        "authorization",
        "x-api-key",
        "connection",
        "accept-encoding",
        "transfer-encoding",
        "user-agent",
    ];
    let mut forwarded = Vec::new();
    let mut dropped = BTreeSet::new();
    for name in client.keys() {
        let name = name.as_str();
        if OWN.contains(&name) {
            continue;
        }
        match (api, name) {
            (ApiKind::Anthropic, "anthropic-version") => {
                if let Some(value) = client.get(name) {
                    forwarded.push(("anthropic-version", value.clone()));
                }
            }
            (ApiKind::Anthropic, "anthropic-beta") => {
                let mut kept = Vec::new();
                for value in client.get_all(name) {
                    for beta in value.to_str().unwrap_or("").split(',') {
                        let beta = beta.trim();
                        if beta.is_empty() {
                            continue;
                        }
                        if HARMLESS_BETAS.contains(&beta) || policy.allows_beta(beta) {
                            kept.push(beta.to_string());
                        } else {
                            dropped.insert(format!("anthropic-beta: {beta}"));
                        }
                    }
                }
                if let Ok(value) = HeaderValue::from_str(&kept.join(",")) {
                    if !kept.is_empty() {
                        forwarded.push(("anthropic-beta", value));
                    }
                }
            }
            _ => {
                dropped.insert(name.to_string());
            }
        }
    }
    (forwarded, dropped.into_iter().collect())
}

impl RequestPolicy {
    /// A beta that belongs to an enabled provider-side tool (`web-fetch-…` for
    /// `web_fetch`, `mcp-client-…` for `mcp`, `code-execution-…`).
    fn allows_beta(&self, beta: &str) -> bool {
        self.allowed_tools.iter().any(|tool| {
            let stem = match tool.as_str() {
                "mcp" => "mcp-client".to_string(),
                other => other.replace('_', "-"),
            };
            beta.starts_with(&format!("{stem}-"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn policy() -> RequestPolicy {
        RequestPolicy::for_model("gpt-eval")
    }

    #[test]
    fn the_model_is_replaced_and_unlisted_fields_dropped() {
        let vetted = policy()
            .inspect(
                ApiKind::OpenAi,
                object(
                    json!({"model": "o3-pro-EXPENSIVE", "messages": [], "store": true,
                    "service_tier": "priority", "metadata": {"x": 1}, "temperature": 0.2}),
                ),
            )
            .unwrap();
        assert_eq!(vetted.body["model"], "gpt-eval");
        assert_eq!(vetted.requested_model, Some(json!("o3-pro-EXPENSIVE")));
        assert_eq!(vetted.dropped_fields, ["metadata", "service_tier", "store"]);
        assert_eq!(vetted.body["temperature"], 0.2);
    }

    #[test]
    fn caps_and_choices_must_be_integers_in_range() {
        for bad in [
            json!({"max_tokens": 1000000.0}),
            json!({"max_tokens": "1000000"}),
            json!({"max_completion_tokens": 1e6}),
            json!({"max_tokens": -5}),
            json!({"max_tokens": 0}),
            json!({"max_tokens": 20_000_000}),
            json!({"n": 8.0}),
            json!({"n": "8"}),
            json!({"n": 1000}),
            json!({"stream": "true"}),
        ] {
            let mut body = object(bad.clone());
            body.insert("messages".into(), json!([]));
            let err = policy().inspect(ApiKind::OpenAi, body).unwrap_err();
            assert!(matches!(err, PolicyRefusal::Invalid(_)), "{bad}: {err:?}");
        }
        for bad in [
            json!({"messages": [], "thinking": {"budget_tokens": 1.5}}),
            json!({"messages": [], "thinking": "on"}),
            json!({"messages": [], "max_tokens": 7.0}),
        ] {
            let err = policy().inspect(ApiKind::Anthropic, object(bad.clone()));
            assert!(matches!(err, Err(PolicyRefusal::Invalid(_))), "{bad}");
        }
        let vetted = policy()
            .inspect(
                ApiKind::OpenAi,
                object(json!({"messages": [], "max_tokens": 500, "max_completion_tokens": 300, "n": 4})),
            )
            .unwrap();
        assert_eq!(
            (vetted.requested_cap, vetted.choices, vetted.cap_field),
            (Some(300), 4, Some("max_completion_tokens"))
        );
    }

    #[test]
    fn provider_side_tools_are_refused_unless_enabled() {
        let cases = [
            (ApiKind::OpenAi, json!({"web_search_options": {}})),
            (
                ApiKind::Anthropic,
                json!({"mcp_servers": [{"type": "url", "url": "https://attacker.example/mcp"}]}),
            ),
            (
                ApiKind::Anthropic,
                json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            ),
            (
                ApiKind::Anthropic,
                json!({"tools": [{"type": "code_execution_20250522", "name": "c"}]}),
            ),
            (
                ApiKind::OpenAi,
                json!({"tools": [{"type": "web_search_preview"}]}),
            ),
            (
                ApiKind::OpenAi,
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}]}]}),
            ),
        ];
        for (api, extra) in cases {
            let mut body = object(json!({"messages": []}));
            body.extend(object(extra.clone()));
            let err = policy().inspect(api, body).unwrap_err();
            assert!(
                matches!(err, PolicyRefusal::ProviderTool(_)),
                "{extra}: {err:?}"
            );
        }
        let mut enabled = policy();
        enabled.allowed_tools.insert("web_search".into());
        let body = object(
            json!({"messages": [], "tools": [{"type": "web_search_20250305", "name": "w"}]}),
        );
        assert!(enabled.inspect(ApiKind::Anthropic, body).is_ok());
        // Client-side tools pass and add the tool overhead.
        let body = object(json!({"messages": [], "tools": [
            {"name": "run", "input_schema": {}}, {"type": "bash_20250124", "name": "bash"}]}));
        let vetted = policy().inspect(ApiKind::Anthropic, body).unwrap();
        assert_eq!(vetted.overhead, INPUT_OVERHEAD + ANTHROPIC_TOOLS_OVERHEAD);
    }

    #[test]
    fn inline_images_add_their_bound_and_documents_are_refused() {
        let body = object(json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]}]}));
        let vetted = policy().inspect(ApiKind::Anthropic, body).unwrap();
        // The campaign's model is unknown: the worst case of the API.
        assert_eq!((vetted.images, vetted.image_tokens), (1, 8_848));
        assert_eq!(vetted.overhead, INPUT_OVERHEAD + 8_848);
        // Two high-detail images and one low on gpt-4o-mini, one of them in the
        // shape OpenAI takes without a `type`, and a tool call whose arguments
        // mention an image (not one).
        let body = object(json!({"messages": [
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"}},
                {"image": "iVBORw0KGgo", "resize": 512},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"}}]}]}));
        let vetted = RequestPolicy::for_model("gpt-4o-mini")
            .inspect(ApiKind::OpenAi, body)
            .unwrap();
        assert_eq!(vetted.images, 3);
        assert_eq!(vetted.image_tokens, 2 * 48_169 + 2_833);
        let body = object(json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "show", "input": {"image": "a.png", "type": "document"}}]}]}));
        let vetted = policy().inspect(ApiKind::Anthropic, body).unwrap();
        assert_eq!(vetted.images, 0);
        let body = object(json!({"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "data": "JVBE"}}]}]}));
        assert!(matches!(
            policy().inspect(ApiKind::Anthropic, body),
            Err(PolicyRefusal::Invalid(_))
        ));
    }

    #[test]
    fn reasoning_families_and_output_limits_are_known() {
        for m in [
            "o1",
            "o3-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5-mini",
            "openai/o3",
        ] {
            assert!(is_openai_reasoning_model(m), "{m}");
        }
        for m in [
            "gpt-4o",
            "gpt-4.1-mini",
            "o10x",
            "claude-sonnet-4-5",
            "replay",
        ] {
            assert!(!is_openai_reasoning_model(m), "{m}");
        }
        assert_eq!(model_output_limit("gpt-4o-mini"), Some(16_384));
        assert_eq!(model_output_limit("o1-mini-2024"), Some(65_536));
        assert_eq!(
            model_output_limit("claude-3-5-sonnet-20241022"),
            Some(8_192)
        );
        assert_eq!(model_output_limit("replay"), None);
    }

    #[test]
    fn only_listed_headers_and_betas_are_forwarded() {
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        headers.insert(
            "anthropic-beta",
            HeaderValue::from_static(
                "mcp-client-2025-04-04, prompt-caching-2024-07-31,context-1m-2025-08-07",
            ),
        );
        headers.insert("accept", HeaderValue::from_static("text/html"));
        headers.insert("openai-organization", HeaderValue::from_static("org-evil"));
        headers.insert("authorization", HeaderValue::from_static("Bearer t"));
        let (kept, dropped) = forwarded_headers(ApiKind::Anthropic, &policy(), &headers);
        let kept: Vec<_> = kept
            .iter()
            .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
            .collect();
        assert_eq!(
            kept,
            [
                "anthropic-version: 2023-06-01",
                "anthropic-beta: prompt-caching-2024-07-31"
            ]
        );
        assert_eq!(
            dropped,
            [
                "accept",
                "anthropic-beta: context-1m-2025-08-07",
                "anthropic-beta: mcp-client-2025-04-04",
                "openai-organization"
            ]
        );
        let mut mcp = policy();
        mcp.allowed_tools.insert("mcp".into());
        let (kept, _) = forwarded_headers(ApiKind::Anthropic, &mcp, &headers);
        assert!(kept[1]
            .1
            .to_str()
            .unwrap()
            .contains("mcp-client-2025-04-04"));
        let (kept, dropped) = forwarded_headers(ApiKind::OpenAi, &policy(), &headers);
        assert!(kept.is_empty());
        assert!(dropped.contains(&"anthropic-version".to_string()));
    }
}
