//! The four classic circuit-breaker drills, end to end: a real hyper-util client wrapped in
//! fusebox's `CircuitBreakerLayer`, calling a real hyper server on 127.0.0.1 whose
//! behaviour each drill controls.
//!
//! 1. Latency injection opens the breaker through the slow-call rate after exactly the
//!    volume the window arithmetic predicts, and the server then sees nothing.
//! 2. A stream of 400s keeps it closed (the dependency answers correctly; the caller was
//!    wrong), however long it runs.
//! 3. 503s open it; the open wait holds; half-open lets exactly the probe budget reach the
//!    server while every other concurrent caller is rejected with a retry time.
//! 4. A gradual recovery closes it without a stampede: it cycles open / half-open, every
//!    half-open period lets at most the probe budget through, and it finally closes.
//!
//! Plus: a refused connection counts as a failure and opens the breaker.
//!
//! Everything runs on paused tokio time: the server lives in the test's runtime, so its
//! injected latency and the breaker's open waits are virtual, and every number is exact
//! (jitter is zero or seeded and read back from the transition events).

use bytes::Bytes;
use fusebox_breaker::{
    BreakerEvent, BreakerHandle, CircuitBreaker, CircuitBreakerConfig, CircuitBreakerConfigBuilder,
    CircuitBreakerLayer, EventKind, Reason, State, Transition, WindowTotals,
};
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::{BoxError, Outcome, Route, RouteTable, classify_error_chain};
use fusebox_tests::{HttpClient, Reply, RequestSeen, TestServer, client, closed_port, get};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

type Client = CircuitBreaker<HttpClient>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A config builder with zero jitter and a fixed seed; each drill sets the rest.
fn config(name: &str) -> CircuitBreakerConfigBuilder {
    CircuitBreakerConfig::builder()
        .name(name)
        .open_wait_jitter(Duration::ZERO)
        .seed(1)
}

/// The real hyper-util client behind a breaker built from `config` and `routes`.
fn breaker_client(
    config: CircuitBreakerConfigBuilder,
    routes: RouteTable,
) -> (Client, BreakerHandle) {
    let layer = CircuitBreakerLayer::builder(config.build().expect("a valid breaker config"))
        .routes(routes)
        .build()
        .expect("an in-memory breaker always builds");
    let handle = layer.handle();
    (ServiceBuilder::new().layer(layer).service(client()), handle)
}

/// Sends `request` and reads the whole response body (so the connection goes back to the
/// pool); the status, or the error as the caller sees it.
async fn send(svc: &Client, request: Request<Full<Bytes>>) -> Result<StatusCode, BoxError> {
    let response = svc.clone().oneshot(request).await?;
    let status = response.status();
    response.into_body().collect().await?;
    Ok(status)
}

/// The breaker's rejection inside `result`, or a panic saying what came instead.
fn rejection(result: &Result<StatusCode, BoxError>) -> &CircuitOpen {
    match result {
        Err(e) => e
            .downcast_ref::<CircuitOpen>()
            .unwrap_or_else(|| panic!("expected CircuitOpen, got {e}")),
        Ok(status) => panic!("expected CircuitOpen, got {status}"),
    }
}

/// Transitions received on `events` so far.
fn transitions(events: &mut broadcast::Receiver<BreakerEvent>) -> Vec<Transition> {
    let mut out = Vec::new();
    loop {
        match events.try_recv() {
            Ok(BreakerEvent {
                kind: EventKind::Transition(t),
                ..
            }) => out.push(t),
            Ok(other) => panic!("unexpected event {other:?}"),
            Err(TryRecvError::Empty) => return out,
            Err(e) => panic!("subscription broken: {e}"),
        }
    }
}

fn edge(t: &Transition) -> (State, State, Reason) {
    (t.from, t.to, t.reason)
}

fn totals(calls: u32, failures: u32, slow: u32) -> WindowTotals {
    WindowTotals::new(calls, failures, slow)
}

// === Drill 1: latency injection ===

const SLOW_WINDOW: usize = 20;
const SLOW_MINIMUM: usize = 10;
const SLOW_THRESHOLD: usize = 60;
const FAST_FIRST: usize = 10;

