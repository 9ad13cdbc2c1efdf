//! Episodes: [`EpisodeSpec`], the [`EpisodeHandle`] the caller keeps, the
//! [`Usage`] it reports, and the registry the request handler looks tokens up in.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::trajectory::{ExchangeRecord, TrajectoryWriter};
use super::GatewayError;
use crate::provider::TokenCount;

/// How long [`EpisodeHandle::close`] waits for exchanges in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// The prefix of every episode token.
const TOKEN_PREFIX: &str = "pdl-ep-";

/// An episode to open on the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeSpec {
    /// The episode's id (only used in messages).
    pub id: String,
    /// The most input + output tokens the episode may use.
    pub token_budget: u64,
    /// The JSON Lines file every exchange is appended to.
    pub trajectory_path: PathBuf,
}

/// What an episode has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens as reported by the provider (estimated where it reported none).
    pub input_tokens: u64,
    /// Output tokens as reported by the provider (estimated where it reported none).
    pub output_tokens: u64,
    /// Calls forwarded to the upstream, whatever their outcome (retries not counted).
    pub calls: u64,
    /// Calls the gateway answered by itself: budget spent, wrong API, bad body.
    pub refused_calls: u64,
    /// Forwarded calls that ended in an upstream error status, a timeout or a
    /// connection failure.
    pub upstream_errors: u64,
    /// Forwarded calls whose usage had to be estimated.
    pub estimated_calls: u64,
}

impl Usage {
    /// Input plus output tokens: what the budget is charged.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// How an exchange ended, for the counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    /// The gateway answered by itself.
    Refused,
    /// The call went upstream.
    Forwarded {
        tokens: TokenCount,
        estimated: bool,
        failed: bool,
    },
}

#[derive(Debug, Default)]
struct Counters {
    usage: Usage,
    in_flight: usize,
}

/// One open (or closing) episode, shared by its handle and the request handlers.
pub(crate) struct Episode {
    pub(crate) id: String,
    pub(crate) budget: u64,
    token: String,
    counters: Mutex<Counters>,
    idle: Condvar,
    trajectory: Mutex<TrajectoryWriter>,
}

impl Episode {
    /// Tokens used so far.
    pub(crate) fn used(&self) -> u64 {
        self.lock_counters().usage.total_tokens()
    }

