//! The services driven through tower-test mocks, on paused time.

use crate::telemetry::{DEADLINE_EXCEEDED_TOTAL, ELAPSED_TOTAL, MALFORMED_DEADLINE_TOTAL};
use crate::{
    BodyTimeoutLayer, DeadlineConfig, IncomingDeadlineLayer, TimeoutBody, TimeoutConfig,
    TimeoutLayer,
    error::{BoxError, DeadlineExceeded, Elapsed},
};
use bytes::Bytes;
use fusebox_classify::{Deadline, Outcome, Route, RouteTable, classify_error_chain};
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Channel};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::time::Duration;
use tokio::time::{Instant, advance};
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok, task};
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};
use tower_test::mock;

type Req = Request<()>;
type Res = Response<Channel<Bytes>>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn routes() -> RouteTable {
    RouteTable::builder(Route::default())
        .route("GET /fast", Route::default().timeout(ms(100)))
        .route("GET /slow", Route::default().timeout(ms(300)))
        .build()
        .unwrap()
}

fn config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .default_timeout(ms(200))
        .deadline_header("x-request-timeout-ms")
        .build()
        .unwrap()
}

fn layer() -> TimeoutLayer {
    TimeoutLayer::builder(config())
        .routes(routes())
        .build()
        .expect("the layer builds")
}

/// A timeout with its body layer outside it, as a Policy stacks them.
fn with_bodies(
    config: TimeoutConfig,
) -> ServiceBuilder<Stack<TimeoutLayer, Stack<BodyTimeoutLayer, Identity>>> {
    let timeout = TimeoutLayer::builder(config)
        .routes(routes())
        .build()
        .expect("the layer builds");
    ServiceBuilder::new()
        .layer(timeout.body_layer())
        .layer(timeout)
}

fn get(path: &str) -> Req {
    Request::get(path).body(()).unwrap()
}

fn with_deadline(path: &str, deadline: Deadline) -> Req {
    let mut req = get(path);
    req.extensions_mut().insert(deadline);
    req
}

/// A response whose body ends at once.
fn done() -> Res {
    let (tx, body) = Channel::new(1);
    drop(tx);
    Response::new(body)
}

fn elapsed(err: &BoxError) -> &Elapsed {
    err.downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("expected Elapsed, got {err:?}"))
}

/// A recorder for this thread (the tests run on a current-thread runtime).
fn recorder() -> (DebuggingRecorder, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    (recorder, snapshotter)
}

/// How much the counter `name` (with these labels) grew since the last snapshot: the
/// debugging recorder's snapshots drain counters.
fn counter(snapshotter: &Snapshotter, name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[tokio::test(start_paused = true)]
async fn each_route_gets_its_own_timeout() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());

    assert_ready_ok!(service.poll_ready());
    let mut fast = task::spawn(service.call(get("/fast")));
    assert_ready_ok!(service.poll_ready());
    let mut slow = task::spawn(service.call(get("/slow")));
    let (_fast_req, _fast_reply) = handle.next_request().await.unwrap();
    let (_slow_req, slow_reply) = handle.next_request().await.unwrap();
    assert_pending!(fast.poll());
    assert_pending!(slow.poll());

    advance(ms(99)).await;
    assert_pending!(fast.poll());
    advance(ms(1)).await;
    assert!(fast.is_woken());
    let err = assert_ready_err!(fast.poll());
    assert_eq!(elapsed(&err).route(), "GET /fast");
    assert_eq!(elapsed(&err).limit(), ms(100));

    // The slow route allows 300 ms: still waiting at 250 ms, and its answer gets through.
    advance(ms(150)).await;
    assert_pending!(slow.poll());
    slow_reply.send_response(done());
    assert_ready_ok!(slow.poll());
}

#[tokio::test(start_paused = true)]
async fn routes_without_a_timeout_use_the_default() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/unlisted")));
    let _pending = handle.next_request().await.unwrap();
    advance(ms(199)).await;
    assert_pending!(call.poll());
    advance(ms(1)).await;
    let err = assert_ready_err!(call.poll());
    assert_eq!(elapsed(&err).route(), "default");
    assert_eq!(elapsed(&err).limit(), ms(200));
}

