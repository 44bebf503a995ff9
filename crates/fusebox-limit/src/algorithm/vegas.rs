//! A delay-based limit in the spirit of TCP Vegas.

use super::{DropGate, LimitAlgorithm, Sample, enforced};
use crate::config::VegasConfig;
use fusebox_classify::Nanos;
use fusebox_classify::clock::duration_nanos;

/// Latencies below this are treated as this (paused test clocks measure zero).
const RESOLUTION_NS: f64 = 1_000.0;

/// Vegas: estimates how many calls are queueing inside the dependency from how much slower
/// calls are than the no-load latency, and steers the limit to keep that queue short.
///
/// With `limit` calls in flight, latency `rtt` and no-load latency `base`, the dependency
/// holds about `queue = limit × (1 − base / rtt)` calls waiting rather than being served
/// (Little's law). Then, at most once per round trip (a call admitted after the last
/// change must finish before the next change):
///
/// - `queue < alpha`: the dependency has headroom; the limit grows by one step, or by `beta`
///   steps when nothing queues at all (a fast start);
/// - `queue > beta`: calls are queueing; the limit shrinks by one step;
/// - in between: the limit holds.
///
/// `alpha`, `beta` and the step scale with `log10(limit)` (at least 1), so a large limit
/// tolerates proportionally more queueing and moves faster. Every change is applied through
/// `smoothing`: the limit moves by `smoothing ×` the change. A drop (failure, timeout, slow
/// call) multiplies the limit by `backoff_ratio`, once per congestion episode, like
/// [`Aimd`](super::Aimd). As with AIMD, healthy calls admitted with fewer than half the limit
/// in flight do not grow the limit.
///
/// # Measuring the no-load latency
///
/// A saturated dependency never shows its no-load latency, and a baseline taken from
/// saturated calls would let the limit ratchet upwards. So, like Envoy's adaptive
/// concurrency filter, Vegas measures it on purpose: at start and then every
/// `probe_interval`, it holds the limit at `min_limit` until `probe_samples` healthy calls
/// admitted at that concurrency have finished, takes their lowest latency as the baseline,
/// and restores the limit it had. Between probes, a lower healthy latency lowers the
/// baseline at once. A probe sheds (or queues) what does not fit under `min_limit` for a
/// few round trips; a lasting change of the dependency's speed is picked up at the next
/// probe, and until then the limit errs low.
///
/// ```
/// use fusebox_classify::Nanos;
/// use fusebox_limit::VegasConfig;
/// use fusebox_limit::algorithm::{LimitAlgorithm, Sample, Vegas};
///
/// let mut vegas = Vegas::new(&VegasConfig::new().initial_limit(20).min_limit(1).probe_samples(1));
/// // The first call measures the no-load latency, alone.
/// assert_eq!(vegas.limit(), 1);
/// assert_eq!(vegas.update(&Sample::ok(Nanos(0), Nanos(10_000_000), 1)), 20);
/// // 20 calls of 10 ms: no queueing, the limit grows fast.
/// let grown = vegas.update(&Sample::ok(Nanos(10_000_000), Nanos(20_000_000), 20));
/// assert!(grown > 20);
/// // The next round takes three times as long: calls queue, the limit shrinks.
/// let shrunk = vegas.update(&Sample::ok(Nanos(20_000_000), Nanos(50_000_000), grown));
/// assert!(shrunk < grown);
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    limit: f64,
    min: usize,
    max: usize,
    smoothing: f64,
    alpha: f64,
    beta: f64,
    backoff_ratio: f64,
    probe_interval_ns: u64,
    probe_samples: usize,
    baseline: Option<u64>,
    probe: Option<Probe>,
    last_probe: Nanos,
    last_change: Option<Nanos>,
    gate: DropGate,
}

/// A measurement of the no-load latency in progress.
#[derive(Debug, Clone)]
struct Probe {
    /// Only calls admitted from then on count (`None`: the first probe, any call).
    since: Option<Nanos>,
    seen: usize,
    lowest: u64,
}