/// The call (1-based) after which a count window of `SLOW_WINDOW` with `SLOW_MINIMUM`
/// minimum calls and a `SLOW_THRESHOLD` % slow-call threshold trips, when the first
/// `FAST_FIRST` calls are fast and every later one is slow: a naive recount of the window
/// after each call.
fn expected_slow_trip() -> (usize, usize, usize) {
    let slow: Vec<bool> = (0..100).map(|i| i >= FAST_FIRST).collect();
    for n in 1..=slow.len() {
        let window = &slow[n.saturating_sub(SLOW_WINDOW)..n];
        let slow_calls = window.iter().filter(|s| **s).count();
        if window.len() >= SLOW_MINIMUM && slow_calls * 100 >= SLOW_THRESHOLD * window.len() {
            return (n, window.len(), slow_calls);
        }
    }
    panic!("never trips");
}

#[tokio::test(start_paused = true)]
async fn drill_latency_injection_opens_through_the_slow_call_rate() {
    // 10 fast answers, then every answer takes 300 ms on a route whose slow threshold is
    // 100 ms: the window slides from 0 % slow towards 100 %.
    let server = TestServer::with_behaviour(Arc::new(|_: &RequestSeen, n| {
        if n < FAST_FIRST {
            Reply::status(200)
        } else {
            Reply::slow(200, ms(300))
        }
    }))
    .await;
    let routes = RouteTable::builder(Route::default())
        .route("GET /quote", Route::default().slow_call_duration(ms(100)))
        .build()
        .expect("a valid route table");
    let (svc, handle) = breaker_client(
        config("pricing")
            .count_window(SLOW_WINDOW as u32)
            .minimum_calls(SLOW_MINIMUM as u32)
            .failure_rate_threshold(50)
            .slow_call_rate_threshold(SLOW_THRESHOLD as u32)
            .open_wait(Duration::from_secs(10)),
        routes,
    );
    let mut events = handle.subscribe();

    // 10 fast + s slow with s ≤ 10: s/(10+s) ≥ 60 % needs s ≥ 15 — more than fit. Past a
    // full window it holds (20 - s) fast and s slow: s/20 ≥ 60 % at s = 12, call 22.
    let (trip_call, trip_calls, trip_slow) = expected_slow_trip();
    assert_eq!((trip_call, trip_calls, trip_slow), (22, 20, 12));

    let mut opened = None;
    for call in 1..=trip_call {
        let started = Instant::now();
        let status = send(&svc, get(&server.url("/quote")))
            .await
            .expect("admitted");
        assert_eq!(
            status,
            StatusCode::OK,
            "the dependency answers 200 throughout"
        );
        let took = started.elapsed();
        assert_eq!(took, if call <= FAST_FIRST { ms(0) } else { ms(300) });
        let moved = transitions(&mut events);
        if call < trip_call {
            assert!(
                moved.is_empty(),
                "opened early, after call {call}: {moved:?}"
            );
            // The breaker's window equals the naive one as it slides.
            let slow = call.saturating_sub(FAST_FIRST).min(SLOW_WINDOW) as u32;
            let calls = call.min(SLOW_WINDOW) as u32;
            assert_eq!(
                handle.snapshot().window,
                totals(calls, 0, slow),
                "after {call}"
            );
        } else {
            assert_eq!(moved.len(), 1, "{moved:?}");
            opened = Some(moved[0].clone());
        }
    }
    let opened = opened.expect("opened");
    assert_eq!(
        edge(&opened),
        (State::Closed, State::Open, Reason::SlowCallRate)
    );
    assert_eq!(
        opened.window,
        totals(trip_calls as u32, 0, trip_slow as u32),
        "all successes: only the slow-call rate can have tripped it"
    );
    assert_eq!(opened.open_for, Some(Duration::from_secs(10)));
    assert_eq!(opened.jitter, Some(Duration::ZERO));
    assert_eq!(server.received(), trip_call);

    // Open: nothing reaches the server, sequentially or concurrently, for the whole wait.
    for second in 0..10u64 {
        let result = send(&svc, get(&server.url("/quote"))).await;
        assert_eq!(
            rejection(&result).retry_after(),
            Duration::from_secs(10 - second)
        );
        let burst =
            futures_util::future::join_all((0..5).map(|_| send(&svc, get(&server.url("/quote")))))
                .await;
        assert!(burst.iter().all(|r| !rejection(r).is_half_open()));
        tokio::time::advance(Duration::from_secs(1) - ms(1)).await;
        assert!(send(&svc, get(&server.url("/quote"))).await.is_err());
        tokio::time::advance(ms(1)).await;
    }
    assert_eq!(
        server.received(),
        trip_call,
        "the server saw no call while open"
    );
    assert_eq!(server.max_in_flight(), 1);
    assert_eq!(handle.state(), State::Open);
    assert!(transitions(&mut events).is_empty());
}

