//! The Redis store's own metrics: its connection, its fallbacks and what it could not send.
//!
//! Every series carries `dependency` (the breaker's name) and, for a key of a keyed breaker
//! shared on Redis, `key`. The breaker's own families (state, calls, ...) are the breaker
//! crate's ([`fusebox_breaker::events`]).

use fusebox_classify::series::{self, Family, Kind, Series, SeriesBuilder};
use metrics::{Counter, Gauge};
use std::sync::{Arc, Once};

/// Counter: switches to the fallback.
pub const FALLBACKS_TOTAL: &str = "fusebox_redis_fallbacks_total";
/// Counter: returns to the fleet's state after a fallback.
pub const RESYNCS_TOTAL: &str = "fusebox_redis_resyncs_total";
/// Counter: outcomes lost (a batch Redis did not take, or a full batch).
pub const DROPPED_OUTCOMES_TOTAL: &str = "fusebox_redis_dropped_outcomes_total";
/// Gauge: 1 while Redis answers, 0 while falling back.
pub const CONNECTED: &str = "fusebox_redis_connected";

/// Every family the Redis store records, with its labels and HELP text.
pub const FAMILIES: &[Family] = &[
    Family {
        name: FALLBACKS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key"],
        help: "Times the Redis breaker store switched to its local fallback.",
    },
    Family {
        name: RESYNCS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key"],
        help: "Times the Redis breaker store returned to the fleet's state after a fallback.",
    },
    Family {
        name: DROPPED_OUTCOMES_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key"],
        help: "Call outcomes the Redis breaker store could not send (Redis refused the batch, or the batch was full).",
    },
    Family {
        name: CONNECTED,
        kind: Kind::Gauge,
        labels: &["dependency", "key"],
        help: "1 while the Redis breaker store reaches Redis, 0 while it falls back.",
    },
];

/// Describes the Redis store's families once per process (every store does it when made).
pub fn describe() {
    static ONCE: Once = Once::new();
    series::describe_once(&ONCE, FAMILIES);
}

/// One store's handles.
pub(crate) struct Metrics {
    pub(crate) fallbacks: Counter,
    pub(crate) resyncs: Counter,
    pub(crate) dropped: Counter,
    pub(crate) connected: Gauge,
    _series: Arc<Series>,
}

impl Metrics {
    pub(crate) fn new(dependency: &str, key: Option<&str>) -> Self {
        describe();
        let b = SeriesBuilder::new(dependency).label_opt("key", key);
        Metrics {
            fallbacks: b.counter(FALLBACKS_TOTAL, &[]),
            resyncs: b.counter(RESYNCS_TOTAL, &[]),
            dropped: b.counter(DROPPED_OUTCOMES_TOTAL, &[]),
            connected: b.gauge(CONNECTED, &[]),
            _series: b.finish(),
        }
    }
}
