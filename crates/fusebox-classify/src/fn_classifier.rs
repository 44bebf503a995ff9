//! A [`Classifier`] built from closures.
//!
//! For a rule that [`HttpClassifier`](crate::HttpClassifier) and
//! [`GrpcClassifier`] cannot express — a dependency that answers `200` with an error header,
//! a route whose 404s mean an outage — write the rule as a closure instead of implementing
//! the trait:
//!
//! ```
//! use fusebox_classify::{Classified, Classifier, Outcome, Route, RouteTable, Verdict, classify_fn};
//! use http::{HeaderMap, Method, StatusCode};
//!
//! // A partner that reports its overload as `200` with `x-partner-status: degraded`.
//! let partner = classify_fn(|_call, status: StatusCode, headers: &HeaderMap| {
//!     let degraded = headers.get("x-partner-status").is_some_and(|v| v == "degraded");
//!     if status.is_server_error() || degraded {
//!         Classified::from(Verdict::FAILURE)
//!     } else {
//!         Classified::from(Verdict::SUCCESS)
//!     }
//! });
//! let table = RouteTable::builder(Route::new(partner)).build()?;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("x-partner-status", "degraded".parse()?);
//! let meta = fusebox_classify::CallMeta::new(fusebox_classify::RouteId::DEFAULT, Method::GET, true);
//! let route = table.route(meta.route());
//! let classifier = route.classifier();
//! assert_eq!(
//!     classifier.classify_response(&meta.call(&table), StatusCode::OK, &headers),
//!     Classified::Ready(Verdict::FAILURE),
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Responses go to the closure given to [`classify_fn`]. Errors go to
//! [`classify_error_chain`] (so fusebox's own rejections stay ignored) unless
//! [`FnClassifier::on_error`] gives another closure; a response the closure defers
//! ([`Classified::AtEndOfStream`]) is decided from its trailers by gRPC's rules
//! ([`GrpcClassifier`]) unless [`FnClassifier::on_end_of_stream`] gives another. Every
//! layer clones the classifier it is given, so the closures must be `Clone` (a closure that
//! captures only `Clone` values is) and `Send + Sync + 'static`.

use crate::call::Call;
use crate::classifier::{Classifier, classify_error_chain};
use crate::grpc::GrpcClassifier;
use crate::outcome::{Classified, Verdict};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::fmt;

/// The type of [`FnClassifier`]'s end-of-stream rule until
/// [`on_end_of_stream`](FnClassifier::on_end_of_stream) replaces it: gRPC's rules on the
/// trailers.
pub type EndOfStreamFn = for<'a, 'b, 'c> fn(&'a Call<'b>, Option<&'c HeaderMap>) -> Verdict;

