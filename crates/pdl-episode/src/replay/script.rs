//! The replay script: [`ReplayScript`], read from JSON with every field checked so
//! that a mistake is reported with the file and the field.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::ReplayError;

/// Canned replies, grouped in conversations.
///
/// The JSON form:
///
/// ```json
/// {"conversations": [
///   {"match": "text that must occur in the system prompt or the messages (optional)",
///    "replies": [
///      {"content": "text (optional)",
///       "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}}],
///       "usage": {"input_tokens": 120, "output_tokens": 30}},
///      {"content": "done", "finish": true}
///    ]}
/// ]}
/// ```
///
/// A request is answered from the first conversation whose `match` occurs in it
/// (a conversation without `match` matches every request), with the reply whose
/// index is the number of assistant messages already in the request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayScript {
    /// The conversations, tried in order.
    pub conversations: Vec<Conversation>,
}

/// One scripted conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    /// Text that must occur in the request's system prompt or messages; `None`
    /// matches every request.
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_text: Option<String>,
    /// The assistant's replies, one per turn.
    pub replies: Vec<Reply>,
}

/// One assistant reply.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Reply {
    /// The text of the reply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls, rendered in the API's own format.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The usage to report; `None` reports an estimate (one token per four bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<ReplyUsage>,
    /// Marks the reply that ends the conversation (only the last may).
    #[serde(skip_serializing_if = "is_false")]
    pub finish: bool,
}

/// A tool call in a [`Reply`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The call's id; `None` gives a deterministic one
    /// (`call_<conversation>_<turn>_<n>` or `toolu_<conversation>_<turn>_<n>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments: a JSON object, or a string sent verbatim as OpenAI's
    /// `arguments` text (and parsed for Anthropic's `input`).
    pub arguments: Value,
}

