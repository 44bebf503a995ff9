//! The metrics and tracing events the timeout layers emit, and their names.
//!
//! Everything here runs only off the healthy path: when a timeout fires, when a deadline
//! has already passed, or when an incoming header is malformed. Metric names and label keys
//! are static; the only label value built per event is the route's shared name (an `Arc`
//! clone, no formatting).

use crate::budget::Source;
use std::sync::Arc;
use std::time::Duration;

/// Counter: calls that timed out, labelled `route` (the route table's name) and `phase`
/// (`"headers"`: no response in time; `"body"`: the response body did not finish in time).
pub const ELAPSED_TOTAL: &str = "fusebox_timeout_elapsed_total";

/// Counter: calls refused without being sent because the caller's deadline had already
/// passed, labelled `route`.
pub const DEADLINE_EXCEEDED_TOTAL: &str = "fusebox_timeout_deadline_exceeded_total";

/// Counter: incoming deadline headers that could not be parsed and were ignored, labelled
/// `header` (`"grpc-timeout"` or `"millis-header"` for the configured one).
pub const MALFORMED_DEADLINE_TOTAL: &str = "fusebox_deadline_malformed_total";

/// The `tracing` target of the timeout layers' events (all `DEBUG`): a timeout that fired
/// (`route`, `limit_ms`, `phase`), a deadline that had passed before the call was sent
/// (`route`), a malformed incoming deadline (`header`).
pub const TARGET: &str = "fusebox::timeout";

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

/// A timeout fired.
pub(crate) fn elapsed(route: &Arc<str>, limit: Duration, phase: Phase) {
    metrics::counter!(ELAPSED_TOTAL, "route" => Arc::clone(route), "phase" => phase.label())
        .increment(1);
    tracing::debug!(
        target: TARGET,
        route = &**route,
        limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        phase = phase.label(),
        "fusebox timeout elapsed"
    );
}

/// A call was refused because its deadline had passed.
pub(crate) fn deadline_exceeded(route: Arc<str>) {
    tracing::debug!(
        target: TARGET,
        route = &*route,
        "deadline passed before the call was sent"
    );
    metrics::counter!(DEADLINE_EXCEEDED_TOTAL, "route" => route).increment(1);
}

/// An incoming deadline header was malformed and ignored.
pub(crate) fn malformed(source: Source) {
    metrics::counter!(MALFORMED_DEADLINE_TOTAL, "header" => source.label()).increment(1);
    tracing::debug!(
        target: TARGET,
        header = source.label(),
        "ignored a malformed incoming deadline"
    );
}
