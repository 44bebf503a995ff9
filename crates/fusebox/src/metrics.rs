//! Every metric fusebox records, by layer: one table to build dashboards and alerts from.
//!
//! fusebox records through the [`metrics`](https://docs.rs/metrics) facade: install a
//! recorder (for Prometheus, `metrics-exporter-prometheus`; see the `prometheus` example)
//! **before** building policies — each layer registers its metric handles when it is built
//! (a keyed breaker: when it makes a key's breaker), so that the call path never looks a
//! metric up or formats a name. Each layer also describes its families (the HELP lines)
//! once, when the first of its kind is built; [`describe`] does it for all of them.
//!
//! # Labels
//!
//! Every family carries **`dependency`**: the name of the policy, or of the layer used on
//! its own. A policy's layers that were not named take the policy's name, so one policy is
//! one `dependency` across all its families; a layer named on its own keeps its name. Give
//! each dependency its own name: two layers of one name share their series. Besides it:
//!
//! - `route`: the route table's name of the route (`"GET /price/{sku}"`, `"default"`), on
//!   the timeout's families and the call-duration histogram;
//! - `key`: on every breaker family (but the histogram) of a **keyed** breaker, the key's
//!   name (the host, the route, ...), and `key="(overflow)"` for the breaker that serves
//!   new keys while a shard is full;
//! - a small fixed set of values naming the outcome or state (`kind`, `state`, `from`/`to`,
//!   `result`, `reason`, `phase`, `header`).
//!
//! # The families
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `fusebox_breaker_calls_total` | counter | `dependency`, `key`¹, `kind` | breaker: calls by outcome, `successful`, `failed`, `slow` (slow successes), `ignored` (or cancelled), `not_permitted` |
//! | `fusebox_breaker_state` | gauge | `dependency`, `key`¹, `state` | breaker: 1 for the current state, 0 for the others (`closed`, `open`, `half_open`, `forced_open`, `disabled`, `metrics_only`) |
//! | `fusebox_breaker_transitions_total` | counter | `dependency`, `key`¹, `from`, `to` | breaker: transitions |
//! | `fusebox_breaker_probes_total` | counter | `dependency`, `key`¹, `result` | breaker: half-open probes, `success`, `failure`, `released` |
//! | `fusebox_breaker_failure_ratio` | gauge | `dependency`, `key`¹ | breaker: the window's failure rate, 0–1 |
//! | `fusebox_breaker_slow_call_ratio` | gauge | `dependency`, `key`¹ | breaker: the window's slow-call rate, 0–1 |
//! | `fusebox_breaker_failure_ratio_threshold` | gauge | `dependency`, `key`¹ | breaker: the failure-rate threshold, 0–1 |
//! | `fusebox_breaker_slow_call_ratio_threshold` | gauge | `dependency`, `key`¹ | breaker: the slow-call-rate threshold, 0–1 |
//! | `fusebox_breaker_state_seconds` | gauge | `dependency`, `key`¹, `state` | breaker: seconds spent in each state, added when it leaves it |
//! | `fusebox_breaker_call_duration_seconds` | histogram | `dependency`, `route` | breaker: call duration, on every route (see below) |
//! | `fusebox_limit_limit` | gauge | `dependency` | limit: the limit enforced now |
//! | `fusebox_limit_in_flight` | gauge | `dependency` | limit: calls holding a permit |
//! | `fusebox_limit_queued` | gauge | `dependency` | limit: calls waiting in the queue |
//! | `fusebox_limit_calls_total` | counter | `dependency`, `kind` | limit: calls by outcome, `admitted`, `full`, `queue_full`, `queue_timeout` |
//! | `fusebox_timeout_calls_total` | counter | `dependency`, `route`, `kind` | timeout: calls bounded, by how they ended, `completed` or `elapsed` |
//! | `fusebox_timeout_elapsed_total` | counter | `dependency`, `route`, `phase` | timeout: calls that timed out, `headers` or `body` |
//! | `fusebox_timeout_deadline_exceeded_total` | counter | `dependency`, `route` | timeout: calls refused unsent, the caller's deadline passed |
//! | `fusebox_deadline_malformed_total` | counter | `header` | incoming deadlines ignored as malformed (server side: no dependency) |
//! | `fusebox_retry_attempts_total` | counter | `dependency` | retry: every attempt sent |
//! | `fusebox_retry_retries_total` | counter | `dependency` | retry: retries granted |
//! | `fusebox_retry_hedges_total` | counter | `dependency` | retry: hedges granted |
//! | `fusebox_retry_budget_exhausted_total` | counter | `dependency` | retry: refused, budget spent |
//! | `fusebox_retry_cutoff_refusals_total` | counter | `dependency` | retry: refused, failure rate past the cut-off |
//! | `fusebox_policy_fallbacks_total` | counter | `dependency`, `reason` | policy: fallbacks served, `circuit_open`, `overloaded`, `elapsed`, `other` |
//! | `fusebox_redis_fallbacks_total` | counter | `dependency`, `key`² | Redis store: switches to the local fallback |
//! | `fusebox_redis_resyncs_total` | counter | `dependency`, `key`² | Redis store: returns to the fleet's state |
//! | `fusebox_redis_dropped_outcomes_total` | counter | `dependency`, `key`² | Redis store: outcomes it could not send |
//! | `fusebox_redis_connected` | gauge | `dependency`, `key`² | Redis store: 1 while Redis answers, 0 while falling back |
//! | `fusebox_pool_endpoints` | gauge | `dependency` | pool: endpoints in the balanced pool |
//! | `fusebox_pool_ejected` | gauge | `dependency` | pool: endpoints ejected now |
//! | `fusebox_pool_max_ejected` | gauge | `dependency` | pool: the most that may be ejected at once |
//! | `fusebox_pool_would_eject` | gauge | `dependency` | pool: tripped endpoints kept in (cap, panic, headroom) |
//! | `fusebox_pool_panic` | gauge | `dependency` | pool: 1 while too few endpoints are healthy and every one is used |
//!
//! ¹ keyed breakers, and each endpoint's breaker of a pool (`fusebox::pool`, feature
//! `balance`): the endpoint's key. ² a keyed breaker's key shared on Redis.
//!
//! The same table as code is [`families`]: name, kind, labels and HELP text of each.
//!
//! # Cardinality
//!
//! How many series each dependency can make, at most:
//!
//! | families | series per dependency |
//! |---|---|
//! | breaker, unkeyed | 5 calls + 6 state + 6 state seconds + 3 probes + 4 ratios + the transitions that happened (at most 30 `from`/`to` pairs, 4–8 in practice) |
//! | breaker, keyed | the same per key, so times `max_keys` (default 10,000) plus one overflow breaker per shard: keep `max_keys` to the keys you mean to watch |
//! | call duration | one histogram (its buckets, plus `_sum` and `_count`) per route of the table |
//! | limit | 3 gauges + 4 calls |
//! | timeout | 5 per route of the table (2 calls kinds + 2 phases + deadline exceeded) |
//! | retry | 5 |
//! | fallbacks | 4 |
//! | Redis store | 4 (per key for a keyed breaker shared on Redis) |
//!
//! `route` is bounded by the route table (calls that match no route are the `default`
//! route): the routes it was built with and those a reload added, whose series a layer
//! registers when a call first comes on one of them (a removed route keeps its id, and
//! its series stay); `key` by
//! `max_keys`, and every other label by the fixed values listed above.
//!
//! # Buckets
//!
//! The call-duration histogram records every call of every route, in seconds, when a
//! recorder is installed before the breaker is built: a route with a slow-call threshold
//! reads the clock for it anyway; a route without one reads it for the histogram (at
//! admission and at the answer: two `Instant::now()`; `docs/metrics.md` has the
//! measurement) only while a recorder is installed, and never counts a call slow. Without
//! a recorder, no route reads a clock for it.
//!
//! The exporter decides its buckets. With
//! `metrics-exporter-prometheus`, either for every histogram (`set_buckets`) or for this
//! one (`set_buckets_for_metric(Matcher::Full("fusebox_breaker_call_duration_seconds".into()),
//! &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])`); without buckets
//! that exporter renders a summary instead.
//!
//! # Evicted keys
//!
//! When a keyed breaker forgets a key (idle, or to make room), the key's `state` series are
//! set to 0 and its handles are dropped. The `metrics` facade cannot delete a series: to
//! have the key's series leave the scrape, give the exporter an idle timeout for counters
//! and gauges and call [`keep_alive`] at least once per timeout (before each scrape is
//! simplest). [`keep_alive`] touches every series whose owner — a layer, a key — is alive,
//! so only the forgotten ones age out:
//!
//! ```no_run
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use metrics_util::MetricKindMask;
//! use std::time::Duration;
//!
//! let handle = PrometheusBuilder::new()
//!     .idle_timeout(MetricKindMask::COUNTER | MetricKindMask::GAUGE, Some(Duration::from_secs(300)))
//!     .install_recorder()?;
//! // ... build policies, serve traffic; on each scrape:
//! fusebox::metrics::keep_alive();
//! let body = handle.render();
//! # let _ = body;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Without [`keep_alive`], such an exporter would also forget quiet live series (a closed
//! breaker's state is set once), and a handle registered before it forgot records into
//! nothing afterwards. Histograms are not per key and need no idle timeout.