// === Drill 2: 400s keep it closed ===

#[tokio::test(start_paused = true)]
async fn drill_a_stream_of_400s_keeps_it_closed() {
    let server = TestServer::start(Reply::status(400)).await;
    let (svc, handle) = breaker_client(
        config("accounts")
            .count_window(100)
            .minimum_calls(20)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(10)),
        RouteTable::builder(Route::default().slow_call_duration(ms(100)))
            .build()
            .expect("a valid route table"),
    );
    let mut events = handle.subscribe();

    // 300 bad requests one after another...
    for _ in 0..300 {
        let status = send(&svc, get(&server.url("/accounts/x"))).await;
        assert_eq!(status.expect("admitted"), StatusCode::BAD_REQUEST);
    }
    // ... and 200 more, 20 at a time, with the other client errors mixed in.
    server.set_behaviour(Arc::new(|_: &RequestSeen, n| {
        Reply::status([400, 404, 409, 422][n % 4])
    }));
    for _ in 0..10 {
        let batch = futures_util::future::join_all(
            (0..20).map(|_| send(&svc, get(&server.url("/accounts/x")))),
        )
        .await;
        for result in batch {
            assert!(result.expect("admitted").is_client_error());
        }
    }

    assert_eq!(server.received(), 500, "the server saw every call");
    assert_eq!(server.completed(), 500);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.generation, 0, "it never moved");
    assert_eq!(
        snapshot.window,
        totals(100, 0, 0),
        "the window is full of successes"
    );
    assert!(transitions(&mut events).is_empty());

    // The contrast: a window full of successes still opens after exactly half a window of
    // real failures — 50 503s at 50 %, not 500.
    server.set(Reply::status(503));
    for call in 1..=50 {
        let status = send(&svc, get(&server.url("/accounts/x"))).await;
        assert_eq!(status.expect("admitted"), StatusCode::SERVICE_UNAVAILABLE);
        let moved = transitions(&mut events);
        if call < 50 {
            assert!(moved.is_empty(), "opened after {call} failures");
        } else {
            assert_eq!(
                moved.iter().map(edge).collect::<Vec<_>>(),
                [(State::Closed, State::Open, Reason::FailureRate)]
            );
            assert_eq!(moved[0].window, totals(100, 50, 0));
        }
    }
    assert!(rejection(&send(&svc, get(&server.url("/accounts/x"))).await).retry_after() > ms(0));
    assert_eq!(server.received(), 550);
}

// === Drill 3: 503s open it; the open wait holds; half-open admits the probe budget ===

