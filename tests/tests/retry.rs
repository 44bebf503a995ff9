//! fusebox's retry layer against a real hyper server on 127.0.0.1 (paused time, seeded
//! jitter): the budget bounds the attempts a failing dependency sees, only safe requests
//! are repeated, `Retry-After` is honoured, bodies are replayed byte for byte, and hedges
//! race and cancel.

use bytes::Bytes;
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::{BoxError, Clock, Deadline, Nanos, RouteTable};
use fusebox_retry::{ReplayBody, RetryBudget, RetryBudgetLayer, RetryConfig, WallClock};
use fusebox_tests::{Reply, RequestSeen, TestServer};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;
type RetryClient = Client<HttpConnector, ReplayBody<Body>>;

fn client() -> RetryClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn base_config() -> fusebox_retry::RetryConfigBuilder {
    RetryConfig::builder()
        .seed(Some(42))
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(200))
}

fn layer(config: fusebox_retry::RetryConfigBuilder) -> RetryBudgetLayer {
    RetryBudgetLayer::new(config.build().expect("a valid config"))
}

fn get(server: &TestServer, path: &str) -> Request<Body> {
    Request::get(server.url(path))
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

/// Sends `n` GETs, `concurrency` at a time, through `layer` to `server`; returns the
/// virtual time it took.
async fn storm(layer: &RetryBudgetLayer, server: &TestServer, n: usize) -> Duration {
    let start = Instant::now();
    let service = layer.layer(client());
    let mut sent = 0;
    while sent < n {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..50.min(n - sent) {
            let svc = service.clone();
            let request = get(server, "/storm");
            batch.spawn(async move { svc.oneshot(request).await });
        }
        sent += batch.len();
        while let Some(done) = batch.join_next().await {
            let response = done.expect("task").expect("an answer");
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_failing_dependency_sees_at_most_the_budget() {
    let server = TestServer::start(Reply::status(503)).await;
    let (ratio, floor, ttl) = (0.2, 10u32, 10u64);
    let layer = layer(
        base_config()
            .retry_ratio(ratio)
            .min_retries_per_second(floor)
            .ttl(Duration::from_secs(ttl))
            .failure_rate_threshold(None)
            .max_attempts(3),
    );
    let elapsed = storm(&layer, &server, 1000).await;
    let attempts = server.received();
    // The floor refills once per window: the run spans ceil(elapsed / ttl) windows.
    let windows = elapsed.as_secs().div_ceil(ttl).max(1);
    let bound = 1000.0 * (1.0 + ratio) + f64::from(floor) * (windows * ttl) as f64;
    assert!(
        (attempts as f64) <= bound,
        "{attempts} attempts over {elapsed:?}, bound {bound}"
    );
    assert!(attempts > 1100, "retries were made: {attempts}");
    println!("no cut-off: {attempts} attempts for 1000 requests over {elapsed:?} (bound {bound})");
    let snapshot = layer.budget().snapshot();
    assert_eq!(snapshot.requests + snapshot.retries, attempts as u64);
}

#[tokio::test(start_paused = true)]
async fn the_cut_off_stops_retries_against_a_failing_dependency() {
    let server = TestServer::start(Reply::status(503)).await;
    let layer = layer(
        base_config()
            .failure_rate_threshold(Some(10))
            .cutoff_minimum_calls(20)
            .max_attempts(3),
    );
    storm(&layer, &server, 1000).await;
    let attempts = server.received();
    assert!(
        attempts <= 1000 + 20 + 50,
        "only retries before the cut-off saw 20 attempts (plus one batch in flight): {attempts}"
    );
    assert!(layer.budget().snapshot().cut_off);
    println!("with the cut-off: {attempts} attempts for 1000 requests");

    // Recovery: once the failures age out and answers are good, retries come back.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(!layer.budget().snapshot().cut_off);
    let before = server.received();
    server.set_behaviour(Arc::new(move |_: &RequestSeen, n| {
        if n == before {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    }));
    let svc = layer.layer(client());
    let response = svc
        .oneshot(get(&server, "/again"))
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.received() - before, 2, "retried once more");
}

#[tokio::test(start_paused = true)]
async fn post_is_not_retried_but_post_with_an_idempotency_key_is() {
    let server = TestServer::start(Reply::status(503)).await;
    let layer = layer(base_config().max_attempts(3));
    let svc = layer.layer(client());

    let post = Request::post(server.url("/orders"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = svc.clone().oneshot(post).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.received(), 1);

    let keyed = Request::post(server.url("/orders"))
        .header("Idempotency-Key", "5c9e6c1e")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = svc.oneshot(keyed).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.received(), 4, "1 + 3 attempts");
    let keys: Vec<_> = server.requests()[1..]
        .iter()
        .map(|r| r.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys, vec!["5c9e6c1e"; 3], "headers reach every attempt");
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_is_never_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let inner = tower::service_fn(move |_: Request<ReplayBody<Body>>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            Err::<Response<()>, BoxError>(Box::new(CircuitOpen::new(
                "fraud".into(),
                None,
                Duration::from_secs(5),
                false,
            )))
        }
    });
    let svc = layer(base_config().max_attempts(5)).layer(inner);
    let request = Request::get("http://127.0.0.1/check")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let err = svc.oneshot(request).await.unwrap_err();
    let open = err
        .downcast_ref::<CircuitOpen>()
        .expect("the breaker's own error");
    assert_eq!(open.breaker(), "fraud");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_spent_deadline_is_not_retried() {
    let server = TestServer::start(Reply::slow(503, Duration::from_millis(100))).await;
    let svc = layer(base_config().max_attempts(3)).layer(client());
    let mut request = get(&server, "/slow");
    request
        .extensions_mut()
        .insert(Deadline::after(Duration::from_millis(50)));
    let response = svc.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.received(), 1);
}

/// A server that answers 503 with `retry_after` the first time and 200 after, and notes
/// the (virtual) time of every arrival.
async fn retry_after_server(
    retry_after: Arc<dyn Fn() -> String + Send + Sync>,
) -> (TestServer, Arc<Mutex<Vec<Instant>>>) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&arrivals);
    let server = TestServer::with_behaviour(Arc::new(move |_: &RequestSeen, n| {
        log.lock().expect("arrivals lock").push(Instant::now());
        if n == 0 {
            Reply::status(503).header("retry-after", &retry_after())
        } else {
            Reply::status(200)
        }
    }))
    .await;
    (server, arrivals)
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_delays_the_retry_by_exactly_that() {
    let (server, arrivals) = retry_after_server(Arc::new(|| "2".to_owned())).await;
    let svc = layer(base_config()).layer(client());
    let call = tokio::spawn(svc.oneshot(get(&server, "/ra")));
    tokio::time::sleep(Duration::from_millis(1999)).await;
    assert_eq!(server.received(), 1, "no retry before 2 s");
    let response = call.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.received(), 2);
    let t = arrivals.lock().unwrap().clone();
    assert_eq!(t[1] - t[0], Duration::from_secs(2));
}

