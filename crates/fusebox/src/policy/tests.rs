//! Policy tests on mock services and paused time. Real servers are in `tests/tests/policy_*.rs`.

use super::*;
use bytes::Bytes;
use fusebox_breaker::State;
use fusebox_classify::Route;
use fusebox_classify::error::{CircuitOpen, Elapsed, Overloaded};
use fusebox_retry::ReplayBody;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::{Service, ServiceExt, service_fn};

type Req = Request<ReplayBody<Empty<Bytes>>>;

fn ok_service() -> impl Service<
    Req,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
> + Clone
+ Send {
    service_fn(|_req: Req| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    })
}

fn get(path: &str) -> Request<Empty<Bytes>> {
    Request::get(path).body(Empty::new()).unwrap()
}

fn paths(err: &ConfigError) -> Vec<&str> {
    err.problems().iter().map(|p| p.path()).collect()
}

#[test]
fn build_reports_every_problem_with_its_path() {
    let err = Policy::builder(" ")
        .routes(
            RouteTable::builder(Route::default())
                .route("GET /a", Route::default().timeout(Duration::ZERO)),
        )
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("b")
                .failure_rate_threshold(150),
        )
        .concurrency_limit(0)
        .retry_budget(RetryConfig::builder().max_attempts(0))
        .fallback(Fallback::new(|_| Response::new(Bytes::new())).route("GET /nope"))
        .recovery_ramp(RecoveryRamp::new(0, Duration::ZERO))
        .build()
        .unwrap_err();
    assert_eq!(
        paths(&err),
        [
            "name",
            "routes[\"GET /a\"].timeout",
            // Named once: the limit takes the policy's name, whose problem is reported once.
            "limit.max_concurrency",
            "breaker.failure_rate_threshold",
            "retry.max_attempts",
            "recovery_ramp.initial_limit",
            "recovery_ramp.duration",
        ],
        "{err}"
    );
    assert_eq!(
        err.problems()[3].to_string(),
        "breaker.failure_rate_threshold: must be within 1..=100, got 150"
    );

    // With a valid table, a fallback naming an unknown route is reported.
    let err = Policy::builder("p")
        .fallback(Fallback::new(|_| Response::new(Bytes::new())).route("GET /nope"))
        .recovery_ramp(RecoveryRamp::new(1, Duration::from_secs(1)))
        .breaker_key(KeyBy::Route)
        .build()
        .unwrap_err();
    assert_eq!(
        paths(&err),
        [
            "breaker_key",
            "recovery_ramp",
            "recovery_ramp",
            "fallback.routes[\"GET /nope\"]"
        ],
        "{err}"
    );
    let err = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder().name("p").build().unwrap())
        .concurrency_limit_config(
            ConcurrencyLimitConfig::builder().aimd(fusebox_limit::AimdConfig::new()),
        )
        .recovery_ramp(RecoveryRamp::new(1, Duration::from_secs(1)))
        .build()
        .unwrap_err();
    assert!(
        err.problems()[0].rule().contains("fixed max_concurrency"),
        "{err}"
    );
}

#[tokio::test]
async fn a_policy_without_layers_passes_calls_through() {
    let policy = Policy::builder("bare").build().unwrap();
    assert!(policy.breaker_handle().is_none() && policy.limit_handle().is_none());
    assert!(!policy.has_timeout() && policy.retry_budget().is_none());
    let svc = policy.layer(ok_service());
    let response = svc.oneshot(get("/x")).await.unwrap();
    assert!(!response.body().is_fallback());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
}

/// Route timeouts alone turn the timeout layer on.
#[tokio::test(start_paused = true)]
async fn route_timeouts_turn_the_timeout_on() {
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /slow",
            Route::default().timeout(Duration::from_millis(50)),
        )
        .build()
        .unwrap();
    let policy = Policy::builder("p").routes(routes).build().unwrap();
    assert!(policy.has_timeout());
    let svc = policy.layer(service_fn(|_req: Req| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    let err = svc.clone().oneshot(get("/slow")).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Duration::from_millis(50)
    );
    // Other routes get the default timeout (15 s).
    assert!(svc.oneshot(get("/other")).await.is_ok());
}

