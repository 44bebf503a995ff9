//! tower-http's response classifiers as fusebox classifiers (feature `tower-http`).
//!
//! A service that already classifies its responses for tower-http's `Trace` or metrics
//! layers — [`ServerErrorsAsFailures`], [`GrpcErrorsAsFailures`],
//! [`StatusInRangeAsFailures`], or a [`ClassifyResponse`] / [`MakeClassifier`] of its own
//! — can give fusebox's layers the same rule: [`TowerHttpClassifier`] is a fusebox
//! [`Classifier`] that asks the tower-http classifier.
//!
//! ```
//! use fusebox_classify::{Classified, Classifier, Route, RouteTable, TowerHttpClassifier, Verdict};
//! use fusebox_classify::{CallMeta, RouteId};
//! use http::{HeaderMap, Method, StatusCode};
//! use tower_http::classify::ServerErrorsAsFailures;
//!
//! let table = RouteTable::builder(Route::new(TowerHttpClassifier::new(ServerErrorsAsFailures::new())))
//!     .build()?;
//! let meta = CallMeta::new(RouteId::DEFAULT, Method::GET, true);
//! let route = table.route(meta.route());
//! let classifier = route.classifier();
//! let call = meta.call(&table);
//! assert_eq!(
//!     classifier.classify_response(&call, StatusCode::BAD_GATEWAY, &HeaderMap::new()),
//!     Classified::Ready(Verdict::FAILURE),
//! );
//! assert_eq!(
//!     classifier.classify_response(&call, StatusCode::NOT_FOUND, &HeaderMap::new()),
//!     Classified::Ready(Verdict::SUCCESS),
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How the two models meet
//!
//! - **Responses**: the tower-http classifier is made for each call from a `Request<()>`
//!   that carries the call's method (its URI is `/` and it has no headers: fusebox's
//!   classifier sees the call's route, not its request), and given a `Response<()>` with
//!   the response's status and a copy of its headers. `Ok(())` is
//!   [`Verdict::SUCCESS`]; a failure class is [`Verdict::FAILURE`], or what
//!   [`failure_verdict`](TowerHttpClassifier::failure_verdict) makes of it (a retry hint,
//!   say). Copying the headers allocates when there are any, which fusebox's own
//!   classifiers never do; a classifier that reads only the status
//!   ([`ServerErrorsAsFailures`], [`StatusInRangeAsFailures`]) does not need them:
//!   [`status_only`](TowerHttpClassifier::status_only) leaves them out.
//! - **End of stream**: fusebox decides a deferred response from its trailers alone, while
//!   tower-http hands back a per-response `ClassifyEos`. So at the end of the stream the
//!   classifier is asked again for a `200` with no headers — the response a gRPC classifier
//!   defers — and its `ClassifyEos` reads the trailers. For [`GrpcErrorsAsFailures`] that is
//!   the rule it would have applied; a classifier that would answer that `200` at once is
//!   taken at its word (its verdict on the `200` stands for the stream).
//! - **Errors** are classified by fusebox's rules ([`classify_error_chain`]), not by the
//!   tower-http classifier: tower-http counts every error as a failure, which would count
//!   fusebox's own rejections (an open breaker, a full limit) against the dependency.
//!
//! [`ServerErrorsAsFailures`]: ::tower_http::classify::ServerErrorsAsFailures
//! [`GrpcErrorsAsFailures`]: ::tower_http::classify::GrpcErrorsAsFailures
//! [`StatusInRangeAsFailures`]: ::tower_http::classify::StatusInRangeAsFailures

use crate::call::Call;
use crate::classifier::{Classifier, classify_error_chain};
use crate::outcome::{Classified, Verdict};
use ::tower_http::classify::{
    ClassifiedResponse, ClassifyEos, ClassifyResponse, MakeClassifier, SharedClassifier,
};
use http::{HeaderMap, Request, Response, StatusCode};
use std::error::Error;

