//! Healthy-path overhead of fusebox's concurrency limit against tower's own
//! `ConcurrencyLimit` and a bare service, in the same run.
//!
//! Run with: `cargo bench -p fusebox-benches --bench limit`
//!
//! Every variant builds its request, checks readiness, calls, and awaits a response that is
//! ready at once, on runtimes built once (`iter_custom`). The limit (64) is never reached:
//! this is the cost a healthy call pays. `limit/*` runs one task on a current-thread
//! runtime; `limit_2_tasks/*` runs two tasks on a two-worker runtime, each with its own
//! clone of the service sharing one limit, so the permit counter's cache line moves between
//! cores as it does in a server.
//!
//! - `bare`: no middleware.
//! - `tower`: `tower::limit::ConcurrencyLimit` (a permit from a `tokio::sync::Semaphore`
//!   taken in `poll_ready`, released when the response future completes).
//! - `fusebox`: fixed limit, fail fast (one compare-and-swap in, one subtraction out).
//! - `fusebox_queue`: the same with a queue configured (plus a read of the waiter count).
//! - `fusebox_aimd`: an adaptive AIMD limit (two clock reads, a classification and a short
//!   critical section per call).

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_limit::{AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitLayer};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const LIMIT: usize = 64;

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The bare service: answers at once, allocates nothing.
fn bare() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Reply>,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<()>| std::future::ready(Ok(Response::new(Empty::new()))))
}

/// `iters` calls of `service`, each with a fresh request.
async fn calls<S>(service: &mut S, iters: u64)
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..iters {
        let ready = service.ready().await.expect("ready");
        let response = ready
            .call(black_box(Request::new(())))
            .await
            .expect("a healthy call");
        black_box(response);
    }
}

/// Times `iters` calls on one task.
fn run<S>(rt: &Runtime, service: &S, iters: u64) -> Duration
where
    S: Service<Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut service = service.clone();
    rt.block_on(async {
        let start = Instant::now();
        calls(&mut service, iters).await;
        start.elapsed()
    })
}

/// Times `iters` calls split between two tasks, each with its own clone of `service`.
fn run_two<S>(rt: &Runtime, service: &S, iters: u64) -> Duration
where
    S: Service<Request<()>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: std::fmt::Debug,
{
    rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = [iters / 2, iters - iters / 2]
            .into_iter()
            .map(|n| {
                let mut service = service.clone();
                tokio::spawn(async move { calls(&mut service, n).await })
            })
            .collect();
        for task in tasks {
            task.await.expect("a bench task");
        }
        start.elapsed()
    })
}

fn fixed() -> ConcurrencyLimitLayer {
    ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .max_concurrency(LIMIT)
            .build()
            .expect("a valid config"),
    )
}

fn limit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();

    let tower_limit = tower::limit::ConcurrencyLimitLayer::new(LIMIT).layer(bare());
    let fusebox = fixed().layer(bare());
    let queued = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .max_concurrency(LIMIT)
            .queue(LIMIT, Duration::from_millis(50))
            .build()
            .expect("a valid config"),
    )
    .layer(bare());
    let aimd = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .aimd(AimdConfig::new().initial_limit(LIMIT))
            .build()
            .expect("a valid config"),
    )
    .layer(bare());

    let mut group = c.benchmark_group("limit");
    let base = bare();
    group.bench_function("bare", |b| b.iter_custom(|iters| run(&rt, &base, iters)));
    group.bench_function("tower", |b| {
        b.iter_custom(|iters| run(&rt, &tower_limit, iters))
    });
    group.bench_function("fusebox", |b| {
        b.iter_custom(|iters| run(&rt, &fusebox, iters))
    });
    group.bench_function("fusebox_queue", |b| {
        b.iter_custom(|iters| run(&rt, &queued, iters))
    });
    group.bench_function("fusebox_aimd", |b| {
        b.iter_custom(|iters| run(&rt, &aimd, iters))
    });
    group.finish();

    let rt2 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("limit_2_tasks");
    group.bench_function("bare", |b| {
        b.iter_custom(|iters| run_two(&rt2, &base, iters))
    });
    group.bench_function("tower", |b| {
        b.iter_custom(|iters| run_two(&rt2, &tower_limit, iters))
    });
    group.bench_function("fusebox", |b| {
        b.iter_custom(|iters| run_two(&rt2, &fusebox, iters))
    });
    group.finish();
}

criterion_group!(benches, limit);
criterion_main!(benches);
