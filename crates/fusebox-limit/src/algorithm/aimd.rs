//! Additive increase, multiplicative decrease.

use super::{DropGate, LimitAlgorithm, Sample, enforced};
use crate::config::AimdConfig;

/// AIMD: grows the limit by `additive_increase` per round of `limit` healthy calls, and
/// multiplies it by `backoff_ratio` (always taking off at least one) on a drop — once per
/// congestion episode (see the [module docs](crate::algorithm)).
///
/// The limit only grows while it is being used: a healthy call admitted with fewer than half
/// the limit in flight says nothing about whether more would be healthy (the caller, not the
/// dependency, is the bottleneck), so it leaves the limit alone.
///
/// ```
/// use fusebox_classify::Nanos;
/// use fusebox_limit::AimdConfig;
/// use fusebox_limit::algorithm::{Aimd, LimitAlgorithm, Sample};
///
/// let mut aimd = Aimd::new(&AimdConfig::new().initial_limit(10).backoff_ratio(0.5));
/// assert_eq!(aimd.update(&Sample::drop(Nanos(0), Nanos(100), 10)), 5);
/// // Another call of the same episode (admitted before the decrease) changes nothing.
/// assert_eq!(aimd.update(&Sample::drop(Nanos(50), Nanos(120), 10)), 5);
/// // A round of healthy calls at full use (as many as the limit) adds one.
/// for _ in 0..5 {
///     aimd.update(&Sample::ok(Nanos(130), Nanos(140), 5));
/// }
/// assert_eq!(aimd.limit(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: f64,
    min: usize,
    max: usize,
    backoff_ratio: f64,
    increase: f64,
    gate: DropGate,
}

impl Aimd {
    /// An AIMD limit with these settings. Settings that a validated configuration would
    /// reject are made safe rather than refused (`max` below `min` is raised to `min`, a
    /// ratio outside `(0, 1)` becomes 0.9), so that the algorithm never misbehaves.
    pub fn new(config: &AimdConfig) -> Self {
        let min = config.min_limit.max(1);
        let max = config.max_limit.max(min);
        let backoff_ratio = if config.backoff_ratio > 0.0 && config.backoff_ratio < 1.0 {
            config.backoff_ratio
        } else {
            0.9
        };
        let increase = if config.additive_increase > 0.0 && config.additive_increase.is_finite() {
            config.additive_increase
        } else {
            1.0
        };
        Aimd {
            limit: config.initial_limit.clamp(min, max) as f64,
            min,
            max,
            backoff_ratio,
            increase,
            gate: DropGate::default(),
        }
    }
}

impl Aimd {
    /// This algorithm with `config`'s settings, keeping its state: the current limit (held
    /// within the new minimum and maximum) and the congestion episode in progress.
    /// `config`'s `initial_limit` is not used: the limit is already running.
    ///
    /// ```
    /// use fusebox_limit::AimdConfig;
    /// use fusebox_limit::algorithm::{Aimd, LimitAlgorithm};
    ///
    /// let running = Aimd::new(&AimdConfig::new().initial_limit(40).max_limit(100));
    /// let lower = running.reconfigured(&AimdConfig::new().initial_limit(5).max_limit(30));
    /// assert_eq!(lower.limit(), 30, "kept, within the new maximum");
    /// ```
    pub fn reconfigured(&self, config: &AimdConfig) -> Self {
        let mut next = Aimd::new(config);
        next.limit = self.limit.clamp(next.min as f64, next.max as f64);
        next.gate = self.gate;
        next
    }
}

impl LimitAlgorithm for Aimd {
    fn limit(&self) -> usize {
        enforced(self.limit, self.min, self.max)
    }

