//! Policies from the example policy files (`examples/fusebox.toml` and `.yaml`), put to
//! work against a real server on 127.0.0.1: what the file says per route is what the
//! policy does. And a broken file on disk reports every problem, each at its path.
//! Paused time.

use bytes::Bytes;
use fusebox::config::PolicyFile;
use fusebox::error::CircuitOpen;
use fusebox::{Fallback, Policy};
use fusebox_tests::{Reply, TestServer};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use tower::ServiceExt;

const TOML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/fusebox.toml");
const YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/fusebox.yaml");

fn fraud_eu(path: &str) -> Policy {
    let file = PolicyFile::load(path).expect("the example file is valid");
    file.policy("fraud-eu")
        .expect("the file has fraud-eu")
        .fallback(Fallback::new(|ctx| {
            http::Response::builder()
                .header("x-fallback", ctx.reason().as_str())
                .body(Bytes::from_static(b"rules v0"))
                .expect("a valid response")
        }))
        .build()
        .expect("fraud-eu builds")
}

fn post(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("a valid request")
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

/// The file's `POST /score` counts 429s (`count_throttling = true`) and is not retried
/// (`retry = false`): 20 throttled scores open the breaker (`minimum_calls = 20` from the
/// defaults, `failure_rate_threshold = 25`).
async fn scores_count_429s(policy: Policy) {
    let partner = TestServer::start(Reply::status(429)).await;
    let client = fusebox::hyper::wrap(&policy);
    let mut rejected = 0;
    for _ in 0..25 {
        match client.clone().oneshot(post(&partner.url("/score"))).await {
            Ok(r) => assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS),
            Err(e) => {
                assert!(e.is::<CircuitOpen>(), "{e}");
                rejected += 1;
            }
        }
    }
    assert_eq!(partner.received_on("/score"), 20, "no retries, then open");
    assert_eq!(rejected, 5);

    // The rules route opted in to the fallback: the open breaker answers with it.
    let response = client
        .oneshot(get(&partner.url("/rules/7")))
        .await
        .expect("a fallback");
    assert_eq!(response.headers()["x-fallback"], "circuit_open");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the fallback body")
        .to_bytes();
    assert_eq!(body, "rules v0");
}

#[tokio::test(start_paused = true)]
async fn the_toml_policy_does_what_the_file_says() {
    scores_count_429s(fraud_eu(TOML)).await;
}

#[tokio::test(start_paused = true)]
async fn the_yaml_policy_does_the_same() {
    scores_count_429s(fraud_eu(YAML)).await;
}

/// The route timeout from the file (`timeout = "250ms"` on `POST /score`) bounds the call.
#[tokio::test(start_paused = true)]
async fn route_timeouts_from_the_file_bound_calls() {
    let slow = TestServer::start(Reply::slow(200, Duration::from_millis(400))).await;
    let client = fusebox::hyper::wrap(&fraud_eu(TOML));
    let err = client
        .clone()
        .oneshot(post(&slow.url("/score")))
        .await
        .unwrap_err();
    let elapsed = err
        .downcast_ref::<fusebox::error::Elapsed>()
        .expect("a timeout");
    assert_eq!(elapsed.limit(), Duration::from_millis(250));
    // Other routes get the defaults' 2 s.
    let response = client.oneshot(get(&slow.url("/other"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[test]
fn a_broken_file_on_disk_reports_every_problem() {
    let dir = std::env::temp_dir().join(format!("fusebox-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.yaml");
    std::fs::write(
        &path,
        "defaults:\n  breaker:\n    failure_rate_threshold: 0\npolicies:\n  a:\n    limit:\n      max_concurency: 3\n  b:\n    retry:\n      base_delay: 10\n",
    )
    .unwrap();
    let err = PolicyFile::load(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    let problems: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "policies.a.limit.max_concurency: unknown key; did you mean `max_concurrency`?",
            "policies.b.retry.base_delay: must be a duration with a unit, such as \"250ms\" or \"30s\", got 10",
            "policies.a.limit.max_concurrency: required: set a fixed max_concurrency or an adaptive limit",
            "defaults.breaker.failure_rate_threshold: must be within 1..=100, got 0",
        ]
    );
}