#[tokio::test(start_paused = true)]
async fn drill_503s_open_it_and_half_open_admits_exactly_the_probe_budget() {
    const PROBES: usize = 3;
    let server = TestServer::start(Reply::status(503)).await;
    let (svc, handle) = breaker_client(
        config("orders")
            .count_window(10)
            .minimum_calls(5)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(5))
            .open_wait_jitter(Duration::from_secs(1))
            .seed(7)
            .permitted_probes(PROBES as u32)
            .max_half_open_wait(Some(Duration::from_secs(30))),
        RouteTable::default(),
    );
    let mut events = handle.subscribe();

    for call in 1..=5 {
        let status = send(&svc, get(&server.url("/orders"))).await;
        assert_eq!(status.expect("admitted"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            handle.state() == State::Open,
            call == 5,
            "opens at the fifth failure"
        );
    }
    let tripped_at = Instant::now();
    let moved = transitions(&mut events);
    assert_eq!(
        moved.iter().map(edge).collect::<Vec<_>>(),
        [(State::Closed, State::Open, Reason::FailureRate)]
    );
    assert_eq!(moved[0].window, totals(5, 5, 0));
    let jitter = moved[0].jitter.expect("an opening carries its jitter");
    let open_for = moved[0].open_for.expect("an opening carries its wait");
    assert!(jitter <= Duration::from_secs(1));
    assert_eq!(open_for, Duration::from_secs(5) + jitter);

    // The open wait holds: every call is rejected with the exact time left, and none
    // reaches the server.
    for offset in [ms(0), ms(1), ms(1_000), ms(2_500), open_for - ms(1)] {
        // `advance`, not `sleep_until`: timers round up to the millisecond, the wait (with
        // its jitter) is exact to the nanosecond.
        tokio::time::advance((tripped_at + offset) - Instant::now()).await;
        let left = open_for - offset;
        let result = send(&svc, get(&server.url("/orders"))).await;
        let open = rejection(&result);
        assert_eq!(open.breaker(), "orders");
        assert!(!open.is_half_open());
        assert_eq!(open.retry_after(), left, "{offset:?} into the wait");
        assert_eq!(handle.snapshot().until_half_open, Some(left));
        let burst = futures_util::future::join_all(
            (0..10).map(|_| send(&svc, get(&server.url("/orders")))),
        )
        .await;
        assert!(burst.iter().all(|r| rejection(r).retry_after() == left));
    }
    assert_eq!(
        server.received(),
        5,
        "no call reached the server while open"
    );
    assert_eq!(handle.state(), State::Open);

    // The wait is over and the dependency recovered, slowly: 20 callers at once. Exactly
    // the probe budget reaches the server; the rest are rejected at once, half-open.
    tokio::time::advance((tripped_at + open_for) - Instant::now()).await;
    server.set(Reply::slow(200, ms(1_000)));
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (svc, url) = (svc.clone(), server.url("/orders"));
            tokio::spawn(async move { send(&svc, get(&url)).await })
        })
        .collect();
    tokio::time::sleep(ms(500)).await;
    assert_eq!(
        server.received(),
        5 + PROBES,
        "the probes are at the server"
    );
    assert_eq!(server.in_flight(), PROBES, "and in flight");
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_admitted, PROBES as u32);

    let mut results = Vec::new();
    for caller in callers {
        results.push(caller.await.expect("the caller task"));
    }
    let served: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(served.len(), PROBES);
    assert!(served.iter().all(|r| matches!(r, Ok(StatusCode::OK))));
    for rejected in results.iter().filter(|r| r.is_err()) {
        let open = rejection(rejected);
        assert!(open.is_half_open(), "rejected because the probes are taken");
        assert_eq!(
            open.retry_after(),
            fusebox_breaker::state::HALF_OPEN_RETRY_HINT,
            "a short hint: the probes may close the breaker at any moment"
        );
    }
    assert_eq!(server.received(), 5 + PROBES, "exactly the probe budget");
    assert_eq!(server.max_in_flight(), PROBES);

    // Three successful probes close it, with a fresh window, and traffic flows again.
    let moved = transitions(&mut events);
    assert_eq!(
        moved.iter().map(edge).collect::<Vec<_>>(),
        [
            (State::Open, State::HalfOpen, Reason::OpenWaitElapsed),
            (State::HalfOpen, State::Closed, Reason::ProbesSucceeded),
        ]
    );
    assert_eq!(
        moved[0].window,
        totals(5, 5, 0),
        "probing starts on the outage"
    );
    assert_eq!(
        moved[1].window,
        totals(0, 0, 0),
        "closing clears the window"
    );
    server.set(Reply::status(200));
    let batch =
        futures_util::future::join_all((0..10).map(|_| send(&svc, get(&server.url("/orders")))))
            .await;
    assert!(batch.iter().all(|r| matches!(r, Ok(StatusCode::OK))));
    assert_eq!(server.received(), 5 + PROBES + 10);
    assert_eq!(
        handle.snapshot().window,
        totals(10, 0, 0),
        "cleared on close"
    );
}

// === Drill 4: gradual recovery ===

/// What happened, in order: a request reached the server, or the breaker moved.
#[derive(Debug, Clone, PartialEq)]
enum Mark {
    Arrived(u64),
    /// A transition, and when it happened (time since the drill started).
    Moved(State, State, Reason, Duration),
}

/// A fixed, well-mixed number in 0..100 for call `n` (splitmix64).
fn dice(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 100
}

/// The percentage of calls the recovering dependency fails `t` into the drill: all for
/// 3 s, then 10 points fewer each second, none from 13 s.
fn failing_percent(t: Duration) -> u64 {
    let ms = t.as_millis() as u64;
    if ms < 3_000 {
        100
    } else {
        100u64.saturating_sub((ms - 3_000) / 100)
    }
}

