//! Reload on paused time: a running policy takes new settings from a policy built anew or
//! from a file while calls flow — no call fails because of the reload, an open breaker
//! stays open (same generation, same open wait), a changed threshold, timeout or limit
//! applies to the next calls — and what cannot be applied in place (a window of another
//! size, another breaker) is reported and left as it was. An invalid file changes nothing
//! and lists every problem.

use bytes::Bytes;
use fusebox::breaker::{State, WindowConfig};
use fusebox::config::PolicyFile;
use fusebox::error::{CircuitOpen, Elapsed};
use fusebox::reload::Effect;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, Registry};
use fusebox_tests::reload::effect_at;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

use fusebox_tests::dependency::{Dependency, FAILING, HEALTHY, SLOW};

fn policy(threshold: u32, open_wait: u64, timeout_ms: u64, limit: usize) -> Policy {
    Policy::builder("dep")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(10)
                .minimum_calls(10)
                .failure_rate_threshold(threshold)
                .open_wait(Duration::from_secs(open_wait))
                .open_wait_jitter(Duration::ZERO)
                .permitted_probes(1)
                .probe_successes(1),
        )
        .concurrency_limit(limit)
        .timeout(Duration::from_millis(timeout_ms))
        .build()
        .expect("a valid policy")
}

fn request() -> Request<Empty<Bytes>> {
    Request::get("http://dep.example/")
        .body(Empty::new())
        .expect("a request")
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    ok: AtomicUsize,
    rejected_open: AtomicUsize,
    /// Any other error, or a status other than 200: what a reload must never cause.
    other: AtomicUsize,
}

/// `tasks` callers, each making `calls` calls 5 ms apart.
fn load<S, RB>(
    svc: S,
    tasks: usize,
    calls: usize,
    seen: Arc<Seen>,
) -> Vec<tokio::task::JoinHandle<()>>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<RB>, Error = fusebox::BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    RB: Send + 'static,
{
    (0..tasks)
        .map(|_| {
            let svc = svc.clone();
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                for _ in 0..calls {
                    match svc.clone().oneshot(request()).await {
                        Ok(r) if r.status() == StatusCode::OK => &seen.ok,
                        Err(e) if e.downcast_ref::<CircuitOpen>().is_some() => &seen.rejected_open,
                        _ => &seen.other,
                    }
                    .fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

/// A dependency's answer with `status` and no body.
fn answer(status: StatusCode) -> Result<Response<Empty<Bytes>>, std::convert::Infallible> {
    Ok(Response::builder()
        .status(status)
        .body(Empty::new())
        .expect("a response"))
}

/// A request without a body.
fn at(method: http::Method, uri: &str) -> Request<Empty<Bytes>> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Empty::new())
        .expect("a request")
}

async fn join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.expect("a caller");
    }
}

