//! What a limit reports: `metrics` gauges and counters, `tracing` events, and a handle to
//! read it directly.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | [`LIMIT`] `fusebox_limit_limit` | gauge | `dependency` | the limit enforced now |
//! | [`IN_FLIGHT`] `fusebox_limit_in_flight` | gauge | `dependency` | calls holding a permit |
//! | [`QUEUED`] `fusebox_limit_queued` | gauge | `dependency` | calls waiting in the queue |
//! | [`CALLS`] `fusebox_limit_calls_total` | counter | `dependency`, `kind` | calls by outcome: `admitted` (got a permit, at once or from the queue), `full`, `queue_full`, `queue_timeout` (shed) |
//!
//! `dependency` is the limit's name (a `Policy` names an unnamed limit after itself). The
//! families with their HELP text are [`FAMILIES`]. The metric handles are registered once,
//! when the layer is built, with the recorder installed at that moment (install yours
//! first): the call path never builds a string or looks a metric up.
//!
//! An adaptive limit emits an `INFO` event with target [`TARGET`] when it has moved at
//! least [`log_step`](crate::ConcurrencyLimitConfigBuilder::log_step) from the last value it
//! reported, with fields `limiter`, `algorithm`, `from`, `to`, `dropped` (whether the sample
//! that moved it was a drop), `latency_us` and `in_flight`.

use crate::config::{ConcurrencyLimitConfig, QueueConfig};
use crate::limiter::Observe;
use fusebox_classify::series::{self, Family, Kind, Series, SeriesBuilder, label};
use metrics::{Counter, Gauge};
use std::fmt;
use std::sync::{Arc, Once, Weak};

/// Gauge: the limit enforced now.
pub const LIMIT: &str = "fusebox_limit_limit";
/// Gauge: calls holding a permit.
pub const IN_FLIGHT: &str = "fusebox_limit_in_flight";
/// Gauge: calls waiting in the queue.
pub const QUEUED: &str = "fusebox_limit_queued";
/// Counter: calls by `kind` (`admitted`, `full`, `queue_full`, `queue_timeout`).
pub const CALLS: &str = "fusebox_limit_calls_total";
/// The `tracing` target of the limit's events.
pub const TARGET: &str = "fusebox::limit";

/// Every family the limit records, with its labels and HELP text.
pub const FAMILIES: &[Family] = &[
    Family {
        name: LIMIT,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "The concurrency limit enforced now.",
    },
    Family {
        name: IN_FLIGHT,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "Calls holding a concurrency permit.",
    },
    Family {
        name: QUEUED,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "Calls waiting in the concurrency limit's queue.",
    },
    Family {
        name: CALLS,
        kind: Kind::Counter,
        labels: &["dependency", "kind"],
        help: "Calls through the concurrency limit by outcome: admitted, or shed because it was full, its queue was full, or the wait in the queue timed out.",
    },
];

/// Describes the limit's families once per process (every limit does it when built).
pub fn describe() {
    static ONCE: Once = Once::new();
    series::describe_once(&ONCE, FAMILIES);
}

/// The metric handles of one limiter.
pub(crate) struct Metrics {
    pub(crate) limit: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) waiting: Gauge,
    pub(crate) admitted: Counter,
    pub(crate) rejected_full: Counter,
    pub(crate) rejected_queue_full: Counter,
    pub(crate) rejected_queue_timeout: Counter,
    _series: Arc<Series>,
}

impl Metrics {
    pub(crate) fn new(name: &str) -> Self {
        describe();
        let b = SeriesBuilder::new(name);
        let calls = |kind: &'static str| b.counter(CALLS, &[("kind", label(kind))]);
        Metrics {
            limit: b.gauge(LIMIT, &[]),
            in_flight: b.gauge(IN_FLIGHT, &[]),
            waiting: b.gauge(QUEUED, &[]),
            admitted: calls("admitted"),
            rejected_full: calls("full"),
            rejected_queue_full: calls("queue_full"),
            rejected_queue_timeout: calls("queue_timeout"),
            _series: b.finish(),
        }
    }
}

/// A view of a limit, shared with the layer it came from: for dashboards, health checks
/// and tests, and [`set_limit`](LimitHandle::set_limit) for a fixed limit. Cheap to clone.
#[derive(Clone)]
pub struct LimitHandle {
    inner: Arc<dyn Observe>,
}

impl LimitHandle {
    pub(crate) fn new(inner: Arc<dyn Observe>) -> Self {
        LimitHandle { inner }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The limit enforced now (moves with an adaptive limit).
    pub fn limit(&self) -> usize {
        self.inner.limit()
    }

    /// Calls holding a permit now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// Calls waiting in the queue now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting()
    }

