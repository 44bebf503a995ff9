//! The store boundary: where a breaker's state lives.
//!
//! The layer and its futures talk to a [`Store`]: admit a call, record its result, give
//! back an unused permit, read a snapshot, obey an operator. [`MemoryStore`], the default,
//! keeps the state in this process; a store for a fleet (Redis, in `fusebox-redis`)
//! implements the same trait, so the layer does not change.
//!
//! # How the memory store stays cheap
//!
//! The state machine sits behind a short `Mutex` (never held across an `.await`), but the
//! common calls do not take it. A word holding the state and generation is read with one
//! atomic load to admit calls while CLOSED, DISABLED or METRICS_ONLY; and a *clean* bit in
//! the same word — the count window is full of fast successes — lets a fast success be
//! recorded by doing nothing at all: replacing the oldest of N identical entries with
//! another identical entry changes nothing, whichever entry it is. A healthy breaker thus
//! makes no shared writes per call; failures, slow calls, a filling window, time windows and
//! every non-closed state take the lock.
//!
//! The word is written only under the lock, so its stores follow the machine's updates in
//! order, and the clean bit is read in the same load as the generation it is true of. What
//! races without the lock — admission against a trip, calls against the move to HALF_OPEN,
//! a fast success against a reset or a failure — is model-checked with loom (`loom_model`,
//! run by `.ci/loom`): no admission past a published trip, no probe past the budget, no
//! outcome lost to a skipped fast success.

use crate::config::CircuitBreakerConfig;
use crate::events::EventSink;
use crate::state::{Command, Effect, Machine, Permit, PermitKind, Rejected, Snapshot, State};
use fusebox_classify::{Clock, ConfigError, Nanos};
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use sync::{AtomicU64, Mutex, MutexGuard};

/// The atomics and the mutex of the memory store: std's, or loom's when the store is
/// model-checked (`--cfg fusebox_loom`, `loom_model`, run by `.ci/loom`).
mod sync {
    #[cfg(fusebox_loom)]
    pub(super) use loom::sync::{Mutex, MutexGuard, atomic::AtomicU64};
    #[cfg(not(fusebox_loom))]
    pub(super) use std::sync::{Mutex, MutexGuard, atomic::AtomicU64};
}

/// Where one breaker's state lives.
pub trait Store: Send + Sync + 'static {
    /// Asks to make a call now.
    fn acquire(&self) -> Result<Permit, Rejected>;

    /// Records the result of a permitted call: whether it failed and whether it was slow.
    /// `now` is the clock reading the caller already made at the end of the call, if any.
    fn record(&self, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>);

    /// Records a fast success (neither failed nor slow) of a permitted call if that needs
    /// neither a lock nor the time the call ended, and says whether it did; if not, the
    /// caller records it with [`record`](Store::record). The default never does.
    ///
    /// The breaker asks this first for a fast success when its window is count-based, so
    /// that a store which can take such a result for free (the memory store, while its
    /// window is clean) spares the caller turning the end of the call into [`Nanos`].
    fn record_fast_success(&self, permit: Permit) -> bool {
        let _ = permit;
        false
    }

    /// Gives back a permit whose call was dropped or whose outcome was ignored.
    fn release(&self, permit: Permit);

    /// The state and window now.
    fn snapshot(&self) -> Snapshot;

    /// Carries out an operator's order.
    fn command(&self, command: Command);

    /// Whether recording needs the time the call took even when no route has a slow-call
    /// threshold (a time window does).
    fn needs_end_time(&self) -> bool;

    /// The configuration the store judges by now, where it keeps one (the memory store
    /// does; the default keeps none).
    fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        None
    }

    /// Judges by `config` from the next call on, keeping the breaker's state, generation
    /// and window (a reload of a running breaker). Only settings that a running window can
    /// take change this way; the store refuses, changing nothing, when the window's shape
    /// differs ([`Reconfigure::WindowChanged`]) or when it cannot change its settings in
    /// place ([`Reconfigure::Unsupported`], the default).
    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        let _ = config;
        Err(Reconfigure::Unsupported)
    }
}

/// Why a store did not take a new configuration in place ([`Store::reconfigure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reconfigure {
    /// The window's kind or size differs: its calls cannot move to the new window, so the
    /// breaker must be built anew (with an empty window) to take it.
    WindowChanged,
    /// The store cannot change its settings while running.
    Unsupported,
}

impl fmt::Display for Reconfigure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reconfigure::WindowChanged => "the window's kind or size changed",
            Reconfigure::Unsupported => "the store cannot change its settings while running",
        })
    }
}