#[tokio::test(start_paused = true)]
async fn a_reload_under_load_fails_no_call_keeps_an_open_breaker_and_applies_to_the_next_calls() {
    let dep = Dependency::default();
    let running = policy(50, 60, 1000, 8);
    let svc = running.layer(dep.service());
    let breaker = running.breaker_handle().unwrap();
    let limit = running.limit_handle().unwrap();

    // Healthy traffic; the reload lands in the middle of it.
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 4, 40, Arc::clone(&seen));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let report = running.reload(&policy(20, 60, 2000, 16));
    assert!(report.is_complete(), "{report}");
    let paths: Vec<_> = report.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "breaker.failure_rate_threshold",
            "limit.max_concurrency",
            "timeout.default_timeout"
        ]
    );
    join(callers).await;
    assert_eq!(seen.other.load(Ordering::SeqCst), 0, "no call failed");
    assert_eq!(seen.rejected_open.load(Ordering::SeqCst), 0);
    assert_eq!(seen.ok.load(Ordering::SeqCst), 160);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(limit.limit(), 16, "the new limit");

    // The new threshold judges the next calls: 2 failures in a window of 10 are 20 %, which
    // opens at 20 % (and would not have at the 50 % it was built with).
    dep.set(FAILING);
    for _ in 0..2 {
        let r = svc.clone().oneshot(request()).await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let open = breaker.snapshot();
    assert_eq!(open.state, State::Open, "opened at the new threshold");
    assert_eq!(open.until_half_open, Some(Duration::from_secs(60)));

    // A reload while open, under load: the breaker stays open, in the same generation, with
    // the same wait, and every call is rejected by it — none by the reload.
    dep.set(HEALTHY);
    let reached = dep.calls();
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 4, 20, Arc::clone(&seen));
    tokio::time::sleep(Duration::from_millis(30)).await;
    let report = running.reload(&policy(60, 5, 2000, 16));
    assert!(report.is_complete(), "{report}");
    assert!(
        report.kept.iter().any(|k| k.contains("breaker state open")),
        "{report}"
    );
    join(callers).await;
    assert_eq!(seen.other.load(Ordering::SeqCst), 0);
    assert_eq!(seen.rejected_open.load(Ordering::SeqCst), 80);
    assert_eq!(dep.calls(), reached, "nothing reached the dependency");
    let still = breaker.snapshot();
    assert_eq!(still.state, State::Open);
    assert_eq!(still.generation, open.generation);
    let left = still.until_half_open.unwrap();
    assert!(
        left > Duration::from_secs(59),
        "the running wait keeps its end: {left:?}"
    );

    // It recovers as before, and its next opening waits the new 5 s.
    tokio::time::advance(Duration::from_secs(60)).await;
    let r = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the probe");
    assert_eq!(breaker.state(), State::Closed);
    dep.set(FAILING);
    for _ in 0..10 {
        let _ = svc.clone().oneshot(request()).await;
    }
    let reopened = breaker.snapshot();
    assert_eq!(reopened.state, State::Open);
    assert_eq!(
        reopened.until_half_open,
        Some(Duration::from_secs(5)),
        "the new open wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_timeout_bounds_the_next_call() {
    let dep = Dependency::default();
    let running = policy(50, 60, 1000, 8);
    let svc = running.layer(dep.service());
    dep.set(SLOW);
    let err = svc.clone().oneshot(request()).await.unwrap_err();
    assert!(
        err.downcast_ref::<Elapsed>().is_some(),
        "1.5 s is past 1 s: {err}"
    );

    let report = running.reload(&policy(50, 60, 2000, 8));
    assert_eq!(report.changes.len(), 1, "{report}");
    assert_eq!(report.changes[0].path, "timeout.default_timeout");
    let r = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "1.5 s is within 2 s");

    // A diff changes nothing.
    let diff = running.diff(&policy(50, 60, 1000, 8));
    assert!(!diff.applied);
    assert_eq!(diff.changes.len(), 1);
    let r = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "still 2 s");
}

