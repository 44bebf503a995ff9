//! A policy runs its circuit breaker, concurrency limit and timeout as one tuple of stages
//! in one future (`fusebox::policy::stages`), not as three stacked services, with its retry
//! budget (if any) around it. This property test holds the Policy to the layers stacked by hand
//! (`RetryBudgetLayer` outermost when there is one): random scripts of answers, errors, latencies,
//! cancellations and pauses (and gRPC answers, whose verdict waits for the trailers), sent to
//! several hosts (in the URI or the `Host` header), go through (a) a `Policy` and (b)
//! `CircuitBreakerLayer` → `ConcurrencyLimitLayer` → `TimeoutLayer` stacked by hand with the
//! same configuration, each on its own paused-time runtime, and every call's outcome, the
//! breaker's state, generation and window (each key's, for a keyed breaker), and the
//! limit's in-flight and waiting counts must be the same after every batch.
//!
//! Every shape is drawn: each of the breaker, the limit and the timeout on or off; the
//! breaker unkeyed or keyed by host or by route, on a count window or a time window,
//! counting the limit's shed calls as failures or not; the limit fixed or adaptive,
//! released with the response head or at the end of the body; the retry budget off, on, or
//! hedging.
//!
//! A policy has no plain (non-HTTP) form: it is a layer of HTTP services only. The plain
//! breaker (`CircuitBreakerLayer::plain`) is instead held to the HTTP breaker: the same
//! scripted outcomes through both must make the same transitions.

use bytes::Bytes;
use fusebox::breaker::{ByHost, ByRoute, InMemory, KeyedBreakerHandle, host_key};
use fusebox::classify::RouteId;
use fusebox::error::{CircuitOpen, DeadlineExceeded, Elapsed, Overloaded};
use fusebox::policy::BreakerKey;
use fusebox::retry::RetryBudget;
use fusebox::{
    CircuitBreakerConfig, CircuitBreakerLayer, ConcurrencyLimitConfig, ConcurrencyLimitLayer,
    KeyBy, KeySpread, Policy, RetryBudgetLayer, RetryConfig, Route, RouteTable, StandardClassifier,
    TimeoutConfig, TimeoutLayer,
};
use fusebox_breaker::BreakerHandle;
use fusebox_limit::{AimdConfig, LimitHandle, Release};
use fusebox_timeout::Deadline;
use futures_util::future::join_all;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::{UnsyncBoxBody, WithTrailers};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::Duration;
use tower::util::BoxCloneService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt, service_fn};

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

/// The hosts calls go to ([`Call::host`]); the last is no host at all. Written as a
/// client might, in any case and with a port: a keyed breaker's key is the host alone, in
/// lower case.
const HOSTS: [&str; 4] = ["a.example", "B.Example", "c.example:8443", ""];

/// The keys of [`HOSTS`] under `KeyBy::Host` / `ByHost`, as observed.
const HOST_KEYS: [&str; 4] = ["a.example", "b.example", "c.example", ""];

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
    /// The call goes to `HOSTS[host]`.
    host: usize,
    /// The host is in the URI's authority, else in the `Host` header.
    host_in_uri: bool,
}

/// Calls sent at once, then a pause.
#[derive(Debug, Clone)]
struct Batch {
    calls: Vec<Call>,
    pause_ms: u64,
}

/// How a keyed breaker keys its breakers.
#[derive(Debug, Clone, Copy)]
enum Key {
    Host,
    Route,
}

/// The breaker of a shape.
#[derive(Debug, Clone, Copy)]
struct BreakerShape {
    /// One breaker per key, else one for every call.
    key: Option<Key>,
    /// A time window, else a count window.
    time_window: bool,
    /// The limit's shed calls count as failures.
    count_overloaded: bool,
    /// For a keyed breaker: a dependency-wide breaker around it, gated by its keys' spread
    /// (`PolicyBuilder::key_spread`; by hand, a second `CircuitBreakerLayer` with the keyed
    /// one's `spread_gate`).
    spread: bool,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    adaptive: bool,
    release_at_end: bool,
    /// A retry budget (outermost), and whether it hedges.
    retry: Option<bool>,
    /// The circuit breaker, if any.
    breaker: Option<BreakerShape>,
    /// A concurrency limit (`adaptive` and `release_at_end` say which).
    limit: bool,
    /// A timeout.
    timeout: bool,
}