/// What a store is made for: one breaker (or one key of a keyed breaker).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreSpec {
    /// The configuration.
    pub config: Arc<CircuitBreakerConfig>,
    /// The key, for keyed breakers.
    pub key: Option<Arc<str>>,
    /// The clock.
    pub clock: Clock,
    /// Where events go.
    pub events: EventSink,
}

impl StoreSpec {
    /// A spec for one unkeyed breaker with `config`, reading `clock`, sending its events
    /// to `events` (for custom [`MakeStore`]s' tests, or a [`MemoryStore`] made by hand).
    pub fn new(config: Arc<CircuitBreakerConfig>, clock: Clock, events: EventSink) -> Self {
        StoreSpec {
            config,
            key: None,
            clock,
            events,
        }
    }

    /// The same spec for the breaker of `key` of a keyed breaker.
    pub fn with_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// Makes stores: one per breaker, one per key of a keyed breaker.
pub trait MakeStore: Send + Sync + 'static {
    /// The store made.
    type Store: Store;

    /// Makes the store for `spec`.
    fn make_store(&self, spec: StoreSpec) -> Self::Store;

    /// Checks, when a layer is built, that the stores made by this can keep the state of a
    /// breaker with `config` (`keyed`: one breaker per key), naming each problem's field
    /// relative to the store (the layer's builder reports it under `store`). The default
    /// accepts every breaker.
    fn check(&self, config: &CircuitBreakerConfig, keyed: bool) -> Result<(), ConfigError> {
        let _ = (config, keyed);
        Ok(())
    }
}

/// Makes [`MemoryStore`]s: state in this process (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct InMemory;

impl MakeStore for InMemory {
    type Store = MemoryStore;

    fn make_store(&self, spec: StoreSpec) -> MemoryStore {
        MemoryStore::new(spec)
    }
}

/// The hot word: `generation << STATE_BITS | CLEAN | state code`.
const STATE_BITS: u32 = 8;
/// The window is clean in this generation: a fast success changes nothing. In the same
/// word as the generation, so that no reader pairs one generation's generation with another
/// generation's clean flag (a reset empties a clean window: a success admitted after it
/// must be counted, not skipped because the flag still said clean).
const CLEAN: u64 = 1 << (STATE_BITS - 1);
const STATE_MASK: u64 = CLEAN - 1;

fn pack(state: State, generation: u64, clean: bool) -> u64 {
    (generation << STATE_BITS) | if clean { CLEAN } else { 0 } | u64::from(state.code())
}

/// The state and generation in a hot word.
#[inline]
fn unpack(word: u64) -> (State, u64) {
    (
        State::from_code((word & STATE_MASK) as u8),
        word >> STATE_BITS,
    )
}

/// What a healthy call reads: the state, the generation and whether the window is clean,
/// in one word. Written only on a transition or when the window turns clean or dirty, so
/// the line it lies on stays shared in the caches of every core that reads it per call.
///
/// It is not padded to a cache line of its own: nothing else in the store is written on a
/// healthy call of a count window (the lock and the machine are touched only off the fast
/// path, and the calls' reference counts are on per-thread leases — or, for a keyed
/// breaker, on the key's own `Arc`, which its calls write anyway). Padding would cost a
/// keyed breaker over 300 bytes per key (benches/benches/keyed_memory.rs: 753 → 433).
struct Hot {
    word: AtomicU64,
    /// While OPEN: when the open wait ends (`Nanos` of the store's clock), so that a call
    /// rejected in the wait is answered without the lock.
    open_until: AtomicU64,
}

/// The machine, and what the hot line was last told of it. Publishing compares with this
/// copy, under the lock, rather than with the hot line itself: a locked update that changes
/// nothing the hot line shows leaves its cache line alone, not even reading it. (It also
/// keeps the model check's search complete: loom would lose a reader's load racing a
/// store behind the writer's own load of that atomic just before the store.)
struct Locked {
    machine: Machine,
    /// The hot word last published.
    published_word: u64,
    /// The open wait's end last published.
    published_until: u64,
}

impl std::ops::Deref for Locked {
    type Target = Machine;

    fn deref(&self) -> &Machine {
        &self.machine
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Machine {
        &mut self.machine
    }
}

/// A breaker's state in this process.
pub struct MemoryStore {
    hot: Hot,
    /// What a call rejected while FORCED_OPEN is told to wait: the configured open wait
    /// (nanoseconds; changed by a reload).
    forced_retry_after: AtomicU64,
    machine: Mutex<Locked>,
    timed: bool,
    clock: Clock,
    key: Option<Arc<str>>,
    events: EventSink,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (state, generation) = unpack(self.hot.word.load(Ordering::Acquire));
        f.debug_struct("MemoryStore")
            .field("state", &state)
            .field("generation", &generation)
            .field("key", &self.key)
            .finish()
    }
}