use fusebox_classify::series::Family;
use fusebox_classify::{ConfigError, Validator};
use std::sync::Once;

pub use fusebox_classify::series::{DEPENDENCY, Kind, keep_alive};

/// Every family fusebox records, by layer: name, kind, labels and HELP text (the table
/// above as code, for tests and tools). The Redis store's are included with the `redis`
/// feature, the pool's with the `balance` feature.
pub fn families() -> impl Iterator<Item = &'static Family> {
    let layers: [&'static [Family]; 5] = [
        fusebox_breaker::events::FAMILIES,
        fusebox_limit::observe::FAMILIES,
        fusebox_timeout::telemetry::FAMILIES,
        fusebox_retry::telemetry::FAMILIES,
        crate::policy::FALLBACK_FAMILIES,
    ];
    #[cfg(feature = "redis")]
    let redis: &'static [Family] = fusebox_redis::telemetry::FAMILIES;
    #[cfg(not(feature = "redis"))]
    let redis: &'static [Family] = &[];
    #[cfg(feature = "balance")]
    let pool: &'static [Family] = crate::pool::FAMILIES;
    #[cfg(not(feature = "balance"))]
    let pool: &'static [Family] = &[];
    layers.into_iter().chain([redis, pool]).flatten()
}

/// Describes every family (HELP and TYPE) to the installed recorder. Layers describe their
/// own when the first of them is built; call this to have the descriptions before any is.
pub fn describe() {
    fusebox_breaker::events::describe();
    fusebox_limit::observe::describe();
    fusebox_timeout::telemetry::describe();
    fusebox_retry::telemetry::describe();
    describe_policy();
    #[cfg(feature = "redis")]
    fusebox_redis::telemetry::describe();
    #[cfg(feature = "balance")]
    crate::pool::describe();
}

