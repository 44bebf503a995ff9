//! Reload in place, one kind of change per test, on paused time with calls in flight: the
//! retry layer's settings, the limit's queue (its size, the queue removed and added) and
//! its kind and algorithm (an adaptive algorithm's settings, another algorithm, a fixed
//! limit and back). Each
//! test shows the running value before, reloads while calls are in flight, checks that no
//! call failed because of the reload, and that the next call runs under the new value.

use bytes::Bytes;
use fusebox::error::Overloaded;
use fusebox::limit::{AimdConfig, VegasConfig};
use fusebox::reload::Effect;
use fusebox::{ConcurrencyLimitConfig, Policy, RetryConfig};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

use fusebox_tests::dependency::{Dependency, FAILING, HEALTHY, SLOW};

fn request() -> Request<Empty<Bytes>> {
    Request::get("http://dep.example/")
        .body(Empty::new())
        .expect("a request")
}

/// How the calls of one round ended.
#[derive(Default)]
struct Seen {
    ok: AtomicUsize,
    shed: AtomicUsize,
    /// Any other error or status: what a reload must never cause.
    other: AtomicUsize,
}

/// Starts `tasks` callers, each making `calls` calls 5 ms apart.
fn load<S, RB>(
    svc: S,
    tasks: usize,
    calls: usize,
    seen: &Arc<Seen>,
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
            let seen = Arc::clone(seen);
            tokio::spawn(async move {
                for _ in 0..calls {
                    match svc.clone().oneshot(request()).await {
                        Ok(r) if r.status() == StatusCode::OK => &seen.ok,
                        Err(e) if e.downcast_ref::<Overloaded>().is_some() => &seen.shed,
                        _ => &seen.other,
                    }
                    .fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

async fn join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.expect("a caller");
    }
}

fn retrying(max_attempts: u32, ttl: Duration) -> Policy {
    Policy::builder("dep")
        .retry_budget(
            RetryConfig::builder()
                .max_attempts(max_attempts)
                .min_retries_per_second(100)
                .ttl(ttl)
                .base_delay(Duration::from_millis(1))
                .max_delay(Duration::from_millis(2)),
        )
        .build()
        .expect("a valid policy")
}

#[tokio::test(start_paused = true)]
async fn reloaded_retry_settings_apply_to_the_next_call_and_keep_the_budget() {
    let dep = Dependency::default();
    let running = retrying(1, Duration::from_secs(10));
    let svc = running.layer(dep.service());

    // One attempt per call, as built.
    dep.set(FAILING);
    let before = dep.calls();
    let r = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(dep.calls() - before, 1, "no retry at max_attempts 1");

    // The reload lands while healthy calls are in flight.
    dep.set(HEALTHY);
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 4, 20, &seen);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = running.reload(&retrying(3, Duration::from_secs(10)));
    assert!(report.is_complete(), "{report}");
    let paths: Vec<_> = report.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["retry.max_attempts"], "{report}");
    join(callers).await;
    assert_eq!(seen.other.load(Ordering::SeqCst), 0, "no call failed");
    assert_eq!(seen.ok.load(Ordering::SeqCst), 80);
    assert_eq!(running.retry_config().unwrap().max_attempts(), 3);
    let budget = running.retry_budget().unwrap().snapshot();
    assert!(
        budget.requests >= 81,
        "the window's counts are kept: {budget:?}"
    );

    // The next failing call is tried three times.
    dep.set(FAILING);
    let before = dep.calls();
    let r = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(dep.calls() - before, 3, "the new max_attempts");

    // Another window cannot be applied in place: reported; the rest still applies.
    let report = running.reload(&retrying(2, Duration::from_secs(30)));
    assert!(!report.is_complete(), "{report}");
    let ttl = report
        .changes
        .iter()
        .find(|c| c.path == "retry.ttl")
        .unwrap();
    assert!(matches!(ttl.effect, Effect::NeedsRebuild(_)), "{report}");
    let attempts = report
        .changes
        .iter()
        .find(|c| c.path == "retry.max_attempts")
        .unwrap();
    assert_eq!(attempts.effect, Effect::InPlace, "{report}");
    let config = running.retry_config().unwrap();
    assert_eq!(config.max_attempts(), 2);
    assert_eq!(config.ttl(), Duration::from_secs(10), "the window is kept");
    let before = dep.calls();
    let _ = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(dep.calls() - before, 2);
}

fn queued(max_waiters: usize) -> Policy {
    Policy::builder("dep")
        .concurrency_limit_config(
            ConcurrencyLimitConfig::builder()
                .max_concurrency(1)
                .queue(max_waiters, Duration::from_secs(10)),
        )
        .build()
        .expect("a valid policy")
}

