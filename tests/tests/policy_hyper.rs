//! A hyper-util client behind a fusebox Policy, against real servers on 127.0.0.1: keyed by
//! host (and port), per-route 429 handling, and the order of the layers. Paused time.

use bytes::Bytes;
use fusebox::error::{CircuitOpen, Elapsed};
use fusebox::policy::BreakerKey;
use fusebox::{KeyBy, Policy, RetryConfig, Route, RouteTable, StandardClassifier};
use fusebox_tests::{Reply, RequestSeen, TestServer, four_call_breaker as breaker};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

#[tokio::test(start_paused = true)]
async fn one_failing_host_opens_only_its_own_breaker() {
    let healthy = TestServer::start(Reply::status(200)).await;
    let failing = TestServer::start(Reply::status(503)).await;
    let policy = Policy::builder("partners")
        .circuit_breaker(breaker("partners"))
        .breaker_key(KeyBy::Authority)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = fusebox::hyper::wrap(&policy);

    for _ in 0..4 {
        let r = client
            .clone()
            .oneshot(get(&failing.url("/")))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let r = client
            .clone()
            .oneshot(get(&healthy.url("/")))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.into_body().collect().await.unwrap().to_bytes(), "ok");
    }
    let err = client
        .clone()
        .oneshot(get(&failing.url("/")))
        .await
        .unwrap_err();
    let open = err
        .downcast_ref::<CircuitOpen>()
        .expect("the failing host's breaker is open");
    assert_eq!(open.key(), Some(failing.addr().to_string().as_str()));
    assert_eq!(failing.received(), 4, "the rejected call was never sent");

    // The healthy host is untouched.
    for _ in 0..4 {
        let r = client
            .clone()
            .oneshot(get(&healthy.url("/")))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let keys = policy.keyed_breaker_handle().unwrap();
    assert_eq!(keys.len(), 2);
    let healthy_key = BreakerKey::host(healthy.addr().to_string());
    assert_eq!(
        keys.get(&healthy_key).unwrap().state(),
        fusebox::breaker::State::Closed
    );
}

/// The same 429s: one route counts them (a partner in trouble), the other ignores them (our
/// own tenant throttle). One policy, one breaker per route.
#[tokio::test(start_paused = true)]
async fn a_429_opens_the_breaker_of_the_route_that_counts_it_only() {
    let server = TestServer::start(Reply::status(429)).await;
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /partner/{*rest}",
            Route::new(StandardClassifier::new().count_throttling(true)),
        )
        .route("GET /tenant/{*rest}", Route::default())
        .build()
        .unwrap();
    let policy = Policy::builder("mixed")
        .routes(routes)
        .circuit_breaker(breaker("mixed"))
        .breaker_key(KeyBy::Route)
        .build()
        .unwrap();
    let client = fusebox::hyper::wrap(&policy);

    let mut partner_rejected = 0;
    let mut tenant_rejected = 0;
    for _ in 0..10 {
        match client
            .clone()
            .oneshot(get(&server.url("/partner/charge")))
            .await
        {
            Ok(r) => assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS),
            Err(e) if e.is::<CircuitOpen>() => partner_rejected += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
        match client
            .clone()
            .oneshot(get(&server.url("/tenant/charge")))
            .await
        {
            Ok(r) => assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS),
            Err(e) if e.is::<CircuitOpen>() => tenant_rejected += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(partner_rejected, 6, "opened after the window's 4 calls");
    assert_eq!(tenant_rejected, 0, "429s are ignored on the tenant route");
    assert_eq!(server.received_on("/partner/charge"), 4);
    assert_eq!(server.received_on("/tenant/charge"), 10);

    let keys = policy.keyed_breaker_handle().unwrap();
    let id = |name: &str| {
        policy
            .routes()
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(id, _, _)| BreakerKey::Route(id))
            .unwrap()
    };
    use fusebox::breaker::State;
    assert_eq!(
        keys.get(&id("GET /partner/{*rest}")).unwrap().state(),
        State::Open
    );
    let tenant = keys.get(&id("GET /tenant/{*rest}")).unwrap();
    assert_eq!(tenant.state(), State::Closed);
    assert_eq!(
        tenant.snapshot().window.calls,
        0,
        "ignored calls enter no window"
    );
}

/// The timeout is inside the breaker: a timed-out call is a failure the breaker counts.
#[tokio::test(start_paused = true)]
async fn a_timeout_inside_the_breaker_is_counted() {
    let server = TestServer::start(Reply::slow(200, Duration::from_secs(2))).await;
    let policy = Policy::builder("slow")
        .timeout(Duration::from_millis(100))
        .circuit_breaker(breaker("slow"))
        .build()
        .unwrap();
    let client = fusebox::hyper::wrap(&policy);
    for _ in 0..4 {
        let err = client
            .clone()
            .oneshot(get(&server.url("/")))
            .await
            .unwrap_err();
        assert!(err.is::<Elapsed>(), "{err}");
    }
    let handle = policy.breaker_handle().unwrap();
    assert_eq!(handle.state(), fusebox::breaker::State::Open);
    assert_eq!(handle.snapshot().window.failures, 4);
    let err = client.oneshot(get(&server.url("/"))).await.unwrap_err();
    assert!(err.is::<CircuitOpen>());
    assert_eq!(server.received(), 4);
}

