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
//! - [`metrics`]: every metric name, for dashboards.
//!
//! And, behind features that the default build leaves out:
//!
//! | feature | what |
//! |---|---|
//! | `toml`, `yaml` | `fusebox::config`: policies from files, with defaults and inheritance |
//! | `axum` | `fusebox::axum`: a Policy in a router, fusebox's errors as 503 / 504 |
//! | `tonic` | `fusebox::tonic`: a Policy around a `Channel` or in a gRPC server, errors as `Status` |
//! | `hyper-client` | `fusebox::hyper`: a hyper-util client behind a Policy |
//! | `redis` | `fusebox::redis`: breaker state shared by a fleet |
//! | `serde` | `Deserialize` for every layer's configuration |
//! | `full` | all of the above |
//!
//! Every layer drops into `tower::ServiceBuilder`, in axum and tonic servers and around
//! outbound hyper clients. fusebox's own errors ([`CircuitOpen`](error::CircuitOpen),
//! [`Elapsed`](error::Elapsed), ...) travel as [`BoxError`] and are found by downcasting.
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
//!     CircuitBreakerConfig::builder("payments").failure_rate_threshold(50).build()?,
//! )
//! .routes(routes)
//! .build();
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
#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub use fusebox_breaker::{BreakerHandle, CircuitBreakerConfig, CircuitBreakerLayer};

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

/// Shared circuit-breaker state for a fleet of replicas, on Redis: a breaker store for
/// `CircuitBreakerLayer::builder(..).store(..)`. (A [`Policy`]'s breaker keeps its state
/// in memory.)
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use fusebox_redis as redis;

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod policy;
#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub use crate::policy::{
    Fallback, FallbackContext, FallbackReason, KeyBy, Policy, PolicyBody, PolicyBuilder,
    PolicyService, RecoveryRamp,
};

#[cfg(feature = "policy")]
#[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
pub mod metrics;

#[cfg(any(feature = "toml", feature = "yaml"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "toml", feature = "yaml"))))]
pub mod config;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;

#[cfg(feature = "hyper-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "hyper-client")))]
pub mod hyper;

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;