#[tokio::test(start_paused = true)]
async fn a_header_timeout_is_a_failure_and_is_counted_by_route() {
    let (recorder, snapshotter) = recorder();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    advance(ms(100)).await;
    let err = assert_ready_err!(call.poll());

    // Opaque, downcastable, and a failure (retryable) to every layer's classifier.
    assert!(err.is::<Elapsed>());
    assert_eq!(
        err.to_string(),
        "request on `GET /fast` timed out after 100 ms"
    );
    let verdict = classify_error_chain(&*err);
    assert_eq!(verdict.outcome(), Outcome::Failure);
    assert_eq!(
        counter(
            &snapshotter,
            ELAPSED_TOTAL,
            &[("route", "GET /fast"), ("phase", "headers")]
        ),
        1
    );
    // A late answer goes nowhere and breaks nothing.
    reply.send_response(done());
}

#[tokio::test(start_paused = true)]
async fn inner_errors_pass_through_unchanged() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    reply.send_error(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    let err = assert_ready_err!(call.poll());
    assert!(!err.is::<Elapsed>());
    assert!(err.to_string().contains("refused"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_body_timeout_ends_the_stream_with_elapsed() {
    let (recorder, snapshotter) = recorder();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let config = TimeoutConfig::builder()
        .default_timeout(ms(200))
        .body_timeout(ms(500))
        .build()
        .unwrap();
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(with_bodies(config));
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    let (mut tx, body) = Channel::<Bytes>::new(4);
    reply.send_response(Response::new(body));
    let response = assert_ready_ok!(call.poll());
    // The body holds a pinned timer: it is `!Unpin`, as hyper expects of bodies.
    let mut body = Box::pin(response.into_body());
    assert!(body.has_timer());

    // The first chunk arrives; then the stream stalls.
    tx.send_data(Bytes::from_static(b"first")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");

    let mut next = task::spawn(body.frame());
    assert_pending!(next.poll());
    advance(ms(499)).await;
    assert_pending!(next.poll());
    advance(ms(1)).await;
    assert!(next.is_woken());
    let err = assert_ready!(next.poll()).unwrap().unwrap_err();
    drop(next);
    assert_eq!(elapsed(&err).route(), "GET /fast");
    assert_eq!(elapsed(&err).limit(), ms(500));
    assert_eq!(classify_error_chain(&*err).outcome(), Outcome::Failure);

    // The stream has ended: nothing hangs, even though the sender is still open.
    assert!(body.is_end_stream());
    assert!(body.frame().await.is_none());
    assert_eq!(
        counter(&snapshotter, ELAPSED_TOTAL, &[("phase", "body")]),
        1
    );
    drop(tx);
}

/// A call that answers after its timer was armed (it was pending once) takes the timer
/// with it: whoever keeps the finished future (a retry keeps its attempt's), no `Sleep`
/// stays registered to wake the task for nothing when the time runs out.
#[tokio::test(start_paused = true)]
async fn an_answered_call_keeps_no_armed_timer() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    assert_pending!(call.poll(), "the timer is armed");
    advance(ms(10)).await;
    reply.send_response(done());
    assert!(call.is_woken());
    assert_ready_ok!(call.poll());
    // Past the route's 100 ms: nothing wakes the task that still holds the future.
    advance(ms(500)).await;
    assert!(!call.is_woken(), "a finished call's timer fired");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_finishes_in_time_drops_its_timer() {
    let config = TimeoutConfig::builder()
        .body_timeout(ms(500))
        .build()
        .unwrap();
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(with_bodies(config));
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    let (mut tx, body) = Channel::<Bytes>::new(4);
    reply.send_response(Response::new(body));
    let mut body = Box::pin(assert_ready_ok!(call.poll()).into_body());
    tx.send_data(Bytes::from_static(b"all")).await.unwrap();
    drop(tx);
    let collected = (&mut body).collect().await.unwrap().to_bytes();
    assert_eq!(collected, "all");
    assert!(!body.has_timer());
    // Long after the limit, the finished body stays finished, without an error.
    advance(ms(1000)).await;
    assert!(body.frame().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_shorter_than_the_route_timeout_wins_and_is_sent_downstream() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    // /slow allows 300 ms; the caller has 120 ms left.
    let mut call = task::spawn(service.call(with_deadline("/slow", Deadline::after(ms(120)))));
    let (req, _reply) = handle.next_request().await.unwrap();
    assert_eq!(req.headers()["grpc-timeout"], "120000u");
    assert_eq!(req.headers()["x-request-timeout-ms"], "120");

    advance(ms(119)).await;
    assert_pending!(call.poll());
    advance(ms(1)).await;
    let err = assert_ready_err!(call.poll());
    assert_eq!(elapsed(&err).route(), "GET /slow");
    assert_eq!(elapsed(&err).limit(), ms(120));
}

#[tokio::test(start_paused = true)]
async fn a_longer_deadline_leaves_the_route_timeout_in_charge() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(with_deadline("/fast", Deadline::after(ms(5000)))));
    let (req, _reply) = handle.next_request().await.unwrap();
    // Downstream gets what this hop will wait for: the route's 100 ms.
    assert_eq!(req.headers()["grpc-timeout"], "100000u");
    assert_eq!(req.headers()["x-request-timeout-ms"], "100");
    advance(ms(100)).await;
    assert_eq!(elapsed(&assert_ready_err!(call.poll())).limit(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn a_stricter_outbound_grpc_timeout_is_kept() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut req = with_deadline("/slow", Deadline::after(ms(250)));
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("40m"));
    req.headers_mut()
        .insert("x-request-timeout-ms", HeaderValue::from_static("30"));
    let _call = task::spawn(service.call(req));
    let (req, _reply) = handle.next_request().await.unwrap();
    assert_eq!(req.headers()["grpc-timeout"], "40m");
    assert_eq!(req.headers()["x-request-timeout-ms"], "30");
}

#[tokio::test(start_paused = true)]
async fn without_a_deadline_no_header_is_written() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (req, reply) = handle.next_request().await.unwrap();
    assert!(req.headers().is_empty());
    reply.send_response(done());
    assert_ready_ok!(call.poll());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_also_bounds_the_response_body() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(with_bodies(config()));
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(with_deadline("/slow", Deadline::after(ms(250)))));
    let (_req, reply) = handle.next_request().await.unwrap();
    advance(ms(50)).await;
    let (tx, body) = Channel::<Bytes>::new(1);
    reply.send_response(Response::new(body));
    let mut body = Box::pin(assert_ready_ok!(call.poll()).into_body());
    assert!(body.has_timer());
    let mut next = task::spawn(body.frame());
    advance(ms(199)).await;
    assert_pending!(next.poll());
    advance(ms(1)).await;
    let err = assert_ready!(next.poll()).unwrap().unwrap_err();
    assert_eq!(elapsed(&err).limit(), ms(200));
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn without_a_body_timeout_or_deadline_bodies_pass_through() {
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(with_bodies(config()));
    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(get("/fast")));
    let (_req, reply) = handle.next_request().await.unwrap();
    let (mut tx, body) = Channel::<Bytes>::new(1);
    reply.send_response(Response::new(body));
    let mut body = Box::pin(assert_ready_ok!(call.poll()).into_body());
    assert!(!body.has_timer());
    // An hour later the stream is still open, and still delivers.
    advance(Duration::from_secs(3600)).await;
    tx.send_data(Bytes::from_static(b"late")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "late");
}

#[tokio::test(start_paused = true)]
async fn an_expired_deadline_never_reaches_the_inner_service() {
    let (recorder, snapshotter) = recorder();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    let deadline = Deadline::after(ms(10));
    advance(ms(10)).await;

    assert_ready_ok!(service.poll_ready());
    let mut call = task::spawn(service.call(with_deadline("/fast", deadline)));
    let err = assert_ready_err!(call.poll());
    assert!(err.is::<DeadlineExceeded>(), "{err:?}");
    // Never sent, so it says nothing about the dependency.
    assert_eq!(classify_error_chain(&*err).outcome(), Outcome::Ignored);
    assert_pending!(handle.poll_request());
    assert_eq!(
        counter(
            &snapshotter,
            DEADLINE_EXCEEDED_TOTAL,
            &[("route", "GET /fast")]
        ),
        1
    );

    // A deadline in the past by any amount is refused the same way.
    let mut stale =
        task::spawn(service.call(with_deadline("/x", Deadline::at(Instant::now() - ms(5)))));
    assert!(assert_ready_err!(stale.poll()).is::<DeadlineExceeded>());
    assert_pending!(handle.poll_request());
}

type Seen = Request<()>;

#[tokio::test(start_paused = true)]
async fn incoming_grpc_timeout_becomes_a_deadline() {
    let (mut service, mut handle) = mock::spawn_layer::<Seen, (), _>(IncomingDeadlineLayer::new());
    let start = Instant::now();
    assert_ready_ok!(service.poll_ready());
    let mut req = get("/pkg.Svc/Call");
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("2S"));
    let _call = task::spawn(service.call(req));
    let (seen, _reply) = handle.next_request().await.unwrap();
    let deadline = seen.extensions().get::<Deadline>().copied().unwrap();
    assert_eq!(deadline.instant(), start + ms(2000));
}

#[tokio::test(start_paused = true)]
async fn the_configured_millis_header_and_an_earlier_deadline_are_honoured() {
    let config = DeadlineConfig::builder()
        .header("x-request-timeout-ms")
        .build()
        .unwrap();
    let (mut service, mut handle) =
        mock::spawn_layer::<Seen, (), _>(IncomingDeadlineLayer::with_config(config));
    let start = Instant::now();

    assert_ready_ok!(service.poll_ready());
    let mut req = get("/");
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("2S"));
    req.headers_mut()
        .insert("x-request-timeout-ms", HeaderValue::from_static("750"));
    let _a = task::spawn(service.call(req));
    let (seen, _reply) = handle.next_request().await.unwrap();
    assert_eq!(
        seen.extensions().get::<Deadline>().unwrap().instant(),
        start + ms(750)
    );

    // A deadline already in the extensions that is earlier stays.
    assert_ready_ok!(service.poll_ready());
    let mut req = with_deadline("/", Deadline::after(ms(100)));
    req.headers_mut()
        .insert("x-request-timeout-ms", HeaderValue::from_static("750"));
    let _b = task::spawn(service.call(req));
    let (seen, _reply) = handle.next_request().await.unwrap();
    assert_eq!(
        seen.extensions().get::<Deadline>().unwrap().instant(),
        start + ms(100)
    );
}

