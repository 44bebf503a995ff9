//! fusebox's concurrency limit: a bulkhead that sheds load instead of blocking, with a
//! bounded queue, partitions, and adaptive limits driven by the shared Classifier.
//!
//! A dependency can only do so much at once. Past that point extra calls do not make it
//! serve more; they make every call slower (Little's law: in flight ≈ arrival rate ×
//! latency), hold threads, sockets and memory on our side, and turn a slow dependency into
//! an outage of ours. A concurrency limit bounds the calls in flight; what matters is what
//! happens to the call that finds it full. This layer never parks it in `poll_ready`
//! forever: it is shed at once with an [`Overloaded`] error (a retry hint and the limit
//! included), or waits in a bounded queue for a bounded time and is then shed.
//!
//! # Example
//!
//! ```
//! use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer, Overloaded};
//! use http::{Request, Response};
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let config = ConcurrencyLimitConfig::builder()
//!     .name("fraud-eu")
//!     .max_concurrency(2)
//!     .build()?;
//! let limit = ConcurrencyLimitLayer::new(config);
//! let handle = limit.handle();
//! let mut svc = ServiceBuilder::new().layer(limit).service_fn(|_req: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("ok")))
//! });
//!
//! // Two calls take both permits; the third is shed at once.
//! let first = svc.ready().await?.call(Request::new(String::new()));
//! let second = svc.ready().await?.call(Request::new(String::new()));
//! assert_eq!(handle.in_flight(), 2);
//! let err = svc.ready().await?.call(Request::new(String::new())).await.unwrap_err();
//! let overloaded = err.downcast_ref::<Overloaded>().expect("shed by the limit");
//! assert_eq!(overloaded.limit(), 2);
//! assert_eq!(overloaded.retry_after(), Duration::from_secs(1));
//!
//! // Finishing (or dropping) a call gives its permit back.
//! first.await?;
//! drop(second);
//! assert_eq!(handle.in_flight(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! # One limit per layer value
//!
//! The limit's state lives in the [`ConcurrencyLimitLayer`]: every clone of it and every
//! service it builds count against the same permits. A limit of 64 on the fraud service
//! holds across every connection and task that calls it.
//!
//! # Readiness, and how this fits `ServiceBuilder`, axum and tonic
//!
//! [`ConcurrencyLimit`]'s `poll_ready` is its inner service's; admission happens in
//! `call`. That choice is what makes shedding possible: tower's own
//! `ConcurrencyLimit` waits for a permit in `poll_ready`, so a caller can only wait,
//! unboundedly, unless something like `LoadShed` turns "not ready" into an error. Here a
//! full limit is an answer, not a stall.
//!
//! - **`ServiceBuilder`**: place it like any layer. Above a `Buffer`, calls are admitted in
//!   the order the buffer's worker calls them; below a `Timeout`, time spent queueing counts
//!   against the timeout. A queued call needs the ready inner service after `call` returns,
//!   so the inner service must be `Clone` (hyper's client, tonic's `Channel`, axum's routes
//!   and `tower::buffer::Buffer` all are): the ready one travels with the queued call and a
//!   fresh clone stays behind.
//! - **axum**: a router wants services whose error is `Infallible`. Put a
//!   `HandleErrorLayer` above the limit to turn [`Overloaded`] into `503 Service
//!   Unavailable` with `Retry-After` (the `fusebox` facade's axum support does exactly this):
//!
//! ```
//! use axum::{Router, error_handling::HandleErrorLayer, routing::get};
//! use fusebox_limit::{BoxError, ConcurrencyLimitConfig, ConcurrencyLimitLayer, Overloaded};
//! use http::{StatusCode, header::RETRY_AFTER};
//! use tower::ServiceBuilder;
//!
//! async fn shed(err: BoxError) -> (StatusCode, [(http::HeaderName, String); 1]) {
//!     match err.downcast_ref::<Overloaded>() {
//!         Some(o) => (StatusCode::SERVICE_UNAVAILABLE, [(RETRY_AFTER, o.retry_after().as_secs().max(1).to_string())]),
//!         None => (StatusCode::INTERNAL_SERVER_ERROR, [(RETRY_AFTER, "0".into())]),
//!     }
//! }
//!
//! let limit = ConcurrencyLimitLayer::new(ConcurrencyLimitConfig::builder().max_concurrency(64).build()?);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(ServiceBuilder::new().layer(HandleErrorLayer::new(shed)).layer(limit));
//! # Ok::<(), fusebox_limit::ConfigError>(())
//! ```
//!
//! - **tonic**: on a client, wrap the `Channel` (`ServiceBuilder::new().layer(limit)
//!   .service(channel)`) and hand the result to the generated client: the body type and
//!   `BoxError` errors are what tonic expects, and a shed call surfaces as a `Status` whose
//!   source is [`Overloaded`]. On a server, add it with `Server::builder().layer(..)`; map
//!   [`Overloaded`] to `Status::unavailable` (or `resource_exhausted`) in an error-mapping
//!   layer, or use the `fusebox` facade, which does so. gRPC verdicts arrive in the
//!   trailers: an adaptive limit reads them at the end of the stream.
//!
//! # When permits are given back
//!
//! When the response head arrives, the call fails, or its future is dropped — or, with
//! [`Release::AtEndOfBody`], only when the response body ends, fails or is dropped, for
//! streams that keep the dependency busy while they flow. The body is always a
//! [`ResponseBody`] (a pass-through when there is nothing to do at its end).
//!
//! # Partitions
//!
//! [`ConcurrencyLimitLayer::partitioned`] with [`Partitions`] — a key function of the
//! request (route, tenant, host, ...) and a guaranteed share per key — keeps one noisy
//! partition from taking every slot. The exact rules are in [`partition`].
//!
//! # Adaptive limits
//!
//! The right limit is rarely known and moves with the dependency. [`Limit::Aimd`] and
//! [`Limit::Vegas`] adjust it from each finished call: the route table's classifier decides
//! (response → `classify_response`, gRPC trailers → `classify_eos`, error →
//! `classify_error`), and the route's `slow_call_duration` marks slow calls. Failures,
//! timeouts (fusebox's `Elapsed` is a failure) and slow calls are *drops* that shrink the
//! limit; healthy latencies let it grow; [`Ignored`](fusebox_classify::Outcome::Ignored)
//! verdicts (429s unless a route counts them, fusebox's own rejections) and cancelled calls
//! (future or body dropped) are not counted at all. See [`algorithm`] for both algorithms.
//!
//! # Observability
//!
//! `metrics` gauges for the limit, the calls in flight and the calls queued, and a counter
//! of rejections by reason; a `tracing` event (target `fusebox::limit`) when an adaptive
//! limit moves by at least a configured step; and a [`LimitHandle`] to read the same
//! numbers. Names and labels are in [`observe`].
//!
//! # Cost
//!
//! With a fixed limit and no partitions, a call costs one compare-and-swap to take a permit,
//! one subtraction to give it back, and a reference-count increment and decrement for the
//! permit, on the same cache line as the counter: no lock, no allocation, no clock read.
//! The future adds two words to the inner service's and the response body one permit, so
//! that what a healthy call moves around stays small. A queue adds a read of the waiter
//! count. Partitions take a short lock per call; adaptive limits read the clock twice per
//! call and take a short lock per finished call. `benches/benches/limit.rs` measures it
//! against tower's own `ConcurrencyLimit`.
//!
//! # Configuration
//!
//! [`ConcurrencyLimitConfig::builder`] checks every field and reports every problem with its
//! path; with the `serde` feature the configuration deserializes (`"250ms"` durations), with
//! the same checks.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod adaptive;
mod admission;
pub mod algorithm;
mod body;
mod config;
mod future;
mod layer;
mod limiter;
pub mod observe;
pub mod partition;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
mod section;
mod service;
#[cfg(test)]
mod tests;

/// The limit's admission as values, for a caller that drives the limit by hand
/// ([`ConcurrencyLimit::acquire`] and [`LimitStage::acquire`] hand these out; the
/// [`LimitStage`] is built from them). Using the layer needs none of them; their shape
/// may change in any release.
pub mod compose {
    pub use crate::admission::{Acquire, Admitted, Queued};
}
pub use crate::body::{Completion, ResponseBody};
pub use crate::config::{
    AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitConfigBuilder, DEFAULT_NAME, Limit,
    QueueConfig, Release, VegasConfig,
};
pub use crate::future::ResponseFuture;
pub use crate::layer::{ConcurrencyLimitLayer, ConcurrencyLimitLayerBuilder};
pub use crate::observe::{LimitHandle, WeakLimitHandle};
pub use crate::partition::{Partitioner, Partitions, Unpartitioned};
#[cfg(feature = "serde")]
pub use crate::section::{AdaptiveSection, Algorithm, LimitSection, QueueSection};
pub use crate::service::{ConcurrencyLimit, LimitStage};
pub use fusebox_classify::error::Overloaded;
pub use fusebox_classify::{BoxError, ConfigError};

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
