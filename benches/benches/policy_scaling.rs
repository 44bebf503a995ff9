//! Does a full fusebox `Policy` scale from one task to two? And what does a call rejected
//! by an open Policy cost next to a healthy one?
//!
//! Run with:
//! `cargo bench -p fusebox-benches --bench policy_scaling -- --warm-up-time 1 --measurement-time 3`
//!
//! Each call builds a request (an empty-body GET with an absolute URI, as a client sends),
//! checks readiness, calls, and drops a 200 that the inner service — a `tower::service_fn`
//! with an `async` block — answers at once. Groups (criterion prints calls/s next to each
//! time: every iteration is one call):
//!
//! - `scaling_1_task`: one task on a current-thread runtime;
//! - `scaling_2_tasks`: two tasks on a two-worker runtime sharing one Policy (each with its
//!   own clone of the service), started together behind a barrier; the time per call is
//!   the wall time from the first start to the last end ÷ the calls of both;
//!
//!   each with `bare` (no middleware), `policy` (all four layers: retry budget → count-window
//!   breaker → fixed limit of 1000 → 1 s timeout), each layer `only_*` alone in a Policy and
//!   the full Policy `without_*` one layer: when two tasks fall short of twice one task's
//!   throughput, the layer whose removal restores it is the one that contends;
//! - `policy_open`: a healthy call through the full Policy next to one rejected by the same
//!   kind of Policy with its breaker forced open by an operator, and by one whose breaker
//!   tripped on 503s and is waiting out a five-minute open wait (it reads the clock to tell
//!   whether the wait is over) (one task).
//!
//! The target: the two-task throughput at least 1.6× the one-task throughput,
//! for the Policy. With `FUSEBOX_BENCH_CPU_TIME=1` the figures are CPU time (groups
//! suffixed `_cpu`), which says nothing of scaling: read the wall-time run for that.

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusebox::{CircuitBreakerConfig, Policy, PolicyBuilder, RetryConfig};
use fusebox_benches::services::{URI, unavailable};
use fusebox_benches::{Client, Tasks, current_thread, group_name, measure, one_task, two_workers};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The inner service: answers 200 at once from a small `async` block, allocates nothing.
fn bare<B>() -> impl Service<
    Request<B>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Reply> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<B>| async { Ok(Response::new(Empty::new())) })
}

/// Calls made before measuring: fills the breaker's window, grows lazy buffers.
const WARM_UP_CALLS: u64 = 1_000;

/// Any tower service taking the benchmark's request; errors (a rejection) are results too.
#[derive(Clone)]
struct Tower<S>(S);

impl<S> Client for Tower<S>
where
    S: Service<Request<Empty<Bytes>>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Debug + Send,
{
    async fn once(&mut self) {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = Uri::from_static(URI);
        black_box(&mut request);
        let service = self.0.ready().await.expect("the service is ready");
        let result = service.call(request).await;
        black_box(&result);
    }
}

fn breaker_config() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("bench")
        .count_window(100)
        .minimum_calls(20)
        .build()
        .expect("a valid breaker config")
}

/// The four stages of a Policy, each to be switched on or off.
#[derive(Clone, Copy)]
struct Stages {
    retry: bool,
    breaker: bool,
    limit: bool,
    timeout: bool,
}

const ALL: Stages = Stages {
    retry: true,
    breaker: true,
    limit: true,
    timeout: true,
};
const NONE: Stages = Stages {
    retry: false,
    breaker: false,
    limit: false,
    timeout: false,
};

fn builder(stages: Stages) -> PolicyBuilder {
    let mut b = Policy::builder("bench");
    if stages.timeout {
        b = b.timeout(Duration::from_secs(1));
    }
    if stages.limit {
        b = b.concurrency_limit(1000);
    }
    if stages.breaker {
        b = b.circuit_breaker(breaker_config());
    }
    if stages.retry {
        b = b.retry_budget(RetryConfig::builder().name("bench"));
    }
    b
}

fn policy(stages: Stages) -> Policy {
    builder(stages).build().expect("a valid policy")
}

