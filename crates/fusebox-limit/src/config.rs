//! Configuration: what the limit is (fixed or adaptive), what happens when it is full, and
//! when a permit is given back.
//!
//! Everything is checked once, in [`ConcurrencyLimitConfigBuilder::build`], and every
//! problem is reported together with the field's path and the rule it breaks
//! (`aimd.initial_limit: must be within min_limit..=max_limit (1..=100), got 200`). With the
//! `serde` feature the same configuration deserializes (durations written the human way,
//! `"250ms"`), and deserializing runs the same checks.

use fusebox_classify::{ConfigError, Validator};
use std::sync::Arc;
use std::time::Duration;

/// The name a limit reports in metrics and events unless it is given one.
pub const DEFAULT_NAME: &str = "concurrency-limit";

/// A validated concurrency-limit configuration. Build one with
/// [`ConcurrencyLimitConfig::builder`].
///
/// ```
/// use fusebox_limit::{ConcurrencyLimitConfig, Release};
/// use std::time::Duration;
///
/// let config = ConcurrencyLimitConfig::builder()
///     .name("fraud-eu")
///     .max_concurrency(64)
///     .queue(32, Duration::from_millis(50))
///     .release(Release::AtEndOfBody)
///     .build()?;
/// assert_eq!(config.name(), "fraud-eu");
///
/// let err = ConcurrencyLimitConfig::builder().max_concurrency(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "invalid configuration: max_concurrency: must be at least 1, got 0");
/// # Ok::<(), fusebox_classify::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimitConfig {
    pub(crate) name: Arc<str>,
    pub(crate) named: bool,
    pub(crate) limit: Limit,
    pub(crate) queue: Option<QueueConfig>,
    pub(crate) release: Release,
    pub(crate) retry_after: Duration,
    pub(crate) log_step: usize,
}

/// How the limit is set.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Limit {
    /// A fixed number of calls in flight.
    Fixed(usize),
    /// An adaptive limit, additive increase / multiplicative decrease.
    Aimd(AimdConfig),
    /// An adaptive limit, delay-based (TCP Vegas style).
    Vegas(VegasConfig),
}

/// When a call's permit is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Release {
    /// When the response head arrives (or the call fails, or its future is dropped). Right
    /// for calls whose body is small or buffered.
    #[default]
    #[cfg_attr(feature = "serde", serde(rename = "response"))]
    OnResponse,
    /// When the response body ends (or fails, or is dropped): for streams, whose bodies hold
    /// the dependency's resources as long as they flow.
    #[cfg_attr(feature = "serde", serde(rename = "end_of_body"))]
    AtEndOfBody,
}

/// The bounded queue in front of a full limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// At most this many calls wait; more are shed at once.
    pub(crate) max_waiters: usize,
    /// A call waits at most this long for a permit, then is shed.
    pub(crate) max_wait: Duration,
}

impl QueueConfig {
    /// At most `max_waiters` calls wait, each for at most `max_wait`.
    pub fn new(max_waiters: usize, max_wait: Duration) -> Self {
        QueueConfig {
            max_waiters,
            max_wait,
        }
    }

    /// The most calls that may wait.
    pub fn max_waiters(&self) -> usize {
        self.max_waiters
    }

    /// The longest a call waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

/// Settings of the [AIMD](crate::algorithm::Aimd) adaptive limit.
///
/// Defaults: `min_limit` 1, `initial_limit` 20, `max_limit` 1000, `backoff_ratio` 0.9,
/// `additive_increase` 1 (per round of `limit` healthy calls).
#[derive(Debug, Clone, PartialEq)]
pub struct AimdConfig {
    pub(crate) min_limit: usize,
    pub(crate) max_limit: usize,
    pub(crate) initial_limit: usize,
    pub(crate) backoff_ratio: f64,
    pub(crate) additive_increase: f64,
}

impl Default for AimdConfig {
    fn default() -> Self {
        AimdConfig {
            min_limit: 1,
            max_limit: 1000,
            initial_limit: 20,
            backoff_ratio: 0.9,
            additive_increase: 1.0,
        }
    }
}

impl AimdConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The limit never goes below this (at least 1).
    pub fn min_limit(mut self, min: usize) -> Self {
        self.min_limit = min;
        self
    }