#[tokio::test(start_paused = true)]
async fn malformed_grpc_timeouts_are_ignored_and_counted() {
    let (recorder, snapshotter) = recorder();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (mut service, mut handle) = mock::spawn_layer::<Seen, (), _>(IncomingDeadlineLayer::new());
    for bad in ["2 seconds", "S", "123456789S", "-1S", "1.5S", "2s"] {
        assert_ready_ok!(service.poll_ready());
        let mut req = get("/");
        req.headers_mut()
            .insert("grpc-timeout", HeaderValue::from_static(bad));
        let _call = task::spawn(service.call(req));
        let (seen, _reply) = handle.next_request().await.unwrap();
        assert!(seen.extensions().get::<Deadline>().is_none(), "{bad:?}");
        assert_eq!(seen.headers()["grpc-timeout"], bad);
    }
    assert_eq!(
        counter(
            &snapshotter,
            MALFORMED_DEADLINE_TOTAL,
            &[("header", "grpc-timeout")]
        ),
        6
    );

    // Without the header, nothing is read, counted or inserted.
    assert_ready_ok!(service.poll_ready());
    let _call = task::spawn(service.call(get("/")));
    let (seen, _reply) = handle.next_request().await.unwrap();
    assert!(seen.extensions().is_empty());
    assert_eq!(counter(&snapshotter, MALFORMED_DEADLINE_TOTAL, &[]), 0);
}

