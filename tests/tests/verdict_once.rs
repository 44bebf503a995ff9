//! Each attempt's answer is classified once, however many stages judge it: a Policy with a
//! circuit breaker, an adaptive concurrency limit, a retry budget and a timeout asks its
//! route's classifier once per attempt — for a response head, for an error, and for the
//! trailers at the end of a gRPC stream — with the call's span recording and without.
//! And with `expose_verdict(true)` (on the Policy, the breaker layer or the limit layer)
//! the answer's verdict is in the response's extensions; without it, nothing is.

use bytes::Bytes;
use fusebox::breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox::classify::{
    AnswerVerdict, Call, Classified, Classifier, Outcome, Route, RouteTable, StandardClassifier,
    Verdict,
};
use fusebox::limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer, VegasConfig};
use fusebox::{Policy, RetryConfig};
use fusebox_retry::ReplayBody;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use std::convert::Infallible;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

/// How often each of the classifier's methods was asked.
#[derive(Debug, Default)]
struct Asked {
    response: AtomicUsize,
    eos: AtomicUsize,
    error: AtomicUsize,
}

impl Asked {
    /// Responses, ends of stream, errors.
    fn counts(&self) -> (usize, usize, usize) {
        (
            self.response.load(Ordering::Relaxed),
            self.eos.load(Ordering::Relaxed),
            self.error.load(Ordering::Relaxed),
        )
    }
}

/// The standard classifier, counting what it is asked.
#[derive(Debug, Clone, Default)]
struct Counting {
    standard: StandardClassifier,
    asked: Arc<Asked>,
}

impl Classifier for Counting {
    fn classify_response(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        self.asked.response.fetch_add(1, Ordering::Relaxed);
        self.standard.classify_response(call, status, headers)
    }

    fn classify_eos(&self, call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
        self.asked.eos.fetch_add(1, Ordering::Relaxed);
        self.standard.classify_eos(call, trailers)
    }

    fn classify_error(&self, call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
        self.asked.error.fetch_add(1, Ordering::Relaxed);
        self.standard.classify_error(call, error)
    }
}

/// Every layer, the limit adaptive (it classifies what it measures), on one route table
/// classified by `classifier`.
fn policy(classifier: &Counting) -> fusebox::PolicyBuilder<Counting> {
    Policy::builder("once")
        .routes(RouteTable::single(Route::new(classifier.clone())))
        .circuit_breaker(CircuitBreakerConfig::builder().name("once"))
        .concurrency_limit_config(ConcurrencyLimitConfig::builder().vegas(VegasConfig::new()))
        .timeout(Duration::from_secs(1))
        .retry_budget(
            RetryConfig::builder()
                .name("once")
                .seed(Some(7))
                .max_attempts(3)
                .base_delay(Duration::from_millis(10)),
        )
}

type In = Request<ReplayBody<Empty<Bytes>>>;

fn get() -> Request<Empty<Bytes>> {
    Request::get("http://127.0.0.1/once")
        .body(Empty::new())
        .expect("a valid request")
}

/// An inner service answering each call with the next of `statuses` (the last one again
/// once they run out).
fn answering(
    statuses: &'static [u16],
) -> impl Service<In, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    let calls = Arc::new(AtomicUsize::new(0));
    tower::service_fn(move |_: In| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        let status = statuses[n.min(statuses.len() - 1)];
        let response = Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(b"answer")))
            .expect("a valid response");
        std::future::ready(Ok::<_, Infallible>(response))
    })
}

/// Runs the four kinds of call through a policy classified by a counting classifier, and
/// checks what the classifier was asked after each.
async fn one_classification_per_attempt() {
    // A 200: one attempt, its head classified once.
    let classifier = Counting::default();
    let svc = policy(&classifier)
        .build()
        .expect("a valid layer")
        .layer(answering(&[200]));
    let response = svc.oneshot(get()).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    response
        .into_body()
        .collect()
        .await
        .expect("the whole body");
    assert_eq!(classifier.asked.counts(), (1, 0, 0), "a 200");

    // A 503 retried once: two attempts, two heads, each classified once.
    let classifier = Counting::default();
    let svc = policy(&classifier)
        .build()
        .expect("a valid layer")
        .layer(answering(&[503, 200]));
    let response = svc.oneshot(get()).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK, "the retry's answer");
    response
        .into_body()
        .collect()
        .await
        .expect("the whole body");
    assert_eq!(classifier.asked.counts(), (2, 0, 0), "a 503 retried once");

    // An error that is not retried: classified once.
    let classifier = Counting::default();
    let failing = tower::service_fn(|_: In| async {
        Err::<Response<Full<Bytes>>, _>(std::io::Error::other("the dependency broke"))
    });
    let svc = policy(&classifier)
        .build()
        .expect("a valid layer")
        .layer(failing);
    let error = svc.oneshot(get()).await.expect_err("the error");
    assert_eq!(error.to_string(), "the dependency broke");
    assert_eq!(classifier.asked.counts(), (0, 0, 1), "an error");

    // gRPC: the head defers to the trailers, which are classified once, at the end of
    // the stream, for the limit and the breaker both.
    let classifier = Counting::default();
    let grpc = tower::service_fn(|_: In| async {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        let frames = vec![
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
            Ok(Frame::trailers(trailers)),
        ];
        let response = Response::builder()
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .body(StreamBody::new(futures_util::stream::iter(frames)))
            .expect("a valid response");
        Ok::<_, Infallible>(response)
    });
    let svc = policy(&classifier)
        .build()
        .expect("a valid layer")
        .layer(grpc);
    let response = svc.oneshot(get()).await.expect("an answer");
    assert_eq!(classifier.asked.counts(), (1, 0, 0), "the gRPC head");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole body");
    assert_eq!(body.trailers().expect("the trailers")["grpc-status"], "14");
    assert_eq!(classifier.asked.counts(), (1, 1, 0), "the trailers, once");
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_classified_once() {
    one_classification_per_attempt().await;
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_classified_once_with_the_call_span_recording() {
    // The call's span (`policy_call`) records the outcome: it reads the stages' verdict.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    assert!(
        tracing::enabled!(target: "fusebox::policy", tracing::Level::DEBUG),
        "the span records"
    );
    one_classification_per_attempt().await;
}