/// Describes the policy's own families once.
pub(crate) fn describe_policy() {
    static ONCE: Once = Once::new();
    fusebox_classify::series::describe_once(&ONCE, crate::policy::FALLBACK_FAMILIES);
}

/// Counter: breaker calls by outcome (`kind`).
pub const BREAKER_CALLS_TOTAL: &str = fusebox_breaker::events::CALLS_TOTAL;
/// Gauge: 1 for the breaker's state (`state`), 0 for the others.
pub const BREAKER_STATE: &str = fusebox_breaker::events::STATE;
/// Counter: breaker transitions.
pub const BREAKER_TRANSITIONS_TOTAL: &str = fusebox_breaker::events::TRANSITIONS_TOTAL;
/// Counter: half-open probes by result.
pub const BREAKER_PROBES_TOTAL: &str = fusebox_breaker::events::PROBES_TOTAL;
/// Gauge: the breaker window's failure rate, 0–1.
pub const BREAKER_FAILURE_RATIO: &str = fusebox_breaker::events::FAILURE_RATIO;
/// Gauge: the breaker window's slow-call rate, 0–1.
pub const BREAKER_SLOW_CALL_RATIO: &str = fusebox_breaker::events::SLOW_CALL_RATIO;
/// Gauge: the failure-rate threshold, 0–1.
pub const BREAKER_FAILURE_RATIO_THRESHOLD: &str = fusebox_breaker::events::FAILURE_RATIO_THRESHOLD;
/// Gauge: the slow-call-rate threshold, 0–1.
pub const BREAKER_SLOW_CALL_RATIO_THRESHOLD: &str =
    fusebox_breaker::events::SLOW_CALL_RATIO_THRESHOLD;
