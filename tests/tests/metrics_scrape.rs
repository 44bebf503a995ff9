//! A Prometheus scrape of two policies and a keyed one: every family `fusebox::metrics`
//! lists is there with its HELP text and its labels, every series belongs to one
//! dependency (and, for the keyed breaker, one key), and a key the breaker forgot leaves
//! the scrape while the live series stay.
//!
//! Its own test binary: it installs the global metrics recorder.

use bytes::Bytes;
use fusebox::metrics::{self as fm, Kind};
use fusebox::{
    CircuitBreakerConfig, Fallback, KeyBy, Policy, PolicyBuilder, RetryConfig, Route, RouteTable,
};
use fusebox_retry::ReplayBody;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use metrics_util::MetricKindMask;
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

type Body = Empty<Bytes>;

/// One rendered series: its family's name (`_bucket`, `_sum`, `_count` taken off a
/// histogram's), its labels.
#[derive(Debug)]
struct Line {
    family: String,
    labels: BTreeMap<String, String>,
}

fn parse(text: &str) -> Vec<Line> {
    let histograms: BTreeSet<&str> = fm::families()
        .filter(|f| f.kind == Kind::Histogram)
        .map(|f| f.name)
        .collect();
    text.lines()
        .filter(|l| l.starts_with("fusebox_"))
        .map(|l| {
            let (name, rest) = l
                .split_once('{')
                .unwrap_or((l.split(' ').next().expect("a name"), ""));
            let mut family = name.to_owned();
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = name.strip_suffix(suffix)
                    && histograms.contains(base)
                {
                    family = base.to_owned();
                }
            }
            let inner = rest.rsplit_once('}').map(|(i, _)| i).unwrap_or("");
            let labels = inner
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").expect("label=\"value\"");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            Line { family, labels }
        })
        .collect()
}

fn routes() -> RouteTable {
    RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(500)))
        .route(
            "GET /slow",
            Route::default().timeout(Duration::from_millis(50)),
        )
        .build()
        .expect("a valid table")
}

/// A policy with all four layers and a fallback, none of them named: each takes the
/// policy's name.
fn policy(name: &str) -> PolicyBuilder {
    Policy::builder(name)
        .routes(routes())
        .timeout(Duration::from_secs(1))
        .concurrency_limit(8)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4)
                .open_wait_jitter(Duration::ZERO),
        )
        .retry_budget(RetryConfig::builder().max_attempts(1).seed(Some(1)))
        .fallback(Fallback::new(|_| Response::new(Bytes::from_static(b"later"))).all_routes())
}

/// A dependency answering `status`, except on /slow, which never answers in time.
fn dependency(
    status: StatusCode,
) -> impl Service<
    Request<ReplayBody<Body>>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |request: Request<ReplayBody<Body>>| async move {
        if request.uri().path() == "/slow" {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let mut response = Response::new(Empty::new());
        *response.status_mut() = status;
        Ok::<_, Infallible>(response)
    })
}

async fn call<S>(service: &mut S, uri: &str)
where
    S: Service<Request<Body>>,
    S::Error: std::fmt::Debug,
{
    let request = Request::get(uri).body(Empty::new()).expect("a request");
    let _ = service.ready().await.expect("ready").call(request).await;
}

