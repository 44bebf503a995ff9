//! The breaker's state machine: pure, synchronous, driven by the caller's clock readings.
//!
//! ```text
//!            failure/slow rate, consecutive failures
//!   CLOSED ─────────────────────────────────────────▶ OPEN
//!     ▲                                               │  ▲
//!     │ enough probes succeeded     open wait elapsed │  │ a probe failed,
//!     │                                               ▼  │ half-open took too long
//!     └──────────────────────────────────────────── HALF_OPEN
//! ```
//!
//! There is no CLOSED→HALF_OPEN edge and no OPEN→CLOSED edge: recovery is proven by probes,
//! never assumed from time. Operators can move the breaker to FORCED_OPEN, DISABLED or
//! METRICS_ONLY, and reset it to CLOSED, from any state. Every transition bumps the
//! generation; results carry the generation they were admitted under and are discarded when
//! it has moved on, so a late success cannot close a breaker that a newer probe re-opened.

use crate::config::{CircuitBreakerConfig, OnClose, WindowConfig};
use crate::window::{CountWindow, TimeWindow, Window, WindowTotals};
use fusebox_classify::Nanos;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Calls flow; outcomes fill the window.
    Closed,
    /// Calls are rejected until the open wait ends.
    Open,
    /// A few probes are admitted; their results decide.
    HalfOpen,
    /// An operator holds the breaker open: every call is rejected.
    ForcedOpen,
    /// An operator switched the breaker off: every call flows, nothing is recorded.
    Disabled,
    /// Shadow mode: outcomes are recorded and reported, the breaker never opens.
    MetricsOnly,
}

impl State {
    /// The state's name in events and metrics (`"closed"`, `"half_open"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
            State::Disabled => "disabled",
            State::MetricsOnly => "metrics_only",
        }
    }

    /// The state's number: 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled, 5
    /// metrics-only (how a store packs it; the metrics label the state by
    /// [`as_str`](State::as_str) instead).
    pub fn code(self) -> u8 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::ForcedOpen => 3,
            State::Disabled => 4,
            State::MetricsOnly => 5,
        }
    }

    pub(crate) fn from_code(code: u8) -> State {
        match code {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            3 => State::ForcedOpen,
            4 => State::Disabled,
            _ => State::MetricsOnly,
        }
    }

    /// Whether calls are admitted without asking the state machine (no lock, no clock).
    pub(crate) fn admits_freely(self) -> bool {
        matches!(self, State::Closed | State::Disabled | State::MetricsOnly)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The window's failure rate reached the threshold.
    FailureRate,
    /// The window's slow-call rate reached the threshold.
    SlowCallRate,
    /// The consecutive-failures trigger fired.
    ConsecutiveFailures,
    /// The open wait ended: probing starts.
    OpenWaitElapsed,
    /// A probe failed (or was slow).
    ProbeFailed,
    /// Half-open lasted longer than `max_half_open_wait`.
    HalfOpenTimeout,
    /// Enough probes succeeded.
    ProbesSucceeded,
    /// An operator forced the breaker open.
    ForcedOpen,
    /// An operator disabled the breaker.
    Disabled,
    /// An operator put the breaker in metrics-only mode.
    MetricsOnly,
    /// An operator reset the breaker to closed.
    Reset,
}

impl Reason {
    /// The reason's name in events (`"failure_rate"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FailureRate => "failure_rate",
            Reason::SlowCallRate => "slow_call_rate",
            Reason::ConsecutiveFailures => "consecutive_failures",
            Reason::OpenWaitElapsed => "open_wait_elapsed",
            Reason::ProbeFailed => "probe_failed",
            Reason::HalfOpenTimeout => "half_open_timeout",
            Reason::ProbesSucceeded => "probes_succeeded",
            Reason::ForcedOpen => "forced_open",
            Reason::Disabled => "disabled",
            Reason::MetricsOnly => "metrics_only",
            Reason::Reset => "reset",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One state change, with the evidence behind it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub reason: Reason,
    /// The generation entered.
    pub generation: u64,
    /// The window's totals as the breaker enters `to`: for a transition to CLOSED that
    /// clears the window (a reset, or [`OnClose::Clear`]), the empty window.
    pub window: WindowTotals,
    /// For a transition to OPEN: the whole open wait, jitter included.
    pub open_for: Option<Duration>,
    /// For a transition to OPEN: the random part of the open wait.
    pub jitter: Option<Duration>,
    /// How long the breaker had been in `from`.
    pub time_in_previous: Duration,
    /// When (the breaker's clock).
    pub at: Nanos,
}

impl Transition {
    /// A move `from` → `to` for `reason`, entering `generation` (for custom stores that
    /// report transitions): an empty window, no open wait, no time in `from`, at time zero.
    /// Set the rest with the `with_` methods or by assigning the fields.
    pub fn new(from: State, to: State, reason: Reason, generation: u64) -> Self {
        Transition {
            from,
            to,
            reason,
            generation,
            window: WindowTotals::default(),
            open_for: None,
            jitter: None,
            time_in_previous: Duration::ZERO,
            at: Nanos::ZERO,
        }
    }

    /// The same transition with the window's totals as the breaker enters `to`.
    pub fn with_window(mut self, window: WindowTotals) -> Self {
        self.window = window;
        self
    }

    /// The same transition with an open wait (`open_for`, jitter included) and its random
    /// part (`jitter`): for a transition to OPEN.
    pub fn with_open_wait(mut self, open_for: Duration, jitter: Duration) -> Self {
        self.open_for = Some(open_for);
        self.jitter = Some(jitter);
        self
    }