impl Shape {
    /// Every stage on: one unkeyed breaker on a count window, shed calls not counted.
    const FULL: Shape = Shape {
        adaptive: false,
        release_at_end: false,
        retry: None,
        breaker: Some(BreakerShape {
            key: None,
            time_window: false,
            count_overloaded: false,
            spread: false,
        }),
        limit: true,
        timeout: true,
    };
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
        prop_oneof![3 => Just(0usize), 3 => Just(1), 2 => Just(2), 1 => Just(3)],
        any::<bool>(),
    )
        .prop_map(
            |(latency_ms, answer, cancel_after_ms, deadline_ms, host, host_in_uri)| Call {
                latency_ms,
                answer,
                cancel_after_ms,
                deadline_ms,
                host,
                host_in_uri,
            },
        )
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        proptest::collection::vec(call(), 1..5),
        prop_oneof![Just(0u64), Just(100), Just(1_500)],
    )
        .prop_map(|(calls, pause_ms)| Batch { calls, pause_ms })
}

fn breaker_shape() -> impl Strategy<Value = BreakerShape> {
    (
        prop_oneof![Just(None), Just(Some(Key::Host)), Just(Some(Key::Route))],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(key, time_window, count_overloaded, spread)| BreakerShape {
                key,
                time_window,
                count_overloaded,
                spread: spread && key.is_some(),
            },
        )
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(any::<bool>()),
        proptest::option::weighted(0.8, breaker_shape()),
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.8),
    )
        .prop_map(
            |(adaptive, release_at_end, retry, breaker, limit, timeout)| Shape {
                adaptive,
                release_at_end,
                retry,
                breaker,
                limit,
                timeout,
            },
        )
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

fn breaker_config(shape: BreakerShape) -> CircuitBreakerConfig {
    let builder = CircuitBreakerConfig::builder().name("eq");
    let builder = if shape.time_window {
        // Four buckets of half a second: a pause of 1.5 s ages out most of the window.
        builder.time_window(Duration::from_secs(2), 4)
    } else {
        builder.count_window(8)
    };
    builder
        .minimum_calls(4)
        .failure_rate_threshold(50)
        .slow_call_rate_threshold(75)
        .open_wait(Duration::from_secs(1))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .probe_successes(2)
        .count_overloaded(shape.count_overloaded)
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

/// One breaker's snapshot, as the trace writes it.
fn breaker_state(handle: &BreakerHandle) -> String {
    let s = handle.snapshot();
    format!(
        "{:?} gen {} window {}/{}/{}",
        s.state, s.generation, s.window.calls, s.window.failures, s.window.slow,
    )
}

/// The stack's breaker, as observed.
enum Breakers {
    Off,
    One(BreakerHandle),
    /// A keyed breaker: how many keys it holds, and each observed key's breaker (or that
    /// it holds no breaker for the key).
    Keyed(Box<dyn Fn() -> String>),
}

impl Breakers {
    /// A keyed breaker's handle, observed at `keys` (each with the label the trace gives it),
    /// and the dependency-wide breaker gated by its spread, if there is one.
    fn keyed<K: 'static>(
        handle: KeyedBreakerHandle<K>,
        keys: Vec<(&'static str, K)>,
        dependency: Option<BreakerHandle>,
    ) -> Self {
        Breakers::Keyed(Box::new(move || {
            let mut out = format!(
                "breaker {} keys, {} overflow",
                handle.len(),
                handle.overflow().len()
            );
            if let Some(d) = &dependency {
                write!(out, " [dependency] {}", breaker_state(d)).expect("writing to a string");
            }
            for (label, key) in &keys {
                let state = handle
                    .get(key)
                    .map_or_else(|| "absent".to_owned(), |h| breaker_state(&h));
                write!(out, " [{label}] {state}").expect("writing to a string");
            }
            out
        }))
    }
}

/// The route ids of [`routes`], labelled: the keys of a breaker keyed by route.
fn route_keys() -> Vec<(&'static str, RouteId)> {
    routes()
        .iter()
        .map(|(id, name, _)| {
            let label = if name.contains("throttled") {
                "throttled"
            } else {
                "default"
            };
            (label, id)
        })
        .collect()
}

/// What the stack's shared state says now.
struct Observe<'a> {
    breaker: Breakers,
    limit: Option<LimitHandle>,
    budget: Option<&'a RetryBudget>,
}

