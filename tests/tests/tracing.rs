//! What fusebox reports through `tracing`: the `policy_call` span of every Policy call with
//! each of its fields, the layers' events under their `fusebox::<layer>` targets and inside
//! the call's span, and nothing of the span when `DEBUG` is off.
//!
//! A capture layer (`fusebox_tests::capture`) installed as the thread's default subscriber
//! keeps every span and event; the calls run on paused tokio time on the same thread.

use bytes::Bytes;
use fusebox::limit::AimdConfig;
use fusebox::retry::ReplayBody;
use fusebox::trace;
use fusebox::{
    CircuitBreakerConfig, ConcurrencyLimitConfig, Fallback, KeyBy, Policy, RetryConfig, Route,
    RouteTable,
};
use fusebox_tests::capture::{Capture, EventRecord, SpanRecord};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};
use tracing::Level;
use tracing_subscriber::filter::LevelFilter;

type Body = Empty<Bytes>;

/// What the dependency answers next: a status, or `None` to hang (until a timeout).
#[derive(Clone, Default)]
struct Script(Arc<Mutex<VecDeque<Option<u16>>>>);

impl Script {
    fn then(&self, answers: &[Option<u16>]) {
        self.0
            .lock()
            .expect("the script")
            .extend(answers.iter().copied());
    }

    /// The dependency: answers from the script, 200 when it is empty.
    fn service(
        &self,
    ) -> impl Service<
        Request<ReplayBody<Body>>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
    > + Clone
    + Send
    + 'static {
        let script = self.clone();
        tower::service_fn(move |_: Request<ReplayBody<Body>>| {
            let next = script
                .0
                .lock()
                .expect("the script")
                .pop_front()
                .unwrap_or(Some(200));
            async move {
                let Some(status) = next else {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    unreachable!("a hanging call outlives its timeout");
                };
                let mut response = Response::new(Empty::new());
                *response.status_mut() = StatusCode::from_u16(status).expect("a status");
                Ok(response)
            }
        })
    }
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Empty::new()).expect("a request")
}

fn routes() -> RouteTable {
    RouteTable::builder(Route::default())
        .route("GET /users/{id}", Route::default())
        .route("GET /cached/{id}", Route::default())
        .build()
        .expect("a valid table")
}

/// The one `policy_call` span captured since the last `clear`.
fn the_call(capture: &Capture) -> SpanRecord {
    let spans = capture.spans_named(trace::POLICY_CALL);
    assert_eq!(spans.len(), 1, "one call, one span: {spans:#?}");
    spans.into_iter().next().expect("one span")
}

/// The events captured with `target`.
fn events_of(capture: &Capture, target: &str) -> Vec<EventRecord> {
    capture
        .events()
        .into_iter()
        .filter(|e| e.target == target)
        .collect()
}

/// Every event and span captured is under one of fusebox's targets.
fn assert_fusebox_targets(capture: &Capture) {
    for event in capture.events() {
        assert!(
            trace::TARGETS.contains(&event.target.as_str()),
            "an event outside fusebox's targets: {event:#?}"
        );
    }
    for span in capture.spans() {
        assert!(
            trace::TARGETS.contains(&span.target.as_str()),
            "a span outside fusebox's targets: {span:#?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_call_has_a_span_with_every_field() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber(LevelFilter::TRACE));
    let script = Script::default();
    let policy = Policy::builder("users-api")
        .routes(routes())
        .timeout(Duration::from_secs(1))
        .concurrency_limit(8)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(20)
                .minimum_calls(20),
        )
        .breaker_key(KeyBy::Host)
        .retry_budget(
            RetryConfig::builder()
                .max_attempts(2)
                .min_retries_per_second(10)
                .base_delay(Duration::from_millis(1))
                .seed(Some(1)),
        )
        .build()
        .expect("a valid policy");
    let svc = policy.layer(script.service());

    // A healthy call: one attempt.
    let response = svc
        .clone()
        .oneshot(get("http://API.example.com/users/7"))
        .await
        .expect("a call");
    assert_eq!(response.status(), 200);
    let span = the_call(&capture);
    assert_eq!(span.target, trace::POLICY);
    assert_eq!(span.level, Level::DEBUG);
    assert_eq!(span.declared, trace::POLICY_CALL_FIELDS);
    assert_eq!(span.field("policy"), Some("users-api"));
    assert_eq!(span.field("route"), Some("GET /users/{id}"));
    assert_eq!(span.field("key"), Some("api.example.com"));
    assert_eq!(span.field("attempts"), Some("1"));
    assert_eq!(span.field("outcome"), Some("success"));
    assert_eq!(span.field("status"), Some("200"));
    for absent in ["rejection", "error", "fallback"] {
        assert_eq!(span.field(absent), None, "{absent} on a healthy call");
    }
    assert!(span.closed, "the span closes with the response head");
    let attempts = capture.spans_named(trace::RETRY_ATTEMPT);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].parent, Some(trace::POLICY_CALL));
    assert_eq!(attempts[0].target, trace::RETRY);

    // A 503, then a 200: two attempts, each a child span of the call's.
    capture.clear();
    script.then(&[Some(503), Some(200)]);
    let response = svc
        .clone()
        .oneshot(get("http://api.example.com/users/7"))
        .await
        .expect("a call");
    assert_eq!(response.status(), 200);
    let span = the_call(&capture);
    assert_eq!(span.field("attempts"), Some("2"));
    assert_eq!(span.field("outcome"), Some("success"));
    assert_eq!(span.field("status"), Some("200"));
    let attempts = capture.spans_named(trace::RETRY_ATTEMPT);
    assert_eq!(
        attempts
            .iter()
            .map(|a| (a.field("attempt"), a.parent))
            .collect::<Vec<_>>(),
        [
            (Some("1"), Some(trace::POLICY_CALL)),
            (Some("2"), Some(trace::POLICY_CALL))
        ]
    );

    // Two 503s: the retry is spent, the refusal is logged inside the call's span, and the
    // caller gets the last 503, a failure.
    capture.clear();
    script.then(&[Some(503), Some(503)]);
    let response = svc
        .clone()
        .oneshot(get("http://other.example.com/users/8"))
        .await
        .expect("a call");
    assert_eq!(response.status(), 503);
    let span = the_call(&capture);
    assert_eq!(span.field("key"), Some("other.example.com"));
    assert_eq!(span.field("attempts"), Some("2"));
    assert_eq!(span.field("outcome"), Some("failure"));
    assert_eq!(span.field("status"), Some("503"));
    let refused = events_of(&capture, trace::RETRY);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0].field("reason"), Some("max attempts reached"));
    assert_eq!(refused[0].field("attempts"), Some("2"));
    assert_eq!(refused[0].span, Some(trace::POLICY_CALL));
    assert_fusebox_targets(&capture);
}