fn exposed<B>(response: &Response<B>) -> Option<&AnswerVerdict> {
    response.extensions().get::<AnswerVerdict>()
}

#[tokio::test(start_paused = true)]
async fn an_exposed_verdict_is_in_the_extensions_and_only_when_asked_for() {
    let classifier = Counting::default();
    let exposing = policy(&classifier)
        .expose_verdict(true)
        .build()
        .expect("a valid layer");

    // The 503 is not retried (retries are off on the route), so it is the answer.
    let no_retry = |c: &Counting| RouteTable::single(Route::new(c.clone()).retry(false));
    let one_attempt = Policy::builder("exposed")
        .routes(no_retry(&classifier))
        .circuit_breaker(CircuitBreakerConfig::builder().name("exposed"))
        .retry_budget(RetryConfig::builder().name("exposed"))
        .expose_verdict(true)
        .build()
        .expect("a valid layer");
    let response = one_attempt
        .layer(answering(&[503]))
        .oneshot(get())
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let verdict = exposed(&response).expect("exposed").clone();
    assert_eq!(
        verdict.verdict().map(|v| v.outcome()),
        Some(Outcome::Failure)
    );
    assert_eq!(verdict.route_name(), "default");
    assert_eq!(
        classifier.asked.counts(),
        (1, 0, 0),
        "read, not classified again"
    );

    let response = exposing
        .layer(answering(&[200]))
        .oneshot(get())
        .await
        .expect("an answer");
    let verdict = exposed(&response).expect("exposed");
    assert_eq!(verdict.verdict(), Some(Verdict::SUCCESS));

    // The retried call's answer is the last attempt's: a success after a 503.
    let response = exposing
        .layer(answering(&[503, 200]))
        .oneshot(get())
        .await
        .expect("an answer");
    assert_eq!(
        exposed(&response).expect("exposed").verdict(),
        Some(Verdict::SUCCESS)
    );

    // Off (the default): nothing in the extensions.
    let quiet = policy(&classifier).build().expect("a valid layer");
    let response = quiet
        .layer(answering(&[503]))
        .oneshot(get())
        .await
        .expect("an answer");
    assert!(exposed(&response).is_none());
    let response = quiet
        .layer(answering(&[200]))
        .oneshot(get())
        .await
        .expect("an answer");
    assert!(exposed(&response).is_none());
}

/// An inner service answering a request for `/fail` with a 503, any other with a 200.
fn fail_or_ok()
-> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|request: Request<()>| async move {
        let status = if request.uri().path() == "/fail" {
            503
        } else {
            200
        };
        let response = Response::builder()
            .status(status)
            .body(Full::new(Bytes::new()))
            .expect("a valid response");
        Ok::<_, Infallible>(response)
    })
}