impl Observe<'_> {
    fn state(&self) -> String {
        let breaker = match &self.breaker {
            Breakers::Off => "breaker off".to_owned(),
            Breakers::One(handle) => format!("breaker {}", breaker_state(handle)),
            Breakers::Keyed(keys) => keys(),
        };
        let limit = match &self.limit {
            None => "limit off".to_owned(),
            Some(l) => format!(
                "limit {} in flight {} waiting {}",
                l.limit(),
                l.in_flight(),
                l.waiting()
            ),
        };
        format!(
            "{breaker} | {limit} | budget {:?}",
            self.budget.map(RetryBudget::snapshot),
        )
    }
}

/// Call `number`'s request for `call`: its path (every third call on `/throttled`), its
/// host (in the URI or the `Host` header), its deadline.
fn request(number: usize, call: &Call) -> Request<Full<Bytes>> {
    let path = if number % 3 == 2 {
        "/throttled"
    } else {
        "/plain"
    };
    let host = HOSTS[call.host];
    let mut builder = if host.is_empty() {
        Request::get(path)
    } else if call.host_in_uri {
        Request::get(format!("http://{host}{path}"))
    } else {
        Request::get(path).header(http::header::HOST, host)
    };
    builder = builder.header("x-call", number.to_string());
    let mut request = builder
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    if let Some(ms) = call.deadline_ms {
        request
            .extensions_mut()
            .insert(Deadline::after(Duration::from_millis(ms)));
    }
    request
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
            let request = request(number, call);
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
        let mut builder = Policy::builder("eq").routes(routes());
        if let Some(breaker) = shape.breaker {
            builder = builder.circuit_breaker(breaker_config(breaker));
            match breaker.key {
                None => {}
                Some(Key::Host) => builder = builder.breaker_key(KeyBy::Host),
                Some(Key::Route) => builder = builder.breaker_key(KeyBy::Route),
            }
            if breaker.spread {
                builder = builder.key_spread(KeySpread::default());
            }
        }
        if shape.limit {
            builder = builder.concurrency_limit_config(limit_config(shape));
        }
        if shape.timeout {
            builder = builder.timeout_config(timeout_config());
        }
        if let Some(hedge) = shape.retry {
            builder = builder.retry_budget(retry_config(hedge));
        }
        let policy = builder.build().expect("valid policy");
        let breaker = match shape.breaker.map(|b| b.key) {
            None => Breakers::Off,
            Some(None) => Breakers::One(policy.breaker_handle().expect("a breaker")),
            Some(Some(Key::Host)) => Breakers::keyed(
                policy.keyed_breaker_handle().expect("a keyed breaker"),
                HOST_KEYS.map(|k| (k, BreakerKey::host(k))).to_vec(),
                policy.breaker_handle(),
            ),
            Some(Some(Key::Route)) => Breakers::keyed(
                policy.keyed_breaker_handle().expect("a keyed breaker"),
                route_keys()
                    .into_iter()
                    .map(|(label, id)| (label, BreakerKey::Route(id)))
                    .collect(),
                policy.breaker_handle(),
            ),
        };
        assert_eq!(policy.limit_handle().is_some(), shape.limit);
        assert_eq!(policy.has_timeout(), shape.timeout);
        let observe = Observe {
            breaker,
            limit: policy.limit_handle(),
            budget: policy.retry_budget(),
        };
        let service = ServiceBuilder::new()
            .layer(policy.clone())
            .service(dependency(script));
        run(service, batches, observe).await
    })
}