    /// The limit never goes above this.
    pub fn max_limit(mut self, max: usize) -> Self {
        self.max_limit = max;
        self
    }

    /// The limit before any call has finished.
    pub fn initial_limit(mut self, initial: usize) -> Self {
        self.initial_limit = initial;
        self
    }

    /// On a drop the limit is multiplied by this, within `(0, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff_ratio = ratio;
        self
    }

    /// The limit grows by this much per round of `limit` healthy calls (greater than 0).
    pub fn additive_increase(mut self, increase: f64) -> Self {
        self.additive_increase = increase;
        self
    }

    fn validate(&self, v: &mut Validator) {
        validate_bounds(
            v,
            "aimd",
            self.min_limit,
            self.initial_limit,
            self.max_limit,
        );
        validate_ratio(v, "aimd.backoff_ratio", self.backoff_ratio);
        let inc = self.additive_increase;
        v.check(
            inc > 0.0 && inc.is_finite(),
            "aimd.additive_increase",
            || format!("must be a finite number greater than 0, got {inc}"),
        );
    }
}

/// Settings of the [Vegas](crate::algorithm::Vegas) adaptive limit.
///
/// Defaults: `min_limit` 1, `initial_limit` 20, `max_limit` 1000, `smoothing` 1.0,
/// `alpha` 3, `beta` 6, `backoff_ratio` 0.9, `probe_interval` 60 s, `probe_samples` 10.
#[derive(Debug, Clone, PartialEq)]
pub struct VegasConfig {
    pub(crate) min_limit: usize,
    pub(crate) max_limit: usize,
    pub(crate) initial_limit: usize,
    pub(crate) smoothing: f64,
    pub(crate) alpha: f64,
    pub(crate) beta: f64,
    pub(crate) backoff_ratio: f64,
    pub(crate) probe_interval: Duration,
    pub(crate) probe_samples: usize,
}

impl Default for VegasConfig {
    fn default() -> Self {
        VegasConfig {
            min_limit: 1,
            max_limit: 1000,
            initial_limit: 20,
            smoothing: 1.0,
            alpha: 3.0,
            beta: 6.0,
            backoff_ratio: 0.9,
            probe_interval: Duration::from_secs(60),
            probe_samples: 10,
        }
    }
}

impl VegasConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The limit never goes below this (at least 1).
    pub fn min_limit(mut self, min: usize) -> Self {
        self.min_limit = min;
        self
    }

    /// The limit never goes above this.
    pub fn max_limit(mut self, max: usize) -> Self {
        self.max_limit = max;
        self
    }

    /// The limit before any call has finished.
    pub fn initial_limit(mut self, initial: usize) -> Self {
        self.initial_limit = initial;
        self
    }

    /// How much of each computed change is applied, within `(0, 1]` (1: all of it).
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// Below this many queued calls (times `log10(limit)`) the limit grows (greater than 0).
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }

    /// Above this many queued calls (times `log10(limit)`) the limit shrinks (at least
    /// `alpha`).
    pub fn beta(mut self, beta: f64) -> Self {
        self.beta = beta;
        self
    }

    /// On a drop the limit is multiplied by this, within `(0, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff_ratio = ratio;
        self
    }

    /// How often the no-load latency is measured again (greater than 0): the limit is held
    /// at `min_limit` until `probe_samples` calls have finished at that concurrency.
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// How many calls at `min_limit` concurrency a measurement of the no-load latency takes
    /// (at least 1).
    pub fn probe_samples(mut self, samples: usize) -> Self {
        self.probe_samples = samples;
        self
    }

    fn validate(&self, v: &mut Validator) {
        validate_bounds(
            v,
            "vegas",
            self.min_limit,
            self.initial_limit,
            self.max_limit,
        );
        let s = self.smoothing;
        v.check(s > 0.0 && s <= 1.0, "vegas.smoothing", || {
            format!("must be within (0, 1], got {s}")
        });
        let (a, b) = (self.alpha, self.beta);
        v.check(a > 0.0 && a.is_finite(), "vegas.alpha", || {
            format!("must be a finite number greater than 0, got {a}")
        });
        v.check(b.is_finite() && b >= a, "vegas.beta", || {
            format!("must be a finite number at least alpha ({a}), got {b}")
        });
        validate_ratio(v, "vegas.backoff_ratio", self.backoff_ratio);
        v.check(
            !self.probe_interval.is_zero(),
            "vegas.probe_interval",
            || "must be greater than zero".into(),
        );
        let n = self.probe_samples;
        v.check(n >= 1, "vegas.probe_samples", || {
            format!("must be at least 1, got {n}")
        });
    }
}