#[tokio::test(start_paused = true)]
async fn incoming_deadline_then_timeout_bound_a_handler() {
    // On a server: the caller's 50 ms deadline bounds the handler, whose route allows 200.
    let stack = ServiceBuilder::new()
        .layer(IncomingDeadlineLayer::new())
        .layer(layer());
    let (mut service, mut handle) = mock::spawn_layer::<Req, Res, _>(stack);
    assert_ready_ok!(service.poll_ready());
    let mut req = get("/unlisted");
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("50m"));
    let mut call = task::spawn(service.call(req));
    let _pending = handle.next_request().await.unwrap();
    advance(ms(50)).await;
    assert_eq!(elapsed(&assert_ready_err!(call.poll())).limit(), ms(50));
}

#[test]
fn services_futures_and_bodies_are_send_and_static() {
    fn send_static<T: Send + 'static>() {}
    type Svc = crate::Timeout<mock::Mock<Req, Res>, fusebox_classify::StandardClassifier>;
    send_static::<Svc>();
    type Fut = crate::future::ResponseFuture<
        mock::Mock<Req, Res>,
        (),
        fusebox_classify::StandardClassifier,
    >;
    send_static::<Fut>();
    send_static::<TimeoutBody<Channel<Bytes>>>();
    send_static::<crate::BodyTimeout<Svc, fusebox_classify::StandardClassifier>>();
    send_static::<crate::future::BodyFuture<Fut>>();
    send_static::<BodyTimeoutLayer>();
    send_static::<crate::IncomingDeadline<mock::Mock<Req, Res>>>();
    send_static::<TimeoutLayer>();
    send_static::<IncomingDeadlineLayer>();
}