/// A response body of any layer, boxed, so that a stage left out does not change the type.
type AnyBody = UnsyncBoxBody<Bytes, BoxError>;

/// One stage of the stack by hand, boxed.
type Stage<R> = BoxCloneService<Request<R>, Response<AnyBody>, BoxError>;

fn boxed<R, S, B>(service: S) -> Stage<R>
where
    S: Service<Request<R>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxCloneService::new(
        service
            .map_response(|r: Response<B>| r.map(|b| b.map_err(Into::into).boxed_unsync()))
            .map_err(Into::into),
    )
}

/// The breaker layer stacked by hand.
enum BreakerLayer {
    Off,
    One(fusebox::CircuitBreakerLayer),
    ByHost(fusebox::breaker::KeyedCircuitBreakerLayer<ByHost, StandardClassifier, InMemory>),
    ByRoute(fusebox::breaker::KeyedCircuitBreakerLayer<ByRoute, StandardClassifier, InMemory>),
}

/// The breaker, limit and timeout layers of a shape, stacked by hand.
struct Layers {
    breaker: BreakerLayer,
    /// The dependency-wide breaker around a keyed one, gated by its spread.
    dependency: Option<fusebox::CircuitBreakerLayer>,
    limit: Option<ConcurrencyLimitLayer>,
    timeout: Option<TimeoutLayer>,
}

impl Layers {
    fn new(shape: Shape) -> Self {
        let mut dependency = None;
        let breaker = match shape.breaker {
            None => BreakerLayer::Off,
            Some(b) => {
                let builder = CircuitBreakerLayer::builder(breaker_config(b)).routes(routes());
                match b.key {
                    None => BreakerLayer::One(
                        builder.build().expect("an in-memory breaker always builds"),
                    ),
                    Some(Key::Host) => {
                        let keyed = builder.build_keyed(ByHost).expect("a keyed breaker builds");
                        dependency = b.spread.then(|| gated(b, keyed.handle()));
                        BreakerLayer::ByHost(keyed)
                    }
                    Some(Key::Route) => {
                        let keyed = builder
                            .build_keyed(ByRoute)
                            .expect("a keyed breaker builds");
                        dependency = b.spread.then(|| gated(b, keyed.handle()));
                        BreakerLayer::ByRoute(keyed)
                    }
                }
            }
        };
        let limit = shape.limit.then(|| {
            ConcurrencyLimitLayer::builder(limit_config(shape))
                .routes(routes())
                .build()
                .expect("the layer builds")
        });
        let timeout = shape.timeout.then(|| {
            TimeoutLayer::builder(timeout_config())
                .routes(routes())
                .build()
                .expect("the layer builds")
        });
        Layers {
            breaker,
            dependency,
            limit,
            timeout,
        }
    }

