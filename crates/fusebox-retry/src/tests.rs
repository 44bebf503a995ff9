//! Service-level tests against in-process services (the network tests are in the
//! workspace's `tests/tests/retry.rs`).

use crate::error::{BodyExceedsSizeHint, BoxError};
use crate::{ReplayBody, RetryBudgetLayer, RetryConfig, RetryConfigBuilder};
use bytes::Bytes;
use fusebox_classify::{Deadline, Route, RouteTable};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::SizeHint;
use http_body_util::{BodyExt, Empty, Full};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Reply = Result<Response<()>, BoxError>;

/// What the fake dependency saw: arrival times and bodies, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(Instant, Bytes)>>>);

impl Seen {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn times(&self) -> Vec<Instant> {
        self.0.lock().unwrap().iter().map(|(t, _)| *t).collect()
    }
    fn bodies(&self) -> Vec<Bytes> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// A dependency whose `n`th answer (0-based) is `reply(n)`; it records each request.
fn dependency<B>(
    seen: Seen,
    reply: impl Fn(usize) -> Reply + Clone + Send + Sync + 'static,
) -> impl Service<
    Request<ReplayBody<B>>,
    Response = Response<()>,
    Error = BoxError,
    Future = impl Future<Output = Reply> + Send,
> + Clone
+ Send
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Debug,
{
    let seen = seen.clone();
    tower::service_fn(move |request: Request<ReplayBody<B>>| {
        let (seen, reply) = (seen.clone(), reply.clone());
        async move {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let n = {
                let mut log = seen.0.lock().unwrap();
                log.push((Instant::now(), body));
                log.len() - 1
            };
            reply(n)
        }
    })
}

fn status(code: u16) -> Reply {
    let mut r = Response::new(());
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    Ok(r)
}

fn with_header(code: u16, name: &'static str, value: &'static str) -> Reply {
    let mut r = status(code)?;
    r.headers_mut()
        .insert(name, HeaderValue::from_static(value));
    Ok(r)
}

fn config() -> RetryConfigBuilder {
    RetryConfig::builder()
        .seed(Some(1))
        .failure_rate_threshold(None)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
}

fn layer(config: RetryConfigBuilder) -> RetryBudgetLayer {
    RetryBudgetLayer::new(config.build().unwrap())
}

fn get() -> Request<Empty<Bytes>> {
    Request::get("http://dep/items").body(Empty::new()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn retries_a_503_until_success_within_max_attempts() {
    let seen = Seen::default();
    let layer = layer(config().max_attempts(3));
    let svc = layer.layer(dependency(seen.clone(), |n| {
        status(if n < 2 { 503 } else { 200 })
    }));
    let response = svc.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(seen.count(), 3);
    assert_eq!(layer.budget().snapshot().retries, 2);

    // Always failing: the third answer goes back as is.
    let seen = Seen::default();
    let svc = layer.layer(dependency(seen.clone(), |_| status(503)));
    assert_eq!(svc.oneshot(get()).await.unwrap().status(), 503);
    assert_eq!(seen.count(), 3);
}

/// A service makes its leases (and keeps its spare) at its first call or first clone, not
/// when the layer builds it, and its clones share them: a service cloned per request makes
/// them once. Each service retries to its own inner service.
#[tokio::test(start_paused = true)]
async fn services_make_their_leases_when_first_used_and_clones_share_them() {
    let layer = layer(config().max_attempts(2));
    let flaky = |n: usize| status(if n == 0 { 503 } else { 200 });
    let (seen_a, seen_b) = (Seen::default(), Seen::default());
    let a = layer.layer(dependency(seen_a.clone(), flaky));
    let b = layer.layer(dependency(seen_b.clone(), flaky));
    assert_eq!((a.leases_made(), b.leases_made()), (None, None));

    // Cloned per request: the first clone makes the leases, every clone shares them.
    let first = a.clone();
    let leases = a.leases_made().expect("the first clone made the leases");
    assert_eq!(first.leases_made(), Some(leases));
    assert_eq!(first.oneshot(get()).await.unwrap().status(), 200);
    let second = a.clone();
    assert_eq!(second.leases_made(), Some(leases));
    assert_eq!(second.oneshot(get()).await.unwrap().status(), 200);

    // Called directly, a service makes its own; its retry goes to its own dependency.
    assert_eq!(b.oneshot(get()).await.unwrap().status(), 200);
    assert_eq!((seen_a.count(), seen_b.count()), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn backoff_waits_are_jittered_within_the_ceiling() {
    let seen = Seen::default();
    let svc = layer(config().max_attempts(4)).layer(dependency(seen.clone(), |n| {
        status(if n < 3 { 502 } else { 200 })
    }));
    svc.oneshot(get()).await.unwrap();
    let t = seen.times();
    let gaps: Vec<_> = t.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps.len(), 3);
    for (i, gap) in gaps.iter().enumerate() {
        let ceiling = Duration::from_millis(10 << i);
        assert!(*gap <= ceiling, "retry {} waited {gap:?}", i + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn non_retryable_answers_and_disabled_routes_are_not_retried() {
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |_| status(500)));
    assert_eq!(svc.oneshot(get()).await.unwrap().status(), 500);
    assert_eq!(seen.count(), 1, "a 500 is not retryable");

    let routes = RouteTable::builder(Route::default())
        .route("GET /items", Route::default().retry(false))
        .build()
        .unwrap();
    let seen = Seen::default();
    let svc = RetryBudgetLayer::builder(config().build().unwrap())
        .routes(routes)
        .build()
        .expect("the layer builds")
        .layer(dependency(seen.clone(), |_| status(503)));
    assert_eq!(svc.oneshot(get()).await.unwrap().status(), 503);
    assert_eq!(seen.count(), 1, "the route turns retries off");
}

#[tokio::test(start_paused = true)]
async fn unsent_requests_are_retried_even_when_not_idempotent() {
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |n| {
        if n == 0 {
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
        } else {
            status(201)
        }
    }));
    let post = Request::post("http://dep/orders")
        .body(Full::new(Bytes::from_static(b"{\"sku\":1}")))
        .unwrap();
    assert_eq!(svc.oneshot(post).await.unwrap().status(), 201);
    assert_eq!(seen.bodies(), vec![Bytes::from_static(b"{\"sku\":1}"); 2]);

    // A reset after sending is not safe to repeat for a POST.
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |_| {
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
    }));
    let post = Request::post("http://dep/orders")
        .body(Empty::new())
        .unwrap();
    let err = svc.oneshot(post).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<std::io::Error>().unwrap().kind(),
        std::io::ErrorKind::ConnectionReset,
        "the dependency's own error comes back"
    );
    assert_eq!(seen.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_cap_is_not_retried() {
    let seen = Seen::default();
    let svc = layer(config().max_retry_after(Duration::from_secs(5)))
        .layer(dependency(seen.clone(), |_| {
            with_header(503, "retry-after", "6")
        }));
    let response = svc.oneshot(get()).await.unwrap();
    assert_eq!(response.headers()["retry-after"], "6");
    assert_eq!(seen.count(), 1);
}

fn grpc(code: &'static str, pushback: Option<&'static str>) -> Reply {
    let mut r = with_header(200, "content-type", "application/grpc")?;
    r.headers_mut()
        .insert("grpc-status", HeaderValue::from_static(code));
    if let Some(p) = pushback {
        r.headers_mut()
            .insert("grpc-retry-pushback-ms", HeaderValue::from_static(p));
    }
    Ok(r)
}

#[tokio::test(start_paused = true)]
async fn grpc_pushback_is_honoured_and_negative_means_never() {
    let grpc_call = || {
        Request::post("http://dep/pkg.Stock/Get")
            .header("idempotency-key", "k1")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |n| {
        if n == 0 {
            grpc("14", Some("1500"))
        } else {
            grpc("0", None)
        }
    }));
    svc.oneshot(grpc_call()).await.unwrap();
    let t = seen.times();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1] - t[0], Duration::from_millis(1500));

    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |_| grpc("14", Some("-1"))));
    svc.oneshot(grpc_call()).await.unwrap();
    assert_eq!(seen.count(), 1, "negative pushback: do not retry");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_backoff() {
    let seen = Seen::default();
    // Retry-After 2 s, but only 1 s left: not retried.
    let svc = layer(config()).layer(dependency(seen.clone(), |_| {
        with_header(503, "retry-after", "2")
    }));
    let mut request = get();
    request
        .extensions_mut()
        .insert(Deadline::after(Duration::from_secs(1)));
    assert_eq!(svc.oneshot(request).await.unwrap().status(), 503);
    assert_eq!(seen.count(), 1);

    // With 3 s left it is.
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |n| {
        if n == 0 {
            with_header(503, "retry-after", "2")
        } else {
            status(200)
        }
    }));
    let mut request = get();
    request
        .extensions_mut()
        .insert(Deadline::after(Duration::from_secs(3)));
    assert_eq!(svc.oneshot(request).await.unwrap().status(), 200);
    assert_eq!(seen.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_attempt_starts_past_the_deadline() {
    let seen = Seen::default();
    let svc = layer(config()).layer(dependency(seen.clone(), |_| status(200)));
    let mut request = get();
    request
        .extensions_mut()
        .insert(Deadline::after(Duration::from_millis(5)));
    tokio::time::advance(Duration::from_millis(5)).await;
    let err = svc.oneshot(request).await.unwrap_err();
    assert!(err.is::<crate::error::DeadlineExceeded>(), "{err}");
    assert_eq!(seen.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn headers_and_extensions_reach_every_attempt() {
    #[derive(Clone, Debug, PartialEq)]
    struct Tenant(&'static str);
    type Heads = Arc<Mutex<Vec<(HeaderMap, Option<Tenant>)>>>;
    let heads: Heads = Arc::default();
    let log = Arc::clone(&heads);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer(config()).layer(tower::service_fn(
        move |request: Request<ReplayBody<Empty<Bytes>>>| {
            log.lock().unwrap().push((
                request.headers().clone(),
                request.extensions().get::<Tenant>().cloned(),
            ));
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { status(if n == 0 { 503 } else { 200 }) }
        },
    ));
    let mut request = get();
    request
        .headers_mut()
        .insert("x-trace", HeaderValue::from_static("t-1"));
    request.extensions_mut().insert(Tenant("acme"));
    svc.oneshot(request).await.unwrap();
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 2);
    for (headers, tenant) in heads.iter() {
        assert_eq!(headers["x-trace"], "t-1");
        assert_eq!(tenant, &Some(Tenant("acme")));
    }
}

/// A body whose size hint says 4 bytes but which yields more.
struct Liar(bool);

impl http_body::Body for Liar {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.0 {
            return Poll::Ready(None);
        }
        self.0 = true;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            b"far more than four bytes",
        )))))
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(4)
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_breaks_its_size_hint_is_an_error() {
    let seen = Seen::default();
    let svc =
        layer(config().max_replay_body_bytes(8)).layer(dependency(seen.clone(), |_| status(200)));
    let request = Request::put("http://dep/x").body(Liar(false)).unwrap();
    let err = svc.oneshot(request).await.unwrap_err();
    assert!(err.is::<BodyExceedsSizeHint>(), "{err}");
    assert_eq!(seen.count(), 0, "nothing was sent");
}

