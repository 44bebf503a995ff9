//! `ServiceBuilderExt` against a real hyper server on 127.0.0.1 (paused time): a stack built
//! with `.circuit_breaker(..)`, `.fusebox_timeout(..)`, `.fusebox_concurrency_limit(..)`,
//! `.retry_budget(..)` or `.policy(..)` behaves as the same layer added with `.layer(..)`.

use bytes::Bytes;
use fusebox::error::{CircuitOpen, Elapsed, Overloaded};
use fusebox::retry::ReplayBody;
use fusebox::{
    BoxError, CircuitBreakerLayer, ConcurrencyLimitConfig, ConcurrencyLimitLayer, Policy,
    RetryBudgetLayer, RetryConfig, ServiceBuilderExt, TimeoutConfig, TimeoutLayer,
};
use fusebox_tests::{Reply, TestServer, client, four_call_breaker, get};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;

/// A client for what a retry layer (or a policy, whose retry stage is always there) sends:
/// replayable bodies.
fn replaying() -> Client<HttpConnector, ReplayBody<Body>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// What one call came to: a status, or which of fusebox's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Status(StatusCode),
    CircuitOpen,
    Overloaded,
    Elapsed,
}

fn seen<B>(result: Result<Response<B>, BoxError>) -> Seen {
    match result {
        Ok(r) => Seen::Status(r.status()),
        Err(e) if e.is::<CircuitOpen>() => Seen::CircuitOpen,
        Err(e) if e.is::<Overloaded>() => Seen::Overloaded,
        Err(e) if e.is::<Elapsed>() => Seen::Elapsed,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Sends `n` GETs to `server`, one after the other.
async fn calls<S, B>(svc: S, server: &TestServer, n: usize) -> Vec<Seen>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone,
{
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(seen(svc.clone().oneshot(get(&server.url("/"))).await));
    }
    out
}

/// Five calls to a dependency that answers 503: the breaker opens after the window's four
/// and rejects the fifth without sending it.
async fn breaker_drill<S, B>(svc: S, server: &TestServer)
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone,
{
    let failed = Seen::Status(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        calls(svc, server, 5).await,
        [failed, failed, failed, failed, Seen::CircuitOpen]
    );
    assert_eq!(server.received(), 4, "the rejected call was never sent");
}

#[tokio::test(start_paused = true)]
async fn circuit_breaker_opens_as_the_layer_form_does() {
    let config = || four_call_breaker("ext").build().unwrap();

    let server = TestServer::start(Reply::status(503)).await;
    let svc = ServiceBuilder::new()
        .circuit_breaker(config())
        .service(client());
    breaker_drill(svc, &server).await;

    let server = TestServer::start(Reply::status(503)).await;
    let svc = ServiceBuilder::new()
        .layer(CircuitBreakerLayer::new(config()))
        .service(client());
    breaker_drill(svc, &server).await;
}

#[tokio::test(start_paused = true)]
async fn policy_opens_its_breaker_as_the_layer_form_does() {
    let policy = || {
        Policy::builder("ext")
            .circuit_breaker(four_call_breaker("ext"))
            .build()
            .unwrap()
    };

    let server = TestServer::start(Reply::status(503)).await;
    breaker_drill(
        ServiceBuilder::new().policy(policy()).service(replaying()),
        &server,
    )
    .await;

    let server = TestServer::start(Reply::status(503)).await;
    breaker_drill(
        ServiceBuilder::new().layer(policy()).service(replaying()),
        &server,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn fusebox_timeout_fires_as_the_layer_form_does() {
    let config = || {
        TimeoutConfig::builder()
            .default_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let slow = || Reply::slow(200, Duration::from_secs(2));

    let server = TestServer::start(slow()).await;
    let svc = ServiceBuilder::new()
        .fusebox_timeout(config())
        .service(client());
    assert_eq!(calls(svc, &server, 1).await, [Seen::Elapsed]);

    let server = TestServer::start(slow()).await;
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(config()))
        .service(client());
    assert_eq!(calls(svc, &server, 1).await, [Seen::Elapsed]);
}

/// Two calls at once through a limit of one: one is sent, the other shed.
async fn two_at_once<S, B>(svc: S, server: &TestServer) -> Vec<Seen>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone,
{
    let (a, b) = tokio::join!(
        svc.clone().oneshot(get(&server.url("/"))),
        svc.clone().oneshot(get(&server.url("/")))
    );
    let mut out = vec![seen(a), seen(b)];
    out.sort_by_key(|s| format!("{s:?}"));
    out
}

#[tokio::test(start_paused = true)]
async fn fusebox_concurrency_limit_sheds_as_the_layer_form_does() {
    let config = || {
        ConcurrencyLimitConfig::builder()
            .max_concurrency(1)
            .build()
            .unwrap()
    };
    let slow = || Reply::slow(200, Duration::from_millis(100));
    let expected = [Seen::Overloaded, Seen::Status(StatusCode::OK)];

    let server = TestServer::start(slow()).await;
    let svc = ServiceBuilder::new()
        .fusebox_concurrency_limit(config())
        .service(client());
    assert_eq!(two_at_once(svc, &server).await, expected);
    assert_eq!(server.received(), 1);

    let server = TestServer::start(slow()).await;
    let svc = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(config()))
        .service(client());
    assert_eq!(two_at_once(svc, &server).await, expected);
    assert_eq!(server.received(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_budget_retries_as_the_layer_form_does() {
    let config = || {
        RetryConfig::builder()
            .seed(Some(7))
            .max_attempts(3)
            .base_delay(Duration::from_millis(10))
            .build()
            .unwrap()
    };
    let failed = [Seen::Status(StatusCode::SERVICE_UNAVAILABLE)];

    let server = TestServer::start(Reply::status(503)).await;
    let svc = ServiceBuilder::new()
        .retry_budget(config())
        .service(replaying());
    assert_eq!(calls(svc, &server, 1).await, failed);
    let with_ext = server.received();

    let server = TestServer::start(Reply::status(503)).await;
    let svc = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(config()))
        .service(replaying());
    assert_eq!(calls(svc, &server, 1).await, failed);
    assert_eq!(server.received(), with_ext);
    assert_eq!(
        with_ext, 3,
        "a GET answered 503 is tried max_attempts times"
    );
}
