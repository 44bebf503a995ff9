//! fusebox-limit against a real hyper server on 127.0.0.1: the server counts the requests it
//! is handling at once, so the limit is checked where it matters, at the dependency.
//!
//! Runs on paused time (the server's latency is paused time too): a test spanning seconds
//! of server latency finishes at once, and "rejected fast" means "rejected before any time
//! passed".

use bytes::Bytes;
use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer, Overloaded};
use fusebox_tests::{Reply, TestServer, client, get};
use http::StatusCode;
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const CALLS: usize = 100;
const LIMIT: usize = 10;
const LATENCY: Duration = Duration::from_secs(1);

#[derive(Debug)]
enum Outcome {
    Ok(Duration),
    Shed(Duration),
}

/// Sends `CALLS` requests at once through `layer` to a server that answers each after
/// `LATENCY`, and returns how each ended and when.
async fn burst(layer: ConcurrencyLimitLayer) -> (TestServer, Vec<Outcome>) {
    let server = TestServer::start(Reply::slow(200, LATENCY)).await;
    let svc = layer.layer(client());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CALLS {
        let svc = svc.clone();
        let url = server.url("/slow");
        tasks.push(tokio::spawn(async move {
            match svc.oneshot(get(&url)).await {
                Ok(response) => {
                    assert_eq!(response.status(), StatusCode::OK);
                    let body: Bytes = response
                        .into_body()
                        .collect()
                        .await
                        .expect("a body")
                        .to_bytes();
                    assert_eq!(body, "ok");
                    Outcome::Ok(start.elapsed())
                }
                Err(err) => {
                    let overloaded = err
                        .downcast_ref::<Overloaded>()
                        .unwrap_or_else(|| panic!("only the limit may fail a call: {err}"));
                    assert_eq!(overloaded.limit(), LIMIT);
                    Outcome::Shed(start.elapsed())
                }
            }
        }));
    }
    let mut outcomes = Vec::new();
    // Nothing hangs: on paused time a stuck call would run this clock out at once.
    let all = async {
        for task in tasks {
            outcomes.push(task.await.expect("the call task"));
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every call completes");
    (server, outcomes)
}

fn split(outcomes: &[Outcome]) -> (Vec<Duration>, Vec<Duration>) {
    let ok = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Ok(d) => Some(*d),
            Outcome::Shed(_) => None,
        })
        .collect();
    let shed = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Shed(d) => Some(*d),
            Outcome::Ok(_) => None,
        })
        .collect();
    (ok, shed)
}

#[tokio::test(start_paused = true)]
async fn fail_fast_sheds_everything_over_the_limit_at_once() {
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .name("slow-dependency")
            .max_concurrency(LIMIT)
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (server, outcomes) = burst(layer).await;
    let (ok, shed) = split(&outcomes);

    assert!(
        server.max_in_flight() <= LIMIT,
        "server saw {}",
        server.max_in_flight()
    );
    assert_eq!(server.received(), LIMIT);
    assert_eq!(ok.len(), LIMIT);
    assert!(ok.iter().all(|d| *d >= LATENCY), "{ok:?}");
    assert_eq!(shed.len(), CALLS - LIMIT);
    assert!(
        shed.iter().all(|d| d.is_zero()),
        "shed before any time passed: {shed:?}"
    );
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_queue_sheds_after_its_max_wait() {
    let max_wait = Duration::from_millis(500);
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .max_concurrency(LIMIT)
            .queue(20, max_wait)
            .build()
            .unwrap(),
    );
    let handle = layer.handle();
    let (server, outcomes) = burst(layer).await;
    let (ok, shed) = split(&outcomes);

    assert!(
        server.max_in_flight() <= LIMIT,
        "server saw {}",
        server.max_in_flight()
    );
    assert_eq!(server.received(), LIMIT);
    assert_eq!(ok.len(), LIMIT);
    // 20 waited their 500 ms (no permit frees before the first answers, after 1 s) ...
    let waited: Vec<_> = shed.iter().filter(|d| !d.is_zero()).collect();
    assert_eq!(waited.len(), 20, "{shed:?}");
    assert!(waited.iter().all(|d| **d == max_wait), "{waited:?}");
    // ... and the other 70 found the queue full and were shed at once.
    assert_eq!(
        shed.iter().filter(|d| d.is_zero()).count(),
        CALLS - LIMIT - 20
    );
    assert_eq!((handle.in_flight(), handle.waiting()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_long_enough_queue_serves_everyone_in_waves() {
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .max_concurrency(LIMIT)
            .queue(CALLS, Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let (server, outcomes) = burst(layer).await;
    let (ok, shed) = split(&outcomes);

    assert!(shed.is_empty(), "{shed:?}");
    assert_eq!(ok.len(), CALLS);
    assert_eq!(server.received(), CALLS);
    assert_eq!(
        server.max_in_flight(),
        LIMIT,
        "the limit is used, and never exceeded"
    );
    // Ten waves of ten.
    let last = ok.iter().max().unwrap();
    assert!(*last >= LATENCY * 10, "{last:?}");
}