fn validate_bounds(v: &mut Validator, prefix: &str, min: usize, initial: usize, max: usize) {
    v.check(min >= 1, &format!("{prefix}.min_limit"), || {
        format!("must be at least 1, got {min}")
    });
    v.check(min <= max, &format!("{prefix}.max_limit"), || {
        format!("must be at least min_limit ({min}), got {max}")
    });
    v.check(
        (min..=max).contains(&initial),
        &format!("{prefix}.initial_limit"),
        || format!("must be within min_limit..=max_limit ({min}..={max}), got {initial}"),
    );
}

fn validate_ratio(v: &mut Validator, path: &str, ratio: f64) {
    v.check(ratio > 0.0 && ratio < 1.0, path, || {
        format!("must be within (0, 1), got {ratio}")
    });
}

impl ConcurrencyLimitConfig {
    /// A builder with no limit set yet.
    pub fn builder() -> ConcurrencyLimitConfigBuilder {
        ConcurrencyLimitConfigBuilder::default()
    }

    /// The name reported in metrics, events and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the name was given (a policy names an unnamed limit after itself).
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// This configuration, named `name` (what a policy does to a limit nobody named).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.named = true;
        self
    }

    /// A builder holding this configuration, to change some settings and build again.
    pub fn to_builder(&self) -> ConcurrencyLimitConfigBuilder {
        ConcurrencyLimitConfigBuilder {
            name: self.named.then(|| self.name.to_string()),
            limit: Some(self.limit.clone()),
            queue: self.queue,
            release: self.release,
            retry_after: Some(self.retry_after),
            log_step: Some(self.log_step),
        }
    }

    /// How the limit is set.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// The queue in front of a full limit, if any (else calls are shed at once).
    pub fn queue(&self) -> Option<&QueueConfig> {
        self.queue.as_ref()
    }

    /// When permits are given back.
    pub fn release(&self) -> Release {
        self.release
    }

    /// The retry hint carried by rejections.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// An adaptive limit moving this far from the last reported value emits an event.
    pub fn log_step(&self) -> usize {
        self.log_step
    }

    /// The limit enforced before any call has finished.
    pub(crate) fn initial_limit(&self) -> usize {
        match &self.limit {
            Limit::Fixed(n) => *n,
            Limit::Aimd(c) => c.initial_limit,
            Limit::Vegas(c) => c.initial_limit,
        }
    }
}

/// Builds a [`ConcurrencyLimitConfig`]; [`build`](Self::build) checks it.
#[derive(Debug, Clone, Default)]
pub struct ConcurrencyLimitConfigBuilder {
    name: Option<String>,
    limit: Option<Limit>,
    queue: Option<QueueConfig>,
    release: Release,
    retry_after: Option<Duration>,
    log_step: Option<usize>,
}

impl ConcurrencyLimitConfigBuilder {
    /// Names the limit in metrics (the `dependency` label), events and errors. Default
    /// [`DEFAULT_NAME`].
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Names the limit `name` unless it was named already (what a policy does).
    pub fn name_if_unnamed(self, name: impl Into<String>) -> Self {
        if self.name.is_some() {
            self
        } else {
            self.name(name)
        }
    }

    /// A fixed limit: at most `max` calls in flight (at least 1).
    pub fn max_concurrency(self, max: usize) -> Self {
        self.limit(Limit::Fixed(max))
    }