    /// The same transition, having spent `time` in `from`.
    pub fn with_time_in_previous(mut self, time: Duration) -> Self {
        self.time_in_previous = time;
        self
    }

    /// The same transition, made at `at` (the breaker's clock).
    pub fn with_at(mut self, at: Nanos) -> Self {
        self.at = at;
        self
    }
}

/// An operator's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// Hold the breaker open.
    ForceOpen,
    /// Let everything through and record nothing.
    Disable,
    /// Record and report, never open.
    MetricsOnly,
    /// Back to CLOSED with an empty window.
    Reset,
}

/// What a permit was admitted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PermitKind {
    /// A call in CLOSED or METRICS_ONLY: its outcome enters the window.
    Counted,
    /// A half-open probe: its outcome decides the breaker.
    Probe,
    /// A call in DISABLED: nothing is recorded.
    Untracked,
}

/// The right to make one call, and the generation it was granted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permit {
    pub(crate) generation: u64,
    pub(crate) kind: PermitKind,
}

impl Permit {
    /// A permit (for custom stores).
    pub fn new(generation: u64, kind: PermitKind) -> Self {
        Permit { generation, kind }
    }

    /// The generation the permit was granted in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What the permit was granted as.
    pub fn kind(&self) -> PermitKind {
        self.kind
    }
}

/// A refusal: when to come back, and whether the breaker was probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejected {
    /// Time until the breaker may admit calls again.
    pub retry_after: Duration,
    /// Whether the breaker was half-open (its probes taken) rather than open.
    pub half_open: bool,
}

impl Rejected {
    /// A refusal telling the caller to come back after `retry_after` (for custom stores);
    /// `half_open`: the breaker was half-open with its probes taken, rather than open.
    pub fn new(retry_after: Duration, half_open: bool) -> Self {
        Rejected {
            retry_after,
            half_open,
        }
    }
}

/// A breaker's state and window at one moment.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The state.
    pub state: State,
    /// The generation.
    pub generation: u64,
    /// The window's totals.
    pub window: WindowTotals,
    /// Failure rate, percent.
    pub failure_rate: f64,
    /// Slow-call rate, percent.
    pub slow_call_rate: f64,
    /// While OPEN: time until the breaker starts probing.
    pub until_half_open: Option<Duration>,
    /// While HALF_OPEN: probes admitted so far (in flight or finished).
    pub probes_admitted: u32,
    /// While HALF_OPEN: probes that succeeded.
    pub probes_succeeded: u32,
    /// In METRICS_ONLY: whether the breaker would be open now.
    pub would_open: bool,
}

impl Snapshot {
    /// A snapshot of a breaker in `state` at `generation` with `window` (for custom
    /// stores): the rates are the window's, with no open wait left, no probes and no
    /// shadow trip. Set the rest with the `with_` methods or by assigning the fields.
    pub fn new(state: State, generation: u64, window: WindowTotals) -> Self {
        Snapshot {
            state,
            generation,
            window,
            failure_rate: window.failure_rate(),
            slow_call_rate: window.slow_rate(),
            until_half_open: None,
            probes_admitted: 0,
            probes_succeeded: 0,
            would_open: false,
        }
    }

    /// The same snapshot with the time left until the breaker starts probing (while OPEN).
    pub fn with_until_half_open(mut self, until_half_open: Option<Duration>) -> Self {
        self.until_half_open = until_half_open;
        self
    }

    /// The same snapshot with the probes admitted so far and those that succeeded (while
    /// HALF_OPEN).
    pub fn with_probes(mut self, admitted: u32, succeeded: u32) -> Self {
        self.probes_admitted = admitted;
        self.probes_succeeded = succeeded;
        self
    }

    /// The same snapshot, saying whether a METRICS_ONLY breaker would be open now.
    pub fn with_would_open(mut self, would_open: bool) -> Self {
        self.would_open = would_open;
        self
    }
}

/// The retry hint given to calls rejected while half-open (at most this; less when
/// `max_half_open_wait` ends sooner).
pub const HALF_OPEN_RETRY_HINT: Duration = Duration::from_secs(1);

/// What recording a result did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Nothing changed state.
    None,
    /// The breaker moved.
    Moved(Transition),
    /// METRICS_ONLY crossed its trip condition (true: would open now).
    WouldOpen(bool, Reason, WindowTotals),
}

/// The random part of each open wait: a draw from `0..=open_wait_jitter` per opening, from
/// random numbers seeded by [`CircuitBreakerConfigBuilder::seed`] when set (so that the same
/// seed gives the same waits in every store: in memory, and for the openings a replica
/// causes on a fleet's shared store), and randomly otherwise.
///
/// [`CircuitBreakerConfigBuilder::seed`]: crate::CircuitBreakerConfigBuilder::seed
#[derive(Debug)]
pub struct OpenJitter {
    max_nanos: u64,
    rng: SmallRng,
}

impl OpenJitter {
    /// The jitter of `config`'s breaker; `salt` varies an unseeded breaker's numbers.
    pub fn new(config: &CircuitBreakerConfig, salt: u64) -> Self {
        let rng = match config.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            // Unseeded: a per-process random seed (std's hasher keys), mixed with the salt.
            None => SmallRng::seed_from_u64(std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                salt,
            )),
        };
        OpenJitter {
            max_nanos: fusebox_classify::clock::duration_nanos(config.open_wait_jitter),
            rng,
        }
    }

    /// Draws from `0..=max` from now on (a reloaded configuration's jitter), keeping the
    /// random numbers' sequence.
    pub(crate) fn set_max(&mut self, max: Duration) {
        self.max_nanos = fusebox_classify::clock::duration_nanos(max);
    }

    /// The jitter of the next opening.
    pub fn draw(&mut self) -> Duration {
        Duration::from_nanos(if self.max_nanos == 0 {
            0
        } else {
            self.rng.random_range(0..=self.max_nanos)
        })
    }
}