/// Gauge: seconds spent in each state.
pub const BREAKER_STATE_SECONDS: &str = fusebox_breaker::events::STATE_SECONDS;
/// Histogram: call duration in seconds.
pub const BREAKER_CALL_DURATION_SECONDS: &str = fusebox_breaker::events::CALL_DURATION_SECONDS;
/// Gauge: the concurrency limit.
pub const LIMIT_LIMIT: &str = fusebox_limit::observe::LIMIT;
/// Gauge: calls holding a permit.
pub const LIMIT_IN_FLIGHT: &str = fusebox_limit::observe::IN_FLIGHT;
/// Gauge: calls queued for a permit.
pub const LIMIT_QUEUED: &str = fusebox_limit::observe::QUEUED;
/// Counter: limit calls by outcome (`kind`).
pub const LIMIT_CALLS_TOTAL: &str = fusebox_limit::observe::CALLS;
/// Counter: calls the timeout bounded, by how they ended (`kind`).
pub const TIMEOUT_CALLS_TOTAL: &str = fusebox_timeout::telemetry::CALLS_TOTAL;
/// Counter: calls that timed out.
pub const TIMEOUT_ELAPSED_TOTAL: &str = fusebox_timeout::telemetry::ELAPSED_TOTAL;
/// Counter: calls refused because their deadline had passed.
pub const TIMEOUT_DEADLINE_EXCEEDED_TOTAL: &str =
    fusebox_timeout::telemetry::DEADLINE_EXCEEDED_TOTAL;
/// Counter: malformed incoming deadlines.
pub const DEADLINE_MALFORMED_TOTAL: &str = fusebox_timeout::telemetry::MALFORMED_DEADLINE_TOTAL;
/// Counter: attempts sent by the retry layer.
pub const RETRY_ATTEMPTS_TOTAL: &str = fusebox_retry::telemetry::ATTEMPTS_TOTAL;
/// Counter: retries granted by the budget.
pub const RETRY_RETRIES_TOTAL: &str = fusebox_retry::telemetry::RETRIES_TOTAL;
/// Counter: hedges granted by the budget.
pub const RETRY_HEDGES_TOTAL: &str = fusebox_retry::telemetry::HEDGES_TOTAL;
/// Counter: retries refused because the budget was spent.
pub const RETRY_BUDGET_EXHAUSTED_TOTAL: &str = fusebox_retry::telemetry::BUDGET_EXHAUSTED_TOTAL;
/// Counter: retries refused by the failure-rate cut-off.
pub const RETRY_CUTOFF_REFUSALS_TOTAL: &str = fusebox_retry::telemetry::CUTOFF_REFUSALS_TOTAL;
/// Counter: fallbacks served.
pub const POLICY_FALLBACKS_TOTAL: &str = crate::policy::FALLBACKS_TOTAL;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_in_the_table_with_its_labels_and_help() {
        let docs = include_str!("metrics.rs");
        let mut names = std::collections::HashSet::new();
        for f in families() {
            assert!(names.insert(f.name), "{} listed twice", f.name);
            assert!(!f.help.is_empty(), "{} has no HELP", f.name);
            let row = docs
                .lines()
                .find(|l| l.starts_with(&format!("//! | `{}` |", f.name)))
                .unwrap_or_else(|| panic!("{} is not in the table", f.name));
            assert!(row.contains(&format!("| {} |", f.kind.as_str())), "{row}");
            for label in f.labels {
                assert!(row.contains(&format!("`{label}`")), "{row} lacks {label}");
            }
            if f.kind == Kind::Counter {
                assert!(f.name.ends_with("_total"), "{}", f.name);
            }
            if f.name != DEADLINE_MALFORMED_TOTAL {
                assert_eq!(f.labels.first(), Some(&DEPENDENCY), "{}", f.name);
            }
        }
        let rows = docs
            .lines()
            .filter(|l| l.starts_with("//! | `fusebox_"))
            .count();
        // The table lists every family; `families()` those of the features built.
        let unbuilt = |prefix: &str| {
            docs.lines()
                .filter(|l| l.starts_with(&format!("//! | `fusebox_{prefix}_")))
                .count()
        };
        let mut listed = names.len();
        if cfg!(not(feature = "redis")) {
            listed += unbuilt("redis");
        }
        if cfg!(not(feature = "balance")) {
            listed += unbuilt("pool");
        }
        assert_eq!(rows, listed);
    }
}