    /// An adaptive AIMD limit.
    pub fn aimd(self, config: AimdConfig) -> Self {
        self.limit(Limit::Aimd(config))
    }

    /// An adaptive Vegas limit.
    pub fn vegas(self, config: VegasConfig) -> Self {
        self.limit(Limit::Vegas(config))
    }

    /// Sets the limit (the last call wins).
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// When the limit is full, let up to `max_waiters` calls wait, each for at most
    /// `max_wait`, instead of shedding them at once.
    pub fn queue(mut self, max_waiters: usize, max_wait: Duration) -> Self {
        self.queue = Some(QueueConfig::new(max_waiters, max_wait));
        self
    }

    /// When permits are given back. Default [`Release::OnResponse`].
    pub fn release(mut self, release: Release) -> Self {
        self.release = release;
        self
    }

    /// The retry hint a rejection carries (`Retry-After` on the server side). Default 1 s.
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// An adaptive limit emits a `tracing` event when it has moved at least this far from
    /// the last value it reported (at least 1). Default 1: every change.
    pub fn log_step(mut self, step: usize) -> Self {
        self.log_step = Some(step);
        self
    }

    /// Checks every field and builds the configuration, or reports every problem.
    pub fn build(self) -> Result<ConcurrencyLimitConfig, ConfigError> {
        let mut v = Validator::new();
        let named = self.name.is_some();
        let name = self.name.unwrap_or_else(|| DEFAULT_NAME.to_owned());
        v.check(!name.trim().is_empty(), "name", || {
            "must not be empty".into()
        });
        let limit = match self.limit {
            Some(limit) => limit,
            None => {
                v.fail(
                    "max_concurrency",
                    "required: set a fixed max_concurrency or an adaptive limit",
                );
                Limit::Fixed(1)
            }
        };
        match &limit {
            Limit::Fixed(n) => v.check(*n >= 1, "max_concurrency", || {
                format!("must be at least 1, got {n}")
            }),
            Limit::Aimd(c) => c.validate(&mut v),
            Limit::Vegas(c) => c.validate(&mut v),
        }
        if let Some(q) = &self.queue {
            v.check(q.max_waiters >= 1, "queue.max_waiters", || {
                format!("must be at least 1, got {}", q.max_waiters)
            });
            v.check(!q.max_wait.is_zero(), "queue.max_wait", || {
                "must be greater than zero".into()
            });
        }
        let log_step = self.log_step.unwrap_or(1);
        v.check(log_step >= 1, "log_step", || {
            format!("must be at least 1, got {log_step}")
        });
        v.finish(ConcurrencyLimitConfig {
            name: Arc::from(name),
            named,
            limit,
            queue: self.queue,
            release: self.release,
            retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)),
            log_step,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(err: &ConfigError) -> Vec<&str> {
        err.problems().iter().map(|p| p.path()).collect()
    }

    #[test]
    fn a_limit_is_required() {
        let err = ConcurrencyLimitConfig::builder().build().unwrap_err();
        assert_eq!(paths(&err), ["max_concurrency"]);
        assert!(err.problems()[0].rule().starts_with("required"));
    }

    #[test]
    fn every_problem_names_its_field_and_rule() {
        let err = ConcurrencyLimitConfig::builder()
            .name(" ")
            .aimd(
                AimdConfig::new()
                    .min_limit(0)
                    .initial_limit(200)
                    .max_limit(100)
                    .backoff_ratio(1.0)
                    .additive_increase(0.0),
            )
            .queue(0, Duration::ZERO)
            .log_step(0)
            .build()
            .unwrap_err();
        assert_eq!(
            paths(&err),
            [
                "name",
                "aimd.min_limit",
                "aimd.initial_limit",
                "aimd.backoff_ratio",
                "aimd.additive_increase",
                "queue.max_waiters",
                "queue.max_wait",
                "log_step",
            ]
        );
        assert_eq!(
            err.problems()[2].to_string(),
            "aimd.initial_limit: must be within min_limit..=max_limit (0..=100), got 200"
        );
        assert_eq!(err.problems()[3].rule(), "must be within (0, 1), got 1");
    }

    #[test]
    fn vegas_rules() {
        let err = ConcurrencyLimitConfig::builder()
            .vegas(
                VegasConfig::new()
                    .min_limit(10)
                    .max_limit(5)
                    .smoothing(1.5)
                    .alpha(4.0)
                    .beta(2.0)
                    .probe_interval(Duration::ZERO)
                    .probe_samples(0),
            )
            .build()
            .unwrap_err();
        assert_eq!(
            paths(&err),
            [
                "vegas.max_limit",
                "vegas.initial_limit",
                "vegas.smoothing",
                "vegas.beta",
                "vegas.probe_interval",
                "vegas.probe_samples",
            ]
        );
        assert_eq!(
            err.problems()[0].rule(),
            "must be at least min_limit (10), got 5"
        );
    }

    #[test]
    fn defaults() {
        let c = ConcurrencyLimitConfig::builder()
            .max_concurrency(8)
            .build()
            .unwrap();
        assert_eq!(c.name(), DEFAULT_NAME);
        assert_eq!(c.limit(), &Limit::Fixed(8));
        assert_eq!(c.release(), Release::OnResponse);
        assert_eq!(c.retry_after(), Duration::from_secs(1));
        assert_eq!(c.log_step(), 1);
        assert!(c.queue().is_none());
        assert_eq!(c.initial_limit(), 8);
        let a = ConcurrencyLimitConfig::builder()
            .max_concurrency(8)
            .vegas(VegasConfig::new().initial_limit(7))
            .build()
            .unwrap();
        assert_eq!(a.initial_limit(), 7, "the last limit set wins");
    }

    #[cfg(feature = "serde")]
    mod serde {
        use super::*;

        fn parse(json: &str) -> Result<ConcurrencyLimitConfig, serde_json::Error> {
            serde_json::from_str(json)
        }

        #[test]
        fn human_readable_durations() {
            let c = parse(
                r#"{
                    "name": "fraud-eu",
                    "adaptive": { "algorithm": "vegas", "initial_limit": 10, "probe_interval": "30s" },
                    "queue": { "max_waiters": 16, "max_wait": "250ms" },
                    "release": "end_of_body",
                    "retry_after": "2s",
                    "log_step": 5
                }"#,
            )
            .unwrap();
            assert_eq!(c.name(), "fraud-eu");
            assert_eq!(
                c.limit(),
                &Limit::Vegas(
                    VegasConfig::new()
                        .initial_limit(10)
                        .probe_interval(Duration::from_secs(30))
                )
            );
            assert_eq!(
                c.queue(),
                Some(&QueueConfig::new(16, Duration::from_millis(250)))
            );
            assert_eq!(c.release(), Release::AtEndOfBody);
            assert_eq!(c.retry_after(), Duration::from_secs(2));
            assert_eq!(c.log_step(), 5);
            let fixed = parse(r#"{ "max_concurrency": 64 }"#).unwrap();
            assert_eq!(fixed.limit(), &Limit::Fixed(64));
        }

        #[test]
        fn deserializing_validates() {
            let err = parse(
                r#"{ "adaptive": { "algorithm": "aimd", "min_limit": 5, "initial_limit": 2 } }"#,
            )
            .unwrap_err()
            .to_string();
            // A file writes an adaptive limit's settings under `adaptive`, whichever algorithm.
            assert!(
                err.contains("adaptive.initial_limit: must be within"),
                "{err}"
            );
            let both = parse(r#"{ "max_concurrency": 4, "adaptive": { "algorithm": "aimd" } }"#)
                .unwrap_err()
                .to_string();
            assert!(both.contains("adaptive: set either"), "{both}");
            let unknown = parse(r#"{ "max_concurrency": 4, "max_waiters": 3 }"#)
                .unwrap_err()
                .to_string();
            assert!(unknown.contains("unknown field `max_waiters`"), "{unknown}");
            let typo = parse(r#"{ "adaptive": { "algorithm": "aimd", "backof_ratio": 0.5 } }"#)
                .unwrap_err()
                .to_string();
            assert!(typo.contains("unknown field `backof_ratio`"), "{typo}");
        }
    }
}