#[tokio::test(start_paused = true)]
async fn rejections_timeouts_and_fallbacks_are_recorded_and_events_carry_their_targets() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber(LevelFilter::TRACE));
    let script = Script::default();
    let policy = Policy::builder("billing")
        .routes(routes())
        .timeout(Duration::from_millis(100))
        .concurrency_limit_config(
            ConcurrencyLimitConfig::builder()
                .aimd(AimdConfig::new().initial_limit(64).backoff_ratio(0.5))
                .log_step(1),
        )
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(2)
                .minimum_calls(2)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(30))
                .open_wait_jitter(Duration::ZERO),
        )
        .fallback(
            Fallback::new(|_| Response::new(Bytes::from_static(b"stale")))
                .route("GET /cached/{id}"),
        )
        .build()
        .expect("a valid policy");
    let svc = policy.layer(script.service());

    // A call that hangs: the timeout fires; no retry budget, so one attempt.
    script.then(&[None]);
    let error = svc
        .clone()
        .oneshot(get("http://127.0.0.1/users/1"))
        .await
        .expect_err("a timeout");
    assert!(error.is::<fusebox::error::Elapsed>(), "{error}");
    let span = the_call(&capture);
    assert_eq!(span.field("route"), Some("GET /users/{id}"));
    assert_eq!(span.field("key"), None, "an unkeyed breaker has no key");
    assert_eq!(span.field("attempts"), Some("1"));
    assert_eq!(span.field("outcome"), Some("failure"));
    assert_eq!(span.field("error"), Some("elapsed"));
    assert_eq!(span.field("status"), None);
    let elapsed = events_of(&capture, trace::TIMEOUT);
    assert_eq!(elapsed.len(), 1, "{elapsed:#?}");
    assert_eq!(elapsed[0].field("route"), Some("GET /users/{id}"));
    assert_eq!(elapsed[0].field("phase"), Some("headers"));
    assert_eq!(elapsed[0].span, Some(trace::POLICY_CALL));

    // A 500: the second failure in a window of two opens the breaker, inside this call.
    capture.clear();
    script.then(&[Some(500)]);
    let response = svc
        .clone()
        .oneshot(get("http://127.0.0.1/users/1"))
        .await
        .expect("a response");
    assert_eq!(response.status(), 500);
    let span = the_call(&capture);
    assert_eq!(span.field("outcome"), Some("failure"));
    assert_eq!(span.field("status"), Some("500"));
    let transitions = events_of(&capture, trace::BREAKER);
    assert_eq!(transitions.len(), 1, "{transitions:#?}");
    let opened = &transitions[0];
    assert_eq!(opened.level, Level::WARN);
    assert_eq!(opened.span, Some(trace::POLICY_CALL));
    assert_eq!(opened.field("breaker"), Some("billing"));
    assert_eq!(opened.field("from"), Some("closed"));
    assert_eq!(opened.field("to"), Some("open"));
    assert_eq!(opened.field("calls"), Some("2"));
    assert_eq!(opened.field("failures"), Some("2"));
    assert_eq!(opened.field("open_ms"), Some("30000"));
    assert_eq!(
        opened.fields.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut keys = [
                "breaker",
                "key",
                "from",
                "to",
                "reason",
                "calls",
                "failures",
                "slow",
                "failure_rate",
                "slow_rate",
                "open_ms",
                "jitter_ms",
                "generation",
                "message",
            ];
            keys.sort_unstable();
            keys
        },
        "the transition's event keeps every field"
    );
    // The adaptive limit halved on the failures and said so.
    let moved = events_of(&capture, trace::LIMIT);
    assert!(!moved.is_empty(), "the limit moved");
    assert_eq!(moved[0].field("limiter"), Some("billing"));
    assert_eq!(moved[0].level, Level::INFO);

    // The breaker is open: the next call is rejected without an attempt reaching the
    // dependency.
    capture.clear();
    let error = svc
        .clone()
        .oneshot(get("http://127.0.0.1/users/1"))
        .await
        .expect_err("a rejection");
    assert!(error.is::<fusebox::error::CircuitOpen>(), "{error}");
    let span = the_call(&capture);
    assert_eq!(span.field("attempts"), Some("1"));
    assert_eq!(span.field("outcome"), Some("rejected"));
    assert_eq!(span.field("rejection"), Some("circuit_open"));
    assert_eq!(span.field("error"), None);
    assert_eq!(span.field("fallback"), None);

    // On a route with a fallback, the rejection is served the fallback.
    capture.clear();
    let response = svc
        .clone()
        .oneshot(get("http://127.0.0.1/cached/1"))
        .await
        .expect("the fallback");
    assert_eq!(response.status(), 200);
    let span = the_call(&capture);
    assert_eq!(span.field("route"), Some("GET /cached/{id}"));
    assert_eq!(span.field("outcome"), Some("rejected"));
    assert_eq!(span.field("rejection"), Some("circuit_open"));
    assert_eq!(span.field("fallback"), Some("true"));
    let served = events_of(&capture, trace::FALLBACK);
    assert_eq!(served.len(), 1, "{served:#?}");
    assert_eq!(served[0].field("reason"), Some("circuit_open"));
    assert_eq!(served[0].span, Some(trace::POLICY_CALL));
    assert_fusebox_targets(&capture);
}

