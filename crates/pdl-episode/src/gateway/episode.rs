//! Episodes: [`EpisodeSpec`], the [`EpisodeHandle`] the caller keeps, the
//! [`Usage`] it reports, the registry the request handler looks tokens up in,
//! and the budget: a [`Reservation`] taken under the episode's lock before a
//! call goes upstream and settled when it ends.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ledger::{Ledger, LedgerWriter, Spent};
use super::trajectory::{ExchangeRecord, TrajectoryFile, TrajectoryWriter};
use super::GatewayError;
use crate::provider::TokenCount;

/// How long [`EpisodeHandle::close`] waits for exchanges in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// The prefix of every episode token.
const TOKEN_PREFIX: &str = "pdl-ep-";

/// Refused calls recorded in a burst before the rate limit applies.
const REFUSAL_BURST: f64 = 20.0;

/// Refused calls recorded per second once the burst is spent.
const REFUSALS_PER_SECOND: f64 = 5.0;

/// How long a refusal beyond the rate limit is held before it is answered.
const REFUSAL_DELAY: Duration = Duration::from_secs(1);

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
    /// Input tokens as reported by the provider (estimated where it reported
    /// none; the reserved bound for abandoned calls), those of earlier attempts
    /// of the episode slot included ([`Usage::carried_input_tokens`]).
    pub input_tokens: u64,
    /// Output tokens as reported by the provider (estimated where it reported
    /// none; the reserved cap for abandoned calls), those of earlier attempts
    /// included ([`Usage::carried_output_tokens`]).
    pub output_tokens: u64,
    /// Of `input_tokens`, what earlier attempts of the episode slot spent (from
    /// its [`Ledger`]).
    #[serde(default)]
    pub carried_input_tokens: u64,
    /// Of `output_tokens`, what earlier attempts of the episode slot spent.
    #[serde(default)]
    pub carried_output_tokens: u64,
    /// Calls forwarded to the upstream, whatever their outcome (retries not counted).
    pub calls: u64,
    /// Calls the gateway answered by itself: budget spent, wrong API, bad body,
    /// a field or tool the campaign does not allow.
    pub refused_calls: u64,
    /// Refused calls because the budget left could not hold them.
    #[serde(default)]
    pub budget_refusals: u64,
    /// Refused calls, and calls the provider rejected without billing, left out
    /// of the trajectory by its rate limit (counted only).
    #[serde(default)]
    pub unrecorded_refusals: u64,
    /// Forwarded calls that ended in an upstream error status, a timeout or a
    /// connection failure.
    pub upstream_errors: u64,
    /// Forwarded calls whose usage had to be estimated.
    pub estimated_calls: u64,
    /// Forwarded calls given up before their response ended (the client went
    /// away, the upstream broke off or timed out): charged their whole
    /// reservation.
    #[serde(default)]
    pub abandoned_calls: u64,
    /// Tokens the provider reported beyond what the gateway had reserved for
    /// the call (it ignored the output cap, or counted more input than the
    /// request's bytes). Zero with an upstream that honours the cap.
    #[serde(default)]
    pub overrun_tokens: u64,
}

impl Usage {
    /// Input plus output tokens: what the budget is charged.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Input plus output tokens of earlier attempts of the episode slot.
    pub fn carried_tokens(&self) -> u64 {
        self.carried_input_tokens + self.carried_output_tokens
    }

    fn charged(&self) -> Spent {
        Spent {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        }
    }
}

/// How a forwarded call ended, for the counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Settlement {
    /// Charged what the provider reported (or what was estimated).
    Metered {
        tokens: TokenCount,
        estimated: bool,
        failed: bool,
    },
    /// Charged the whole reservation.
    Abandoned { failed: bool },
}

/// What a call asks of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The most input tokens the request can amount to.
    pub input_bound: u64,
    /// The output cap the agent asked for.
    pub requested_cap: Option<u64>,
    /// The model's own output limit, where known.
    pub model_limit: Option<u64>,
    /// Choices per request (each gets the cap).
    pub choices: u64,
}

