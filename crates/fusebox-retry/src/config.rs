//! The retry layer's configuration: a builder that checks every field and reports every
//! problem at once, naming the field ([`ConfigError`]), and (feature `serde`) the same
//! checks for configuration files.

use crate::backoff::{SystemWallClock, WallClock};
use fusebox_classify::{ConfigError, Validator};
use std::sync::Arc;
use std::time::Duration;

/// The settings of a [`RetryBudgetLayer`](crate::RetryBudgetLayer).
///
/// Built with [`RetryConfig::builder`]; [`RetryConfig::default`] is the builder's defaults:
///
/// | field | default | meaning |
/// |---|---|---|
/// | `name` | the policy's (used alone: `"default"`) | the `dependency` label of the metrics |
/// | `retry_ratio` | 0.2 | retries allowed per request in the window (Finagle's and Envoy's 20 %) |
/// | `min_retries_per_second` | 10 | a floor of retries per second, so that quiet services can retry |
/// | `ttl` | 10 s | the sliding window of the budget and the cut-off (1 s to 60 s) |
/// | `failure_rate_threshold` | 10 % | stop retrying when this percentage of recent attempts failed (`None`: never) |
/// | `cutoff_minimum_calls` | 20 | attempts in the window before the cut-off may act |
/// | `max_attempts` | 3 | attempts per request, first attempt and hedge included |
/// | `base_delay` | 25 ms | the first retry's backoff ceiling |
/// | `max_delay` | 1 s | the cap of the backoff ceiling |
/// | `max_retry_after` | 30 s | the longest `Retry-After` / gRPC pushback honoured; a longer one is not retried |
/// | `max_replay_body_bytes` | 64 KiB | request bodies up to this size are buffered to be replayed |
/// | `hedge_delay` | none | send a hedge (backup request) after this long without an answer |
/// | `seed` | none | seeds the jitter (tests); without it the jitter is seeded at random |
#[derive(Debug, Clone)]
pub struct RetryConfig {
    name: Arc<str>,
    named: bool,
    retry_ratio_billionths: u64,
    min_retries_per_second: u32,
    ttl: Duration,
    cutoff_threshold_permille: Option<u32>,
    cutoff_minimum_calls: u32,
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    max_replay_body_bytes: usize,
    hedge_delay: Option<Duration>,
    seed: Option<u64>,
    wall_clock: Arc<dyn WallClock>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfigBuilder::default()
            .build()
            .expect("the default retry configuration is valid")
    }
}

impl RetryConfig {
    /// A builder with the defaults listed on [`RetryConfig`].
    pub fn builder() -> RetryConfigBuilder {
        RetryConfigBuilder::default()
    }

    /// The name (the `dependency` label of the metrics).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the name was given (a policy names an unnamed retry budget after itself).
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// The cut-off threshold, as the percentage of failed attempts it was given as.
    pub fn failure_rate_threshold(&self) -> Option<u32> {
        self.cutoff_threshold_permille.map(|p| p / 10)
    }

    /// This configuration, named `name` (what a policy does to a budget nobody named).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.named = true;
        self
    }

    /// A builder holding this configuration, to change some settings and build again.
    pub fn to_builder(&self) -> RetryConfigBuilder {
        RetryConfigBuilder {
            name: Arc::clone(&self.name),
            named: self.named,
            retry_ratio: self.retry_ratio(),
            min_retries_per_second: self.min_retries_per_second,
            ttl: self.ttl,
            failure_rate_threshold: self.failure_rate_threshold(),
            cutoff_minimum_calls: self.cutoff_minimum_calls,
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            max_retry_after: self.max_retry_after,
            max_replay_body_bytes: self.max_replay_body_bytes,
            hedge_delay: self.hedge_delay,
            seed: self.seed,
            wall_clock: Arc::clone(&self.wall_clock),
        }
    }

    /// Retries allowed per request in the window.
    pub fn retry_ratio(&self) -> f64 {
        self.retry_ratio_billionths as f64 / RATIO_SCALE as f64
    }

    /// [`retry_ratio`](RetryConfig::retry_ratio) in billionths, exactly as the budget counts
    /// it (0.0015 is 1,500,000).
    pub fn retry_ratio_billionths(&self) -> u64 {
        self.retry_ratio_billionths
    }

    /// The floor of retries per second.
    pub fn min_retries_per_second(&self) -> u32 {
        self.min_retries_per_second
    }

    /// The sliding window.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The cut-off's failure-rate threshold in thousandths, if the cut-off is on.
    pub fn cutoff_threshold_permille(&self) -> Option<u32> {
        self.cutoff_threshold_permille
    }

    /// Attempts in the window before the cut-off may act.
    pub fn cutoff_minimum_calls(&self) -> u32 {
        self.cutoff_minimum_calls
    }

    /// Attempts per request, first and hedge included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The first retry's backoff ceiling.
    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }

    /// The cap of the backoff ceiling.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The longest server-requested delay honoured.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The largest request body buffered for replay.
    pub fn max_replay_body_bytes(&self) -> usize {
        self.max_replay_body_bytes
    }

    /// The hedge delay, if hedging is on.
    pub fn hedge_delay(&self) -> Option<Duration> {
        self.hedge_delay
    }

    /// The jitter seed, if any.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The wall clock that `Retry-After` dates are read against.
    pub fn wall_clock(&self) -> &Arc<dyn WallClock> {
        &self.wall_clock
    }
}