/// The usage reported for a [`Reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplyUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl ReplayScript {
    /// Reads and checks a script file.
    pub fn load(path: &Path) -> Result<ReplayScript, ReplayError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
            what: "replay script",
            path: path.to_path_buf(),
            source,
        })?;
        ReplayScript::parse(&text, path)
    }

    /// Parses and checks a script; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<ReplayScript, ReplayError> {
        let value: Value = serde_json::from_str(text).map_err(|source| ReplayError::Syntax {
            path: origin.to_path_buf(),
            source,
        })?;
        ReplayScript::from_value(&value).map_err(|FieldError { field, message }| {
            ReplayError::Field {
                path: origin.to_path_buf(),
                field,
                message,
            }
        })
    }

    /// The script as pretty-printed JSON, in the form [`ReplayScript::parse`] reads.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes the script to `path` as JSON.
    pub fn save(&self, path: &Path) -> Result<(), ReplayError> {
        let mut text = self.to_json_pretty();
        text.push('\n');
        std::fs::write(path, text).map_err(|source| ReplayError::Write {
            path: PathBuf::from(path),
            source,
        })
    }

    /// The number of replies in all conversations.
    pub fn reply_count(&self) -> usize {
        self.conversations.iter().map(|c| c.replies.len()).sum()
    }

    fn from_value(value: &Value) -> Result<ReplayScript, FieldError> {
        let root = object(value, "(top level)")?;
        known_keys(root, "", &["conversations"])?;
        let list = required(root, "", "conversations")?;
        let list = array(list, "conversations")?;
        if list.is_empty() {
            return Err(FieldError::new(
                "conversations",
                "must hold at least one conversation",
            ));
        }
        let conversations = list
            .iter()
            .enumerate()
            .map(|(i, c)| conversation(c, &format!("conversations[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(ReplayScript { conversations })
    }
}

/// Parses and checks one reply written by hand (the console model's mailbox):
/// the fields of a script reply, `usage` excepted, since a reply's usage is
/// measured, never declared by whoever writes it. `origin` names it in errors.
pub(crate) fn parse_console_reply(text: &str, origin: &Path) -> Result<Reply, ReplayError> {
    let value: Value = serde_json::from_str(text).map_err(|source| ReplayError::Syntax {
        path: origin.to_path_buf(),
        source,
    })?;
    let field_error = |FieldError { field, message }| ReplayError::Field {
        path: origin.to_path_buf(),
        field,
        message,
    };
    if let Some(map) = value.as_object() {
        known_keys(map, "reply", &["content", "tool_calls", "finish"]).map_err(field_error)?;
    }
    reply(&value, "reply", true).map_err(field_error)
}

/// A bad field: its path in the document and what is wrong.
struct FieldError {
    field: String,
    message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

fn conversation(value: &Value, at: &str) -> Result<Conversation, FieldError> {
    let map = object(value, at)?;
    known_keys(map, at, &["match", "replies"])?;
    let match_text = optional_string(map, at, "match")?;
    let replies_at = format!("{at}.replies");
    let list = array(required(map, at, "replies")?, &replies_at)?;
    if list.is_empty() {
        return Err(FieldError::new(replies_at, "must hold at least one reply"));
    }
    let last = list.len() - 1;
    let replies = list
        .iter()
        .enumerate()
        .map(|(j, r)| reply(r, &format!("{replies_at}[{j}]"), j == last))
        .collect::<Result<_, _>>()?;
    Ok(Conversation {
        match_text,
        replies,
    })
}

fn reply(value: &Value, at: &str, is_last: bool) -> Result<Reply, FieldError> {
    let map = object(value, at)?;
    known_keys(map, at, &["content", "tool_calls", "usage", "finish"])?;
    let content = optional_string(map, at, "content")?;
    let tool_calls = match map.get("tool_calls").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(list) => {
            let calls_at = format!("{at}.tool_calls");
            array(list, &calls_at)?
                .iter()
                .enumerate()
                .map(|(k, c)| tool_call(c, &format!("{calls_at}[{k}]")))
                .collect::<Result<_, _>>()?
        }
    };
    let usage = match map.get("usage").filter(|v| !v.is_null()) {
        None => None,
        Some(usage) => {
            let usage_at = format!("{at}.usage");
            let fields = object(usage, &usage_at)?;
            known_keys(fields, &usage_at, &["input_tokens", "output_tokens"])?;
            Some(ReplyUsage {
                input_tokens: count(fields, &usage_at, "input_tokens")?,
                output_tokens: count(fields, &usage_at, "output_tokens")?,
            })
        }
    };
    let finish = match map.get("finish") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(finish)) => *finish,
        Some(_) => {
            return Err(FieldError::new(
                format!("{at}.finish"),
                "must be true or false",
            ))
        }
    };
    if finish && !is_last {
        return Err(FieldError::new(
            format!("{at}.finish"),
            "only the last reply of a conversation may finish it",
        ));
    }
    if content.is_none() && tool_calls.is_empty() {
        return Err(FieldError::new(at, "needs `content` or `tool_calls`"));
    }
    Ok(Reply {
        content,
        tool_calls,
        usage,
        finish,
    })
}

fn tool_call(value: &Value, at: &str) -> Result<ToolCall, FieldError> {
    let map = object(value, at)?;
    known_keys(map, at, &["id", "name", "arguments"])?;
    let id = optional_string(map, at, "id")?;
    let name = match required(map, at, "name")? {
        Value::String(name) if !name.is_empty() => name.clone(),
        _ => {
            return Err(FieldError::new(
                format!("{at}.name"),
                "must be a non-empty string",
            ))
        }
    };
    let arguments = match map.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(arguments @ (Value::Object(_) | Value::String(_))) => arguments.clone(),
        Some(_) => {
            return Err(FieldError::new(
                format!("{at}.arguments"),
                "must be a JSON object (or a string of JSON)",
            ))
        }
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| FieldError::new(at, "must be a JSON object"))
}

fn array<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>, FieldError> {
    value
        .as_array()
        .ok_or_else(|| FieldError::new(at, "must be an array"))
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn required<'a>(map: &'a Map<String, Value>, at: &str, key: &str) -> Result<&'a Value, FieldError> {
    map.get(key)
        .ok_or_else(|| FieldError::new(join(at, key), "is missing"))
}