/// The bounds of the call-duration histogram's buckets ([`BREAKER_CALL_DURATION_SECONDS`]),
/// in seconds, checked: at least one, each finite and greater than zero, each greater than
/// the one before. A policy file gives them as `duration_buckets` in its `[metrics]`
/// table (`fusebox::config::PolicyFile::duration_buckets`).
///
/// The exporter applies them: the `metrics` facade carries values, not buckets. With
/// `metrics-exporter-prometheus`:
///
/// ```
/// use fusebox::metrics::{BREAKER_CALL_DURATION_SECONDS, DurationBuckets};
/// use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
///
/// let buckets = DurationBuckets::new([0.01, 0.05, 0.25, 1.0])?;
/// let recorder = PrometheusBuilder::new()
///     .set_buckets_for_metric(
///         Matcher::Full(BREAKER_CALL_DURATION_SECONDS.into()),
///         buckets.as_slice(),
///     )?
///     .build_recorder();
/// # drop(recorder);
///
/// let err = DurationBuckets::new([0.1, 0.1, f64::NAN]).unwrap_err();
/// assert_eq!(err.problems()[0].path(), "metrics.duration_buckets[1]");
/// assert_eq!(err.problems()[1].path(), "metrics.duration_buckets[2]");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DurationBuckets(Box<[f64]>);

/// The default bounds of [`DurationBuckets`]: 5 ms to 10 s.
pub const DEFAULT_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Where [`DurationBuckets`]' problems are reported.
const BUCKETS_PATH: &str = "metrics.duration_buckets";

impl DurationBuckets {
    /// Checks `bounds` (seconds): every problem at once, each under
    /// `metrics.duration_buckets[i]` (or `metrics.duration_buckets` for an empty list).
    pub fn new(bounds: impl Into<Vec<f64>>) -> Result<Self, ConfigError> {
        let bounds: Vec<f64> = bounds.into();
        let mut v = Validator::new();
        v.check(!bounds.is_empty(), BUCKETS_PATH, || {
            "must list at least one bound".into()
        });
        let mut previous: Option<f64> = None;
        for (i, &b) in bounds.iter().enumerate() {
            let path = format!("{BUCKETS_PATH}[{i}]");
            if !b.is_finite() {
                v.fail(path, format!("must be a finite number of seconds, got {b}"));
                continue;
            }
            if b <= 0.0 {
                v.fail(path, format!("must be greater than zero, got {b}"));
            } else if let Some(p) = previous.filter(|p| b <= *p) {
                v.fail(
                    path,
                    format!("must be greater than the bound before it ({p}), got {b}"),
                );
            }
            previous = Some(previous.map_or(b, |p| p.max(b)));
        }
        v.finish(DurationBuckets(bounds.into_boxed_slice()))
    }

    /// The bounds, in seconds, increasing.
    pub fn as_slice(&self) -> &[f64] {
        &self.0
    }
}

impl Default for DurationBuckets {
    /// [`DEFAULT_DURATION_BUCKETS`].
    fn default() -> Self {
        DurationBuckets(DEFAULT_DURATION_BUCKETS.into())
    }
}
