//! Routes added to and removed from a running policy by a reload, on paused time: an
//! added route matches its requests from the next call on, with its own timeout, classifier
//! and metric series (and, keyed by route, a breaker of its own); a removed route matches
//! nothing from then on, while a call already on it finishes under the settings it started
//! with; a route added back takes its id and its new settings back; calls on other routes
//! flowing across the reload see nothing of it.

use bytes::Bytes;
use fusebox::error::{CircuitOpen, Elapsed};
use fusebox::reload::Effect;
use fusebox::{BoxError, CircuitBreakerConfig, Fallback, KeyBy, Policy, Route, RouteTable};
use fusebox_tests::reload::effect_at;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The routes of a policy: each key with its own timeout, if any.
type Routes<'a> = &'a [(&'a str, Option<u64>)];

fn table(routes: Routes<'_>) -> RouteTable {
    let mut table = RouteTable::builder(Route::default());
    for (key, timeout) in routes {
        let route = match timeout {
            Some(t) => Route::default().timeout(ms(*t)),
            None => Route::default(),
        };
        table = table.route(*key, route);
    }
    table.build().expect("valid routes")
}

/// The policy "shop" over `routes`: a breaker, a limit and a timeout of 1 s for routes
/// that set none.
fn shop(routes: Routes<'_>) -> Policy {
    Policy::builder("shop")
        .routes(table(routes))
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(20)
                .minimum_calls(20)
                .failure_rate_threshold(50),
        )
        .concurrency_limit(64)
        .timeout(Duration::from_secs(1))
        .build()
        .expect("a valid policy")
}

/// The shop's dependency: `/items` answers in 5 ms, any other path in 150 ms; `/broken`
/// answers 503.
async fn dependency<B>(request: Request<B>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    tokio::time::sleep(ms(if path == "/items" { 5 } else { 150 })).await;
    let status = if path == "/broken" {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    Ok(Response::builder()
        .status(status)
        .body(Empty::new())
        .expect("a response"))
}

/// What a call to `path` got: `ok`, `503`, `elapsed <route> <limit>`, `open` or another
/// error.
async fn call<S, RB>(svc: S, path: &str) -> String
where
    S: Service<Request<Empty<Bytes>>, Response = Response<RB>, Error = BoxError>,
{
    let request = Request::get(format!("http://shop.example{path}"))
        .body(Empty::new())
        .expect("a request");
    match svc.oneshot(request).await {
        Ok(r) if r.status() == StatusCode::OK => "ok".into(),
        Ok(r) => r.status().as_str().into(),
        Err(e) => match (e.downcast_ref::<Elapsed>(), e.downcast_ref::<CircuitOpen>()) {
            (Some(elapsed), _) => format!("elapsed {} {:?}", elapsed.route(), elapsed.limit()),
            (_, Some(_)) => "open".into(),
            _ => format!("error: {e}"),
        },
    }
}

/// Every change at `paths` in `report` was applied in place.
fn assert_in_place(report: &fusebox::reload::Reload, paths: &[&str]) {
    for path in paths {
        assert_eq!(effect_at(report, path), Effect::InPlace, "{path}: {report}");
    }
}

fn names(policy: &Policy) -> Vec<String> {
    policy
        .routes()
        .iter()
        .map(|(_, name, _)| name.to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn routes_added_and_removed_apply_to_the_next_calls_and_fail_none_in_flight() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test's process");

    let running = shop(&[("GET /items", None), ("GET /old", Some(80))]);
    let svc = running.layer(tower::service_fn(dependency));
    assert_eq!(
        call(svc.clone(), "/new").await,
        "ok",
        "the default route: 1 s"
    );
    assert_eq!(call(svc.clone(), "/old").await, "elapsed GET /old 80ms");

    // Callers on a route the reload leaves alone, every 5 ms across it.
    let failed = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (svc, failed) = (svc.clone(), Arc::clone(&failed));
            tokio::spawn(async move {
                for _ in 0..40 {
                    if call(svc.clone(), "/items").await != "ok" {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(ms(5)).await;
                }
            })
        })
        .collect();
    // A call on the removed route, in flight across the reload: bounded as it started.
    let in_flight = tokio::spawn(call(svc.clone(), "/old"));
    tokio::time::sleep(ms(20)).await;

    let report = running.reload(&shop(&[("GET /items", None), ("GET /new", Some(100))]));
    assert!(report.is_complete(), "{report}");
    assert_in_place(
        &report,
        &[
            "routes[\"GET /new\"].(route)",
            "routes[\"GET /old\"].(route)",
        ],
    );
    assert_eq!(in_flight.await.unwrap(), "elapsed GET /old 80ms");

    // The next calls: the added route's timeout bounds its calls, named after it; the
    // removed route's requests are the default route's.
    assert_eq!(call(svc.clone(), "/new").await, "elapsed GET /new 100ms");
    assert_eq!(
        call(svc.clone(), "/old").await,
        "ok",
        "the default route: 1 s"
    );
    for c in callers {
        c.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "no call failed because of the reload"
    );
    assert_eq!(names(&running), ["default", "GET /items", "GET /new"]);
    let again = running.diff(&shop(&[("GET /items", None), ("GET /new", Some(100))]));
    assert!(!again.has_changes(), "{again}");

    // The added route has its own series, labelled with its name.
    let text = scrape.render();
    let elapsed_on = |route: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("fusebox_timeout_elapsed_total{")
                    && l.contains(&format!("route=\"{route}\""))
                    && l.contains("phase=\"headers\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(elapsed_on("GET /new").as_deref(), Some("1"), "{text}");
    assert_eq!(elapsed_on("GET /old").as_deref(), Some("2"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_route_added_back_takes_its_id_and_its_new_settings() {
    let running = shop(&[("GET /a", Some(100)), ("GET /b", None)]);
    let svc = running.layer(tower::service_fn(dependency));
    let a = running.routes().resolve_path(&http::Method::GET, "/a");
    assert_eq!(call(svc.clone(), "/a").await, "elapsed GET /a 100ms");

    let report = running.reload(&shop(&[("GET /b", None)]));
    assert!(report.is_complete(), "{report}");
    assert_eq!(
        call(svc.clone(), "/a").await,
        "ok",
        "the default route: 1 s"
    );
    assert_eq!(names(&running), ["default", "GET /b"]);

    // Back, with a timeout the 150 ms answer fits in.
    let report = running.reload(&shop(&[("GET /b", None), ("GET /a", Some(300))]));
    assert!(report.is_complete(), "{report}");
    assert_eq!(running.routes().resolve_path(&http::Method::GET, "/a"), a);
    assert_eq!(running.routes().route_count(), 3, "no id was given out");
    assert_eq!(
        call(svc.clone(), "/a").await,
        "ok",
        "bounded at 300 ms, not 100"
    );
    let report = running.reload(&shop(&[("GET /b", None), ("GET /a", Some(120))]));
    assert_eq!(
        effect_at(&report, "routes[\"GET /a\"].timeout"),
        Effect::InPlace,
        "{report}"
    );
    assert_eq!(call(svc.clone(), "/a").await, "elapsed GET /a 120ms");
}

/// A breaker keyed by route gives an added route a breaker of its own, and a fallback on
/// every route serves its rejections.
#[tokio::test(start_paused = true)]
async fn an_added_route_gets_its_own_keyed_breaker_and_the_fallback_on_every_route() {
    let build = |routes: Routes<'_>| {
        Policy::builder("keyed")
            .routes(table(routes))
            .circuit_breaker(
                CircuitBreakerConfig::builder()
                    .count_window(4)
                    .minimum_calls(4)
                    .failure_rate_threshold(50)
                    .open_wait(Duration::from_secs(60)),
            )
            .breaker_key(KeyBy::Route)
            .fallback(Fallback::new(|_| Response::new(Bytes::from_static(b"later"))).all_routes())
            .build()
            .expect("a valid policy")
    };
    let running = build(&[("GET /items", None)]);
    let svc = running.layer(tower::service_fn(dependency));
    let report = running.reload(&build(&[("GET /items", None), ("GET /broken", None)]));
    assert!(report.is_complete(), "{report}");

    for _ in 0..4 {
        assert_eq!(call(svc.clone(), "/broken").await, "503");
    }
    // Its own breaker opened; the fallback answers for it, and /items' breaker is closed.
    let served = svc
        .clone()
        .oneshot(
            Request::get("http://shop.example/broken")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .expect("the fallback's answer");
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(call(svc.clone(), "/items").await, "ok");
    let keyed = running.keyed_breaker_handle().expect("a keyed breaker");
    let broken = running.routes().resolve_path(&http::Method::GET, "/broken");
    let items = running.routes().resolve_path(&http::Method::GET, "/items");
    let state = |route| {
        keyed
            .get(&fusebox::policy::BreakerKey::Route(route))
            .map(|b| b.state())
    };
    assert_eq!(state(broken), Some(fusebox::breaker::State::Open));
    assert_eq!(state(items), Some(fusebox::breaker::State::Closed));
}

/// A table gives out at most 65,534 route ids, removed routes included: a reload that
/// would need more reports the routes it adds as needing a rebuild, and still applies the
/// rest of its route changes.
#[tokio::test(start_paused = true)]
async fn a_reload_past_the_tables_ids_applies_all_but_the_added_routes() {
    let running = shop(&[("GET /a", Some(100)), ("GET /b", None)]);
    // /a out, /b with a timeout, and 65,533 new routes in: the table (3 ids given out) has
    // room for 65,532 more.
    let many: Vec<String> = (0..65_533).map(|i| format!("GET /n{i}")).collect();
    let mut routes: Vec<(&str, Option<u64>)> = vec![("GET /b", Some(40))];
    routes.extend(many.iter().map(|k| (k.as_str(), None)));
    let report = running.reload(&shop(&routes));
    assert!(!report.is_complete());
    assert!(matches!(
        effect_at(&report, "routes[\"GET /n1\"].(route)"),
        Effect::NeedsRebuild(_)
    ));
    assert_in_place(
        &report,
        &["routes[\"GET /a\"].(route)", "routes[\"GET /b\"].timeout"],
    );
    assert_eq!(names(&running), ["default", "GET /b"]);
    let svc = running.layer(tower::service_fn(dependency));
    assert_eq!(call(svc.clone(), "/b").await, "elapsed GET /b 40ms");
    assert_eq!(
        call(svc.clone(), "/a").await,
        "ok",
        "removed: the default route"
    );
    assert_eq!(call(svc, "/n1").await, "ok", "not added: the default route");
}