/// Why the budget cannot hold a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BudgetRefusal {
    /// Nothing is left.
    Exhausted {
        committed: u64,
        budget: u64,
        /// Of `committed`, what earlier attempts of the episode slot spent.
        carried: u64,
    },
    /// Something is left, but less than the input bound (plus one output token
    /// per choice).
    InputTooLarge {
        input_bound: u64,
        remaining: u64,
        budget: u64,
        /// What earlier attempts of the episode slot spent.
        carried: u64,
    },
    /// The reservation could not be written to the slot's ledger: a call the
    /// harness cannot count is not forwarded.
    Unrecorded { reason: String },
}

impl BudgetRefusal {
    /// The message the agent gets (both start with "token budget exhausted").
    pub(crate) fn message(&self) -> String {
        let (text, carried) = match self {
            BudgetRefusal::Exhausted {
                committed,
                budget,
                carried,
            } => (
                format!(
                    "token budget exhausted: {committed} of {budget} tokens used or held by calls in flight"
                ),
                *carried,
            ),
            BudgetRefusal::InputTooLarge {
                input_bound,
                remaining,
                budget,
                carried,
            } => (
                format!(
                    "token budget exhausted: this request may count up to {input_bound} input tokens \
                     (its size in bytes and what the provider adds) and only {remaining} of the \
                     {budget} tokens are left; send a shorter request"
                ),
                *carried,
            ),
            BudgetRefusal::Unrecorded { reason } => {
                return format!(
                    "the gateway cannot record this call in the episode's token ledger ({reason}); \
                     it was not forwarded"
                )
            }
        };
        if carried > 0 {
            format!("{text} ({carried} tokens of the budget were spent by earlier attempts of this episode)")
        } else {
            text
        }
    }
}

#[derive(Debug)]
struct Counters {
    usage: Usage,
    /// Tokens held by calls in flight.
    reserved: Spent,
    in_flight: usize,
    /// Refusals that may still be recorded now (a token bucket).
    refusal_allowance: f64,
    allowance_at: Instant,
    /// The slot's ledger, appended to each time the spend changes.
    ledger: Option<LedgerWriter>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            usage: Usage::default(),
            reserved: Spent::default(),
            in_flight: 0,
            refusal_allowance: REFUSAL_BURST,
            allowance_at: Instant::now(),
            ledger: None,
        }
    }
}

impl Counters {
    /// Tokens charged or held by calls in flight.
    fn committed(&self) -> u64 {
        self.usage
            .total_tokens()
            .saturating_add(self.reserved.total())
    }

    /// Appends the spend to the ledger, if there is one. Called under the
    /// episode's lock, so the lines follow the changes in order. `Err` with
    /// the reason when the line could not be written.
    fn write_ledger(&mut self) -> Result<(), String> {
        let (charged, held) = (self.usage.charged(), self.reserved);
        match &mut self.ledger {
            Some(ledger) => ledger.write(charged, held),
            None => Ok(()),
        }
    }
}

/// One open (or closing) episode, shared by its handle and the request handlers.
pub(crate) struct Episode {
    pub(crate) id: String,
    pub(crate) budget: u64,
    token: String,
    counters: Mutex<Counters>,
    idle: Condvar,
    trajectory: Arc<Mutex<TrajectoryFile>>,
    writer: TrajectoryWriter,
    /// Bytes of request bodies the gateway holds for this episode now.
    body_bytes: std::sync::atomic::AtomicU64,
}

/// The most request-body bytes the gateway holds for one episode at a time
/// (its calls in flight together): the gateway runs in the harness, outside
/// every run's memory bound, so concurrent large bodies must not add up.
pub(crate) const MAX_EPISODE_BODY_BYTES: u64 = 64 << 20;

/// Request-body bytes held for an episode; released when dropped.
pub(crate) struct HeldBody {
    episode: Arc<Episode>,
    held: u64,
}

impl HeldBody {
    pub(crate) fn new(episode: &Arc<Episode>) -> HeldBody {
        HeldBody {
            episode: episode.clone(),
            held: 0,
        }
    }

    /// Holds `bytes` more; false when the episode would then hold more than
    /// [`MAX_EPISODE_BODY_BYTES`] (nothing is held then).
    pub(crate) fn hold(&mut self, bytes: u64) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.episode.body_bytes.fetch_add(bytes, Ordering::SeqCst);
        if before.saturating_add(bytes) > MAX_EPISODE_BODY_BYTES {
            self.episode.body_bytes.fetch_sub(bytes, Ordering::SeqCst);
            return false;
        }
        self.held += bytes;
        true
    }
}

