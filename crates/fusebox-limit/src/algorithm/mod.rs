//! Adaptive limit algorithms: pure, synchronous state machines fed one [`Sample`] per
//! finished call.
//!
//! They live apart from the service plumbing so that they can be driven by simulations and
//! property tests without a runtime: time is a [`Nanos`] the caller passes in, and nothing
//! here reads a clock, locks, or allocates. The limiter holds one algorithm behind a short
//! critical section and publishes the limit it returns.
//!
//! Two algorithms are provided:
//!
//! - [`Aimd`]: additive increase, multiplicative decrease, the rule TCP's congestion control
//!   made famous. It reacts to *drops*: failed, timed-out and slow calls (as the route's
//!   classifier and slow-call threshold decide). Simple and predictable; its "knee" is the
//!   route's `slow_call_duration`.
//! - [`Vegas`]: a delay-based algorithm in the spirit of TCP Vegas. It compares each call's
//!   latency with the lowest latency seen recently (the no-load latency) to estimate how many
//!   calls are queueing inside the dependency, grows the limit while that queue is short and
//!   shrinks it when it is long. It finds the knee of the latency curve without a
//!   threshold, and reacts to drops like AIMD.
//!
//! Both share one rule for drops: a drop shrinks the limit once per congestion episode.
//! A call that was already in flight when the limit was last decreased cannot report a
//! *new* episode, so its drop is not counted again — without this rule, a burst of timeouts
//! from one overload (every in-flight call failing together) would collapse the limit to its
//! minimum.

mod aimd;
mod vegas;

pub use aimd::Aimd;
pub use vegas::Vegas;

use fusebox_classify::Nanos;
use std::time::Duration;

/// One finished call, as an adaptive algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sample {
    /// When the call was admitted (it held a permit from then on).
    pub start: Nanos,
    /// When its verdict was known.
    pub end: Nanos,
    /// How many calls were in flight when it was admitted, itself included.
    pub in_flight: usize,
    /// Whether the call was a drop: a failure, a timeout, or slow.
    pub dropped: bool,
}

impl Sample {
    /// A healthy call admitted at `start` and finished at `end` with `in_flight` calls in
    /// flight.
    pub fn ok(start: Nanos, end: Nanos, in_flight: usize) -> Self {
        Sample {
            start,
            end,
            in_flight,
            dropped: false,
        }
    }

    /// A dropped call (failure, timeout or slow).
    pub fn drop(start: Nanos, end: Nanos, in_flight: usize) -> Self {
        Sample {
            start,
            end,
            in_flight,
            dropped: true,
        }
    }

    /// The call's latency.
    pub fn latency(&self) -> Duration {
        self.end.since(self.start)
    }
}

/// An adaptive concurrency limit: told about every counted call, it answers with the limit
/// to enforce from now on.
///
/// Implementations keep the limit within their `[min, max]` bounds whatever the samples
/// say (property-tested).
pub trait LimitAlgorithm: Send + 'static {
    /// The limit to enforce now.
    fn limit(&self) -> usize;

    /// Takes one sample into account and returns the new limit.
    fn update(&mut self, sample: &Sample) -> usize;
}

/// The shared drop rule: shrink at most once per congestion episode.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DropGate {
    last_decrease: Option<Nanos>,
}

impl DropGate {
    /// Whether a drop of a call admitted at `start` starts a new episode; if so, remembers
    /// `now` as the time of the decrease.
    pub(crate) fn admit(&mut self, start: Nanos, now: Nanos) -> bool {
        match self.last_decrease {
            Some(at) if start < at => false,
            _ => {
                self.last_decrease = Some(now);
                true
            }
        }
    }
}

/// Rounds a fractional limit to what is enforced, within `[min, max]`.
pub(crate) fn enforced(limit: f64, min: usize, max: usize) -> usize {
    // `as` saturates on out-of-range floats and maps NaN to 0; clamp does the rest.
    (limit.round() as usize).clamp(min, max)
}

#[cfg(test)]
pub(crate) mod sim {
    //! A simulated dependency whose latency rises with concurrency, driven in closed loop
    //! (demand always exceeds the limit, so the limiter is never the idle party).

    use super::{LimitAlgorithm, Sample};
    use fusebox_classify::Nanos;

    /// Latency, in nanoseconds, at `concurrency`: flat up to the knee, then growing in
    /// proportion (calls queue inside the dependency).
    pub(crate) fn latency(base_ns: u64, knee: usize, concurrency: usize) -> u64 {
        if concurrency <= knee {
            base_ns
        } else {
            base_ns * concurrency as u64 / knee as u64
        }
    }

    /// Runs `rounds` rounds: in each round `limit` calls run at once against the
    /// dependency; a call is a drop when `is_drop(latency)` says so. Returns the limit after
    /// every round.
    pub(crate) fn run<A: LimitAlgorithm>(
        algo: &mut A,
        now: &mut u64,
        rounds: usize,
        mut latency_of: impl FnMut(usize) -> u64,
        is_drop: impl Fn(u64) -> bool,
    ) -> Vec<usize> {
        let mut history = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let concurrency = algo.limit();
            let lat = latency_of(concurrency);
            let start = *now;
            *now += lat;
            for _ in 0..concurrency {
                let sample = Sample {
                    start: Nanos(start),
                    end: Nanos(*now),
                    in_flight: concurrency,
                    dropped: is_drop(lat),
                };
                algo.update(&sample);
            }
            history.push(algo.limit());
        }
        history
    }

    pub(crate) fn mean(xs: &[usize]) -> f64 {
        xs.iter().sum::<usize>() as f64 / xs.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_count_once_per_episode() {
        let mut gate = DropGate::default();
        assert!(gate.admit(Nanos(0), Nanos(10)));
        // Admitted before the decrease at 10: same episode.
        assert!(!gate.admit(Nanos(5), Nanos(12)));
        // Admitted after it: a new episode.
        assert!(gate.admit(Nanos(10), Nanos(20)));
        assert!(!gate.admit(Nanos(19), Nanos(21)));
    }

    #[test]
    fn enforced_limits_round_and_clamp() {
        assert_eq!(enforced(4.4, 1, 10), 4);
        assert_eq!(enforced(4.5, 1, 10), 5);
        assert_eq!(enforced(0.2, 1, 10), 1);
        assert_eq!(enforced(1e30, 1, 10), 10);
        assert_eq!(enforced(f64::NAN, 2, 10), 2);
        assert_eq!(
            Sample::ok(Nanos(5), Nanos(12), 1).latency(),
            Duration::from_nanos(7)
        );
    }
}
