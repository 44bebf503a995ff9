//! fusebox's metrics through `metrics-exporter-prometheus`, scraped over HTTP from a real
//! server on 127.0.0.1: every layer's metrics appear under the names `fusebox::metrics`
//! documents, with the labels that tell policies apart.
//!
//! Its own test binary: it installs the global metrics recorder.

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use fusebox::metrics as names;
use fusebox::{CircuitBreakerConfig, Fallback, Policy, RetryConfig, Route, RouteTable};
use fusebox_tests::{Reply, RequestSeen, TestServer, client};
use http::Request;
use http_body_util::{BodyExt, Full};
use metrics_exporter_prometheus::PrometheusBuilder;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

fn request(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

#[tokio::test(start_paused = true)]
async fn every_layer_is_scraped_under_its_documented_name() {
    // The recorder first: layers register their metrics when they are built.
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");

    // A dependency that answers 503, except on /slow where it takes a second.
    let dependency = TestServer::with_behaviour(Arc::new(|seen: &RequestSeen, _| {
        if seen.path == "/slow" {
            Reply::slow(200, Duration::from_secs(1))
        } else {
            Reply::status(503)
        }
    }))
    .await;
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /slow",
            Route::default().timeout(Duration::from_millis(50)),
        )
        .build()
        .unwrap();
    let policy = Policy::builder("checkout")
        .routes(routes)
        .timeout(Duration::from_secs(1))
        .concurrency_limit(8)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("checkout")
                .count_window(4)
                .minimum_calls(4)
                .open_wait_jitter(Duration::ZERO),
        )
        .retry_budget(
            RetryConfig::builder()
                .name("checkout")
                .min_retries_per_second(100)
                .max_attempts(2)
                .seed(Some(1)),
        )
        .fallback(Fallback::new(|_| http::Response::new(Bytes::from_static(b"later"))).all_routes())
        .build()
        .unwrap();
    let client_svc = fusebox::hyper::wrap(&policy);

    // A timeout, 503s (retried once each) until the breaker opens, then fallbacks.
    let slow = client_svc
        .clone()
        .oneshot(request(&dependency.url("/slow")))
        .await;
    assert!(slow.expect("a fallback").body().is_fallback());
    for _ in 0..6 {
        let _ = client_svc
            .clone()
            .oneshot(request(&dependency.url("/pay")))
            .await;
    }
    assert_eq!(
        policy.breaker_handle().unwrap().state(),
        fusebox::breaker::State::Open
    );

    // Expose the registry on 127.0.0.1 and scrape it like Prometheus would.
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let response = client()
        .request(fusebox_tests::get(&format!("http://{addr}/metrics")))
        .await
        .expect("a scrape");
    assert_eq!(response.status(), 200);
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();

    for name in [
        names::BREAKER_STATE,
        names::BREAKER_TRANSITIONS_TOTAL,
        names::BREAKER_CALLS_TOTAL,
        names::BREAKER_FAILURE_RATIO,
        names::LIMIT_LIMIT,
        names::LIMIT_IN_FLIGHT,
        names::LIMIT_CALLS_TOTAL,
        names::TIMEOUT_ELAPSED_TOTAL,
        names::RETRY_ATTEMPTS_TOTAL,
        names::RETRY_RETRIES_TOTAL,
        names::POLICY_FALLBACKS_TOTAL,
    ] {
        assert!(
            text.contains(name),
            "{name} missing from the scrape:\n{text}"
        );
    }
    let has = |line: &str| text.lines().any(|l| l == line);
    assert!(
        has("fusebox_breaker_state{dependency=\"checkout\",state=\"open\"} 1"),
        "{text}"
    );
    assert!(
        has("fusebox_limit_limit{dependency=\"checkout\"} 8"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(
            "fusebox_breaker_transitions_total{dependency=\"checkout\",from=\"closed\",to=\"open\"}"
        )),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(
            "fusebox_policy_fallbacks_total{dependency=\"checkout\",reason=\"circuit_open\"}"
        )),
        "{text}"
    );
    assert!(
        text.lines()
            // The timed-out GET was retried once: two timeouts.
            .any(|l| l == "fusebox_timeout_elapsed_total{dependency=\"checkout\",route=\"GET /slow\",phase=\"headers\"} 2"),
        "{text}"
    );
}