impl Vegas {
    /// A Vegas limit with these settings. Settings a validated configuration would reject
    /// are made safe rather than refused (see [`Aimd::new`](super::Aimd::new)).
    pub fn new(config: &VegasConfig) -> Self {
        let min = config.min_limit.max(1);
        let max = config.max_limit.max(min);
        let positive = |x: f64, default: f64| {
            if x > 0.0 && x.is_finite() { x } else { default }
        };
        let alpha = positive(config.alpha, 3.0);
        let beta = positive(config.beta, 6.0).max(alpha);
        let smoothing = positive(config.smoothing, 1.0).min(1.0);
        let ratio = config.backoff_ratio;
        let backoff_ratio = if ratio > 0.0 && ratio < 1.0 {
            ratio
        } else {
            0.9
        };
        Vegas {
            limit: config.initial_limit.clamp(min, max) as f64,
            min,
            max,
            smoothing,
            alpha,
            beta,
            backoff_ratio,
            probe_interval_ns: duration_nanos(config.probe_interval).max(1),
            probe_samples: config.probe_samples.max(1),
            baseline: None,
            probe: Some(Probe {
                since: None,
                seen: 0,
                lowest: u64::MAX,
            }),
            last_probe: Nanos::ZERO,
            last_change: None,
            gate: DropGate::default(),
        }
    }

    /// This algorithm with `config`'s settings, keeping its state: the current limit (held
    /// within the new minimum and maximum), the no-load latency measured and the
    /// measurement in progress, and the congestion episode in progress. `config`'s
    /// `initial_limit` is not used: the limit is already running.
    pub fn reconfigured(&self, config: &VegasConfig) -> Self {
        let mut next = Vegas::new(config);
        next.limit = self.limit.clamp(next.min as f64, next.max as f64);
        next.baseline = self.baseline;
        next.probe = self.probe.clone();
        next.last_probe = self.last_probe;
        next.last_change = self.last_change;
        next.gate = self.gate;
        next
    }

    /// The no-load latency in use, in nanoseconds (`None` before the first measurement).
    pub fn baseline_nanos(&self) -> Option<u64> {
        self.baseline
    }

    /// Whether the no-load latency is being measured (the limit is held at its minimum).
    pub fn is_probing(&self) -> bool {
        self.probe.is_some()
    }

    fn step(&self) -> f64 {
        self.limit.log10().max(1.0)
    }

    fn apply(&mut self, target: f64, now: Nanos) {
        let next = self.limit + (target - self.limit) * self.smoothing;
        self.limit = next.clamp(self.min as f64, self.max as f64);
        self.last_change = Some(now);
    }

    /// Takes a healthy sample into a probe in progress; ends the probe when it has enough.
    fn probe_sample(&mut self, sample: &Sample, rtt: u64) {
        let min = self.min;
        let Some(probe) = &mut self.probe else {
            return;
        };
        let counts =
            sample.in_flight <= min && probe.since.is_none_or(|since| sample.start >= since);
        if !counts {
            return;
        }
        probe.seen += 1;
        probe.lowest = probe.lowest.min(rtt);
        if probe.seen >= self.probe_samples {
            self.baseline = Some(probe.lowest);
            self.probe = None;
            self.last_probe = sample.end;
            // Calls admitted during the probe say nothing about the restored limit.
            self.last_change = Some(sample.end);
        }
    }
}

impl LimitAlgorithm for Vegas {
    fn limit(&self) -> usize {
        if self.probe.is_some() {
            return self.min;
        }
        enforced(self.limit, self.min, self.max)
    }

