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
use fusebox_retry::{RetryBudgetLayer, RetryConfig};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Layer, Service, ServiceExt};

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The bare service: answers 200 at once, allocates nothing.
fn bare<B>() -> impl Service<
    Request<B>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Reply>,
> + Clone {
    tower::service_fn(|_: Request<B>| std::future::ready(Ok(Response::new(Empty::new()))))
}

/// tower's retry policy over a `TpsBudget`, as tower's documentation builds one.
#[derive(Clone)]
struct TowerPolicy {
    budget: Arc<TpsBudget>,
    attempts: usize,
}

impl<B: Clone, R, E> tower::retry::Policy<Request<B>, Response<R>, E> for TowerPolicy {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _request: &mut Request<B>,
        result: &mut Result<Response<R>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) if !response.status().is_server_error() => {
                self.budget.deposit();
                None
            }
            _ if self.attempts > 0 && self.budget.withdraw() => {
                self.attempts -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        Some(request.clone())
    }
}

const URI: &str = "http://127.0.0.1:8080/users/42";

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

    let fusebox = RetryBudgetLayer::with_config(RetryConfig::default()).layer(bare());
    let policy = TowerPolicy {
        budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
        attempts: 2,
    };
    let tower_retry = tower::retry::RetryLayer::new(policy).layer(bare());

    let mut group = c.benchmark_group("retry");
    let base = bare();
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
