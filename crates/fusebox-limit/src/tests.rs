//! Service-level tests: the layer around `tower-test` mocks, on paused time.

use crate::*;
use bytes::Bytes;
use fusebox_classify::{Route, RouteTable, StandardClassifier};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready_err, assert_ready_ok, task};
use tower::{Service, ServiceExt};
use tower_test::mock;

type Req = Request<()>;
type Res = Response<Full<Bytes>>;

fn config() -> ConcurrencyLimitConfigBuilder {
    ConcurrencyLimitConfig::builder().name("test")
}

fn fixed(n: usize) -> ConcurrencyLimitLayer {
    ConcurrencyLimitLayer::new(config().max_concurrency(n).build().unwrap())
}

fn ok() -> Res {
    Response::new(Full::new(Bytes::from_static(b"ok")))
}

fn status(code: u16) -> Res {
    let mut r = ok();
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

fn overloaded(err: &BoxError) -> &Overloaded {
    err.downcast_ref::<Overloaded>()
        .unwrap_or_else(|| panic!("expected Overloaded, got {err}"))
}

#[tokio::test(start_paused = true)]
async fn fails_fast_when_full() {
    let layer = fixed(2);
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);

    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_eq!(handle.in_flight(), 2);

    // poll_ready stays ready: admission is in call.
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(())));
    let err = assert_ready_err!(c.poll());
    let o = overloaded(&err);
    assert_eq!(o.limit(), 2);
    assert_eq!(o.retry_after(), Duration::from_secs(1));
    assert_eq!(
        err.to_string(),
        "concurrency limit of 2 reached; request shed"
    );

    // Only the two admitted calls reached the inner service.
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    let (_, respond) = inner.next_request().await.unwrap();
    respond.send_response(ok());
    let (_, _keep) = inner.next_request().await.unwrap();
    assert!(inner.poll_request().is_pending());

    let response = assert_ready_ok!(a.poll());
    assert_eq!(handle.in_flight(), 1, "released when the response arrived");
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes(),
        "ok"
    );

    assert_ready_ok!(svc.poll_ready());
    let mut d = task::spawn(svc.call(Request::new(())));
    assert_pending!(d.poll());
    assert_eq!(handle.in_flight(), 2);
}

