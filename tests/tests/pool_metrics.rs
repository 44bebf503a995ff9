//! A Prometheus scrape of a balanced pool (`fusebox::pool`): each endpoint's breaker series
//! carry `dependency` and the endpoint's `key`, so their number is the pool's size; the
//! pool's gauges say how many endpoints there are, how many are out, the cap and the panic;
//! an endpoint removed from the pool leaves the scrape.
//!
//! Its own test binary: it installs the global metrics recorder.

use bytes::Bytes;
use fusebox::CircuitBreakerConfig;
use fusebox::metrics as fm;
use fusebox::pool::{self, PoolLayer, Status};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use metrics_exporter_prometheus::PrometheusBuilder;
use metrics_util::MetricKindMask;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;
use tower::discover::Change;
use tower::{Service, ServiceExt};

/// What an endpoint answers.
type Answer = std::future::Ready<Result<Response<Empty<Bytes>>, Infallible>>;

/// An endpoint answering `status`.
fn endpoint(status: StatusCode) -> tower::util::ServiceFn<impl FnMut(Request<()>) -> Answer> {
    tower::service_fn(move |_: Request<()>| {
        let mut response = Response::new(Empty::new());
        *response.status_mut() = status;
        std::future::ready(Ok(response))
    })
}

/// The value of the series of `family` whose labels include every one of `labels`.
fn value(scrape: &str, family: &str, labels: &[&str]) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The `key` labels of the series of `family`.
fn keys(scrape: &str, family: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.split("key=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_pool_and_its_endpoints_have_their_series_and_a_removed_one_leaves() {
    // Forgets series nobody touched since the previous scrape (see `metrics_scrape`).
    let recorder = PrometheusBuilder::new()
        .idle_timeout(
            MetricKindMask::COUNTER | MetricKindMask::GAUGE,
            Some(Duration::ZERO),
        )
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    let breaker = CircuitBreakerConfig::builder()
        .name("search")
        .count_window(4)
        .minimum_calls(4)
        .open_wait(Duration::from_secs(60))
        .build()
        .unwrap();
    let layer = PoolLayer::builder(breaker).build();
    let pool_handle = layer.handle();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (key, status) in [
        ("s1", StatusCode::OK),
        ("s2", StatusCode::OK),
        ("s3", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        tx.send(Ok::<_, Infallible>(Change::Insert(key, endpoint(status))))
            .unwrap();
    }
    let mut balance = layer.balance(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    for _ in 0..200 {
        if pool_handle.status().ejected == 1 {
            break;
        }
        let _ = balance
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
    }
    assert_eq!(pool_handle.status().with_status(Status::Ejected), ["s3"]);

    fm::keep_alive();
    let scrape = handle.render();
    let all: BTreeSet<String> = ["s1", "s2", "s3"].map(String::from).into();
    for family in [fm::BREAKER_CALLS_TOTAL, fm::BREAKER_STATE] {
        assert_eq!(keys(&scrape, family), all, "{family}:\n{scrape}");
    }
    let open = value(
        &scrape,
        fm::BREAKER_STATE,
        &["dependency=\"search\"", "key=\"s3\"", "state=\"open\""],
    );
    assert_eq!(open, Some(1.0), "{scrape}");
    for (family, expected) in [
        (pool::ENDPOINTS, 3.0),
        (pool::EJECTED, 1.0),
        (pool::MAX_EJECTED, 1.0),
        (pool::WOULD_EJECT, 0.0),
        (pool::PANIC, 0.0),
    ] {
        assert_eq!(
            value(&scrape, family, &["dependency=\"search\""]),
            Some(expected),
            "{family}:\n{scrape}"
        );
    }
    for f in pool::FAMILIES {
        assert!(
            scrape.contains(&format!("# HELP {} {}", f.name, f.help)),
            "{} has no HELP",
            f.name
        );
        assert!(
            fm::families().any(|g| g.name == f.name),
            "{} is listed",
            f.name
        );
    }

    // s1 leaves the pool: its breaker goes with its endpoint, and its series with it.
    tx.send(Ok(Change::Remove("s1"))).unwrap();
    let _ = balance
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    fm::keep_alive();
    let scrape = handle.render();
    assert_eq!(
        value(
            &scrape,
            fm::BREAKER_STATE,
            &["key=\"s1\"", "state=\"closed\""]
        ),
        Some(0.0),
        "a removed endpoint reads 0 in every state until its series go:\n{scrape}"
    );
    fm::keep_alive();
    let scrape = handle.render();
    let left: BTreeSet<String> = ["s2", "s3"].map(String::from).into();
    assert_eq!(keys(&scrape, fm::BREAKER_CALLS_TOTAL), left, "{scrape}");
    assert_eq!(
        value(&scrape, pool::ENDPOINTS, &["dependency=\"search\""]),
        Some(2.0)
    );
}
