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
use std::sync::Arc;

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

/// A read-only view of a limit, shared with the layer it came from: for dashboards, health
/// checks and tests. Cheap to clone.
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