/// Builds a [`RetryConfig`]; [`build`](RetryConfigBuilder::build) checks every field.
#[derive(Debug, Clone)]
pub struct RetryConfigBuilder {
    name: Arc<str>,
    named: bool,
    retry_ratio: f64,
    min_retries_per_second: u32,
    ttl: Duration,
    failure_rate_threshold: Option<u32>,
    cutoff_minimum_calls: u32,
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    max_replay_body_bytes: usize,
    hedge_delay: Option<Duration>,
    seed: Option<u64>,
    wall_clock: Arc<dyn WallClock>,
}

impl Default for RetryConfigBuilder {
    fn default() -> Self {
        RetryConfigBuilder {
            name: Arc::from("default"),
            named: false,
            retry_ratio: 0.2,
            min_retries_per_second: 10,
            ttl: Duration::from_secs(10),
            failure_rate_threshold: Some(10),
            cutoff_minimum_calls: 20,
            max_attempts: 3,
            base_delay: Duration::from_millis(25),
            max_delay: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(30),
            max_replay_body_bytes: 64 * 1024,
            hedge_delay: None,
            seed: None,
            wall_clock: Arc::new(SystemWallClock),
        }
    }
}

/// The most attempts a request may make.
pub const MAX_ATTEMPTS: u32 = 100;

