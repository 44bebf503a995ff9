//! The breaker's configuration, its builder and its validation.

use fusebox_classify::{ConfigError, Validator};
use std::sync::Arc;
use std::time::Duration;

/// Which window the breaker judges the dependency by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowConfig {
    /// The last `size` calls.
    Count {
        /// Calls in the window.
        size: u32,
    },
    /// The calls of the last `duration`, in `buckets` slices.
    Time {
        /// How far back the window reaches.
        duration: Duration,
        /// How many slices the window moves by (more slices: smoother, a little more memory).
        buckets: u32,
    },
}

impl WindowConfig {
    /// The slices of a time window that names none (a file's `time_window` without
    /// `time_window_buckets`).
    pub const DEFAULT_BUCKETS: u32 = 10;
}

/// What happens to the window when the breaker closes after successful probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum OnClose {
    /// Start from an empty window (the default). The probes proved the dependency healthy;
    /// keeping the outage's failures would re-open the breaker on the first few slow or
    /// failed calls after recovery — flapping on stale evidence. The cost: the breaker
    /// forgets that the dependency was failing moments ago and needs `minimum_calls` new
    /// calls before it can trip again.
    #[default]
    Clear,
    /// Keep the window and let the outage's calls age out. A barely recovered dependency
    /// re-opens quickly, at the risk of flapping.
    Keep,
}

/// The cap of a growing open wait when none is given: five minutes (or `open_wait`, if
/// that is longer).
const DEFAULT_MAX_OPEN_WAIT: Duration = Duration::from_secs(300);

/// The name of a breaker nobody named: a policy names its breaker after itself.
pub const UNNAMED: &str = "default";

/// A validated circuit breaker configuration. Build it with
/// [`CircuitBreakerConfig::builder`]; with the `serde` feature it also deserializes (and is
/// validated while deserializing), through its file section, `CircuitBreakerSection`.
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitBreakerConfig {
    pub(crate) name: Arc<str>,
    /// Whether the name was given (a policy names an unnamed breaker after itself).
    pub(crate) named: bool,
    pub(crate) window: WindowConfig,
    pub(crate) minimum_calls: u32,
    pub(crate) failure_rate_threshold: u8,
    pub(crate) slow_call_rate_threshold: u8,
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) open_wait: Duration,
    pub(crate) open_wait_jitter: Duration,
    pub(crate) open_wait_multiplier: f64,
    pub(crate) max_open_wait: Duration,
    pub(crate) permitted_probes: u32,
    pub(crate) probe_successes: u32,
    pub(crate) max_half_open_wait: Option<Duration>,
    pub(crate) on_close: OnClose,
    pub(crate) count_overloaded: bool,
    pub(crate) seed: Option<u64>,
}

impl CircuitBreakerConfig {
    /// A builder with the defaults:
    ///
    /// | setting | default | why |
    /// |---|---|---|
    /// | window | last 100 calls | resilience4j's default |
    /// | `minimum_calls` | 20 | a low-traffic dependency can still trip; 100 would need a full window |
    /// | `failure_rate_threshold` | 50 % | resilience4j's default |
    /// | `slow_call_rate_threshold` | 100 % | only an all-slow window trips, unless lowered |
    /// | `consecutive_failures` | off | |
    /// | `open_wait` | 30 s, + up to 3 s jitter | jitter keeps a fleet from probing in lockstep |
    /// | `open_wait_multiplier` | 1.0 (no growth); when growing, capped at `max_open_wait`: 5 min, or `open_wait` if longer | without growth the cap is `open_wait` itself, however long |
    /// | `permitted_probes` | 3, all must succeed | a narrow probe budget: recovery is proven, not assumed |
    /// | `max_half_open_wait` | 30 s | a stuck probe re-opens the breaker instead of wedging it |
    /// | `on_close` | [`OnClose::Clear`] | see there |
    /// | `count_overloaded` | false | a full local bulkhead says nothing about the dependency |
    /// | `name` | the policy's (a breaker used alone: [`UNNAMED`]) | set it once, on the policy |
    pub fn builder() -> CircuitBreakerConfigBuilder {
        CircuitBreakerConfigBuilder {
            config: CircuitBreakerConfig {
                name: Arc::from(UNNAMED),
                named: false,
                window: WindowConfig::Count { size: 100 },
                minimum_calls: 20,
                failure_rate_threshold: 50,
                slow_call_rate_threshold: 100,
                consecutive_failures: None,
                open_wait: Duration::from_secs(30),
                open_wait_jitter: Duration::from_secs(3),
                open_wait_multiplier: 1.0,
                max_open_wait: DEFAULT_MAX_OPEN_WAIT,
                permitted_probes: 3,
                probe_successes: 3,
                max_half_open_wait: Some(Duration::from_secs(30)),
                on_close: OnClose::Clear,
                count_overloaded: false,
                seed: None,
            },
            probe_successes_set: false,
            max_open_wait: None,
            raw_failure_rate: None,
            raw_slow_rate: None,
        }
    }

