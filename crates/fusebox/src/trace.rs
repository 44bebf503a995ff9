//! Every `tracing` target and span fusebox emits: one table to write filters from.
//!
//! Each layer logs under its own target, `fusebox::<layer>`, so one directive selects one
//! layer: `RUST_LOG=fusebox::breaker=info` shows the breakers' transitions and nothing
//! else of fusebox; `RUST_LOG=fusebox=info` shows every layer's `INFO` and above;
//! `RUST_LOG=fusebox::policy=debug` adds the [`POLICY_CALL`] span of every call.
//!
//! | target | level | what | fields |
//! |---|---|---|---|
//! | `fusebox::breaker` | `WARN` (to open, forced open), `INFO` (other transitions) | a breaker changed state | `breaker`, `key`, `from`, `to`, `reason`, `calls`, `failures`, `slow`, `failure_rate`, `slow_rate`, `open_ms`, `jitter_ms`, `generation` |
//! | `fusebox::breaker` | `INFO` | a metrics-only breaker would have opened or closed | `breaker`, `key`, `would_open`, `reason`, `calls`, `failures`, `slow`, `failure_rate`, `slow_rate` |
//! | `fusebox::breaker` | `WARN` | a keyed breaker's shard is full: new keys share its overflow breaker | `breaker`, `keys` |
//! | `fusebox::limit` | `INFO` | an adaptive limit moved by at least its `log_step` | `limiter`, `algorithm`, `from`, `to`, `dropped`, `latency_us`, `in_flight` |
//! | `fusebox::retry` | `DEBUG` | a wanted retry or hedge was refused | `name`, `attempts`, `reason` |
//! | `fusebox::retry` | `DEBUG` span `retry_attempt` | one attempt | `attempt` (1-based) |
//! | `fusebox::timeout` | `DEBUG` | a timeout fired | `route`, `limit_ms`, `phase` |
//! | `fusebox::timeout` | `DEBUG` | the deadline had passed before the call was sent | `route` |
//! | `fusebox::timeout` | `DEBUG` | a malformed incoming deadline was ignored | `header` |
//! | `fusebox::policy` | `DEBUG` span [`POLICY_CALL`] | one call through a [`Policy`](crate::Policy) | below |
//! | `fusebox::policy` | `INFO` | a recovery ramp started, finished | `limiter`, `from`, `to`, `duration_ms`; `limiter`, `limit` |
//! | `fusebox::fallback` | `DEBUG` | a fallback was served | `policy`, `route`, `reason` |
//! | `fusebox::redis` | `WARN`, `INFO`, `ERROR`, `DEBUG` | the shared store lost Redis, found it again, cannot share a breaker, lost pub/sub | `breaker`, `scope`, `op`, `error`, `fallback`, `state`, `epoch` |
//! | `fusebox::reload` | `INFO` | a reload changed a running policy | `policy`, `changes`, `needs_rebuild` |
//! | `fusebox::reload` | `WARN` | the route table refused the routes a reload adds (the other changes apply) | `error` |
//! | `fusebox::pool` | `WARN`, `INFO` | a pool's endpoint was ejected, kept in past the cap, came back; the pool's healthy-panic threshold was crossed | `dependency`, `endpoint`, `ejected`, `max_ejected`, `reason`, `detail`, `active`, `healthy`, `endpoints`, `panic_threshold` |
//! | `fusebox::admin` | `INFO`, `WARN` | an admin command was carried out, or not; a request was refused (credential) or invalid | `by`, `name`, `key`, `command`, `from`, `to`, `route`, `reason`, `error` |
//!
//! # The call's span
//!
//! A [`Policy`](crate::Policy) opens one `DEBUG` span, [`POLICY_CALL`] under target
//! [`POLICY`], per call: from `call` to the response head (the response body streams after
//! it closes). It holds the retry layer's `retry_attempt` spans and every event the layers
//! emit while the call runs. Its fields:
//!
//! | field | when | value |
//! |---|---|---|
//! | `policy` | always | the policy's name: the dependency |
//! | `route` | always | the route table's name for the request (`"GET /users/{id}"`, `"default"`) |
//! | `key` | keyed breakers | the breaker key the request maps to (host, route or custom key: a custom key function runs once more for the span) |
//! | `attempts` | at the end | attempts sent: first attempt, retries, hedges (`0`: nothing was sent) |
//! | `outcome` | at the end | `success`, `failure`, `ignored`: the route's classifier on the answer the caller got; `rejected`: fusebox refused the call; `trailers`: gRPC, decided by the trailers after the span |
//! | `status` | a response | the HTTP status code |
//! | `rejection` | `outcome = rejected` | `circuit_open`, `overloaded`, `deadline_exceeded`, `budget_exhausted` |
//! | `error` | other errors | `elapsed` (a timeout), `io`, `other` |
//! | `fallback` | a fallback was served | `true` |
//!
//! The span is a span of its own rather than fields recorded on the caller's span: the
//! caller's span may not exist, may not declare these fields (`tracing` drops values for
//! undeclared fields), and is shared by every dependency a handler calls. When no
//! subscriber enables `DEBUG` for `fusebox::policy` the span costs a level check: nothing is
//! looked up, allocated or formatted (the `alloc_*` tests hold a call to zero allocations
//! with a subscriber installed at `INFO`). Fields are recorded as `&str`, integers and
//! booleans.
//!
//! ```
//! use fusebox::trace;
//!
//! // A filter directive for the breakers' transitions only, as `RUST_LOG` takes it.
//! let directive = format!("{}=info", trace::BREAKER);
//! assert_eq!(directive, "fusebox::breaker=info");
//! assert_eq!(trace::POLICY_CALL, "policy_call");
//! ```

