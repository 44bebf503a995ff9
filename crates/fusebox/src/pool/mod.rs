//! A circuit breaker per endpoint of a load-balanced pool, with a cap on ejection.
//!
//! A dependency served by several replicas rarely fails all at once: one host runs out of
//! disk, one zone's network flaps. One breaker for the whole dependency would open for
//! everyone because of one replica, or never notice it among the healthy ones. A
//! [`PoolLayer`] wraps a [`tower::discover::Discover`] stream so that every endpoint it
//! inserts gets its own fusebox breaker — built from one [`CircuitBreakerConfig`] and one
//! route table, named by the dependency and labelled with the endpoint's key — and hands
//! the endpoints to tower's power-of-two-choices [`Balance`](tower::balance::p2c::Balance).
//!
//! An endpoint whose breaker is OPEN is **ejected**: its `poll_ready` is pending, with a
//! tokio timer for the end of its open wait, so the balancer's ready cache moves it aside
//! and picks among the others; when the wait ends it is ready again, and while its breaker
//! is HALF_OPEN it is ready only while the probe budget has room, so the probes go to that
//! endpoint and nowhere else. A successful probe run closes the breaker and the endpoint
//! serves again. A probe whose caller gives up before the answer (a timeout above the
//! balancer, say) goes back to the budget, and the endpoint wakes the balancer so that
//! another call can probe at once — with every endpoint out, nothing else would.
//!
//! # How much may go
//!
//! Ejecting is a bet that the rest of the pool can carry the load. Two limits keep the bet
//! small, both Envoy's outlier-detection defaults:
//!
//! - **The cap** ([`PoolConfigBuilder::max_ejection_percent`], default 10 %): at most that
//!   share of the pool is out at once, rounded down, and at least one endpoint (so that a
//!   pool of fewer than ten endpoints can eject at all). A tripped endpoint beyond the cap
//!   stays in: the calls its breaker rejects are sent anyway, unrecorded (its breaker's
//!   series count them as `not_permitted`: the breaker's view), while its breaker keeps
//!   cycling through its open wait and probes, which are recorded and close it when they
//!   succeed. It is reported as [`Status::WouldEject`] (a [`PoolEvent`], a `tracing`
//!   warning, and the status), and is ejected when room frees up while it is still
//!   tripped.
//! - **The healthy panic** ([`PoolConfigBuilder::panic_threshold`], default 50 %): when
//!   fewer than that share of the endpoints have a closed breaker, the pool ejects nothing
//!   and uses every endpoint until enough have recovered — spreading the load over a sick
//!   pool beats crushing the few healthy endpoints left.
//!
//! With an [`endpoint_capacity`](PoolConfigBuilder::endpoint_capacity) (how many calls
//! one endpoint takes at once), or with headroom measured by the endpoints' concurrency
//! limits ([below](#measured-headroom)), a tripped endpoint is also kept in when the
//! endpoints left serving lack the headroom for its share of the calls in flight; the
//! event carries both numbers ([`WouldEject::NoHeadroom`]). The headroom decides whether
//! an endpoint goes out, not whether it stays out: once out, its calls land on the others
//! and use up their headroom, and judging it again would let it back in and send it out
//! by turns. It returns when its breaker closes.
//!
//! An operator's forced open ([`BreakerHandle::force_open`](crate::BreakerHandle::force_open)
//! on [`PoolHandle::breaker`]) is obeyed whatever the cap and even in panic; it counts
//! towards the cap first. Operator states that let calls through (disabled,
//! metrics-only) count as healthy.
//!
//! The pool decides again whenever one of its breakers moves (a transition rings the
//! pool) or an endpoint joins or leaves, the next time the balancer polls it; an endpoint
//! tripped while its call was being dispatched may reject that one call with
//! [`CircuitOpen`](crate::error::CircuitOpen) before the pool has decided.
//!
//! # Measured headroom
//!
//! A fixed capacity is a guess that goes stale: an endpoint behind an adaptive limit takes
//! fewer calls after it backed off, and another user of the same limit takes its permits.
//! When each endpoint's calls go through a fusebox concurrency limit
//! ([`ConcurrencyLimitLayer`](crate::limit::ConcurrencyLimitLayer), fixed or adaptive),
//! build the pool's stream with [`PoolLayer::measured`] (or
//! [`PoolLayer::balance_measured`]) instead of [`PoolLayer::balance`]: it takes each
//! inserted endpoint's [`LimitHandle`](crate::limit::LimitHandle) through the
//! [`EndpointLimit`] trait (implemented for fusebox's
//! [`ConcurrencyLimit`](crate::limit::ConcurrencyLimit) service), and an endpoint's
//! headroom is then its limit's current limit minus the limit's calls in flight, read when
//! the pool decides:
//!
//! - the share an ejected endpoint leaves is, as with a capacity, the pool's calls in
//!   flight over the endpoints serving (the ejected one included), rounded up; the
//!   survivors' headroom is the sum of theirs;
//! - an endpoint without a limit (its `EndpointLimit` says `None`) counts its
//!   `endpoint_capacity` minus its calls in flight, or, with no capacity either, as having
//!   room: its load is not known, and the pool does not guess it;
//! - the limits are read when the pool decides (a breaker moved, the pool changed, or
//!   [`PoolHandle::status`] was asked), never on a call: a tripped endpoint kept in for want
//!   of headroom goes out at the next decision after room appears.
//!
//! The trait, rather than a function of the endpoint's key given to the builder, because
//! the handle then comes from the very service the discovery stream inserted: nothing to
//! register by key, no handle of a removed or replaced endpoint left behind, and a service
//! that holds its limit further in (a limit around a client, inside another wrapper)
//! implements the trait to hand the limit back.
//!
//! ```
//! use fusebox::CircuitBreakerConfig;
//! use fusebox::limit::{AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitLayer};
//! use fusebox::pool::PoolLayer;
//! use http::{Request, Response};
//! use std::convert::Infallible;
//! use tower::discover::ServiceList;
//! use tower::Layer;
//!
//! # fn main() -> Result<(), fusebox::ConfigError> {
//! let limit = || -> Result<ConcurrencyLimitLayer, fusebox::ConfigError> {
//!     Ok(ConcurrencyLimitLayer::new(
//!         ConcurrencyLimitConfig::builder()
//!             .name("inventory")
//!             .aimd(AimdConfig::new().initial_limit(20).max_limit(100))
//!             .build()?,
//!     ))
//! };
//! let client = tower::service_fn(|_: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::new()))
//! });
//! let endpoints = ServiceList::new(vec![limit()?.layer(client), limit()?.layer(client)]);
//! let pool = PoolLayer::builder(CircuitBreakerConfig::builder().name("inventory").build()?).build();
//! let balance = pool.balance_measured::<_, Request<String>>(endpoints);
//! # let _ = balance;
//! # Ok(())
//! # }
//! ```
//!
//! # Load
//!
//! An endpoint's [`Load`](tower::load::Load) is its calls in flight, each counted from its
//! admission until its response future completes or is dropped (what tower's
//! `PendingRequests` counts with `CompleteOnResponse`). Not `PeakEwma`:
//! the breaker already answers for latency and failures (a slow endpoint trips on its
//! slow-call rate), a latency average would read the clock on every call, and calls in
//! flight are what the capacity check compares with the endpoints' capacity.
//!
//! # Cost
//!
//! On the healthy path the pool adds two atomic loads to each `poll_ready` (the
//! endpoint's mode and whether any breaker moved) and one reference count to each call
//! (its load): no lock, no allocation, no formatting (`tests/tests/alloc_pool.rs`). A call
//! through the pool costs what a call through tower's balancer over endpoints that each
//! have a breaker costs (the `pool` bench; `docs/performance.md`, section 8).
//! The decision — which endpoints are out — is made again only when a breaker moves or
//! the pool changes, under a lock, on the task that polls the balancer.
//!
//! # Metrics and status
//!
//! Each endpoint's breaker records the breaker's series (see
//! [`fusebox_breaker::events`]) labelled `dependency` and `key` (the endpoint's key), as a
//! keyed breaker's keys do: their number is the pool's size, and an endpoint removed from
//! the pool takes its series with it. The pool adds gauges labelled `dependency`:
//!
//! | name | meaning |
//! |---|---|
//! | `fusebox_pool_endpoints` | endpoints in the pool |
//! | `fusebox_pool_ejected` | endpoints out now |
//! | `fusebox_pool_max_ejected` | the cap |
//! | `fusebox_pool_would_eject` | tripped endpoints kept in |
//! | `fusebox_pool_panic` | 1 while in panic |
//!
//! [`PoolHandle::status`] lists every endpoint as serving, ejected, probing or would-eject,
//! with its breaker's state and calls in flight, and the ejected count and the cap.
//!
//! # Example
//!
//! Three endpoints, one of them answering 503: its breaker trips, the pool ejects it and
//! the balancer spreads the calls over the other two.
//!
//! ```
//! use fusebox::CircuitBreakerConfig;
//! use fusebox::pool::{PoolLayer, Status};
//! use http::{Request, Response, StatusCode};
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::discover::ServiceList;
//! use tower::{Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let breaker = CircuitBreakerConfig::builder()
//!     .name("inventory")
//!     .count_window(4)
//!     .minimum_calls(4)
//!     .open_wait(Duration::from_secs(10))
//!     .open_wait_jitter(Duration::ZERO)
//!     .build()?;
//! let pool = PoolLayer::builder(breaker).build();
//! let handle = pool.handle();
//!
//! let endpoint = |status: StatusCode| {
//!     tower::service_fn(move |_: Request<String>| async move {
//!         Ok::<_, Infallible>(Response::builder().status(status).body(String::new()).unwrap())
//!     })
//! };
//! let endpoints = ServiceList::new(vec![
//!     endpoint(StatusCode::OK),
//!     endpoint(StatusCode::OK),
//!     endpoint(StatusCode::SERVICE_UNAVAILABLE),
//! ]);
//! let mut balance = pool.balance(endpoints);
//!
//! for _ in 0..100 {
//!     let _ = balance.ready().await?.call(Request::new(String::new())).await?;
//! }
//! let status = handle.status();
//! assert_eq!(status.with_status(Status::Ejected), ["2"]);
//! assert_eq!((status.ejected, status.max_ejected), (1, 1));
//!
//! // Ejected: every call now goes to the two healthy endpoints.
//! for _ in 0..20 {
//!     let response = balance.ready().await?.call(Request::new(String::new())).await?;
//!     assert_eq!(response.status(), StatusCode::OK);
//! }
//! # Ok(())
//! # }
//! ```

/// The `tracing` target of the pool's events: an endpoint ejected, kept in past the cap,
/// back in the pool, and the healthy-panic threshold crossed.
pub const TARGET: &str = crate::POOL_TARGET;

mod config;
mod endpoint;
mod layer;
mod limit;
mod shared;
mod status;

pub use self::config::{
    DEFAULT_MAX_EJECTION_PERCENT, DEFAULT_PANIC_THRESHOLD, PoolConfig, PoolConfigBuilder, absorbs,
    in_panic, max_ejected, share,
};
pub use self::endpoint::{Admitted, Endpoint, EndpointBody, EndpointFuture, EndpointStage};
pub use self::layer::{PoolDiscover, PoolLayer, PoolLayerBuilder};
pub use self::limit::EndpointLimit;
pub use self::shared::{EJECTED, ENDPOINTS, FAMILIES, MAX_EJECTED, PANIC, WOULD_EJECT, describe};
pub use self::status::{
    EndpointStatus, PoolEvent, PoolEventKind, PoolHandle, PoolStatus, Status, WouldEject,
};

#[cfg(doc)]
use fusebox_breaker::CircuitBreakerConfig;