    fn observe<'a>(&self, budget: Option<&'a RetryBudget>) -> Observe<'a> {
        let breaker = match &self.breaker {
            BreakerLayer::Off => Breakers::Off,
            BreakerLayer::One(b) => Breakers::One(b.handle()),
            BreakerLayer::ByHost(b) => Breakers::keyed(
                b.handle(),
                HOST_KEYS.map(|k| (k, host_key(k))).to_vec(),
                self.dependency.as_ref().map(|d| d.handle()),
            ),
            BreakerLayer::ByRoute(b) => Breakers::keyed(
                b.handle(),
                route_keys(),
                self.dependency.as_ref().map(|d| d.handle()),
            ),
        };
        Observe {
            breaker,
            limit: self.limit.as_ref().map(ConcurrencyLimitLayer::handle),
            budget,
        }
    }

    /// `CircuitBreakerLayer` → `ConcurrencyLimitLayer` → `TimeoutLayer` → the dependency,
    /// leaving out the layers the shape has not.
    fn stack<R: Send + 'static>(&self, script: Arc<Vec<Call>>) -> Stage<R> {
        let mut service = boxed(dependency::<R>(script));
        if let Some(timeout) = &self.timeout {
            service = boxed(timeout.layer(service));
        }
        if let Some(limit) = &self.limit {
            service = boxed(limit.layer(service));
        }
        let service = match &self.breaker {
            BreakerLayer::Off => service,
            BreakerLayer::One(b) => boxed(b.layer(service)),
            BreakerLayer::ByHost(b) => boxed(b.layer(service)),
            BreakerLayer::ByRoute(b) => boxed(b.layer(service)),
        };
        match &self.dependency {
            Some(d) => boxed(d.layer(service)),
            None => service,
        }
    }
}

/// The dependency-wide breaker stacked around a keyed one, gated by its spread.
fn gated<K>(shape: BreakerShape, keys: KeyedBreakerHandle<K>) -> fusebox::CircuitBreakerLayer {
    CircuitBreakerLayer::builder(breaker_config(shape))
        .routes(routes())
        .key_spread(keys.spread_gate(KeySpread::default()))
        .build()
        .expect("an in-memory breaker always builds")
}