/// Target of the circuit breakers' events.
pub const BREAKER: &str = "fusebox::breaker";
/// Target of the concurrency limit's events.
pub const LIMIT: &str = fusebox_limit::observe::TARGET;
/// Target of the retry layer's events and `retry_attempt` spans.
pub const RETRY: &str = "fusebox::retry";
/// Target of the timeout layers' events.
pub const TIMEOUT: &str = fusebox_timeout::telemetry::TARGET;
/// Target of the shared Redis store's events.
pub const REDIS: &str = "fusebox::redis";
/// Target of the [`POLICY_CALL`] span and of the recovery ramp's events.
pub const POLICY: &str = "fusebox::policy";
/// Target of the fallbacks' events.
pub const FALLBACK: &str = "fusebox::fallback";
/// Target of the events of a policy's reload ([`reload`](crate::reload)).
pub const RELOAD: &str = "fusebox::reload";
/// Target of a balanced pool's events (`fusebox::pool::TARGET`, with the `balance` feature,
/// which does not need this module).
pub const POOL: &str = crate::POOL_TARGET;
/// Target of the admin router's events (`fusebox::admin::TARGET`, with the `axum` feature).
pub const ADMIN: &str = "fusebox::admin";
/// Every target above: each starts with `fusebox::`.
pub const TARGETS: [&str; 10] = [
    BREAKER, LIMIT, RETRY, TIMEOUT, REDIS, POLICY, FALLBACK, RELOAD, POOL, ADMIN,
];

/// Name of the span of one call through a [`Policy`](crate::Policy) (`DEBUG`, target
/// [`POLICY`]).
pub const POLICY_CALL: &str = "policy_call";
/// Name of the retry layer's span around one attempt (`DEBUG`, target [`RETRY`]).
pub const RETRY_ATTEMPT: &str = "retry_attempt";
/// The fields of [`POLICY_CALL`], in the order it declares them.
pub const POLICY_CALL_FIELDS: [&str; 9] = [
    "policy",
    "route",
    "key",
    "attempts",
    "outcome",
    "status",
    "rejection",
    "error",
    "fallback",
];