    fn update(&mut self, sample: &Sample) -> usize {
        if sample.dropped {
            if self.gate.admit(sample.start, sample.end) {
                let shrunk = (self.limit * self.backoff_ratio).min(self.limit - 1.0);
                self.limit = shrunk.max(self.min as f64);
            }
        } else if sample.in_flight.saturating_mul(2) >= self.limit() {
            let grown = self.limit + self.increase / self.limit.max(1.0);
            self.limit = grown.min(self.max as f64);
        }
        self.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::sim;
    use fusebox_classify::Nanos;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn converges_near_the_knee_of_the_slow_threshold() {
        // A dependency that serves 50 calls at 10 ms; beyond that calls queue. Calls at or
        // over 12 ms are slow: the classifier's knee is at 60 calls.
        let mut aimd = Aimd::new(&AimdConfig::new().initial_limit(5).max_limit(1000));
        let mut now = 0;
        let history = sim::run(
            &mut aimd,
            &mut now,
            400,
            |c| sim::latency(10 * MS, 50, c),
            |lat| lat >= 12 * MS,
        );
        let settled = &history[200..];
        let (lo, hi) = (
            *settled.iter().min().unwrap(),
            *settled.iter().max().unwrap(),
        );
        assert!(
            lo >= 45 && hi <= 60,
            "sawtooth within 45..=60, got {lo}..={hi}"
        );
        let mean = sim::mean(settled);
        assert!((48.0..=60.0).contains(&mean), "mean {mean}");
    }

    #[test]
    fn spike_shrinks_and_recovery_grows_back() {
        let mut aimd = Aimd::new(&AimdConfig::new().initial_limit(50).min_limit(2));
        let mut now = 0;
        let healthy = |c| sim::latency(10 * MS, 50, c);
        let slow = |lat: u64| lat >= 12 * MS;
        sim::run(&mut aimd, &mut now, 100, healthy, slow);
        let before = aimd.limit();
        // Every call is slow for 30 rounds.
        let spiked = sim::run(&mut aimd, &mut now, 30, |_| 40 * MS, slow);
        let during = *spiked.last().unwrap();
        assert!(
            during <= 5,
            "limit shrinks under a spike: {before} -> {during}"
        );
        assert!(during >= 2, "never below min");
        let recovered = sim::run(&mut aimd, &mut now, 400, healthy, slow);
        let after = *recovered.last().unwrap();
        assert!(after >= 45, "limit grows back after recovery: {after}");
    }

    #[test]
    fn idle_capacity_does_not_grow_the_limit() {
        let mut aimd = Aimd::new(&AimdConfig::new().initial_limit(20));
        for i in 0..10_000 {
            aimd.update(&Sample::ok(Nanos(i), Nanos(i + 1), 3));
        }
        assert_eq!(aimd.limit(), 20);
    }

    #[test]
    fn small_limits_still_shrink() {
        let mut aimd = Aimd::new(&AimdConfig::new().initial_limit(3).min_limit(1));
        assert_eq!(aimd.update(&Sample::drop(Nanos(0), Nanos(1), 3)), 2);
        assert_eq!(aimd.update(&Sample::drop(Nanos(2), Nanos(3), 2)), 1);
        assert_eq!(aimd.update(&Sample::drop(Nanos(4), Nanos(5), 1)), 1);
    }

    #[test]
    fn unsafe_settings_are_made_safe() {
        let aimd = Aimd::new(
            &AimdConfig::new()
                .min_limit(10)
                .max_limit(5)
                .initial_limit(1)
                .backoff_ratio(7.0)
                .additive_increase(f64::NAN),
        );
        assert_eq!(aimd.limit(), 10);
        assert_eq!(aimd.backoff_ratio, 0.9);
        assert_eq!(aimd.increase, 1.0);
    }

    proptest! {
        #[test]
        fn limit_stays_within_bounds(
            min in 1usize..20,
            span in 0usize..200,
            initial in 0usize..300,
            ratio in 0.05f64..0.99,
            samples in proptest::collection::vec((any::<bool>(), 0u64..1_000, 0usize..400), 1..400),
        ) {
            let max = min + span;
            let mut aimd = Aimd::new(
                &AimdConfig::new().min_limit(min).max_limit(max).initial_limit(initial).backoff_ratio(ratio),
            );
            let mut t = 0;
            for (dropped, dt, in_flight) in samples {
                t += dt;
                let start = Nanos(t.saturating_sub(dt * 3));
                let s = Sample { start, end: Nanos(t), in_flight, dropped };
                let limit = aimd.update(&s);
                prop_assert!((min..=max).contains(&limit), "{limit} outside {min}..={max}");
            }
        }
    }
}
