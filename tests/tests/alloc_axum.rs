//! A Policy on an axum route costs the route no allocation of its own.
//!
//! `Router::route_layer` boxes whatever layer it is given (one clone of the boxed service
//! and one boxed future per request, axum's cost for any layer), so the baseline is the
//! same route behind tower's `Identity` layer: with a Policy of breaker, limit and timeout
//! the route must allocate exactly as much. In particular the Policy's glue must not box
//! the request body (the retry layer's `ReplayBody`) or the response body (its
//! `PolicyBody`) into axum `Body`s again when they only pass through.
//!
//! Its own test binary, because it installs a counting global allocator.

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use fusebox::axum::PolicyLayer;
use fusebox::{CircuitBreakerConfig, Policy, RetryConfig};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use http::Request;
use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;
use tower::layer::util::Identity;
use tower::util::MapRequestLayer;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 2_000;
const WARM_UP: usize = 200;

fn requests(n: usize) -> Vec<Request<Body>> {
    (0..n)
        .map(|i| {
            Request::get(format!("/users/{i}"))
                .body(Body::empty())
                .expect("a valid request")
        })
        .collect()
}

async fn user() -> &'static str {
    "user"
}

/// Allocations per call of `router` (after a warm-up), as (allocations, reallocations).
///
/// Measured over two batches of calls, keeping the one with fewer allocations: on a loaded
/// machine the first batch of the process's first router now and then sees four more
/// allocations than its calls make (the second batch, never), made once by what runs
/// beneath the route, not per call.
fn per_call(router: Router) -> (usize, usize) {
    let mut router = router.with_state(());
    let rt = alloc::runtime();
    let warm_up = requests(WARM_UP);
    let batches = [requests(CALLS), requests(CALLS)];
    rt.block_on(async {
        alloc::drive(&mut router, warm_up, &mut alloc::discard).await;
        let mut changes = Vec::with_capacity(batches.len());
        for batch in batches {
            let region = Region::new(GLOBAL);
            alloc::drive(&mut router, batch, &mut alloc::discard).await;
            changes.push(region.change());
        }
        let change = changes
            .into_iter()
            .min_by_key(|change| change.allocations)
            .expect("two batches");
        assert_eq!(change.allocations % CALLS, 0, "{change:?}");
        (change.allocations / CALLS, change.reallocations / CALLS)
    })
}

fn route() -> Router {
    Router::new().route("/users/{id}", get(user))
}

fn policy() -> fusebox::PolicyBuilder {
    Policy::builder("alloc-axum")
        .timeout(Duration::from_millis(250))
        .concurrency_limit(64)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("alloc-axum")
                .count_window(100)
                .minimum_calls(20),
        )
}

// One test: the counting allocator sees every thread, so nothing may run beside it.
#[test]
fn a_policy_on_a_route_allocates_nothing_of_its_own() {
    let baseline = per_call(route().route_layer(Identity::new()));
    let with_policy =
        per_call(route().route_layer(PolicyLayer::new(policy().build().expect("a valid policy"))));
    assert_eq!(
        with_policy, baseline,
        "breaker, limit and timeout: allocations per call with the policy vs any layer"
    );

    // A policy with no layer at all: the glue alone.
    let bare_policy = per_call(route().route_layer(PolicyLayer::new(
        Policy::builder("none").build().expect("a valid policy"),
    )));
    assert_eq!(bare_policy, baseline, "a policy with no layer");

    // The retry layer keeps a copy of the request head to send again: its headers and
    // extensions (axum's matched path) are copied, as any retry layer must. Nothing else:
    // not its empty body (the handler gets an empty axum body that allocates nothing), and
    // not the response's. The yardstick is a layer that copies the head and does nothing.
    let copies_the_head = per_call(route().route_layer(MapRequestLayer::new(
        |request: Request<Body>| {
            let (parts, body) = request.into_parts();
            black_box(parts.clone());
            Request::from_parts(parts, body)
        },
    )));
    let with_retry = per_call(
        route().route_layer(PolicyLayer::new(
            policy()
                .retry_budget(RetryConfig::builder().name("alloc-axum"))
                .build()
                .expect("a valid policy"),
        )),
    );
    assert_eq!(
        with_retry, copies_the_head,
        "retry, breaker, limit and timeout: allocations per call vs a layer that copies the head"
    );
}
