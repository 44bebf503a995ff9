//! A policy runs its circuit breaker, concurrency limit and timeout as one fused stage
//! (`fusebox::policy::guarded`), not as three stacked services, with its retry budget (if
//! any) around it. This property test holds the Policy to the layers stacked by hand
//! (`RetryBudgetLayer` outermost when there is one): random scripts of answers, errors, latencies,
//! cancellations and pauses (and gRPC answers, whose verdict waits for the trailers) go
//! through (a) a `Policy` and (b) `CircuitBreakerLayer` →
//! `ConcurrencyLimitLayer` → `TimeoutLayer` stacked by hand with the same configuration,
//! each on its own paused-time runtime, and every call's outcome, the breaker's state,
//! generation and window, and the limit's in-flight and waiting counts must be the same
//! after every batch.

use bytes::Bytes;
use fusebox::error::{CircuitOpen, DeadlineExceeded, Elapsed, Overloaded};
use fusebox::retry::RetryBudget;
use fusebox::{
    CircuitBreakerConfig, CircuitBreakerLayer, ConcurrencyLimitConfig, ConcurrencyLimitLayer,
    Policy, RetryBudgetLayer, RetryConfig, Route, RouteTable, StandardClassifier, TimeoutConfig,
    TimeoutLayer,
};
use fusebox_breaker::BreakerHandle;
use fusebox_limit::{AimdConfig, LimitHandle, Release};
use fusebox_timeout::Deadline;
use futures_util::future::join_all;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::Duration;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt, service_fn};

/// What the dependency answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// An HTTP response with this status.
    Http(u16),
    /// A gRPC response (200, `application/grpc`) whose `grpc-status` is in the trailers:
    /// its verdict is taken at the end of the body.
    Grpc(u8),
    /// A transport error.
    Reset,
}

/// What the dependency does with one call.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// Answers after this long.
    latency_ms: u64,
    answer: Answer,
    /// The caller gives up after this long (drops the call's future).
    cancel_after_ms: Option<u64>,
    /// The request carries a deadline this far ahead (0: already passed).
    deadline_ms: Option<u64>,
}

/// Calls sent at once, then a pause.
#[derive(Debug, Clone)]
struct Batch {
    calls: Vec<Call>,
    pause_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    adaptive: bool,
    release_at_end: bool,
    /// A retry budget (outermost), and whether it hedges.
    retry: Option<bool>,
}

fn call() -> impl Strategy<Value = Call> {
    (
        prop_oneof![Just(0u64), Just(10), Just(90), Just(150)],
        prop_oneof![
            4 => Just(Answer::Http(200)),
            3 => Just(Answer::Http(503)),
            1 => Just(Answer::Http(429)),
            1 => Just(Answer::Http(404)),
            1 => Just(Answer::Grpc(0)),
            1 => Just(Answer::Grpc(14)),
            1 => Just(Answer::Reset),
        ],
        prop_oneof![6 => Just(None), 1 => Just(Some(5u64)), 1 => Just(Some(60))],
        prop_oneof![6 => Just(None), 1 => Just(Some(0u64)), 1 => Just(Some(40))],
    )
        .prop_map(|(latency_ms, answer, cancel_after_ms, deadline_ms)| Call {
            latency_ms,
            answer,
            cancel_after_ms,
            deadline_ms,
        })
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        proptest::collection::vec(call(), 1..5),
        prop_oneof![Just(0u64), Just(100), Just(1_500)],
    )
        .prop_map(|(calls, pause_ms)| Batch { calls, pause_ms })
}

fn routes() -> RouteTable<StandardClassifier> {
    RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(80)))
        .route(
            "GET /throttled",
            Route::new(StandardClassifier::new().count_throttling(true)),
        )
        .build()
        .expect("valid routes")
}

fn breaker_config() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("eq")
        .count_window(8)
        .minimum_calls(4)
        .failure_rate_threshold(50)
        .slow_call_rate_threshold(75)
        .open_wait(Duration::from_secs(1))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .probe_successes(2)
        .build()
        .expect("valid breaker config")
}

fn limit_config(shape: Shape) -> ConcurrencyLimitConfig {
    let builder = ConcurrencyLimitConfig::builder().name("eq");
    let builder = if shape.adaptive {
        builder.aimd(AimdConfig::new().initial_limit(2).min_limit(1).max_limit(4))
    } else {
        builder.max_concurrency(2)
    };
    let release = if shape.release_at_end {
        Release::AtEndOfBody
    } else {
        Release::OnResponse
    };
    builder
        .queue(1, Duration::from_millis(30))
        .release(release)
        .build()
        .expect("valid limit config")
}

