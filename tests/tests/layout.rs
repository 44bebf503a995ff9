//! The size of every public future and response of fusebox's services, over one inner
//! service, so that a layout change shows up as a failing test rather than as a slower
//! call: the compiler copies futures and responses by value, inline up to 128 bytes and
//! with `memcpy` beyond, and a future grows with every layer around it.
//!
//! Each figure is what a layer adds to the inner service's future or response, on a 64-bit
//! target. A change that moves one is a decision: update the figure with the reason.

#![cfg(target_pointer_width = "64")]

use bytes::Bytes;
use fusebox::breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox::limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};
use fusebox::retry::{RetryBudgetLayer, RetryConfig};
use fusebox::timeout::{TimeoutConfig, TimeoutLayer};
use fusebox::{KeyBy, Policy};
use http::{Request, Response};
use http_body_util::{Empty, Full};
use std::convert::Infallible;
use std::future::Ready;
use std::mem::size_of;
use std::time::Duration;
use tower::{Layer, Service};

type Req = Request<Full<Bytes>>;
type Answer = Response<Empty<Bytes>>;
type Fut = Ready<Result<Answer, Infallible>>;
/// The inner service, for requests with bodies of type `B` (a retry replays its requests'
/// bodies: the service inside it takes a `ReplayBody`).
fn inner<B>() -> tower::util::ServiceFn<fn(Request<B>) -> Fut> {
    tower::service_fn(
        (|_| std::future::ready(Ok(Response::new(Empty::new())))) as fn(Request<B>) -> Fut,
    )
}

type Replayed = fusebox::retry::ReplayBody<Full<Bytes>>;

/// What `service` adds to the inner service's future and to its response.
fn added<S: Service<Req>>(_: &S) -> (usize, usize) {
    (
        size_of::<S::Future>() - size_of::<Fut>(),
        size_of::<S::Response>() - size_of::<Answer>(),
    )
}

fn breaker() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("layout")
        .build()
        .expect("a valid breaker")
}

fn timeout() -> TimeoutConfig {
    TimeoutConfig::builder()
        .default_timeout(Duration::from_secs(1))
        .build()
        .expect("a valid timeout")
}

/// Bytes each service adds to the inner future and to the response, in that order.
const EXPECTED: [(&str, (usize, usize)); 10] = [
    // The call's guard (the breaker's lease, the permit, the call's route and start, when it
    // turns slow) in the future; the end-of-stream recorder, which carries the guard on, in
    // the response.
    ("breaker", (88, 96)),
    ("keyed breaker", (88, 96)),
    // No body to watch: the response passes through as the inner service's.
    ("plain breaker", (56, 0)),
    // A permit and an adaptive call's record; the body keeps the permit.
    ("limit", (16, 16)),
    // tokio's `Sleep` (created on the first poll) and the bound: the route's name, the
    // instant and the limit.
    ("timeout", (160, 0)),
    ("body timeout", (48, 152)),
    // The request's body (kept for a replay), the attempt's span, the budget's lease, the
    // call's route and deadline, the replay state; the hedge and the backoff's timer are
    // boxed, one pointer each.
    ("retry budget", (456, 0)),
    // The retry around the fused breaker, limit and timeout stage, and the call's span
    // (`policy_call`: boxed, so one pointer, null unless a subscriber wants it). A keyed
    // breaker's dependency-wide gate (`PolicyBuilder::key_spread`) runs in the keyed
    // breaker's guard, which has room for the gate's permit at its size above: as a stage
    // of its own it made every policy's future 88 bytes larger (a second guard) and its
    // body 96 (a second recorder), a spread or not, since a policy's type does not depend
    // on its configuration (856 → 768, 208 → 112).
    ("full policy", (768, 112)),
    ("keyed policy", (768, 112)),
    ("keyed policy with a spread", (768, 112)),
];

#[test]
fn what_each_layer_adds_to_the_future_and_the_response() {
    let mut measured = Vec::new();
    let layer = CircuitBreakerLayer::new(breaker());
    measured.push(("breaker", added(&layer.layer(inner()))));

    let keyed = CircuitBreakerLayer::builder(breaker())
        .build_keyed(fusebox::breaker::ByHost)
        .expect("a keyed breaker");
    measured.push(("keyed breaker", added(&keyed.layer(inner()))));

    let plain = CircuitBreakerLayer::new(breaker()).plain();
    let plain = plain.layer(inner());
    measured.push(("plain breaker", added(&plain)));

    let limit = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .max_concurrency(8)
            .build()
            .expect("a valid limit"),
    );
    measured.push(("limit", added(&limit.layer(inner()))));

    let timeouts = TimeoutLayer::new(timeout());
    measured.push(("timeout", added(&timeouts.layer(inner()))));
    measured.push(("body timeout", added(&timeouts.body_layer().layer(inner()))));

    let retry = RetryBudgetLayer::new(RetryConfig::default());
    measured.push(("retry budget", added(&retry.layer(inner::<Replayed>()))));

    let policy = Policy::builder("layout")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .concurrency_limit(8)
        .timeout(Duration::from_secs(1))
        .retry_budget(RetryConfig::builder())
        .build()
        .expect("a valid policy");
    measured.push(("full policy", added(&policy.layer(inner::<Replayed>()))));

    let keyed_policy = Policy::builder("layout")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Host)
        .build()
        .expect("a valid policy");
    measured.push((
        "keyed policy",
        added(&keyed_policy.layer(inner::<Replayed>())),
    ));

    let spread_policy = Policy::builder("layout")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Host)
        .key_spread(fusebox::KeySpread::default())
        .build()
        .expect("a valid policy");
    measured.push((
        "keyed policy with a spread",
        added(&spread_policy.layer(inner::<Replayed>())),
    ));

    assert_eq!(measured, EXPECTED);
}