fn through_layers(shape: Shape, batches: &[Batch], script: Arc<Vec<Call>>) -> Vec<String> {
    paused().block_on(async {
        let layers = Layers::new(shape);
        match shape.retry {
            None => {
                let observe = layers.observe(None);
                run(layers.stack(script), batches, observe).await
            }
            Some(hedge) => {
                let retry = RetryBudgetLayer::builder(retry_config(hedge))
                    .routes(routes())
                    .build()
                    .expect("the layer builds");
                let observe = layers.observe(Some(retry.budget()));
                let service = ServiceBuilder::new()
                    .layer(retry.clone())
                    .service(layers.stack(script));
                run(service, batches, observe).await
            }
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn the_fused_stage_behaves_as_the_stacked_layers(
        batches in proptest::collection::vec(batch(), 1..14),
        shape in shape(),
    ) {
        let script: Arc<Vec<Call>> =
            Arc::new(batches.iter().flat_map(|b| b.calls.iter().copied()).collect());
        let fused = through_policy(shape, &batches, Arc::clone(&script));
        let stacked = through_layers(shape, &batches, script);
        prop_assert_eq!(fused, stacked);
    }
}

/// The cases of each property.
const CASES: u32 = 2048;

/// Keyed by host, a failing host opens its own breaker in both, and another host's calls
/// still go through: the keys differ (one host in the URI, the other in the `Host` header,
/// in another case, with a port).
#[test]
fn a_failing_host_opens_only_its_own_breaker_in_both() {
    let to = |host, host_in_uri, status| Call {
        latency_ms: 10,
        answer: Answer::Http(status),
        cancel_after_ms: None,
        deadline_ms: None,
        host,
        host_in_uri,
    };
    // Six rounds of one call to a.example (failing, in the URI) and one to c.example
    // (healthy, in the Host header with a port).
    let round = [to(0, true, 503), to(2, false, 200)];
    let batches: Vec<Batch> = (0..6)
        .map(|_| Batch {
            calls: round.to_vec(),
            pause_ms: 0,
        })
        .collect();
    let script: Arc<Vec<Call>> = Arc::new(
        batches
            .iter()
            .flat_map(|b| b.calls.iter().copied())
            .collect(),
    );
    let shape = Shape {
        breaker: Some(BreakerShape {
            key: Some(Key::Host),
            time_window: false,
            count_overloaded: false,
            spread: false,
        }),
        ..Shape::FULL
    };
    let fused = through_policy(shape, &batches, Arc::clone(&script));
    assert_eq!(fused, through_layers(shape, &batches, script));
    let last = &fused[fused.len() - 1];
    assert!(
        last.contains("breaker 2 keys, 0 overflow [a.example] Open gen 1")
            && last.contains("[c.example] Closed gen 0")
            && last.contains("[b.example] absent"),
        "{fused:#?}"
    );
    // The last round: a.example is rejected, c.example answers.
    assert_eq!(fused[fused.len() - 4], "circuit open");
    assert_eq!(fused[fused.len() - 3], "200 OK body ok: true");
}

/// Keyed by host with a spread, one failing host of four opens its own breaker in both and
/// leaves the gated dependency-wide breaker closed, its window holding no failure.
#[test]
fn one_failing_host_of_four_leaves_the_gated_dependency_closed_in_both() {
    let to = |host, status| Call {
        latency_ms: 10,
        answer: Answer::Http(status),
        cancel_after_ms: None,
        deadline_ms: None,
        host,
        host_in_uri: true,
    };
    let round = [to(0, 503), to(1, 200), to(2, 200), to(3, 200)];
    let batches: Vec<Batch> = (0..6)
        .map(|_| Batch {
            calls: round.to_vec(),
            pause_ms: 0,
        })
        .collect();
    let script: Arc<Vec<Call>> = Arc::new(
        batches
            .iter()
            .flat_map(|b| b.calls.iter().copied())
            .collect(),
    );
    let shape = Shape {
        breaker: Some(BreakerShape {
            key: Some(Key::Host),
            time_window: false,
            count_overloaded: false,
            spread: true,
        }),
        ..Shape::FULL
    };
    let fused = through_policy(shape, &batches, Arc::clone(&script));
    assert_eq!(fused, through_layers(shape, &batches, script));
    let last = &fused[fused.len() - 1];
    assert!(
        last.contains("breaker 4 keys, 0 overflow [dependency] Closed gen 0 window 8/0/0")
            && last.contains("[a.example] Open gen 1")
            && last.contains("[b.example] Closed gen 0"),
        "{fused:#?}"
    );
}

/// What a dependency behind the plain breaker (and its HTTP twin) does with one call.
#[derive(Debug, Clone, Copy)]
enum PlainAnswer {
    /// A success: `Ok` for the plain service, a 200 for HTTP.
    Ok,
    /// An answer the caller counts as a failure: a 503 for HTTP; the plain service's
    /// caller maps it to an error of its own (as `ServiceBuilder::map_result` would).
    Failed,
    /// A transport error, for both.
    Reset,
    /// An inner limit's `Overloaded`, for both (a failure only with `count_overloaded`).
    Overloaded,
    /// An inner timeout's `Elapsed`, for both.
    Elapsed,
}

#[derive(Debug, Clone, Copy)]
struct PlainCall {
    latency_ms: u64,
    answer: PlainAnswer,
    /// The caller gives up after this long (drops the call's future).
    cancel_after_ms: Option<u64>,
}

fn plain_call() -> impl Strategy<Value = PlainCall> {
    (
        prop_oneof![Just(0u64), Just(10), Just(90), Just(150)],
        prop_oneof![
            4 => Just(PlainAnswer::Ok),
            3 => Just(PlainAnswer::Failed),
            1 => Just(PlainAnswer::Reset),
            1 => Just(PlainAnswer::Overloaded),
            1 => Just(PlainAnswer::Elapsed),
        ],
        prop_oneof![6 => Just(None), 1 => Just(Some(5u64)), 1 => Just(Some(60))],
    )
        .prop_map(|(latency_ms, answer, cancel_after_ms)| PlainCall {
            latency_ms,
            answer,
            cancel_after_ms,
        })
}

/// The error a plain call's caller makes of an answer it counts as a failure.
#[derive(Debug)]
struct FailedAnswer;

impl std::fmt::Display for FailedAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the dependency answered with a failure")
    }
}

impl std::error::Error for FailedAnswer {}

/// A scripted plain call's error, if it ends in one (`Failed` is the plain caller's
/// error, `None` for HTTP, where it is a 503).
fn plain_error(answer: PlainAnswer, plain: bool) -> Option<BoxError> {
    match answer {
        PlainAnswer::Ok => None,
        PlainAnswer::Failed => plain.then(|| BoxError::from(FailedAnswer)),
        PlainAnswer::Reset => Some(BoxError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        ))),
        PlainAnswer::Overloaded => Some(BoxError::from(Overloaded::new(2, Duration::ZERO))),
        PlainAnswer::Elapsed => Some(BoxError::from(Elapsed::new(
            Arc::from("default"),
            Duration::from_millis(100),
        ))),
    }
}

