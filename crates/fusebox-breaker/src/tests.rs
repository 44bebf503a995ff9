//! Service-level tests: the layer around mock services, on paused time.

use crate::*;
use bytes::Bytes;
use fusebox_classify::error::{CircuitOpen, Overloaded};
use fusebox_classify::{Route, RouteTable};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Body = Empty<Bytes>;

fn config() -> CircuitBreakerConfigBuilder {
    CircuitBreakerConfig::builder()
        .name("dep")
        .count_window(10)
        .minimum_calls(4)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_secs(10))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .seed(1)
}

fn status(code: u16) -> Response<Body> {
    Response::builder().status(code).body(Empty::new()).unwrap()
}

fn req(path: &str) -> Request<()> {
    Request::get(path).body(()).unwrap()
}

/// A service answering with whatever status the shared cell holds, counting calls.
#[derive(Clone)]
struct Dep {
    status: Arc<Mutex<u16>>,
    calls: Arc<AtomicUsize>,
}

impl Dep {
    fn new(code: u16) -> Self {
        Dep {
            status: Arc::new(Mutex::new(code)),
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn set(&self, code: u16) {
        *self.status.lock().unwrap() = code;
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Service<Request<()>> for Dep {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(status(*self.status.lock().unwrap())))
    }
}

async fn send<S>(svc: &mut S, path: &str) -> Result<StatusCode, BoxError>
where
    S: Service<Request<()>, Error = BoxError>,
    S::Response: HasStatus,
{
    let r = svc.ready().await?.call(req(path)).await?;
    Ok(r.status_code())
}

trait HasStatus {
    fn status_code(&self) -> StatusCode;
}
impl<B> HasStatus for Response<B> {
    fn status_code(&self) -> StatusCode {
        self.status()
    }
}

type BoxError = fusebox_classify::BoxError;

#[tokio::test(start_paused = true)]
async fn opens_rejects_probes_and_closes() {
    let dep = Dep::new(503);
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let mut svc = layer.layer(dep.clone());

    for _ in 0..4 {
        assert_eq!(
            send(&mut svc, "/").await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert_eq!(handle.state(), State::Open);
    let ev = events.try_recv().unwrap();
    match ev.kind {
        EventKind::Transition(t) => {
            assert_eq!(
                (t.from, t.to, t.reason),
                (State::Closed, State::Open, Reason::FailureRate)
            );
            assert_eq!(t.window.failures, 4);
        }
        other => panic!("{other:?}"),
    }

    // Open: rejected without reaching the dependency, with the time left.
    tokio::time::advance(Duration::from_secs(3)).await;
    let err = send(&mut svc, "/").await.unwrap_err();
    let open = err.downcast_ref::<CircuitOpen>().unwrap();
    assert_eq!(open.breaker(), "dep");
    assert_eq!(open.retry_after(), Duration::from_secs(7));
    assert_eq!(dep.calls(), 4);
    assert_eq!(
        handle.snapshot().until_half_open,
        Some(Duration::from_secs(7))
    );

    // Half-open: the dependency recovered; two probes close the breaker.
    dep.set(200);
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(send(&mut svc, "/").await.unwrap(), StatusCode::OK);
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(send(&mut svc, "/").await.unwrap(), StatusCode::OK);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(dep.calls(), 6);
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_the_probe_budget_and_drops_give_permits_back() {
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let handle = layer.handle();
    let (mock, mut server) = mock::pair::<Request<()>, Response<Body>>();
    let mut svc = layer.layer(mock);
    handle.force_open();
    handle.reset();
    // Trip with four failures.
    for _ in 0..4 {
        server.allow(1);
        let mut call = task::spawn(svc.ready().await.unwrap().call(req("/")));
        let (_, send) = server.next_request().await.unwrap();
        send.send_response(status(500));
        assert_ready!(call.poll()).unwrap();
    }
    assert_eq!(handle.state(), State::Open);
    tokio::time::advance(Duration::from_secs(10)).await;

    server.allow(10);
    let mut p1 = task::spawn(svc.ready().await.unwrap().call(req("/")));
    let mut p2 = task::spawn(svc.ready().await.unwrap().call(req("/")));
    let mut p3 = task::spawn(svc.ready().await.unwrap().call(req("/")));
    let err = assert_ready!(p3.poll()).unwrap_err();
    assert!(err.downcast_ref::<CircuitOpen>().unwrap().is_half_open());
    assert_pending!(p1.poll());
    assert_pending!(p2.poll());
    let (_, r1) = server.next_request().await.unwrap();
    let (_, _r2) = server.next_request().await.unwrap();
    // The caller of probe 2 gives up: its permit goes back.
    drop(p2);
    assert_eq!(handle.snapshot().probes_admitted, 1);
    let mut p4 = task::spawn(svc.ready().await.unwrap().call(req("/")));
    assert_pending!(p4.poll());
    let (_, r4) = server.next_request().await.unwrap();
    r1.send_response(status(200));
    assert_ready!(p1.poll()).unwrap();
    assert_eq!(handle.state(), State::HalfOpen);
    r4.send_response(status(204));
    assert_ready!(p4.poll()).unwrap();
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn client_errors_and_429_keep_it_closed() {
    let dep = Dep::new(400);
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let handle = layer.handle();
    let mut svc = layer.layer(dep.clone());
    for _ in 0..20 {
        send(&mut svc, "/").await.unwrap();
    }
    dep.set(429);
    for _ in 0..20 {
        send(&mut svc, "/").await.unwrap();
    }
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(
        snap.window.calls, 10,
        "400s count as successes; 429s are ignored"
    );
    assert_eq!(snap.window.failures, 0);
}

#[tokio::test(start_paused = true)]
async fn per_route_429_and_slow_calls() {
    let table = RouteTable::builder(Route::default())
        .route(
            "/partner",
            Route::new(fusebox_classify::StandardClassifier::new().count_throttling(true)),
        )
        .route(
            "/slow",
            Route::default().slow_call_duration(Duration::from_millis(100)),
        )
        .build()
        .unwrap();
    let partner = CircuitBreakerLayer::builder(config().build().unwrap())
        .routes(table.clone())
        .build()
        .expect("an in-memory breaker always builds");
    let internal = CircuitBreakerLayer::builder(config().build().unwrap())
        .routes(table.clone())
        .build()
        .expect("an in-memory breaker always builds");
    let dep = Dep::new(429);
    let mut p = partner.layer(dep.clone());
    let mut i = internal.layer(dep.clone());
    for _ in 0..4 {
        send(&mut p, "/partner").await.unwrap();
        send(&mut i, "/internal").await.unwrap();
    }
    assert_eq!(partner.handle().state(), State::Open);
    assert_eq!(internal.handle().state(), State::Closed);

    // Slow calls: a route with a 100 ms threshold, a dependency taking 150 ms.
    let slow = CircuitBreakerLayer::builder(config().slow_call_rate_threshold(50).build().unwrap())
        .routes(table)
        .build()
        .expect("an in-memory breaker always builds");
    let mut svc = slow.layer(tower::service_fn(|_: Request<()>| async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        Ok::<_, Infallible>(status(200))
    }));
    for _ in 0..3 {
        send(&mut svc, "/slow").await.unwrap();
    }
    assert_eq!(slow.handle().snapshot().window.slow, 3);
    send(&mut svc, "/slow").await.unwrap();
    assert_eq!(slow.handle().state(), State::Open);
    let mut events = slow.handle().subscribe();
    slow.handle().reset();
    match events.try_recv().unwrap().kind {
        EventKind::Transition(t) => assert_eq!(t.reason, Reason::Reset),
        other => panic!("{other:?}"),
    }
    // The same calls on an unmeasured route are not slow.
    for _ in 0..6 {
        send(&mut svc, "/other").await.unwrap();
    }
    assert_eq!(slow.handle().snapshot().window.slow, 0);
}

#[tokio::test(start_paused = true)]
async fn one_layer_is_one_breaker_across_layer_calls_and_clones() {
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let dep = Dep::new(502);
    let mut a = layer.layer(dep.clone());
    let mut b = layer.clone().layer(dep.clone());
    let mut c = b.clone();
    send(&mut a, "/").await.unwrap();
    send(&mut b, "/").await.unwrap();
    send(&mut c, "/").await.unwrap();
    send(&mut a, "/").await.unwrap();
    assert_eq!(c.handle().state(), State::Open);
    assert!(send(&mut a, "/").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn errors_are_classified() {
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let mut refused = layer.layer(tower::service_fn(|_: Request<()>| async {
        Err::<Response<Body>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }));
    for _ in 0..4 {
        let err = send(&mut refused, "/").await.unwrap_err();
        assert!(
            err.downcast_ref::<std::io::Error>().is_some(),
            "inner errors pass through"
        );
    }
    assert_eq!(layer.handle().state(), State::Open);

    // Overloaded is ignored by default, counted when configured.
    let overloaded = || {
        tower::service_fn(|_: Request<()>| async {
            Err::<Response<Body>, _>(Overloaded::new(8, Duration::from_millis(5)))
        })
    };
    let ignore = CircuitBreakerLayer::new(config().build().unwrap());
    let mut svc = ignore.layer(overloaded());
    for _ in 0..8 {
        send(&mut svc, "/").await.unwrap_err();
    }
    assert_eq!(ignore.handle().snapshot().window.calls, 0);
    let count = CircuitBreakerLayer::new(config().count_overloaded(true).build().unwrap());
    let mut svc = count.layer(overloaded());
    for _ in 0..4 {
        send(&mut svc, "/").await.unwrap_err();
    }
    assert_eq!(count.handle().state(), State::Open);
}

type Frames = Vec<Result<http_body::Frame<Bytes>, Infallible>>;
type GrpcBody = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Frames0>>>;
type Frames0 = Result<http_body::Frame<Bytes>, Infallible>;

fn grpc_response(trailers_status: &'static str) -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(trailers_status));
    let frames: Frames = vec![
        Ok(http_body::Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(futures_util::stream::iter(frames)))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn grpc_verdicts_come_from_trailers_and_trailers_only_responses() {
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|r: Request<()>| async move {
        Ok::<_, Infallible>(grpc_response(if r.uri().path() == "/ok" {
            "0"
        } else {
            "14"
        }))
    }));
    for i in 0..3 {
        let response = svc.ready().await.unwrap().call(req("/fail")).await.unwrap();
        // Nothing is recorded until the stream ends.
        assert_eq!(handle.snapshot().window.calls, i);
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "14");
    }
    assert_eq!(handle.snapshot().window.failures, 3);
    // A dropped stream is a cancellation: ignored.
    let response = svc.ready().await.unwrap().call(req("/fail")).await.unwrap();
    drop(response);
    assert_eq!(handle.snapshot().window.calls, 3);
    let ok = svc.ready().await.unwrap().call(req("/ok")).await.unwrap();
    ok.into_body().collect().await.unwrap();
    assert_eq!(
        handle.snapshot().window,
        WindowTotals {
            calls: 4,
            failures: 3,
            slow: 0
        }
    );
    assert_eq!(handle.state(), State::Open);

    // Trailers-only: the status is in the headers.
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(
            Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "13")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
    }));
    for _ in 0..4 {
        svc.ready().await.unwrap().call(req("/x")).await.unwrap();
    }
    assert_eq!(layer.handle().state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn operator_states_through_the_service() {
    let dep = Dep::new(500);
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    let handle = layer.handle();
    let mut svc = layer.layer(dep.clone());
    handle.metrics_only();
    for _ in 0..10 {
        assert_eq!(
            send(&mut svc, "/").await.unwrap(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::MetricsOnly);
    assert!(snap.would_open);
    assert_eq!(snap.window.failures, 10);
    handle.disable();
    for _ in 0..10 {
        send(&mut svc, "/").await.unwrap();
    }
    assert_eq!(
        handle.snapshot().window.failures,
        10,
        "disabled records nothing"
    );
    handle.force_open();
    assert!(send(&mut svc, "/").await.is_err());
    assert_eq!(dep.calls(), 20);
    handle.reset();
    dep.set(200);
    assert_eq!(send(&mut svc, "/").await.unwrap(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn keyed_breakers_isolate_keys_and_stay_bounded() {
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .max_keys(64)
        .build_keyed(|head: &RequestHead<'_>| head.uri().path().to_owned())
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|r: Request<()>| async move {
        Ok::<_, Infallible>(status(if r.uri().path() == "/bad" { 503 } else { 200 }))
    }));
    for _ in 0..4 {
        send(&mut svc, "/bad").await.unwrap();
        send(&mut svc, "/good").await.unwrap();
    }
    assert_eq!(handle.get(&"/bad".to_owned()).unwrap().state(), State::Open);
    assert_eq!(
        handle.get(&"/good".to_owned()).unwrap().state(),
        State::Closed
    );
    let err = send(&mut svc, "/bad").await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<CircuitOpen>().unwrap().key(),
        Some("/bad")
    );
    assert_eq!(send(&mut svc, "/good").await.unwrap(), StatusCode::OK);

    // Churn through 10,000 keys: the map never holds more than the cap.
    for i in 0..10_000 {
        send(&mut svc, &format!("/k/{i}")).await.unwrap();
        assert!(handle.len() <= 64);
    }
    assert!(handle.len() <= 64);
    handle.reset_all();
    assert!(
        handle
            .keys()
            .iter()
            .all(|k| handle.get(k).unwrap().state() == State::Closed)
    );

    // Idle keys are forgotten after the idle timeout.
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .idle_timeout(Duration::from_secs(60))
        .build_keyed(ByRoute)
        .unwrap();
    let mut svc = layer.layer(Dep::new(200));
    send(&mut svc, "/").await.unwrap();
    assert_eq!(layer.handle().len(), 1);
    assert_eq!(
        layer
            .handle()
            .get(&fusebox_classify::RouteId::DEFAULT)
            .unwrap()
            .key(),
        Some("default")
    );
    assert!(
        CircuitBreakerLayer::builder(config().build().unwrap())
            .max_keys(0)
            .build_keyed(ByHost)
            .unwrap_err()
            .to_string()
            .contains("max_keys")
    );
}

#[tokio::test(start_paused = true)]
async fn metrics_are_reported() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let dep = Dep::new(503);
    // Kept past the recording: a dropped breaker sets its state series to 0.
    let _svc = metrics::with_local_recorder(&recorder, || {
        let layer = CircuitBreakerLayer::new(config().build().unwrap());
        let mut svc = layer.layer(dep.clone());
        for _ in 0..6 {
            let mut call = task::spawn(svc.call(req("/")));
            let _ = assert_ready!(call.poll());
        }
        svc
    });
    let snapshot = snapshotter.snapshot().into_hashmap();
    let find = |name: &str, label: Option<(&str, &str)>| {
        snapshot
            .iter()
            .find(|(k, _)| {
                k.key().name() == name
                    && label.is_none_or(|(l, v)| {
                        k.key().labels().any(|x| x.key() == l && x.value() == v)
                    })
            })
            .map(|(_, (_, _, v))| match v {
                DebugValue::Counter(c) => *c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            })
    };
    assert_eq!(
        find(
            "fusebox_breaker_calls_total",
            Some(("kind", "not_permitted"))
        ),
        Some(2.0)
    );
    assert_eq!(
        find("fusebox_breaker_calls_total", Some(("kind", "failed"))),
        Some(4.0)
    );
    assert_eq!(
        find("fusebox_breaker_transitions_total", Some(("to", "open"))),
        Some(1.0)
    );
    assert_eq!(
        find("fusebox_breaker_state", Some(("state", "open"))),
        Some(1.0)
    );
    assert_eq!(
        find("fusebox_breaker_state", Some(("state", "closed"))),
        Some(0.0)
    );
    assert_eq!(find("fusebox_breaker_failure_ratio", None), Some(1.0));
}

#[test]
fn services_and_futures_are_send_and_static() {
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    fn check<S>(svc: S)
    where
        S: Service<Request<()>> + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
    {
        let _ = svc;
    }
    let layer = CircuitBreakerLayer::new(config().build().unwrap());
    assert_send_static(&layer);
    check(layer.layer(Dep::new(200)));
    let keyed = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(ByHost)
        .unwrap();
    check(keyed.layer(Dep::new(200)));
}

#[test]
fn concurrent_threads_never_exceed_the_probe_budget() {
    use crate::store::{MemoryStore, Store, StoreSpec};
    use std::collections::HashMap;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let cfg = Arc::new(
        config()
            .open_wait(Duration::from_nanos(1))
            .permitted_probes(3)
            .probe_successes(3)
            .build()
            .unwrap(),
    );
    let store = Arc::new(MemoryStore::new(StoreSpec {
        events: events::EventSink::new(Arc::clone(&cfg.name), Vec::new()),
        config: cfg,
        key: None,
        clock: fusebox_classify::Clock::new(),
    }));
    // generation -> (probes held now, most ever held)
    let held: Arc<Mutex<HashMap<u64, (u32, u32)>>> = Arc::default();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (store, held) = (Arc::clone(&store), Arc::clone(&held));
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..20_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let Ok(permit) = store.acquire() else {
                        continue;
                    };
                    let probe = permit.kind() == state::PermitKind::Probe;
                    if probe {
                        let mut h = held.lock().unwrap();
                        let e = h.entry(permit.generation()).or_default();
                        e.0 += 1;
                        e.1 = e.1.max(e.0);
                    }
                    std::thread::yield_now();
                    if probe {
                        held.lock()
                            .unwrap()
                            .get_mut(&permit.generation())
                            .unwrap()
                            .0 -= 1;
                    }
                    match x % 3 {
                        0 => store.release(permit),
                        1 => store.record(permit, true, false, None),
                        _ => store.record(permit, false, false, None),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let held = held.lock().unwrap();
    assert!(
        !held.is_empty(),
        "the breaker went half-open during the run"
    );
    for (generation, (now, max)) in held.iter() {
        assert_eq!(*now, 0);
        assert!(*max <= 3, "generation {generation}: {max} probes at once");
    }
}

#[tokio::test(start_paused = true)]
async fn closing_publishes_the_cleared_window_not_the_outage() {
    // Regression: the HALF_OPEN -> CLOSED transition carried the window from before the
    // clear, so the rate gauges were set to the outage's rates on closing and stayed there
    // while the breaker was healthy (fast successes do not update them).
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        CircuitBreakerLayer::new(config().build().unwrap())
    });
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let dep = Dep::new(503);
    let mut svc = layer.layer(dep.clone());
    for _ in 0..4 {
        send(&mut svc, "/").await.unwrap();
    }
    assert_eq!(handle.state(), State::Open);
    dep.set(200);
    tokio::time::advance(Duration::from_secs(10)).await;
    for _ in 0..2 {
        send(&mut svc, "/").await.unwrap();
    }
    assert_eq!(handle.state(), State::Closed);
    for _ in 0..20 {
        send(&mut svc, "/").await.unwrap();
    }

    let mut closing = None;
    while let Ok(event) = events.try_recv() {
        if let EventKind::Transition(t) = event.kind
            && t.to == State::Closed
        {
            closing = Some(t);
        }
    }
    let closing = closing.expect("a closing transition");
    assert_eq!(closing.reason, Reason::ProbesSucceeded);
    assert_eq!(
        closing.window,
        WindowTotals::default(),
        "the window it closed with"
    );
    let snapshot = snapshotter.snapshot().into_hashmap();
    let gauge = |name: &str, state: Option<&str>| {
        snapshot
            .iter()
            .find(|(k, _)| {
                k.key().name() == name
                    && state.is_none_or(|s| {
                        k.key()
                            .labels()
                            .any(|l| l.key() == "state" && l.value() == s)
                    })
            })
            .map(|(_, (_, _, v))| match v {
                DebugValue::Gauge(g) => g.into_inner(),
                other => panic!("{name} is not a gauge: {other:?}"),
            })
    };
    assert_eq!(gauge("fusebox_breaker_failure_ratio", None), Some(0.0));
    assert_eq!(gauge("fusebox_breaker_slow_call_ratio", None), Some(0.0));
    assert_eq!(gauge("fusebox_breaker_state", Some("closed")), Some(1.0));
    assert_eq!(gauge("fusebox_breaker_state", Some("open")), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn ipv6_hosts_each_get_their_own_breaker() {
    // `[2001:db8::1]` fails, `[2001:db8::2]` is healthy: only the first one's breaker opens,
    // with or without a port in the `Host` header.
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(ByHost)
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|request: Request<()>| {
        let host = request.headers()["host"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        async move {
            Ok::<_, Infallible>(status(if host.starts_with("[2001:db8::1]") {
                503
            } else {
                200
            }))
        }
    }));
    let mut call = async |host: &'static str| {
        let request = Request::get("/").header("host", host).body(()).unwrap();
        svc.ready()
            .await
            .unwrap()
            .call(request)
            .await
            .map(|r| r.status())
    };
    for host in [
        "[2001:db8::1]:8080",
        "[2001:db8::1]",
        "[2001:DB8::1]:443",
        "[2001:db8::1]",
    ] {
        assert_eq!(call(host).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let sick = host_key("[2001:db8::1]");
    assert_eq!(handle.get(&sick).unwrap().state(), State::Open);
    assert!(
        call("[2001:db8::1]:8080")
            .await
            .unwrap_err()
            .is::<CircuitOpen>()
    );
    for host in ["[2001:db8::2]:8080", "[2001:db8::2]"] {
        assert_eq!(call(host).await.unwrap(), StatusCode::OK, "{host}");
    }
    assert_eq!(
        handle.get(&host_key("[2001:db8::2]")).unwrap().state(),
        State::Closed
    );
    assert_eq!(handle.len(), 2, "one key per address: {:?}", handle.keys());
}

// === Partial failure: answers that name their key, the keys' spread ===

/// A request for `shard` (in its `x-shard` header).
fn for_shard(shard: &str) -> Request<()> {
    Request::get("/").header("x-shard", shard).body(()).unwrap()
}

fn request_shard(head: &RequestHead<'_>) -> smol_str::SmolStr {
    head.headers()
        .get("x-shard")
        .and_then(|v| v.to_str().ok())
        .map(smol_str::SmolStr::new)
        .unwrap_or_default()
}

fn by_shard() -> AnswerKeyed<fn(&RequestHead<'_>) -> smol_str::SmolStr> {
    AnswerKeyed::new(
        request_shard as fn(&RequestHead<'_>) -> smol_str::SmolStr,
        http::HeaderName::from_static("x-shard"),
    )
}

async fn call_shard<S>(svc: &mut S, shard: &str) -> Result<StatusCode, BoxError>
where
    S: Service<Request<()>, Error = BoxError>,
    S::Response: HasStatus,
{
    let r = svc.ready().await?.call(for_shard(shard)).await?;
    Ok(r.status_code())
}

/// A sharded dependency: requests for a shard in `hot` answer 503, and so do requests for
/// a shard `forward` sends to a hot one; every failing answer names the hot shard at fault
/// in `x-shard`, and the rest answer 200.
#[derive(Clone)]
struct Sharded {
    hot: Arc<Mutex<Vec<String>>>,
    forward: Arc<Vec<(&'static str, &'static str)>>,
}

impl Sharded {
    fn new(hot: &[&str], forward: &[(&'static str, &'static str)]) -> Self {
        Sharded {
            hot: Arc::new(Mutex::new(hot.iter().map(|s| s.to_string()).collect())),
            forward: Arc::new(forward.to_vec()),
        }
    }

    fn set_hot(&self, hot: Vec<String>) {
        *self.hot.lock().unwrap() = hot;
    }
}

impl Sharded {
    /// The dependency as a service.
    fn service(
        &self,
    ) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
    {
        let dep = self.clone();
        tower::service_fn(move |request: Request<()>| {
            std::future::ready(Ok::<_, Infallible>(dep.answer(&request)))
        })
    }

    fn answer(&self, request: &Request<()>) -> Response<Body> {
        let asked = request
            .headers()
            .get("x-shard")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let serving = self
            .forward
            .iter()
            .find(|(from, _)| *from == asked)
            .map_or(asked.clone(), |(_, to)| to.to_string());
        let hot = self.hot.lock().unwrap().contains(&serving);
        if hot {
            Response::builder()
                .status(503)
                .header("x-shard", serving)
                .body(Empty::new())
                .unwrap()
        } else {
            status(200)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_counts_against_the_key_it_names() {
    // Requests for s1 are served by s7, which is hot: the answers name s7.
    let dep = Sharded::new(&["s7"], &[("s1", "s7")]);
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(dep.service());
    for _ in 0..4 {
        assert_eq!(
            call_shard(&mut svc, "s1").await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(call_shard(&mut svc, "s2").await.unwrap(), StatusCode::OK);
    }
    let s7 = handle
        .get(&"s7".into())
        .expect("the named key has a breaker");
    assert_eq!(s7.state(), State::Open);
    assert_eq!(s7.key(), Some("s7"));
    // The request's key counted none of its calls: they were s7's.
    let s1 = handle.get(&"s1".into()).unwrap();
    assert_eq!(s1.state(), State::Closed);
    assert_eq!(s1.snapshot().window.calls, 0);
    assert_eq!(handle.get(&"s2".into()).unwrap().snapshot().window.calls, 4);
    // Calls for the named key are refused; the other keys' calls pass.
    let refused = call_shard(&mut svc, "s7").await.unwrap_err();
    assert_eq!(
        refused.downcast_ref::<CircuitOpen>().unwrap().key(),
        Some("s7")
    );
    assert_eq!(call_shard(&mut svc, "s2").await.unwrap(), StatusCode::OK);
    // An answer naming an open key is counted by neither breaker.
    let opened_on = s7.snapshot().window;
    assert_eq!(
        call_shard(&mut svc, "s1").await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(handle.get(&"s1".into()).unwrap().snapshot().window.calls, 0);
    assert_eq!(
        s7.snapshot().window,
        opened_on,
        "the open breaker records nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_malformed_answer_key_counts_against_the_request_key() {
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|r: Request<()>| async move {
        let named: &[u8] = match r.headers()["x-shard"].as_bytes() {
            b"empty" => b"",
            b"long" => b"a-shard-name-longer-than-23-bytes",
            _ => b"two words",
        };
        Ok::<_, Infallible>(
            Response::builder()
                .status(503)
                .header("x-shard", HeaderValue::from_bytes(named).unwrap())
                .body(Body::new())
                .unwrap(),
        )
    }));
    for key in ["empty", "long", "spaced"] {
        call_shard(&mut svc, key).await.unwrap();
        assert_eq!(
            handle.get(&key.into()).unwrap().snapshot().window.failures,
            1,
            "{key}"
        );
    }
    assert_eq!(handle.len(), 3, "no key was made from a malformed value");
}

#[tokio::test(start_paused = true)]
async fn a_grpc_trailer_names_the_key() {
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        trailers.insert("x-shard", HeaderValue::from_static("p9"));
        let frames: Frames = vec![
            Ok(http_body::Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
            Ok(http_body::Frame::trailers(trailers)),
        ];
        Ok::<_, Infallible>(
            Response::builder()
                .header("content-type", "application/grpc")
                .body(StreamBody::new(futures_util::stream::iter(frames)))
                .unwrap(),
        )
    }));
    for _ in 0..4 {
        let response = svc
            .ready()
            .await
            .unwrap()
            .call(for_shard("t1"))
            .await
            .unwrap();
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(handle.get(&"p9".into()).unwrap().state(), State::Open);
    assert_eq!(handle.get(&"t1".into()).unwrap().snapshot().window.calls, 0);
}

/// A dependency-wide breaker that a tenth of failing keys would open: 5 % of 20 calls.
fn dependency() -> CircuitBreakerConfigBuilder {
    config()
        .name("dependency")
        .count_window(20)
        .minimum_calls(20)
        .failure_rate_threshold(5)
}

/// Calls each of `keys` shards once per round for `rounds` rounds; returns how many calls
/// for a shard not in `hot` were refused.
async fn rounds<S>(svc: &mut S, keys: &[String], hot: &[String], rounds: usize) -> usize
where
    S: Service<Request<()>, Error = BoxError>,
    S::Response: HasStatus,
{
    let mut refused_healthy = 0;
    for _ in 0..rounds {
        for key in keys {
            if call_shard(svc, key).await.is_err() && !hot.contains(key) {
                refused_healthy += 1;
            }
        }
    }
    refused_healthy
}

#[tokio::test(start_paused = true)]
async fn hot_shards_open_their_own_breakers_not_the_dependency() {
    let keys: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let hot: Vec<String> = keys[..2].to_vec();
    let dep = Sharded::new(&[], &[]);
    let keyed = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let keys_handle = keyed.handle();
    let gated = CircuitBreakerLayer::builder(dependency().build().unwrap())
        .key_spread(keys_handle.spread_gate(spread::KeySpread::default()))
        .build()
        .unwrap();
    let dependency_handle = gated.handle();
    let mut svc = gated.layer(keyed.layer(dep.service()));
    // Every key is seen healthy first: with fewer keys than `min_keys` held, the gate
    // cannot tell a hot key from a dead dependency, and counts every failure.
    assert_eq!(rounds(&mut svc, &keys, &[], 1).await, 0);
    dep.set_hot(hot.clone());

    // 10 % of the keys fail: only their breakers open, and no healthy key is refused.
    assert_eq!(rounds(&mut svc, &keys, &hot, 10).await, 0);
    for key in &keys {
        let want = if hot.contains(key) {
            State::Open
        } else {
            State::Closed
        };
        assert_eq!(
            keys_handle.get(&key.as_str().into()).unwrap().state(),
            want,
            "{key}"
        );
    }
    assert_eq!(dependency_handle.state(), State::Closed);
    let gate = keys_handle.spread_gate(spread::KeySpread::default());
    assert_eq!(gate.failing_and_held(), (2, 20));

    // The same traffic without the gate: the dependency-wide breaker opens on the hot keys.
    let keyed = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let plain = CircuitBreakerLayer::new(dependency().build().unwrap());
    let plain_handle = plain.handle();
    let mut ungated = plain.layer(keyed.layer(dep.service()));
    dep.set_hot(Vec::new());
    rounds(&mut ungated, &keys, &[], 1).await;
    dep.set_hot(hot.clone());
    assert!(rounds(&mut ungated, &keys, &hot, 10).await > 0);
    assert_eq!(plain_handle.state(), State::Open);

    // Failures on 90 % of the keys are the dependency's: the gated breaker opens too.
    let most: Vec<String> = keys[..18].to_vec();
    dep.set_hot(most.clone());
    rounds(&mut svc, &keys, &most, 3).await;
    assert_eq!(dependency_handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_layer_built_for_a_key_names_it_in_its_rejections_events_and_handle() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let layer = CircuitBreakerLayer::builder(config().build().unwrap())
        .key("10.0.0.7:8080")
        .on_event(move |e| seen.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    let handle = layer.handle();
    assert_eq!(
        (handle.name(), handle.key()),
        ("dep", Some("10.0.0.7:8080"))
    );

    let breaker = layer.layer(());
    for _ in 0..4 {
        let mut guard = breaker.admit(&req("/")).unwrap();
        let verdict = guard
            .classify_response(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new())
            .unwrap();
        guard.finish_in_place(verdict);
    }
    let open = breaker.admit(&req("/")).unwrap_err();
    assert_eq!(open.breaker(), "dep");
    assert_eq!(open.key(), Some("10.0.0.7:8080"));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key.as_deref(), Some("10.0.0.7:8080"));

    // Its stage is the same breaker.
    let stage = layer.stage();
    assert!(stage.admit_request(&req("/")).is_err());
}

/// A keyed breaker and a dependency-wide breaker gated by its keys' spread, either stacked
/// by hand (the dependency-wide one outermost) or run in the keys' guards
/// ([`compose::gate_keys`]): the two breakers' handles, and the service over `dep`.
fn gated_pair(
    dep: &Sharded,
    in_guards: bool,
) -> (
    KeyedBreakerHandle<smol_str::SmolStr>,
    BreakerHandle,
    tower::util::BoxService<Request<()>, StatusCode, BoxError>,
) {
    let keyed = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let keys = keyed.handle();
    let gated = CircuitBreakerLayer::builder(
        dependency()
            .open_wait(Duration::from_secs(5))
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(2)
            .build()
            .unwrap(),
    )
    .key_spread(keys.spread_gate(spread::KeySpread::default()))
    .build()
    .unwrap();
    let dependency = gated.handle();
    let dep = dep.clone();
    let dep = tower::service_fn(move |request: Request<()>| {
        std::future::ready(Ok::<_, Infallible>(dep.answer(&request)))
    });
    let svc = if in_guards {
        let stage = keyed.layer(()).stage().clone();
        assert!(compose::gate_keys(&stage, gated.layer(()).stage()));
        assert!(
            !compose::gate_keys(&stage, gated.layer(()).stage()),
            "a keyed breaker is gated once"
        );
        tower::util::BoxService::new(keyed.layer(dep).map_response(|r: Response<_>| r.status()))
    } else {
        let stacked = gated.layer(keyed.layer(dep));
        tower::util::BoxService::new(stacked.map_response(|r: Response<_>| r.status()))
    };
    (keys, dependency, svc)
}

/// What `keys` and `dependency` hold now, in one line.
fn gated_state(keys: &KeyedBreakerHandle<smol_str::SmolStr>, dependency: &BreakerHandle) -> String {
    let mut line = format!("dependency {:?}", dependency.snapshot());
    let mut held: Vec<_> = keys.keys().into_iter().collect();
    held.sort();
    for key in held {
        let snapshot = keys.get(&key).unwrap().snapshot();
        line.push_str(&format!(
            " | {key}: {:?} gen {} {:?}",
            snapshot.state, snapshot.generation, snapshot.window
        ));
    }
    line
}

/// Drives the same traffic through `svc`: every answer and refusal, and after each round
/// what the breakers hold. The traffic has answers naming another key than the request's
/// (moved to it, and refused by it once it is open), refusals by a key's breaker and by the
/// dependency-wide one, half-open probes of both, and a cancelled call.
async fn gated_traffic(
    dep: &Sharded,
    (keys, dependency, mut svc): (
        KeyedBreakerHandle<smol_str::SmolStr>,
        BreakerHandle,
        tower::util::BoxService<Request<()>, StatusCode, BoxError>,
    ),
) -> Vec<String> {
    let names: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let mut seen = Vec::new();
    let round = |svc: &mut tower::util::BoxService<Request<()>, StatusCode, BoxError>,
                 shards: Vec<String>| {
        let calls: Vec<_> = shards
            .into_iter()
            .map(|shard| {
                let call = svc.call(for_shard(&shard));
                async move {
                    match call.await {
                        Ok(status) => format!("{shard} {status}"),
                        Err(e) => match e.downcast_ref::<CircuitOpen>() {
                            Some(open) => format!("{shard} refused by {:?}", open.key()),
                            None => format!("{shard} error {e}"),
                        },
                    }
                }
            })
            .collect();
        futures_util::future::join_all(calls)
    };
    // s1 is served by s7, which fails: s1's answers name s7, which opens; then s7's own
    // calls are refused by its breaker, and s1's answers name an open key. Of the two keys
    // held, one fails: the gate counts the failures.
    dep.set_hot(vec!["s7".into()]);
    for _ in 0..6 {
        seen.extend(round(&mut svc, vec!["s1".into(), "s7".into()]).await);
        seen.push(gated_state(&keys, &dependency));
    }
    // Every key once, healthy but s7 (still open).
    dep.set_hot(Vec::new());
    seen.extend(round(&mut svc, names.clone()).await);
    seen.push(gated_state(&keys, &dependency));
    // Most keys fail: the dependency opens, and refuses every call.
    dep.set_hot(names[..18].to_vec());
    for _ in 0..3 {
        seen.extend(round(&mut svc, names.clone()).await);
        seen.push(gated_state(&keys, &dependency));
    }
    // A call cancelled before it is polled gives both breakers their permits back.
    drop(svc.call(for_shard("s19")));
    seen.push(gated_state(&keys, &dependency));
    // Past the open wait the dependency probes: its probes go to keys open or closed.
    dep.set_hot(Vec::new());
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(6)).await;
        seen.extend(round(&mut svc, vec!["s7".into(), "s19".into(), "s3".into()]).await);
        seen.push(gated_state(&keys, &dependency));
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_gate_in_the_keys_guards_judges_as_a_gate_stacked_around_them() {
    // s1 is served by s7 throughout.
    let stacked = Sharded::new(&[], &[("s1", "s7")]);
    let stacked = gated_traffic(&stacked, gated_pair(&stacked, false)).await;
    let in_guards = Sharded::new(&[], &[("s1", "s7")]);
    let in_guards = gated_traffic(&in_guards, gated_pair(&in_guards, true)).await;
    assert_eq!(in_guards, stacked);
    // The traffic reached every path it is there for.
    let seen = stacked.join("\n");
    for path in [
        "s7 refused by Some(\"s7\")",
        "refused by None",
        "s1 503 Service Unavailable",
        "dependency Snapshot { state: Open",
        "dependency Snapshot { state: HalfOpen",
    ] {
        assert!(seen.contains(path), "{path} not seen in:\n{seen}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_gated_keys_guard_driven_by_hand_tells_the_gate() {
    let dep = Sharded::new(&[], &[]);
    let keyed = CircuitBreakerLayer::builder(config().build().unwrap())
        .build_keyed(by_shard())
        .unwrap();
    let keys = keyed.handle();
    let gated = CircuitBreakerLayer::builder(dependency().build().unwrap())
        .key_spread(keys.spread_gate(spread::KeySpread::default()))
        .build()
        .unwrap();
    let breaker = keyed.layer(dep.service());
    // A dependency-wide breaker built with another route table would judge calls on
    // routes it does not know: refused.
    let other_table = CircuitBreakerLayer::builder(dependency().build().unwrap())
        .routes(
            RouteTable::builder(Route::default())
                .route("GET /x", Route::default())
                .build()
                .unwrap(),
        )
        .key_spread(keys.spread_gate(spread::KeySpread::default()))
        .build()
        .unwrap();
    assert!(!compose::gate_keys(
        breaker.stage(),
        other_table.layer(()).stage()
    ));
    assert!(compose::gate_keys(breaker.stage(), gated.layer(()).stage()));
    let window = || gated.handle().snapshot().window;

    // A guard finished by hand records on the key's breaker, then on the gate.
    let mut guard = breaker.admit(&for_shard("h1")).unwrap();
    guard.finish_in_place(
        guard
            .classify_response(StatusCode::OK, &HeaderMap::new())
            .unwrap(),
    );
    drop(guard);
    assert_eq!(window().calls, 1);
    assert_eq!(keys.get(&"h1".into()).unwrap().snapshot().window.calls, 1);

    // Dropped unfinished, it gives both permits back and records nothing.
    drop(breaker.admit(&for_shard("h1")).unwrap());
    assert_eq!(window().calls, 1);

    // A key's refusal is told to the gate at once, as an error it ignores.
    drop(breaker.admit(&for_shard("h2")).unwrap());
    keys.get(&"h2".into()).unwrap().force_open();
    let refused = breaker.admit(&for_shard("h2")).unwrap_err();
    assert_eq!(refused.key(), Some("h2"));
    assert_eq!(window().calls, 1, "an ignored refusal is not counted");
    assert_eq!(gated.handle().snapshot().probes_admitted, 0);

    // The gate open, it refuses before any key's breaker is asked or made.
    gated.handle().force_open();
    let refused = breaker.admit(&for_shard("h3")).unwrap_err();
    assert_eq!(refused.key(), None);
    assert!(keys.get(&"h3".into()).is_none());
}
