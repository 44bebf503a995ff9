//! **fusebox**: resilience middleware for Tower.
//!
//! Layers that protect a service from its dependencies, all reading one shared, per-route
//! [`Classifier`] that decides whether a finished call was a success,
//! a failure, slow, or something to ignore:
//!
//! - [`Policy`] (feature `policy`, on by default): retry budget → circuit breaker →
//!   concurrency limit → timeout, in that order, around one route table, as one layer —
//!   with [fallbacks](Fallback), a [recovery ramp](RecoveryRamp) and keyed breakers;
//! - [`breaker`], [`limit`], [`retry`], [`timeout`]: each layer on its own;
//! - [`classify`]: the Classifier, the route table, and fusebox's shared error types;
//! - [`metrics`]: every metric name, for dashboards; [`trace`]: every `tracing` target and
//!   the span of a policy call, for filters and traces;
//! - [`registry`]: a [`Registry`] that lists every policy and layer registered with it —
//!   breaker states, rates and keys, limits, budgets, effective settings — and answers a
//!   readiness check over the dependencies marked mandatory;
//! - [`reload`]: new settings for a running policy ([`Policy::reload`], and a policy file's
//!   `reload`), keeping its breaker's state, with a report of what changed, what applied in
//!   place and what needs a rebuild.
//!
//! And, behind features that the default build leaves out:
//!
//! | feature | what |
//! |---|---|
//! | `toml`, `yaml` | `fusebox::config`: policies from files, with defaults and inheritance |
//! | `axum` | `fusebox::axum`: a Policy in a router, fusebox's errors as 503 / 504; `fusebox::admin`: a registry's admin routes (list, force open, disable, metrics-only, reset) behind a credential, and a readiness route |
//! | `tonic` | `fusebox::tonic`: a Policy around a `Channel` or in a gRPC server, errors as `Status` |
//! | `hyper-client` | `fusebox::hyper`: a hyper-util client behind a Policy |
//! | `hyper-rustls` | `fusebox::hyper` over HTTPS: rustls on `ring`, the platform's roots or your own |
//! | `tower-http` | `fusebox::classify::tower_http`: a tower-http `ClassifyResponse` as a fusebox classifier |
//! | `redis` | `fusebox::redis`: breaker state shared by a fleet, for a `Policy` or a breaker layer |
//! | `balance` | `fusebox::pool`: a breaker per endpoint of tower's p2c balancer, with a cap on ejection and a healthy-panic threshold |
//! | `serde` | `Deserialize` for every layer's configuration |
//! | `full` | all of the above |
//!
//! Every layer drops into `tower::ServiceBuilder`, in axum and tonic servers and around
//! outbound hyper clients, with `.layer(..)` or with the methods [`ServiceBuilderExt`] adds
//! (`.circuit_breaker(config)`, `.fusebox_concurrency_limit(config)`,
//! `.fusebox_timeout(config)`, `.retry_budget(config)`, `.policy(policy)`). fusebox's own errors ([`CircuitOpen`](error::CircuitOpen),
//! [`Elapsed`](error::Elapsed), ...) travel as [`BoxError`] and are found by downcasting.
//!
//! # One breaker for a fleet (feature `redis`)
//!
//! Each replica's breaker judges, by default, only the calls that replica made: with 20
//! replicas, each needs `minimum_calls` of its own before it reacts, and each probes on its
//! own. A policy whose breaker keeps its state on Redis
//! ([`PolicyBuilder::breaker_store`], or `store` under `breaker` in a policy file) shares
//! one breaker with every replica that names the same Redis and scope: one window, one
//! state, and one half-open probe budget fleet-wide. Building connects to nothing and never
//! blocks; until Redis answers, and whenever it does not, each replica decides on its own
//! calls, so an outage of Redis never fails a call by itself. The in-memory default keeps
//! its cost: the store is an enum, not a boxed trait object, and without the feature it has
//! a single variant.
//!
//! ```
//! # #[cfg(feature = "redis")] {
//! use fusebox::redis::{RedisStoreConfig, Scope};
//! use fusebox::{CircuitBreakerConfig, Policy};
//!
//! let policy = Policy::builder("payments")
//!     .circuit_breaker(CircuitBreakerConfig::builder().minimum_calls(50))
//!     .breaker_store(RedisStoreConfig::builder("redis://127.0.0.1:6379/0").scope(Scope::dep("payments")))
//!     .build()?;
//! assert!(policy.breaker_store().redis().is_some());
//! # }
//! # Ok::<(), fusebox::ConfigError>(())
//! ```
//!
//! # Example
//!
//! ```
//! use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer, Route, RouteTable, StandardClassifier};
//! use std::time::Duration;
//!
//! // A partner API whose 429s mean it is struggling: that route counts them.
//! let routes = RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(250)))
//!     .route("POST /charge", Route::new(StandardClassifier::new().count_throttling(true)))
//!     .build()?;
//! let breaker = CircuitBreakerLayer::builder(
//!     CircuitBreakerConfig::builder().name("payments").failure_rate_threshold(50).build()?,
//! )
//! .routes(routes)
//! .build()?;
//! let svc = tower::ServiceBuilder::new()
//!     .layer(breaker)
//!     .service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//!     });
//! # let _ = svc;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use fusebox_classify as classify;
pub use fusebox_classify::{
    BoxError, Classifier, ConfigError, Deadline, GrpcClassifier, HttpClassifier, Outcome, Route,
    RouteTable, StandardClassifier, Verdict, error,
};

