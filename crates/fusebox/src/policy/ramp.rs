//! The recovery ramp: a slow start for the concurrency limit after the breaker closes.
//!
//! A breaker closes when a few probes have succeeded. Behind it, callers have been failing
//! fast, and a queue of work is waiting: letting the whole limit's worth of calls through at
//! once can knock over a dependency that has just come back. With a ramp, the limit drops
//! to `initial_limit` when the breaker closes and grows linearly back to the configured
//! limit over `duration`.
//!
//! The ramp has no task or timer of its own: the policy's service moves it forward on each
//! call (one atomic load when no ramp is running; a clock read while one is), so time is
//! tokio's and paused-time tests drive it exactly. It is started by the breaker's events
//! (a listener set on the breaker when the policy is built) and moves the limit through
//! [`LimitHandle::set_limit`].

use fusebox_breaker::{BreakerEvent, EventKind, State};
#[cfg(test)]
use fusebox_classify::Nanos;
use fusebox_classify::{Clock, Validator};
use fusebox_limit::LimitHandle;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::time::Duration;

/// A slow start for the concurrency limit after the circuit breaker closes.
///
/// Needs a circuit breaker (unkeyed: a keyed breaker's keys recover one by one, and the
/// limit is shared by all of them) and a fixed concurrency limit (an adaptive limit already
/// starts low after the failures that opened the breaker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryRamp {
    pub(crate) initial_limit: usize,
    pub(crate) duration: Duration,
}

impl RecoveryRamp {
    /// When the breaker closes, the limit starts at `initial_limit` (at least 1, at most the
    /// limit) and grows linearly back to the limit over `duration`.
    pub fn new(initial_limit: usize, duration: Duration) -> Self {
        RecoveryRamp {
            initial_limit,
            duration,
        }
    }

    /// The limit right after the breaker closes.
    pub fn initial_limit(&self) -> usize {
        self.initial_limit
    }

    /// How long the limit takes to grow back.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    pub(crate) fn validate(&self, max: Option<usize>, v: &mut Validator) {
        let initial = self.initial_limit;
        match max {
            Some(max) => v.check(
                (1..=max).contains(&initial),
                "recovery_ramp.initial_limit",
                || format!("must be within 1..=max_concurrency (1..={max}), got {initial}"),
            ),
            None => v.check(initial >= 1, "recovery_ramp.initial_limit", || {
                format!("must be at least 1, got {initial}")
            }),
        }
        v.check(!self.duration.is_zero(), "recovery_ramp.duration", || {
            "must be greater than zero".into()
        });
    }
}

/// A running (or idle) ramp, shared by the breaker's listener and the policy's services.
#[derive(Debug)]
pub(crate) struct Ramp {
    limit: LimitHandle,
    initial: usize,
    max: usize,
    duration_nanos: u64,
    clock: Clock,
    /// The ramp's start plus one, in the clock's nanoseconds; 0 when no ramp runs.
    started: AtomicU64,
    current: AtomicUsize,
}

impl Ramp {
    pub(crate) fn new(config: RecoveryRamp, limit: LimitHandle, max: usize) -> Self {
        Ramp {
            limit,
            initial: config.initial_limit.clamp(1, max.max(1)),
            max,
            duration_nanos: fusebox_classify::clock::duration_nanos(config.duration).max(1),
            clock: Clock::new(),
            started: AtomicU64::new(0),
            current: AtomicUsize::new(max),
        }
    }

    /// Tells the ramp of a breaker event: a close starts it.
    pub(crate) fn on_event(&self, event: &BreakerEvent) {
        if let EventKind::Transition(t) = &event.kind
            && t.to == State::Closed
            && matches!(t.from, State::Open | State::HalfOpen | State::ForcedOpen)
        {
            self.start();
        }
    }

    fn start(&self) {
        let now = self.clock.now();
        self.started.store(now.0.saturating_add(1), SeqCst);
        self.current.store(self.initial, SeqCst);
        self.limit.set_limit(self.initial);
        tracing::info!(
            target: "fusebox::policy",
            limiter = self.limit.name(),
            from = self.initial,
            to = self.max,
            duration_ms = self.duration_nanos / 1_000_000,
            "recovery ramp started"
        );
    }

    /// Moves the ramp forward; one atomic load when no ramp runs.
    #[inline]
    pub(crate) fn tick(&self) {
        let started = self.started.load(Relaxed);
        if started != 0 {
            self.advance(started);
        }
    }

    #[cold]
    fn advance(&self, started: u64) {
        let elapsed = self.clock.now().0.saturating_sub(started - 1);
        if elapsed >= self.duration_nanos {
            if self
                .started
                .compare_exchange(started, 0, SeqCst, Relaxed)
                .is_ok()
            {
                self.current.store(self.max, SeqCst);
                self.limit.set_limit(self.max);
                tracing::info!(
                    target: "fusebox::policy",
                    limiter = self.limit.name(),
                    limit = self.max,
                    "recovery ramp finished"
                );
            }
            return;
        }
        let span = (self.max - self.initial) as u128;
        let grown = span * u128::from(elapsed) / u128::from(self.duration_nanos);
        let limit = self.initial + usize::try_from(grown).unwrap_or(self.max - self.initial);
        if self.current.fetch_max(limit, SeqCst) < limit && self.started.load(SeqCst) == started {
            self.limit.set_limit(limit);
        }
    }

    /// Whether a ramp is running.
    #[cfg(test)]
    pub(crate) fn is_running(&self) -> bool {
        self.started.load(SeqCst) != 0
    }

    /// The clock's now, for tests.
    #[cfg(test)]
    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_breaker::{Reason, Transition};
    use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};
    use std::sync::Arc;

    fn closed() -> BreakerEvent {
        BreakerEvent::new(
            Arc::from("b"),
            None,
            EventKind::Transition(Transition::new(
                State::HalfOpen,
                State::Closed,
                Reason::ProbesSucceeded,
                3,
            )),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn grows_linearly_then_stops() {
        let layer = ConcurrencyLimitLayer::new(
            ConcurrencyLimitConfig::builder()
                .max_concurrency(100)
                .build()
                .unwrap(),
        );
        let handle = layer.handle();
        let ramp = Ramp::new(
            RecoveryRamp::new(10, Duration::from_secs(10)),
            handle.clone(),
            100,
        );
        ramp.tick();
        assert_eq!(handle.limit(), 100, "no ramp before a close");
        ramp.on_event(&closed());
        assert!(ramp.is_running());
        assert_eq!(handle.limit(), 10);
        tokio::time::advance(Duration::from_secs(5)).await;
        ramp.tick();
        assert_eq!(handle.limit(), 55);
        tokio::time::advance(Duration::from_millis(2500)).await;
        ramp.tick();
        assert_eq!(handle.limit(), 77);
        tokio::time::advance(Duration::from_secs(3)).await;
        ramp.tick();
        assert_eq!(handle.limit(), 100);
        assert!(!ramp.is_running());
        let _ = ramp.now();
    }
}