/// Wall-clock time that follows paused tokio time from a fixed, whole-second origin.
#[derive(Debug)]
struct PausedWallClock {
    origin: SystemTime,
    start: Instant,
}

impl WallClock for PausedWallClock {
    fn now(&self) -> SystemTime {
        self.origin + self.start.elapsed()
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_dates_are_read_against_the_wall_clock() {
    let wall = Arc::new(PausedWallClock {
        origin: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        start: Instant::now(),
    });
    let server_wall = Arc::clone(&wall);
    let (server, arrivals) = retry_after_server(Arc::new(move || {
        httpdate::fmt_http_date(server_wall.now() + Duration::from_secs(3))
    }))
    .await;
    #[derive(Debug)]
    struct Shared(Arc<PausedWallClock>);
    impl WallClock for Shared {
        fn now(&self) -> SystemTime {
            self.0.now()
        }
    }
    let svc = layer(base_config().wall_clock(Shared(wall))).layer(client());
    let response = svc.oneshot(get(&server, "/date")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let t = arrivals.lock().unwrap().clone();
    assert_eq!(t.len(), 2);
    let gap = t[1] - t[0];
    // The date has whole seconds: three seconds from the first answer, less the fraction
    // of a second already past when the server wrote it.
    assert!(
        gap > Duration::from_secs(2) && gap <= Duration::from_secs(3),
        "{gap:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_malformed_retry_after_is_ignored_safely() {
    let (server, arrivals) = retry_after_server(Arc::new(|| "soon-ish".to_owned())).await;
    let svc = layer(base_config()).layer(client());
    let response = svc.oneshot(get(&server, "/bad")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "retried as a plain 503");
    let t = arrivals.lock().unwrap().clone();
    assert!(
        t[1] - t[0] <= Duration::from_millis(10),
        "the backoff, not a header"
    );
}

#[tokio::test(start_paused = true)]
async fn bodies_under_the_cap_are_replayed_byte_identical() {
    let server = TestServer::with_behaviour(Arc::new(|_: &RequestSeen, n| {
        Reply::status(if n < 2 { 503 } else { 200 })
    }))
    .await;
    let body: Bytes = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let svc = layer(base_config().max_attempts(3)).layer(client());
    let put = Request::put(server.url("/blob"))
        .header("content-type", "application/octet-stream")
        .body(Full::new(body.clone()))
        .unwrap();
    let response = svc.oneshot(put).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    for r in &seen {
        assert_eq!(r.body, body);
        assert_eq!(r.headers["content-type"], "application/octet-stream");
    }
}

#[tokio::test(start_paused = true)]
async fn bodies_over_the_cap_are_sent_once_intact() {
    let server = TestServer::start(Reply::status(503)).await;
    let body: Bytes = (0..100 * 1024u32).map(|i| (i % 256) as u8).collect();
    let svc = layer(base_config().max_replay_body_bytes(64 * 1024)).layer(client());
    let put = Request::put(server.url("/big"))
        .body(Full::new(body.clone()))
        .unwrap();
    let response = svc.oneshot(put).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let seen = server.requests();
    assert_eq!(seen.len(), 1, "not retried");
    assert_eq!(seen[0].body, body, "delivered intact");
}

#[test]
fn concurrent_withdrawals_never_exceed_the_budget() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    rt.block_on(async {
        for (ratio, deposits, floor) in [(0.2, 1000u64, 0u32), (0.1, 333, 0), (0.05, 999, 3)] {
            let config = RetryConfig::builder()
                .retry_ratio(ratio)
                .min_retries_per_second(floor)
                .build()
                .unwrap();
            let budget = Arc::new(RetryBudget::with_clock(&config, Clock::new()));
            let now = Nanos(1_000_000_000);
            let granted = Arc::new(AtomicUsize::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            for task in 0..64u64 {
                let (budget, granted) = (Arc::clone(&budget), Arc::clone(&granted));
                tasks.spawn(async move {
                    for i in 0..200u64 {
                        // Deposits and withdrawals interleave across threads.
                        if (task * 200 + i) < deposits {
                            budget.deposit_at(now);
                        }
                        if budget.try_withdraw_at(now) {
                            granted.fetch_add(1, Ordering::SeqCst);
                        }
                        if i % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
            let allowed = (deposits as f64 * ratio + f64::from(floor) * 10.0).floor() as usize;
            assert_eq!(
                granted.load(Ordering::SeqCst),
                allowed,
                "ratio {ratio}, {deposits} deposits, floor {floor}"
            );
        }
    });
}

#[test]
fn concurrent_retries_through_the_layer_stay_within_the_ratio() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let inner = tower::service_fn(move |_: Request<ReplayBody<Body>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::task::yield_now().await;
                let mut r = Response::new(());
                *r.status_mut() = StatusCode::BAD_GATEWAY;
                Ok::<_, Infallible>(r)
            }
        });
        let layer = layer(
            base_config()
                .retry_ratio(0.2)
                .min_retries_per_second(0)
                .failure_rate_threshold(None)
                .base_delay(Duration::from_nanos(1))
                .max_delay(Duration::from_nanos(1))
                .max_attempts(4),
        );
        let svc = layer.layer(inner);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..1000 {
            let svc = svc.clone();
            tasks.spawn(async move {
                let request = Request::get("http://127.0.0.1/x")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                svc.oneshot(request).await.unwrap().status()
            });
        }
        while let Some(status) = tasks.join_next().await {
            assert_eq!(status.unwrap(), StatusCode::BAD_GATEWAY);
        }
        let retries = calls.load(Ordering::SeqCst) - 1000;
        assert!(
            retries <= 200,
            "{retries} retries for 1000 requests at 20 %"
        );
        assert!(retries > 0);
        assert_eq!(layer.budget().snapshot().retries, retries as u64);
    });
}

/// Counts the inner futures dropped before they answered (cancelled).
struct Cancelled(Arc<AtomicUsize>, bool);

impl Drop for Cancelled {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The first attempt answers after `first`, every later one after `later`.
fn racing_dependency(
    first: Duration,
    later: Duration,
    calls: &Arc<AtomicUsize>,
    cancelled: &Arc<AtomicUsize>,
) -> impl Service<
    Request<ReplayBody<Body>>,
    Response = Response<String>,
    Error = BoxError,
    Future = impl Send,
> + Clone {
    let (calls, cancelled) = (Arc::clone(calls), Arc::clone(cancelled));
    tower::service_fn(move |_: Request<ReplayBody<Body>>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let guard = Cancelled(Arc::clone(&cancelled), false);
        async move {
            // Move the whole guard in (a closure would capture only the field it writes).
            let mut guard = guard;
            tokio::time::sleep(if n == 0 { first } else { later }).await;
            guard.1 = true;
            Ok::<_, BoxError>(Response::new(format!("attempt {n}")))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_and_the_slow_attempt_is_cancelled() {
    let (calls, cancelled) = (Arc::default(), Arc::default());
    let layer = layer(base_config().hedge_delay(Some(Duration::from_millis(100))));
    let svc = layer.layer(racing_dependency(
        Duration::from_secs(1),
        Duration::from_millis(10),
        &calls,
        &cancelled,
    ));
    let start = Instant::now();
    let request = Request::get("http://127.0.0.1/quote")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = svc.oneshot(request).await.unwrap();
    assert_eq!(response.body(), "attempt 1", "the hedge answered first");
    assert_eq!(start.elapsed(), Duration::from_millis(110));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "the slow attempt was dropped"
    );
    assert_eq!(
        layer.budget().snapshot().retries,
        1,
        "the hedge spent the budget"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fast_first_answer_needs_no_hedge_and_post_is_never_hedged() {
    let (calls, cancelled) = (Arc::default(), Arc::default());
    let layer = layer(base_config().hedge_delay(Some(Duration::from_millis(100))));
    let svc = layer.layer(racing_dependency(
        Duration::from_millis(20),
        Duration::from_millis(20),
        &calls,
        &cancelled,
    ));
    let request = Request::get("http://127.0.0.1/quote")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        svc.clone().oneshot(request).await.unwrap().body(),
        "attempt 0"
    );
    let post = Request::post("http://127.0.0.1/quote")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let slow = layer.layer(racing_dependency(
        Duration::from_secs(1),
        Duration::from_millis(10),
        &calls,
        &cancelled,
    ));
    let _ = slow.oneshot(post).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "no hedge for either");
    assert_eq!(cancelled.load(Ordering::SeqCst), 0);
    assert_eq!(layer.budget().snapshot().retries, 0);
}

#[tokio::test(start_paused = true)]
async fn hedges_draw_on_the_budget() {
    let (calls, cancelled) = (Arc::default(), Arc::default());
    // An empty budget: no ratio, no floor.
    let layer = layer(
        base_config()
            .retry_ratio(0.0)
            .min_retries_per_second(0)
            .hedge_delay(Some(Duration::from_millis(100))),
    );
    let svc = layer.layer(racing_dependency(
        Duration::from_secs(1),
        Duration::from_millis(10),
        &calls,
        &cancelled,
    ));
    let start = Instant::now();
    let request = Request::get("http://127.0.0.1/quote")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = svc.oneshot(request).await.unwrap();
    assert_eq!(response.body(), "attempt 0");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "no hedge: the budget is empty"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_route_table_reaches_the_layer() {
    // Per-route idempotency: this POST is declared safe to repeat.
    let routes = RouteTable::builder(fusebox_classify::Route::default())
        .route(
            "POST /charges",
            fusebox_classify::Route::default().idempotent(true),
        )
        .build()
        .unwrap();
    let server = TestServer::start(Reply::status(502)).await;
    let svc = RetryBudgetLayer::builder(base_config().max_attempts(2).build().unwrap())
        .routes(routes)
        .build()
        .expect("the layer builds")
        .layer(client());
    let post = Request::post(server.url("/charges"))
        .body(Full::new(Bytes::from_static(b"amount=5")))
        .unwrap();
    let response = svc.oneshot(post).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(server.received(), 2);
}