#[tokio::test(start_paused = true)]
async fn without_debug_there_is_no_call_span_and_the_info_events_remain() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber(LevelFilter::INFO));
    let script = Script::default();
    let policy = Policy::builder("quiet")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(2)
                .minimum_calls(2)
                .open_wait_jitter(Duration::ZERO),
        )
        .retry_budget(RetryConfig::builder().seed(Some(1)))
        .build()
        .expect("a valid policy");
    let svc = policy.layer(script.service());
    script.then(&[Some(500), Some(500)]);
    for _ in 0..2 {
        let response = svc
            .clone()
            .oneshot(get("http://127.0.0.1/"))
            .await
            .expect("a response");
        assert_eq!(response.status(), 500);
    }
    assert!(capture.spans().is_empty(), "{:#?}", capture.spans());
    let transitions = events_of(&capture, trace::BREAKER);
    assert_eq!(transitions.len(), 1, "{transitions:#?}");
    assert_eq!(transitions[0].span, None, "no span to be in");
    assert_fusebox_targets(&capture);
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_has_passed_sends_nothing_and_says_so() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber(LevelFilter::TRACE));
    let policy = Policy::builder("late")
        .timeout(Duration::from_secs(1))
        .retry_budget(RetryConfig::builder().seed(Some(1)))
        .build()
        .expect("a valid policy");
    let svc = policy.layer(Script::default().service());
    let mut request = get("http://127.0.0.1/users/1");
    request
        .extensions_mut()
        .insert(fusebox::classify::Deadline::after(Duration::ZERO));
    let error = svc.oneshot(request).await.expect_err("too late");
    assert!(error.is::<fusebox::error::DeadlineExceeded>(), "{error}");
    let span = the_call(&capture);
    assert_eq!(span.field("attempts"), Some("0"), "nothing was sent");
    assert_eq!(span.field("outcome"), Some("rejected"));
    assert_eq!(span.field("rejection"), Some("deadline_exceeded"));
    assert!(capture.spans_named(trace::RETRY_ATTEMPT).is_empty());
    assert_fusebox_targets(&capture);
}

#[test]
fn a_reload_reports_under_its_target_and_every_module_names_its_target_as_the_table_does() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber(LevelFilter::INFO));
    let build = |timeout_ms: u64| {
        Policy::builder("reloaded")
            .timeout(Duration::from_millis(timeout_ms))
            .build()
            .expect("a valid policy")
    };
    let running = build(500);
    let report = running.reload(&build(800));
    assert!(report.has_changes(), "{report}");
    let reloaded = events_of(&capture, trace::RELOAD);
    assert_eq!(reloaded.len(), 1, "{:#?}", capture.events());
    assert_fusebox_targets(&capture);

    assert_eq!(fusebox::pool::TARGET, trace::POOL);
    assert_eq!(fusebox::admin::TARGET, trace::ADMIN);
    let mut targets = trace::TARGETS.to_vec();
    targets.sort_unstable();
    targets.dedup();
    assert_eq!(targets.len(), trace::TARGETS.len(), "each target once");
    assert!(targets.iter().all(|t| t.starts_with("fusebox::")));
}
