//! The `episode` part of an episode's record ([`EpisodeInfo`]): one typed struct
//! shared by the writer (the campaign) and every reader (reports, certificates,
//! resuming).
//!
//! It serializes to exactly the object campaigns have always written: the
//! fields are declared in alphabetical order because that object used to be a
//! `serde_json::Value` (whose keys come out sorted), and the fields a campaign
//! sets only in some cases are left out when unset. Reading is lenient, since
//! run folders outlive releases and may have been edited: a field of the wrong
//! type is left unset and named in [`EpisodeInfo::malformed`] instead of
//! making the whole record unreadable, and fields this release does not know
//! are kept in [`EpisodeInfo::other`].

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::Verdict;

/// Tokens in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenCount {
    /// Input tokens.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
}

/// Where an episode's model calls went.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ModelRoute {
    /// The upstream's base URL.
    pub base_url: String,
    /// The gateway the agent called.
    pub gateway: String,
    /// The campaign's model.
    pub model: String,
    /// The upstream API (`openai`, `anthropic`).
    pub provider: String,
}

/// An earlier outcome of an episode run again (a harness error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorOutcome {
    /// Why the earlier attempt stopped.
    pub detail: Option<String>,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub started_at: String,
    /// Its verdict.
    pub verdict: Verdict,
}

/// The file system an episode's workspace and scratch lived on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScratchFsInfo {
    /// A bounded file system of the episode's own.
    Own {
        /// Its size bound.
        bytes: u64,
        /// Its inode bound.
        inodes: u64,
    },
    /// None could be mounted; why.
    Shared {
        /// What went wrong and what that means.
        shared: String,
    },
}

/// A field of a record's `episode` object that was present but not of its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedField {
    /// The field's name.
    pub field: &'static str,
    /// What it should have been (`a string`, `a non-negative integer`, …).
    pub expected: &'static str,
}

/// An episode record's `episode` object. See the module docs for how it is
/// written and read; docs/FORMATS.md describes every field.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EpisodeInfo {
    /// Calls given up before their response ended, charged their reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned_calls: Option<u64>,
    /// The agent's label (`builtin`, `cmd:<command>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Provider-side tools the campaign enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_provider_tools: Option<Vec<String>>,
    /// Calls refused because the budget left could not hold them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_refusals: Option<u64>,
    /// Model calls forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// What earlier attempts of the slot spent (counted in the token totals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried: Option<TokenCount>,
    /// Why the agent stopped (`finished`, `budget_exhausted`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// The agent's error: unset when the agent did not run to an end, `Some(None)`
    /// (written as `null`) when it ended without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Option<String>>,
    /// What attempts cut short by a killed harness spent (not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<TokenCount>,
    /// The episode's content key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The slot's token ledger, relative to the run folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<String>,
    /// Why the ledger could not be written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_error: Option<String>,
    /// An external agent's own output, relative to the run folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The campaign's model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the model calls went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_route: Option<ModelRoute>,
    /// Tokens a provider billed beyond a call's reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrun_tokens: Option<u64>,
    /// The final patch, relative to the run folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Why no final patch could be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_error: Option<String>,
    /// Earlier outcomes of a re-run, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_outcomes: Option<Vec<PriorOutcome>>,
    /// The built-in agent's prompt version (`null` for external agents).
    pub prompt_version: Option<String>,
    /// Calls refused by the gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_calls: Option<u64>,
    /// A re-run's first outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<PriorOutcome>,
    /// The sample number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<u64>,
    /// The episode's own file system, or why it had none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch_fs: Option<ScratchFsInfo>,
    /// Model calls the agent made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// The agent's own summary: unset when the agent did not run to an end,
    /// `Some(None)` (written as `null`) when it gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Option<String>>,
    /// The episode's token budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<i64>,
    /// Input tokens of the slot, earlier attempts included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    /// Output tokens of the slot, earlier attempts included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    /// The trajectory, relative to the run folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<String>,
    /// Refused or unbilled calls left out of the trajectory by its rate limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecorded_refusals: Option<u64>,
    /// The agent's wall time, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// Fields this release does not know, kept as read.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
    /// Fields that were present with the wrong type (left unset above).
    #[serde(skip)]
    pub malformed: Vec<MalformedField>,
}