fn optional_string(
    map: &Map<String, Value>,
    at: &str,
    key: &str,
) -> Result<Option<String>, FieldError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(FieldError::new(join(at, key), "must be a string")),
    }
}

fn count(map: &Map<String, Value>, at: &str, key: &str) -> Result<u64, FieldError> {
    required(map, at, key)?
        .as_u64()
        .ok_or_else(|| FieldError::new(join(at, key), "must be a non-negative integer"))
}

fn known_keys(map: &Map<String, Value>, at: &str, known: &[&str]) -> Result<(), FieldError> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) => Err(FieldError::new(
            join(at, unknown),
            format!(
                "is not a known field (expected one of: {})",
                known.join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<ReplayScript, ReplayError> {
        ReplayScript::parse(&value.to_string(), Path::new("s.json"))
    }

    fn field_error(value: Value) -> String {
        match parse(value) {
            Err(ReplayError::Field { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_full_script_parses_and_round_trips() {
        let script = parse(json!({"conversations": [
            {"match": "fix the bug", "replies": [
                {"content": "looking", "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}}],
                 "usage": {"input_tokens": 120, "output_tokens": 30}},
                {"content": "done", "finish": true}]},
            {"replies": [{"tool_calls": [{"id": "x1", "name": "finish"}]}]}
        ]}))
        .unwrap();
        assert_eq!(script.reply_count(), 3);
        let first = &script.conversations[0];
        assert_eq!(first.match_text.as_deref(), Some("fix the bug"));
        assert_eq!(
            first.replies[0].tool_calls[0].arguments,
            json!({"command": "ls"})
        );
        assert_eq!(
            first.replies[0].usage,
            Some(ReplyUsage {
                input_tokens: 120,
                output_tokens: 30
            })
        );
        assert!(first.replies[1].finish);
        assert_eq!(
            script.conversations[1].replies[0].tool_calls[0].arguments,
            json!({})
        );
        let again = ReplayScript::parse(&script.to_json_pretty(), Path::new("again.json")).unwrap();
        assert_eq!(again, script);
    }

    #[test]
    fn errors_name_the_bad_field() {
        assert_eq!(field_error(json!({})), "conversations");
        assert_eq!(field_error(json!({"conversations": []})), "conversations");
        assert_eq!(
            field_error(json!({"conversations": [{"replies": [{"contnet": "x"}]}]})),
            "conversations[0].replies[0].contnet"
        );
        assert_eq!(
            field_error(json!({"conversations": [{"replies": [{"content": "a"},
                {"tool_calls": [{"name": "t", "arguments": [1]}]}]}]})),
            "conversations[0].replies[1].tool_calls[0].arguments"
        );
        assert_eq!(
            field_error(json!({"conversations": [{"replies": [{"content": "a",
                "usage": {"input_tokens": -1, "output_tokens": 1}}]}]})),
            "conversations[0].replies[0].usage.input_tokens"
        );
        assert_eq!(
            field_error(
                json!({"conversations": [{"replies": [{"content": "a", "finish": true},
                {"content": "b"}]}]})
            ),
            "conversations[0].replies[0].finish"
        );
        assert_eq!(
            field_error(json!({"conversations": [{"replies": [{}]}]})),
            "conversations[0].replies[0]"
        );
        assert_eq!(
            field_error(json!({"conversations": [{"match": 3, "replies": [{"content": "a"}]}]})),
            "conversations[0].match"
        );
    }

    #[test]
    fn error_messages_name_the_file_and_the_field() {
        let err = parse(json!({"conversations": [{"replies": [{"tool_calls": [{"name": ""}]}]}]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.json"), "{err}");
        assert!(
            err.contains("conversations[0].replies[0].tool_calls[0].name"),
            "{err}"
        );
        let err = ReplayScript::parse("{not json", Path::new("broken.json"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("broken.json") && err.contains("not valid JSON"),
            "{err}"
        );
        let err = ReplayScript::load(Path::new("/nonexistent/script.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/script.json"), "{err}");
    }
}