    /// Marks an exchange as in flight until the returned guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.lock_counters().in_flight += 1;
        InFlight {
            episode: self.clone(),
        }
    }

    /// Counts a finished exchange and appends it to the trajectory.
    pub(crate) fn finish(&self, outcome: Outcome, record: &ExchangeRecord) {
        {
            let mut counters = self.lock_counters();
            let usage = &mut counters.usage;
            match outcome {
                Outcome::Refused => usage.refused_calls += 1,
                Outcome::Forwarded {
                    tokens,
                    estimated,
                    failed,
                } => {
                    usage.calls += 1;
                    usage.input_tokens += tokens.input;
                    usage.output_tokens += tokens.output;
                    usage.estimated_calls += u64::from(estimated);
                    usage.upstream_errors += u64::from(failed);
                }
            }
        }
        self.lock_trajectory().append(record);
    }

    fn usage(&self) -> Usage {
        self.lock_counters().usage
    }

    fn lock_counters(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_trajectory(&self) -> MutexGuard<'_, TrajectoryWriter> {
        self.trajectory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no exchange is in flight, at most `limit`.
    fn wait_idle(&self, limit: Duration) {
        let counters = self.lock_counters();
        let _unused = self
            .idle
            .wait_timeout_while(counters, limit, |c| c.in_flight > 0)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// An exchange in flight; dropping it ends it.
pub(crate) struct InFlight {
    episode: Arc<Episode>,
}

impl InFlight {
    /// The episode the exchange belongs to.
    pub(crate) fn episode(&self) -> &Episode {
        &self.episode
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counters = self.episode.lock_counters();
        counters.in_flight = counters.in_flight.saturating_sub(1);
        if counters.in_flight == 0 {
            self.episode.idle.notify_all();
        }
    }
}

/// The open episodes by token.
#[derive(Default)]
pub(crate) struct Registry {
    episodes: Mutex<HashMap<String, Arc<Episode>>>,
}

impl Registry {
    /// Opens an episode and registers its token.
    pub(crate) fn open(
        self: &Arc<Self>,
        spec: EpisodeSpec,
        api_key: Option<&str>,
    ) -> Result<EpisodeHandle, GatewayError> {
        let token = new_token().map_err(GatewayError::Token)?;
        let mut secrets = vec![token.clone()];
        secrets.extend(api_key.map(str::to_string));
        let trajectory =
            TrajectoryWriter::open(&spec.trajectory_path, secrets).map_err(|source| {
                GatewayError::Trajectory {
                    id: spec.id.clone(),
                    path: spec.trajectory_path.clone(),
                    source,
                }
            })?;
        let episode = Arc::new(Episode {
            id: spec.id,
            budget: spec.token_budget,
            token: token.clone(),
            counters: Mutex::default(),
            idle: Condvar::new(),
            trajectory: Mutex::new(trajectory),
        });
        self.lock().insert(token, episode.clone());
        Ok(EpisodeHandle {
            episode,
            registry: self.clone(),
        })
    }

    /// The open episode with this token.
    pub(crate) fn get(&self, token: &str) -> Option<Arc<Episode>> {
        self.lock().get(token).cloned()
    }

    fn remove(&self, token: &str) {
        self.lock().remove(token);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Episode>>> {
        self.episodes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An open episode. Its token works until it is closed or dropped.
pub struct EpisodeHandle {
    episode: Arc<Episode>,
    registry: Arc<Registry>,
}

impl EpisodeHandle {
    /// The bearer token the agent authenticates with: `pdl-ep-` and 32 hex digits.
    pub fn token(&self) -> &str {
        &self.episode.token
    }

    /// The episode's id.
    pub fn id(&self) -> &str {
        &self.episode.id
    }

    /// The episode's token budget.
    pub fn token_budget(&self) -> u64 {
        self.episode.budget
    }

    /// What the episode has used so far.
    pub fn usage(&self) -> Usage {
        self.episode.usage()
    }

    /// True once the tokens used reach the budget; every further call is refused.
    pub fn budget_exhausted(&self) -> bool {
        self.episode.used() >= self.episode.budget
    }

    /// The first failure to write the trajectory file, if any.
    pub fn trajectory_error(&self) -> Option<String> {
        self.episode.lock_trajectory().error().map(str::to_string)
    }

    /// Revokes the token (further calls get 401), waits a few seconds at most for
    /// exchanges in flight to be recorded, and returns the final usage.
    pub fn close(self) -> Usage {
        self.registry.remove(&self.episode.token);
        self.episode.wait_idle(CLOSE_GRACE);
        self.episode.usage()
    }
}

impl Drop for EpisodeHandle {
    fn drop(&mut self) {
        self.registry.remove(&self.episode.token);
    }
}

impl fmt::Debug for EpisodeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpisodeHandle")
            .field("id", &self.episode.id)
            .field("token_budget", &self.episode.budget)
            .field("usage", &self.episode.usage())
            .finish_non_exhaustive()
    }
}

/// A fresh random token: the prefix and 16 bytes from the kernel's random source.
fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + 32);
    token.push_str(TOKEN_PREFIX);
    for byte in bytes {
        token.push_str(&format!("{byte:02x}"));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_hex_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 32);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert!(a[TOKEN_PREFIX.len()..]
            .chars()
            .all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn closing_or_dropping_a_handle_revokes_its_token() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Arc::new(Registry::default());
        let spec = |id: &str| EpisodeSpec {
            id: id.into(),
            token_budget: 10,
            trajectory_path: dir.path().join(format!("{id}.jsonl")),
        };
        let closed = registry.open(spec("a"), None).unwrap();
        let dropped = registry.open(spec("b"), None).unwrap();
        let (closed_token, dropped_token) =
            (closed.token().to_string(), dropped.token().to_string());
        assert!(registry.get(&closed_token).is_some());
        assert_eq!(closed.close(), Usage::default());
        drop(dropped);
        assert!(registry.get(&closed_token).is_none());
        assert!(registry.get(&dropped_token).is_none());
    }

    #[test]
    fn an_unwritable_trajectory_path_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let registry = Arc::new(Registry::default());
        let err = registry
            .open(
                EpisodeSpec {
                    id: "e".into(),
                    token_budget: 1,
                    trajectory_path: blocker.join("t.jsonl"),
                },
                None,
            )
            .unwrap_err();
        assert!(err.to_string().contains("file/t.jsonl"), "{err}");
    }
}