#[tokio::test(start_paused = true)]
async fn errors_release_and_pass_through() {
    let layer = fixed(1);
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    let (_, respond) = inner.next_request().await.unwrap();
    respond.send_error(std::io::Error::other("boom"));
    let err = assert_ready_err!(a.poll());
    assert_eq!(err.to_string(), "boom");
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn queued_calls_wait_then_shed_after_max_wait() {
    let layer = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(1)
            .queue(4, Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);

    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    assert_eq!(handle.waiting(), 1);

    tokio::time::advance(Duration::from_millis(99)).await;
    assert_pending!(b.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(b.is_woken());
    let err = assert_ready_err!(b.poll());
    assert_eq!(overloaded(&err).limit(), 1);
    assert_eq!(handle.waiting(), 0);

    // The shed call never reached the inner service.
    let (_, _respond) = inner.next_request().await.unwrap();
    assert!(inner.poll_request().is_pending());
    assert_eq!(handle.in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn queued_calls_are_admitted_in_order_when_permits_free() {
    let layer = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(1)
            .queue(4, Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Request<u32>, Res, _>(layer);

    let mut calls = Vec::new();
    for i in 0..3 {
        assert_ready_ok!(svc.poll_ready());
        let mut call = task::spawn(svc.call(Request::new(i)));
        assert_pending!(call.poll());
        calls.push(call);
    }
    assert_eq!((handle.in_flight(), handle.waiting()), (1, 2));

    for i in 0..3u32 {
        let (req, respond) = inner.next_request().await.unwrap();
        assert_eq!(*req.body(), i, "first come, first served");
        assert!(inner.poll_request().is_pending(), "one at a time");
        tokio::time::advance(Duration::from_millis(300)).await;
        respond.send_response(ok());
        assert_ready_ok!(calls[i as usize].poll());
        // The next waiter was woken and calls the inner service when polled.
        if let Some(next) = calls.get_mut(i as usize + 1) {
            assert!(next.is_woken());
            assert_pending!(next.poll());
        }
    }
    assert_eq!((handle.in_flight(), handle.waiting()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_sheds_at_once() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        ConcurrencyLimitLayer::new(
            config()
                .max_concurrency(1)
                .queue(1, Duration::from_millis(50))
                .build()
                .unwrap(),
        )
    });
    let (mut svc, _inner) = mock::spawn_layer::<Req, Res, _>(layer);
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(())));
    let err = assert_ready_err!(c.poll());
    overloaded(&err);
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_ready_err!(b.poll());

    let rejected = rejections(&snapshotter);
    assert_eq!(rejected.get("queue_full"), Some(&1));
    assert_eq!(rejected.get("queue_timeout"), Some(&1));
    assert_eq!(rejected.get("full"), Some(&0));
}

type Snapshotter = metrics_util::debugging::Snapshotter;

fn rejections(snapshotter: &Snapshotter) -> std::collections::HashMap<String, u64> {
    use metrics_util::debugging::DebugValue;
    let mut out = std::collections::HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if key.key().name() == observe::CALLS {
            let reason = key
                .key()
                .labels()
                .find(|l| l.key() == "kind")
                .unwrap()
                .value()
                .to_owned();
            if let DebugValue::Counter(n) = value {
                out.insert(reason, n);
            }
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn gauges_follow_the_limit_and_calls() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || fixed(3));
    let (mut svc, _inner) = mock::spawn_layer::<Req, Res, _>(layer);
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    assert_ready_ok!(svc.poll_ready());
    let b = svc.call(Request::new(()));
    drop(b);
    // One snapshot: the debugging recorder resets what it reports.
    let snapshot = snapshotter.snapshot().into_vec();
    let gauge = |name: &str| {
        snapshot.iter().find_map(|(key, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Gauge(g) if key.key().name() == name => {
                let labels: Vec<_> = key
                    .key()
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                assert_eq!(labels, ["dependency=test"]);
                Some(g.into_inner())
            }
            _ => None,
        })
    };
    assert_eq!(gauge(observe::LIMIT), Some(3.0));
    assert_eq!(gauge(observe::IN_FLIGHT), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn dropped_futures_give_back_permits_and_places() {
    let layer = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(1)
            .queue(2, Duration::from_secs(10))
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Request<u32>, Res, _>(layer);

    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(0)));
    assert_pending!(a.poll());
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(1)));
    assert_pending!(b.poll());
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(2)));
    assert_pending!(c.poll());
    assert_eq!((handle.in_flight(), handle.waiting()), (1, 2));

    // A waiter that gives up leaves the queue.
    drop(b);
    assert_eq!((handle.in_flight(), handle.waiting()), (1, 1));

    // A caller that gives up on an admitted call frees its permit for the next waiter.
    let (first, _) = inner.next_request().await.unwrap();
    assert_eq!(*first.body(), 0);
    drop(a);
    assert_eq!((handle.in_flight(), handle.waiting()), (1, 0));
    assert!(c.is_woken());
    assert_pending!(c.poll());
    let (next, respond) = inner.next_request().await.unwrap();
    assert_eq!(*next.body(), 2, "the withdrawn waiter was skipped");

    // A permit granted to a waiter that is dropped before it takes it goes back too.
    assert_ready_ok!(svc.poll_ready());
    let mut d = task::spawn(svc.call(Request::new(3)));
    assert_pending!(d.poll());
    respond.send_response(ok());
    assert_ready_ok!(c.poll());
    assert_eq!(
        (handle.in_flight(), handle.waiting()),
        (1, 0),
        "granted to d"
    );
    drop(d);
    assert_eq!((handle.in_flight(), handle.waiting()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn bodies_hold_permits_until_their_end_when_asked() {
    let layer = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(2)
            .release(Release::AtEndOfBody)
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);

    // Read to the end: released at the last frame.
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    inner.next_request().await.unwrap().1.send_response(ok());
    let body = assert_ready_ok!(a.poll()).into_body();
    assert_eq!(handle.in_flight(), 1, "held by the body");
    assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(handle.in_flight(), 0);

    // Dropped unread: released on drop.
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    inner.next_request().await.unwrap().1.send_response(ok());
    let body = assert_ready_ok!(b.poll()).into_body();
    assert_eq!(handle.in_flight(), 1);
    drop(body);
    assert_eq!(handle.in_flight(), 0);

    // An empty body is over at once.
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(())));
    assert_pending!(c.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_response(Response::new(Full::new(Bytes::new())));
    let _body = assert_ready_ok!(c.poll()).into_body();
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn by_default_bodies_do_not_hold_permits() {
    let layer = fixed(1);
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    inner.next_request().await.unwrap().1.send_response(ok());
    let _body = assert_ready_ok!(a.poll()).into_body();
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn partitions_keep_their_share() {
    // Limit 10: "checkout" reserves 5, "search" 2; 3 are unreserved.
    let partitions = Partitions::builder(|r: &Request<&'static str>| *r.body())
        .partition("checkout", 0.5)
        .partition("search", 0.2)
        .build()
        .unwrap();
    let layer = fixed(10).partitioned(partitions);
    let handle = layer.handle();
    let (mut svc, _inner) = mock::spawn_layer::<Request<&'static str>, Res, _>(layer);
    let mut held = Vec::new();
    macro_rules! try_call {
        ($tenant:expr) => {{
            assert_ready_ok!(svc.poll_ready());
            let mut call = task::spawn(svc.call(Request::new($tenant)));
            match call.poll() {
                std::task::Poll::Pending => {
                    held.push(call);
                    true
                }
                std::task::Poll::Ready(Err(e)) => {
                    overloaded(&e);
                    false
                }
                std::task::Poll::Ready(Ok(_)) => panic!("the mock never answers by itself"),
            }
        }};
    }

    // A noisy checkout takes its 5 and the 3 unreserved, and no more.
    let admitted = (0..20).filter(|_| try_call!("checkout")).count();
    assert_eq!(admitted, 8);
    // Unlisted tenants can only borrow, and nothing is left to borrow.
    assert!(!try_call!("other"));
    // Search still finds its reservation.
    assert!(try_call!("search"));
    assert!(try_call!("search"));
    assert!(!try_call!("search"));
    assert_eq!(handle.in_flight(), 10);

    // Freeing a borrowed slot lets anyone borrow again.
    drop(held.remove(0));
    assert_eq!(handle.in_flight(), 9);
    assert!(try_call!("other"));
    assert!(!try_call!("checkout"));
}

#[tokio::test(start_paused = true)]
async fn queued_partitions_do_not_block_each_other() {
    let partitions = Partitions::builder(|r: &Request<&'static str>| *r.body())
        .partition("a", 0.5)
        .partition("b", 0.5)
        .build()
        .unwrap();
    let layer = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(2)
            .queue(8, Duration::from_secs(1))
            .build()
            .unwrap(),
    )
    .partitioned(partitions);
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Request<&'static str>, Res, _>(layer);
    let mut call = |t: &'static str| {
        assert_ready_ok!(svc.poll_ready());
        let mut c = task::spawn(svc.call(Request::new(t)));
        assert_pending!(c.poll());
        c
    };
    let a1 = call("a");
    let mut a2 = call("a"); // a's one slot is taken: waits
    let b1 = call("b"); // queued behind a2, but b's slot is free: admitted at once
    assert_eq!((handle.in_flight(), handle.waiting()), (2, 1));
    let (r1, _) = inner.next_request().await.unwrap();
    let (r2, _) = inner.next_request().await.unwrap();
    assert_eq!((*r1.body(), *r2.body()), ("a", "b"));
    drop(b1);
    // b's slot is b's: a2 still waits.
    assert_pending!(a2.poll());
    assert_eq!((handle.in_flight(), handle.waiting()), (1, 1));
    drop(a1);
    assert!(a2.is_woken());
    assert_pending!(a2.poll());
    assert_eq!(*inner.next_request().await.unwrap().0.body(), "a");
}

#[tokio::test(start_paused = true)]
async fn one_limit_per_layer_value() {
    let layer = fixed(2);
    let handle = layer.handle();
    let clone = layer.clone();
    let (mock_a, _ha) = mock::pair::<Req, Res>();
    let (mock_b, _hb) = mock::pair::<Req, Res>();
    let mut a = tower_layer::Layer::layer(&layer, mock_a);
    let mut b = tower_layer::Layer::layer(&clone, mock_b);
    let mut c = a.clone();
    let _fa = a.ready().await.unwrap().call(Request::new(()));
    let _fb = b.ready().await.unwrap().call(Request::new(()));
    let err = c
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap_err();
    overloaded(&err);
    assert_eq!(handle.in_flight(), 2);
    assert_eq!(b.handle().in_flight(), 2);
    // Another layer value is another limit.
    let (mock_d, _hd) = mock::pair::<Req, Res>();
    let mut d = tower_layer::Layer::layer(&fixed(2), mock_d);
    let _fd = d.ready().await.unwrap().call(Request::new(()));
    assert_eq!(handle.in_flight(), 2);
}

// === adaptive ===

fn aimd_layer(initial: usize, routes: RouteTable) -> ConcurrencyLimitLayer {
    ConcurrencyLimitLayer::builder(
        config()
            .aimd(
                AimdConfig::new()
                    .initial_limit(initial)
                    .min_limit(1)
                    .max_limit(100)
                    .backoff_ratio(0.5),
            )
            .build()
            .unwrap(),
    )
    .routes(routes)
    .build()
    .expect("the layer builds")
}

#[tokio::test(start_paused = true)]
async fn failures_timeouts_and_slow_calls_shrink_an_adaptive_limit() {
    let routes =
        RouteTable::single(Route::default().slow_call_duration(Duration::from_millis(100)));
    let layer = aimd_layer(16, routes);
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);

    // A 503: a failure.
    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_response(status(503));
    assert_ready_ok!(a.poll());
    assert_eq!(handle.limit(), 8);

    // A fusebox timeout: a failure.
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_error(fusebox_classify::error::Elapsed::new(
            "default".into(),
            Duration::from_millis(5),
        ));
    assert_ready_err!(b.poll());
    assert_eq!(handle.limit(), 4);

    // A 200 that took 150 ms: slow.
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(())));
    assert_pending!(c.poll());
    let (_, respond) = inner.next_request().await.unwrap();
    tokio::time::advance(Duration::from_millis(150)).await;
    respond.send_response(ok());
    assert_ready_ok!(c.poll());
    assert_eq!(handle.limit(), 2);
}

