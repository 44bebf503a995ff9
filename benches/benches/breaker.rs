//! Per-call cost of fusebox's circuit breaker on the healthy CLOSED path, against a bare
//! service, the clock reads slow-call detection needs, and three peer breakers
//! (tower-resilience 0.13, failsafe 1.3, recloser 1.4), all in the same run.
//!
//! Run with:
//! `cargo bench -p fusebox-benches --bench breaker -- --warm-up-time 1 --measurement-time 3`
//!
//! Every variant calls the same inner service — a `tower::service_fn` that answers
//! `200 OK` with an empty body at once — through its breaker: readiness, a fresh request,
//! the call, and awaiting the response. The breakers are configured closed and healthy
//! (fusebox and tower-resilience: a window of the last 100 calls at a 50 % failure-rate
//! threshold; recloser: the same ring of 100; failsafe: its default policy) and warmed up
//! with full windows before they are measured.
//!
//! Two scenarios, one criterion group each so that the figures inside a group compare:
//! - `breaker_1_task`: one task on a current-thread runtime;
//! - `breaker_2_tasks`: two tasks sharing one breaker (each with its own service clone) on
//!   a two-worker multi-thread runtime. They start together behind a barrier; the figure is
//!   the wall time from the first start to the last finish divided by the calls of both.
//!
//! and the same two on plain requests, `breaker_plain_1_task` and `breaker_plain_2_tasks`:
//! every variant calls a `tower::service_fn` that takes a `u64` and answers it back, with
//! fusebox's breaker for any service ([`CircuitBreakerLayer::plain`]). That is the setting of
//! the peer figures the breaker's targets were set against (a bare call of about 2.5 ns);
//! the HTTP groups pay for building, moving and dropping an `http::Request` and an
//! `http::Response` in every variant.
//!
//! A fifth group, `breaker_open`: a healthy call through a fusebox breaker next to a call
//! rejected by the same kind of breaker held open by an operator (`fusebox_open_reject`)
//! and by one that tripped on failures and is waiting out its open wait
//! (`fusebox_tripped_reject`: it reads the clock to tell whether the wait is over), and
//! that rejection's floor: the held-open rejection plus one clock read
//! (`floor_open_reject_plus_clock_read`).
//!
//! Runtimes are built once, outside the measurement (`iter_custom`). With
//! `FUSEBOX_BENCH_CPU_TIME=1` in the environment the figures are the process's CPU time per
//! call instead of wall time (groups suffixed `_cpu`): steadier on a machine shared with
//! other work.

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use fusebox_benches::services::unavailable;
use fusebox_benches::{Client, Tasks, current_thread, group_name, measure, one_task, two_workers};
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox_classify::{Route, RouteTable};
use http::{Request, Response};
use http_body_util::Empty;
use recloser::{AsyncRecloser, Recloser};
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hint::black_box;
use std::marker::PhantomData;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// What the inner service answers.
type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The inner service of every variant: answers at once, allocates nothing.
///
/// Its future is an `async` block that builds the response when polled, so it is a byte or
/// two, like a real client's (hyper's is a boxed future: one pointer). A
/// `std::future::ready(response)` would carry the 112-byte response inside the future and
/// make every wrapper's future larger than the 128 bytes the compiler still moves with
/// inline copies: each move would then be a `memcpy` call, which costs more on this kind of
/// machine than a whole healthy breaker call's bookkeeping.
fn bare() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Reply> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<()>| async { Ok(Response::new(Empty::new())) })
}

/// A fresh request, opaque to the optimizer (`black_box` by reference: the compiler must
/// assume any of its fields was changed, without an extra copy of the whole request).
#[inline(always)]
fn request() -> Request<()> {
    let mut request = Request::new(());
    black_box(&mut request);
    request
}

/// Calls made before measuring: fills every window (fusebox's count window is then "clean").
const WARM_UP_CALLS: u64 = 1_000;

/// A scenario's request: an HTTP request, or a plain `u64` for the `plain` groups.
trait Make: Send + 'static {
    fn make() -> Self;
}

impl Make for Request<()> {
    #[inline(always)]
    fn make() -> Self {
        request()
    }
}

