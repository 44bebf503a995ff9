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

#[test]
fn a_files_duration_buckets_are_checked_with_everything_else() {
    use fusebox::config::PolicyFile;
    use fusebox::metrics::DurationBuckets;

    let file = PolicyFile::from_toml(
        "[metrics]\nduration_buckets = [0.005, 0.05, 0.5, 5]\n\n[policies.dep.breaker]\nfailure_rate_threshold = 50\n",
    )
    .unwrap();
    assert_eq!(
        file.duration_buckets().map(DurationBuckets::as_slice),
        Some(&[0.005, 0.05, 0.5, 5.0][..])
    );
    assert_eq!(
        PolicyFile::from_toml("[policies.dep.breaker]\n")
            .unwrap()
            .duration_buckets(),
        None
    );

    // Every problem at once, each at its path: a bound of zero, one out of order, one
    // infinite, an unknown key, and a policy's own problem.
    let err = PolicyFile::from_toml(
        "[metrics]\nduration_buckets = [0, 0.5, 0.2, inf]\nbucket = 1\n\n[policies.dep.breaker]\nfailure_rate_threshold = 150\n",
    )
    .unwrap_err();
    let problems: Vec<_> = err
        .problems()
        .iter()
        .map(|p| (p.path().to_owned(), p.rule().to_owned()))
        .collect();
    for (path, rule) in [
        (
            "metrics.duration_buckets[0]",
            "must be greater than zero, got 0",
        ),
        (
            "metrics.duration_buckets[2]",
            "must be greater than the bound before it (0.5), got 0.2",
        ),
        (
            "metrics.duration_buckets[3]",
            "must be a finite number of seconds, got inf",
        ),
    ] {
        assert!(
            problems.iter().any(|(p, r)| p == path && r == rule),
            "{path}: {rule} not in {problems:?}"
        );
    }
    assert!(
        problems.iter().any(|(p, _)| p == "metrics.bucket"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|(p, _)| p.ends_with("failure_rate_threshold")),
        "{problems:?}"
    );
    assert_eq!(
        DurationBuckets::new(Vec::new()).unwrap_err().problems()[0].path(),
        "metrics.duration_buckets"
    );
    assert_eq!(
        DurationBuckets::default().as_slice(),
        fusebox::metrics::DEFAULT_DURATION_BUCKETS
    );
}