/// Warms `client` up on a current-thread runtime of its own.
fn warmed<C: Client>(client: C) -> C {
    let rt = current_thread();
    let _guard = rt.enter();
    one_task(&rt, &client, WARM_UP_CALLS);
    client
}

fn scenario(c: &mut Criterion, group: &str, rt: &Runtime, tasks: Tasks) {
    let _guard = rt.enter();
    let mut g = c.benchmark_group(group_name(group));
    g.throughput(Throughput::Elements(1));

    macro_rules! variant {
        ($name:expr, $client:expr) => {{
            let client = warmed($client);
            g.bench_function($name, |b| {
                b.iter_custom(|iters| measure(rt, tasks, &client, iters))
            });
        }};
    }

    let only = |f: fn(&mut Stages)| {
        let mut s = NONE;
        f(&mut s);
        s
    };
    let without = |f: fn(&mut Stages)| {
        let mut s = ALL;
        f(&mut s);
        s
    };

    variant!("bare", Tower(bare::<Empty<Bytes>>()));
    variant!("policy", Tower(policy(ALL).layer(bare())));
    variant!("no_layer", Tower(policy(NONE).layer(bare())));
    variant!(
        "only_retry",
        Tower(policy(only(|s| s.retry = true)).layer(bare()))
    );
    variant!(
        "only_breaker",
        Tower(policy(only(|s| s.breaker = true)).layer(bare()))
    );
    variant!(
        "only_limit",
        Tower(policy(only(|s| s.limit = true)).layer(bare()))
    );
    variant!(
        "only_timeout",
        Tower(policy(only(|s| s.timeout = true)).layer(bare()))
    );
    variant!(
        "without_retry",
        Tower(policy(without(|s| s.retry = false)).layer(bare()))
    );
    variant!(
        "without_breaker",
        Tower(policy(without(|s| s.breaker = false)).layer(bare()))
    );
    variant!(
        "without_limit",
        Tower(policy(without(|s| s.limit = false)).layer(bare()))
    );
    variant!(
        "without_timeout",
        Tower(policy(without(|s| s.timeout = false)).layer(bare()))
    );
    g.finish();
}

fn one_task_group(c: &mut Criterion) {
    scenario(c, "scaling_1_task", &current_thread(), Tasks::One);
}

fn two_tasks_group(c: &mut Criterion) {
    scenario(c, "scaling_2_tasks", &two_workers(), Tasks::Two);
}

/// A healthy call through the full Policy next to a call rejected by a full Policy whose
/// breaker an operator forced open, and by one whose breaker tripped.
fn open_group(c: &mut Criterion) {
    let rt = current_thread();
    let _guard = rt.enter();
    let healthy = warmed(Tower(policy(ALL).layer(bare())));
    let open_policy = policy(ALL);
    open_policy
        .breaker_handle()
        .expect("an unkeyed breaker")
        .force_open();
    let open = warmed(Tower(open_policy.layer(bare())));
    // Trips on the warm-up's 503s (the retries the budget allows included), then stays
    // open: every measured call is rejected inside the open wait.
    let tripped_policy = builder(ALL)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("bench")
                .count_window(100)
                .minimum_calls(20)
                .open_wait(Duration::from_secs(300)),
        )
        .build()
        .expect("a valid policy");
    let failing = unavailable();
    let tripped = warmed(Tower(tripped_policy.layer(failing)));
    assert_eq!(
        tripped_policy
            .breaker_handle()
            .expect("an unkeyed breaker")
            .state(),
        fusebox::breaker::State::Open,
        "the warm-up tripped the breaker"
    );

    let mut g = c.benchmark_group(group_name("policy_open"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("policy_closed_healthy", |b| {
        b.iter_custom(|iters| one_task(&rt, &healthy, iters))
    });
    g.bench_function("policy_open_reject", |b| {
        b.iter_custom(|iters| one_task(&rt, &open, iters))
    });
    g.bench_function("policy_tripped_reject", |b| {
        b.iter_custom(|iters| one_task(&rt, &tripped, iters))
    });
    g.finish();
}

criterion_group!(benches, one_task_group, two_tasks_group, open_group);
criterion_main!(benches);