#[tokio::test(start_paused = true)]
async fn what_cannot_be_applied_in_place_is_reported_and_left_as_it_was() {
    let registry = Registry::new();
    let running = Policy::builder("dep")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(10)
                .minimum_calls(10)
                .failure_rate_threshold(50),
        )
        .registry(&registry)
        .build()
        .unwrap();
    let breaker = running.breaker_handle().unwrap();
    breaker.force_open();

    // Another window: reported; the threshold still applies, on the running window.
    let wider = Policy::builder("dep")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(20)
                .minimum_calls(10)
                .failure_rate_threshold(30),
        )
        .build()
        .unwrap();
    let report = running.reload(&wider);
    assert!(!report.is_complete());
    let window = report
        .changes
        .iter()
        .find(|c| c.path == "breaker.window")
        .unwrap();
    assert!(matches!(window.effect, Effect::NeedsRebuild(_)), "{report}");
    let threshold = report
        .changes
        .iter()
        .find(|c| c.path == "breaker.failure_rate_threshold")
        .unwrap();
    assert_eq!(threshold.effect, Effect::InPlace);
    let config = breaker.config().unwrap();
    assert_eq!(config.failure_rate_threshold(), 30);
    assert_eq!(
        config.window(),
        WindowConfig::Count { size: 10 },
        "the window is kept"
    );
    assert_eq!(breaker.state(), State::ForcedOpen);
    // The registry lists the settings the breaker runs with.
    let listed = registry.list().entries[0]
        .breaker
        .clone()
        .unwrap()
        .config
        .unwrap();
    assert_eq!(listed.failure_rate_threshold(), 30);

    // Another breaker (a name of its own): nothing of it applies.
    let renamed = Policy::builder("dep")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("other")
                .count_window(10)
                .minimum_calls(10)
                .failure_rate_threshold(70),
        )
        .build()
        .unwrap();
    let report = running.reload(&renamed);
    assert!(
        report.changes.iter().all(|c| c.effect != Effect::InPlace),
        "{report}"
    );
    assert_eq!(breaker.config().unwrap().failure_rate_threshold(), 30);

    // A layer added: reported, not applied.
    let limited = Policy::builder("dep")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(10)
                .minimum_calls(10)
                .failure_rate_threshold(30),
        )
        .concurrency_limit(4)
        .build()
        .unwrap();
    let report = running.reload(&limited);
    assert_eq!(report.changes.len(), 1, "{report}");
    assert_eq!(report.changes[0].path, "limit");
    assert!(running.limit_handle().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_keyed_breaker_reloads_every_key_and_makes_new_ones_with_the_new_settings() {
    let dep = Dependency::default();
    let build = |threshold| {
        Policy::builder("hosts")
            .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(threshold))
            .breaker_key(KeyBy::Host)
            .build()
            .unwrap()
    };
    let running = build(50);
    let svc = running.layer(dep.service());
    let on = |host: &str| {
        Request::get(format!("http://{host}/"))
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    svc.clone().oneshot(on("a.example")).await.unwrap();
    let keys = running.keyed_breaker_handle().unwrap();
    let a = keys.get(&keys.keys()[0]).unwrap();
    a.force_open();

    let report = running.reload(&build(30));
    assert!(report.is_complete(), "{report}");
    assert_eq!(
        a.config().unwrap().failure_rate_threshold(),
        30,
        "a key held"
    );
    assert_eq!(a.state(), State::ForcedOpen, "with its state");
    svc.clone().oneshot(on("b.example")).await.unwrap();
    for k in keys.keys() {
        let h = keys.get(&k).unwrap();
        assert_eq!(
            h.config().unwrap().failure_rate_threshold(),
            30,
            "{:?}",
            h.key()
        );
    }
}

const FILE: &str = r#"
[defaults.breaker]
count_window = 10
minimum_calls = 10
failure_rate_threshold = 50

[policies.payments.breaker]
open_wait = "30s"

[policies.search.limit]
max_concurrency = 8
"#;

#[tokio::test(start_paused = true)]
async fn a_file_reloads_in_place_and_an_invalid_one_changes_nothing() {
    let file = PolicyFile::from_toml(FILE).unwrap();
    let payments = file.build("payments").unwrap();
    let search = file.build("search").unwrap();
    let breaker = payments.breaker_handle().unwrap();
    breaker.force_open();

    // Every problem of an invalid file, and no file to reload from.
    let invalid = FILE
        .replace(
            "failure_rate_threshold = 50",
            "failure_rate_threshold = 150\nconsecutive_failures = -1",
        )
        .replace("max_concurrency = 8", "max_concurency = 8");
    let err = PolicyFile::from_toml(&invalid).unwrap_err();
    let paths: Vec<_> = err.problems().iter().map(|p| p.path().to_owned()).collect();
    assert!(paths.len() >= 3, "{paths:?}");
    assert!(
        paths.iter().any(|p| p.ends_with("failure_rate_threshold")),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.ends_with("consecutive_failures")),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.ends_with("max_concurency")),
        "{paths:?}"
    );

    // A valid file that leaves out a running policy: checked first, nothing changes.
    let partial = PolicyFile::from_toml(
        "[policies.payments.breaker]\ncount_window = 10\nminimum_calls = 10\nfailure_rate_threshold = 20\n",
    )
    .unwrap();
    let err = partial.reload(&[&payments, &search]).unwrap_err();
    assert_eq!(err.problems().len(), 1);
    assert_eq!(err.problems()[0].path(), "policies.search");
    assert_eq!(
        breaker.config().unwrap().failure_rate_threshold(),
        50,
        "unchanged"
    );

    // The edited file: both policies take it, the breaker stays forced open.
    let edited = PolicyFile::from_toml(
        &FILE
            .replace("failure_rate_threshold = 50", "failure_rate_threshold = 20")
            .replace("max_concurrency = 8", "max_concurrency = 4"),
    )
    .unwrap();
    let diff = edited.diff(&[&payments, &search]).unwrap();
    assert_eq!(
        breaker.config().unwrap().failure_rate_threshold(),
        50,
        "a diff changes nothing"
    );
    assert_eq!(diff.len(), 2);
    let reports = edited.reload(&[&payments, &search]).unwrap();
    assert_eq!(reports[0].changes, diff[0].changes);
    assert!(
        reports.iter().all(|r| r.is_complete()),
        "{}{}",
        reports[0],
        reports[1]
    );
    assert_eq!(breaker.config().unwrap().failure_rate_threshold(), 20);
    assert_eq!(breaker.state(), State::ForcedOpen);
    assert_eq!(search.limit_handle().unwrap().limit(), 4);
    assert_eq!(
        search
            .breaker_handle()
            .unwrap()
            .config()
            .unwrap()
            .failure_rate_threshold(),
        20
    );
}

