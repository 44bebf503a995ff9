//! Healthy-path overhead of fusebox's `Retry` against tower's `Retry` with its `TpsBudget`
//! and a bare service, in the same run.
//!
//! Run with: `cargo bench -p fusebox-benches --bench retry`
//!
//! Every variant builds its request (an empty-body GET with an absolute URI, as a client
//! sends), checks readiness, calls, and awaits a 200 that is ready at once, on one
//! current-thread runtime built once (`iter_custom`). What differs is only the middleware:
//!
//! - `bare`: none;
//! - `tower`: `tower::retry::Retry` with a policy that clones the request up front,
//!   deposits into a `TpsBudget` on success and withdraws on a 5xx (tower's documented
//!   pattern);
//! - `fusebox`: fusebox's `Retry` with its defaults (route lookup, budget deposit,
//!   request-head clone for a possible replay, classification of the answer).

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_benches::services::{TowerRetryPolicy, URI, ready_ok};
use fusebox_retry::{RetryBudgetLayer, RetryConfig};
use http::{Request, Uri};
use http_body_util::Empty;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Times `iters` calls of `service`, each with a fresh request.
fn run<S>(rt: &Runtime, service: &S, iters: u64) -> Duration
where
    S: Service<Request<Empty<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut service = service.clone();
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            let mut request = Request::new(Empty::new());
            *request.uri_mut() = Uri::from_static(URI);
            let ready = service.ready().await.expect("ready");
            let response = ready
                .call(black_box(request))
                .await
                .expect("a healthy call");
            black_box(response);
        }
        start.elapsed()
    })
}

fn retry(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();

    let fusebox = RetryBudgetLayer::new(RetryConfig::default()).layer(ready_ok());
    let policy = TowerRetryPolicy::new();
    let tower_retry = tower::retry::RetryLayer::new(policy).layer(ready_ok());

    let mut group = c.benchmark_group("retry");
    let base = ready_ok();
    group.bench_function("bare", |b| b.iter_custom(|iters| run(&rt, &base, iters)));
    group.bench_function("tower", |b| {
        b.iter_custom(|iters| run(&rt, &tower_retry, iters))
    });
    group.bench_function("fusebox", |b| {
        b.iter_custom(|iters| run(&rt, &fusebox, iters))
    });
    group.finish();
}

criterion_group!(benches, retry);
criterion_main!(benches);