#[tokio::test]
async fn fallbacks_replace_rejections_on_their_routes_only() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let routes = RouteTable::builder(Route::default())
        .route("GET /price/{sku}", Route::default())
        .build()
        .unwrap();
    let policy = metrics::with_local_recorder(&recorder, || {
        Policy::builder("shop")
            .routes(routes)
            .circuit_breaker(
                CircuitBreakerConfig::builder()
                    .name("shop")
                    .build()
                    .unwrap(),
            )
            .fallback(
                Fallback::new(|ctx| {
                    assert_eq!(ctx.policy(), "shop");
                    assert!(ctx.error().downcast_ref::<CircuitOpen>().is_some());
                    Response::builder()
                        .status(StatusCode::OK)
                        .header("x-fallback", ctx.reason().as_str())
                        .header("x-route", ctx.route())
                        .body(Bytes::from_static(b"stale"))
                        .unwrap()
                })
                .route("GET /price/{sku}"),
            )
            .build()
            .unwrap()
    });
    policy.breaker_handle().unwrap().force_open();
    let svc = policy.layer(ok_service());

    let response = svc.clone().oneshot(get("/price/42")).await.unwrap();
    assert_eq!(response.headers()["x-fallback"], "circuit_open");
    assert_eq!(response.headers()["x-route"], "GET /price/{sku}");
    assert!(response.body().is_fallback());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "stale");

    // Another route fails fast.
    let err = svc.oneshot(get("/checkout")).await.unwrap_err();
    assert!(err.downcast_ref::<CircuitOpen>().is_some());

    let counted: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == FALLBACKS_TOTAL)
        .filter_map(|(key, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) if n > 0 => Some((
                key.key()
                    .labels()
                    .find(|l| l.key() == "reason")
                    .map(|l| l.value().to_owned()),
                n,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(counted, [(Some("circuit_open".to_owned()), 1)]);
}

#[tokio::test]
async fn fallbacks_leave_other_errors_alone_unless_asked() {
    let failing = service_fn(|_req: Req| async {
        Err::<Response<Empty<Bytes>>, _>(std::io::Error::other("dependency broke"))
    });
    let fallback = || Fallback::new(|_| Response::new(Bytes::from_static(b"fb"))).all_routes();
    let policy = Policy::builder("p").fallback(fallback()).build().unwrap();
    let err = policy.layer(failing).oneshot(get("/")).await.unwrap_err();
    assert_eq!(err.to_string(), "dependency broke");

    let policy = Policy::builder("p")
        .fallback(fallback().other_errors(true))
        .build()
        .unwrap();
    let response = policy.layer(failing).oneshot(get("/")).await.unwrap();
    assert!(response.body().is_fallback());
}

#[tokio::test]
async fn an_overloaded_limit_can_fall_back() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let slow = service_fn(move |_req: Req| {
        let rx = rx.clone();
        async move {
            if let Some(rx) = rx.lock().await.take() {
                let _ = rx.await;
            }
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    let policy = Policy::builder("p")
        .concurrency_limit(1)
        .fallback(
            Fallback::new(|ctx| Response::new(Bytes::from(ctx.reason().as_str())))
                .all_routes()
                .reasons(&[FallbackReason::Overloaded]),
        )
        .build()
        .unwrap();
    let mut svc = policy.layer(slow);
    let first = svc.ready().await.unwrap().call(get("/"));
    let first = tokio::spawn(first);
    tokio::task::yield_now().await;
    // The first call holds the only permit.
    let response = svc.ready().await.unwrap().call(get("/")).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "overloaded");
    tx.send(()).unwrap();
    assert!(first.await.unwrap().is_ok());
    assert_eq!(policy.limit_handle().unwrap().in_flight(), 0);
    let _ = Overloaded::new(1, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_ramp_starts_when_the_breaker_closes() {
    let policy = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder().name("p").build().unwrap())
        .concurrency_limit(100)
        .recovery_ramp(RecoveryRamp::new(10, Duration::from_secs(10)))
        .build()
        .unwrap();
    assert!(policy.has_recovery_ramp());
    let breaker = policy.breaker_handle().unwrap();
    let limit = policy.limit_handle().unwrap();
    let svc = policy.layer(ok_service());
    breaker.force_open();
    assert_eq!(limit.limit(), 100);
    breaker.reset();
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(limit.limit(), 10, "a close starts the ramp low");
    tokio::time::advance(Duration::from_secs(5)).await;
    svc.clone().oneshot(get("/")).await.unwrap();
    assert_eq!(limit.limit(), 55, "calls move the ramp forward");
    tokio::time::advance(Duration::from_secs(5)).await;
    svc.oneshot(get("/")).await.unwrap();
    assert_eq!(limit.limit(), 100);
}

#[tokio::test]
async fn keyed_breakers_open_per_key() {
    let policy = Policy::builder("p")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("p")
                .count_window(4)
                .minimum_calls(2)
                .build()
                .unwrap(),
        )
        .breaker_key(KeyBy::Host)
        .build()
        .unwrap();
    let failing_b = service_fn(|req: Req| async move {
        let status = if req.uri().host() == Some("b.example") {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        Ok::<_, Infallible>(
            Response::builder()
                .status(status)
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
    });
    let svc = policy.layer(failing_b);
    for _ in 0..3 {
        let _ = svc.clone().oneshot(get("http://b.example/")).await;
        svc.clone().oneshot(get("http://a.example/")).await.unwrap();
    }
    let err = svc
        .clone()
        .oneshot(get("http://b.example/"))
        .await
        .unwrap_err();
    assert_eq!(
        err.downcast_ref::<CircuitOpen>().unwrap().key(),
        Some("b.example")
    );
    assert!(svc.oneshot(get("http://a.example/")).await.is_ok());
    let handle = policy.keyed_breaker_handle().unwrap();
    assert_eq!(handle.len(), 2);
}

#[tokio::test]
async fn host_keys_are_lower_case_hosts_short_or_long() {
    let long = "a-host-name-longer-than-twenty-three-bytes.example";
    for key_by in [KeyBy::Host, KeyBy::Authority] {
        let policy = Policy::builder("p")
            .circuit_breaker(CircuitBreakerConfig::builder().name("p"))
            .breaker_key(key_by.clone())
            .build()
            .unwrap();
        let ok = service_fn(|_: Req| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        let svc = policy.layer(ok);
        for uri in [
            "http://API.Example/",
            "http://api.example/x",
            "http://api.example:8443/",
            &format!("http://{}/", long.to_ascii_uppercase()),
        ] {
            svc.clone().oneshot(get(uri)).await.unwrap();
        }
        let handle = policy.keyed_breaker_handle().unwrap();
        let (mixed, with_port) = match key_by {
            KeyBy::Host => ("Api.EXAMPLE", "api.example"),
            _ => ("Api.EXAMPLE", "API.example:8443"),
        };
        assert!(handle.get(&BreakerKey::host(mixed)).is_some(), "{key_by:?}");
        assert!(
            handle.get(&BreakerKey::host(with_port)).is_some(),
            "{key_by:?}"
        );
        assert!(handle.get(&BreakerKey::host(long)).is_some(), "{key_by:?}");
        // By host: one breaker for api.example whatever the port; by authority, two.
        let expected = if matches!(key_by, KeyBy::Host) { 2 } else { 3 };
        assert_eq!(handle.len(), expected, "{key_by:?}");
    }
    assert_eq!(BreakerKey::host("A.B"), BreakerKey::host("a.b"));
    assert_ne!(BreakerKey::host("a.b"), BreakerKey::Text("a.b".to_owned()));
}

#[tokio::test]
async fn host_keys_from_host_headers_keep_ipv6_addresses_apart() {
    let policy = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder().name("p"))
        .breaker_key(KeyBy::Host)
        .build()
        .unwrap();
    let ok =
        service_fn(|_: Req| async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) });
    let svc = policy.layer(ok);
    for host in [
        "[2001:db8::1]:8080",
        "[2001:db8::1]",
        "[2001:db8::2]:8080",
        "[2001:db8::2]",
    ] {
        let request = Request::get("/")
            .header("host", host)
            .body(Empty::new())
            .unwrap();
        svc.clone().oneshot(request).await.unwrap();
    }
    let handle = policy.keyed_breaker_handle().unwrap();
    assert!(handle.get(&BreakerKey::host("[2001:db8::1]")).is_some());
    assert!(handle.get(&BreakerKey::host("[2001:db8::2]")).is_some());
    assert_eq!(handle.len(), 2, "one breaker per address");
}

#[tokio::test]
async fn every_layer_runs_and_counts_one_call() {
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let svc = service_fn(move |_req: Req| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))) }
    });
    let policy = Policy::builder("all")
        .timeout(Duration::from_secs(1))
        .concurrency_limit(4)
        .circuit_breaker(CircuitBreakerConfig::builder().name("all").build().unwrap())
        .retry_budget(RetryConfig::builder().name("all").build().unwrap())
        .build()
        .unwrap();
    let response = policy.layer(svc).oneshot(get("/")).await.unwrap();
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes(),
        "ok"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(policy.retry_budget().unwrap().snapshot().requests, 1);
    assert_eq!(policy.limit_handle().unwrap().in_flight(), 0);
    assert_eq!(policy.breaker_handle().unwrap().snapshot().window.calls, 1);
}

