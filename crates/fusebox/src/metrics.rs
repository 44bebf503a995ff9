//! Every metric fusebox records, by layer: one table to build dashboards and alerts from.
//!
//! fusebox records through the [`metrics`](https://docs.rs/metrics) facade: install a
//! recorder (for Prometheus, `metrics-exporter-prometheus`; see the `prometheus` example)
//! **before** building policies — each layer registers its metric handles when it is built,
//! so that the call path never looks a metric up or formats a name.
//!
//! | metric | kind | labels | layer |
//! |---|---|---|---|
//! | `fusebox_breaker_state` | gauge | `breaker` | breaker: 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled, 5 metrics-only |
//! | `fusebox_breaker_transitions_total` | counter | `breaker`, `from`, `to` | breaker |
//! | `fusebox_breaker_rejected_total` | counter | `breaker` | breaker: calls rejected while open |
//! | `fusebox_breaker_probes_total` | counter | `breaker`, `result` | breaker: half-open probes |
//! | `fusebox_breaker_failure_rate` | gauge | `breaker` | breaker: percent |
//! | `fusebox_breaker_slow_call_rate` | gauge | `breaker` | breaker: percent |
//! | `fusebox_breaker_state_milliseconds_total` | counter | `breaker`, `state` | breaker |
//! | `fusebox_limit_limit` | gauge | `limiter` | limit: the limit enforced now |
//! | `fusebox_limit_in_flight` | gauge | `limiter` | limit |
//! | `fusebox_limit_queued` | gauge | `limiter` | limit |
//! | `fusebox_limit_rejected_total` | counter | `limiter`, `reason` | limit: `full`, `queue_full`, `queue_timeout` |
//! | `fusebox_timeout_elapsed_total` | counter | `route`, `phase` | timeout: `headers` or `body` |
//! | `fusebox_timeout_deadline_exceeded_total` | counter | `route` | timeout |
//! | `fusebox_deadline_malformed_total` | counter | `header` | incoming deadlines |
//! | `fusebox_retry_attempts_total` | counter | `name` | retry: every attempt sent |
//! | `fusebox_retry_retries_total` | counter | `name` | retry |
//! | `fusebox_retry_hedges_total` | counter | `name` | retry |
//! | `fusebox_retry_budget_exhausted_total` | counter | `name` | retry |
//! | `fusebox_retry_cutoff_refusals_total` | counter | `name` | retry |
//! | `fusebox_policy_fallbacks_total` | counter | `policy`, `reason` | policy: fallbacks served, `circuit_open`, `overloaded`, `elapsed`, `other` |
//!
//! The names are also constants here, for tests and dashboards written in Rust.

/// Gauge: the breaker's state.
pub const BREAKER_STATE: &str = "fusebox_breaker_state";
/// Counter: breaker transitions.
pub const BREAKER_TRANSITIONS_TOTAL: &str = "fusebox_breaker_transitions_total";
/// Counter: calls a breaker rejected.
pub const BREAKER_REJECTED_TOTAL: &str = "fusebox_breaker_rejected_total";
/// Counter: half-open probes by result.
pub const BREAKER_PROBES_TOTAL: &str = "fusebox_breaker_probes_total";
/// Gauge: the breaker window's failure rate.
pub const BREAKER_FAILURE_RATE: &str = "fusebox_breaker_failure_rate";
/// Gauge: the breaker window's slow-call rate.
pub const BREAKER_SLOW_CALL_RATE: &str = "fusebox_breaker_slow_call_rate";
/// Gauge: the concurrency limit.
pub const LIMIT_LIMIT: &str = fusebox_limit::observe::LIMIT;
/// Gauge: calls holding a permit.
pub const LIMIT_IN_FLIGHT: &str = fusebox_limit::observe::IN_FLIGHT;
/// Gauge: calls queued for a permit.
pub const LIMIT_QUEUED: &str = fusebox_limit::observe::QUEUED;
/// Counter: calls the limit shed.
pub const LIMIT_REJECTED_TOTAL: &str = fusebox_limit::observe::REJECTED;
/// Counter: calls that timed out.
pub const TIMEOUT_ELAPSED_TOTAL: &str = fusebox_timeout::telemetry::ELAPSED_TOTAL;
/// Counter: calls refused because their deadline had passed.
pub const TIMEOUT_DEADLINE_EXCEEDED_TOTAL: &str =
    fusebox_timeout::telemetry::DEADLINE_EXCEEDED_TOTAL;
/// Counter: attempts sent by the retry layer.
pub const RETRY_ATTEMPTS_TOTAL: &str = "fusebox_retry_attempts_total";
/// Counter: retries granted by the budget.
pub const RETRY_RETRIES_TOTAL: &str = "fusebox_retry_retries_total";
/// Counter: retries refused because the budget was spent.
pub const RETRY_BUDGET_EXHAUSTED_TOTAL: &str = "fusebox_retry_budget_exhausted_total";
/// Counter: fallbacks served.
pub const POLICY_FALLBACKS_TOTAL: &str = crate::policy::FALLBACKS_TOTAL;