#[tokio::test(start_paused = true)]
async fn clones_and_layers_share_one_budget() {
    // No floor, ratio 0.5: two requests pay for one retry, wherever they went.
    let layer = layer(config().retry_ratio(0.5).min_retries_per_second(0));
    let seen = Seen::default();
    let ok = layer.layer(dependency(seen.clone(), |_| status(200)));
    ok.clone().oneshot(get()).await.unwrap();
    let failing = Seen::default();
    let other = layer.layer(dependency(failing.clone(), |_| status(503)));
    other.clone().oneshot(get()).await.unwrap();
    // Two deposits: one retry granted, then refused.
    assert_eq!(failing.count(), 2);
    other.oneshot(get()).await.unwrap();
    assert_eq!(
        failing.count(),
        3,
        "3 deposits × 0.5 = 1.5: the second retry is refused"
    );
    assert_eq!(layer.budget().snapshot().retries, 1);
}

#[test]
fn services_and_futures_are_send_and_static() {
    fn assert_send<T: Send + 'static>(_: &T) {}
    let seen = Seen::default();
    let svc =
        RetryBudgetLayer::default().layer(dependency::<Full<Bytes>>(seen.clone(), |_| status(200)));
    assert_send(&svc);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut svc = svc;
    let future = svc.call(Request::new(Full::new(Bytes::from_static(b"x"))));
    assert_send(&future);
}

