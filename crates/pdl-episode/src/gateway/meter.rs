//! The way up and the way down of a metered call: [`prepare`] sets the output
//! cap the budget allows in the field the model expects and asks for streamed
//! usage; [`StreamMeter`] reads the usage out of a stream
//! ([`crate::provider::reported_usage`] does for complete responses).

use serde_json::{json, Map, Value};

use super::policy::{is_openai_reasoning_model, Vetted};
use crate::provider::{
    anthropic_input_tokens, estimate_input_tokens, tokens_for_bytes, ApiKind, TokenCount,
};

/// The smallest thinking budget Anthropic accepts.
const ANTHROPIC_MIN_THINKING_BUDGET: u64 = 1_024;

/// A request ready to go upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prepared {
    /// The body to send.
    pub body: Value,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Whether the usage-only chunk of an OpenAI stream must be withheld from the
    /// client (it did not ask for one; the gateway did).
    pub hide_usage_chunk: bool,
}

/// Writes the output cap `cap` (per choice) into a vetted request, in the
/// field the API and the model family take (`max_completion_tokens` for the
/// OpenAI reasoning models, the field the agent used or `max_tokens` for other
/// OpenAI models, `max_tokens` for Anthropic), and, for an OpenAI stream, asks
/// for the usage in a final chunk.
pub(crate) fn prepare(api: ApiKind, vetted: Vetted, cap: u64) -> Prepared {
    let cap = cap.max(1);
    let stream = vetted.stream;
    let reasoning = is_openai_reasoning_model(vetted.model());
    let cap_field = vetted.cap_field;
    let mut body: Map<String, Value> = vetted.body;
    let mut hide_usage_chunk = false;
    match api {
        ApiKind::OpenAi => {
            body.remove("max_tokens");
            body.remove("max_completion_tokens");
            let field = if reasoning {
                "max_completion_tokens"
            } else {
                cap_field.unwrap_or("max_tokens")
            };
            body.insert(field.into(), json!(cap));
            if stream {
                let options = body
                    .entry("stream_options")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !options.is_object() {
                    *options = Value::Object(Map::new());
                }
                if let Some(options) = options.as_object_mut() {
                    let asked = options.get("include_usage").and_then(Value::as_bool) == Some(true);
                    hide_usage_chunk = !asked;
                    options.insert("include_usage".into(), Value::Bool(true));
                }
            } else {
                body.remove("stream_options");
            }
        }
        ApiKind::Anthropic => {
            body.insert("max_tokens".into(), json!(cap));
            // Extended thinking needs budget_tokens < max_tokens.
            if let Some(thinking) = body.get_mut("thinking").and_then(Value::as_object_mut) {
                if let Some(budget) = thinking.get("budget_tokens").and_then(Value::as_u64) {
                    if budget >= cap && cap > ANTHROPIC_MIN_THINKING_BUDGET {
                        thinking.insert("budget_tokens".into(), json!(cap - 1));
                    }
                }
            }
        }
    }
    Prepared {
        body: Value::Object(body),
        stream,
        hide_usage_chunk,
    }
}

/// True for the usage-only chunk of an OpenAI stream (`choices` empty, `usage` set).
pub(crate) fn is_openai_usage_chunk(chunk: &Value) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && chunk.get("usage").is_some_and(Value::is_object)
}

/// Tokens counted for an exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Metered {
    pub tokens: TokenCount,
    pub estimated: bool,
}

/// Reads the usage out of a stream of parsed SSE payloads.
#[derive(Debug)]
pub(crate) struct StreamMeter {
    api: ApiKind,
    input: Option<u64>,
    output: Option<u64>,
    /// The usage that ends a stream was seen (OpenAI usage chunk, Anthropic
    /// `message_delta` with usage).
    complete: bool,
    /// Bytes of generated text and tool arguments, for an estimate.
    output_bytes: usize,
}

impl StreamMeter {
    /// A meter for a stream of the given API.
    pub(crate) fn new(api: ApiKind) -> StreamMeter {
        StreamMeter {
            api,
            input: None,
            output: None,
            complete: false,
            output_bytes: 0,
        }
    }