impl EpisodeInfo {
    /// Reads an `episode` object leniently (see the module docs).
    pub fn from_object(mut map: Map<String, Value>) -> Self {
        let mut bad = Vec::new();
        let mut info = EpisodeInfo {
            abandoned_calls: field(&mut map, &mut bad, "abandoned_calls", COUNT),
            agent: field(&mut map, &mut bad, "agent", TEXT),
            allowed_provider_tools: field(&mut map, &mut bad, "allowed_provider_tools", LIST),
            budget_refusals: field(&mut map, &mut bad, "budget_refusals", COUNT),
            calls: field(&mut map, &mut bad, "calls", COUNT),
            carried: field(&mut map, &mut bad, "carried", TOKENS),
            end_reason: field(&mut map, &mut bad, "end_reason", TEXT),
            error: map.remove("error").map(any_text),
            interrupted: field(&mut map, &mut bad, "interrupted", TOKENS),
            key: field(&mut map, &mut bad, "key", TEXT),
            ledger: field(&mut map, &mut bad, "ledger", TEXT),
            ledger_error: field(&mut map, &mut bad, "ledger_error", TEXT),
            log: field(&mut map, &mut bad, "log", TEXT),
            model: field(&mut map, &mut bad, "model", TEXT),
            model_route: field(&mut map, &mut bad, "model_route", OBJECT),
            overrun_tokens: field(&mut map, &mut bad, "overrun_tokens", COUNT),
            patch: field(&mut map, &mut bad, "patch", TEXT),
            patch_error: map.remove("patch_error").and_then(any_text),
            previous_outcomes: field(&mut map, &mut bad, "previous_outcomes", OUTCOMES),
            prompt_version: field(&mut map, &mut bad, "prompt_version", TEXT),
            refused_calls: field(&mut map, &mut bad, "refused_calls", COUNT),
            rerun_of: field(&mut map, &mut bad, "rerun_of", OBJECT),
            sample: field(&mut map, &mut bad, "sample", COUNT),
            scratch_fs: field(&mut map, &mut bad, "scratch_fs", OBJECT),
            steps: field(&mut map, &mut bad, "steps", COUNT),
            summary: match map.remove("summary") {
                None => None,
                Some(Value::Null) => Some(None),
                Some(Value::String(s)) => Some(Some(s)),
                Some(_) => {
                    bad.push(MalformedField {
                        field: "summary",
                        expected: TEXT,
                    });
                    None
                }
            },
            token_budget: field(&mut map, &mut bad, "token_budget", INTEGER),
            tokens_in: field(&mut map, &mut bad, "tokens_in", COUNT),
            tokens_out: field(&mut map, &mut bad, "tokens_out", COUNT),
            trajectory: field(&mut map, &mut bad, "trajectory", TEXT),
            unrecorded_refusals: field(&mut map, &mut bad, "unrecorded_refusals", COUNT),
            wall_s: field(&mut map, &mut bad, "wall_s", NUMBER),
            other: BTreeMap::new(),
            malformed: Vec::new(),
        };
        info.other = map.into_iter().collect();
        info.malformed = bad;
        info
    }

    /// How many times the episode was run before this record (its earlier
    /// outcomes).
    pub fn reruns(&self) -> usize {
        self.previous_outcomes.as_ref().map_or(0, Vec::len)
    }
}

const TEXT: &str = "a string";
const COUNT: &str = "a non-negative integer";
const INTEGER: &str = "an integer";
const NUMBER: &str = "a number";
const LIST: &str = "a list of strings";
const TOKENS: &str = "an object with tokens_in and tokens_out";
const OBJECT: &str = "an object of the documented form";
const OUTCOMES: &str = "a list of outcomes";

/// Takes `name` from `map`: unset when missing or null, and named in `bad` when
/// it is not a `T`.
fn field<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    bad: &mut Vec<MalformedField>,
    name: &'static str,
    expected: &'static str,
) -> Option<T> {
    match map.remove(name)? {
        Value::Null => None,
        value => match serde_json::from_value(value) {
            Ok(v) => Some(v),
            Err(_) => {
                bad.push(MalformedField {
                    field: name,
                    expected,
                });
                None
            }
        },
    }
}