impl MemoryStore {
    /// A store in CLOSED with an empty window.
    pub fn new(spec: StoreSpec) -> Self {
        let timed = matches!(spec.config.window, crate::config::WindowConfig::Time { .. });
        let forced_retry_after = AtomicU64::new(fusebox_classify::clock::duration_nanos(
            spec.config.open_wait,
        ));
        spec.events.thresholds(&spec.config);
        let machine = Machine::new(spec.config, spec.clock.now());
        MemoryStore {
            forced_retry_after,
            hot: Hot {
                word: AtomicU64::new(pack(State::Closed, 0, false)),
                open_until: AtomicU64::new(0),
            },
            machine: Mutex::new(Locked {
                machine,
                published_word: pack(State::Closed, 0, false),
                published_until: 0,
            }),
            timed,
            clock: spec.clock,
            key: spec.key,
            events: spec.events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Locked> {
        // A panic elsewhere while holding the lock leaves a consistent machine (every
        // method finishes its updates before returning); keep serving.
        self.machine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes the machine's state to the lock-free fields. Called with the lock held (so
    /// no other publisher races), it writes only what changed: a store to the hot line,
    /// even of the same value, takes it away from every core that reads it per call.
    fn publish(&self, m: &mut Locked) {
        let word = pack(m.state(), m.generation(), m.is_clean());
        // Before the word: a reader that sees OPEN in the word sees this open wait's end
        // (or a later one's).
        if m.state() == State::Open {
            let until = m.open_until().0;
            if m.published_until != until {
                m.published_until = until;
                self.hot.open_until.store(until, Ordering::Release);
            }
        }
        if m.published_word != word {
            m.published_word = word;
            self.hot.word.store(word, Ordering::Release);
        }
    }

    /// Admission when the breaker is not admitting freely: a rejection answered from the
    /// hot line when it can be (forced open; open and inside the wait), else the locked
    /// path. Out of line, so that the healthy path's `acquire` stays small enough to
    /// inline.
    #[inline(never)]
    fn acquire_not_closed(&self, state: State) -> Result<Permit, Rejected> {
        if state == State::ForcedOpen {
            // Held open by an operator: nothing to check, nothing to lock.
            self.events.rejected();
            return Err(Rejected {
                retry_after: Duration::from_nanos(self.forced_retry_after.load(Ordering::Relaxed)),
                half_open: false,
            });
        }
        if state == State::Open {
            // Inside the open wait: rejected from the hot line, without the lock. Past it,
            // the slow path moves the breaker to HALF_OPEN.
            if let Some(rejected) = self.inside_open_wait() {
                self.events.rejected();
                return Err(rejected);
            }
        }
        self.acquire_slow()
    }

    /// What a call reads to be admitted without the lock: the state and generation in the
    /// hot word. An acquire load, so that a call finding OPEN then sees that open wait's
    /// end ([`inside_open_wait`](Self::inside_open_wait)).
    #[inline(always)]
    fn hot_word(&self) -> (State, u64) {
        unpack(self.hot.word.load(Ordering::Acquire))
    }

    /// For a call that found OPEN in the hot word: its rejection, if the open wait that
    /// word stands for (or a later one) has not ended; `None` past it.
    #[inline]
    fn inside_open_wait(&self) -> Option<Rejected> {
        let now = self.clock.now();
        let until = Nanos(self.hot.open_until.load(Ordering::Acquire));
        (now < until).then(|| Rejected {
            retry_after: until.since(now),
            half_open: false,
        })
    }

    #[cold]
    fn acquire_slow(&self) -> Result<Permit, Rejected> {
        let now = self.clock.now();
        let mut m = self.lock();
        let (result, moved) = m.acquire(now);
        if let Some(t) = moved {
            self.publish(&mut m);
            drop(m);
            self.events.transition(self.key.as_ref(), t);
        }
        if result.is_err() {
            self.events.rejected();
        }
        result
    }

    #[cold]
    fn record_slow(&self, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>) {
        let now = now.unwrap_or_else(|| self.clock.now());
        let mut m = self.lock();
        let before = m.generation();
        let effect = m.record(permit, failure, slow, now);
        let counted = permit.generation == before;
        self.publish(&mut m);
        let totals = (failure || slow).then(|| m.window_totals(now));
        drop(m);
        if counted && permit.kind == PermitKind::Probe {
            self.events.probe(Some(!(failure || slow)));
        }
        if let Some(totals) = totals {
            self.events.rates(totals);
        }
        match effect {
            Effect::None => {}
            Effect::Moved(t) => self.events.transition(self.key.as_ref(), t),
            Effect::WouldOpen(would, reason, window) => {
                self.events
                    .shadow_trip(self.key.as_ref(), would, reason, window)
            }
        }
    }
}

impl Store for MemoryStore {
    #[inline]
    fn acquire(&self) -> Result<Permit, Rejected> {
        let (state, generation) = self.hot_word();
        if state.admits_freely() {
            let kind = if state == State::Disabled {
                PermitKind::Untracked
            } else {
                PermitKind::Counted
            };
            return Ok(Permit::new(generation, kind));
        }
        self.acquire_not_closed(state)
    }

    #[inline]
    fn record(&self, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>) {
        if permit.kind == PermitKind::Untracked
            || (!failure && !slow && self.record_fast_success(permit))
        {
            return;
        }
        self.record_slow(permit, failure, slow, now);
    }

    #[inline]
    fn record_fast_success(&self, permit: Permit) -> bool {
        match permit.kind {
            PermitKind::Untracked => true,
            PermitKind::Counted => {
                // Stale (the generation moved on: discarded), or a fast success in a window
                // that is clean in the permit's generation, which changes nothing. One
                // load: the clean bit is of the generation beside it, and nothing else is
                // read on its strength (hence relaxed).
                let word = self.hot.word.load(Ordering::Relaxed);
                word >> STATE_BITS != permit.generation || word & CLEAN != 0
            }
            PermitKind::Probe => false,
        }
    }

    fn release(&self, permit: Permit) {
        if permit.kind != PermitKind::Probe {
            return;
        }
        let released = self.lock().release(permit);
        if released {
            self.events.probe(None);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let now = self.clock.now();
        self.lock().snapshot(now)
    }

    fn command(&self, command: Command) {
        let now = self.clock.now();
        let mut m = self.lock();
        let moved = m.command(command, now);
        self.publish(&mut m);
        drop(m);
        if let Some(t) = moved {
            self.events.transition(self.key.as_ref(), t);
        }
    }

    fn needs_end_time(&self) -> bool {
        self.timed
    }

    fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        Some(Arc::clone(self.lock().config()))
    }

    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        let mut m = self.lock();
        m.reconfigure(Arc::clone(config))
            .map_err(|_| Reconfigure::WindowChanged)?;
        self.events.thresholds(config);
        self.forced_retry_after.store(
            fusebox_classify::clock::duration_nanos(config.open_wait),
            Ordering::Relaxed,
        );
        Ok(())
    }
}

#[cfg(all(test, fusebox_loom))]
mod loom_model;

#[cfg(test)]
mod tests {
    use super::*;

    fn store(window: u32) -> MemoryStore {
        let config = Arc::new(
            CircuitBreakerConfig::builder()
                .name("store")
                .count_window(window)
                .minimum_calls(window)
                .build()
                .expect("a valid config"),
        );
        let events = EventSink::new(Arc::clone(&config.name), Vec::new());
        MemoryStore::new(StoreSpec {
            config,
            key: None,
            clock: Clock::new(),
            events,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn fast_successes_are_free_only_in_a_clean_window() {
        let s = store(4);
        // Filling: every success must enter the window.
        for _ in 0..4 {
            let permit = s.acquire().expect("closed");
            assert!(!s.record_fast_success(permit), "the window is filling");
            s.record(permit, false, false, None);
        }
        // Full of fast successes: another one changes nothing.
        let permit = s.acquire().expect("closed");
        assert!(s.record_fast_success(permit));
        assert_eq!(s.snapshot().window.calls, 4);

        // A failure dirties the window until it has aged out.
        let permit = s.acquire().expect("closed");
        s.record(permit, true, false, None);
        let permit = s.acquire().expect("closed");
        assert!(!s.record_fast_success(permit), "a failure is in the window");
        s.record(permit, false, false, None);
        for _ in 0..3 {
            let permit = s.acquire().expect("closed");
            s.record(permit, false, false, None);
        }
        let permit = s.acquire().expect("closed");
        assert!(s.record_fast_success(permit), "the failure aged out");
        assert_eq!(s.snapshot().window.failures, 0);

        // A permit from an older generation is discarded; a disabled breaker records nothing.
        s.command(Command::Reset);
        assert!(s.record_fast_success(permit), "stale: discarded");
        s.command(Command::Disable);
        let untracked = s.acquire().expect("disabled admits");
        assert!(s.record_fast_success(untracked));
    }
}