#[tokio::test(start_paused = true)]
async fn ignored_and_cancelled_calls_do_not_count() {
    let layer = aimd_layer(16, RouteTable::default());
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);

    // 429 is ignored by default; 404 is a success (but the limit is not in use: no growth).
    for code in [429, 404] {
        assert_ready_ok!(svc.poll_ready());
        let mut a = task::spawn(svc.call(Request::new(())));
        assert_pending!(a.poll());
        inner
            .next_request()
            .await
            .unwrap()
            .1
            .send_response(status(code));
        assert_ready_ok!(a.poll());
        assert_eq!(handle.limit(), 16, "after {code}");
    }
    // A cancelled call, even one that would have failed.
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    let (_, respond) = inner.next_request().await.unwrap();
    drop(b);
    respond.send_response(status(503));
    // Fusebox's own rejections (here from a breaker below) are ignored too.
    assert_ready_ok!(svc.poll_ready());
    let mut c = task::spawn(svc.call(Request::new(())));
    assert_pending!(c.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_error(fusebox_classify::error::CircuitOpen::new(
            "b".into(),
            None,
            Duration::ZERO,
            false,
        ));
    assert_ready_err!(c.poll());
    assert_eq!(handle.limit(), 16);
    assert_eq!(handle.in_flight(), 0);
}