/// A value shown as text: strings as they are, anything else as compact JSON
/// (`null` is no text).
fn any_text(value: Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

impl<'de> Deserialize<'de> for EpisodeInfo {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::<String, Value>::deserialize(deserializer).map(EpisodeInfo::from_object)
    }
}

/// Reads a record's `episode` field: anything but an object (as some other
/// writer may have put there) reads as no episode fields, which readers report,
/// rather than as an unreadable record.
pub(crate) fn episode_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<EpisodeInfo>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Object(map) => Some(EpisodeInfo::from_object(map)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The object a campaign wrote with `json!` before the type existed, for an
    /// external agent's re-run whose scratch file system was shared.
    fn as_written_before() -> Value {
        json!({
            "key": "0123456789abcdef0123", "agent": "cmd:mini", "model": "gpt-x", "sample": 1,
            "token_budget": 250000, "prompt_version": null,
            "model_route": {"provider": "openai", "base_url": "http://up", "model": "gpt-x", "gateway": "http://127.0.0.1:9"},
            "allowed_provider_tools": ["web_search"],
            "trajectory": "trajectories/t/cmd-mini-s1-01234567.jsonl",
            "rerun_of": {"verdict": "harness_error", "detail": "sandbox failed", "started_at": "2026-01-01T00:00:00Z"},
            "previous_outcomes": [{"verdict": "harness_error", "detail": null, "started_at": "2026-01-01T00:00:00Z"}],
            "ledger": "ledger/t/x.jsonl",
            "tokens_in": 1200, "tokens_out": 80,
            "carried": {"tokens_in": 200, "tokens_out": 10},
            "interrupted": {"tokens_in": 5, "tokens_out": 0},
            "scratch_fs": {"shared": "no file system of its own (EPERM)"},
            "calls": 3, "refused_calls": 0, "budget_refusals": 0, "unrecorded_refusals": 0,
            "abandoned_calls": 0, "overrun_tokens": 0,
            "end_reason": "finished", "steps": 3, "wall_s": 12.5, "error": null, "summary": "done",
            "patch": "patches/t/x.diff", "log": "logs/t/x.log",
        })
    }

    #[test]
    fn it_writes_exactly_the_object_campaigns_wrote_before() {
        let before = as_written_before();
        let info: EpisodeInfo = serde_json::from_value(before.clone()).unwrap();
        assert!(info.malformed.is_empty(), "{:?}", info.malformed);
        assert!(info.other.is_empty(), "{:?}", info.other);
        // Byte for byte: the same keys in the same order.
        assert_eq!(
            serde_json::to_string(&info).unwrap(),
            serde_json::to_string(&before).unwrap()
        );
        let own: EpisodeInfo = serde_json::from_value(
            json!({"scratch_fs": {"bytes": 1, "inodes": 2}, "prompt_version": "p"}),
        )
        .unwrap();
        assert_eq!(
            own.scratch_fs,
            Some(ScratchFsInfo::Own {
                bytes: 1,
                inodes: 2
            })
        );
        assert_eq!(
            serde_json::to_string(&own).unwrap(),
            r#"{"prompt_version":"p","scratch_fs":{"bytes":1,"inodes":2}}"#
        );
    }

    #[test]
    fn odd_fields_are_named_and_unknown_ones_kept() {
        let info: EpisodeInfo = serde_json::from_value(json!({
            "tokens_in": "lots", "wall_s": "slow", "error": 7, "future_field": [1],
            "agent": "builtin",
        }))
        .unwrap();
        let names: Vec<_> = info.malformed.iter().map(|m| m.field).collect();
        assert_eq!(names, ["tokens_in", "wall_s"]);
        assert_eq!(info.tokens_in, None);
        assert_eq!(info.error, Some(Some("7".to_string())));
        assert_eq!(info.agent.as_deref(), Some("builtin"));
        assert_eq!(info.other["future_field"], json!([1]));
    }
}