/// Sends the batches of plain calls, each call through `call`, and writes down each call's
/// outcome and the breaker's state (and its events since the last look) after every batch
/// and pause.
async fn run_plain<F, Fut>(
    batches: &[Vec<PlainCall>],
    pauses: &[u64],
    handle: &BreakerHandle,
    events: &std::sync::Mutex<Vec<String>>,
    call: F,
) -> Vec<String>
where
    F: Fn(PlainCall) -> Fut,
    Fut: Future<Output = String>,
{
    let state = || {
        let s = handle.snapshot();
        let events = std::mem::take(&mut *events.lock().expect("not poisoned")).join(", ");
        format!(
            "{} probes {}/{} until half-open {:?} | events {events}",
            breaker_state(handle),
            s.probes_admitted,
            s.probes_succeeded,
            s.until_half_open,
        )
    };
    let mut trace = Vec::new();
    for (batch, pause) in batches.iter().zip(pauses) {
        let futures = batch.iter().map(|c| {
            let answer = call(*c);
            async move {
                match c.cancel_after_ms {
                    Some(ms) => tokio::time::timeout(Duration::from_millis(ms), answer)
                        .await
                        .unwrap_or_else(|_| "cancelled".to_owned()),
                    None => answer.await,
                }
            }
        });
        trace.extend(join_all(futures.collect::<Vec<_>>()).await);
        trace.push(state());
        tokio::time::sleep(Duration::from_millis(*pause)).await;
        trace.push(format!("after pause: {}", state()));
    }
    trace
}

/// A breaker layer for [`breaker_config`], recording its events in the returned list.
fn recorded(shape: BreakerShape) -> (CircuitBreakerLayer, Arc<std::sync::Mutex<Vec<String>>>) {
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&events);
    let layer = CircuitBreakerLayer::builder(breaker_config(shape))
        .routes(routes())
        .on_event(move |e| {
            record
                .lock()
                .expect("not poisoned")
                .push(format!("{:?}", e.kind));
        })
        .build()
        .expect("an in-memory breaker always builds");
    (layer, events)
}

/// The plain breaker around a service of `PlainCall`s.
fn through_plain(shape: BreakerShape, batches: &[Vec<PlainCall>], pauses: &[u64]) -> Vec<String> {
    paused().block_on(async {
        let (layer, events) = recorded(shape);
        let layer = layer.plain();
        let handle = layer.handle();
        let service = layer.layer(service_fn(|c: PlainCall| async move {
            tokio::time::sleep(Duration::from_millis(c.latency_ms)).await;
            match plain_error(c.answer, true) {
                None => Ok(()),
                Some(e) => Err(e),
            }
        }));
        run_plain(batches, pauses, &handle, &events, |c| {
            let mut service = service.clone();
            async move {
                let result = service.ready().await.expect("always ready").call(c).await;
                match result {
                    Ok(()) => "ok".to_owned(),
                    Err(e) if e.is::<FailedAnswer>() => "failed".to_owned(),
                    Err(e) => describe(&e).to_owned(),
                }
            }
        })
        .await
    })
}

