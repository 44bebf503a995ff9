//! The metrics and tracing events the timeout layers emit, and their names.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | [`ELAPSED_TOTAL`] `fusebox_timeout_elapsed_total` | counter | `dependency`, `route`, `phase` | calls that timed out: `phase` is `headers` (no response in time) or `body` (the body did not finish in time) |
//! | [`CALLS_TOTAL`] `fusebox_timeout_calls_total` | counter | `dependency`, `route`, `kind` | calls the timeout bounded, by how they ended: `completed` (an answer, or the inner service's error, within the time) or `elapsed` (the time ran out first) |
//! | [`DEADLINE_EXCEEDED_TOTAL`] `fusebox_timeout_deadline_exceeded_total` | counter | `dependency`, `route` | calls refused unsent: the caller's deadline had passed |
//! | [`MALFORMED_DEADLINE_TOTAL`] `fusebox_deadline_malformed_total` | counter | `header` | incoming deadline headers ignored as malformed (server side: no dependency) |
//!
//! `dependency` is the timeout's name ([`TimeoutConfig::name`](crate::TimeoutConfig::name);
//! a `Policy` names its timeout after itself) and `route` the route table's name of the
//! route. Each layer registers one set of handles per route of its table when it is built:
//! when a timeout fires, counting it is an atomic add, and two policies' default routes are
//! two series.

use crate::budget::Source;
use fusebox_classify::series::{self, Family, Kind, Series, SeriesBuilder, label};
use metrics::Counter;
use std::ops::Deref;
use std::sync::{Arc, Once};
use std::time::Duration;

/// Counter: calls that timed out, labelled `dependency`, `route` and `phase`
/// (`"headers"`: no response in time; `"body"`: the response body did not finish in time).
pub const ELAPSED_TOTAL: &str = "fusebox_timeout_elapsed_total";

/// Counter: calls the timeout bounded, labelled `dependency`, `route` and `kind`
/// (`"completed"`: an answer, or the inner service's own error, came within the time;
/// `"elapsed"`: the time ran out first, as counted by [`ELAPSED_TOTAL`] with
/// `phase="headers"`). A call refused unsent (its deadline had passed) is neither.
pub const CALLS_TOTAL: &str = "fusebox_timeout_calls_total";

/// Counter: calls refused without being sent because the caller's deadline had already
/// passed, labelled `dependency` and `route`.
pub const DEADLINE_EXCEEDED_TOTAL: &str = "fusebox_timeout_deadline_exceeded_total";

/// Counter: incoming deadline headers that could not be parsed and were ignored, labelled
/// `header` (`"grpc-timeout"` or `"millis-header"` for the configured one).
pub const MALFORMED_DEADLINE_TOTAL: &str = "fusebox_deadline_malformed_total";

/// The `tracing` target of the timeout layers' events (all `DEBUG`): a timeout that fired
/// (`route`, `limit_ms`, `phase`), a deadline that had passed before the call was sent
/// (`route`), a malformed incoming deadline (`header`).
pub const TARGET: &str = "fusebox::timeout";

/// Every family the timeout layers record, with its labels and HELP text.
pub const FAMILIES: &[Family] = &[
    Family {
        name: ELAPSED_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "route", "phase"],
        help: "Calls that timed out, by phase: headers (no response in time) or body (the body did not finish in time).",
    },
    Family {
        name: CALLS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "route", "kind"],
        help: "Calls the timeout bounded, by how they ended: completed (an answer or the inner error within the time) or elapsed (the time ran out first).",
    },
    Family {
        name: DEADLINE_EXCEEDED_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "route"],
        help: "Calls refused without being sent because the caller's deadline had passed.",
    },
    Family {
        name: MALFORMED_DEADLINE_TOTAL,
        kind: Kind::Counter,
        labels: &["header"],
        help: "Incoming deadline headers ignored because they could not be parsed.",
    },
];

/// Describes the timeout's families once per process (every layer does it when built).
pub fn describe() {
    static ONCE: Once = Once::new();
    series::describe_once(&ONCE, FAMILIES);
}

/// Which part of a call a timeout cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the response headers.
    Headers,
    /// Streaming the response body.
    Body,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Headers => "headers",
            Phase::Body => "body",
        }
    }
}

/// One route of one timeout layer: its name (what a call's future and its [`Elapsed`]
/// error carry; the struct derefs to it) and, while a recorder is installed, its counters.
/// Without one, a route costs no allocation of its own.
///
/// [`Elapsed`]: crate::error::Elapsed
pub(crate) struct RouteSeries {
    name: Arc<str>,
    counters: Option<Box<RouteCounters>>,
}

struct RouteCounters {
    completed: Counter,
    elapsed_calls: Counter,
    elapsed_headers: Counter,
    elapsed_body: Counter,
    deadline_exceeded: Counter,
    _series: Arc<Series>,
}

impl RouteSeries {
    /// Route `route` of the timeout named `dependency`.
    pub(crate) fn new(dependency: &str, route: Arc<str>) -> Self {
        let counters = series::recording().then(|| {
            describe();
            let b = SeriesBuilder::new(dependency).label("route", route.to_string());
            let elapsed =
                |phase: Phase| b.counter(ELAPSED_TOTAL, &[("phase", label(phase.label()))]);
            let calls = |kind: &'static str| b.counter(CALLS_TOTAL, &[("kind", label(kind))]);
            Box::new(RouteCounters {
                completed: calls("completed"),
                elapsed_calls: calls("elapsed"),
                elapsed_headers: elapsed(Phase::Headers),
                elapsed_body: elapsed(Phase::Body),
                deadline_exceeded: b.counter(DEADLINE_EXCEEDED_TOTAL, &[]),
                _series: b.finish(),
            })
        });
        RouteSeries {
            name: route,
            counters,
        }
    }

    /// The route's name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }
}

impl Deref for RouteSeries {
    type Target = Arc<str>;

    fn deref(&self) -> &Arc<str> {
        &self.name
    }
}

impl std::fmt::Debug for RouteSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// A timeout fired.
pub(crate) fn elapsed(route: &RouteSeries, limit: Duration, phase: Phase) {
    if let Some(c) = &route.counters {
        match phase {
            Phase::Headers => {
                c.elapsed_headers.increment(1);
                c.elapsed_calls.increment(1);
            }
            Phase::Body => c.elapsed_body.increment(1),
        }
    }
    tracing::debug!(
        target: TARGET,
        route = &**route.name(),
        limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        phase = phase.label(),
        "fusebox timeout elapsed"
    );
}

/// A call's answer (or the inner service's error) came within its time. One atomic add
/// while a recorder is installed; nothing otherwise.
#[inline]
pub(crate) fn completed(route: &RouteSeries) {
    if let Some(c) = &route.counters {
        c.completed.increment(1);
    }
}

/// A call was refused because its deadline had passed.
pub(crate) fn deadline_exceeded(route: &RouteSeries) {
    tracing::debug!(
        target: TARGET,
        route = &**route.name(),
        "deadline passed before the call was sent"
    );
    if let Some(c) = &route.counters {
        c.deadline_exceeded.increment(1);
    }
}

/// An incoming deadline header was malformed and ignored.
pub(crate) fn malformed(source: Source) {
    describe();
    metrics::counter!(MALFORMED_DEADLINE_TOTAL, "header" => source.label()).increment(1);
    tracing::debug!(
        target: TARGET,
        header = source.label(),
        "ignored a malformed incoming deadline"
    );
}
