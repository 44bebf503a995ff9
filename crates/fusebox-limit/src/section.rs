//! [`LimitSection`]: the concurrency limit's part of a policy file, and its `serde` form.

use crate::config::{
    AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitConfigBuilder, Limit, Release, VegasConfig,
};
use fusebox_classify::section::{Section, count, count_of, duration};
use fusebox_classify::{ConfigError, Validator, take_unset};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The concurrency limit's settings as a file writes them (a policy's `limit` table):
/// every key optional — the builder's default where absent — and unknown keys refused.
///
/// ```toml
/// max_concurrency = 64                  # a fixed limit, or:
/// # adaptive = { algorithm = "vegas", min_limit = 4, max_limit = 200, initial_limit = 20 }
/// queue = { max_waiters = 32, max_wait = "50ms" }
/// release = "end_of_body"               # or "response"
/// retry_after = "1s"
/// ```
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LimitSection {
    /// The limit's name (default: the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A fixed limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// An adaptive limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveSection>,
    /// A bounded queue in front of a full limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueSection>,
    /// When a permit is given back: `"response"` or `"end_of_body"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Release>,
    /// The `Retry-After` of a shed call.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub retry_after: Option<Duration>,
    /// An adaptive limit logs its changes once they reach this many permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_step: Option<u32>,
}

/// Which adaptive algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Algorithm {
    /// Additive increase, multiplicative decrease.
    Aimd,
    /// Latency-gradient (Vegas-style).
    Vegas,
}

/// `limit.adaptive`: an adaptive limit's algorithm and settings.
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AdaptiveSection {
    /// `"aimd"` or `"vegas"` (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// The lowest the limit goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_limit: Option<u32>,
    /// The highest the limit goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_limit: Option<u32>,
    /// Where the limit starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_limit: Option<u32>,
    /// The limit is multiplied by this on a failure or a slow call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ratio: Option<f64>,
    /// AIMD: added per window of successes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additive_increase: Option<f64>,
    /// Vegas: how fast the limit follows (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoothing: Option<f64>,
    /// Vegas: queue size below which the limit grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Vegas: queue size above which the limit shrinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// Vegas: how often the no-load latency is measured again.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub probe_interval: Option<Duration>,
    /// Vegas: samples per measurement of the no-load latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_samples: Option<u32>,
}

/// `limit.queue`: the bounded queue in front of a full limit.
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueSection {
    /// At most this many calls wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_waiters: Option<u32>,
    /// A call waits at most this long.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub max_wait: Option<Duration>,
}

/// Keys of `adaptive` that only one algorithm reads.
const AIMD_ONLY: &[&str] = &["additive_increase"];
const VEGAS_ONLY: &[&str] = &[
    "smoothing",
    "alpha",
    "beta",
    "probe_interval",
    "probe_samples",
];

impl AdaptiveSection {
    fn set(&self, key: &str) -> bool {
        match key {
            "additive_increase" => self.additive_increase.is_some(),
            "smoothing" => self.smoothing.is_some(),
            "alpha" => self.alpha.is_some(),
            "beta" => self.beta.is_some(),
            "probe_interval" => self.probe_interval.is_some(),
            "probe_samples" => self.probe_samples.is_some(),
            _ => false,
        }
    }

    fn limit(&self, algorithm: Algorithm) -> Limit {
        // The keys both algorithms share, set on either's configuration.
        macro_rules! shared {
            ($c:ident) => {
                if let Some(x) = self.min_limit {
                    $c = $c.min_limit(count(x));
                }
                if let Some(x) = self.max_limit {
                    $c = $c.max_limit(count(x));
                }
                if let Some(x) = self.initial_limit {
                    $c = $c.initial_limit(count(x));
                }
                if let Some(x) = self.backoff_ratio {
                    $c = $c.backoff_ratio(x);
                }
            };
        }
        match algorithm {
            Algorithm::Aimd => {
                let mut c = AimdConfig::new();
                shared!(c);
                if let Some(x) = self.additive_increase {
                    c = c.additive_increase(x);
                }
                Limit::Aimd(c)
            }
            Algorithm::Vegas => {
                let mut c = VegasConfig::new();
                shared!(c);
                if let Some(x) = self.smoothing {
                    c = c.smoothing(x);
                }
                if let Some(x) = self.alpha {
                    c = c.alpha(x);
                }
                if let Some(x) = self.beta {
                    c = c.beta(x);
                }
                if let Some(x) = self.probe_interval {
                    c = c.probe_interval(x);
                }
                if let Some(x) = self.probe_samples {
                    c = c.probe_samples(count(x));
                }
                Limit::Vegas(c)
            }
        }
    }
}