/// The state machine of one breaker.
#[derive(Debug)]
pub(crate) struct Machine {
    cfg: Arc<CircuitBreakerConfig>,
    state: State,
    generation: u64,
    window: Window,
    consecutive: u32,
    trips: u32,
    open_until: Nanos,
    half_open_since: Nanos,
    probes_admitted: u32,
    probes_succeeded: u32,
    entered_at: Nanos,
    would_open: bool,
    jitter: OpenJitter,
}

impl Machine {
    pub(crate) fn new(cfg: Arc<CircuitBreakerConfig>, now: Nanos) -> Self {
        let window = match cfg.window {
            WindowConfig::Count { size } => Window::Count(CountWindow::new(size)),
            WindowConfig::Time { duration, buckets } => {
                Window::Time(TimeWindow::new(duration, buckets))
            }
        };
        let jitter = OpenJitter::new(&cfg, now.0);
        Machine {
            cfg,
            state: State::Closed,
            generation: 0,
            window,
            consecutive: 0,
            trips: 0,
            open_until: Nanos::ZERO,
            half_open_since: Nanos::ZERO,
            probes_admitted: 0,
            probes_succeeded: 0,
            entered_at: now,
            would_open: false,
            jitter,
        }
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// The configuration the machine judges by.
    pub(crate) fn config(&self) -> &Arc<CircuitBreakerConfig> {
        &self.cfg
    }

    /// Judges by `cfg` from now on — thresholds, minimum calls, consecutive failures, open
    /// wait and its jitter and growth, probe budget, half-open wait, what closing does —
    /// keeping the state, the generation, the window and the trips so far. An open wait
    /// already running keeps its end; the next one is drawn from `cfg`. Refused (and
    /// `cfg` handed back) when the window's shape differs: a window of another kind or
    /// size cannot take the calls this one holds.
    pub(crate) fn reconfigure(
        &mut self,
        cfg: Arc<CircuitBreakerConfig>,
    ) -> Result<(), Arc<CircuitBreakerConfig>> {
        if cfg.window != self.cfg.window {
            return Err(cfg);
        }
        self.jitter.set_max(cfg.open_wait_jitter);
        self.cfg = cfg;
        Ok(())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a fast success recorded now would change nothing.
    /// While OPEN: when the open wait ends.
    pub(crate) fn open_until(&self) -> Nanos {
        self.open_until
    }

    pub(crate) fn is_clean(&self) -> bool {
        matches!(self.state, State::Closed | State::MetricsOnly)
            && self.window.is_clean()
            && self.consecutive == 0
    }

    /// Asks to make a call at `now`.
    pub(crate) fn acquire(&mut self, now: Nanos) -> (Result<Permit, Rejected>, Option<Transition>) {
        let mut moved = None;
        match self.state {
            State::Closed | State::MetricsOnly => {
                return (Ok(self.permit(PermitKind::Counted)), None);
            }
            State::Disabled => return (Ok(self.permit(PermitKind::Untracked)), None),
            State::ForcedOpen => {
                return (
                    Err(Rejected {
                        retry_after: self.cfg.open_wait,
                        half_open: false,
                    }),
                    None,
                );
            }
            State::Open => {
                if now < self.open_until {
                    return (
                        Err(Rejected {
                            retry_after: self.open_until.since(now),
                            half_open: false,
                        }),
                        None,
                    );
                }
                moved = Some(self.enter_half_open(now));
            }
            State::HalfOpen => {
                if let Some(t) = self.check_half_open_timeout(now) {
                    let retry_after = self.open_until.since(now);
                    return (
                        Err(Rejected {
                            retry_after,
                            half_open: false,
                        }),
                        Some(t),
                    );
                }
            }
        }
        // HALF_OPEN.
        if self.probes_admitted < self.cfg.permitted_probes {
            self.probes_admitted += 1;
            (Ok(self.permit(PermitKind::Probe)), moved)
        } else {
            // Probes are in flight and may close the breaker at any moment: a short hint,
            // never longer than half-open can last.
            let retry_after = match self.cfg.max_half_open_wait {
                Some(max) => self
                    .half_open_since
                    .plus(max)
                    .since(now)
                    .min(HALF_OPEN_RETRY_HINT),
                None => HALF_OPEN_RETRY_HINT,
            };
            (
                Err(Rejected {
                    retry_after,
                    half_open: true,
                }),
                moved,
            )
        }
    }

    fn permit(&self, kind: PermitKind) -> Permit {
        Permit {
            generation: self.generation,
            kind,
        }
    }

    /// Records the result of a permitted call that finished at `now`.
    pub(crate) fn record(
        &mut self,
        permit: Permit,
        failure: bool,
        slow: bool,
        now: Nanos,
    ) -> Effect {
        if permit.generation != self.generation {
            return Effect::None; // stale: admitted before the last transition
        }
        match (self.state, permit.kind) {
            (State::Closed | State::MetricsOnly, PermitKind::Counted) => {
                self.window.record(failure, slow, now);
                self.consecutive = if failure {
                    self.consecutive.saturating_add(1)
                } else {
                    0
                };
                let totals = self.window.totals(now);
                let trip = self.trip_reason(totals);
                if self.state == State::MetricsOnly {
                    let would = trip.is_some();
                    if would != self.would_open {
                        self.would_open = would;
                        return Effect::WouldOpen(
                            would,
                            trip.unwrap_or(Reason::FailureRate),
                            totals,
                        );
                    }
                    return Effect::None;
                }
                match trip {
                    Some(reason) => Effect::Moved(self.enter_open(reason, now)),
                    None => Effect::None,
                }
            }
            (State::HalfOpen, PermitKind::Probe) => {
                if let Some(t) = self.check_half_open_timeout(now) {
                    return Effect::Moved(t);
                }
                if failure || slow {
                    Effect::Moved(self.enter_open(Reason::ProbeFailed, now))
                } else {
                    self.probes_succeeded += 1;
                    if self.probes_succeeded >= self.cfg.probe_successes {
                        Effect::Moved(self.enter_closed(Reason::ProbesSucceeded, now))
                    } else {
                        Effect::None
                    }
                }
            }
            _ => Effect::None,
        }
    }

    /// Returns a permit whose call was dropped or whose result was ignored: a probe's slot
    /// goes back to the budget.
    pub(crate) fn release(&mut self, permit: Permit) -> bool {
        if permit.generation == self.generation
            && permit.kind == PermitKind::Probe
            && self.state == State::HalfOpen
        {
            self.probes_admitted = self.probes_admitted.saturating_sub(1);
            true
        } else {
            false
        }
    }

    /// Carries out an operator's order.
    pub(crate) fn command(&mut self, command: Command, now: Nanos) -> Option<Transition> {
        let (to, reason) = match command {
            Command::ForceOpen => (State::ForcedOpen, Reason::ForcedOpen),
            Command::Disable => (State::Disabled, Reason::Disabled),
            Command::MetricsOnly => (State::MetricsOnly, Reason::MetricsOnly),
            Command::Reset => return Some(self.enter_closed(Reason::Reset, now)),
        };
        if self.state == to {
            return None;
        }
        self.would_open = false;
        Some(self.move_to(to, reason, now, None, None))
    }

    pub(crate) fn snapshot(&mut self, now: Nanos) -> Snapshot {
        // Let an elapsed half-open wait show as it will act.
        let window = self.window.totals(now);
        Snapshot {
            state: self.state,
            generation: self.generation,
            window,
            failure_rate: window.failure_rate(),
            slow_call_rate: window.slow_rate(),
            until_half_open: (self.state == State::Open).then(|| self.open_until.since(now)),
            probes_admitted: if self.state == State::HalfOpen {
                self.probes_admitted
            } else {
                0
            },
            probes_succeeded: if self.state == State::HalfOpen {
                self.probes_succeeded
            } else {
                0
            },
            would_open: self.would_open,
        }
    }

    pub(crate) fn window_totals(&mut self, now: Nanos) -> WindowTotals {
        self.window.totals(now)
    }

    fn trip_reason(&self, totals: WindowTotals) -> Option<Reason> {
        if self
            .cfg
            .consecutive_failures
            .is_some_and(|n| self.consecutive >= n)
        {
            return Some(Reason::ConsecutiveFailures);
        }
        if totals.calls < self.cfg.minimum_calls {
            return None;
        }
        if totals.failure_rate_at_least(self.cfg.failure_rate_threshold) {
            Some(Reason::FailureRate)
        } else if totals.slow_rate_at_least(self.cfg.slow_call_rate_threshold) {
            Some(Reason::SlowCallRate)
        } else {
            None
        }
    }

    fn check_half_open_timeout(&mut self, now: Nanos) -> Option<Transition> {
        let max = self.cfg.max_half_open_wait?;
        (self.state == State::HalfOpen && now >= self.half_open_since.plus(max))
            .then(|| self.enter_open(Reason::HalfOpenTimeout, now))
    }

    fn enter_open(&mut self, reason: Reason, now: Nanos) -> Transition {
        self.trips = self.trips.saturating_add(1);
        let base = self.cfg.open_wait_for(self.trips);
        let jitter = self.jitter.draw();
        let wait = base.saturating_add(jitter);
        self.open_until = now.plus(wait);
        self.move_to(State::Open, reason, now, Some(wait), Some(jitter))
    }

    fn enter_half_open(&mut self, now: Nanos) -> Transition {
        self.half_open_since = now;
        self.probes_admitted = 0;
        self.probes_succeeded = 0;
        self.move_to(State::HalfOpen, Reason::OpenWaitElapsed, now, None, None)
    }

    fn enter_closed(&mut self, reason: Reason, now: Nanos) -> Transition {
        // Clear before moving, so that the transition (and the rate gauges it sets) carries
        // the window the breaker now judges by, not the outage it has just left behind.
        if reason == Reason::Reset || self.cfg.on_close == OnClose::Clear {
            self.window.clear();
        }
        let t = self.move_to(State::Closed, reason, now, None, None);
        self.trips = 0;
        self.consecutive = 0;
        self.would_open = false;
        t
    }

    fn move_to(
        &mut self,
        to: State,
        reason: Reason,
        now: Nanos,
        open_for: Option<Duration>,
        jitter: Option<Duration>,
    ) -> Transition {
        let from = self.state;
        self.state = to;
        self.generation += 1;
        let time_in_previous = now.since(self.entered_at);
        self.entered_at = now;
        Transition {
            from,
            to,
            reason,
            generation: self.generation,
            window: self.window.totals(now),
            open_for,
            jitter,
            time_in_previous,
            at: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;

    fn config(
        f: impl FnOnce(crate::CircuitBreakerConfigBuilder) -> crate::CircuitBreakerConfigBuilder,
    ) -> Arc<CircuitBreakerConfig> {
        let b = CircuitBreakerConfig::builder()
            .name("test")
            .count_window(10)
            .minimum_calls(5)
            .failure_rate_threshold(50)
            .slow_call_rate_threshold(60)
            .open_wait(Duration::from_secs(10))
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(2)
            .max_half_open_wait(Some(Duration::from_secs(30)))
            .seed(7);
        Arc::new(f(b).build().unwrap())
    }

    fn admit(m: &mut Machine, now: u64) -> Permit {
        m.acquire(Nanos(now)).0.expect("admitted")
    }

    fn moved(e: Effect) -> Transition {
        match e {
            Effect::Moved(t) => t,
            other => panic!("expected a transition, got {other:?}"),
        }
    }

    fn trip(m: &mut Machine, now: u64) -> Transition {
        let mut last = None;
        for _ in 0..5 {
            let p = admit(m, now);
            if let Effect::Moved(t) = m.record(p, true, false, Nanos(now)) {
                last = Some(t);
            }
        }
        last.expect("five failures of five calls trip at 50 %")
    }

    #[test]
    fn closed_to_open_on_failure_rate_after_minimum_calls() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        for _ in 0..4 {
            let p = admit(&mut m, 0);
            assert_eq!(
                m.record(p, true, false, Nanos(0)),
                Effect::None,
                "below minimum_calls"
            );
        }
        let p = admit(&mut m, 0);
        let t = moved(m.record(p, false, false, Nanos(0)));
        assert_eq!(
            (t.from, t.to, t.reason),
            (State::Closed, State::Open, Reason::FailureRate)
        );
        assert_eq!(
            t.window,
            WindowTotals {
                calls: 5,
                failures: 4,
                slow: 0
            }
        );
        assert_eq!(t.open_for, Some(Duration::from_secs(10)));
        assert_eq!(t.generation, 1);
    }

    #[test]
    fn closed_to_open_on_slow_rate_and_consecutive_failures() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        let mut last = Effect::None;
        for _ in 0..5 {
            let p = admit(&mut m, 0);
            last = m.record(p, false, true, Nanos(0));
        }
        assert_eq!(moved(last).reason, Reason::SlowCallRate);

        let mut m = Machine::new(
            config(|b| b.consecutive_failures(3).minimum_calls(10)),
            Nanos(0),
        );
        for _ in 0..2 {
            let p = admit(&mut m, 0);
            assert_eq!(m.record(p, true, false, Nanos(0)), Effect::None);
        }
        let p = admit(&mut m, 0);
        assert_eq!(
            moved(m.record(p, true, false, Nanos(0))).reason,
            Reason::ConsecutiveFailures
        );
    }

    #[test]
    fn open_rejects_until_the_wait_ends_then_probes_exactly_the_budget() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        trip(&mut m, 0);
        let (r, t) = m.acquire(Nanos(4 * SEC));
        assert_eq!(
            r,
            Err(Rejected {
                retry_after: Duration::from_secs(6),
                half_open: false
            })
        );
        assert!(t.is_none());
        // No OPEN -> CLOSED edge: successes cannot be recorded while open.
        let (r, t) = m.acquire(Nanos(10 * SEC));
        let p1 = r.unwrap();
        assert_eq!(p1.kind, PermitKind::Probe);
        let t = t.unwrap();
        assert_eq!(
            (t.from, t.to, t.reason),
            (State::Open, State::HalfOpen, Reason::OpenWaitElapsed)
        );
        let p2 = admit(&mut m, 10 * SEC);
        let (r, _) = m.acquire(Nanos(10 * SEC));
        assert!(matches!(
            r,
            Err(Rejected {
                half_open: true,
                ..
            })
        ));
        assert_eq!(m.record(p1, false, false, Nanos(11 * SEC)), Effect::None);
        let t = moved(m.record(p2, false, false, Nanos(11 * SEC)));
        assert_eq!(
            (t.from, t.to, t.reason),
            (State::HalfOpen, State::Closed, Reason::ProbesSucceeded)
        );
        assert_eq!(t.time_in_previous, Duration::from_secs(1));
        // Cleared on close.
        assert_eq!(m.window_totals(Nanos(11 * SEC)), WindowTotals::default());
    }

    #[test]
    fn a_failed_probe_reopens_and_the_wait_grows() {
        let mut m = Machine::new(
            config(|b| b.open_wait_growth(2.0, Duration::from_secs(25))),
            Nanos(0),
        );
        trip(&mut m, 0);
        let p = admit(&mut m, 10 * SEC);
        let t = moved(m.record(p, true, false, Nanos(10 * SEC)));
        assert_eq!(
            (t.from, t.to, t.reason),
            (State::HalfOpen, State::Open, Reason::ProbeFailed)
        );
        assert_eq!(t.open_for, Some(Duration::from_secs(20)));
        let p = admit(&mut m, 30 * SEC);
        let t = moved(m.record(p, false, true, Nanos(30 * SEC)));
        assert_eq!(t.reason, Reason::ProbeFailed, "a slow probe fails");
        assert_eq!(t.open_for, Some(Duration::from_secs(25)), "capped");
    }

    #[test]
    fn released_probes_return_to_the_budget_and_stale_results_are_discarded() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        let stale = admit(&mut m, 0);
        trip(&mut m, 0);
        let p1 = admit(&mut m, 10 * SEC);
        let _p2 = admit(&mut m, 10 * SEC);
        assert!(m.acquire(Nanos(10 * SEC)).0.is_err());
        assert!(m.release(p1));
        let p3 = admit(&mut m, 10 * SEC);
        // A late success from CLOSED is discarded: it neither closes nor counts.
        assert_eq!(m.record(stale, false, false, Nanos(10 * SEC)), Effect::None);
        assert_eq!(m.snapshot(Nanos(10 * SEC)).probes_succeeded, 0);
        // A probe that re-opens makes the other probe's later success stale.
        moved(m.record(p3, true, false, Nanos(10 * SEC)));
        assert_eq!(m.record(_p2, false, false, Nanos(10 * SEC)), Effect::None);
        assert_eq!(m.state(), State::Open);
        assert!(!m.release(_p2), "stale permits return nothing");
    }