type GrpcBody =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn grpc(status: &'static str) -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(status));
    let frames = vec![
        Ok(Frame::data(Bytes::from_static(b"msg"))),
        Ok(Frame::trailers(trailers)),
    ];
    let mut r = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    r
}

#[tokio::test(start_paused = true)]
async fn grpc_verdicts_are_read_from_the_trailers() {
    let layer = aimd_layer(16, RouteTable::default());
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Response<GrpcBody>, _>(layer);

    assert_ready_ok!(svc.poll_ready());
    let mut a = task::spawn(svc.call(Request::new(())));
    assert_pending!(a.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_response(grpc("14"));
    let body = assert_ready_ok!(a.poll()).into_body();
    assert_eq!(handle.limit(), 16, "not decided before the trailers");
    assert_eq!(handle.in_flight(), 0, "the permit went back with the head");
    let collected = body.collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "14");
    assert_eq!(handle.limit(), 8, "UNAVAILABLE is a drop");

    // A stream dropped before its trailers is a cancellation.
    assert_ready_ok!(svc.poll_ready());
    let mut b = task::spawn(svc.call(Request::new(())));
    assert_pending!(b.poll());
    inner
        .next_request()
        .await
        .unwrap()
        .1
        .send_response(grpc("14"));
    drop(assert_ready_ok!(b.poll()));
    assert_eq!(handle.limit(), 8);
}

