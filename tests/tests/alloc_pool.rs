//! A healthy call through a pool (`fusebox::pool`) allocates nothing beyond what tower's
//! p2c balancer allocates on its own.
//!
//! tower's `Balance` allocates on every call: its ready cache moves the endpoint it called
//! to its pending set, which takes a cancellation channel and a task node. So the pool's
//! gate is not that a call allocates nothing, but that the same calls through a bare
//! `Balance` over the same endpoints (with tower's own in-flight load, `PendingRequests`)
//! allocate exactly as much: the pool's breakers, readiness gate and load add nothing.
//!
//! Its own test binary, because it installs a counting global allocator (see
//! `fusebox_tests::alloc`); one `#[test]`, on a current-thread runtime on this thread.

use bytes::Bytes;
use fusebox::CircuitBreakerConfig;
use fusebox::pool::{PoolLayer, Status};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use http::{Request, Response};
use http_body_util::Empty;
use std::alloc::System;
use std::convert::Infallible;
use std::fmt::Debug;
use tower::Service;
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const ENDPOINTS: usize = 4;
const CALLS: usize = 10_000;
const WARM_UP: usize = 2_000;

/// What an endpoint answers.
type Answer = Result<Response<Empty<Bytes>>, Infallible>;

fn endpoint() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Answer>,
> + Clone {
    tower::service_fn(|_: Request<()>| std::future::ready(Ok(Response::new(Empty::new()))))
}

fn requests(n: usize) -> Vec<Request<()>> {
    alloc::requests(&[(http::Method::GET, "/items/42")], n, || ())
}

/// Allocations and reallocations of `CALLS` calls through `service`, after a warm-up.
fn measure<S>(rt: &tokio::runtime::Runtime, service: &mut S) -> (usize, usize)
where
    S: Service<Request<()>>,
    S::Error: Debug,
{
    rt.block_on(async {
        let mut discard = async |response| alloc::discard(response).await;
        alloc::drive(service, requests(WARM_UP), &mut discard).await;
        let measured = requests(CALLS);
        let region = Region::new(GLOBAL);
        alloc::drive(service, measured, &mut discard).await;
        let change = region.change();
        (change.allocations, change.reallocations)
    })
}

#[test]
fn a_healthy_pool_call_allocates_no_more_than_the_bare_balancer() {
    let rt = alloc::runtime();
    let _guard = rt.enter();

    let bare_endpoints: Vec<_> = (0..ENDPOINTS)
        .map(|_| PendingRequests::new(endpoint(), CompleteOnResponse::default()))
        .collect();
    let mut bare: Balance<_, Request<()>> = Balance::new(ServiceList::new(bare_endpoints));
    let (bare_allocations, bare_reallocations) = measure(&rt, &mut bare);

    let breaker = CircuitBreakerConfig::builder()
        .name("alloc")
        .count_window(100)
        .minimum_calls(100)
        .build()
        .expect("a valid breaker config");
    let layer = PoolLayer::builder(breaker).build();
    let handle = layer.handle();
    let mut pool = layer.balance(ServiceList::new(
        (0..ENDPOINTS).map(|_| endpoint()).collect::<Vec<_>>(),
    ));
    let (pool_allocations, pool_reallocations) = measure(&rt, &mut pool);

    let status = handle.status();
    assert_eq!(status.with_status(Status::Serving).len(), ENDPOINTS);
    assert!(
        bare_allocations > 0,
        "tower's balancer allocates per call: the comparison measures something"
    );
    assert!(
        pool_allocations <= bare_allocations && pool_reallocations <= bare_reallocations,
        "over {CALLS} calls the pool allocated {pool_allocations} times and reallocated \
         {pool_reallocations} times; the bare balancer {bare_allocations} and {bare_reallocations}"
    );
}