impl Make for u64 {
    #[inline(always)]
    fn make() -> Self {
        black_box(7)
    }
}

/// The inner service of the plain groups: answers its `u64` back at once.
fn bare_plain() -> impl Service<
    u64,
    Response = u64,
    Error = Infallible,
    Future = impl Future<Output = Result<u64, Infallible>> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|n: u64| async move { Ok(n) })
}

/// Any tower service of ours (bare, fusebox, tower-resilience) called with `R` requests.
struct Tower<S, R = Request<()>>(S, PhantomData<fn() -> R>);

fn tower<R, S>(service: S) -> Tower<S, R> {
    Tower(service, PhantomData)
}

impl<S: Clone, R> Clone for Tower<S, R> {
    fn clone(&self) -> Self {
        tower(self.0.clone())
    }
}

impl<S, R: Make> Client for Tower<S, R>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Debug + Send,
{
    async fn once(&mut self) {
        let service = self.0.ready().await.expect("the service is ready");
        let result = service.call(R::make()).await;
        black_box(&result);
    }
}

/// failsafe's futures API around the inner service's future.
struct Failsafe<B, S, R> {
    breaker: B,
    inner: S,
    request: PhantomData<fn() -> R>,
}

impl<B: Clone, S: Clone, R> Clone for Failsafe<B, S, R> {
    fn clone(&self) -> Self {
        Failsafe {
            breaker: self.breaker.clone(),
            inner: self.inner.clone(),
            request: PhantomData,
        }
    }
}

impl<B, S, R: Make> Client for Failsafe<B, S, R>
where
    B: failsafe::futures::CircuitBreaker + Clone + Send + Sync + 'static,
    S: Service<R, Error = Infallible> + Clone + Send + 'static,
    S::Response: Send,
    S::Future: Send,
{
    async fn once(&mut self) {
        let inner = self.inner.ready().await.expect("the service is ready");
        let future = inner.call(R::make());
        let result = self.breaker.call(future).await;
        black_box(&result);
    }
}

/// recloser's async API around the inner service's future.
struct Reclose<S, R> {
    breaker: AsyncRecloser,
    inner: S,
    request: PhantomData<fn() -> R>,
}

impl<S: Clone, R> Clone for Reclose<S, R> {
    fn clone(&self) -> Self {
        Reclose {
            breaker: self.breaker.clone(),
            inner: self.inner.clone(),
            request: PhantomData,
        }
    }
}

impl<S, R: Make> Client for Reclose<S, R>
where
    S: Service<R, Error = Infallible> + Clone + Send + 'static,
    S::Response: Send,
    S::Future: Send,
{
    async fn once(&mut self) {
        let inner = self.inner.ready().await.expect("the service is ready");
        let future = inner.call(R::make());
        let result = self.breaker.call(future).await;
        black_box(&result);
    }
}

/// `N` clock reads, the way the breaker reads its clock (`tokio::time::Instant::now`), and
/// no call.
#[derive(Clone)]
struct ClockReads<const N: usize>;

impl<const N: usize> Client for ClockReads<N> {
    async fn once(&mut self) {
        for _ in 0..N {
            black_box(Instant::now());
        }
    }
}

/// A call with `READS` clock reads around it: before it, and (for 2) after it. With two
/// around the bare call it is the floor for any breaker that measures each call's
/// latency; with one before a rejection by a breaker held open, the floor for a rejection
/// that must tell whether the open wait is over.
struct Timed<S, R, const READS: usize = 2>(S, PhantomData<fn() -> R>);

impl<S: Clone, R, const READS: usize> Clone for Timed<S, R, READS> {
    fn clone(&self) -> Self {
        Timed(self.0.clone(), PhantomData)
    }
}

impl<S, R: Make, const READS: usize> Client for Timed<S, R, READS>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Debug + Send,
{
    async fn once(&mut self) {
        let start = black_box(Instant::now());
        let service = self.0.ready().await.expect("the service is ready");
        let result = service.call(R::make()).await;
        black_box(&result);
        if READS > 1 {
            black_box(Instant::now().saturating_duration_since(start));
        }
    }
}