/// What a tower-http failure class means as a fusebox [`Verdict`].
///
/// Implemented by [`AnyFailure`] (every class is [`Verdict::FAILURE`], the default) and by
/// every `Fn(&Class) -> Verdict` closure that is `Clone + Send + Sync + 'static`.
pub trait FailureVerdict<Class>: Clone + Send + Sync + 'static {
    /// The verdict on a call that the tower-http classifier failed with `class`.
    fn verdict(&self, class: &Class) -> Verdict;
}

/// Every failure class is [`Verdict::FAILURE`], not retried: [`TowerHttpClassifier`]'s
/// default.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnyFailure;

impl<Class> FailureVerdict<Class> for AnyFailure {
    fn verdict(&self, _class: &Class) -> Verdict {
        Verdict::FAILURE
    }
}

impl<Class, F> FailureVerdict<Class> for F
where
    F: Fn(&Class) -> Verdict + Clone + Send + Sync + 'static,
{
    fn verdict(&self, class: &Class) -> Verdict {
        self(class)
    }
}

/// A fusebox [`Classifier`] that asks a tower-http [`MakeClassifier`]; see the
/// [module](self) for how the two models meet.
#[derive(Debug, Clone)]
pub struct TowerHttpClassifier<M, F = AnyFailure> {
    make: M,
    failure: F,
    headers: bool,
}

impl<C> TowerHttpClassifier<SharedClassifier<C>>
where
    C: ClassifyResponse + Clone,
{
    /// Classifies with a tower-http [`ClassifyResponse`] (cloned for every call), such as
    /// `ServerErrorsAsFailures::new()` or `GrpcErrorsAsFailures::new()`.
    pub fn new(classifier: C) -> Self {
        Self::from_make_classifier(SharedClassifier::new(classifier))
    }
}

impl<M: MakeClassifier> TowerHttpClassifier<M> {
    /// Classifies with a tower-http [`MakeClassifier`], which makes a classifier for each
    /// call (from a request that carries only the call's method).
    pub fn from_make_classifier(make: M) -> Self {
        TowerHttpClassifier {
            make,
            failure: AnyFailure,
            headers: true,
        }
    }
}

impl<M, F> TowerHttpClassifier<M, F> {
    /// Turns each failure class into a verdict with `failure` instead of
    /// [`Verdict::FAILURE`]: to mark some failures retryable, or to ignore some.
    pub fn failure_verdict<F2>(self, failure: F2) -> TowerHttpClassifier<M, F2>
    where
        M: MakeClassifier,
        F2: FailureVerdict<M::FailureClass>,
    {
        TowerHttpClassifier {
            make: self.make,
            failure,
            headers: self.headers,
        }
    }

    /// Shows the tower-http classifier the response's status alone, with no headers: no
    /// copy of the headers per call. Right for classifiers that read only the status.
    pub fn status_only(mut self) -> Self {
        self.headers = false;
        self
    }

    /// The tower-http classifier maker.
    pub fn get_ref(&self) -> &M {
        &self.make
    }
}

impl<M, F> TowerHttpClassifier<M, F>
where
    M: MakeClassifier,
    F: FailureVerdict<M::FailureClass>,
{
    fn make(&self, call: &Call<'_>) -> M::Classifier {
        let mut request = Request::new(());
        if let Some(method) = call.method() {
            *request.method_mut() = method.clone();
        }
        self.make.make_classifier(&request)
    }

    fn verdict(&self, result: Result<(), M::FailureClass>) -> Verdict {
        match result {
            Ok(()) => Verdict::SUCCESS,
            Err(class) => self.failure.verdict(&class),
        }
    }
}

