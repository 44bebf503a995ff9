//! fusebox's circuit breaker: stop calling a dependency that is failing or slow, probe it
//! carefully, and resume when it has proven healthy.
//!
//! [`CircuitBreakerLayer`] wraps an HTTP or gRPC service (an outbound hyper client, a tonic
//! `Channel`, a handler's dependency). Every finished call is judged by the shared
//! Classifier of [`fusebox_classify`], per route: success, failure, slow, or ignored. The
//! breaker keeps the verdicts in a sliding window — the last N calls, or the last T in
//! buckets — and trips when the window holds at least `minimum_calls` and the failure rate
//! or slow-call rate reaches its threshold (compared in integers), or after a run of
//! consecutive failures.
//!
//! While OPEN it rejects every call at once with [`CircuitOpen`] (the breaker's name, its
//! key, and when to retry); after the open wait — a base, random jitter so that a fleet
//! does not probe in lockstep, and optional growth on repeated trips — it goes HALF_OPEN and
//! admits exactly `permitted_probes` calls. Any failed probe re-opens it; enough successful
//! probes close it. See [`state`] for the state machine and its operator states
//! (forced open, disabled, metrics-only), and [`BreakerHandle`] for operators.
//!
//! Results are stamped with the generation they were admitted in and discarded when it has
//! moved on, so a late success cannot close a breaker that a newer probe re-opened. A probe
//! whose future or body is dropped, or whose outcome is ignored, gives its permit back.
//! gRPC calls, whose status comes in the trailers, are recorded at the end of the stream.
//! [`judge`] is how a call is judged, open to a call known after the fact (a recorded call
//! replayed on virtual time is judged exactly as the live breaker judges it).
//!
//! A service that does not speak HTTP — a database pool, a cache client, any tower service —
//! gets the same breaker from [`CircuitBreakerLayer::plain`]: its `Ok` answers are
//! successes and its errors are judged by the classifier (see [`plain`]).
//!
//! The healthy path is cheap: admission while CLOSED is one atomic load, a fast success in a
//! full, clean count window is recorded by doing nothing (see [`store`]), and the clock is
//! read only when a route measures slowness or the window is time-based.
//!
//! # Example
//!
//! ```
//! use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, State};
//! use fusebox_classify::error::CircuitOpen;
//! use http::{Request, Response, StatusCode};
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let config = CircuitBreakerConfig::builder().name("payments")
//!     .count_window(10)
//!     .minimum_calls(4)
//!     .failure_rate_threshold(50)
//!     .open_wait(Duration::from_secs(5))
//!     .build()?;
//! let layer = CircuitBreakerLayer::new(config);
//! let handle = layer.handle();
//!
//! // A dependency that always answers 503.
//! let mut svc = ServiceBuilder::new().layer(layer).service_fn(|_req: Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(
//!         Response::builder().status(StatusCode::SERVICE_UNAVAILABLE).body(String::new()).unwrap(),
//!     )
//! });
//!
//! for _ in 0..4 {
//!     let response = svc.ready().await?.call(Request::new(String::new())).await?;
//!     assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
//! }
//! assert_eq!(handle.state(), State::Open);
//!
//! let err = svc.ready().await?.call(Request::new(String::new())).await.unwrap_err();
//! let open = err.downcast_ref::<CircuitOpen>().expect("rejected by the breaker");
//! assert_eq!(open.breaker(), "payments");
//! assert!(open.retry_after() > Duration::from_secs(4));
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod breaker;
mod config;
pub mod events;
mod future;
pub mod judge;
mod keyed;
mod layer;
pub mod plain;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
mod section;
mod service;
pub mod sim;
pub mod spread;
pub mod state;
pub mod store;
pub mod window;

pub use crate::breaker::{BreakerHandle, WeakBreakerHandle};

/// What the breaker's stages hold for a call ([`BreakerStage`], [`KeyedStage`],
/// [`PlainStage`]; see `fusebox_classify::stage`): the admitted call's
/// [`Guard`](compose::Guard), what it knows of the call, and the body's end-of-stream
/// recorder. [`CircuitBreaker::admit`] hands out a guard for a caller that drives the
/// breaker by hand; using the layer needs none of them, and their shape may change in any
/// release.
pub mod compose {
    pub use crate::breaker::{EosRecorder, Facts, Guard, PlainCall};
    use crate::keyed::KeyFn;
    use crate::store::MakeStore;
    use crate::{BreakerStage, KeyedStage};

    /// Makes `dependency` — a dependency-wide breaker gated by the keys' spread
    /// ([`KeyedBreakerHandle::spread_gate`](crate::KeyedBreakerHandle::spread_gate)) — run
    /// in the guards of `keys`' calls instead of as a stage of its own: each call of `keys`
    /// asks `dependency` first (an open dependency refuses without asking the keys), the
    /// one guard holds both breakers' permits, and `dependency` is told each answer after
    /// the key's breaker, a refusal by a key's breaker included — what the two breakers
    /// stacked by hand, `dependency` outermost, do. Every service of `keys`' layer
    /// (they share its keys) is gated from then on; call it once, before the first call.
    ///
    /// Returns `false`, changing nothing, if `keys` is gated already, or if `dependency`
    /// was not built with `keys`' route table (the guard holds the call's route and
    /// idempotency as that table resolves them: build both with `.routes(table.clone())`,
    /// or neither with one; [`RouteTable::same_table`](fusebox_classify::RouteTable::same_table)).
    ///
    /// The two breakers also share the call's start, from which both measure slowness. `dependency` judges each answer with its own
    /// classifier and `count_overloaded`, but a guard finished by hand
    /// ([`Guard::finish`]) tells it the outcome given there; and only `keys`' exposed
    /// verdict is left in a response's extensions.
    ///
    /// The `Policy` of the `fusebox` crate runs its dependency-wide breaker this way: its
    /// future and response body then hold one guard for both breakers, whereas a stage of
    /// its own would need room for a second guard in every policy's future and body,
    /// gated or not.
    pub fn gate_keys<F: KeyFn, C: fusebox_classify::Classifier, M: MakeStore>(
        keys: &KeyedStage<F, C, M>,
        dependency: &BreakerStage<C, M::Store>,
    ) -> bool {
        keys.gate_with(dependency)
    }
}
pub use crate::config::{
    CircuitBreakerConfig, CircuitBreakerConfigBuilder, OnClose, UNNAMED, WindowConfig,
};
pub use crate::events::{BreakerEvent, EventKind};
pub use crate::future::{ResponseBody, ResponseFuture};
pub use crate::keyed::{
    AnswerKeyed, ByHost, ByRoute, KeyFn, KeyedBreakerHandle, KeyedCircuitBreaker,
    KeyedCircuitBreakerLayer, KeyedResponseFuture, KeyedStage, RequestHead, WeakKeyedBreakerHandle,
    host_key, host_of,
};
pub use crate::layer::{CircuitBreakerLayer, CircuitBreakerLayerBuilder};
pub use crate::plain::{PlainCircuitBreaker, PlainCircuitBreakerLayer, PlainFuture, PlainStage};
#[cfg(feature = "serde")]
pub use crate::section::CircuitBreakerSection;
pub use crate::service::{BreakerStage, CircuitBreaker};
pub use crate::state::{Command, Reason, Snapshot, State, Transition};
pub use crate::store::{InMemory, MakeStore, MemoryStore, Reconfigure, Store};
pub use crate::window::WindowTotals;
pub use fusebox_classify::error::CircuitOpen;

#[cfg(test)]
mod tests;

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