/// fusebox, count window of 100, default route (no slow-call threshold: no clock read).
fn fusebox_count() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("bench")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
}

/// fusebox, count window of 100, slow-call tracking on (two clock reads per call).
fn fusebox_count_slow() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder(
        CircuitBreakerConfig::builder()
            .name("bench")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .slow_call_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
    .routes(RouteTable::single(
        Route::default().slow_call_duration(Duration::from_secs(1)),
    ))
    .build()
    .expect("an in-memory breaker always builds")
}

/// fusebox, time window of the last 60 s in 60 buckets, no slow-call threshold.
fn fusebox_time() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("bench")
            .time_window(Duration::from_secs(60), 60)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
}

/// tower-resilience's breaker: count window of 100, 50 % failure-rate threshold, one
/// breaker shared by every clone of the service.
fn tower_resilience<R: Make, S>(inner: S) -> impl Client
where
    S: Service<R, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    let layer = tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .name("bench")
        .sliding_window_size(100)
        .minimum_number_of_calls(100)
        .failure_rate_threshold(0.5)
        .build()
        .expect("a valid tower-resilience config");
    tower::<R, _>(layer.layer(inner))
}

fn failsafe<R: Make, S>(inner: S) -> impl Client
where
    S: Service<R, Error = Infallible> + Clone + Send + 'static,
    S::Response: Send,
    S::Future: Send,
{
    Failsafe {
        breaker: failsafe::Config::new().build(),
        inner,
        request: PhantomData,
    }
}

fn recloser<R: Make, S>(inner: S) -> impl Client
where
    S: Service<R, Error = Infallible> + Clone + Send + 'static,
    S::Response: Send,
    S::Future: Send,
{
    Reclose {
        breaker: AsyncRecloser::from(Recloser::custom().closed_len(100).error_rate(0.5).build()),
        inner,
        request: PhantomData,
    }
}

/// Warms `client` up (full windows, lazily grown buffers) on the current-thread runtime.
fn warmed<C: Client>(rt: &Runtime, client: C) -> C {
    one_task(rt, &client, WARM_UP_CALLS);
    client
}

/// One criterion group of variants measured alike: each warmed up on its own
/// current-thread runtime, then measured on `rt` with `tasks`.
struct Scenario<'a> {
    group: BenchmarkGroup<'a, WallTime>,
    warm: Runtime,
    rt: &'a Runtime,
    tasks: Tasks,
}

impl<'a> Scenario<'a> {
    fn new(c: &'a mut Criterion, group: &str, rt: &'a Runtime, tasks: Tasks) -> Self {
        Scenario {
            group: c.benchmark_group(group_name(group)),
            warm: current_thread(),
            rt,
            tasks,
        }
    }

    fn variant<C: Client>(&mut self, name: &str, client: C) {
        let client = warmed(&self.warm, client);
        let (rt, tasks) = (self.rt, self.tasks);
        self.group.bench_function(name, |b| {
            b.iter_custom(|iters| measure(rt, tasks, &client, iters))
        });
    }
}

/// Every variant, in the order reported, in one group.
fn scenario(c: &mut Criterion, group: &str, rt: &Runtime, tasks: Tasks) {
    let _guard = rt.enter();
    let mut g = Scenario::new(c, group, rt, tasks);

    g.variant("bare", tower::<Request<()>, _>(bare()));
    g.variant("clock_read_x1", ClockReads::<1>);
    g.variant("clock_read_x2", ClockReads::<2>);
    g.variant(
        "bare_plus_2_clock_reads",
        Timed::<_, _, 2>(bare(), PhantomData),
    );
    g.variant(
        "fusebox_count_slow_off",
        tower::<Request<()>, _>(fusebox_count().layer(bare())),
    );
    g.variant(
        "fusebox_count_slow_on",
        tower::<Request<()>, _>(fusebox_count_slow().layer(bare())),
    );
    g.variant(
        "fusebox_time_window",
        tower::<Request<()>, _>(fusebox_time().layer(bare())),
    );
    g.variant(
        "tower_resilience",
        tower_resilience::<Request<()>, _>(bare()),
    );
    g.variant("failsafe", failsafe::<Request<()>, _>(bare()));
    g.variant("recloser", recloser::<Request<()>, _>(bare()));
    g.group.finish();
}