#[tokio::test(start_paused = true)]
async fn a_routes_classifier_change_applies_in_place() {
    use fusebox::{Route, RouteTable, StandardClassifier};
    let build = |count_throttling: bool, timeout: u64| {
        let routes = RouteTable::builder(Route::default())
            .route(
                "POST /charge",
                Route::new(StandardClassifier::new().count_throttling(count_throttling))
                    .timeout(Duration::from_millis(timeout)),
            )
            .build()
            .unwrap();
        Policy::builder("partner")
            .routes(routes)
            .circuit_breaker(
                CircuitBreakerConfig::builder()
                    .count_window(10)
                    .minimum_calls(10)
                    .failure_rate_threshold(50),
            )
            .build()
            .unwrap()
    };
    let running = build(false, 100);
    assert!(
        !running.diff(&build(false, 100)).has_changes(),
        "the same rules"
    );
    // A partner that throttles every charge.
    let svc = running.layer(tower::service_fn(|_req: Request<_>| async {
        answer(StatusCode::TOO_MANY_REQUESTS)
    }));
    let charge = || at(http::Method::POST, "http://partner.example/charge");
    for _ in 0..20 {
        let answer = svc
            .clone()
            .oneshot(charge())
            .await
            .expect("429s are ignored");
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let breaker = running.breaker_handle().unwrap();
    assert_eq!(breaker.state(), State::Closed, "429s are ignored");

    let report = running.reload(&build(true, 200));
    assert!(report.is_complete(), "{report}");
    let classifier = report
        .changes
        .iter()
        .find(|c| c.path == "routes[\"POST /charge\"].classifier")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(classifier.effect, Effect::InPlace, "{report}");
    let timeout = report
        .changes
        .iter()
        .find(|c| c.path == "routes[\"POST /charge\"].timeout")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(
        timeout.effect,
        Effect::InPlace,
        "the route's own timeout still applies"
    );
    let charging = running
        .routes()
        .resolve_path(&http::Method::POST, "/charge");
    assert_eq!(
        running.routes().route(charging).timeout_duration(),
        Some(Duration::from_millis(200)),
        "the table shows the timeout the timeout stage now applies"
    );
    assert!(
        !running.diff(&build(true, 200)).has_changes(),
        "the running policy reads the new route: {}",
        running.diff(&build(true, 200))
    );

    // The same service, not built again: its next 429s count.
    for _ in 0..10 {
        let _ = svc.clone().oneshot(charge()).await;
    }
    assert_eq!(breaker.state(), State::Open, "429s now count as failures");
    let refused = svc.clone().oneshot(charge()).await.unwrap_err();
    assert!(refused.downcast_ref::<CircuitOpen>().is_some(), "{refused}");
}

#[tokio::test(start_paused = true)]
async fn a_routes_retry_and_slow_call_threshold_apply_in_place_and_so_does_an_added_route() {
    use fusebox::{RetryConfig, Route, RouteTable};
    let build = |retry: bool, slow_ms: u64, extra_route: bool| {
        let mut routes = RouteTable::builder(Route::default()).route(
            "GET /items",
            Route::default()
                .retry(retry)
                .slow_call_duration(Duration::from_millis(slow_ms)),
        );
        if extra_route {
            routes = routes.route("GET /other", Route::default());
        }
        Policy::builder("items")
            .routes(routes.build().unwrap())
            .retry_budget(
                RetryConfig::builder()
                    .max_attempts(2)
                    .base_delay(Duration::from_millis(1))
                    .min_retries_per_second(100),
            )
            .circuit_breaker(
                CircuitBreakerConfig::builder()
                    .count_window(10)
                    .minimum_calls(10)
                    .failure_rate_threshold(100)
                    .slow_call_rate_threshold(50),
            )
            .build()
            .unwrap()
    };
    let running = build(false, 1000, false);
    // The first attempt fails with a 503, and after it every other one, starting with the
    // second; every answer takes 50 ms.
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&attempts);
    let svc = running.layer(tower::service_fn(move |_req: Request<_>| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let status = if n == 0 || n % 2 == 1 {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            answer(status)
        }
    }));
    let get = || at(http::Method::GET, "http://items.example/items");
    let first = svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        first.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "no retry on this route"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);

    // An added route applies in place, and so do the settings of the route both tables
    // hold.
    let report = running.reload(&build(true, 20, true));
    assert!(report.is_complete(), "{report}");
    let effect = |path: &str| effect_at(&report, path);
    assert_eq!(effect("routes[\"GET /other\"].(route)"), Effect::InPlace);
    let other = running.routes().resolve_path(&http::Method::GET, "/other");
    assert_eq!(running.routes().name(other), "GET /other");
    assert_eq!(effect("routes[\"GET /items\"].retry"), Effect::InPlace);
    assert_eq!(
        effect("routes[\"GET /items\"].slow_call_duration"),
        Effect::InPlace
    );
    let items = running.routes().resolve_path(&http::Method::GET, "/items");
    assert!(running.routes().route(items).retry_enabled());

    // The next call is retried: its 503 is followed by a 200.
    let retried = svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        retried.status(),
        StatusCode::OK,
        "retried on this route now"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);

    // Every 50 ms answer is now slow: the breaker opens on its slow-call rate.
    let breaker = running.breaker_handle().unwrap();
    assert_eq!(
        breaker.snapshot().window.slow,
        2,
        "the two attempts since the reload"
    );
    for _ in 0..5 {
        let _ = svc.clone().oneshot(get()).await;
    }
    assert_eq!(breaker.state(), State::Open, "{:?}", breaker.snapshot());
}