/// The type of [`FnClassifier`]'s error rule until [`on_error`](FnClassifier::on_error)
/// replaces it: [`classify_error_chain`].
pub type ErrorFn = for<'a, 'b, 'c> fn(&'a Call<'b>, &'c (dyn Error + 'static)) -> Verdict;

/// A [`Classifier`] made of closures: one for responses, and optionally one for the end of
/// a deferred stream and one for errors. Built by [`classify_fn`] (or
/// [`FnClassifier::new`]); see the [module](self) for an example.
#[derive(Clone)]
pub struct FnClassifier<R, E = EndOfStreamFn, X = ErrorFn> {
    response: R,
    end_of_stream: E,
    error: X,
}

/// A [`Classifier`] that classifies responses with `response`: it is given the call, the
/// response's status and headers, and returns the verdict (or
/// [`Classified::AtEndOfStream`] to decide from the trailers).
///
/// The same as [`FnClassifier::new`].
pub fn classify_fn<R>(response: R) -> FnClassifier<R>
where
    R: Fn(&Call<'_>, StatusCode, &HeaderMap) -> Classified + Clone + Send + Sync + 'static,
{
    FnClassifier::new(response)
}

fn grpc_end_of_stream(call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
    GrpcClassifier::default().classify_eos(call, trailers)
}

fn default_error(_call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
    classify_error_chain(error)
}

impl<R> FnClassifier<R> {
    /// Classifies responses with `response`; the end of a deferred stream by gRPC's rules,
    /// errors by [`classify_error_chain`].
    pub fn new(response: R) -> Self
    where
        R: Fn(&Call<'_>, StatusCode, &HeaderMap) -> Classified + Clone + Send + Sync + 'static,
    {
        FnClassifier {
            response,
            end_of_stream: grpc_end_of_stream,
            error: default_error,
        }
    }
}

impl<R, E, X> FnClassifier<R, E, X> {
    /// Decides a response that `response` deferred ([`Classified::AtEndOfStream`]) with
    /// `end_of_stream`, from its trailers (`None` when the stream ended without any).
    pub fn on_end_of_stream<E2>(self, end_of_stream: E2) -> FnClassifier<R, E2, X>
    where
        E2: Fn(&Call<'_>, Option<&HeaderMap>) -> Verdict + Clone + Send + Sync + 'static,
    {
        FnClassifier {
            response: self.response,
            end_of_stream,
            error: self.error,
        }
    }

    /// Classifies errors — the inner service's, a body's mid-stream, fusebox's own
    /// rejections — with `error` instead of [`classify_error_chain`].
    pub fn on_error<X2>(self, error: X2) -> FnClassifier<R, E, X2>
    where
        X2: Fn(&Call<'_>, &(dyn Error + 'static)) -> Verdict + Clone + Send + Sync + 'static,
    {
        FnClassifier {
            response: self.response,
            end_of_stream: self.end_of_stream,
            error,
        }
    }
}

impl<R, E, X> fmt::Debug for FnClassifier<R, E, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnClassifier").finish_non_exhaustive()
    }
}

impl<R, E, X> Classifier for FnClassifier<R, E, X>
where
    R: Fn(&Call<'_>, StatusCode, &HeaderMap) -> Classified + Clone + Send + Sync + 'static,
    E: Fn(&Call<'_>, Option<&HeaderMap>) -> Verdict + Clone + Send + Sync + 'static,
    X: Fn(&Call<'_>, &(dyn Error + 'static)) -> Verdict + Clone + Send + Sync + 'static,
{
    #[inline]
    fn classify_response(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        (self.response)(call, status, headers)
    }

    fn classify_eos(&self, call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
        (self.end_of_stream)(call, trailers)
    }

    fn classify_error(&self, call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
        (self.error)(call, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CircuitOpen;
    use crate::outcome::{Outcome, RetryHint};
    use crate::route::RouteId;
    use http::{HeaderValue, Method};
    use std::io;
    use std::time::Duration;

    fn call() -> Call<'static> {
        Call::new(RouteId::DEFAULT, "default", &Method::GET, true)
    }

    fn not_found_is_failure() -> impl Classifier {
        classify_fn(
            |_call: &Call<'_>, status: StatusCode, _headers: &HeaderMap| {
                if status == StatusCode::NOT_FOUND || status.is_server_error() {
                    Verdict::FAILURE.into()
                } else {
                    Verdict::SUCCESS.into()
                }
            },
        )
    }

    #[test]
    fn responses_go_to_the_closure() {
        let c = not_found_is_failure();
        let none = HeaderMap::new();
        assert_eq!(
            c.classify_response(&call(), StatusCode::NOT_FOUND, &none),
            Classified::Ready(Verdict::FAILURE)
        );
        assert_eq!(
            c.classify_response(&call(), StatusCode::OK, &none),
            Classified::Ready(Verdict::SUCCESS)
        );
        // The closure sees the call too.
        let by_route = classify_fn(|call: &Call<'_>, _status, _headers: &HeaderMap| {
            if call.route_name() == "default" {
                Verdict::IGNORED.into()
            } else {
                Verdict::SUCCESS.into()
            }
        });
        assert_eq!(
            by_route.classify_response(&call(), StatusCode::OK, &none),
            Classified::Ready(Verdict::IGNORED)
        );
    }

    #[test]
    fn errors_default_to_the_error_chain_rules() {
        let c = not_found_is_failure();
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert_eq!(c.classify_error(&call(), &open).outcome(), Outcome::Ignored);
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            c.classify_error(&call(), &refused).retry(),
            RetryHint::NotSent
        );

        let errors_ignored = classify_fn(|_: &Call<'_>, _, _: &HeaderMap| Verdict::SUCCESS.into())
            .on_error(|_: &Call<'_>, _: &(dyn Error + 'static)| Verdict::IGNORED);
        assert_eq!(
            errors_ignored.classify_error(&call(), &refused),
            Verdict::IGNORED
        );
    }

    #[test]
    fn deferred_streams_default_to_grpc_rules() {
        let deferring = classify_fn(|_: &Call<'_>, _, _: &HeaderMap| Classified::AtEndOfStream);
        let mut unavailable = HeaderMap::new();
        unavailable.insert("grpc-status", HeaderValue::from_static("14"));
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(
            deferring
                .classify_eos(&call(), Some(&unavailable))
                .is_failure()
        );
        assert_eq!(
            deferring.classify_eos(&call(), Some(&ok)),
            GrpcClassifier::default().classify_eos(&call(), Some(&ok))
        );
        assert_eq!(
            deferring.classify_eos(&call(), Some(&ok)).outcome(),
            Outcome::Success
        );

        let own = deferring.on_end_of_stream(|_: &Call<'_>, trailers: Option<&HeaderMap>| {
            if trailers.is_some_and(|t| t.contains_key("x-error")) {
                Verdict::FAILURE
            } else {
                Verdict::SUCCESS
            }
        });
        let mut error = HeaderMap::new();
        error.insert("x-error", HeaderValue::from_static("1"));
        assert_eq!(own.classify_eos(&call(), Some(&error)), Verdict::FAILURE);
        // gRPC's rules are gone: an UNAVAILABLE trailer without `x-error` is a success.
        assert_eq!(
            own.classify_eos(&call(), Some(&unavailable)),
            Verdict::SUCCESS
        );
        assert_eq!(own.classify_eos(&call(), None), Verdict::SUCCESS);
    }
}
