//! The breaker's state machine on virtual time, for replaying recorded traffic and tuning
//! thresholds before trusting them.
//!
//! [`Simulator`] runs exactly the state machine the layer runs — same windows, same trips,
//! same probe budget and generations — but the caller supplies every instant, so a day of
//! recorded calls replays in a fraction of a second and every run is reproducible (seed
//! the jitter with [`CircuitBreakerConfigBuilder::seed`](crate::CircuitBreakerConfigBuilder::seed)).
//!
//! ```
//! use fusebox_breaker::sim::Simulator;
//! use fusebox_breaker::{CircuitBreakerConfig, State};
//! use fusebox_classify::Nanos;
//! use std::time::Duration;
//!
//! let config = CircuitBreakerConfig::builder().name("replay")
//!     .count_window(10)
//!     .minimum_calls(5)
//!     .open_wait(Duration::from_secs(5))
//!     .open_wait_jitter(Duration::ZERO)
//!     .build()?;
//! let mut sim = Simulator::new(config);
//! for i in 0..5 {
//!     let at = Nanos(i * 1_000_000);
//!     let permit = sim.acquire(at).0.expect("closed");
//!     sim.record(permit, true, false, at);
//! }
//! assert_eq!(sim.state(), State::Open);
//! assert!(sim.acquire(Nanos(1_000_000_000)).0.is_err());
//! # Ok::<(), fusebox_classify::ConfigError>(())
//! ```

use crate::config::CircuitBreakerConfig;
use crate::state::{Command, Effect, Machine, Permit, Rejected, Snapshot, State, Transition};
use fusebox_classify::Nanos;
use std::sync::Arc;

/// One breaker's state machine, driven by the caller's clock.
#[derive(Debug)]
pub struct Simulator {
    machine: Machine,
}

/// What recording a result did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Recorded {
    /// The breaker stayed as it was.
    Nothing,
    /// The breaker moved.
    Transition(Transition),
    /// A METRICS_ONLY breaker's trip condition started (`true`) or stopped holding.
    ShadowTrip(bool),
}

impl Simulator {
    /// A breaker in CLOSED at time zero.
    pub fn new(config: CircuitBreakerConfig) -> Self {
        Simulator {
            machine: Machine::new(Arc::new(config), Nanos::ZERO),
        }
    }

    /// The state.
    pub fn state(&self) -> State {
        self.machine.state()
    }

    /// The generation.
    pub fn generation(&self) -> u64 {
        self.machine.generation()
    }

    /// Asks to make a call at `now`: a permit, or a rejection; and the transition that
    /// asking caused (OPEN→HALF_OPEN when the open wait is over, HALF_OPEN→OPEN when
    /// half-open lasted too long).
    pub fn acquire(&mut self, now: Nanos) -> (Result<Permit, Rejected>, Option<Transition>) {
        self.machine.acquire(now)
    }

    /// Records the result of a permitted call that finished at `now`.
    pub fn record(&mut self, permit: Permit, failure: bool, slow: bool, now: Nanos) -> Recorded {
        match self.machine.record(permit, failure, slow, now) {
            Effect::None => Recorded::Nothing,
            Effect::Moved(t) => Recorded::Transition(t),
            Effect::WouldOpen(would, _, _) => Recorded::ShadowTrip(would),
        }
    }

    /// Gives back a permit whose outcome was ignored or whose caller gave up.
    pub fn release(&mut self, permit: Permit) -> bool {
        self.machine.release(permit)
    }

    /// Carries out an operator's order at `now`.
    pub fn command(&mut self, command: Command, now: Nanos) -> Option<Transition> {
        self.machine.command(command, now)
    }

    /// The state and window at `now`.
    pub fn snapshot(&mut self, now: Nanos) -> Snapshot {
        self.machine.snapshot(now)
    }
}