/// The counter `name` with label `name = layer`, from a debugging recorder's snapshot.
fn counter(
    snapshot: &[(
        metrics_util::CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        metrics_util::debugging::DebugValue,
    )],
    name: &str,
    layer: &str,
) -> u64 {
    snapshot
        .iter()
        .find(|(key, ..)| {
            key.key().name() == name
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "dependency" && l.value() == layer)
        })
        .map_or(0, |(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
}

#[tokio::test(start_paused = true)]
async fn counters_count_attempts_retries_hedges_and_refusals() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Handles are registered when the layer is built: build them under the test recorder.
    let (budgeted, cut, hedged) = metrics::with_local_recorder(&recorder, || {
        (
            layer(
                config()
                    .name("budgeted")
                    .retry_ratio(0.5)
                    .min_retries_per_second(0),
            ),
            layer(
                config()
                    .name("cut")
                    .failure_rate_threshold(Some(50))
                    .cutoff_minimum_calls(1),
            ),
            layer(
                config()
                    .name("hedged")
                    .hedge_delay(Some(Duration::from_millis(10))),
            ),
        )
    });

    // Always 503. Request 1: half a retry in the budget, refused. Request 2: one retry,
    // then refused.
    let seen = Seen::default();
    let svc = budgeted.layer(dependency(seen.clone(), |_| status(503)));
    svc.clone().oneshot(get()).await.unwrap();
    svc.oneshot(get()).await.unwrap();
    assert_eq!(seen.count(), 3);

    // One failure in one attempt: the cut-off refuses the retry.
    let svc = cut.layer(dependency(Seen::default(), |_| status(503)));
    svc.oneshot(get()).await.unwrap();

    // A slow first attempt gets a hedge.
    let svc = hedged.layer(tower::service_fn(
        |_: Request<ReplayBody<Empty<Bytes>>>| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            status(200)
        },
    ));
    svc.oneshot(get()).await.unwrap();

    let snapshot = snapshotter.snapshot().into_vec();
    let get = |name: &str, layer: &str| counter(&snapshot, name, layer);
    assert_eq!(get("fusebox_retry_attempts_total", "budgeted"), 3);
    assert_eq!(get("fusebox_retry_retries_total", "budgeted"), 1);
    assert_eq!(get("fusebox_retry_budget_exhausted_total", "budgeted"), 2);
    assert_eq!(get("fusebox_retry_cutoff_refusals_total", "cut"), 1);
    assert_eq!(get("fusebox_retry_attempts_total", "cut"), 1);
    assert_eq!(get("fusebox_retry_hedges_total", "hedged"), 1);
    assert_eq!(get("fusebox_retry_attempts_total", "hedged"), 2);
}

#[tokio::test(start_paused = true)]
async fn towers_timeout_is_retried_and_its_load_shedding_is_not() {
    use fusebox_classify::error::{TowerElapsed, TowerOverloaded};
    // A user's own `tower::timeout` below the retry layer: retried like fusebox's timeout.
    let seen = Seen::default();
    let svc = layer(config().max_attempts(3)).layer(dependency(seen.clone(), |n| {
        if n == 0 {
            Err(Box::new(TowerElapsed::new()))
        } else {
            status(200)
        }
    }));
    assert_eq!(svc.oneshot(get()).await.unwrap().status(), 200);
    assert_eq!(seen.count(), 2);

    // A user's own `tower::load_shed`: a rejection, never retried, like fusebox's limit.
    let seen = Seen::default();
    let svc = layer(config().max_attempts(3)).layer(dependency(seen.clone(), |_| {
        Err(Box::new(TowerOverloaded::new()))
    }));
    let err = svc.oneshot(get()).await.unwrap_err();
    assert!(err.is::<TowerOverloaded>());
    assert_eq!(seen.count(), 1);
}