#[tokio::test(start_paused = true)]
async fn a_policy_without_a_route_table_of_its_own_does_not_reload_the_shared_one() {
    use fusebox::{Route, RouteTable};
    let running = Policy::builder("plain")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .build()
        .unwrap();
    assert!(running.routes().is_shared_default());
    let edited = Policy::builder("plain")
        .routes(RouteTable::single(Route::default().retry(false)))
        .circuit_breaker(CircuitBreakerConfig::builder())
        .build()
        .unwrap();
    let report = running.reload(&edited);
    let retry = report
        .changes
        .iter()
        .find(|c| c.path == "default_route.retry")
        .unwrap_or_else(|| panic!("{report}"));
    assert!(matches!(retry.effect, Effect::NeedsRebuild(_)), "{report}");
    assert!(
        RouteTable::default()
            .route(fusebox::classify::RouteId::DEFAULT)
            .retry_enabled(),
        "every other layer's default route is as it was"
    );
    assert!(running.diff(&edited).has_changes(), "still to be rebuilt");
}

/// A call in flight while a reload adds or removes its route's slow-call threshold: its
/// duration is recorded as it was, and it is judged by the threshold its route has when it
/// ends.
#[tokio::test(start_paused = true)]
async fn a_call_in_flight_across_a_slow_call_threshold_reload_is_timed_as_it_was() {
    use fusebox::{Route, RouteTable};
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test's process");

    let build = |slow: Option<u64>| {
        let items = match slow {
            Some(ms) => Route::default().slow_call_duration(Duration::from_millis(ms)),
            None => Route::default(),
        };
        Policy::builder("timed")
            .routes(
                RouteTable::builder(Route::default())
                    .route("GET /items", items)
                    .build()
                    .unwrap(),
            )
            .circuit_breaker(CircuitBreakerConfig::builder())
            .build()
            .unwrap()
    };
    let running = build(Some(20));
    let svc = running.layer(tower::service_fn(|_req: Request<_>| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer(StatusCode::OK)
    }));
    // Admitted under `slow`, ended under `then`.
    let call_across = |then: Option<u64>| {
        let svc = svc.clone();
        let running = running.clone();
        async move {
            let call =
                tokio::spawn(svc.oneshot(at(http::Method::GET, "http://timed.example/items")));
            tokio::time::sleep(Duration::from_millis(10)).await;
            let report = running.reload(&build(then));
            assert!(report.is_complete(), "{report}");
            call.await.unwrap().unwrap();
        }
    };
    let breaker = running.breaker_handle().unwrap();
    call_across(None).await;
    assert_eq!(
        breaker.snapshot().window.slow,
        0,
        "judged with no threshold"
    );
    call_across(Some(20)).await;
    assert_eq!(
        breaker.snapshot().window.slow,
        1,
        "judged by the added threshold"
    );

    let text = scrape.render();
    let sum = text
        .lines()
        .find(|l| {
            l.starts_with("fusebox_breaker_call_duration_seconds_sum{")
                && l.contains("route=\"GET /items\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no duration sum for GET /items in:\n{text}"));
    assert!(
        (sum - 0.1).abs() < 1e-6,
        "two calls of 50 ms, recorded as they were: {sum} s"
    );
}