    /// The breaker's name (in errors, events and metrics).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the name was given rather than left to whoever uses the breaker (a policy
    /// names an unnamed breaker after itself).
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// This configuration, named `name` (what a policy does to a breaker nobody named).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.named = true;
        self
    }

    /// A builder holding this configuration, to change some settings and build again.
    pub fn to_builder(&self) -> CircuitBreakerConfigBuilder {
        CircuitBreakerConfigBuilder {
            config: self.clone(),
            probe_successes_set: true,
            max_open_wait: (self.open_wait_multiplier > 1.0).then_some(self.max_open_wait),
            raw_failure_rate: Some(u32::from(self.failure_rate_threshold)),
            raw_slow_rate: Some(u32::from(self.slow_call_rate_threshold)),
        }
    }

    /// The open wait's growth per trip in a row (1.0: none).
    pub fn open_wait_multiplier(&self) -> f64 {
        self.open_wait_multiplier
    }

    /// The cap of a growing open wait (`open_wait` itself when the wait does not grow).
    pub fn max_open_wait(&self) -> Duration {
        self.max_open_wait
    }

    /// The seed of the jitter's random numbers, if set.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The window.
    pub fn window(&self) -> WindowConfig {
        self.window
    }

    /// Calls the window must hold before the breaker may trip on a rate.
    pub fn minimum_calls(&self) -> u32 {
        self.minimum_calls
    }

    /// The failure rate (percent) at which the breaker trips.
    pub fn failure_rate_threshold(&self) -> u8 {
        self.failure_rate_threshold
    }

    /// The slow-call rate (percent) at which the breaker trips.
    pub fn slow_call_rate_threshold(&self) -> u8 {
        self.slow_call_rate_threshold
    }

    /// The consecutive-failures trigger, if on.
    pub fn consecutive_failures(&self) -> Option<u32> {
        self.consecutive_failures
    }

    /// The base open wait.
    pub fn open_wait(&self) -> Duration {
        self.open_wait
    }

    /// The most random jitter added to an open wait.
    pub fn open_wait_jitter(&self) -> Duration {
        self.open_wait_jitter
    }

    /// Probes admitted while half-open.
    pub fn permitted_probes(&self) -> u32 {
        self.permitted_probes
    }

    /// Successful probes needed to close.
    pub fn probe_successes(&self) -> u32 {
        self.probe_successes
    }

    /// The longest the breaker stays half-open before re-opening.
    pub fn max_half_open_wait(&self) -> Option<Duration> {
        self.max_half_open_wait
    }

    /// What closing does to the window.
    pub fn on_close(&self) -> OnClose {
        self.on_close
    }

    /// Whether fusebox's own `Overloaded` rejections count as failures.
    pub fn count_overloaded(&self) -> bool {
        self.count_overloaded
    }

    /// The open wait for the `trips`-th trip in a row (1 for the first): base × multiplier^(trips-1),
    /// capped, before jitter.
    pub(crate) fn open_wait_for(&self, trips: u32) -> Duration {
        if self.open_wait_multiplier <= 1.0 {
            return self.open_wait;
        }
        if trips <= 1 {
            return self.open_wait.min(self.max_open_wait);
        }
        let factor = self
            .open_wait_multiplier
            .powi(i32::try_from(trips - 1).unwrap_or(i32::MAX));
        let secs = self.open_wait.as_secs_f64() * factor;
        if !secs.is_finite() || secs >= self.max_open_wait.as_secs_f64() {
            self.max_open_wait
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

/// Builds a [`CircuitBreakerConfig`]; [`build`](CircuitBreakerConfigBuilder::build) checks
/// every field and reports every problem.
#[derive(Debug, Clone)]
pub struct CircuitBreakerConfigBuilder {
    pub(crate) config: CircuitBreakerConfig,
    probe_successes_set: bool,
    /// The cap given with [`open_wait_growth`](Self::open_wait_growth), if any.
    pub(crate) max_open_wait: Option<Duration>,
    raw_failure_rate: Option<u32>,
    raw_slow_rate: Option<u32>,
}

impl CircuitBreakerConfigBuilder {
    /// Names the breaker (in errors, events and metrics). Unset, a policy names it after
    /// itself, and a breaker used alone is named [`UNNAMED`].
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.config.name = name.into();
        self.config.named = true;
        self
    }

    /// Names the breaker `name` unless it was named already (what a policy does).
    pub fn name_if_unnamed(self, name: impl Into<Arc<str>>) -> Self {
        if self.config.named {
            self
        } else {
            self.name(name)
        }
    }

    /// Whether a name was given.
    pub fn is_named(&self) -> bool {
        self.config.named
    }

    /// Judge the last `size` calls (1..=1,000,000).
    pub fn count_window(mut self, size: u32) -> Self {
        self.config.window = WindowConfig::Count { size };
        self
    }

    /// Judge the calls of the last `duration`, in `buckets` slices (1..=3600).
    pub fn time_window(mut self, duration: Duration, buckets: u32) -> Self {
        self.config.window = WindowConfig::Time { duration, buckets };
        self
    }

    /// Judge by `window`: [`count_window`](Self::count_window) or
    /// [`time_window`](Self::time_window) for a window held as a value.
    pub fn window(mut self, window: WindowConfig) -> Self {
        self.config.window = window;
        self
    }

    /// Calls the window must hold before a rate can trip the breaker (at least 1, at most a
    /// count window's size).
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.config.minimum_calls = calls;
        self
    }

    /// Trip when at least `percent` (1..=100) of the window's calls failed.
    pub fn failure_rate_threshold(mut self, percent: u32) -> Self {
        self.raw_failure_rate = Some(percent);
        self
    }

    /// Trip when at least `percent` (1..=100) of the window's calls were slow (slow means
    /// at or above the route's `slow_call_duration`).
    pub fn slow_call_rate_threshold(mut self, percent: u32) -> Self {
        self.raw_slow_rate = Some(percent);
        self
    }

    /// Also trip after `failures` failures in a row, whatever the window says.
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.config.consecutive_failures = Some(failures);
        self
    }

    /// How long the breaker stays open before probing (greater than zero).
    pub fn open_wait(mut self, wait: Duration) -> Self {
        self.config.open_wait = wait;
        self
    }

    /// The most random jitter added to each open wait (zero for none).
    pub fn open_wait_jitter(mut self, jitter: Duration) -> Self {
        self.config.open_wait_jitter = jitter;
        self
    }

    /// Grow the open wait by `multiplier` (≥ 1.0) on each trip in a row (a probe that fails
    /// re-opens for longer), up to `max` (at least `open_wait`). With a multiplier of 1.0
    /// nothing grows and `max` is not used.
    pub fn open_wait_growth(mut self, multiplier: f64, max: Duration) -> Self {
        self.config.open_wait_multiplier = multiplier;
        self.max_open_wait = Some(max);
        self
    }

    /// Probes admitted while half-open (1..=10,000). Unless set separately, all of them
    /// must succeed to close.
    pub fn permitted_probes(mut self, probes: u32) -> Self {
        self.config.permitted_probes = probes;
        self
    }

    /// Successful probes needed to close (1..=`permitted_probes`).
    pub fn probe_successes(mut self, successes: u32) -> Self {
        self.config.probe_successes = successes;
        self.probe_successes_set = true;
        self
    }

    /// The longest the breaker stays half-open; then it re-opens (a stuck probe must not
    /// wedge it). `None` waits for the probes however long they take.
    pub fn max_half_open_wait(mut self, wait: Option<Duration>) -> Self {
        self.config.max_half_open_wait = wait;
        self
    }

    /// What closing does to the window.
    pub fn on_close(mut self, on_close: OnClose) -> Self {
        self.config.on_close = on_close;
        self
    }

    /// Count fusebox's own `Overloaded` rejections as failures: for a concurrency limit
    /// inside the breaker that stands for the dependency's own saturation.
    pub fn count_overloaded(mut self, count: bool) -> Self {
        self.config.count_overloaded = count;
        self
    }

    /// Seed the jitter's random numbers (tests, replays): the same seed gives the same
    /// sequence of open waits.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// Checks every field; every problem is reported, each with its field and rule.
    pub fn build(self) -> Result<CircuitBreakerConfig, ConfigError> {
        let mut c = self.config;
        let mut v = Validator::new();
        v.check(!c.name.trim().is_empty(), "name", || {
            "must not be empty".into()
        });
        match c.window {
            WindowConfig::Count { size } => {
                v.check((1..=1_000_000).contains(&size), "count_window", || {
                    format!("must be within 1..=1000000, got {size}")
                });
                v.check(c.minimum_calls <= size, "minimum_calls", || {
                    format!(
                        "must not exceed the count window's size ({size}), got {}",
                        c.minimum_calls
                    )
                });
            }
            WindowConfig::Time { duration, buckets } => {
                v.check(!duration.is_zero(), "time_window", || {
                    "must be greater than zero".into()
                });
                v.check((1..=3600).contains(&buckets), "time_window_buckets", || {
                    format!("must be within 1..=3600, got {buckets}")
                });
            }
        }
        v.check(c.minimum_calls >= 1, "minimum_calls", || {
            "must be at least 1, got 0".into()
        });
        let percent = |v: &mut Validator, field: &str, raw: Option<u32>, into: &mut u8| {
            if let Some(p) = raw {
                v.check((1..=100).contains(&p), field, || {
                    format!("must be within 1..=100, got {p}")
                });
                *into = p.clamp(1, 100) as u8;
            }
        };
        percent(
            &mut v,
            "failure_rate_threshold",
            self.raw_failure_rate,
            &mut c.failure_rate_threshold,
        );
        percent(
            &mut v,
            "slow_call_rate_threshold",
            self.raw_slow_rate,
            &mut c.slow_call_rate_threshold,
        );
        if let Some(n) = c.consecutive_failures {
            v.check(n >= 1, "consecutive_failures", || {
                "must be at least 1, got 0".into()
            });
        }
        v.check(!c.open_wait.is_zero(), "open_wait", || {
            "must be greater than zero".into()
        });
        v.check(
            c.open_wait_multiplier.is_finite() && c.open_wait_multiplier >= 1.0,
            "open_wait_multiplier",
            || {
                format!(
                    "must be a number of at least 1.0, got {}",
                    c.open_wait_multiplier
                )
            },
        );
        // The cap only matters while the wait grows: without growth the wait is `open_wait`,
        // however long, and a cap the user never set must not refuse it.
        if c.open_wait_multiplier > 1.0 {
            match self.max_open_wait {
                Some(max) => {
                    v.check(max >= c.open_wait, "max_open_wait", || {
                        format!(
                            "must be at least open_wait ({:?}) when open_wait_multiplier is above 1.0, got {max:?}",
                            c.open_wait
                        )
                    });
                    c.max_open_wait = max;
                }
                None => c.max_open_wait = DEFAULT_MAX_OPEN_WAIT.max(c.open_wait),
            }
        } else {
            c.max_open_wait = c.open_wait;
        }
        v.check(
            (1..=10_000).contains(&c.permitted_probes),
            "permitted_probes",
            || format!("must be within 1..=10000, got {}", c.permitted_probes),
        );
        if !self.probe_successes_set {
            c.probe_successes = c.permitted_probes;
        }
        v.check(
            c.probe_successes >= 1 && c.probe_successes <= c.permitted_probes,
            "probe_successes",
            || {
                format!(
                    "must be within 1..=permitted_probes ({}), got {}",
                    c.permitted_probes, c.probe_successes
                )
            },
        );
        if let Some(w) = c.max_half_open_wait {
            v.check(!w.is_zero(), "max_half_open_wait", || {
                "must be greater than zero".into()
            });
        }
        v.finish(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = CircuitBreakerConfig::builder().name("dep").build().unwrap();
        assert_eq!(c.window(), WindowConfig::Count { size: 100 });
        assert_eq!(c.minimum_calls(), 20);
        assert_eq!(c.permitted_probes(), 3);
        assert_eq!(c.probe_successes(), 3);
        assert_eq!(c.on_close(), OnClose::Clear);
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = CircuitBreakerConfig::builder()
            .name(" ")
            .count_window(10)
            .minimum_calls(11)
            .failure_rate_threshold(150)
            .slow_call_rate_threshold(0)
            .consecutive_failures(0)
            .open_wait(Duration::ZERO)
            .open_wait_growth(0.5, Duration::from_secs(1))
            .permitted_probes(2)
            .probe_successes(3)
            .max_half_open_wait(Some(Duration::ZERO))
            .build()
            .unwrap_err();
        let fields: Vec<&str> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            fields,
            [
                "name",
                "minimum_calls",
                "failure_rate_threshold",
                "slow_call_rate_threshold",
                "consecutive_failures",
                "open_wait",
                "open_wait_multiplier",
                "probe_successes",
                "max_half_open_wait",
            ]
        );
        assert!(
            err.to_string()
                .contains("failure_rate_threshold: must be within 1..=100, got 150"),
            "{err}"
        );
        let err = CircuitBreakerConfig::builder()
            .name("d")
            .time_window(Duration::ZERO, 0)
            .minimum_calls(0)
            .build()
            .unwrap_err();
        let fields: Vec<&str> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            fields,
            ["time_window", "time_window_buckets", "minimum_calls"]
        );
        let err = CircuitBreakerConfig::builder()
            .name("d")
            .open_wait(Duration::from_secs(10))
            .open_wait_growth(2.0, Duration::from_secs(5))
            .build()
            .unwrap_err();
        assert_eq!(err.problems()[0].path(), "max_open_wait");
    }

    #[test]
    fn open_wait_grows_and_caps() {
        let c = CircuitBreakerConfig::builder()
            .name("d")
            .open_wait(Duration::from_secs(10))
            .open_wait_growth(2.0, Duration::from_secs(60))
            .build()
            .unwrap();
        assert_eq!(c.open_wait_for(1), Duration::from_secs(10));
        assert_eq!(c.open_wait_for(2), Duration::from_secs(20));
        assert_eq!(c.open_wait_for(3), Duration::from_secs(40));
        assert_eq!(c.open_wait_for(4), Duration::from_secs(60));
        assert_eq!(c.open_wait_for(400), Duration::from_secs(60));
    }

    #[test]
    fn long_open_waits_build_without_growth() {
        for wait in [
            Duration::from_secs(600),
            Duration::from_secs(3 * 3600),
            Duration::from_secs(86_400),
        ] {
            let c = CircuitBreakerConfig::builder()
                .name("d")
                .open_wait(wait)
                .build()
                .unwrap_or_else(|e| panic!("open_wait {wait:?}: {e}"));
            assert_eq!(c.open_wait(), wait);
            assert_eq!(c.open_wait_for(1), wait);
            assert_eq!(
                c.open_wait_for(9),
                wait,
                "no growth: every trip waits the same"
            );
            // A multiplier of 1.0 is no growth either: its cap is not consulted.
            let c = CircuitBreakerConfig::builder()
                .name("d")
                .open_wait(wait)
                .open_wait_growth(1.0, Duration::from_secs(60))
                .build()
                .unwrap();
            assert_eq!(c.open_wait_for(3), wait);
        }
        // Without growth the cap is the open wait itself.
        let c = CircuitBreakerConfig::builder()
            .name("d")
            .open_wait(Duration::from_secs(600))
            .build()
            .unwrap();
        assert_eq!(c.max_open_wait, Duration::from_secs(600));
        // Growth with a cap below the open wait: refused, naming the cap the user gave.
        let err = CircuitBreakerConfig::builder()
            .name("d")
            .open_wait(Duration::from_secs(600))
            .open_wait_growth(2.0, Duration::from_secs(300))
            .build()
            .unwrap_err();
        assert_eq!(err.problems().len(), 1);
        assert_eq!(err.problems()[0].path(), "max_open_wait");
        assert!(
            err.problems()[0].rule().contains("open_wait_multiplier"),
            "{err}"
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserialized_growth_without_a_cap_builds_for_long_waits() {
        let c: CircuitBreakerConfig =
            serde_json::from_str(r#"{"name":"x","open_wait":"10m","open_wait_multiplier":2.0}"#)
                .unwrap();
        assert_eq!(c.open_wait_for(1), Duration::from_secs(600));
        assert_eq!(
            c.open_wait_for(2),
            Duration::from_secs(600),
            "capped at open_wait"
        );
        let c: CircuitBreakerConfig =
            serde_json::from_str(r#"{"name":"x","open_wait":"2h"}"#).unwrap();
        assert_eq!(c.open_wait_for(4), Duration::from_secs(7200));
        let c: CircuitBreakerConfig =
            serde_json::from_str(r#"{"name":"x","open_wait":"10s","open_wait_multiplier":2.0}"#)
                .unwrap();
        assert_eq!(
            c.open_wait_for(9),
            Duration::from_secs(300),
            "the default cap"
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserializes_with_human_durations_and_validates() {
        let c: CircuitBreakerConfig = serde_json::from_str(
            r#"{"name":"fraud","time_window":"20s","time_window_buckets":20,
                "minimum_calls":5,"failure_rate_threshold":40,"open_wait":"750ms",
                "open_wait_jitter":"0s","max_half_open_wait":"2s","on_close":"keep"}"#,
        )
        .unwrap();
        assert_eq!(
            c.window(),
            WindowConfig::Time {
                duration: Duration::from_secs(20),
                buckets: 20
            }
        );
        assert_eq!(c.open_wait(), Duration::from_millis(750));
        assert_eq!(c.on_close(), OnClose::Keep);
        let err = serde_json::from_str::<CircuitBreakerConfig>(
            r#"{"name":"x","failure_rate_threshold":150}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("failure_rate_threshold: must be within 1..=100, got 150"),
            "{err}"
        );
        let err = serde_json::from_str::<CircuitBreakerConfig>(r#"{"name":"x","falure_rate":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