#[tokio::test(start_paused = true)]
async fn limit_changes_are_traced_by_step() {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let layer = ConcurrencyLimitLayer::new(
        config()
            .aimd(AimdConfig::new().initial_limit(64).backoff_ratio(0.9))
            .log_step(10)
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (mut svc, mut inner) = mock::spawn_layer::<Req, Res, _>(layer);
    let mut limits = Vec::new();
    for _ in 0..4 {
        assert_ready_ok!(svc.poll_ready());
        let mut a = task::spawn(svc.call(Request::new(())));
        assert_pending!(a.poll());
        inner
            .next_request()
            .await
            .unwrap()
            .1
            .send_response(status(500));
        assert_ready_ok!(a.poll());
        limits.push(handle.limit());
    }
    // 64 → 58 → 52 → 47 → 42: events when 10 away from the last one reported.
    assert_eq!(limits, [58, 52, 47, 42]);
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let events: Vec<_> = out
        .lines()
        .filter(|l| l.contains("concurrency limit changed"))
        .collect();
    assert_eq!(events.len(), 2, "{out}");
    assert!(
        events[0].contains("from=64") && events[0].contains("to=52"),
        "{}",
        events[0]
    );
    assert!(
        events[1].contains("from=52") && events[1].contains("to=42"),
        "{}",
        events[1]
    );
    assert!(events[0].contains("limiter=test") && events[0].contains("algorithm=\"aimd\""));
}

/// A dependency on paused time that serves `knee` calls at `base` each and slows down in
/// proportion beyond that.
#[derive(Clone)]
struct Congestible {
    in_flight: Arc<AtomicUsize>,
    base: Duration,
    knee: usize,
}

impl Congestible {
    fn service(
        self,
    ) -> impl Service<Req, Response = Res, Error = Infallible, Future = impl Send> + Clone + Send
    {
        let this = self;
        tower::service_fn(move |_: Req| {
            let this = this.clone();
            async move {
                let now = this.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                let factor = now.max(this.knee) as u32;
                tokio::time::sleep(this.base * factor / this.knee as u32).await;
                this.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(ok())
            }
        })
    }
}

/// Drives `workers` closed-loop callers for `duration` of paused time.
async fn drive<S>(svc: S, workers: usize, duration: Duration)
where
    S: Service<
            Req,
            Response = Response<ResponseBody<Full<Bytes>, StandardClassifier>>,
            Error = BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let until = tokio::time::Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let mut svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < until {
                let ready = svc.ready().await.unwrap();
                if ready.call(Request::new(())).await.is_err() {
                    // Shed: back off a little, as a real caller would.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn vegas_finds_the_knee_of_a_congestible_dependency() {
    let dep = Congestible {
        in_flight: Arc::default(),
        base: Duration::from_millis(10),
        knee: 20,
    };
    let layer = ConcurrencyLimitLayer::new(
        config()
            .vegas(VegasConfig::new().initial_limit(5).max_limit(200))
            .queue(100, Duration::from_secs(10))
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let svc = tower_layer::Layer::layer(&layer, dep.clone().service());
    drive(svc.clone(), 100, Duration::from_secs(5)).await;
    let settled = handle.limit();
    assert!(
        (20..=32).contains(&settled),
        "near the knee of 20: {settled}"
    );

    // The dependency slows down three times over: the limit drops well below the knee.
    let slow = Congestible {
        base: Duration::from_millis(30),
        ..dep.clone()
    };
    let slow_svc = tower_layer::Layer::layer(&layer, slow.clone().service());
    drive(slow_svc, 100, Duration::from_secs(3)).await;
    let during = handle.limit();
    assert!(
        during < 12,
        "shrinks under the spike: {settled} -> {during}"
    );

    // And it recovers.
    drive(svc, 100, Duration::from_secs(5)).await;
    let after = handle.limit();
    assert!(
        (20..=32).contains(&after),
        "grows back: {during} -> {after}"
    );
}

#[tokio::test(start_paused = true)]
async fn aimd_settles_under_the_slow_call_threshold() {
    let dep = Congestible {
        in_flight: Arc::default(),
        base: Duration::from_millis(10),
        knee: 20,
    };
    // Calls of 12 ms or more are slow: the knee as the classifier sees it is at 24.
    let routes = RouteTable::single(Route::default().slow_call_duration(Duration::from_millis(12)));
    let layer = ConcurrencyLimitLayer::builder(
        config()
            .aimd(AimdConfig::new().initial_limit(5).max_limit(200))
            .queue(100, Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .routes(routes)
    .build()
    .expect("the layer builds");
    let handle = layer.handle();
    let svc = tower_layer::Layer::layer(&layer, dep.clone().service());
    drive(svc, 100, Duration::from_secs(10)).await;
    let settled = handle.limit();
    assert!((18..=24).contains(&settled), "{settled}");
    assert!(dep.in_flight.load(Ordering::SeqCst) == 0);
}

// === compile-time checks ===

#[allow(dead_code)]
fn futures_and_services_are_send_and_static() {
    fn send_static<T: Send + 'static>(_: &T) {}
    let (mock, _h) = mock::pair::<Request<String>, Res>();
    let mut svc = tower_layer::Layer::layer(&fixed(1), mock);
    send_static(&svc);
    let fut = svc.call(Request::new(String::new()));
    send_static(&fut);
    fn body_is_send<B: http_body::Body + Send + 'static>() {}
    body_is_send::<ResponseBody<Full<Bytes>, StandardClassifier>>();
}

#[test]
fn healthy_responses_stay_small() {
    // The compiler copies up to 128 bytes inline and calls memcpy beyond: a response that
    // crosses that line costs every call a few library calls. The body's completion is two
    // words (a permit, or a boxed pending verdict), with a niche for the pass-through.
    type Empty = http_body_util::Empty<Bytes>;
    assert_eq!(
        std::mem::size_of::<Option<Completion<StandardClassifier>>>(),
        16
    );
    assert_eq!(
        std::mem::size_of::<Response<ResponseBody<Empty, StandardClassifier>>>(),
        std::mem::size_of::<Response<Empty>>() + 16
    );
    // The future adds a permit (one pointer) and an adaptive call's record (one word).
    type Ready = std::future::Ready<Result<Response<Empty>, Infallible>>;
    type Bare = tower::util::ServiceFn<fn(Req) -> Ready>;
    assert_eq!(
        std::mem::size_of::<ResponseFuture<Bare, (), StandardClassifier>>(),
        std::mem::size_of::<Ready>() + 16
    );
}

/// A reload whose limit setting is unchanged (only the queue changed) keeps the value the
/// limit has now, one set by hand included (a recovery ramp's too); a changed setting
/// takes over; the handle reads the settings now.
#[test]
fn a_reload_that_leaves_the_limit_setting_keeps_its_value() {
    let fixed = |max: usize, waiters: usize| {
        ConcurrencyLimitConfig::builder()
            .name("kept")
            .max_concurrency(max)
            .queue(waiters, Duration::from_millis(50))
            .build()
            .expect("a valid limit")
    };
    let layer = ConcurrencyLimitLayer::new(fixed(10, 2));
    let handle = layer.handle();
    assert!(handle.set_limit(5));
    handle.reconfigure(&fixed(10, 4));
    assert_eq!(
        handle.limit(),
        5,
        "the setting did not change: the value set by hand stays"
    );
    assert_eq!(handle.queue().map(|q| q.max_waiters()), Some(4));
    assert_eq!(handle.config().queue().map(|q| q.max_waiters()), Some(4));
    handle.reconfigure(&fixed(12, 4));
    assert_eq!(handle.limit(), 12, "a new setting takes over");
    assert_eq!(handle.config().limit(), &Limit::Fixed(12));
    assert_eq!(
        handle.config().name(),
        "kept",
        "the name is the limit's own"
    );
}