#[tokio::test(start_paused = true)]
async fn a_scrape_of_two_policies_and_a_keyed_one_has_every_family_with_unmixed_series() {
    // An exporter that forgets series nobody touched since the previous scrape: the
    // harshest idle timeout, so that three scrapes show what goes and what stays.
    let recorder = PrometheusBuilder::new()
        .idle_timeout(
            MetricKindMask::COUNTER | MetricKindMask::GAUGE,
            Some(Duration::ZERO),
        )
        .set_buckets_for_metric(
            Matcher::Full(fm::BREAKER_CALL_DURATION_SECONDS.to_owned()),
            &[0.01, 0.1, 1.0],
        )
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    let alpha = policy("alpha").build().unwrap();
    let beta = policy("beta").build().unwrap();
    let gamma = policy("gamma")
        .breaker_key(KeyBy::Host)
        .max_keys(2)
        .build()
        .unwrap();
    let mut alpha_svc = alpha.layer(dependency(StatusCode::OK));
    let mut beta_svc = beta.layer(dependency(StatusCode::SERVICE_UNAVAILABLE));
    let mut gamma_svc = gamma.layer(dependency(StatusCode::OK));

    for _ in 0..4 {
        call(&mut alpha_svc, "http://alpha.test/pay").await;
        // Four 503s open beta's breaker; the calls after it get the fallback.
        call(&mut beta_svc, "http://beta.test/pay").await;
    }
    call(&mut beta_svc, "http://beta.test/pay").await;
    call(&mut alpha_svc, "http://alpha.test/slow").await;
    call(&mut gamma_svc, "http://a.gamma.test/x").await;
    call(&mut gamma_svc, "http://b.gamma.test/x").await;
    call(&mut gamma_svc, "http://b.gamma.test/x").await;

    fm::keep_alive();
    let first = handle.render();
    let lines = parse(&first);

    // Every family is there, with its HELP and TYPE lines (the Redis store's, the pool's
    // and the incoming-deadline counter's need a Redis store, a balanced pool and a
    // malformed header; `pool_metrics` scrapes the pool's).
    for f in fm::families() {
        if f.name.starts_with("fusebox_redis_")
            || f.name.starts_with("fusebox_pool_")
            || f.name == fm::DEADLINE_MALFORMED_TOTAL
        {
            continue;
        }
        assert!(
            lines.iter().any(|l| l.family == f.name),
            "{} missing from the scrape:\n{first}",
            f.name
        );
        assert!(
            first.contains(&format!("# HELP {} {}", f.name, f.help)),
            "{} has no HELP:\n{first}",
            f.name
        );
        assert!(
            first.contains(&format!("# TYPE {} {}", f.name, f.kind.as_str())),
            "{} has no TYPE {}",
            f.name,
            f.kind.as_str()
        );
    }

    // Every series carries exactly the labels of its family, and belongs to one
    // dependency; the keyed policy's breaker series each to one key.
    let families: BTreeMap<&str, &fusebox::classify::series::Family> =
        fm::families().map(|f| (f.name, f)).collect();
    for line in &lines {
        let family = families
            .get(line.family.as_str())
            .unwrap_or_else(|| panic!("{} is not a family fusebox lists", line.family));
        let dependency = &line.labels["dependency"];
        assert!(
            ["alpha", "beta", "gamma"].contains(&dependency.as_str()),
            "{line:?}"
        );
        let keyed = dependency == "gamma"
            && line.family.starts_with("fusebox_breaker_")
            && family.kind != Kind::Histogram;
        for label in line.labels.keys() {
            if label == "le" && family.kind == Kind::Histogram {
                continue;
            }
            assert!(
                family.labels.contains(&label.as_str()),
                "{line:?}: {label} is not a label of {}",
                family.name
            );
        }
        for label in family.labels {
            let present = line.labels.contains_key(*label);
            let expected = *label != "key" || keyed;
            assert_eq!(present, expected, "{line:?}: {label}");
        }
    }

    let has = |line: &str| first.lines().any(|l| l == line);
    let starts = |prefix: &str| first.lines().any(|l| l.starts_with(prefix));
    assert!(
        has("fusebox_breaker_state{dependency=\"alpha\",state=\"closed\"} 1"),
        "{first}"
    );
    assert!(has(
        "fusebox_breaker_state{dependency=\"alpha\",state=\"open\"} 0"
    ));
    assert!(has(
        "fusebox_breaker_state{dependency=\"beta\",state=\"open\"} 1"
    ));
    assert!(has(
        "fusebox_breaker_state{dependency=\"beta\",state=\"closed\"} 0"
    ));
    assert!(has(
        "fusebox_breaker_calls_total{dependency=\"alpha\",kind=\"successful\"} 4"
    ));
    assert!(has(
        "fusebox_breaker_calls_total{dependency=\"beta\",kind=\"failed\"} 4"
    ));
    assert!(has(
        "fusebox_breaker_calls_total{dependency=\"beta\",kind=\"not_permitted\"} 1"
    ));
    assert!(has("fusebox_breaker_failure_ratio{dependency=\"beta\"} 1"));
    assert!(has(
        "fusebox_breaker_failure_ratio_threshold{dependency=\"beta\"} 0.5"
    ));
    assert!(starts(
        "fusebox_breaker_transitions_total{dependency=\"beta\",from=\"closed\",to=\"open\"} 1"
    ));
    assert!(has(
        "fusebox_policy_fallbacks_total{dependency=\"beta\",reason=\"circuit_open\"} 1"
    ));
    // The timed-out call: counted under alpha's own route series, not a shared one.
    assert!(has(
        "fusebox_timeout_elapsed_total{dependency=\"alpha\",route=\"GET /slow\",phase=\"headers\"} 1"
    ));
    assert!(has(
        "fusebox_timeout_elapsed_total{dependency=\"beta\",route=\"GET /slow\",phase=\"headers\"} 0"
    ));
    assert!(has(
        "fusebox_timeout_elapsed_total{dependency=\"beta\",route=\"default\",phase=\"headers\"} 0"
    ));
    // Calls by how the timeout saw them end: alpha's four answers in time and the one it
    // cut short; beta's calls that reached it all answered (the rest the breaker refused).
    assert!(has(
        "fusebox_timeout_calls_total{dependency=\"alpha\",route=\"default\",kind=\"completed\"} 4"
    ));
    assert!(has(
        "fusebox_timeout_calls_total{dependency=\"alpha\",route=\"GET /slow\",kind=\"elapsed\"} 1"
    ));
    assert!(has(
        "fusebox_timeout_calls_total{dependency=\"alpha\",route=\"GET /slow\",kind=\"completed\"} 0"
    ));
    assert!(has(
        "fusebox_timeout_calls_total{dependency=\"beta\",route=\"default\",kind=\"completed\"} 4"
    ));
    // Unnamed retry budgets and limits take the policy's name.
    assert!(has("fusebox_retry_attempts_total{dependency=\"alpha\"} 5"));
    assert!(has("fusebox_retry_attempts_total{dependency=\"beta\"} 5"));
    assert!(has("fusebox_limit_limit{dependency=\"gamma\"} 8"));
    assert!(has(
        "fusebox_limit_calls_total{dependency=\"alpha\",kind=\"admitted\"} 5"
    ));
    // Each key its own state and calls.
    assert!(has(
        "fusebox_breaker_state{dependency=\"gamma\",key=\"a.gamma.test\",state=\"closed\"} 1"
    ));
    assert!(has(
        "fusebox_breaker_calls_total{dependency=\"gamma\",key=\"b.gamma.test\",kind=\"successful\"} 2"
    ));
    assert!(has(
        "fusebox_breaker_calls_total{dependency=\"gamma\",key=\"a.gamma.test\",kind=\"successful\"} 1"
    ));
    // The durations of alpha's four fast calls (the timed-out one is an error the
    // timeout answered: its duration too) in seconds.
    assert!(has(
        "fusebox_breaker_call_duration_seconds_count{dependency=\"alpha\",route=\"default\"} 4"
    ));
    assert!(has(
        "fusebox_breaker_call_duration_seconds_bucket{dependency=\"alpha\",route=\"default\",le=\"0.01\"} 4"
    ));

    // A third host: the shard of two evicts the least recently used key, a.gamma.test.
    call(&mut gamma_svc, "http://c.gamma.test/x").await;
    let keys = |text: &str| -> BTreeSet<String> {
        parse(text)
            .into_iter()
            .filter_map(|l| l.labels.get("key").cloned())
            .collect()
    };
    fm::keep_alive();
    let second = handle.render();
    assert!(
        second.contains(
            "fusebox_breaker_state{dependency=\"gamma\",key=\"a.gamma.test\",state=\"closed\"} 0"
        ),
        "a forgotten key reads 0 in every state until its series go:\n{second}"
    );
    fm::keep_alive();
    let third = handle.render();
    assert_eq!(
        keys(&third),
        BTreeSet::from(["b.gamma.test".to_owned(), "c.gamma.test".to_owned()]),
        "{third}"
    );
    // The live series stayed: kept alive, although nothing changed them.
    for line in [
        "fusebox_breaker_state{dependency=\"alpha\",state=\"closed\"} 1",
        "fusebox_breaker_state{dependency=\"gamma\",key=\"b.gamma.test\",state=\"closed\"} 1",
        "fusebox_limit_limit{dependency=\"beta\"} 8",
        "fusebox_policy_fallbacks_total{dependency=\"beta\",reason=\"circuit_open\"} 1",
    ] {
        assert!(third.lines().any(|l| l == line), "{line} went:\n{third}");
    }
    // And they still record: a handle the exporter kept is the handle the layer holds.
    call(&mut alpha_svc, "http://alpha.test/pay").await;
    fm::keep_alive();
    let fourth = handle.render();
    assert!(
        fourth
            .lines()
            .any(|l| l == "fusebox_breaker_calls_total{dependency=\"alpha\",kind=\"successful\"} 5"),
        "{fourth}"
    );

    // Without keep_alive such an exporter forgets quiet live series too.
    let fifth = handle.render();
    assert!(
        !fifth.contains("fusebox_breaker_state{dependency=\"alpha\""),
        "{fifth}"
    );
    drop((alpha, beta, gamma));
}