impl RetryConfigBuilder {
    /// The name, used as the `dependency` label of the metrics. Unset, a policy names its retry
    /// budget after itself, and one used alone is named `"default"`.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.named = true;
        self
    }

    /// Names the budget `name` unless it was named already (what a policy does).
    pub fn name_if_unnamed(self, name: impl Into<Arc<str>>) -> Self {
        if self.named { self } else { self.name(name) }
    }

    /// Retries allowed per request in the window: 0.2 lets 20 % of recent requests be
    /// retried. Within 0.0..=1000.0, with at most nine decimal places: the budget counts
    /// in billionths and keeps the ratio exactly, so a ratio it could not keep (0.1234567891,
    /// or 1/3) is refused rather than rounded up (more retries than asked) or down (to zero,
    /// which would turn ratio-based retries off).
    pub fn retry_ratio(mut self, ratio: f64) -> Self {
        self.retry_ratio = ratio;
        self
    }

    /// A floor of retries per second (over the window: `floor × ttl` retries), so that a
    /// service with little traffic can still retry. Zero for none.
    pub fn min_retries_per_second(mut self, floor: u32) -> Self {
        self.min_retries_per_second = floor;
        self
    }

    /// The sliding window of the budget and the cut-off, 1 s to 60 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Stop retrying while at least `percent` (1..=100) of the window's attempts failed —
    /// a percentage, as the breaker's threshold is; `None` turns the cut-off off.
    pub fn failure_rate_threshold(mut self, threshold: Option<u32>) -> Self {
        self.failure_rate_threshold = threshold;
        self
    }

    /// Attempts the window must hold before the cut-off may act (at least 1).
    pub fn cutoff_minimum_calls(mut self, calls: u32) -> Self {
        self.cutoff_minimum_calls = calls;
        self
    }

    /// Attempts per request, the first and any hedge included (1 turns retries off),
    /// at most [`MAX_ATTEMPTS`].
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// The first retry waits a random time up to this; each next retry doubles the ceiling.
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// The cap of the backoff ceiling (at least `base_delay`).
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The longest `Retry-After` or gRPC pushback honoured. A server asking for longer is
    /// not retried: its answer goes back to the caller, who can read the header.
    pub fn max_retry_after(mut self, delay: Duration) -> Self {
        self.max_retry_after = delay;
        self
    }

    /// Request bodies whose size hint says at most this many bytes are buffered so they
    /// can be replayed; larger or unsized (streaming) bodies are sent once.
    pub fn max_replay_body_bytes(mut self, bytes: usize) -> Self {
        self.max_replay_body_bytes = bytes;
        self
    }

    /// Sends a hedge (one backup attempt) for a repeatable request when no answer came
    /// within `delay`; `None` (the default) turns hedging off. Hedges spend the budget.
    pub fn hedge_delay(mut self, delay: Option<Duration>) -> Self {
        self.hedge_delay = delay;
        self
    }

    /// Seeds the jitter, for reproducible tests.
    pub fn seed(mut self, seed: Option<u64>) -> Self {
        self.seed = seed;
        self
    }

    /// Reads wall-clock time (for `Retry-After` dates) from `clock` instead of the system.
    pub fn wall_clock(mut self, clock: impl WallClock) -> Self {
        self.wall_clock = Arc::new(clock);
        self
    }

    /// Checks every field; the error lists every problem with its field.
    pub fn build(self) -> Result<RetryConfig, ConfigError> {
        let mut v = Validator::new();
        let ratio = self.retry_ratio;
        let in_range = ratio.is_finite() && (0.0..=1000.0).contains(&ratio);
        v.check(in_range, "retry_ratio", || {
            format!("must be within 0.0..=1000.0, got {ratio}")
        });
        let billionths = ratio_billionths(ratio);
        if in_range {
            v.check(billionths.is_some(), "retry_ratio", || {
                format!(
                    "must have at most 9 decimal places (the budget counts billionths of a retry exactly), got {ratio}"
                )
            });
        }
        let ttl = self.ttl;
        v.check(
            (Duration::from_secs(1)..=Duration::from_secs(60)).contains(&ttl),
            "ttl",
            || format!("must be within 1s..=60s, got {ttl:?}"),
        );
        if let Some(t) = self.failure_rate_threshold {
            v.check((1..=100).contains(&t), "failure_rate_threshold", || {
                format!("must be within 1..=100 (percent), got {t}")
            });
        }
        v.check(
            self.cutoff_minimum_calls >= 1,
            "cutoff_minimum_calls",
            || "must be at least 1, got 0".into(),
        );
        let attempts = self.max_attempts;
        v.check(
            (1..=MAX_ATTEMPTS).contains(&attempts),
            "max_attempts",
            || format!("must be within 1..={MAX_ATTEMPTS}, got {attempts}"),
        );
        v.check(!self.base_delay.is_zero(), "base_delay", || {
            "must be greater than zero".into()
        });
        let (base, max) = (self.base_delay, self.max_delay);
        v.check(max >= base, "max_delay", || {
            format!("must be at least base_delay ({base:?}), got {max:?}")
        });
        if let Some(d) = self.hedge_delay {
            v.check(!d.is_zero(), "hedge_delay", || {
                "must be greater than zero".into()
            });
        }
        v.finish(RetryConfig {
            name: self.name,
            named: self.named,
            retry_ratio_billionths: billionths.unwrap_or(0),
            min_retries_per_second: self.min_retries_per_second,
            ttl: self.ttl,
            cutoff_threshold_permille: self.failure_rate_threshold.map(|t| t.clamp(1, 100) * 10),
            cutoff_minimum_calls: self.cutoff_minimum_calls,
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            max_retry_after: self.max_retry_after,
            max_replay_body_bytes: self.max_replay_body_bytes,
            hedge_delay: self.hedge_delay,
            seed: self.seed,
            wall_clock: self.wall_clock,
        })
    }
}

/// Units of one retry in the budget: the ratio is kept in billionths.
pub(crate) const RATIO_SCALE: u64 = 1_000_000_000;

