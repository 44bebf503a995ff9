//! Classifiers from closures (`classify_fn`) and from tower-http (`TowerHttpClassifier`,
//! feature `tower-http`) drive a Policy's breaker like fusebox's own, against a real server
//! on 127.0.0.1. Paused time.

use fusebox::breaker::State;
use fusebox::classify::{Call, Classified, TowerHttpClassifier, classify_fn};
use fusebox::error::CircuitOpen;
use fusebox::{Classifier, Policy, Route, RouteTable, Verdict};
use fusebox_tests::{Reply, TestServer, four_call_breaker, get};
use http::{HeaderMap, StatusCode};
use tower::ServiceExt;
use tower_http::classify::{GrpcErrorsAsFailures, ServerErrorsAsFailures};

/// A policy whose breaker opens after 4 calls at 50 % failures, classifying with `classifier`.
fn policy<C: Classifier>(classifier: C) -> Policy<C> {
    Policy::builder("partner")
        .routes(RouteTable::single(Route::new(classifier)))
        .circuit_breaker(four_call_breaker("partner"))
        .build()
        .expect("a valid policy")
}

/// Sends 4 calls to `server`, each answered with `status`, then one more: whether that one
/// was rejected by the open breaker.
async fn opens_after_four<C: Classifier>(
    policy: &Policy<C>,
    server: &TestServer,
    status: u16,
) -> bool {
    let client = fusebox::hyper::wrap(policy);
    for _ in 0..4 {
        let response = client
            .clone()
            .oneshot(get(&server.url("/")))
            .await
            .expect("an answer");
        assert_eq!(response.status().as_u16(), status);
    }
    match client.oneshot(get(&server.url("/"))).await {
        Ok(_) => false,
        Err(err) => {
            assert!(err.downcast_ref::<CircuitOpen>().is_some(), "{err}");
            true
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_closure_classifier_opens_the_breaker_on_what_it_counts() {
    // A dependency whose 404s mean its index is gone: a closure counts them.
    let server = TestServer::start(Reply::status(404)).await;
    let not_found_fails = classify_fn(|_: &Call<'_>, status: StatusCode, _: &HeaderMap| {
        if status == StatusCode::NOT_FOUND || status.is_server_error() {
            Classified::from(Verdict::FAILURE)
        } else {
            Classified::from(Verdict::SUCCESS)
        }
    });
    let counted = policy(not_found_fails);
    assert!(opens_after_four(&counted, &server, 404).await);
    assert_eq!(
        counted.breaker_handle().expect("one breaker").state(),
        State::Open
    );
    assert_eq!(server.received(), 4);

    // The standard classifier takes a 404 for a normal answer.
    let standard = policy(fusebox::StandardClassifier::new());
    assert!(!opens_after_four(&standard, &server, 404).await);
    assert_eq!(
        standard.breaker_handle().expect("one breaker").state(),
        State::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn tower_http_server_errors_open_the_breaker() {
    let server = TestServer::start(Reply::status(500)).await;
    let policy = policy(TowerHttpClassifier::new(ServerErrorsAsFailures::new()));
    assert!(opens_after_four(&policy, &server, 500).await);
    assert_eq!(
        policy.breaker_handle().expect("one breaker").state(),
        State::Open
    );

    // Its 4xx are successes: the breaker of the same rule stays closed on 429s.
    let throttled = TestServer::start(Reply::status(429)).await;
    let policy =
        self::policy(TowerHttpClassifier::new(ServerErrorsAsFailures::new()).status_only());
    assert!(!opens_after_four(&policy, &throttled, 429).await);
}

#[tokio::test(start_paused = true)]
async fn tower_http_grpc_statuses_in_headers_open_the_breaker() {
    // Trailers-only gRPC answers: HTTP 200 with the status (UNAVAILABLE) in the headers.
    let server = TestServer::start(
        Reply::status(200)
            .header("content-type", "application/grpc")
            .header("grpc-status", "14"),
    )
    .await;
    let policy = policy(TowerHttpClassifier::new(GrpcErrorsAsFailures::new()));
    assert!(opens_after_four(&policy, &server, 200).await);
}
