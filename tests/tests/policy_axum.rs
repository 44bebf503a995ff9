//! A fusebox Policy in an axum server on 127.0.0.1: fusebox's errors become 503s and 504s
//! with their headers, under `Router::route_layer` and `Router::layer`, with state shared by
//! every route, and route keys from `MatchedPath`. Paused time: handler latency is virtual.

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use fusebox::axum::PolicyLayer;
use fusebox::{CircuitBreakerConfig, Policy, Route, RouteTable};
use fusebox_tests::{client, get as request};
use http::{StatusCode, header};
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn fetch(addr: SocketAddr, path: &str) -> (StatusCode, Option<String>, String) {
    let response = client()
        .request(request(&format!("http://{addr}{path}")))
        .await
        .expect("the server answers");
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().expect("ascii").to_owned());
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (
        status,
        retry_after,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn slow(Path(ms): Path<u64>) -> &'static str {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    "done"
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_a_503_with_retry_after() {
    let policy = Policy::builder("api")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("api")
                .open_wait(Duration::from_secs(20))
                .open_wait_jitter(Duration::ZERO),
        )
        .build()
        .unwrap();
    let breaker = policy.breaker_handle().unwrap();
    let app = Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .route_layer(PolicyLayer::new(policy));
    let addr = serve(app).await;
    assert_eq!(fetch(addr, "/a").await.0, StatusCode::OK);

    // One breaker for the router, though route_layer built a service per route.
    breaker.force_open();
    for path in ["/a", "/b"] {
        let (status, retry_after, body) = fetch(addr, path).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        assert!(retry_after.is_some(), "{path}: Retry-After");
        assert_eq!(body, "service unavailable: circuit breaker open");
    }
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_by_handler_failures_answers_with_its_open_wait() {
    let policy = Policy::builder("api")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("api")
                .count_window(4)
                .minimum_calls(4)
                .open_wait(Duration::from_secs(20))
                .open_wait_jitter(Duration::ZERO),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "handler failed") }),
        )
        .layer(PolicyLayer::new(policy));
    let addr = serve(app).await;
    for _ in 0..4 {
        // A handler's own 500 passes through untouched (and counts as a failure).
        let (status, retry_after, body) = fetch(addr, "/fail").await;
        assert_eq!(
            (status, retry_after, body.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, None, "handler failed")
        );
    }
    let (status, retry_after, _) = fetch(addr, "/fail").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after.as_deref(), Some("20"));
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_is_a_503_on_every_route_that_shares_it() {
    let policy = Policy::builder("api").concurrency_limit(1).build().unwrap();
    let limit = policy.limit_handle().unwrap();
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let app = Router::new()
        .route(
            "/hold",
            get(move || {
                let held = held.clone();
                async move {
                    held.notified().await;
                    "released"
                }
            }),
        )
        .route("/other", get(|| async { "other" }))
        .route_layer(PolicyLayer::new(policy));
    let addr = serve(app).await;
    let holder = tokio::spawn(fetch(addr, "/hold"));
    while limit.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let (status, retry_after, body) = fetch(addr, "/other").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body, "service unavailable: overloaded");
    release.notify_one();
    assert_eq!(holder.await.unwrap().0, StatusCode::OK);
    assert_eq!(fetch(addr, "/other").await.0, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_limit_released_at_the_end_of_the_body_holds_its_permit_until_the_body_ends() {
    // The glue hands a response body back to axum unwrapped only when no layer waits on it:
    // this one's permit is released at the end of the body, so its wrapper must stay.
    let policy = Policy::builder("api")
        .concurrency_limit_config(
            fusebox::ConcurrencyLimitConfig::builder()
                .max_concurrency(1)
                .release(fusebox::limit::Release::AtEndOfBody),
        )
        .build()
        .unwrap();
    let limit = policy.limit_handle().unwrap();
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let held = held.clone();
                async move {
                    // The head goes out at once; the body's only chunk waits for the test.
                    let tail = futures_util::stream::once(async move {
                        held.notified().await;
                        Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(b"tail"))
                    });
                    axum::body::Body::from_stream(tail)
                }
            }),
        )
        .route("/other", get(|| async { "other" }))
        .route_layer(PolicyLayer::new(policy));
    let addr = serve(app).await;

    let streaming = client()
        .request(request(&format!("http://{addr}/stream")))
        .await
        .expect("the server answers");
    assert_eq!(streaming.status(), StatusCode::OK);
    // The head is here, the body is not: the call still holds the only permit.
    assert_eq!(limit.in_flight(), 1);
    let (status, _, body) = fetch(addr, "/other").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "service unavailable: overloaded");

    release.notify_one();
    let tail = streaming.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(tail, "tail");
    while limit.in_flight() != 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(fetch(addr, "/other").await.0, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn route_timeouts_come_from_the_matched_path() {
    // The table is keyed by axum's route templates.
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /tight/{ms}",
            Route::default().timeout(Duration::from_millis(50)),
        )
        .build()
        .unwrap();
    let policy = Policy::builder("api")
        .routes(routes)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/tight/{ms}", get(slow))
        .route("/loose/{ms}", get(slow))
        .route_layer(PolicyLayer::new(policy));
    let addr = serve(app).await;
    let (status, retry_after, body) = fetch(addr, "/tight/200").await;
    assert_eq!(
        (status, retry_after, body.as_str()),
        (StatusCode::GATEWAY_TIMEOUT, None, "gateway timeout")
    );
    assert_eq!(fetch(addr, "/tight/10").await.0, StatusCode::OK);
    assert_eq!(fetch(addr, "/loose/200").await.0, StatusCode::OK);
    assert_eq!(
        fetch(addr, "/loose/6000").await.0,
        StatusCode::GATEWAY_TIMEOUT
    );
}