    /// Takes in one SSE data payload.
    pub(crate) fn observe(&mut self, payload: &Value) {
        match self.api {
            ApiKind::OpenAi => self.observe_openai(payload),
            ApiKind::Anthropic => self.observe_anthropic(payload),
        }
    }

    fn observe_openai(&mut self, chunk: &Value) {
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let input = usage.get("prompt_tokens").and_then(Value::as_u64);
            let output = usage.get("completion_tokens").and_then(Value::as_u64);
            if input.is_some() || output.is_some() {
                self.input = Some(input.unwrap_or(0));
                self.output = Some(output.unwrap_or(0));
                self.complete = true;
            }
        }
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            for key in ["content", "reasoning_content", "refusal"] {
                self.output_bytes += delta.get(key).and_then(Value::as_str).map_or(0, str::len);
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for key in ["name", "arguments"] {
                    self.output_bytes += call
                        .get("function")
                        .and_then(|f| f.get(key))
                        .and_then(Value::as_str)
                        .map_or(0, str::len);
                }
            }
        }
    }

    fn observe_anthropic(&mut self, event: &Value) {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(usage) = event.get("message").and_then(|m| m.get("usage")) {
                    self.input = anthropic_input_tokens(usage).or(self.input);
                    self.output = usage
                        .get("output_tokens")
                        .and_then(Value::as_u64)
                        .or(self.output);
                }
            }
            Some("message_delta") => {
                if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                    if let Some(output) = usage.get("output_tokens").and_then(Value::as_u64) {
                        self.output = Some(output);
                        self.complete = true;
                    }
                    // Newer API versions repeat the (cumulative) input counts here.
                    if let Some(input) = anthropic_input_tokens(usage) {
                        self.input = Some(self.input.map_or(input, |known| known.max(input)));
                    }
                }
            }
            Some("content_block_start") => {
                if let Some(block) = event.get("content_block") {
                    for key in ["text", "name"] {
                        self.output_bytes +=
                            block.get(key).and_then(Value::as_str).map_or(0, str::len);
                    }
                }
            }
            Some("content_block_delta") => {
                if let Some(delta) = event.get("delta") {
                    for key in ["text", "partial_json", "thinking"] {
                        self.output_bytes +=
                            delta.get(key).and_then(Value::as_str).map_or(0, str::len);
                    }
                }
            }
            _ => {}
        }
    }

    /// The tokens of the whole exchange: as reported when the stream carried its
    /// final usage, otherwise estimated (input from the request unless reported,
    /// output from the generated bytes).
    pub(crate) fn finish(&self, request: &Value) -> Metered {
        let estimated_output = tokens_for_bytes(self.output_bytes);
        match (self.complete, self.input) {
            (true, Some(input)) => Metered {
                tokens: TokenCount {
                    input,
                    output: self.output.unwrap_or(0),
                },
                estimated: false,
            },
            _ => Metered {
                tokens: TokenCount {
                    input: self.input.unwrap_or_else(|| estimate_input_tokens(request)),
                    output: if self.complete {
                        self.output.unwrap_or(0)
                    } else {
                        estimated_output.max(self.output.unwrap_or(0))
                    },
                },
                estimated: true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn vetted(api: ApiKind, body: Value) -> Vetted {
        super::super::policy::RequestPolicy::default()
            .inspect(api, object(body))
            .unwrap()
    }

    #[test]
    fn the_cap_goes_in_the_field_the_model_takes() {
        let p = prepare(
            ApiKind::OpenAi,
            vetted(
                ApiKind::OpenAi,
                json!({"model": "gpt-4o", "messages": [], "max_tokens": 500}),
            ),
            100,
        );
        assert_eq!(p.body["max_tokens"], 100);
        let p = prepare(
            ApiKind::OpenAi,
            vetted(
                ApiKind::OpenAi,
                json!({"model": "gpt-4o", "messages": [], "max_completion_tokens": 50}),
            ),
            50,
        );
        assert_eq!(p.body["max_completion_tokens"], 50);
        assert!(p.body.get("max_tokens").is_none());
        // Reasoning models take max_completion_tokens, even when the agent sent
        // max_tokens or nothing.
        for body in [
            json!({"model": "o3-mini", "messages": [], "max_tokens": 500}),
            json!({"model": "gpt-5", "messages": []}),
        ] {
            let p = prepare(ApiKind::OpenAi, vetted(ApiKind::OpenAi, body), 77);
            assert_eq!(p.body["max_completion_tokens"], 77);
            assert!(p.body.get("max_tokens").is_none());
        }
        // Without a cap in the request, one is always sent.
        let p = prepare(
            ApiKind::OpenAi,
            vetted(ApiKind::OpenAi, json!({"model": "m", "messages": []})),
            1_000_000,
        );
        assert_eq!(p.body["max_tokens"], 1_000_000);
    }

    #[test]
    fn openai_streams_ask_for_usage_and_remember_who_asked() {
        let v = |body| vetted(ApiKind::OpenAi, body);
        let p = prepare(
            ApiKind::OpenAi,
            v(json!({"model": "m", "messages": [], "stream": true})),
            10,
        );
        assert_eq!(p.body["stream_options"], json!({"include_usage": true}));
        assert!(p.stream && p.hide_usage_chunk);
        let p = prepare(
            ApiKind::OpenAi,
            v(
                json!({"model": "m", "messages": [], "stream": true, "stream_options": {"include_usage": true}}),
            ),
            10,
        );
        assert!(!p.hide_usage_chunk);
        let p = prepare(
            ApiKind::OpenAi,
            v(json!({"model": "m", "messages": [], "stream": false})),
            10,
        );
        assert!(p.body.get("stream_options").is_none());
        assert!(!p.stream);
    }

    #[test]
    fn anthropic_max_tokens_and_thinking_budget_follow_the_cap() {
        let v = |body| vetted(ApiKind::Anthropic, body);
        let p = prepare(
            ApiKind::Anthropic,
            v(json!({"model": "m", "messages": [], "max_tokens": 8000,
                     "thinking": {"type": "enabled", "budget_tokens": 4000}})),
            3000,
        );
        assert_eq!(p.body["max_tokens"], 3000);
        assert_eq!(p.body["thinking"]["budget_tokens"], 2999);
        let p = prepare(
            ApiKind::Anthropic,
            v(json!({"model": "m", "messages": [], "stream": true})),
            3000,
        );
        assert_eq!(p.body["max_tokens"], 3000);
        assert!(p.body.get("stream_options").is_none());
    }

    #[test]
    fn openai_stream_usage_comes_from_the_final_chunk() {
        let mut meter = StreamMeter::new(ApiKind::OpenAi);
        meter.observe(&json!({"choices": [{"delta": {"content": "hello"}}], "usage": null}));
        let usage_chunk =
            json!({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 2}});
        assert!(is_openai_usage_chunk(&usage_chunk));
        meter.observe(&usage_chunk);
        assert_eq!(
            meter.finish(&json!({})),
            Metered {
                tokens: TokenCount {
                    input: 40,
                    output: 2
                },
                estimated: false
            }
        );
    }

    #[test]
    fn a_stream_without_usage_is_estimated() {
        let mut meter = StreamMeter::new(ApiKind::OpenAi);
        meter.observe(&json!({"choices": [{"delta": {"content": "12345678"}}]}));
        let request = json!({"messages": [{"role": "user", "content": "hi"}]});
        let metered = meter.finish(&request);
        assert!(metered.estimated);
        assert_eq!(metered.tokens.output, 2);
        assert_eq!(metered.tokens.input, estimate_input_tokens(&request));
    }

    #[test]
    fn anthropic_stream_usage_comes_from_start_and_delta() {
        let mut meter = StreamMeter::new(ApiKind::Anthropic);
        meter.observe(&json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 30, "cache_read_input_tokens": 70, "output_tokens": 1}}}));
        meter.observe(
            &json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}),
        );
        let partial = meter.finish(&json!({}));
        assert!(partial.estimated);
        assert_eq!(partial.tokens.input, 100);
        meter.observe(&json!({"type": "message_delta", "usage": {"output_tokens": 12}}));
        assert_eq!(
            meter.finish(&json!({})),
            Metered {
                tokens: TokenCount {
                    input: 100,
                    output: 12
                },
                estimated: false
            }
        );
    }
}