impl LimitSection {
    /// The builder with this section's settings (unnamed if the section names no limit).
    pub fn builder(&self) -> ConcurrencyLimitConfigBuilder {
        let mut b = ConcurrencyLimitConfig::builder();
        if let Some(name) = &self.name {
            b = b.name(name.as_str());
        }
        if let Some(n) = self.max_concurrency {
            b = b.max_concurrency(count(n));
        }
        if let Some(adaptive) = &self.adaptive {
            match adaptive.algorithm {
                // Reported by `check_keys`; keep a limit, so that the builder reports no
                // second problem.
                None if self.max_concurrency.is_none() => b = b.max_concurrency(1),
                None => {}
                // Both: reported by `check_keys`; the builder checks the fixed limit.
                Some(_) if self.max_concurrency.is_some() => {}
                Some(algorithm) => b = b.limit(adaptive.limit(algorithm)),
            }
        }
        if let Some(q) = &self.queue {
            b = b.queue(
                count(q.max_waiters.unwrap_or(0)),
                q.max_wait.unwrap_or(Duration::ZERO),
            );
        }
        if let Some(r) = self.release {
            b = b.release(r);
        }
        if let Some(x) = self.retry_after {
            b = b.retry_after(x);
        }
        if let Some(x) = self.log_step {
            b = b.log_step(count(x));
        }
        b
    }
}

/// The file's name for what the builder calls `path`: an adaptive limit's settings are
/// `adaptive.*` in a file, whichever algorithm.
fn file_path(path: &str) -> String {
    match path
        .strip_prefix("aimd.")
        .or_else(|| path.strip_prefix("vegas."))
    {
        Some(rest) => format!("adaptive.{rest}"),
        None => path.to_owned(),
    }
}

impl Section for LimitSection {
    type Config = ConcurrencyLimitConfig;

    const REPLACE: &'static [&'static str] = &["adaptive", "queue"];
    const CHOICES: &'static [&'static [&'static str]] = &[&["max_concurrency", "adaptive"]];

    fn check_keys(&self, v: &mut Validator) {
        let Some(adaptive) = &self.adaptive else {
            return;
        };
        if self.max_concurrency.is_some() {
            v.fail(
                "adaptive",
                "set either max_concurrency or adaptive, not both",
            );
        }
        match adaptive.algorithm {
            None => v.fail("adaptive.algorithm", "required: \"aimd\" or \"vegas\""),
            Some(algorithm) => {
                let (others, other, name) = match algorithm {
                    Algorithm::Aimd => (VEGAS_ONLY, "vegas", "aimd"),
                    Algorithm::Vegas => (AIMD_ONLY, "aimd", "vegas"),
                };
                for key in others.iter().filter(|k| adaptive.set(k)) {
                    v.fail(
                        format!("adaptive.{key}"),
                        format!("only read by algorithm = \"{other}\", not \"{name}\""),
                    );
                }
            }
        }
    }

    fn build(&self) -> Result<ConcurrencyLimitConfig, ConfigError> {
        let mut v = Validator::new();
        self.check_keys(&mut v);
        let built = self.builder().build();
        match built {
            Ok(config) => v.finish(config),
            Err(e) => {
                for p in e.problems() {
                    v.fail(file_path(p.path()), p.rule());
                }
                // `v` holds at least `e`'s problems.
                Err(v.finish(()).err().unwrap_or(e))
            }
        }
    }

    fn of(c: &ConcurrencyLimitConfig) -> LimitSection {
        let (max_concurrency, adaptive) = match c.limit() {
            Limit::Fixed(n) => (Some(count_of(*n)), None),
            Limit::Aimd(a) => (
                None,
                Some(AdaptiveSection {
                    algorithm: Some(Algorithm::Aimd),
                    min_limit: Some(count_of(a.min_limit)),
                    max_limit: Some(count_of(a.max_limit)),
                    initial_limit: Some(count_of(a.initial_limit)),
                    backoff_ratio: Some(a.backoff_ratio),
                    additive_increase: Some(a.additive_increase),
                    ..AdaptiveSection::default()
                }),
            ),
            Limit::Vegas(a) => (
                None,
                Some(AdaptiveSection {
                    algorithm: Some(Algorithm::Vegas),
                    min_limit: Some(count_of(a.min_limit)),
                    max_limit: Some(count_of(a.max_limit)),
                    initial_limit: Some(count_of(a.initial_limit)),
                    backoff_ratio: Some(a.backoff_ratio),
                    smoothing: Some(a.smoothing),
                    alpha: Some(a.alpha),
                    beta: Some(a.beta),
                    probe_interval: Some(a.probe_interval),
                    probe_samples: Some(count_of(a.probe_samples)),
                    ..AdaptiveSection::default()
                }),
            ),
        };
        LimitSection {
            name: c.is_named().then(|| c.name().to_owned()),
            max_concurrency,
            adaptive,
            queue: c.queue().map(|q| QueueSection {
                max_waiters: Some(count_of(q.max_waiters())),
                max_wait: Some(q.max_wait()),
            }),
            release: Some(c.release()),
            retry_after: Some(c.retry_after()),
            log_step: Some(count_of(c.log_step())),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        if self.max_concurrency.is_none() && self.adaptive.is_none() {
            self.max_concurrency = base.max_concurrency;
            self.adaptive = base.adaptive.clone();
        }
        take_unset!(self, base; name, queue, release, retry_after, log_step);
        self
    }
}

impl<'de> Deserialize<'de> for ConcurrencyLimitConfig {
    /// Reads a [`LimitSection`] and builds it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LimitSection::deserialize(d)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for ConcurrencyLimitConfig {
    /// Writes the configuration as its [`LimitSection`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LimitSection::of(self).serialize(s)
    }
}