/// Compile-time: services and futures are `Send + 'static`, and the policy is a `Layer` of
/// `ServiceBuilder`.
#[allow(dead_code)]
fn bounds() {
    fn send<T: Send + Sync + 'static>(_: &T) {}
    fn send_future<F: Future + Send + 'static>(_: F) {}
    let policy = Policy::builder("p").build().unwrap();
    send(&policy);
    let mut svc = tower::ServiceBuilder::new()
        .layer(policy)
        .service(ok_service());
    send_future(svc.call(get("/")));
}

/// A body timeout is applied by the body layer the policy gives, around its service.
#[tokio::test(start_paused = true)]
async fn body_timeouts_come_from_the_policys_body_layer() {
    let policy = Policy::builder("p")
        .timeout_config(TimeoutConfig::builder().body_timeout(Duration::from_millis(100)))
        .build()
        .unwrap();
    assert!(
        Policy::builder("q")
            .build()
            .unwrap()
            .body_timeout_layer()
            .is_none()
    );
    use futures_util::StreamExt;
    let stalled = service_fn(|_req: Req| async {
        // One chunk, then nothing, forever.
        let chunks = futures_util::stream::iter([Ok::<_, Infallible>(http_body::Frame::data(
            Bytes::from_static(b"a"),
        ))])
        .chain(futures_util::stream::pending());
        Ok::<_, Infallible>(Response::new(http_body_util::StreamBody::new(chunks)))
    });
    let bodies = policy.body_timeout_layer().expect("a body timeout is set");
    let svc = tower::ServiceBuilder::new()
        .layer(bodies)
        .layer(policy)
        .service(stalled);
    let response = svc.oneshot(get("/feed")).await.unwrap();
    let err = response.into_body().collect().await.unwrap_err();
    assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_keyed_policy_counts_an_answer_against_the_key_it_names() {
    let shard = http::HeaderName::from_static("x-shard");
    let policy = Policy::builder("store")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("store")
                .count_window(10)
                .minimum_calls(4)
                .failure_rate_threshold(50),
        )
        .breaker_key(KeyBy::Header(shard.clone()).named_by_answer(shard))
        .build()
        .unwrap();
    // Shard "a" is served by the overloaded shard "hot", which says so.
    let svc = policy.layer(service_fn(|r: Req| async move {
        let asked = r.headers()["x-shard"].to_str().unwrap().to_owned();
        let response = match asked.as_str() {
            "a" | "hot" => Response::builder()
                .status(503)
                .header("x-shard", "hot")
                .body(Empty::<Bytes>::new())
                .unwrap(),
            _ => Response::new(Empty::new()),
        };
        Ok::<_, Infallible>(response)
    }));
    let call = |shard: &'static str| {
        let svc = svc.clone();
        async move {
            let request = Request::get("/")
                .header("x-shard", shard)
                .body(Empty::new())
                .unwrap();
            svc.oneshot(request).await
        }
    };
    for _ in 0..4 {
        assert_eq!(
            call("a").await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(call("b").await.unwrap().status(), StatusCode::OK);
    }
    let handle = policy.keyed_breaker_handle().unwrap();
    let hot = BreakerKey::Value("hot".into());
    assert_eq!(handle.get(&hot).unwrap().state(), State::Open);
    assert_eq!(handle.get(&hot).unwrap().key(), Some("hot"));
    let a = handle.get(&BreakerKey::Value("a".into())).unwrap();
    assert_eq!((a.state(), a.snapshot().window.calls), (State::Closed, 0));
    let refused = call("hot").await.unwrap_err();
    assert_eq!(
        refused.downcast_ref::<CircuitOpen>().unwrap().key(),
        Some("hot")
    );
    assert_eq!(call("b").await.unwrap().status(), StatusCode::OK);
}

