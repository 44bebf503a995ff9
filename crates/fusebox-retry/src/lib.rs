//! Retries that cannot amplify an outage.
//!
//! Retries without a budget are a load amplifier: three retries at each of three layers turn
//! one user action into 27 calls on a dependency that is already failing. fusebox's
//! [`RetryBudgetLayer`] retries a call only when all of these hold:
//!
//! - the route allows retries ([`Route::retry`](fusebox_classify::Route::retry)), and the
//!   shared [`Classifier`](fusebox_classify::Classifier) says a retry may help (a 502, 503,
//!   504, a reset connection, a 429 with `Retry-After`, a gRPC UNAVAILABLE);
//! - the request is safe to repeat: an idempotent method, an `Idempotency-Key` header, or a
//!   per-route override — or it was never sent at all (connection refused);
//! - it is not one of fusebox's own rejections: an open circuit breaker
//!   ([`CircuitOpen`](error::CircuitOpen)), a full concurrency limit
//!   ([`Overloaded`](error::Overloaded)), a spent deadline
//!   ([`DeadlineExceeded`](error::DeadlineExceeded)) or an inner retry layer's spent budget
//!   ([`BudgetExhausted`](error::BudgetExhausted)). Each was a decision, not a failure of
//!   the dependency: the breaker has judged it unhealthy, a full local pool is still full a
//!   backoff later, a spent deadline stays spent, and retrying another layer's exhausted
//!   retries multiplies attempts across layers — the amplification this crate exists to
//!   stop;
//! - the retry can start, backoff included, before the request's
//!   [`Deadline`](fusebox_classify::Deadline) (a request extension; a request whose
//!   deadline has already passed is not sent at all and fails with
//!   [`DeadlineExceeded`](error::DeadlineExceeded));
//! - the dependency's recent failure rate is below the cut-off, and the [`budget`]
//!   has a retry left: every request deposits, every retry withdraws, at most `retry_ratio`
//!   of recent requests plus a floor per second.
//!
//! Retries wait an exponential backoff with full jitter, or exactly the server's
//! `Retry-After` / `grpc-retry-pushback-ms` up to a cap ([`backoff`]). Request bodies up to
//! a cap are buffered so they can be replayed; larger or streaming bodies are sent once
//! ([`replay`]). Optionally, a repeatable request that has no answer after a delay gets one
//! hedge (backup request); the first good answer wins and the other attempt is dropped.
//!
//! When a retry is wanted but refused, the caller gets the last attempt's answer as the
//! dependency gave it (see [`error`] for why nothing is wrapped).
//!
//! # Hedging
//!
//! With [`hedge_delay`](RetryConfigBuilder::hedge_delay), an idempotent request with a
//! replayable body that has no answer after the delay gets one more attempt, taken from
//! the same budget (and refused by the same cut-off) as a retry and counted in
//! `max_attempts`. The first *good* answer — any answer the layer would not retry —
//! wins, and the other attempt's future is dropped, which cancels it. A retryable failure
//! of one attempt while the other is in flight is set aside; if both fail, the last
//! failure goes through the retry rules.
//!
//! # Costs
//!
//! On the healthy path (one attempt, a good answer) the layer deposits into the budget
//! with one atomic add (no clock read: see [`budget`]), clones the request head for a
//! possible retry, and classifies the answer. With an empty request body and a head
//! without headers or extensions, nothing is allocated (the head's clone copies headers
//! and extensions when there are some; and a path-only URI parsed from a string allocates
//! once when first cloned, a detail of `bytes`, while an absolute URI, as clients send,
//! does not). Hedging adds a timer per request.
//!
//! # Observability
//!
//! Counters (from the `metrics` crate, labelled `dependency` with the layer's name; see
//! [`telemetry`] for the table and the HELP text): `fusebox_retry_attempts_total`,
//! `fusebox_retry_retries_total`, `fusebox_retry_hedges_total`,
//! `fusebox_retry_budget_exhausted_total`, `fusebox_retry_cutoff_refusals_total`. Each
//! attempt runs in a DEBUG span `retry_attempt` with its `attempt` number (1-based);
//! refusals are DEBUG events; both have the target `fusebox::retry`. The counter handles
//! are registered when the layer is built, so install the `metrics` recorder first.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use fusebox_retry::{ReplayBody, RetryBudgetLayer, RetryConfig};
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Empty;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let config = RetryConfig::builder()
//!     .name("inventory")
//!     .retry_ratio(0.2)
//!     .max_attempts(3)
//!     .base_delay(Duration::from_millis(10))
//!     .seed(Some(7))
//!     .build()?;
//! let layer = RetryBudgetLayer::new(config);
//!
//! // A dependency that is unavailable once, then answers.
//! let calls = Arc::new(AtomicUsize::new(0));
//! let counter = Arc::clone(&calls);
//! let dependency = service_fn(move |_: Request<ReplayBody<Empty<Bytes>>>| {
//!     let n = counter.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         let mut response = Response::new(());
//!         if n == 0 {
//!             *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
//!         }
//!         Ok::<_, std::convert::Infallible>(response)
//!     }
//! });
//!
//! let service = ServiceBuilder::new().layer(layer.clone()).service(dependency);
//! let request = Request::get("/stock/42").body(Empty::<Bytes>::new())?;
//! let response = service.oneshot(request).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! assert_eq!(calls.load(Ordering::SeqCst), 2);
//! assert_eq!(layer.budget().snapshot().retries, 1);
//! # Ok(())
//! # }
//! ```
//!
//! A runtime is needed only for retries and hedges (their timers are tokio's); the healthy
//! path reads tokio's clock, which paused-time tests control.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod budget;
mod config;
pub mod error;
pub mod future;
mod layer;
pub mod replay;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
mod section;
mod service;
pub mod telemetry;
#[cfg(test)]
mod tests;
pub mod verdicts;

pub use crate::backoff::{Backoff, SystemWallClock, WallClock};
pub use crate::budget::{BudgetSnapshot, RetryBudget};
pub use crate::config::{MAX_ATTEMPTS, RetryConfig, RetryConfigBuilder};
pub use crate::layer::{
    Reconfigure, RetryBudgetLayer, RetryBudgetLayerBuilder, RetryHandle, WeakRetryHandle,
};
pub use crate::replay::ReplayBody;
#[cfg(feature = "serde")]
pub use crate::section::RetrySection;
pub use crate::service::Retry;

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
