//! What a limit reports: `metrics` gauges and counters, `tracing` events, and a handle to
//! read it directly.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | [`LIMIT`] `fusebox_limit_limit` | gauge | `limiter` | the limit enforced now |
//! | [`IN_FLIGHT`] `fusebox_limit_in_flight` | gauge | `limiter` | calls holding a permit |
//! | [`QUEUED`] `fusebox_limit_queued` | gauge | `limiter` | calls waiting in the queue |
//! | [`REJECTED`] `fusebox_limit_rejected_total` | counter | `limiter`, `reason` | calls shed: `reason` is `full`, `queue_full` or `queue_timeout` |
//!
//! The names are constants and the metric handles are registered once, when the layer is
//! built, with the recorder installed at that moment (install yours first): the call path
//! never builds a string or looks a metric up.
//!
//! An adaptive limit emits an `INFO` event with target [`TARGET`] when it has moved at
//! least [`log_step`](crate::ConcurrencyLimitConfigBuilder::log_step) from the last value it
//! reported, with fields `limiter`, `algorithm`, `from`, `to`, `dropped` (whether the sample
//! that moved it was a drop), `latency_us` and `in_flight`.

use crate::limiter::Observe;
use metrics::{Counter, Gauge};
use std::fmt;
use std::sync::{Arc, Weak};

/// Gauge: the limit enforced now.
pub const LIMIT: &str = "fusebox_limit_limit";
/// Gauge: calls holding a permit.
pub const IN_FLIGHT: &str = "fusebox_limit_in_flight";
/// Gauge: calls waiting in the queue.
pub const QUEUED: &str = "fusebox_limit_queued";
/// Counter: calls shed, by `reason` (`full`, `queue_full`, `queue_timeout`).
pub const REJECTED: &str = "fusebox_limit_rejected_total";
/// The `tracing` target of the limit's events.
pub const TARGET: &str = "fusebox_limit";

/// The metric handles of one limiter.
pub(crate) struct Metrics {
    pub(crate) limit: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) waiting: Gauge,
    pub(crate) rejected_full: Counter,
    pub(crate) rejected_queue_full: Counter,
    pub(crate) rejected_queue_timeout: Counter,
}

impl Metrics {
    pub(crate) fn new(name: &str) -> Self {
        let rejected = |reason: &'static str| metrics::counter!(REJECTED, "limiter" => name.to_owned(), "reason" => reason);
        Metrics {
            limit: metrics::gauge!(LIMIT, "limiter" => name.to_owned()),
            in_flight: metrics::gauge!(IN_FLIGHT, "limiter" => name.to_owned()),
            waiting: metrics::gauge!(QUEUED, "limiter" => name.to_owned()),
            rejected_full: rejected("full"),
            rejected_queue_full: rejected("queue_full"),
            rejected_queue_timeout: rejected("queue_timeout"),
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