#[tokio::test(start_paused = true)]
async fn drill_gradual_recovery_closes_without_a_stampede() {
    const PROBES: u32 = 3;
    const BATCH: u64 = 6;
    const TICK: Duration = Duration::from_millis(100);
    let start = Instant::now();
    let log: Arc<Mutex<Vec<Mark>>> = Arc::default();

    // Each call carries its number; the server fails it by a fixed dice roll against the
    // falling failure percentage, and answers call n of a batch after 10 + n ms so that
    // results come back in a fixed order.
    let server_log = Arc::clone(&log);
    let server = TestServer::with_behaviour(Arc::new(move |seen: &RequestSeen, _| {
        let call: u64 = seen.headers["x-call"]
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("a numbered call");
        server_log.lock().unwrap().push(Mark::Arrived(call));
        let status = if dice(call) < failing_percent(start.elapsed()) {
            503
        } else {
            200
        };
        Reply::slow(status, ms(10 + call % BATCH))
    }))
    .await;

    let listener_log = Arc::clone(&log);
    let layer = CircuitBreakerLayer::builder(
        config("ledger")
            .count_window(20)
            .minimum_calls(10)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(1))
            .open_wait_jitter(ms(500))
            .seed(42)
            .permitted_probes(PROBES)
            .max_half_open_wait(Some(Duration::from_secs(10)))
            .build()
            .expect("a valid config"),
    )
    .on_event(move |event| {
        if let EventKind::Transition(t) = &event.kind {
            listener_log
                .lock()
                .unwrap()
                .push(Mark::Moved(t.from, t.to, t.reason, start.elapsed()));
        }
    })
    .build()
    .expect("an in-memory breaker always builds");
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let svc = ServiceBuilder::new().layer(layer).service(client());

    // Steady traffic: a batch of 6 concurrent calls every 100 ms for 20 s.
    let mut next_call = 0u64;
    let mut calls: Vec<(Duration, u64, Result<StatusCode, BoxError>)> = Vec::new();
    let mut moved = Vec::new();
    for tick in 0..200u32 {
        let at = start + TICK * tick;
        tokio::time::sleep_until(at).await;
        let batch = futures_util::future::join_all((0..BATCH).map(|_| {
            let n = next_call;
            next_call += 1;
            let request = Request::get(server.url("/ledger"))
                .header("x-call", n)
                .body(Full::new(Bytes::new()))
                .expect("a valid request");
            let svc = &svc;
            async move { (n, send(svc, request).await) }
        }))
        .await;
        calls.extend(batch.into_iter().map(|(n, r)| (at - start, n, r)));
        moved.extend(transitions(&mut events));
    }

    // The subscription saw the same transitions, in the same order, as the listener.
    let log = log.lock().unwrap().clone();
    let from_log: Vec<_> = log
        .iter()
        .filter_map(|m| match m {
            Mark::Moved(from, to, reason, _) => Some((*from, *to, *reason)),
            Mark::Arrived(_) => None,
        })
        .collect();
    assert_eq!(moved.iter().map(edge).collect::<Vec<_>>(), from_log);

    // Only the allowed edges, chained, one generation each.
    let mut state = State::Closed;
    for (i, t) in moved.iter().enumerate() {
        assert_eq!(t.from, state, "transition {i} starts where the last ended");
        assert_eq!(t.generation, i as u64 + 1);
        let allowed = matches!(
            edge(t),
            (State::Closed, State::Open, Reason::FailureRate)
                | (State::Open, State::HalfOpen, Reason::OpenWaitElapsed)
                | (State::HalfOpen, State::Open, Reason::ProbeFailed)
                | (State::HalfOpen, State::Closed, Reason::ProbesSucceeded)
        );
        assert!(allowed, "transition {i} is not an allowed edge: {t:?}");
        if t.to == State::Closed {
            assert_eq!(t.window, totals(0, 0, 0), "closing clears the window");
        }
        if t.to == State::Open {
            let jitter = t.jitter.expect("jitter");
            assert!(jitter <= ms(500));
            assert_eq!(t.open_for, Some(Duration::from_secs(1) + jitter));
        }
        state = t.to;
    }

    // It cycled: opened from closed, failed at least one probe round, and closed for good.
    let count = |e: (State, State, Reason)| moved.iter().filter(|t| edge(t) == e).count();
    assert!(count((State::Closed, State::Open, Reason::FailureRate)) >= 1);
    assert!(
        count((State::HalfOpen, State::Open, Reason::ProbeFailed)) >= 1,
        "{moved:#?}"
    );
    let last = moved.last().expect("transitions");
    assert_eq!(
        edge(last),
        (State::HalfOpen, State::Closed, Reason::ProbesSucceeded)
    );
    assert_eq!(handle.state(), State::Closed);

    // No stampede: in every half-open period the server received at most the probe
    // budget (here exactly: each period starts with a batch larger than the budget), and
    // in every open period it received nothing.
    let mut periods = 0;
    let mut current: Option<(State, usize)> = None;
    for mark in &log {
        match (mark, &mut current) {
            (Mark::Arrived(_), Some((_, arrivals))) => *arrivals += 1,
            (Mark::Arrived(_), None) => {}
            (Mark::Moved(from, to, _, _), _) => {
                if let Some((state, arrivals)) = current.take() {
                    assert_eq!(state, *from);
                    match state {
                        State::HalfOpen => {
                            periods += 1;
                            assert!(arrivals <= PROBES as usize, "stampede: {arrivals}");
                            assert_eq!(arrivals, PROBES as usize);
                        }
                        State::Open => assert_eq!(arrivals, 0, "a call reached it while open"),
                        _ => {}
                    }
                }
                current = Some((*to, 0));
            }
        }
    }
    assert_eq!(
        periods,
        count((State::Open, State::HalfOpen, Reason::OpenWaitElapsed))
    );
    assert!(periods >= 2, "probed more than once: {periods}");

    // After it closed, traffic flows: every later call was admitted and reached the server
    // (the dependency still fails a shrinking share of them, below the threshold), and once
    // it has recovered every call succeeds.
    let Some(Mark::Moved(.., closed_at)) = log.iter().rev().find(|m| matches!(m, Mark::Moved(..)))
    else {
        panic!("no transition logged");
    };
    let closed_at = *closed_at;
    let after: Vec<_> = calls.iter().filter(|(at, _, _)| *at > closed_at).collect();
    assert!(
        after.len() >= 60,
        "closed in time to carry traffic: {closed_at:?}"
    );
    for (at, n, r) in &after {
        let status = r.as_ref().expect("admitted after closing");
        let expected = if dice(*n) < failing_percent(*at) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        assert_eq!(*status, expected, "call {n} at {at:?}");
        if *at >= Duration::from_secs(13) {
            assert_eq!(*status, StatusCode::OK, "recovered: call {n} at {at:?}");
        }
    }
    let arrived_after = log
        .iter()
        .rev()
        .take_while(|m| matches!(m, Mark::Arrived(_)))
        .count();
    assert_eq!(
        arrived_after,
        after.len(),
        "the server saw every call after closing"
    );

    // And every call the breaker rejected was rejected for a reason it could name.
    let rejected = calls.iter().filter(|(_, _, r)| r.is_err()).count();
    for (_, _, r) in calls.iter().filter(|(_, _, r)| r.is_err()) {
        rejection(r);
    }
    assert_eq!(
        server.received() + rejected,
        calls.len(),
        "every call either reached the server or was rejected by the breaker"
    );
}