/// The same variants on plain `u64` requests, fusebox through its breaker for any service.
fn plain_scenario(c: &mut Criterion, group: &str, rt: &Runtime, tasks: Tasks) {
    let _guard = rt.enter();
    let mut g = Scenario::new(c, group, rt, tasks);

    g.variant("bare", tower::<u64, _>(bare_plain()));
    g.variant("clock_read_x2", ClockReads::<2>);
    g.variant(
        "bare_plus_2_clock_reads",
        Timed::<_, _, 2>(bare_plain(), PhantomData),
    );
    g.variant(
        "fusebox_count_slow_off",
        tower::<u64, _>(fusebox_count().plain().layer(bare_plain())),
    );
    g.variant(
        "fusebox_count_slow_on",
        tower::<u64, _>(fusebox_count_slow().plain().layer(bare_plain())),
    );
    g.variant(
        "fusebox_time_window",
        tower::<u64, _>(fusebox_time().plain().layer(bare_plain())),
    );
    g.variant("tower_resilience", tower_resilience::<u64, _>(bare_plain()));
    g.variant("failsafe", failsafe::<u64, _>(bare_plain()));
    g.variant("recloser", recloser::<u64, _>(bare_plain()));
    g.group.finish();
}

fn one_task_group(c: &mut Criterion) {
    scenario(c, "breaker_1_task", &current_thread(), Tasks::One);
}

fn two_tasks_group(c: &mut Criterion) {
    scenario(c, "breaker_2_tasks", &two_workers(), Tasks::Two);
}

fn plain_one_task_group(c: &mut Criterion) {
    plain_scenario(c, "breaker_plain_1_task", &current_thread(), Tasks::One);
}

fn plain_two_tasks_group(c: &mut Criterion) {
    plain_scenario(c, "breaker_plain_2_tasks", &two_workers(), Tasks::Two);
}

/// A rejection while forced open, and while open after tripping, next to a healthy call,
/// one task.
fn open_group(c: &mut Criterion) {
    let rt = current_thread();
    let _guard = rt.enter();
    let healthy = warmed(&rt, tower::<Request<()>, _>(fusebox_count().layer(bare())));
    let open_layer = fusebox_count();
    open_layer.handle().force_open();
    let open = warmed(&rt, tower::<Request<()>, _>(open_layer.layer(bare())));
    // The floor of a tripped breaker's rejection: the held-open one's, and the clock read
    // that tells whether the open wait is over.
    let open_plus_clock = warmed(
        &rt,
        Timed::<_, Request<()>, 1>(open_layer.layer(bare()), PhantomData),
    );
    // Trips on the warm-up's 503s, then stays open for five minutes: every measured call is
    // rejected inside the open wait.
    let tripped_layer = CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("bench")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(300))
            .build()
            .expect("a valid breaker config"),
    );
    let failing = unavailable();
    let tripped = warmed(&rt, tower::<Request<()>, _>(tripped_layer.layer(failing)));
    assert_eq!(
        tripped_layer.handle().state(),
        fusebox_breaker::State::Open,
        "the warm-up tripped the breaker"
    );

    let mut g = c.benchmark_group(group_name("breaker_open"));
    g.bench_function("fusebox_closed_healthy", |b| {
        b.iter_custom(|iters| one_task(&rt, &healthy, iters))
    });
    g.bench_function("fusebox_open_reject", |b| {
        b.iter_custom(|iters| one_task(&rt, &open, iters))
    });
    g.bench_function("fusebox_tripped_reject", |b| {
        b.iter_custom(|iters| one_task(&rt, &tripped, iters))
    });
    g.bench_function("floor_open_reject_plus_clock_read", |b| {
        b.iter_custom(|iters| one_task(&rt, &open_plus_clock, iters))
    });
    g.finish();
}

criterion_group!(
    benches,
    one_task_group,
    two_tasks_group,
    plain_one_task_group,
    plain_two_tasks_group,
    open_group
);
criterion_main!(benches);