/// `ratio` in billionths when that is exact: when the decimal with at most nine places
/// nearest to it is the very `f64` the caller wrote (0.0015 is 1,500,000); `None` for a
/// ratio with more places (or out of range), which the budget could only round.
fn ratio_billionths(ratio: f64) -> Option<u64> {
    if !(ratio.is_finite() && (0.0..=1000.0).contains(&ratio)) {
        return None;
    }
    // At most 10^12: exact in an f64, as is the division back (correctly rounded).
    let units = (ratio * RATIO_SCALE as f64).round();
    (units / RATIO_SCALE as f64 == ratio).then_some(units as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_kept_to_the_billionth_or_refused() {
        for (ratio, billionths) in [
            (0.0015, 1_500_000),
            (0.0005, 500_000),
            (0.0004, 400_000),
            (0.2, 200_000_000),
            (0.000_000_001, 1),
            (0.0, 0),
            (1000.0, 1_000_000_000_000),
            (123.456_789_012, 123_456_789_012),
        ] {
            let c = RetryConfig::builder().retry_ratio(ratio).build().unwrap();
            assert_eq!(c.retry_ratio_billionths(), billionths, "{ratio}");
            assert_eq!(c.retry_ratio(), ratio);
        }
        for ratio in [0.000_000_000_1, 1.0 / 3.0, 0.123_456_789_1] {
            let err = RetryConfig::builder()
                .retry_ratio(ratio)
                .build()
                .unwrap_err();
            assert_eq!(err.problems().len(), 1, "{err}");
            assert_eq!(err.problems()[0].path(), "retry_ratio");
            assert!(
                err.problems()[0]
                    .rule()
                    .starts_with("must have at most 9 decimal places"),
                "{err}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any `f64`: no panic; a ratio that is kept is kept exactly, and every decimal of
        /// up to nine places within range is kept.
        #[test]
        fn ratio_billionths_are_exact(bits in proptest::prelude::any::<u64>(), units in 0u64..=1_000_000_000_000) {
            let ratio = f64::from_bits(bits);
            if let Some(kept) = ratio_billionths(ratio) {
                proptest::prop_assert!(kept <= 1_000_000_000_000);
                proptest::prop_assert_eq!(kept as f64 / 1e9, ratio);
            }
            let decimal = units as f64 / 1e9;
            proptest::prop_assert_eq!(ratio_billionths(decimal), Some(units));
            // Parsed from its text, as a configuration file gives it.
            let text = format!("{}.{:09}", units / 1_000_000_000, units % 1_000_000_000);
            let parsed: f64 = text.parse().unwrap();
            proptest::prop_assert_eq!(ratio_billionths(parsed), Some(units), "{}", text);
        }
    }

    #[test]
    fn defaults() {
        let c = RetryConfig::default();
        assert_eq!(c.retry_ratio_billionths(), 200_000_000);
        assert!((c.retry_ratio() - 0.2).abs() < 1e-9);
        assert_eq!(c.min_retries_per_second(), 10);
        assert_eq!(c.ttl(), Duration::from_secs(10));
        assert_eq!(c.cutoff_threshold_permille(), Some(100));
        assert_eq!(c.max_attempts(), 3);
        assert_eq!(c.max_replay_body_bytes(), 65_536);
        assert_eq!(c.hedge_delay(), None);
        assert_eq!(c.name(), "default");
    }

    #[test]
    fn every_problem_names_its_field() {
        let err = RetryConfig::builder()
            .retry_ratio(-0.5)
            .ttl(Duration::from_millis(10))
            .failure_rate_threshold(Some(150))
            .cutoff_minimum_calls(0)
            .max_attempts(0)
            .base_delay(Duration::ZERO)
            .hedge_delay(Some(Duration::ZERO))
            .build()
            .unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            paths,
            [
                "retry_ratio",
                "ttl",
                "failure_rate_threshold",
                "cutoff_minimum_calls",
                "max_attempts",
                "base_delay",
                "hedge_delay"
            ]
        );
        assert_eq!(
            err.problems()[0].rule(),
            "must be within 0.0..=1000.0, got -0.5"
        );
        let err = RetryConfig::builder()
            .base_delay(Duration::from_secs(2))
            .max_delay(Duration::from_secs(1))
            .retry_ratio(f64::NAN)
            .build()
            .unwrap_err();
        assert_eq!(err.problems()[1].path(), "max_delay");
        assert!(err.problems()[1].rule().contains("at least base_delay"));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserializes_and_validates() {
        let c: RetryConfig = serde_json::from_str(
            r#"{"name":"fraud","retry_ratio":0.1,"ttl":"5s","hedge_delay":"30ms","failure_rate_threshold":"none","seed":7}"#,
        )
        .unwrap();
        assert_eq!(c.name(), "fraud");
        assert_eq!(c.retry_ratio_billionths(), 100_000_000);
        assert_eq!(c.ttl(), Duration::from_secs(5));
        assert_eq!(c.hedge_delay(), Some(Duration::from_millis(30)));
        assert_eq!(c.cutoff_threshold_permille(), None);
        assert_eq!(c.seed(), Some(7));
        assert_eq!(c.max_attempts(), 3, "missing fields take their defaults");
        let err = serde_json::from_str::<RetryConfig>(r#"{"max_attempts":0}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("max_attempts: must be within 1..=100, got 0"),
            "{err}"
        );
        assert!(serde_json::from_str::<RetryConfig>(r#"{"retries":3}"#).is_err());
    }
}