/// Three calls at once to the slow dependency; how they ended.
async fn three_at_once<S, RB>(svc: &S) -> Arc<Seen>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<RB>, Error = fusebox::BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    RB: Send + 'static,
{
    let seen = Arc::new(Seen::default());
    join(load(svc.clone(), 3, 1, &seen)).await;
    seen
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_queue_size_applies_to_the_next_call() {
    let dep = Dependency::default();
    dep.set(SLOW);
    let running = queued(1);
    let svc = running.layer(dep.service());

    // One in flight, one waiting, one shed.
    let seen = three_at_once(&svc).await;
    assert_eq!(
        (
            seen.ok.load(Ordering::SeqCst),
            seen.shed.load(Ordering::SeqCst)
        ),
        (2, 1)
    );

    // Reloaded while one call is in flight and one waits: both finish.
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 2, 1, &seen);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(running.limit_handle().unwrap().waiting(), 1);
    let report = running.reload(&queued(2));
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.changes.len(), 1, "{report}");
    assert_eq!(report.changes[0].path, "limit.queue");
    join(callers).await;
    assert_eq!(seen.ok.load(Ordering::SeqCst), 2, "no call failed");
    assert_eq!(
        seen.other.load(Ordering::SeqCst) + seen.shed.load(Ordering::SeqCst),
        0
    );

    // The next three calls: one in flight, two waiting, none shed.
    let seen = three_at_once(&svc).await;
    assert_eq!(seen.ok.load(Ordering::SeqCst), 3, "the new queue size");
    assert_eq!(
        running
            .limit_handle()
            .unwrap()
            .queue()
            .map(|q| q.max_waiters()),
        Some(2)
    );

    // The queue removed, in place, while one call is in flight and one waits: the waiter
    // keeps its place and is served; the next calls that find the limit full are shed.
    let unqueued = Policy::builder("dep").concurrency_limit(1).build().unwrap();
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 2, 1, &seen);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(running.limit_handle().unwrap().waiting(), 1);
    let report = running.reload(&unqueued);
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.changes[0].path, "limit.queue");
    assert_eq!(report.changes[0].effect, Effect::InPlace);
    join(callers).await;
    assert_eq!(seen.ok.load(Ordering::SeqCst), 2, "the waiter was served");
    assert_eq!(running.limit_handle().unwrap().queue(), None);
    let seen = three_at_once(&svc).await;
    assert_eq!(
        (
            seen.ok.load(Ordering::SeqCst),
            seen.shed.load(Ordering::SeqCst)
        ),
        (1, 2),
        "no queue: the two that find the limit full are shed"
    );

    // And added back, in place: the next calls wait again.
    let report = running.reload(&queued(2));
    assert!(report.is_complete(), "{report}");
    let seen = three_at_once(&svc).await;
    assert_eq!(seen.ok.load(Ordering::SeqCst), 3, "queued again");
}

/// A policy whose limit is AIMD within `min..=max`, starting at `initial`.
fn aimd(min: usize, initial: usize, max: usize) -> Policy {
    adaptive(fusebox::limit::Limit::Aimd(
        AimdConfig::new()
            .min_limit(min)
            .initial_limit(initial)
            .max_limit(max),
    ))
}

fn adaptive(limit: fusebox::limit::Limit) -> Policy {
    Policy::builder("dep")
        .concurrency_limit_config(ConcurrencyLimitConfig::builder().limit(limit))
        .build()
        .expect("a valid policy")
}

#[tokio::test(start_paused = true)]
async fn reloaded_adaptive_settings_apply_in_place_and_keep_the_limit() {
    use fusebox::limit::Limit;
    let dep = Dependency::default();
    let running = adaptive(Limit::Aimd(
        AimdConfig::new().initial_limit(10).max_limit(100),
    ));
    let svc = running.layer(dep.service());
    let limit = running.limit_handle().unwrap();
    assert_eq!(limit.limit(), 10);

    // Reloaded under load: a lower maximum holds the running limit at once.
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 4, 20, &seen);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = running.reload(&adaptive(Limit::Aimd(
        AimdConfig::new().initial_limit(6).max_limit(6),
    )));
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.changes[0].path, "limit.algorithm");
    assert_eq!(limit.limit(), 6, "within the new maximum");
    join(callers).await;
    assert_eq!(
        seen.other.load(Ordering::SeqCst) + seen.shed.load(Ordering::SeqCst),
        0
    );
    assert_eq!(seen.ok.load(Ordering::SeqCst), 80);
    assert!(limit.limit() <= 6, "the algorithm keeps to the new maximum");

    // A higher minimum raises it for the next call; the initial limit is not read again.
    let report = running.reload(&aimd(8, 20, 50));
    assert!(report.is_complete(), "{report}");
    assert_eq!(limit.limit(), 8);

    // Another adaptive algorithm, in place: Vegas first measures the no-load latency, at
    // its minimum (as a Vegas limit built anew does).
    let report = running.reload(&adaptive(Limit::Vegas(
        VegasConfig::new()
            .min_limit(2)
            .initial_limit(40)
            .max_limit(50),
    )));
    assert!(report.is_complete(), "{report}");
    assert_eq!(limit.limit(), 2);
    // Back to AIMD: it starts from the limit in force.
    let report = running.reload(&aimd(1, 30, 50));
    assert!(report.is_complete(), "{report}");
    assert_eq!(limit.limit(), 2);

    // A fixed limit instead, in place, under load: the value is the file's from the next
    // call on, and the algorithm no longer moves it.
    let fixed = Policy::builder("dep").concurrency_limit(3).build().unwrap();
    let seen = Arc::new(Seen::default());
    let callers = load(svc.clone(), 4, 20, &seen);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = running.reload(&fixed);
    assert!(report.is_complete(), "{report}");
    assert_eq!(limit.limit(), 3);
    assert!(limit.set_limit(4), "a fixed limit takes a value by hand");
    join(callers).await;
    assert_eq!(
        seen.other.load(Ordering::SeqCst),
        0,
        "no call failed because of the reload"
    );
    assert_eq!(limit.limit(), 4, "no algorithm moved it");

    // And adaptive again, in place: AIMD starts from the limit in force and moves it.
    let report = running.reload(&aimd(1, 30, 50));
    assert!(report.is_complete(), "{report}");
    assert_eq!(
        limit.limit(),
        4,
        "from the limit in force, not the initial one"
    );
    assert!(!limit.set_limit(9), "the algorithm owns the value");
    let seen = Arc::new(Seen::default());
    join(load(svc.clone(), 4, 20, &seen)).await;
    assert_eq!(seen.other.load(Ordering::SeqCst), 0);
    assert!(
        limit.limit() > 4,
        "its successes raised it: {}",
        limit.limit()
    );
}