    #[test]
    fn a_stuck_half_open_reopens_after_max_wait() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        trip(&mut m, 0);
        let p1 = admit(&mut m, 10 * SEC);
        let _p2 = admit(&mut m, 10 * SEC);
        let (r, t) = m.acquire(Nanos(40 * SEC));
        assert!(r.is_err());
        let t = t.unwrap();
        assert_eq!(
            (t.from, t.to, t.reason),
            (State::HalfOpen, State::Open, Reason::HalfOpenTimeout)
        );
        assert_eq!(
            m.record(p1, false, false, Nanos(40 * SEC)),
            Effect::None,
            "stale after re-opening"
        );
    }

    #[test]
    fn operator_states() {
        let mut m = Machine::new(config(|b| b), Nanos(0));
        let t = m.command(Command::MetricsOnly, Nanos(0)).unwrap();
        assert_eq!((t.from, t.to), (State::Closed, State::MetricsOnly));
        let mut shadow = Vec::new();
        for _ in 0..6 {
            let p = admit(&mut m, 0);
            match m.record(p, true, false, Nanos(0)) {
                Effect::None => {}
                Effect::WouldOpen(would, reason, _) => shadow.push((would, reason)),
                Effect::Moved(t) => panic!("metrics-only never moves: {t:?}"),
            }
        }
        assert_eq!(shadow, [(true, Reason::FailureRate)]);
        assert!(m.snapshot(Nanos(0)).would_open);

        m.command(Command::ForceOpen, Nanos(0)).unwrap();
        assert!(
            m.acquire(Nanos(1_000 * SEC)).0.is_err(),
            "forced open ignores the open wait"
        );
        assert!(
            m.command(Command::ForceOpen, Nanos(0)).is_none(),
            "no self-transition"
        );

        m.command(Command::Disable, Nanos(0)).unwrap();
        let p = admit(&mut m, 0);
        assert_eq!(p.kind, PermitKind::Untracked);
        assert_eq!(m.record(p, true, false, Nanos(0)), Effect::None);

        let t = m.command(Command::Reset, Nanos(0)).unwrap();
        assert_eq!((t.to, t.reason), (State::Closed, Reason::Reset));
        assert_eq!(m.window_totals(Nanos(0)), WindowTotals::default());
    }

    #[test]
    fn keep_on_close_keeps_the_outage_window() {
        let mut m = Machine::new(
            config(|b| b.on_close(OnClose::Keep).permitted_probes(1)),
            Nanos(0),
        );
        trip(&mut m, 0);
        let p = admit(&mut m, 10 * SEC);
        moved(m.record(p, false, false, Nanos(10 * SEC)));
        assert_eq!(m.window_totals(Nanos(10 * SEC)).failures, 5);
        // The next failure re-opens at once.
        let p = admit(&mut m, 10 * SEC);
        assert_eq!(
            moved(m.record(p, true, false, Nanos(10 * SEC))).to,
            State::Open
        );
    }

    #[test]
    fn seeded_jitter_is_reproducible_and_bounded() {
        let cfg = config(|b| b.open_wait_jitter(Duration::from_secs(5)).seed(42));
        let waits = |cfg: &Arc<CircuitBreakerConfig>| {
            let mut m = Machine::new(Arc::clone(cfg), Nanos(0));
            let mut out = Vec::new();
            let mut now = 0;
            for _ in 0..20 {
                let t = trip_or_probe(&mut m, now);
                out.push(t.jitter.unwrap());
                now += 100 * SEC;
            }
            out
        };
        let a = waits(&cfg);
        assert_eq!(a, waits(&cfg));
        assert!(a.iter().all(|j| *j <= Duration::from_secs(5)));
        assert!(a.iter().any(|j| *j != a[0]), "jitter varies: {a:?}");
    }

    fn trip_or_probe(m: &mut Machine, now: u64) -> Transition {
        if m.state() == State::Closed {
            return trip(m, now);
        }
        let p = admit(m, now);
        moved(m.record(p, true, false, Nanos(now)))
    }

    // === The reference model ===

    /// A deliberately naive breaker: the window is a Vec recounted on every read; the
    /// state machine is written as the documentation states it.
    #[derive(Debug)]
    struct Model {
        state: State,
        generation: u64,
        calls: Vec<(bool, bool)>,
        consecutive: u32,
        open_until: u64,
        half_open_since: u64,
        admitted: u32,
        succeeded: u32,
    }

    const WINDOW: usize = 10;
    const MIN: usize = 5;
    const PROBES: u32 = 2;
    const WAIT: u64 = 10 * SEC;
    const MAX_HALF_OPEN: u64 = 30 * SEC;

    impl Model {
        fn new() -> Self {
            Model {
                state: State::Closed,
                generation: 0,
                calls: vec![],
                consecutive: 0,
                open_until: 0,
                half_open_since: 0,
                admitted: 0,
                succeeded: 0,
            }
        }
        fn go(&mut self, to: State) {
            self.state = to;
            self.generation += 1;
        }
        fn open(&mut self, now: u64) {
            self.open_until = now + WAIT;
            self.go(State::Open);
        }
        fn acquire(&mut self, now: u64) -> Option<(u64, PermitKind)> {
            match self.state {
                State::Closed | State::MetricsOnly => {
                    return Some((self.generation, PermitKind::Counted));
                }
                State::Disabled => return Some((self.generation, PermitKind::Untracked)),
                State::ForcedOpen => return None,
                State::Open if now < self.open_until => return None,
                State::Open => {
                    self.half_open_since = now;
                    self.admitted = 0;
                    self.succeeded = 0;
                    self.go(State::HalfOpen);
                }
                State::HalfOpen if now >= self.half_open_since + MAX_HALF_OPEN => {
                    self.open(now);
                    return None;
                }
                State::HalfOpen => {}
            }
            (self.admitted < PROBES).then(|| {
                self.admitted += 1;
                (self.generation, PermitKind::Probe)
            })
        }
        fn record(
            &mut self,
            (generation, kind): (u64, PermitKind),
            failure: bool,
            slow: bool,
            now: u64,
        ) {
            if generation != self.generation {
                return;
            }
            match (self.state, kind) {
                (State::Closed | State::MetricsOnly, PermitKind::Counted) => {
                    self.calls.push((failure, slow));
                    if self.calls.len() > WINDOW {
                        self.calls.remove(0);
                    }
                    self.consecutive = if failure { self.consecutive + 1 } else { 0 };
                    let n = self.calls.len();
                    let f = self.calls.iter().filter(|c| c.0).count();
                    let s = self.calls.iter().filter(|c| c.1).count();
                    if self.state == State::Closed
                        && n >= MIN
                        && (f * 100 >= 50 * n || s * 100 >= 60 * n)
                    {
                        self.open(now);
                    }
                }
                (State::HalfOpen, PermitKind::Probe) => {
                    if now >= self.half_open_since + MAX_HALF_OPEN || failure || slow {
                        self.open(now);
                    } else {
                        self.succeeded += 1;
                        if self.succeeded >= PROBES {
                            self.calls.clear();
                            self.consecutive = 0;
                            self.go(State::Closed);
                        }
                    }
                }
                _ => {}
            }
        }
        fn release(&mut self, (generation, kind): (u64, PermitKind)) {
            if generation == self.generation
                && kind == PermitKind::Probe
                && self.state == State::HalfOpen
            {
                self.admitted -= 1;
            }
        }
        fn command(&mut self, c: Command) {
            let to = match c {
                Command::ForceOpen => State::ForcedOpen,
                Command::Disable => State::Disabled,
                Command::MetricsOnly => State::MetricsOnly,
                Command::Reset => {
                    self.calls.clear();
                    self.consecutive = 0;
                    self.go(State::Closed);
                    return;
                }
            };
            if self.state != to {
                self.go(to);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Advance(u64),
        Acquire,
        Finish {
            which: usize,
            failure: bool,
            slow: bool,
        },
        Drop {
            which: usize,
        },
        Command(Command),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let command = prop_oneof![
            Just(Command::ForceOpen),
            Just(Command::Disable),
            Just(Command::MetricsOnly),
            Just(Command::Reset)
        ];
        proptest::collection::vec(
            prop_oneof![
                3 => (0u64..15).prop_map(|s| Op::Advance(s * SEC)),
                6 => Just(Op::Acquire),
                6 => (any::<usize>(), proptest::bool::weighted(0.4), proptest::bool::weighted(0.2))
                    .prop_map(|(which, failure, slow)| Op::Finish { which, failure, slow }),
                1 => any::<usize>().prop_map(|which| Op::Drop { which }),
                1 => command.prop_map(Op::Command),
            ],
            1..400,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_machine_equals_the_reference_model(ops in ops()) {
            let mut m = Machine::new(config(|b| b.probe_successes(2)), Nanos(0));
            let mut model = Model::new();
            let mut now = 0u64;
            let mut in_flight: Vec<(Permit, (u64, PermitKind))> = Vec::new();
            for op in ops {
                let before = m.state();
                let mut transitions = Vec::new();
                match op {
                    Op::Advance(d) => now += d,
                    Op::Acquire => {
                        let (r, t) = m.acquire(Nanos(now));
                        transitions.extend(t);
                        let expected = model.acquire(now);
                        prop_assert_eq!(r.is_ok(), expected.is_some(), "admission at {} in {:?}", now, before);
                        if let (Ok(p), Some(e)) = (r, expected) {
                            prop_assert_eq!((p.generation, p.kind), e);
                            in_flight.push((p, e));
                        }
                    }
                    Op::Finish { which, failure, slow } if !in_flight.is_empty() => {
                        let (p, e) = in_flight.swap_remove(which % in_flight.len());
                        if let Effect::Moved(t) = m.record(p, failure, slow, Nanos(now)) {
                            transitions.push(t);
                        }
                        model.record(e, failure, slow, now);
                    }
                    Op::Drop { which } if !in_flight.is_empty() => {
                        let (p, e) = in_flight.swap_remove(which % in_flight.len());
                        m.release(p);
                        model.release(e);
                    }
                    Op::Command(c) => {
                        transitions.extend(m.command(c, Nanos(now)));
                        model.command(c);
                    }
                    _ => {}
                }
                prop_assert_eq!(m.state(), model.state);
                prop_assert_eq!(m.generation(), model.generation);
                let snap = m.snapshot(Nanos(now));
                if matches!(model.state, State::Closed | State::MetricsOnly) {
                    let n = model.calls.len() as u32;
                    prop_assert_eq!(snap.window.calls, n);
                }
                for t in transitions {
                    // The edges that must not exist.
                    prop_assert!(!(t.from == State::Closed && t.to == State::HalfOpen), "CLOSED -> HALF_OPEN");
                    prop_assert!(!(t.from == State::Open && t.to == State::Closed && t.reason != Reason::Reset), "OPEN -> CLOSED without an operator");
                    prop_assert!(!(t.to == State::Closed && t.reason != Reason::Reset && t.from != State::HalfOpen));
                }
            }
        }
    }
}

/// Exhaustive interleavings of concurrent calls against the state machine.
///
/// In the memory store every operation that reads or changes the machine runs whole under
/// one mutex, so concurrent calls interleave at the granularity of these operations; the
/// lock-free paths outside the mutex only *read* (admission while CLOSED/DISABLED/
/// METRICS_ONLY; skipping a fast success in a clean window or from an old generation) and
/// never admit a probe or change state. Enumerating every interleaving of the operations
/// is therefore a complete model check of the probe budget and of stale results.
#[cfg(test)]
mod interleavings {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum End {
        Success,
        Failure,
        Dropped,
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Acquire(usize),
        Finish(usize, End),
        Stale(End),
    }

    fn half_open_machine() -> (Machine, Permit) {
        let cfg = Arc::new(
            CircuitBreakerConfig::builder()
                .name("model")
                .count_window(4)
                .minimum_calls(2)
                .open_wait(Duration::from_secs(1))
                .open_wait_jitter(Duration::ZERO)
                .permitted_probes(2)
                .build()
                .unwrap(),
        );
        let mut m = Machine::new(cfg, Nanos(0));
        let stale = m.acquire(Nanos(0)).0.unwrap();
        for _ in 0..2 {
            let p = m.acquire(Nanos(0)).0.unwrap();
            m.record(p, true, false, Nanos(0));
        }
        assert_eq!(m.state(), State::Open);
        (m, stale)
    }

    /// Every interleaving of `threads` sequences (each: acquire, then finish).
    fn interleave(
        seqs: &[Vec<Step>],
        idx: &mut Vec<usize>,
        out: &mut Vec<Step>,
        all: &mut Vec<Vec<Step>>,
    ) {
        let mut progressed = false;
        for t in 0..seqs.len() {
            if idx[t] < seqs[t].len() {
                progressed = true;
                out.push(seqs[t][idx[t]]);
                idx[t] += 1;
                interleave(seqs, idx, out, all);
                idx[t] -= 1;
                out.pop();
            }
        }
        if !progressed {
            all.push(out.clone());
        }
    }

    #[test]
    fn no_interleaving_admits_too_many_probes_or_lets_a_stale_result_act() {
        let ends = [End::Success, End::Failure, End::Dropped];
        let mut checked = 0usize;
        for e0 in ends {
            for e1 in ends {
                for e2 in ends {
                    for stale_end in ends {
                        let seqs = vec![
                            vec![Step::Acquire(0), Step::Finish(0, e0)],
                            vec![Step::Acquire(1), Step::Finish(1, e1)],
                            vec![Step::Acquire(2), Step::Finish(2, e2)],
                            vec![Step::Stale(stale_end)],
                        ];
                        let mut all = Vec::new();
                        interleave(&seqs, &mut vec![0; seqs.len()], &mut Vec::new(), &mut all);
                        for schedule in all {
                            run(&schedule, stale_end);
                            checked += 1;
                        }
                    }
                }
            }
        }
        // 7!/(2!·2!·2!·1!) = 630 interleavings for each of 81 outcome choices.
        assert_eq!(checked, 630 * 81);
    }

    fn run(schedule: &[Step], _stale_end: End) {
        let (mut m, stale) = half_open_machine();
        let now = Nanos(2_000_000_000); // past the open wait
        let mut permits: [Option<Permit>; 3] = [None; 3];
        for step in schedule {
            let (state, generation) = (m.state(), m.generation());
            match *step {
                Step::Acquire(i) => {
                    if let (Ok(p), _) = m.acquire(now) {
                        permits[i] = Some(p);
                    }
                }
                Step::Finish(i, end) => {
                    if let Some(p) = permits[i].take() {
                        let current = p.generation == m.generation();
                        match end {
                            End::Success => {
                                m.record(p, false, false, now);
                            }
                            End::Failure => {
                                m.record(p, true, false, now);
                            }
                            End::Dropped => {
                                m.release(p);
                            }
                        }
                        if !current {
                            assert_eq!(
                                (m.state(), m.generation()),
                                (state, generation),
                                "a stale result acted: {schedule:?}"
                            );
                        }
                    }
                }
                Step::Stale(end) => {
                    match end {
                        End::Success => m.record(stale, false, false, now),
                        End::Failure => m.record(stale, true, false, now),
                        End::Dropped => {
                            m.release(stale);
                            Effect::None
                        }
                    };
                    assert_eq!(
                        (m.state(), m.generation()),
                        (state, generation),
                        "the stale result acted: {schedule:?}"
                    );
                }
            }
            // Probes of the current generation still held by callers never exceed the budget.
            let in_flight = permits
                .iter()
                .flatten()
                .filter(|p| p.kind == PermitKind::Probe && p.generation == m.generation())
                .count();
            assert!(in_flight <= 2, "{in_flight} probes in flight: {schedule:?}");
            if m.state() == State::HalfOpen {
                assert!(m.snapshot(now).probes_admitted <= 2);
            }
        }
    }
}
