//! [`CircuitBreakerSection`]: the breaker's part of a policy file, and its `serde` form.

use crate::config::{CircuitBreakerConfig, CircuitBreakerConfigBuilder, OnClose, WindowConfig};
use fusebox_classify::section::{Section, duration, duration_or_none, uint_or_none};
use fusebox_classify::{ConfigError, Validator, take_unset};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The breaker's settings as a file writes them (a policy's `breaker` table): every key
/// optional — the builder's default where absent — and unknown keys refused. Durations are
/// strings with a unit (`"30s"`, `"750ms"`); `max_half_open_wait` and
/// `consecutive_failures` also take `"none"`.
///
/// ```toml
/// name = "payments"            # default: the policy's name
/// count_window = 100           # or time_window = "60s" with time_window_buckets = 60
/// minimum_calls = 20
/// failure_rate_threshold = 50  # percent
/// slow_call_rate_threshold = 80
/// open_wait = "30s"
/// open_wait_jitter = "3s"
/// open_wait_multiplier = 2.0   # grow on each trip in a row ...
/// max_open_wait = "5m"         # ... up to this
/// permitted_probes = 3
/// max_half_open_wait = "none"
/// on_close = "clear"           # or "keep"
/// ```
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CircuitBreakerSection {
    /// The breaker's name (default: the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Judge the last this many calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_window: Option<u32>,
    /// Judge the calls of the last this long.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub time_window: Option<Duration>,
    /// The slices a time window moves by (default [`WindowConfig::DEFAULT_BUCKETS`], 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window_buckets: Option<u32>,
    /// Calls the window must hold before a rate can trip the breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_calls: Option<u32>,
    /// Trip at this failure rate (percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_rate_threshold: Option<u32>,
    /// Trip at this slow-call rate (percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_call_rate_threshold: Option<u32>,
    /// Also trip after this many failures in a row, or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uint_or_none"
    )]
    pub consecutive_failures: Option<Option<u32>>,
    /// How long the breaker stays open before probing.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub open_wait: Option<Duration>,
    /// The most random jitter added to each open wait.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub open_wait_jitter: Option<Duration>,
    /// Growth of the open wait on each trip in a row (1.0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_wait_multiplier: Option<f64>,
    /// The cap of a growing open wait.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub max_open_wait: Option<Duration>,
    /// Probes admitted while half-open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permitted_probes: Option<u32>,
    /// Successful probes needed to close.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_successes: Option<u32>,
    /// The longest the breaker stays half-open, or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_or_none"
    )]
    pub max_half_open_wait: Option<Option<Duration>>,
    /// What closing does to the window: `"clear"` or `"keep"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_close: Option<OnClose>,
    /// Count fusebox's own `Overloaded` rejections as failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_overloaded: Option<bool>,
    /// Seed of the jitter's random numbers.
    /// (A TOML file holds whole numbers up to 2^63 - 1.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl CircuitBreakerSection {
    /// The builder with this section's settings (unnamed if the section names no breaker).
    pub fn builder(&self) -> CircuitBreakerConfigBuilder {
        let mut b = CircuitBreakerConfig::builder();
        if let Some(name) = &self.name {
            b = b.name(name.as_str());
        }
        if let Some(size) = self.count_window {
            b = b.count_window(size);
        } else if let Some(duration) = self.time_window {
            b = b.time_window(
                duration,
                self.time_window_buckets
                    .unwrap_or(WindowConfig::DEFAULT_BUCKETS),
            );
        }
        if let Some(x) = self.minimum_calls {
            b = b.minimum_calls(x);
        }
        if let Some(x) = self.failure_rate_threshold {
            b = b.failure_rate_threshold(x);
        }
        if let Some(x) = self.slow_call_rate_threshold {
            b = b.slow_call_rate_threshold(x);
        }
        if let Some(x) = self.consecutive_failures {
            b.config.consecutive_failures = x;
        }
        if let Some(x) = self.open_wait {
            b = b.open_wait(x);
        }
        if let Some(x) = self.open_wait_jitter {
            b = b.open_wait_jitter(x);
        }
        if let Some(m) = self.open_wait_multiplier {
            b.config.open_wait_multiplier = m;
        }
        if self.max_open_wait.is_some() {
            b.max_open_wait = self.max_open_wait;
        }
        if let Some(x) = self.permitted_probes {
            b = b.permitted_probes(x);
        }
        if let Some(x) = self.probe_successes {
            b = b.probe_successes(x);
        }
        if let Some(x) = self.max_half_open_wait {
            b = b.max_half_open_wait(x);
        }
        if let Some(x) = self.on_close {
            b = b.on_close(x);
        }
        if let Some(x) = self.count_overloaded {
            b = b.count_overloaded(x);
        }
        if let Some(x) = self.seed {
            b = b.seed(x);
        }
        b
    }
}

