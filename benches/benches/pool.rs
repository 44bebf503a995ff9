//! Healthy-path overhead of a pool (`fusebox::pool`: a breaker per endpoint in front of
//! tower's p2c balancer) against tower's bare `Balance` over the same endpoints, in the
//! same run.
//!
//! Run with: `cargo bench -p fusebox-benches --bench pool`
//!
//! Four endpoints that answer at once; every variant builds its request, checks readiness,
//! calls, and awaits the response, on a current-thread runtime built once (`iter_custom`).
//! With `FUSEBOX_BENCH_CPU_TIME` set, it times the thread's CPU time (group `pool_cpu`).
//!
//! - `bare`: one endpoint, no balancer.
//! - `tower_balance`: tower's p2c `Balance` over the four, each with tower's in-flight load
//!   (`PendingRequests`): what the pool is built on, and what it must add little to.
//! - `tower_balance_breakers`: the same with a fusebox `CircuitBreakerLayer` around each
//!   endpoint (inside tower's `PendingRequests`), nothing gating readiness: what a
//!   breaker per endpoint costs without the pool.
//! - `pool`: `PoolLayer::balance` over the four: each endpoint behind its own breaker,
//!   its readiness gated by the pool, its load its calls in flight.
//!
//! The breakers have the default configuration (a count window, no slow-call tracking).

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox::pool::PoolLayer;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::{Layer, Service, ServiceExt};

const ENDPOINTS: usize = 4;

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// An endpoint: answers at once, allocates nothing.
fn endpoint() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Reply>,
> + Clone {
    tower::service_fn(|_: Request<()>| std::future::ready(Ok(Response::new(Empty::new()))))
}

/// Times `iters` calls of `service`, each with a fresh request.
fn run<S>(rt: &Runtime, service: &mut S, iters: u64) -> Duration
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    rt.block_on(async {
        // Wall time, or this thread's CPU time (the runtime runs on it) when measuring CPU
        // time on a shared machine (see `fusebox_benches::cpu_time`).
        let (wall, cpu) = (Instant::now(), fusebox_benches::thread_cpu_time());
        for _ in 0..iters {
            let ready = service.ready().await.expect("ready");
            let response = ready
                .call(black_box(Request::new(())))
                .await
                .expect("a healthy call");
            black_box(response);
        }
        if fusebox_benches::cpu_time() {
            fusebox_benches::thread_cpu_time().saturating_sub(cpu)
        } else {
            wall.elapsed()
        }
    })
}

fn bench(c: &mut Criterion) {
    let rt = fusebox_benches::current_thread();
    let _guard = rt.enter();
    let mut group = c.benchmark_group(fusebox_benches::group_name("pool"));

    let mut bare = endpoint();
    group.bench_function("bare", |b| {
        b.iter_custom(|iters| run(&rt, &mut bare, iters))
    });

    let mut tower_balance: Balance<_, Request<()>> = Balance::new(ServiceList::new(
        (0..ENDPOINTS)
            .map(|_| PendingRequests::new(endpoint(), CompleteOnResponse::default()))
            .collect::<Vec<_>>(),
    ));
    group.bench_function("tower_balance", |b| {
        b.iter_custom(|iters| run(&rt, &mut tower_balance, iters))
    });

    let breaker = CircuitBreakerConfig::builder()
        .name("bench")
        .build()
        .expect("a valid breaker config");
    let mut breakers: Balance<_, Request<()>> = Balance::new(ServiceList::new(
        (0..ENDPOINTS)
            .map(|i| {
                let layer = CircuitBreakerLayer::builder(breaker.clone())
                    .key(i.to_string())
                    .build()
                    .expect("an in-memory breaker");
                PendingRequests::new(layer.layer(endpoint()), CompleteOnResponse::default())
            })
            .collect::<Vec<_>>(),
    ));
    group.bench_function("tower_balance_breakers", |b| {
        b.iter_custom(|iters| run(&rt, &mut breakers, iters))
    });

    let layer = PoolLayer::builder(breaker).build();
    let mut pool = layer.balance(ServiceList::new(
        (0..ENDPOINTS).map(|_| endpoint()).collect::<Vec<_>>(),
    ));
    group.bench_function("pool", |b| {
        b.iter_custom(|iters| run(&rt, &mut pool, iters))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
