//! fusebox-timeout against real HTTP servers on 127.0.0.1: deadline propagation between two
//! servers, a slow dependency cut off by its route timeout, an expired deadline that never
//! leaves the process. Paused time: the servers' latency and the timers are virtual.

use bytes::Bytes;
use fusebox_classify::deadline::parse_grpc_timeout;
use fusebox_classify::{
    Deadline, Outcome, Route, RouteTable, StandardClassifier, classify_error_chain,
};
use fusebox_tests::{HttpClient, Reply, RequestSeen, TestServer, client, get};
use fusebox_timeout::error::{DeadlineExceeded, Elapsed};
use fusebox_timeout::{
    DeadlineConfig, IncomingDeadlineLayer, Timeout, TimeoutConfig, TimeoutLayer,
};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

const MILLIS_HEADER: &str = "x-request-timeout-ms";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The outbound client of server A: the test harness's hyper client behind a Timeout whose
/// routes allow 5 s, sending the budget in `grpc-timeout` and in milliseconds.
fn timeout_client() -> Timeout<HttpClient, StandardClassifier> {
    let routes = RouteTable::builder(Route::default().timeout(Duration::from_secs(5)))
        .route("GET /slow", Route::default().timeout(ms(250)))
        .build()
        .expect("a valid route table");
    let config = TimeoutConfig::builder()
        .deadline_header(MILLIS_HEADER)
        .build()
        .expect("a valid timeout config");
    ServiceBuilder::new()
        .layer(
            TimeoutLayer::builder(config)
                .routes(routes)
                .build()
                .expect("the layer builds"),
        )
        .service(client())
}

/// Server A: reads the caller's deadline, works for `work`, then calls `downstream`
/// through the Timeout-wrapped client, passing the deadline on.
async fn start_server_a(downstream: String, work: Duration) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    let outbound = timeout_client();
    let handler = tower::service_fn(move |req: Request<Incoming>| {
        let (outbound, downstream) = (outbound.clone(), downstream.clone());
        async move {
            let deadline = req.extensions().get::<Deadline>().copied();
            tokio::time::sleep(work).await;
            let mut call = get(&downstream);
            if let Some(deadline) = deadline {
                call.extensions_mut().insert(deadline);
            }
            let status = match outbound.oneshot(call).await {
                Ok(response) => response.status(),
                Err(e) if e.is::<Elapsed>() => StatusCode::GATEWAY_TIMEOUT,
                Err(_) => StatusCode::BAD_GATEWAY,
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let config = DeadlineConfig::builder()
        .header(MILLIS_HEADER)
        .build()
        .expect("a valid deadline config");
    let inbound = ServiceBuilder::new()
        .layer(IncomingDeadlineLayer::with_config(config))
        .service(handler);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let inbound = inbound.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    inbound.clone().oneshot(req)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(start_paused = true)]
async fn an_incoming_grpc_timeout_reduces_the_outbound_one() {
    let b = TestServer::start(Reply::status(200)).await;
    // A works for 500 ms before calling B.
    let a = start_server_a(b.url("/ledger"), ms(500)).await;

    for (header, value) in [("grpc-timeout", "2S"), (MILLIS_HEADER, "2000")] {
        let request = Request::get(format!("http://{a}/charge"))
            .header(header, value)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = client().request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "via {header}");
    }

    let seen = b.requests();
    assert_eq!(seen.len(), 2);
    for request in seen {
        // What B saw: at most the 1.5 s left of the caller's 2 s, and something left.
        let grpc = parse_grpc_timeout(&request.headers["grpc-timeout"]).unwrap();
        assert!(grpc > Duration::ZERO, "{grpc:?}");
        assert!(grpc <= ms(1500), "{grpc:?}");
        assert!(grpc > ms(1000), "{grpc:?}");
        let millis: u64 = request.headers[MILLIS_HEADER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1001..=1500).contains(&millis), "{millis}");
    }
}

#[tokio::test(start_paused = true)]
async fn without_an_incoming_deadline_nothing_is_propagated() {
    let b = TestServer::start(Reply::status(200)).await;
    let a = start_server_a(b.url("/ledger"), ms(10)).await;
    let response = client()
        .request(get(&format!("http://{a}/charge")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = b.requests();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].headers.contains_key("grpc-timeout"));
    assert!(!seen[0].headers.contains_key(MILLIS_HEADER));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_spent_upstream_fails_fast_without_calling_downstream() {
    let b = TestServer::start(Reply::status(200)).await;
    // The caller allows 300 ms; A works for 400 ms before calling B.
    let a = start_server_a(b.url("/ledger"), ms(400)).await;
    let request = Request::get(format!("http://{a}/charge"))
        .header("grpc-timeout", "300m")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(b.received(), 0);

    // The same, through the client alone: the error is DeadlineExceeded, ignored.
    let mut late = get(&b.url("/ledger"));
    late.extensions_mut().insert(Deadline::at(Instant::now()));
    let err = timeout_client().oneshot(late).await.unwrap_err();
    assert!(err.is::<DeadlineExceeded>(), "{err:?}");
    assert_eq!(classify_error_chain(&*err).outcome(), Outcome::Ignored);
    assert_eq!(b.received(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_slow_server_hits_the_route_timeout() {
    let b = TestServer::with_behaviour(Arc::new(|seen: &RequestSeen, _| {
        if seen.path == "/slow" {
            Reply::slow(200, Duration::from_secs(5))
        } else {
            Reply::slow(200, Duration::from_secs(1))
        }
    }))
    .await;
    let start = Instant::now();
    let err = timeout_client()
        .oneshot(get(&b.url("/slow")))
        .await
        .unwrap_err();
    let waited = start.elapsed();
    let elapsed = err.downcast_ref::<Elapsed>().expect("a fusebox timeout");
    assert_eq!(elapsed.route(), "GET /slow");
    assert_eq!(elapsed.limit(), ms(250));
    assert_eq!(classify_error_chain(&*err).outcome(), Outcome::Failure);
    // The request reached the server; the client gave up at the route's limit (virtual
    // time), long before the server's 5 s.
    assert_eq!(b.received(), 1);
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // Another route, answered in 1 s, gets the default of 5 s and its answer.
    let response = timeout_client()
        .oneshot(get(&b.url("/report")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
}