impl<M, F> Classifier for TowerHttpClassifier<M, F>
where
    M: MakeClassifier + Clone + Send + Sync + 'static,
    F: FailureVerdict<M::FailureClass>,
{
    fn classify_response(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        let mut response = Response::new(());
        *response.status_mut() = status;
        if self.headers {
            *response.headers_mut() = headers.clone();
        }
        match self.make(call).classify_response(&response) {
            ClassifiedResponse::Ready(result) => Classified::Ready(self.verdict(result)),
            ClassifiedResponse::RequiresEos(_) => Classified::AtEndOfStream,
        }
    }

    fn classify_eos(&self, call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
        match self.make(call).classify_response(&Response::new(())) {
            ClassifiedResponse::RequiresEos(eos) => self.verdict(eos.classify_eos(trailers)),
            ClassifiedResponse::Ready(result) => self.verdict(result),
        }
    }

    fn classify_error(&self, _call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
        classify_error_chain(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CircuitOpen;
    use crate::outcome::{Outcome, RetryHint};
    use crate::route::RouteId;
    use ::tower_http::classify::{
        GrpcCode, GrpcErrorsAsFailures, GrpcFailureClass, ServerErrorsAsFailures,
        ServerErrorsFailureClass, StatusInRangeAsFailures,
    };
    use http::{HeaderValue, Method};
    use std::time::Duration;

    fn call() -> Call<'static> {
        Call::new(RouteId::DEFAULT, "default", &Method::GET, true)
    }

    fn ready(c: &impl Classifier, status: u16, headers: &HeaderMap) -> Classified {
        c.classify_response(&call(), StatusCode::from_u16(status).unwrap(), headers)
    }

    #[test]
    fn server_errors_as_failures() {
        let c = TowerHttpClassifier::new(ServerErrorsAsFailures::new());
        let none = HeaderMap::new();
        for (status, verdict) in [
            (200, Verdict::SUCCESS),
            (404, Verdict::SUCCESS),
            (429, Verdict::SUCCESS),
            (500, Verdict::FAILURE),
            (503, Verdict::FAILURE),
        ] {
            assert_eq!(
                ready(&c, status, &none),
                Classified::Ready(verdict),
                "{status}"
            );
        }
        // The same with the headers left out.
        let c = c.status_only();
        assert_eq!(ready(&c, 502, &none), Classified::Ready(Verdict::FAILURE));
        assert_eq!(ready(&c, 200, &none), Classified::Ready(Verdict::SUCCESS));
    }

    #[test]
    fn status_only_withholds_the_headers() {
        // A trailers-only gRPC answer has its status in the headers: seen by default, not
        // when the classifier is shown the status alone (it then waits for the trailers).
        let mut unavailable = HeaderMap::new();
        unavailable.insert("grpc-status", HeaderValue::from_static("14"));
        let c = TowerHttpClassifier::new(GrpcErrorsAsFailures::new());
        assert_eq!(
            ready(&c, 200, &unavailable),
            Classified::Ready(Verdict::FAILURE)
        );
        let c = c.status_only();
        assert_eq!(ready(&c, 200, &unavailable), Classified::AtEndOfStream);
    }

    #[test]
    fn failure_classes_map_to_verdicts() {
        let c = TowerHttpClassifier::new(ServerErrorsAsFailures::new()).failure_verdict(
            |class: &ServerErrorsFailureClass| match class {
                ServerErrorsFailureClass::StatusCode(s)
                    if *s == StatusCode::SERVICE_UNAVAILABLE =>
                {
                    Verdict::FAILURE.with_retry(RetryHint::Retryable)
                }
                _ => Verdict::FAILURE,
            },
        );
        let none = HeaderMap::new();
        assert_eq!(
            ready(&c, 503, &none),
            Classified::Ready(Verdict::FAILURE.with_retry(RetryHint::Retryable))
        );
        assert_eq!(ready(&c, 500, &none), Classified::Ready(Verdict::FAILURE));
    }

    #[test]
    fn status_ranges() {
        let c = TowerHttpClassifier::new(StatusInRangeAsFailures::new(400..=599)).status_only();
        let none = HeaderMap::new();
        assert_eq!(ready(&c, 404, &none), Classified::Ready(Verdict::FAILURE));
        assert_eq!(ready(&c, 302, &none), Classified::Ready(Verdict::SUCCESS));
    }

    #[test]
    fn grpc_in_headers_and_trailers() {
        let c =
            TowerHttpClassifier::new(GrpcErrorsAsFailures::new().with_success(GrpcCode::NotFound))
                .failure_verdict(|class: &GrpcFailureClass| match class {
                    // UNAVAILABLE (14) may be retried.
                    GrpcFailureClass::Status(status)
                        if status.code() == Some(GrpcCode::Unavailable) =>
                    {
                        Verdict::FAILURE.with_retry(RetryHint::Retryable)
                    }
                    _ => Verdict::FAILURE,
                });
        // Trailers-only: the status is in the headers, which the classifier must see.
        let mut unavailable = HeaderMap::new();
        unavailable.insert("grpc-status", HeaderValue::from_static("14"));
        assert_eq!(
            ready(&c, 200, &unavailable),
            Classified::Ready(Verdict::FAILURE.with_retry(RetryHint::Retryable))
        );
        // Status in the trailers: deferred, then decided by the tower-http rule.
        let none = HeaderMap::new();
        assert_eq!(ready(&c, 200, &none), Classified::AtEndOfStream);
        assert_eq!(
            c.classify_eos(&call(), Some(&unavailable)),
            Verdict::FAILURE.with_retry(RetryHint::Retryable)
        );
        let mut internal = HeaderMap::new();
        internal.insert("grpc-status", HeaderValue::from_static("13"));
        assert_eq!(c.classify_eos(&call(), Some(&internal)), Verdict::FAILURE);
        let mut not_found = HeaderMap::new();
        not_found.insert("grpc-status", HeaderValue::from_static("5"));
        assert_eq!(c.classify_eos(&call(), Some(&not_found)), Verdict::SUCCESS);
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", HeaderValue::from_static("0"));
        assert_eq!(c.classify_eos(&call(), Some(&ok)), Verdict::SUCCESS);
    }

    #[test]
    fn errors_keep_fusebox_rules() {
        let c = TowerHttpClassifier::new(ServerErrorsAsFailures::new());
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert_eq!(c.classify_error(&call(), &open).outcome(), Outcome::Ignored);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            c.classify_error(&call(), &refused).retry(),
            RetryHint::NotSent
        );
    }

    /// A `MakeClassifier` that reads the request: POSTs count 4xx as failures.
    #[derive(Clone)]
    struct ByMethod;

    impl MakeClassifier for ByMethod {
        type Classifier = StatusInRangeAsFailures;
        type FailureClass = <StatusInRangeAsFailures as ClassifyResponse>::FailureClass;
        type ClassifyEos = <StatusInRangeAsFailures as ClassifyResponse>::ClassifyEos;

        fn make_classifier<B>(&self, req: &Request<B>) -> Self::Classifier {
            if req.method() == Method::POST {
                StatusInRangeAsFailures::new(400..=599)
            } else {
                StatusInRangeAsFailures::new(500..=599)
            }
        }
    }

    #[test]
    fn make_classifier_sees_the_method() {
        let c = TowerHttpClassifier::from_make_classifier(ByMethod);
        let none = HeaderMap::new();
        let post = Call::new(RouteId::DEFAULT, "default", &Method::POST, false);
        assert_eq!(
            c.classify_response(&post, StatusCode::CONFLICT, &none),
            Classified::Ready(Verdict::FAILURE)
        );
        assert_eq!(
            c.classify_response(&call(), StatusCode::CONFLICT, &none),
            Classified::Ready(Verdict::SUCCESS)
        );
        // A call that is not HTTP has no method: the request is a GET.
        let plain = Call::plain(RouteId::DEFAULT, "default");
        assert_eq!(
            c.classify_response(&plain, StatusCode::CONFLICT, &none),
            Classified::Ready(Verdict::SUCCESS)
        );
    }
}