#[tokio::test(start_paused = true)]
async fn a_breaker_layer_exposes_its_verdict_when_asked() {
    let inner = fail_or_ok;
    let call = |path: &str| Request::get(path).body(()).expect("a valid request");
    let exposing = CircuitBreakerLayer::builder(
        CircuitBreakerConfig::builder()
            .name("b")
            .build()
            .expect("a valid layer"),
    )
    .expose_verdict(true)
    .build()
    .expect("a valid layer");
    let response = exposing
        .layer(inner())
        .oneshot(call("/fail"))
        .await
        .expect("an answer");
    assert!(
        exposed(&response)
            .expect("exposed")
            .verdict()
            .expect("known from the head")
            .is_failure()
    );
    let response = exposing
        .layer(inner())
        .oneshot(call("/ok"))
        .await
        .expect("an answer");
    assert_eq!(
        exposed(&response).expect("exposed").verdict(),
        Some(Verdict::SUCCESS)
    );

    let quiet = CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("b")
            .build()
            .expect("a valid layer"),
    );
    let response = quiet
        .layer(inner())
        .oneshot(call("/fail"))
        .await
        .expect("an answer");
    assert!(exposed(&response).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_limit_layer_exposes_its_verdict_when_asked_fixed_or_adaptive() {
    let inner = fail_or_ok;
    let call = |path: &str| Request::get(path).body(()).expect("a valid request");
    let classifier = Counting::default();
    let routes = RouteTable::single(Route::new(classifier.clone()));
    let fixed = ConcurrencyLimitConfig::builder()
        .name("fixed")
        .max_concurrency(4)
        .build()
        .expect("a valid limit");
    let adaptive = ConcurrencyLimitConfig::builder()
        .name("adaptive")
        .vegas(VegasConfig::new())
        .build()
        .expect("a valid limit");
    for (config, asked_before) in [(fixed, 0), (adaptive, 2)] {
        let name = config.name().to_owned();
        // Without exposure, a fixed limit never asks the classifier; an adaptive one asks it
        // about each of the two answers.
        let quiet = ConcurrencyLimitLayer::builder(config.clone())
            .routes(routes.clone())
            .build()
            .expect("a valid layer");
        let before = classifier.asked.counts().0;
        for path in ["/fail", "/ok"] {
            let response = quiet
                .layer(inner())
                .oneshot(call(path))
                .await
                .expect("an answer");
            assert!(exposed(&response).is_none(), "{name}: off by default");
        }
        assert_eq!(
            classifier.asked.counts().0 - before,
            asked_before,
            "{name}: what the limit classifies on its own"
        );

        let exposing = ConcurrencyLimitLayer::builder(config)
            .routes(routes.clone())
            .expose_verdict(true)
            .build()
            .expect("a valid layer");
        let before = classifier.asked.counts().0;
        let response = exposing
            .layer(inner())
            .oneshot(call("/fail"))
            .await
            .expect("an answer");
        assert!(
            exposed(&response)
                .expect("exposed")
                .verdict()
                .expect("known from the head")
                .is_failure(),
            "{name}"
        );
        let response = exposing
            .layer(inner())
            .oneshot(call("/ok"))
            .await
            .expect("an answer");
        let verdict = exposed(&response).expect("exposed");
        assert_eq!(verdict.verdict(), Some(Verdict::SUCCESS), "{name}");
        assert_eq!(verdict.route_name(), "default", "{name}");
        assert_eq!(
            classifier.asked.counts().0 - before,
            2,
            "{name}: each answer classified once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_no_stage_judged_is_classified_once_by_the_retry_for_the_span_and_the_extensions()
{
    // A policy whose stages judge nothing (only a retry budget; or a fixed limit and a
    // timeout, which classify nothing): the retry classifies each attempt's answer itself
    // and offers its verdict, which the call's span and the exposed verdict read.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    assert!(tracing::enabled!(target: "fusebox::policy", tracing::Level::DEBUG));
    let retry_only = |c: &Counting| {
        Policy::builder("shared")
            .routes(RouteTable::single(Route::new(c.clone())))
            .retry_budget(
                RetryConfig::builder()
                    .name("shared")
                    .seed(Some(7))
                    .max_attempts(3)
                    .base_delay(Duration::from_millis(10)),
            )
            .expose_verdict(true)
    };
    let with_plain_stages = |c: &Counting| {
        retry_only(c)
            .concurrency_limit_config(ConcurrencyLimitConfig::builder().max_concurrency(8))
            .timeout(Duration::from_secs(1))
    };
    type Build<'a> = &'a dyn Fn(&Counting) -> fusebox::PolicyBuilder<Counting>;
    let builds: [(&str, Build<'_>); 2] = [
        ("retry only", &retry_only),
        ("retry, fixed limit, timeout", &with_plain_stages),
    ];
    for (name, build) in builds {
        let classifier = Counting::default();
        let policy = build(&classifier).build().expect("a valid layer");
        let response = policy
            .layer(answering(&[200]))
            .oneshot(get())
            .await
            .expect("an answer");
        assert_eq!(
            exposed(&response).expect("exposed").verdict(),
            Some(Verdict::SUCCESS),
            "{name}"
        );
        assert_eq!(
            classifier.asked.counts(),
            (1, 0, 0),
            "{name}: the retry's, read by the span and the extensions"
        );

        let classifier = Counting::default();
        let policy = build(&classifier).build().expect("a valid layer");
        let response = policy
            .layer(answering(&[503, 200]))
            .oneshot(get())
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        assert_eq!(
            exposed(&response).expect("exposed").verdict(),
            Some(Verdict::SUCCESS),
            "{name}: the last attempt's"
        );
        assert_eq!(
            classifier.asked.counts(),
            (2, 0, 0),
            "{name}: one per attempt"
        );

        // An error that is not retried: classified once, by the retry.
        let classifier = Counting::default();
        let failing = tower::service_fn(|_: In| async {
            Err::<Response<Full<Bytes>>, _>(std::io::Error::other("the dependency broke"))
        });
        let policy = build(&classifier).build().expect("a valid layer");
        let error = policy
            .layer(failing)
            .oneshot(get())
            .await
            .expect_err("the error");
        assert_eq!(error.to_string(), "the dependency broke", "{name}");
        assert_eq!(classifier.asked.counts(), (0, 0, 1), "{name}: an error");
    }
}