    /// Sets a **fixed** limit to `limit` (at least 1) from now on, for every service of
    /// the layer; waiters it makes room for are admitted at once. Calls already in flight
    /// keep their permits: lowering the limit below them only delays new admissions.
    ///
    /// Returns `false` and changes nothing for an adaptive limit, whose algorithm owns
    /// the value. This is how the `fusebox` facade's recovery ramp grows a limit after a
    /// circuit breaker closes.
    ///
    /// ```
    /// use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};
    ///
    /// let layer = ConcurrencyLimitLayer::new(ConcurrencyLimitConfig::builder().max_concurrency(64).build()?);
    /// let handle = layer.handle();
    /// assert!(handle.set_limit(4));
    /// assert_eq!(handle.limit(), 4);
    /// # Ok::<(), fusebox_limit::ConfigError>(())
    /// ```
    pub fn set_limit(&self, limit: usize) -> bool {
        self.inner.set_limit(limit)
    }

    /// The queue's settings now (as built, or as the last
    /// [`reconfigure`](LimitHandle::reconfigure) set them), if the limit has a queue.
    pub fn queue(&self) -> Option<QueueConfig> {
        self.inner.queue()
    }

    /// Takes `config`'s limit and queue from the next call on, keeping the permits in
    /// flight and the waiters (a reload of a running limit):
    ///
    /// - a fixed value (as [`set_limit`](LimitHandle::set_limit));
    /// - an adaptive algorithm's settings, keeping its current value (within the new
    ///   bounds) and measurements; another adaptive algorithm (AIMD starts from the
    ///   current value; Vegas first measures the no-load latency at its minimum, as when
    ///   built);
    /// - a fixed limit made adaptive (AIMD starts from the limit in force; Vegas first
    ///   measures the no-load latency at its minimum, as when built), or an adaptive one
    ///   made fixed (an adaptive call's sample is dropped once the limit is fixed);
    /// - the queue's size and wait, a queue added, or the queue removed: calls that find
    ///   the limit full are then shed at once, and waiters already queued keep their
    ///   places and deadlines.
    ///
    /// A limit whose setting is the same as before (only its queue changed, say) keeps the
    /// value it has now, one set by [`set_limit`](LimitHandle::set_limit) included.
    /// `config`'s name, release, `retry_after` and `log_step` are not read.
    ///
    /// ```
    /// use fusebox_limit::{AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitLayer};
    /// use std::time::Duration;
    ///
    /// let config = |max_waiters| {
    ///     ConcurrencyLimitConfig::builder()
    ///         .aimd(AimdConfig::new().initial_limit(10).max_limit(100))
    ///         .queue(max_waiters, Duration::from_millis(50))
    ///         .build()
    /// };
    /// let layer = ConcurrencyLimitLayer::new(config(8)?);
    /// let handle = layer.handle();
    /// handle.reconfigure(&config(32)?);
    /// assert_eq!(handle.queue().map(|q| q.max_waiters()), Some(32));
    ///
    /// // Fixed at 12, without a queue: the value is the limit's, no longer an algorithm's.
    /// let fixed = ConcurrencyLimitConfig::builder().max_concurrency(12).build()?;
    /// handle.reconfigure(&fixed);
    /// assert_eq!((handle.limit(), handle.queue()), (12, None));
    /// assert!(handle.set_limit(20), "a fixed limit takes a value");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reconfigure(&self, config: &ConcurrencyLimitConfig) {
        self.inner.reconfigure(config)
    }

    /// The limit's settings now: as built, with the limit and queue the last
    /// [`reconfigure`](LimitHandle::reconfigure) gave it.
    pub fn config(&self) -> ConcurrencyLimitConfig {
        self.inner.config()
    }
}

impl LimitHandle {
    /// A handle that does not keep the limit alive: for a list of the limits a process has
    /// built (such as the `fusebox` facade's registry), which must not outlive them.
    pub fn downgrade(&self) -> WeakLimitHandle {
        WeakLimitHandle {
            inner: Arc::downgrade(&self.inner),
        }
    }
}

/// A [`LimitHandle`] that does not keep its limit alive ([`LimitHandle::downgrade`]).
#[derive(Clone)]
pub struct WeakLimitHandle {
    inner: Weak<dyn Observe>,
}

impl WeakLimitHandle {
    /// The handle, while the limit's layer or any of its services is alive.
    pub fn upgrade(&self) -> Option<LimitHandle> {
        self.inner.upgrade().map(LimitHandle::new)
    }
}

impl fmt::Debug for WeakLimitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakLimitHandle")
            .field("alive", &(self.inner.strong_count() > 0))
            .finish()
    }
}

impl fmt::Debug for LimitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitHandle")
            .field("name", &self.name())
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .field("waiting", &self.waiting())
            .finish()
    }
}
