//! The call-duration histogram records every call, on every route — routes without a
//! slow-call threshold too — in seconds, once a metrics recorder is installed; and a route
//! without a threshold still counts no call slow.

use bytes::Bytes;
use fusebox::retry::ReplayBody;
use fusebox::{CircuitBreakerConfig, Policy, Route, RouteTable};
use http::{Request, Response};
use http_body_util::Empty;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

fn dependency() -> impl Service<
    Request<ReplayBody<Empty<Bytes>>>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|request: Request<ReplayBody<Empty<Bytes>>>| async move {
        let wait = if request.uri().path() == "/slow" {
            300
        } else {
            20
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        Ok::<_, Infallible>(Response::new(Empty::new()))
    })
}

#[tokio::test(start_paused = true)]
async fn every_route_is_timed_with_a_recorder_installed() {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(fusebox::metrics::BREAKER_CALL_DURATION_SECONDS.to_owned()),
            &[0.1, 1.0],
        )
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    // No slow-call threshold anywhere: the default route and `GET /slow` have none.
    let routes = RouteTable::builder(Route::default())
        .route("GET /slow", Route::default())
        .build()
        .unwrap();
    let policy = Policy::builder("untimed")
        .routes(routes)
        .circuit_breaker(CircuitBreakerConfig::builder())
        .build()
        .unwrap();
    let svc = policy.layer(dependency());
    for uri in ["/a", "/a", "/slow"] {
        let request = Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
        svc.clone().oneshot(request).await.unwrap();
    }

    let scrape = handle.render();
    let has = |line: &str| scrape.lines().any(|l| l == line);
    for line in [
        "fusebox_breaker_call_duration_seconds_count{dependency=\"untimed\",route=\"default\"} 2",
        "fusebox_breaker_call_duration_seconds_bucket{dependency=\"untimed\",route=\"default\",le=\"0.1\"} 2",
        "fusebox_breaker_call_duration_seconds_count{dependency=\"untimed\",route=\"GET /slow\"} 1",
        "fusebox_breaker_call_duration_seconds_bucket{dependency=\"untimed\",route=\"GET /slow\",le=\"0.1\"} 0",
        "fusebox_breaker_call_duration_seconds_bucket{dependency=\"untimed\",route=\"GET /slow\",le=\"1\"} 1",
        // Timed, never slow: a route without a threshold counts no call slow.
        "fusebox_breaker_calls_total{dependency=\"untimed\",kind=\"successful\"} 3",
    ] {
        assert!(has(line), "{line} missing from:\n{scrape}");
    }
    assert!(
        !scrape.contains("kind=\"slow\"} 1") && !scrape.contains("kind=\"slow\"} 3"),
        "{scrape}"
    );
}
