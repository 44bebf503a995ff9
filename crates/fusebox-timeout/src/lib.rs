//! fusebox's timeout: per-route timeouts, response-body timeouts, and deadline propagation.
//!
//! A circuit breaker learns only after calls finish. A timeout is what makes a hung
//! dependency *finish*: it bounds how long one bad call holds a connection, a concurrency
//! permit and its caller, and turns "no answer" into an [`Elapsed`](error::Elapsed) error
//! that the shared [`Classifier`](fusebox_classify::Classifier) counts as a failure, so the
//! breaker, the retry budget and the adaptive limits all see it.
//!
//! # What it does
//!
//! - **Per-route timeouts.** [`TimeoutLayer`] reads each request's route from the shared
//!   [`RouteTable`](fusebox_classify::RouteTable) (the same one the breaker classifies
//!   with) and bounds the call by that route's
//!   [`timeout_duration`](fusebox_classify::Route::timeout_duration); routes without one
//!   use [`TimeoutConfig::default_timeout`]. The error carries the route's name and the
//!   limit.
//! - **Streaming responses.** The timeout covers the wait for the response *headers*. A
//!   response body can stream for much longer, or stall halfway; [`BodyTimeoutLayer`]
//!   bounds it from the headers to its end ([`TimeoutConfig::body_timeout`], and the
//!   caller's deadline), and when its timer fires the body ends with an `Elapsed` error
//!   ([`TimeoutBody`]): nothing waits forever on a stalled stream. It is a layer of its own,
//!   as tower-http keeps its body timeouts apart, so that a stack that does not bound
//!   bodies keeps its response type and pays nothing for it.
//! - **Deadlines.** On a server, [`IncomingDeadlineLayer`] reads the caller's `grpc-timeout`
//!   (and, if configured, a header of milliseconds such as `x-request-timeout-ms`) into a
//!   [`Deadline`] in the request's extensions. A handler that
//!   calls a dependency copies that `Deadline` into its outbound request; the outbound
//!   [`Timeout`] then waits for the *smaller* of the time left and the route's timeout,
//!   writes that budget into the outbound `grpc-timeout` (and the configured header), and
//!   fails at once with [`DeadlineExceeded`](error::DeadlineExceeded) — without calling the
//!   inner service — when the deadline has already passed. Under a [`BodyTimeoutLayer`] a
//!   deadline also bounds the response body. Malformed incoming values are ignored and
//!   counted, never an error.
//!
//! ## Why two layers for deadlines
//!
//! Reading a deadline and honouring it happen on different stacks: the caller's headers
//! arrive on the *server's* inbound stack (in front of the handlers), while the timeout
//! wraps the *client* to a dependency. An outbound request's `grpc-timeout` is the budget
//! this process sends, not a caller's; reading it back on the outbound stack would be
//! wrong. So [`IncomingDeadlineLayer`] is its own small layer, and the [`Deadline`] type
//! in the request's extensions (defined in `fusebox-classify`, so that the retry layer
//! reads it too) is the contract between the two. On a server, the two compose: put the
//! incoming-deadline layer outside a [`TimeoutLayer`] and the handler itself is bounded by
//! the caller's deadline.
//!
//! [`Deadline`]: fusebox_classify::Deadline
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use fusebox_classify::{classify_error_chain, Outcome, Route, RouteTable};
//! use fusebox_timeout::{error::Elapsed, TimeoutConfig, TimeoutLayer};
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
//! # rt.block_on(async {
//! let routes = RouteTable::builder(Route::default())
//!     .route("GET /report", Route::default().timeout(Duration::from_secs(2)))
//!     .build()?;
//! let config = TimeoutConfig::builder()
//!     .default_timeout(Duration::from_millis(250)) // every other route
//!     .build()?;
//!
//! // A dependency that takes a second to answer anything.
//! let dependency = service_fn(|_req: Request<()>| async {
//!     tokio::time::sleep(Duration::from_secs(1)).await;
//!     Ok::<_, std::io::Error>(Response::new(Full::new(Bytes::from_static(b"done"))))
//! });
//! let client = ServiceBuilder::new()
//!     .layer(TimeoutLayer::builder(config).routes(routes).build()?)
//!     .service(dependency);
//!
//! // The report route allows 2 s: the call succeeds.
//! let response = client.clone().oneshot(Request::get("/report").body(())?).await?;
//! assert_eq!(response.status(), 200);
//!
//! // Any other route allows 250 ms: the call fails with `Elapsed`, a failure.
//! let error = client.oneshot(Request::get("/search").body(())?).await.unwrap_err();
//! let elapsed = error.downcast_ref::<Elapsed>().expect("a fusebox timeout");
//! assert_eq!((elapsed.route(), elapsed.limit()), ("default", Duration::from_millis(250)));
//! assert_eq!(classify_error_chain(&*error).outcome(), Outcome::Failure);
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! # Inside a Policy, and with `ServiceBuilder`
//!
//! In a fusebox `Policy` the timeout is the **innermost** layer, right around the client:
//!
//! ```text
//! retry budget → circuit breaker → concurrency limit → timeout → hyper client
//! ```
//!
//! so that each retry attempt gets its own timeout (an outer timeout would cut the retries
//! short instead), the breaker sees a timed-out attempt as one failure, and the concurrency
//! limit's permit is returned when the timeout fires. Built by hand, the same order is
//! `ServiceBuilder::new().layer(retry).layer(breaker).layer(limit).layer(timeout)`:
//! `ServiceBuilder` wraps in the order written, the first layer outermost.
//!
//! [`TimeoutLayer`] keeps the inner service's response type and changes its error type to
//! [`BoxError`](error::BoxError); it requires `S::Error: Into<BoxError>`, as tower's own
//! `Timeout` does. [`BodyTimeoutLayer`], where used, goes right outside it
//! (`.layer(timeout.body_layer()).layer(timeout)`) and changes the response body type to
//! [`TimeoutBody<B>`]. `poll_ready` is the inner service's: the timer starts at `call`,
//! so time spent waiting for readiness (a full concurrency limit) is the outer layers' to
//! bound.
//!
//! # Observability
//!
//! Counters, with static names and labels ([`telemetry`]): timeouts by route and phase,
//! deadline rejections by route, malformed incoming deadlines by header. A `tracing` event
//! (at `DEBUG`, target [`telemetry::TARGET`], `fusebox::timeout`) names the route and limit
//! of each timeout. Nothing is counted or formatted on a call that finishes in time.
//!
//! # Cost
//!
//! A call without a deadline reads the clock once (to start its timer, as tower's
//! `Timeout` does), resolves its route (no work at all for a table with only a default
//! route), looks once into the request's extensions, and allocates nothing: the timer is
//! a `tokio::time::Sleep` pinned inside the response future, which is never registered
//! with the timer wheel when the inner call is ready on its first poll. Only a call with a
//! deadline formats headers. The body timer, where a [`BodyTimeoutLayer`] is used, is a
//! `Sleep` pinned inside the body: no allocation either.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod budget;
mod config;
pub mod error;
mod future;
mod layer;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
mod section;
mod service;
mod table;
pub mod telemetry;

pub use crate::body::TimeoutBody;
pub use crate::config::{
    DEFAULT_TIMEOUT, DeadlineConfig, DeadlineConfigBuilder, TimeoutConfig, TimeoutConfigBuilder,
};
pub use crate::future::{BodyFuture, ResponseFuture};
pub use crate::layer::{
    BodyTimeoutLayer, IncomingDeadlineLayer, TimeoutLayer, TimeoutLayerBuilder,
};
#[cfg(feature = "serde")]
pub use crate::section::{DeadlineSection, TimeoutSection};
pub use crate::service::{BodyTimeout, IncomingDeadline, Timeout, TimeoutStage};
pub use crate::table::Timeouts;

/// What the timeout's stage ([`TimeoutStage`]) holds for a call, and what
/// [`Timeout::bound`] hands out for a caller that drives the timeout by hand. Using the
/// layer needs none of them; their shape may change in any release.
pub mod compose {
    pub use crate::future::{Bound, Timer};
    pub use crate::service::Expired;
}
pub use fusebox_classify::Deadline;

#[cfg(test)]
mod tests;

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