impl Section for CircuitBreakerSection {
    type Config = CircuitBreakerConfig;

    const CHOICES: &'static [&'static [&'static str]] =
        &[&["count_window", "time_window", "time_window_buckets"]];

    fn check_keys(&self, v: &mut Validator) {
        if self.count_window.is_some() && self.time_window.is_some() {
            v.fail(
                "time_window",
                "set either count_window or time_window, not both",
            );
        }
    }

    fn build(&self) -> Result<CircuitBreakerConfig, ConfigError> {
        let mut v = Validator::new();
        self.check_keys(&mut v);
        match self.builder().build() {
            Ok(config) => v.finish(config),
            Err(e) => {
                for p in e.problems() {
                    v.fail(p.path(), p.rule());
                }
                // `v` holds at least `e`'s problems.
                Err(v.finish(()).err().unwrap_or(e))
            }
        }
    }

    fn of(c: &CircuitBreakerConfig) -> CircuitBreakerSection {
        let (count_window, time_window, time_window_buckets) = match c.window() {
            WindowConfig::Count { size } => (Some(size), None, None),
            WindowConfig::Time { duration, buckets } => (None, Some(duration), Some(buckets)),
        };
        let grows = c.open_wait_multiplier() > 1.0;
        CircuitBreakerSection {
            name: c.is_named().then(|| c.name().to_owned()),
            count_window,
            time_window,
            time_window_buckets,
            minimum_calls: Some(c.minimum_calls()),
            failure_rate_threshold: Some(u32::from(c.failure_rate_threshold())),
            slow_call_rate_threshold: Some(u32::from(c.slow_call_rate_threshold())),
            consecutive_failures: Some(c.consecutive_failures()),
            open_wait: Some(c.open_wait()),
            open_wait_jitter: Some(c.open_wait_jitter()),
            open_wait_multiplier: Some(c.open_wait_multiplier()),
            max_open_wait: grows.then(|| c.max_open_wait()),
            permitted_probes: Some(c.permitted_probes()),
            probe_successes: Some(c.probe_successes()),
            max_half_open_wait: Some(c.max_half_open_wait()),
            on_close: Some(c.on_close()),
            count_overloaded: Some(c.count_overloaded()),
            seed: c.seed(),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        if self.count_window.is_none()
            && self.time_window.is_none()
            && self.time_window_buckets.is_none()
        {
            self.count_window = base.count_window;
            self.time_window = base.time_window;
            self.time_window_buckets = base.time_window_buckets;
        }
        take_unset!(self, base; name, minimum_calls, failure_rate_threshold,
            slow_call_rate_threshold, consecutive_failures, open_wait, open_wait_jitter,
            open_wait_multiplier, max_open_wait, permitted_probes, probe_successes,
            max_half_open_wait, on_close, count_overloaded, seed);
        self
    }
}

impl<'de> Deserialize<'de> for CircuitBreakerConfig {
    /// Reads a [`CircuitBreakerSection`] and builds it (every problem of its values is an
    /// error).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CircuitBreakerSection::deserialize(d)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for CircuitBreakerConfig {
    /// Writes the configuration as its [`CircuitBreakerSection`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CircuitBreakerSection::of(self).serialize(s)
    }
}