/// The HTTP breaker around an HTTP service answering the same `PlainCall`s, all on the
/// default route.
fn through_http(shape: BreakerShape, batches: &[Vec<PlainCall>], pauses: &[u64]) -> Vec<String> {
    paused().block_on(async {
        let (layer, events) = recorded(shape);
        let handle = layer.handle();
        let service = layer.layer(service_fn(|request: Request<Full<Bytes>>| async move {
            let c = *request
                .extensions()
                .get::<PlainCall>()
                .expect("the script's call");
            tokio::time::sleep(Duration::from_millis(c.latency_ms)).await;
            match (c.answer, plain_error(c.answer, false)) {
                (_, Some(e)) => Err(e),
                (PlainAnswer::Failed, None) => {
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    Ok(response)
                }
                (_, None) => Ok(Response::new(Full::new(Bytes::new()))),
            }
        }));
        run_plain(batches, pauses, &handle, &events, |c| {
            let mut service = service.clone();
            async move {
                let mut request = Request::get("/plain")
                    .body(Full::new(Bytes::new()))
                    .expect("valid request");
                request.extensions_mut().insert(c);
                let result = service
                    .ready()
                    .await
                    .expect("always ready")
                    .call(request)
                    .await;
                match result {
                    Ok(r) if r.status() == StatusCode::OK => "ok".to_owned(),
                    Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => "failed".to_owned(),
                    Ok(r) => format!("unexpected {}", r.status()),
                    Err(e) => describe(&e).to_owned(),
                }
            }
        })
        .await
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A policy has no plain form; the plain breaker is held to the HTTP breaker instead.
    #[test]
    fn the_plain_breaker_behaves_as_the_http_breaker(
        batches in proptest::collection::vec(
            (proptest::collection::vec(plain_call(), 1..5), prop_oneof![Just(0u64), Just(100), Just(1_500)]),
            1..14,
        ),
        time_window in any::<bool>(),
        count_overloaded in any::<bool>(),
    ) {
        let shape = BreakerShape { key: None, time_window, count_overloaded, spread: false };
        let (calls, pauses): (Vec<_>, Vec<_>) = batches.into_iter().unzip();
        let plain = through_plain(shape, &calls, &pauses);
        let http = through_http(shape, &calls, &pauses);
        prop_assert_eq!(plain, http);
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
        host: 0,
        host_in_uri: false,
    };
    let batches: Vec<Batch> = (0..3)
        .map(|_| Batch {
            calls: vec![failing; 2],
            pause_ms: 0,
        })
        .collect();
    let script: Arc<Vec<Call>> = Arc::new(vec![failing; 6]);
    let shape = Shape::FULL;
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

/// The plain property compares two runs; this pins one script's trace: failures open both
/// breakers, a call while open is rejected, and after the open wait two successful probes
/// close them, with the same transitions.
#[test]
fn failures_open_the_plain_and_the_http_breaker_alike() {
    let call = |answer| PlainCall {
        latency_ms: 10,
        answer,
        cancel_after_ms: None,
    };
    let calls = vec![
        vec![call(PlainAnswer::Failed); 4],
        vec![call(PlainAnswer::Ok)],
        vec![call(PlainAnswer::Ok); 2],
    ];
    let pauses = [0, 1_500, 0];
    let shape = BreakerShape {
        key: None,
        time_window: false,
        count_overloaded: false,
        spread: false,
    };
    let plain = through_plain(shape, &calls, &pauses);
    assert_eq!(plain, through_http(shape, &calls, &pauses));
    assert_eq!(plain[0], "failed");
    assert!(
        plain[4].starts_with("Open gen 1 window 4/4/0")
            && plain[4].contains("from: Closed, to: Open, reason: FailureRate"),
        "{plain:#?}"
    );
    assert_eq!(plain[6], "circuit open");
    assert_eq!(plain[9..11], ["ok", "ok"]);
    assert!(
        plain[11].starts_with("Closed gen 3")
            && plain[11].contains("from: Open, to: HalfOpen")
            && plain[11].contains("from: HalfOpen, to: Closed, reason: ProbesSucceeded"),
        "{plain:#?}"
    );
}