fn retry_config(hedge: bool) -> RetryConfig {
    RetryConfig::builder()
        .name("eq")
        .max_attempts(3)
        .base_delay(Duration::from_millis(20))
        .hedge_delay(hedge.then_some(Duration::from_millis(70)))
        .seed(Some(7))
        .build()
        .expect("valid retry config")
}

fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .default_timeout(Duration::from_millis(100))
        .build()
        .expect("valid timeout config")
}

/// The dependency's response body: bytes, then trailers for gRPC answers.
type Reply = WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>;

/// The dependency: answers call number `x-call` as the script says.
fn dependency<B: Send + 'static>(
    script: Arc<Vec<Call>>,
) -> impl Service<
    Request<B>,
    Response = Response<Reply>,
    Error = BoxError,
    Future = impl Future<Output = Result<Response<Reply>, BoxError>> + Send,
> + Clone
+ Send {
    service_fn(move |request: Request<B>| {
        let index: usize = request
            .headers()
            .get("x-call")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("every call is numbered");
        let call = script[index];
        async move {
            tokio::time::sleep(Duration::from_millis(call.latency_ms)).await;
            let body = Full::new(Bytes::from_static(b"body"));
            match call.answer {
                Answer::Http(status) => {
                    let mut response = Response::new(body.with_trailers(ready(None)));
                    *response.status_mut() = StatusCode::from_u16(status).expect("valid status");
                    Ok(response)
                }
                Answer::Grpc(code) => {
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from(u16::from(code)));
                    let mut response = Response::new(body.with_trailers(ready(Some(Ok(trailers)))));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/grpc"),
                    );
                    Ok(response)
                }
                Answer::Reset => Err(BoxError::from(std::io::Error::from(
                    std::io::ErrorKind::ConnectionReset,
                ))),
            }
        }
    })
}

fn describe(error: &BoxError) -> &'static str {
    if error.is::<CircuitOpen>() {
        "circuit open"
    } else if error.is::<Overloaded>() {
        "overloaded"
    } else if error.is::<Elapsed>() {
        "elapsed"
    } else if error.is::<DeadlineExceeded>() {
        "deadline exceeded"
    } else {
        "inner error"
    }
}

/// What the stack's shared state says now.
struct Observe<'a> {
    breaker: BreakerHandle,
    limit: LimitHandle,
    budget: Option<&'a RetryBudget>,
}

impl Observe<'_> {
    fn state(&self) -> String {
        let s = self.breaker.snapshot();
        format!(
            "breaker {:?} gen {} window {}/{}/{} | limit {} in flight {} waiting {} | budget {:?}",
            s.state,
            s.generation,
            s.window.calls,
            s.window.failures,
            s.window.slow,
            self.limit.limit(),
            self.limit.in_flight(),
            self.limit.waiting(),
            self.budget.map(RetryBudget::snapshot),
        )
    }
}