impl Drop for HeldBody {
    fn drop(&mut self) {
        self.episode
            .body_bytes
            .fetch_sub(self.held, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether a refusal is recorded, and how long to hold its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefusalPace {
    pub record: bool,
    pub delay: Duration,
}

impl Episode {
    /// Tokens not yet used nor held by calls in flight.
    pub(crate) fn remaining(&self) -> u64 {
        self.budget.saturating_sub(self.lock_counters().committed())
    }

    /// The refusal for a call when nothing is left, if nothing is.
    pub(crate) fn exhausted(&self) -> Option<BudgetRefusal> {
        let c = self.lock_counters();
        let committed = c.committed();
        (committed >= self.budget).then_some(BudgetRefusal::Exhausted {
            committed,
            budget: self.budget,
            carried: c.usage.carried_tokens(),
        })
    }

    /// Reserves the input bound and an output cap for a call, or refuses it.
    /// The cap is the smallest of what the agent asked for, the model's limit
    /// and what is left after the input bound, divided among the choices; the
    /// reservation is the input bound plus the cap of every choice, so the
    /// reservations in flight and the tokens used never exceed the budget.
    pub(crate) fn reserve(self: &Arc<Self>, ask: Ask) -> Result<Reservation, BudgetRefusal> {
        let mut c = self.lock_counters();
        let committed = c.committed();
        let remaining = self.budget.saturating_sub(committed);
        let refusal = if remaining == 0 {
            Some(BudgetRefusal::Exhausted {
                committed,
                budget: self.budget,
                carried: c.usage.carried_tokens(),
            })
        } else {
            let room = remaining.saturating_sub(ask.input_bound) / ask.choices.max(1);
            (room == 0).then_some(BudgetRefusal::InputTooLarge {
                input_bound: ask.input_bound,
                remaining,
                budget: self.budget,
                carried: c.usage.carried_tokens(),
            })
        };
        if let Some(refusal) = refusal {
            c.usage.budget_refusals += 1;
            return Err(refusal);
        }
        let room = (remaining - ask.input_bound) / ask.choices.max(1);
        let cap = [ask.requested_cap, ask.model_limit]
            .into_iter()
            .flatten()
            .fold(room, u64::min)
            .max(1);
        let output = cap * ask.choices.max(1);
        c.reserved.input_tokens += ask.input_bound;
        c.reserved.output_tokens += output;
        // On disk before the call goes upstream: a harness that dies while
        // the call is in flight leaves it counted. A call that cannot be
        // counted there does not go.
        if let Err(reason) = c.write_ledger() {
            c.reserved.input_tokens -= ask.input_bound;
            c.reserved.output_tokens -= output;
            return Err(BudgetRefusal::Unrecorded { reason });
        }
        Ok(Reservation {
            episode: self.clone(),
            input: ask.input_bound,
            output,
            cap,
            settled: false,
        })
    }

    /// Counts a refused call and says whether to record it (a token bucket of
    /// [`REFUSAL_BURST`] refilled at [`REFUSALS_PER_SECOND`]) and how long to
    /// hold its answer.
    pub(crate) fn pace_refusal(&self) -> RefusalPace {
        self.lock_counters().usage.refused_calls += 1;
        self.pace_unbilled()
    }

    /// Says whether to record an exchange that cost nothing (a refusal, or a
    /// call the provider rejected without billing it): such exchanges share
    /// one token bucket, so an agent cannot fill the disk with free calls.
    pub(crate) fn pace_unbilled(&self) -> RefusalPace {
        let mut c = self.lock_counters();
        let now = Instant::now();
        let refill = now.duration_since(c.allowance_at).as_secs_f64() * REFUSALS_PER_SECOND;
        c.refusal_allowance = (c.refusal_allowance + refill).min(REFUSAL_BURST);
        c.allowance_at = now;
        if c.refusal_allowance >= 1.0 {
            c.refusal_allowance -= 1.0;
            RefusalPace {
                record: true,
                delay: Duration::ZERO,
            }
        } else {
            c.usage.unrecorded_refusals += 1;
            RefusalPace {
                record: false,
                delay: REFUSAL_DELAY,
            }
        }
    }

    /// Marks an exchange as in flight until the returned guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.lock_counters().in_flight += 1;
        InFlight {
            episode: self.clone(),
        }
    }

    /// Hands a record to the trajectory writer; the exchange stays in flight
    /// until the line is written.
    pub(crate) fn record(&self, record: ExchangeRecord, in_flight: InFlight) {
        self.writer.send(self.trajectory.clone(), record, in_flight);
    }

    fn settle(&self, reservation: &Reservation, settlement: Settlement) {
        let mut c = self.lock_counters();
        c.reserved.input_tokens = c.reserved.input_tokens.saturating_sub(reservation.input);
        c.reserved.output_tokens = c.reserved.output_tokens.saturating_sub(reservation.output);
        let usage = &mut c.usage;
        usage.calls += 1;
        let charged = match settlement {
            Settlement::Metered {
                tokens,
                estimated,
                failed,
            } => {
                usage.estimated_calls += u64::from(estimated);
                usage.upstream_errors += u64::from(failed);
                tokens
            }
            Settlement::Abandoned { failed } => {
                usage.abandoned_calls += 1;
                usage.upstream_errors += u64::from(failed);
                TokenCount {
                    input: reservation.input,
                    output: reservation.output,
                }
            }
        };
        usage.input_tokens += charged.input;
        usage.output_tokens += charged.output;
        usage.overrun_tokens +=
            (charged.input + charged.output).saturating_sub(reservation.input + reservation.output);
        // A failure is kept for the handle (`ledger_error`); the reservation
        // line already on disk still holds the call.
        let _ = c.write_ledger();
    }

    fn usage(&self) -> Usage {
        self.lock_counters().usage
    }

    fn lock_counters(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
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

/// Tokens held for one forwarded call. Settle it with what the call used;
/// dropped unsettled (the handler was dropped because the client went away,
/// or the call failed after it was sent) it charges its whole amount.
pub(crate) struct Reservation {
    episode: Arc<Episode>,
    /// The input bound held.
    pub(crate) input: u64,
    /// The output held: the cap times the choices.
    pub(crate) output: u64,
    /// The output cap of each choice, sent upstream.
    pub(crate) cap: u64,
    settled: bool,
}

impl Reservation {
    /// Ends the reservation, charging what `settlement` says.
    pub(crate) fn settle(mut self, settlement: Settlement) {
        self.settled = true;
        self.episode.settle(&self, settlement);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            self.settled = true;
            self.episode
                .settle(self, Settlement::Abandoned { failed: false });
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("input", &self.input)
            .field("output", &self.output)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

/// An exchange in flight; dropping it ends it.
pub(crate) struct InFlight {
    episode: Arc<Episode>,
}

impl InFlight {
    /// The episode the exchange belongs to.
    pub(crate) fn episode(&self) -> &Arc<Episode> {
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
pub(crate) struct Registry {
    episodes: Mutex<HashMap<String, Arc<Episode>>>,
    writer: TrajectoryWriter,
}

impl Registry {
    pub(crate) fn new(writer: TrajectoryWriter) -> Registry {
        Registry {
            episodes: Mutex::default(),
            writer,
        }
    }

    /// Opens an episode and registers its token. `file` is its trajectory,
    /// already open for appending; `None` opens `spec.trajectory_path` (its
    /// last component not followed). With a `ledger`, the episode starts from
    /// what earlier attempts of its slot spent and appends its spend to it.
    pub(crate) fn open(
        self: &Arc<Self>,
        spec: EpisodeSpec,
        file: Option<File>,
        ledger: Option<Ledger>,
        api_key: Option<&str>,
    ) -> Result<EpisodeHandle, GatewayError> {
        let token = new_token().map_err(GatewayError::Token)?;
        let mut secrets = vec![token.clone()];
        secrets.extend(api_key.map(str::to_string));
        let trajectory = match file {
            Some(file) => TrajectoryFile::new(file, &spec.trajectory_path, secrets),
            None => TrajectoryFile::open(&spec.trajectory_path, secrets).map_err(|source| {
                GatewayError::Trajectory {
                    id: spec.id.clone(),
                    path: spec.trajectory_path.clone(),
                    source,
                }
            })?,
        };
        let mut counters = Counters::default();
        if let Some(ledger) = ledger {
            let carried = ledger.carried();
            let usage = &mut counters.usage;
            usage.input_tokens = carried.input_tokens;
            usage.output_tokens = carried.output_tokens;
            usage.carried_input_tokens = carried.input_tokens;
            usage.carried_output_tokens = carried.output_tokens;
            counters.ledger = Some(ledger.into_writer(spec.id.clone()));
            // Failures are kept for the handle; each reservation writes again.
            let _ = counters.write_ledger();
        }
        let episode = Arc::new(Episode {
            id: spec.id,
            budget: spec.token_budget,
            token: token.clone(),
            counters: Mutex::new(counters),
            idle: Condvar::new(),
            trajectory: Arc::new(Mutex::new(trajectory)),
            writer: self.writer.clone(),
            body_bytes: std::sync::atomic::AtomicU64::new(0),
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

    /// True once the tokens used reach the budget, or a call was refused
    /// because the budget left could not hold it.
    pub fn budget_exhausted(&self) -> bool {
        let usage = self.episode.usage();
        usage.total_tokens() >= self.episode.budget || usage.budget_refusals > 0
    }

    /// The first failure to write the ledger, if any.
    pub fn ledger_error(&self) -> Option<String> {
        self.episode
            .lock_counters()
            .ledger
            .as_ref()
            .and_then(|l| l.error().map(str::to_string))
    }

    /// The first failure to write the trajectory file, if any.
    pub fn trajectory_error(&self) -> Option<String> {
        self.episode
            .trajectory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error()
            .map(str::to_string)
    }

    /// Waits at most `limit` until no exchange is in flight: every call made so
    /// far is settled and its trajectory line written. True when none is left.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        self.episode.wait_idle(limit);
        self.episode.lock_counters().in_flight == 0
    }

    /// Revokes the token (further calls get 401), waits a few seconds at most for
    /// exchanges in flight to be settled and written, and returns the final usage.
    pub fn close(self) -> Usage {
        self.end()
    }

    /// Like [`EpisodeHandle::close`], keeping the handle to read the errors
    /// ([`EpisodeHandle::ledger_error`], [`EpisodeHandle::trajectory_error`])
    /// once everything in flight is written.
    pub fn end(&self) -> Usage {
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

    fn registry() -> Arc<Registry> {
        Arc::new(Registry::new(TrajectoryWriter::start().unwrap()))
    }

    fn spec(dir: &std::path::Path, id: &str, budget: u64) -> EpisodeSpec {
        EpisodeSpec {
            id: id.into(),
            token_budget: budget,
            trajectory_path: dir.join(format!("{id}.jsonl")),
        }
    }

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
        let registry = registry();
        let closed = registry
            .open(spec(dir.path(), "a", 10), None, None, None)
            .unwrap();
        let dropped = registry
            .open(spec(dir.path(), "b", 10), None, None, None)
            .unwrap();
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
        let err = registry()
            .open(
                EpisodeSpec {
                    id: "e".into(),
                    token_budget: 1,
                    trajectory_path: blocker.join("t.jsonl"),
                },
                None,
                None,
                None,
            )
            .unwrap_err();
        assert!(err.to_string().contains("file/t.jsonl"), "{err}");
    }

    fn ask(input_bound: u64, requested_cap: Option<u64>, choices: u64) -> Ask {
        Ask {
            input_bound,
            requested_cap,
            model_limit: None,
            choices,
        }
    }

    #[test]
    fn reservations_never_hold_more_than_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let handle = registry()
            .open(spec(dir.path(), "r", 1000), None, None, None)
            .unwrap();
        let episode = handle.episode.clone();
        let first = episode.reserve(ask(100, Some(200_000), 1)).unwrap();
        assert_eq!((first.input, first.cap, first.output), (100, 900, 900));
        assert_eq!(episode.remaining(), 0);
        assert_eq!(
            episode.reserve(ask(10, Some(10), 1)).unwrap_err(),
            BudgetRefusal::Exhausted {
                committed: 1000,
                budget: 1000,
                carried: 0,
            }
        );
        // Settled with less than reserved: the rest is free again.
        first.settle(Settlement::Metered {
            tokens: TokenCount {
                input: 40,
                output: 60,
            },
            estimated: false,
            failed: false,
        });
        assert_eq!(episode.remaining(), 900);
        // The cap is divided among the choices.
        let split = episode.reserve(ask(100, None, 4)).unwrap();
        assert_eq!((split.cap, split.output), (200, 800));
        // Dropped unsettled: the whole reservation is charged.
        drop(split);
        let usage = handle.usage();
        assert_eq!(usage.total_tokens(), 1000);
        assert_eq!((usage.calls, usage.abandoned_calls), (2, 1));
        assert!(handle.budget_exhausted());
    }

    #[test]
    fn an_input_bound_larger_than_what_is_left_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let handle = registry()
            .open(spec(dir.path(), "i", 500), None, None, None)
            .unwrap();
        let episode = handle.episode.clone();
        for bound in [500, 10_000_000] {
            assert!(matches!(
                episode.reserve(ask(bound, Some(10), 1)),
                Err(BudgetRefusal::InputTooLarge { remaining: 500, .. })
            ));
        }
        assert!(matches!(
            episode.reserve(ask(499, None, 2)),
            Err(BudgetRefusal::InputTooLarge { .. })
        ));
        let fits = episode.reserve(ask(499, None, 1)).unwrap();
        assert_eq!(fits.cap, 1);
        assert_eq!(handle.usage().budget_refusals, 3);
        assert!(handle.budget_exhausted());
    }

    #[test]
    fn a_ledger_carries_the_slots_spend_into_the_budget_and_records_every_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(
            &path,
            "{\"tokens_in\": 300, \"tokens_out\": 200, \"held_in\": 0, \"held_out\": 100, \"closed\": true}\n",
        )
        .unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        let ledger = Ledger::resume(file, path.clone()).unwrap();
        let handle = registry()
            .open(spec(dir.path(), "l", 1000), None, Some(ledger), None)
            .unwrap();
        let usage = handle.usage();
        assert_eq!((usage.input_tokens, usage.output_tokens), (300, 300));
        assert_eq!(usage.carried_tokens(), 600);
        let episode = handle.episode.clone();
        assert_eq!(episode.remaining(), 400);
        let reservation = episode.reserve(ask(100, Some(1_000), 1)).unwrap();
        assert_eq!(reservation.cap, 300);
        let refused = episode.reserve(ask(1, None, 1)).unwrap_err();
        assert!(refused
            .message()
            .contains("600 tokens of the budget were spent by earlier attempts"));
        reservation.settle(Settlement::Metered {
            tokens: TokenCount {
                input: 90,
                output: 10,
            },
            estimated: false,
            failed: false,
        });
        assert!(handle.ledger_error().is_none());
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The earlier line, the opening, the reservation, the settlement.
        assert_eq!(lines.len(), 4);
        assert_eq!(
            (&lines[2]["held_in"], &lines[2]["held_out"]),
            (&100.into(), &300.into())
        );
        assert_eq!(
            (&lines[3]["tokens_in"], &lines[3]["tokens_out"]),
            (&390.into(), &310.into())
        );
        assert_eq!(lines[3]["held_in"], 0);
    }

    #[test]
    fn a_call_whose_reservation_cannot_be_recorded_is_not_forwarded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        std::fs::write(&path, "").unwrap();
        // Read-only: every append fails.
        let ledger = Ledger::resume(File::open(&path).unwrap(), path.clone()).unwrap();
        let handle = registry()
            .open(spec(dir.path(), "u", 1000), None, Some(ledger), None)
            .unwrap();
        let episode = handle.episode.clone();
        let refused = episode.reserve(ask(10, Some(10), 1)).unwrap_err();
        assert!(matches!(refused, BudgetRefusal::Unrecorded { .. }));
        assert!(
            refused.message().contains("ledger.jsonl"),
            "{}",
            refused.message()
        );
        assert_eq!(episode.remaining(), 1000, "nothing stays reserved");
        assert!(handle.ledger_error().is_some());
        assert_eq!(handle.usage().budget_refusals, 0);
    }

    #[test]
    fn refusals_beyond_the_burst_are_paced_and_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let handle = registry()
            .open(spec(dir.path(), "p", 5), None, None, None)
            .unwrap();
        let paces: Vec<_> = (0..30).map(|_| handle.episode.pace_refusal()).collect();
        let recorded = paces.iter().filter(|p| p.record).count();
        assert!((20..=21).contains(&recorded), "{recorded}");
        assert!(paces[29].delay >= Duration::from_millis(500));
        let usage = handle.usage();
        assert_eq!(usage.refused_calls, 30);
        assert_eq!(usage.unrecorded_refusals as usize, 30 - recorded);
    }
}