/// The circuit breaker.
#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub use fusebox_breaker as breaker;
/// The rule of a dependency-wide breaker gated by a keyed one's spread
/// ([`PolicyBuilder::key_spread`](crate::PolicyBuilder::key_spread)).
#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub use fusebox_breaker::spread::KeySpread;
#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub use fusebox_breaker::{
    BreakerHandle, CircuitBreakerConfig, CircuitBreakerLayer, PlainCircuitBreakerLayer,
};

/// Per-route timeouts and deadline propagation.
#[cfg(feature = "timeout")]
#[cfg_attr(docsrs, doc(cfg(feature = "timeout")))]
pub use fusebox_timeout as timeout;
#[cfg(feature = "timeout")]
#[cfg_attr(docsrs, doc(cfg(feature = "timeout")))]
pub use fusebox_timeout::{TimeoutConfig, TimeoutLayer};

/// The concurrency limit.
#[cfg(feature = "limit")]
#[cfg_attr(docsrs, doc(cfg(feature = "limit")))]
pub use fusebox_limit as limit;
#[cfg(feature = "limit")]
#[cfg_attr(docsrs, doc(cfg(feature = "limit")))]
pub use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};

/// The retry budget.
#[cfg(feature = "retry")]
#[cfg_attr(docsrs, doc(cfg(feature = "retry")))]
pub use fusebox_retry as retry;
#[cfg(feature = "retry")]
#[cfg_attr(docsrs, doc(cfg(feature = "retry")))]
pub use fusebox_retry::{RetryBudgetLayer, RetryConfig};

/// Shared circuit-breaker state for a fleet of replicas, on Redis: a breaker store for a
/// [`Policy`] (`PolicyBuilder::breaker_store`, or `store` under `breaker` in a policy file)
/// or for `CircuitBreakerLayer::builder(..).store(..)`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use fusebox_redis as redis;

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod policy;
#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub use crate::policy::{
    BreakerStore, Fallback, FallbackContext, FallbackReason, KeyBy, Policy, PolicyBody,
    PolicyBuilder, PolicyService, RecoveryRamp,
};

#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub mod pool;
#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub use crate::pool::{PoolConfig, PoolHandle, PoolLayer};

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod registry;
#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub use crate::registry::Registry;
#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod reload;

#[cfg(any(
    feature = "breaker",
    feature = "limit",
    feature = "timeout",
    feature = "retry"
))]
mod builder;
#[cfg(any(
    feature = "breaker",
    feature = "limit",
    feature = "timeout",
    feature = "retry"
))]
pub use crate::builder::ServiceBuilderExt;

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod metrics;

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod trace;

#[cfg(any(feature = "toml", feature = "yaml"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "toml", feature = "yaml"))))]
pub mod config;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod admin;

#[cfg(feature = "hyper-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "hyper-client")))]
pub mod hyper;

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;

/// The balanced pool's `tracing` target, written once for `pool::TARGET` and
/// `trace::POOL` (the pool's feature does not need the `trace` module's).
#[cfg(any(feature = "policy", feature = "balance"))]
const POOL_TARGET: &str = "fusebox::pool";