/// Sends every batch through `service` and writes down what happened.
async fn run<S, B>(service: S, batches: &[Batch], observe: Observe<'_>) -> Vec<String>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = BoxError> + Clone,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let mut trace = Vec::new();
    let mut number = 0;
    for batch in batches {
        let mut futures = Vec::new();
        for call in &batch.calls {
            let path = if number % 3 == 2 {
                "/throttled"
            } else {
                "/plain"
            };
            let mut request = Request::get(path)
                .header("x-call", number.to_string())
                .body(Full::new(Bytes::new()))
                .expect("valid request");
            if let Some(ms) = call.deadline_ms {
                request
                    .extensions_mut()
                    .insert(Deadline::after(Duration::from_millis(ms)));
            }
            number += 1;
            let mut service = service.clone();
            service.ready().await.expect("always ready");
            let future = service.call(request);
            let cancel = call.cancel_after_ms;
            futures.push(async move {
                let answer = async {
                    match future.await {
                        Ok(response) => {
                            let status = response.status();
                            let body = response.into_body().collect().await;
                            let trailers = body
                                .as_ref()
                                .ok()
                                .and_then(|b| b.trailers())
                                .and_then(|t| t.get("grpc-status"))
                                .map(|v| format!(", grpc-status {v:?}"))
                                .unwrap_or_default();
                            format!("{status} body ok: {}{trailers}", body.is_ok())
                        }
                        Err(error) => describe(&error).to_owned(),
                    }
                };
                match cancel {
                    Some(ms) => tokio::time::timeout(Duration::from_millis(ms), answer)
                        .await
                        .unwrap_or_else(|_| "cancelled".to_owned()),
                    None => answer.await,
                }
            });
        }
        trace.extend(join_all(futures).await);
        trace.push(observe.state());
        tokio::time::sleep(Duration::from_millis(batch.pause_ms)).await;
        trace.push(format!("after pause: {}", observe.state()));
    }
    trace
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn through_policy(shape: Shape, batches: &[Batch], script: Arc<Vec<Call>>) -> Vec<String> {
    paused().block_on(async {
        let mut builder = Policy::builder("eq")
            .routes(routes())
            .circuit_breaker(breaker_config())
            .concurrency_limit_config(limit_config(shape))
            .timeout_config(timeout_config());
        if let Some(hedge) = shape.retry {
            builder = builder.retry_budget(retry_config(hedge));
        }
        let policy = builder.build().expect("valid policy");
        let observe = Observe {
            breaker: policy.breaker_handle().expect("a breaker"),
            limit: policy.limit_handle().expect("a limit"),
            budget: policy.retry_budget(),
        };
        let service = ServiceBuilder::new()
            .layer(policy.clone())
            .service(dependency(script));
        run(service, batches, observe).await
    })
}

fn through_layers(shape: Shape, batches: &[Batch], script: Arc<Vec<Call>>) -> Vec<String> {
    paused().block_on(async {
        let breaker = CircuitBreakerLayer::builder(breaker_config())
            .routes(routes())
            .build()
            .expect("an in-memory breaker always builds");
        let limit = ConcurrencyLimitLayer::builder(limit_config(shape))
            .routes(routes())
            .build()
            .expect("the layer builds");
        let timeout = TimeoutLayer::builder(timeout_config())
            .routes(routes())
            .build()
            .expect("the layer builds");
        let (breaker_handle, limit_handle) = (breaker.handle(), limit.handle());
        let layers = ServiceBuilder::new()
            .layer(breaker)
            .layer(limit)
            .layer(timeout);
        match shape.retry {
            None => {
                let observe = Observe {
                    breaker: breaker_handle,
                    limit: limit_handle,
                    budget: None,
                };
                run(layers.service(dependency(script)), batches, observe).await
            }
            Some(hedge) => {
                let retry = RetryBudgetLayer::builder(retry_config(hedge))
                    .routes(routes())
                    .build()
                    .expect("the layer builds");
                let observe = Observe {
                    breaker: breaker_handle,
                    limit: limit_handle,
                    budget: Some(retry.budget()),
                };
                let service = ServiceBuilder::new()
                    .layer(retry.clone())
                    .service(layers.service(dependency(script)));
                run(service, batches, observe).await
            }
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_fused_stage_behaves_as_the_stacked_layers(
        batches in proptest::collection::vec(batch(), 1..14),
        adaptive in any::<bool>(),
        release_at_end in any::<bool>(),
        retry in proptest::option::of(any::<bool>()),
    ) {
        let shape = Shape { adaptive, release_at_end, retry };
        let script: Arc<Vec<Call>> =
            Arc::new(batches.iter().flat_map(|b| b.calls.iter().copied()).collect());
        let fused = through_policy(shape, &batches, Arc::clone(&script));
        let stacked = through_layers(shape, &batches, script);
        prop_assert_eq!(fused, stacked);
    }
}

/// The property above compares two runs; this pins one script's trace, so that two
/// runs that agree by both doing nothing would not pass.
#[test]
fn a_failing_dependency_opens_the_breaker_in_both() {
    let failing = Call {
        latency_ms: 10,
        answer: Answer::Http(503),
        cancel_after_ms: None,
        deadline_ms: None,
    };
    let batches: Vec<Batch> = (0..3)
        .map(|_| Batch {
            calls: vec![failing; 2],
            pause_ms: 0,
        })
        .collect();
    let script: Arc<Vec<Call>> = Arc::new(vec![failing; 6]);
    let shape = Shape {
        adaptive: false,
        release_at_end: false,
        retry: None,
    };
    let fused = through_policy(shape, &batches, Arc::clone(&script));
    assert_eq!(fused, through_layers(shape, &batches, script));
    assert_eq!(fused[0], "503 Service Unavailable body ok: true");
    assert!(
        fused[3].contains("breaker Closed gen 0 window 2/2/0"),
        "{fused:?}"
    );
    assert!(fused[6].contains("breaker Open"), "{fused:?}");
    assert_eq!(fused[8], "circuit open");
}