/// A route's idempotency reloads in place: a POST the new route calls idempotent is
/// retried.
#[tokio::test(start_paused = true)]
async fn a_routes_idempotency_applies_in_place() {
    use fusebox::{RetryConfig, Route, RouteTable};
    let build = |idempotent: bool| {
        Policy::builder("orders")
            .routes(
                RouteTable::builder(Route::default())
                    .route("POST /orders", Route::default().idempotent(idempotent))
                    .build()
                    .unwrap(),
            )
            .retry_budget(
                RetryConfig::builder()
                    .max_attempts(2)
                    .base_delay(Duration::from_millis(1))
                    .min_retries_per_second(100),
            )
            .build()
            .unwrap()
    };
    let running = build(false);
    // Every call's first attempt fails with a 503, its second succeeds.
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&attempts);
    let svc = running.layer(tower::service_fn(move |_req: Request<_>| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            answer(if n.is_multiple_of(2) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            })
        }
    }));
    let order = || at(http::Method::POST, "http://orders.example/orders");
    let first = svc.clone().oneshot(order()).await.unwrap();
    assert_eq!(
        first.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "not repeated"
    );
    // Its retry would have been the second attempt: the next call starts on an even one.
    attempts.fetch_add(1, Ordering::SeqCst);

    let report = running.reload(&build(true));
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.changes.len(), 1, "{report}");
    assert_eq!(
        report.changes[0].path,
        "routes[\"POST /orders\"].idempotent"
    );
    let retried = svc.clone().oneshot(order()).await.unwrap();
    assert_eq!(retried.status(), StatusCode::OK, "repeated now");
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
}

/// A route whose timeout changes while the timeout layer is added: the layer needs a
/// rebuild, and so does the route, which stays as it was whole (its other changes too), so
/// that the table never shows a timeout no stage applies.
#[tokio::test(start_paused = true)]
async fn a_route_whose_timeout_needs_the_timeout_layer_added_is_kept_as_it_was() {
    use fusebox::{Route, RouteTable};
    let build = |timeout: Option<u64>| {
        let mut a = Route::default().retry(timeout.is_none());
        if let Some(ms) = timeout {
            a = a.timeout(Duration::from_millis(ms));
        }
        Policy::builder("drift")
            .routes(
                RouteTable::builder(Route::default())
                    .route("GET /a", a)
                    .build()
                    .unwrap(),
            )
            .circuit_breaker(CircuitBreakerConfig::builder())
            .build()
            .unwrap()
    };
    let running = build(None);
    assert!(!running.has_timeout());
    let report = running.reload(&build(Some(100)));
    let effect = |path: &str| effect_at(&report, path);
    assert!(
        matches!(effect("timeout"), Effect::NeedsRebuild(_)),
        "{report}"
    );
    assert!(
        matches!(effect("routes[\"GET /a\"].retry"), Effect::NeedsRebuild(_)),
        "{report}"
    );
    let a = running.routes().resolve_path(&http::Method::GET, "/a");
    let route = running.routes().route(a);
    assert!(route.retry_enabled(), "kept as it was");
    assert_eq!(route.timeout_duration(), None);
}
