//! [`RetrySection`]: the retry budget's part of a policy file, and its `serde` form.

use crate::config::{RetryConfig, RetryConfigBuilder};
use fusebox_classify::section::{
    Section, count, count_of, duration, duration_or_none, uint_or_none,
};
use fusebox_classify::{ConfigError, take_unset};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The retry budget's settings as a file writes them (a policy's `retry` table): every key
/// optional — the builder's default where absent — and unknown keys refused.
///
/// ```toml
/// retry_ratio = 0.1               # retries per request in the window
/// min_retries_per_second = 5
/// ttl = "10s"
/// failure_rate_threshold = 20     # percent, or "none"
/// max_attempts = 3
/// base_delay = "25ms"
/// max_delay = "1s"
/// hedge_delay = "none"
/// ```
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RetrySection {
    /// The budget's name (default: the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Retries allowed per request in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_ratio: Option<f64>,
    /// A floor of retries per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_retries_per_second: Option<u32>,
    /// The sliding window of the budget and the cut-off.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub ttl: Option<Duration>,
    /// Stop retrying at this failure rate (percent), or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uint_or_none"
    )]
    pub failure_rate_threshold: Option<Option<u32>>,
    /// Attempts the window must hold before the cut-off may act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutoff_minimum_calls: Option<u32>,
    /// Attempts per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The first retry's backoff ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub base_delay: Option<Duration>,
    /// The cap of the backoff ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub max_delay: Option<Duration>,
    /// The longest `Retry-After` or gRPC pushback honoured.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub max_retry_after: Option<Duration>,
    /// Request bodies up to this many bytes are buffered to be replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replay_body_bytes: Option<u32>,
    /// Send a hedge after this long without an answer, or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_or_none"
    )]
    pub hedge_delay: Option<Option<Duration>>,
    /// Seeds the jitter.
    /// (A TOML file holds whole numbers up to 2^63 - 1.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl RetrySection {
    /// The builder with this section's settings (unnamed if the section names no budget).
    pub fn builder(&self) -> RetryConfigBuilder {
        let mut b = RetryConfig::builder();
        if let Some(name) = &self.name {
            b = b.name(name.as_str());
        }
        if let Some(x) = self.retry_ratio {
            b = b.retry_ratio(x);
        }
        if let Some(x) = self.min_retries_per_second {
            b = b.min_retries_per_second(x);
        }
        if let Some(x) = self.ttl {
            b = b.ttl(x);
        }
        if let Some(x) = self.failure_rate_threshold {
            b = b.failure_rate_threshold(x);
        }
        if let Some(x) = self.cutoff_minimum_calls {
            b = b.cutoff_minimum_calls(x);
        }
        if let Some(x) = self.max_attempts {
            b = b.max_attempts(x);
        }
        if let Some(x) = self.base_delay {
            b = b.base_delay(x);
        }
        if let Some(x) = self.max_delay {
            b = b.max_delay(x);
        }
        if let Some(x) = self.max_retry_after {
            b = b.max_retry_after(x);
        }
        if let Some(x) = self.max_replay_body_bytes {
            b = b.max_replay_body_bytes(count(x));
        }
        if let Some(x) = self.hedge_delay {
            b = b.hedge_delay(x);
        }
        if let Some(x) = self.seed {
            b = b.seed(Some(x));
        }
        b
    }
}

impl Section for RetrySection {
    type Config = RetryConfig;

    fn build(&self) -> Result<RetryConfig, ConfigError> {
        self.builder().build()
    }

    fn of(c: &RetryConfig) -> RetrySection {
        RetrySection {
            name: c.is_named().then(|| c.name().to_owned()),
            retry_ratio: Some(c.retry_ratio()),
            min_retries_per_second: Some(c.min_retries_per_second()),
            ttl: Some(c.ttl()),
            failure_rate_threshold: Some(c.failure_rate_threshold()),
            cutoff_minimum_calls: Some(c.cutoff_minimum_calls()),
            max_attempts: Some(c.max_attempts()),
            base_delay: Some(c.base_delay()),
            max_delay: Some(c.max_delay()),
            max_retry_after: Some(c.max_retry_after()),
            max_replay_body_bytes: Some(count_of(c.max_replay_body_bytes())),
            hedge_delay: Some(c.hedge_delay()),
            seed: c.seed(),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        take_unset!(self, base; name, retry_ratio, min_retries_per_second, ttl,
            failure_rate_threshold, cutoff_minimum_calls, max_attempts, base_delay, max_delay,
            max_retry_after, max_replay_body_bytes, hedge_delay, seed);
        self
    }
}

impl<'de> Deserialize<'de> for RetryConfig {
    /// Reads a [`RetrySection`] and builds it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RetrySection::deserialize(d)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for RetryConfig {
    /// Writes the configuration as its [`RetrySection`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RetrySection::of(self).serialize(s)
    }
}