#[test]
fn a_route_key_cannot_be_named_by_answers() {
    let err = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Route.named_by_answer(http::HeaderName::from_static("x-shard")))
        .build()
        .unwrap_err();
    assert_eq!(paths(&err), ["breaker_key"]);
}

/// A sharded store behind a policy keyed by `x-shard` (named by answers too), with a
/// dependency-wide breaker gated by the shards' spread. The breakers would open at 5 % of
/// 20 calls failing: without the gate, two hot shards of twenty open the dependency.
fn sharded_policy(events: Arc<std::sync::Mutex<Vec<BreakerEvent>>>) -> Policy {
    let shard = http::HeaderName::from_static("x-shard");
    Policy::builder("shards")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("shards")
                .count_window(20)
                .minimum_calls(20)
                .failure_rate_threshold(5),
        )
        .breaker_key(KeyBy::Header(shard.clone()).named_by_answer(shard))
        .key_spread(KeySpread::default())
        .on_breaker_event(move |e| events.lock().unwrap().push(e.clone()))
        .build()
        .unwrap()
}

/// The store: a shard in `hot` answers 503, naming itself in `x-shard`.
fn shards(
    hot: Arc<std::sync::Mutex<Vec<String>>>,
) -> impl Service<Req, Response = Response<Empty<Bytes>>, Error = Infallible, Future: Send> + Clone + Send
{
    service_fn(move |r: Req| {
        let asked = r.headers()["x-shard"].to_str().unwrap().to_owned();
        let failing = hot.lock().unwrap().contains(&asked);
        async move {
            let mut response = Response::builder();
            if failing {
                response = response.status(503).header("x-shard", asked);
            }
            Ok::<_, Infallible>(response.body(Empty::<Bytes>::new()).unwrap())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_keyed_policy_with_a_spread_keeps_hot_shards_to_their_own_breakers() {
    use fusebox_breaker::{EventKind, State};
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let policy = sharded_policy(Arc::clone(&events));
    let hot = Arc::new(std::sync::Mutex::new(Vec::new()));
    let svc = policy.layer(shards(Arc::clone(&hot)));
    let keys: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    // Calls every shard once per round; returns how many calls for a shard not in `hot`
    // were refused, and the last refusal.
    let rounds = |n: usize| {
        let (svc, keys, hot) = (svc.clone(), keys.clone(), Arc::clone(&hot));
        async move {
            let mut refused = (0, None);
            for _ in 0..n {
                for key in &keys {
                    let request = Request::get("/")
                        .header("x-shard", key.as_str())
                        .body(Empty::new())
                        .unwrap();
                    let answer = svc.clone().oneshot(request).await;
                    if let Err(e) = answer
                        && !hot.lock().unwrap().contains(key)
                    {
                        refused.0 += 1;
                        refused.1 = e.downcast_ref::<CircuitOpen>().cloned();
                    }
                }
            }
            refused
        }
    };
    let dependency = policy.breaker_handle().unwrap();
    let keyed = policy.keyed_breaker_handle().unwrap();
    assert_eq!(dependency.name(), "shards");
    assert_eq!(dependency.key(), None);
    assert_eq!(policy.key_spread(), Some(&KeySpread::default()));

    // Every shard is seen healthy first, then 2 of the 20 go hot.
    assert_eq!(rounds(1).await.0, 0);
    *hot.lock().unwrap() = keys[..2].to_vec();
    assert_eq!(rounds(30).await.0, 0, "no healthy shard is refused");
    for key in &keys {
        let want = if key == "s0" || key == "s1" {
            State::Open
        } else {
            State::Closed
        };
        let breaker = keyed.get(&BreakerKey::Value(key.as_str().into())).unwrap();
        assert_eq!(breaker.state(), want, "{key}");
    }
    // The hot shards' failures reached the dependency-wide breaker as ignored calls.
    assert_eq!(dependency.state(), State::Closed);
    let window = dependency.snapshot().window;
    assert!(window.calls > 0);
    assert_eq!(window.failures, 0);
    {
        let events = events.lock().unwrap();
        let opened: Vec<Option<&str>> = events
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::Transition(t) if t.to == State::Open))
            .map(|e| e.key.as_deref())
            .collect();
        assert_eq!(opened, [Some("s0"), Some("s1")]);
    }

    // 18 of the 20 fail: the dependency's failure, and its breaker opens.
    *hot.lock().unwrap() = keys[..18].to_vec();
    rounds(3).await;
    assert_eq!(dependency.state(), State::Open);
    // It refuses the healthy shards too, without a key.
    let (refused, last) = rounds(1).await;
    assert_eq!(refused, 2);
    let last = last.expect("a refusal by a breaker");
    assert_eq!((last.breaker(), last.key()), ("shards", None));
    let events = events.lock().unwrap();
    assert!(
        events.iter().any(|e| e.key.is_none()
            && matches!(&e.kind, EventKind::Transition(t) if t.to == State::Open))
    );
}

#[test]
fn a_spread_needs_a_keyed_breaker() {
    let err = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .key_spread(KeySpread::default())
        .build()
        .unwrap_err();
    assert_eq!(paths(&err), ["breaker.spread"]);
    assert!(err.problems()[0].rule().contains("keyed breaker"));
    // Without one, the keyed policy has no dependency-wide breaker.
    let keyed = Policy::builder("p")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Host)
        .build()
        .unwrap();
    assert!(keyed.breaker_handle().is_none() && keyed.key_spread().is_none());
}

#[test]
fn a_reload_reconfigures_both_breakers_and_a_new_spread_needs_a_rebuild() {
    let policy = |threshold: u32, spread: KeySpread| {
        Policy::builder("p")
            .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(threshold))
            .breaker_key(KeyBy::Host)
            .key_spread(spread)
            .build()
            .unwrap()
    };
    let running = policy(50, KeySpread::default());
    let report = running.reload(&policy(25, KeySpread::default()));
    assert!(report.is_complete(), "{report}");
    let threshold = |h: Option<fusebox_breaker::BreakerHandle>| {
        h.and_then(|h| h.config())
            .map(|c| c.failure_rate_threshold())
    };
    assert_eq!(threshold(running.breaker_handle()), Some(25));
    let keys = running.keyed_breaker_handle().unwrap();
    assert_eq!(keys.config().failure_rate_threshold(), 25);

    let report = running.diff(&policy(25, KeySpread::new(0.75, 2).unwrap()));
    let rebuild: Vec<&str> = report.needs_rebuild().map(|c| c.path.as_str()).collect();
    assert_eq!(rebuild, ["breaker.spread"]);
}