/// The breaker is inside the retry layer: its rejection is never retried, and spends
/// nothing from the budget.
#[tokio::test(start_paused = true)]
async fn a_breaker_rejection_is_not_retried() {
    let server = TestServer::start(Reply::status(200)).await;
    let policy = Policy::builder("p")
        .circuit_breaker(breaker("p"))
        .retry_budget(
            RetryConfig::builder()
                .name("p")
                .max_attempts(3)
                .min_retries_per_second(100)
                .seed(Some(1)),
        )
        .build()
        .unwrap();
    policy.breaker_handle().unwrap().force_open();
    let client = fusebox::hyper::wrap(&policy);
    let err = client.oneshot(get(&server.url("/"))).await.unwrap_err();
    assert!(err.is::<CircuitOpen>());
    assert_eq!(server.received(), 0);
    let budget = policy.retry_budget().unwrap().snapshot();
    assert_eq!((budget.requests, budget.retries), (1, 0));
}

/// A retry goes through the breaker and the limit again, and spends from the budget.
#[tokio::test(start_paused = true)]
async fn a_retry_spends_the_budget_and_is_judged_by_the_breaker() {
    let server = TestServer::with_behaviour(Arc::new(|_: &RequestSeen, n| {
        if n == 0 {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    }))
    .await;
    let policy = Policy::builder("p")
        .circuit_breaker(breaker("p"))
        .concurrency_limit(4)
        .timeout(Duration::from_secs(1))
        .retry_budget(
            RetryConfig::builder()
                .name("p")
                .max_attempts(3)
                .min_retries_per_second(1)
                .base_delay(Duration::from_millis(10))
                .seed(Some(1)),
        )
        .build()
        .unwrap();
    let client = fusebox::hyper::wrap(&policy);
    let response = client.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.received(), 2);
    let budget = policy.retry_budget().unwrap().snapshot();
    assert_eq!((budget.requests, budget.retries), (1, 1));
    let window = policy.breaker_handle().unwrap().snapshot().window;
    assert_eq!(
        (window.calls, window.failures),
        (2, 1),
        "both attempts were judged"
    );
    assert_eq!(policy.limit_handle().unwrap().in_flight(), 0);
}

/// After the breaker closes, the recovery ramp lets the dependency take only a few calls at
/// once, then more as the ramp grows.
#[tokio::test(start_paused = true)]
async fn the_limit_ramps_up_after_the_breaker_closes() {
    let server = TestServer::with_behaviour(Arc::new(|_: &RequestSeen, n| {
        if n < 4 {
            Reply::status(503)
        } else {
            Reply::slow(200, Duration::from_millis(100))
        }
    }))
    .await;
    let policy = Policy::builder("ramp")
        .circuit_breaker(
            breaker("ramp")
                .open_wait(Duration::from_secs(1))
                .permitted_probes(1),
        )
        .concurrency_limit(20)
        .recovery_ramp(fusebox::RecoveryRamp::new(2, Duration::from_secs(10)))
        .build()
        .unwrap();
    let client = fusebox::hyper::wrap(&policy);
    let limit = policy.limit_handle().unwrap();

    // Four 503s open the breaker; after the open wait one probe succeeds and closes it.
    for _ in 0..4 {
        let r = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        policy.breaker_handle().unwrap().state(),
        fusebox::breaker::State::Open
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        policy.breaker_handle().unwrap().state(),
        fusebox::breaker::State::Closed
    );
    assert_eq!(limit.limit(), 2, "the ramp starts low");

    // A burst right after recovery: two calls reach the dependency, the rest are shed.
    let burst = |n: usize| {
        let calls: Vec<_> = (0..n)
            .map(|_| tokio::spawn(client.clone().oneshot(get(&server.url("/")))))
            .collect();
        async move {
            let mut shed = 0;
            for call in calls {
                match call.await.unwrap() {
                    Ok(r) => assert_eq!(r.status(), StatusCode::OK),
                    Err(e) if e.is::<fusebox::error::Overloaded>() => shed += 1,
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            shed
        }
    };
    assert_eq!(burst(10).await, 8);
    assert_eq!(server.max_in_flight(), 2);

    // Once the ramp has run its course, the whole limit is back.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(burst(10).await, 0);
    assert_eq!(limit.limit(), 20);
    assert_eq!(server.max_in_flight(), 10);
}