    fn update(&mut self, sample: &Sample) -> usize {
        if sample.dropped {
            if self.gate.admit(sample.start, sample.end) {
                let shrunk = (self.limit * self.backoff_ratio).min(self.limit - 1.0);
                // A decrease is applied whole: smoothing a backoff only delays it.
                self.limit = shrunk.clamp(self.min as f64, self.max as f64);
                self.last_change = Some(sample.end);
            }
            return self.limit();
        }

        let rtt = sample.end.0.saturating_sub(sample.start.0);
        if self.probe.is_some() {
            self.probe_sample(sample, rtt);
            return self.limit();
        }
        if sample.end.0.saturating_sub(self.last_probe.0) >= self.probe_interval_ns {
            self.probe = Some(Probe {
                since: Some(sample.end),
                seen: 0,
                lowest: u64::MAX,
            });
            return self.limit();
        }
        let base = match self.baseline {
            Some(b) if rtt < b => {
                self.baseline = Some(rtt);
                rtt
            }
            Some(b) => b,
            // Unreachable after a probe; hold until there is a baseline.
            None => return self.limit(),
        };
        if self.last_change.is_some_and(|at| sample.start < at) {
            // Admitted under an older limit: it cannot tell what the current one does.
            return self.limit();
        }
        let base = (base as f64).max(RESOLUTION_NS);
        let rtt = (rtt as f64).max(base);
        let queue = self.limit * (1.0 - base / rtt);
        let step = self.step();
        let (alpha, beta) = (self.alpha * step, self.beta * step);

        if queue > beta {
            self.apply(self.limit - step, sample.end);
        } else if queue < alpha && sample.in_flight.saturating_mul(2) >= self.limit() {
            let grow = if queue < 1.0 { beta } else { step };
            self.apply(self.limit + grow, sample.end);
        }
        self.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::sim;
    use proptest::prelude::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    #[test]
    fn converges_near_the_knee() {
        // 50 calls at 10 ms; beyond that, calls queue and latency grows in proportion.
        for initial in [1, 20, 500] {
            let mut vegas = Vegas::new(&VegasConfig::new().initial_limit(initial).max_limit(1000));
            let mut now = 0;
            let history = sim::run(
                &mut vegas,
                &mut now,
                1000,
                |c| sim::latency(10 * MS, 50, c),
                |_| false,
            );
            let settled = &history[800..];
            let (lo, hi) = (
                *settled.iter().min().unwrap(),
                *settled.iter().max().unwrap(),
            );
            // queue = limit - 50 is held between alpha and beta (about 5 and 10 here).
            assert!(
                lo >= 50 && hi <= 65,
                "from {initial}: settled within 50..=65, got {lo}..={hi}"
            );
        }
    }

    #[test]
    fn spike_shrinks_and_recovery_grows_back() {
        let config = VegasConfig::new()
            .initial_limit(20)
            .min_limit(2)
            .probe_interval(Duration::from_secs(60));
        let mut vegas = Vegas::new(&config);
        let mut now = 0;
        let healthy = |c| sim::latency(10 * MS, 50, c);
        sim::run(&mut vegas, &mut now, 200, healthy, |_| false);
        let before = vegas.limit();
        assert!(before >= 50, "warmed up: {before}");

        // The dependency gets four times slower at every concurrency for 100 rounds (4 s,
        // well before the next probe).
        let spiked = sim::run(
            &mut vegas,
            &mut now,
            100,
            |c| 4 * sim::latency(10 * MS, 50, c),
            |_| false,
        );
        let during = *spiked.last().unwrap();
        assert!(
            during * 3 < before,
            "limit shrinks under a spike: {before} -> {during}"
        );

        let recovered = sim::run(&mut vegas, &mut now, 200, healthy, |_| false);
        let after = *recovered.last().unwrap();
        assert!(
            (50..=65).contains(&after),
            "limit grows back to the knee: {during} -> {after}"
        );
    }

    #[test]
    fn failures_shrink_once_per_episode() {
        let config = VegasConfig::new()
            .initial_limit(40)
            .backoff_ratio(0.5)
            .probe_samples(1);
        let mut vegas = Vegas::new(&config);
        assert_eq!(vegas.update(&Sample::ok(Nanos(0), Nanos(10), 1)), 40);
        assert_eq!(vegas.update(&Sample::drop(Nanos(10), Nanos(100), 40)), 20);
        assert_eq!(vegas.update(&Sample::drop(Nanos(20), Nanos(101), 40)), 20);
        assert_eq!(vegas.update(&Sample::drop(Nanos(100), Nanos(200), 20)), 10);
    }

    #[test]
    fn a_lasting_slowdown_becomes_the_new_baseline() {
        let config = VegasConfig::new()
            .initial_limit(20)
            .probe_interval(Duration::from_secs(1));
        let mut vegas = Vegas::new(&config);
        let mut now = 0;
        sim::run(
            &mut vegas,
            &mut now,
            100,
            |c| sim::latency(10 * MS, 50, c),
            |_| false,
        );
        // Slower for good: the next probe measures the new no-load latency and the limit
        // settles at the knee again.
        let history = sim::run(
            &mut vegas,
            &mut now,
            400,
            |c| sim::latency(30 * MS, 50, c),
            |_| false,
        );
        assert_eq!(vegas.baseline_nanos(), Some(30 * MS));
        // Between probes (which hold it at the minimum for a few rounds).
        let high = *history[history.len() - 40..].iter().max().unwrap();
        assert!((50..=65).contains(&high), "{high}");
    }

    #[test]
    fn zero_latencies_do_not_poison_the_estimate() {
        let mut vegas = Vegas::new(&VegasConfig::new().initial_limit(10));
        for i in 0..10 {
            vegas.update(&Sample::ok(Nanos(i), Nanos(i), 1));
        }
        assert!(!vegas.is_probing());
        assert_eq!(vegas.baseline_nanos(), Some(0));
        for i in 10..50 {
            vegas.update(&Sample::ok(Nanos(i), Nanos(i), 10));
        }
        assert!(vegas.limit() > 10);
    }

    #[test]
    fn probes_measure_the_no_load_latency_at_the_minimum() {
        let config = VegasConfig::new()
            .initial_limit(30)
            .min_limit(2)
            .probe_samples(3)
            .probe_interval(Duration::from_secs(10));
        let mut vegas = Vegas::new(&config);
        assert!(vegas.is_probing());
        assert_eq!(vegas.limit(), 2);
        // Calls admitted above the probe's concurrency do not count.
        vegas.update(&Sample::ok(Nanos(0), Nanos(5 * MS), 7));
        for i in 0..3 {
            vegas.update(&Sample::ok(
                Nanos(i * 10 * MS),
                Nanos((i * 10 + 8 + i) * MS),
                2,
            ));
        }
        assert!(!vegas.is_probing());
        assert_eq!(vegas.baseline_nanos(), Some(8 * MS));
        assert_eq!(vegas.limit(), 30, "the limit is restored");
        // A lower healthy latency lowers the baseline between probes.
        vegas.update(&Sample::ok(Nanos(40 * MS), Nanos(46 * MS), 30));
        assert_eq!(vegas.baseline_nanos(), Some(6 * MS));
        // Ten seconds after the last probe, the next one starts.
        vegas.update(&Sample::ok(Nanos(10_040 * MS), Nanos(10_050 * MS), 30));
        assert!(vegas.is_probing());
        assert_eq!(vegas.limit(), 2);
        // Calls admitted before it started do not count, even at low concurrency.
        vegas.update(&Sample::ok(Nanos(10_045 * MS), Nanos(10_060 * MS), 1));
        for i in 0..3 {
            let start = 10_100 * MS + i * 40 * MS;
            vegas.update(&Sample::ok(Nanos(start), Nanos(start + 30 * MS), 2));
        }
        assert_eq!(
            vegas.baseline_nanos(),
            Some(30 * MS),
            "a slower dependency is the new normal"
        );
    }

    proptest! {
        #[test]
        fn limit_stays_within_bounds(
            min in 1usize..20,
            span in 0usize..200,
            initial in 0usize..300,
            smoothing in 0.01f64..1.0,
            samples in proptest::collection::vec((any::<bool>(), 0u64..50_000_000, 0u64..20_000_000, 0usize..400), 1..400),
        ) {
            let max = min + span;
            let mut vegas = Vegas::new(
                &VegasConfig::new().min_limit(min).max_limit(max).initial_limit(initial).smoothing(smoothing),
            );
            let mut t = 0;
            for (dropped, lat, gap, in_flight) in samples {
                t += gap;
                let s = Sample { start: Nanos(t), end: Nanos(t + lat), in_flight, dropped };
                let limit = vegas.update(&s);
                prop_assert!((min..=max).contains(&limit), "{limit} outside {min}..={max}");
            }
        }
    }
}