// === A refused connection ===

#[tokio::test(start_paused = true)]
async fn a_refused_connection_counts_as_a_failure_and_opens_it() {
    let addr = closed_port().await;
    let (svc, handle) = breaker_client(
        config("gone")
            .count_window(10)
            .minimum_calls(5)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(10)),
        RouteTable::default(),
    );
    let mut events = handle.subscribe();
    let url = format!("http://{addr}/");

    for call in 1..=5 {
        let err = send(&svc, get(&url)).await.expect_err("nothing listens");
        assert!(
            err.downcast_ref::<CircuitOpen>().is_none(),
            "call {call}: {err}"
        );
        assert_eq!(classify_error_chain(&*err).outcome(), Outcome::Failure);
        let mut source: Option<&(dyn std::error::Error + 'static)> = err.source();
        let mut refused = false;
        while let Some(e) = source {
            refused |= e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            source = e.source();
        }
        assert!(refused, "a refused connection: {err:?}");
    }
    let moved = transitions(&mut events);
    assert_eq!(
        moved.iter().map(edge).collect::<Vec<_>>(),
        [(State::Closed, State::Open, Reason::FailureRate)]
    );
    assert_eq!(moved[0].window, totals(5, 5, 0));

    let result = send(&svc, get(&url)).await;
    let open = rejection(&result);
    assert_eq!(open.breaker(), "gone");
    assert_eq!(open.retry_after(), Duration::from_secs(10));
}
