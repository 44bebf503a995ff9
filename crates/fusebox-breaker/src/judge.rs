//! How a breaker judges one finished call: what it records in its window, or that it
//! records nothing.
//!
//! The breaker's services judge every call with these functions as it finishes: the
//! route's classifier decides the verdict (an error through [`error_verdict`], which adds
//! the breaker's `count_overloaded`), and [`Judged::of`] turns the verdict and the call's
//! slowness into what the window records. [`judge`] puts them together for a call known
//! after the fact — its answer and how long it took — such as a recorded call replayed on
//! virtual time (`fusebox replay`): it judges the call exactly as a live breaker on the
//! same route would.
//!
//! ```
//! use fusebox_breaker::judge::{judge, Answer, Judged};
//! use fusebox_classify::error::Overloaded;
//! use fusebox_classify::{Call, Route, RouteId, StandardClassifier};
//! use http::{HeaderMap, Method, StatusCode};
//! use std::time::Duration;
//!
//! let route = Route::new(StandardClassifier::new().count_throttling(true))
//!     .slow_call_duration(Duration::from_millis(100));
//! let call = Call::new(RouteId::DEFAULT, "default", &Method::GET, true);
//! let headers = HeaderMap::new();
//! let throttled = Answer::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers, trailers: None };
//! assert_eq!(
//!     judge(&route, &call, throttled, Duration::from_millis(150), false),
//!     Judged::Counted { failure: true, slow: true }
//! );
//! // A shed call says nothing about the dependency, unless the breaker counts it.
//! let shed = Overloaded::new(10, Duration::ZERO);
//! assert_eq!(judge(&route, &call, Answer::Error(&shed), Duration::ZERO, false), Judged::Ignored);
//! assert_eq!(
//!     judge(&route, &call, Answer::Error(&shed), Duration::ZERO, true),
//!     Judged::Counted { failure: true, slow: false }
//! );
//! ```

use fusebox_classify::{Call, Classified, Classifier, ErrorKind, Outcome, Route, Verdict};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::time::Duration;

/// How a call ended, as the breaker sees it.
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// A response: its head, and its trailers if the head leaves the verdict to them
    /// (a gRPC answer whose status comes at the end of the stream; `None` when the stream
    /// ended without trailers).
    Response {
        /// The status.
        status: StatusCode,
        /// The response headers.
        headers: &'a HeaderMap,
        /// The trailers.
        trailers: Option<&'a HeaderMap>,
    },
    /// An error from the service the breaker wraps (or from its response body).
    Error(&'a (dyn Error + 'static)),
    /// The caller gave up: the call's future or its body was dropped before the end.
    Cancelled,
}

/// What a breaker records for one finished call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// Nothing: the outcome says nothing about the dependency (or the caller gave up), and
    /// the call's permit is given back — a half-open probe's included.
    Ignored,
    /// A call in the window: a failure or a success, slow or not.
    Counted {
        /// Whether it failed.
        failure: bool,
        /// Whether it was slow (it took at least its route's slow-call threshold).
        slow: bool,
    },
}

impl Judged {
    /// What the window records for a call with `outcome` that was `slow`: an ignored call
    /// counts nothing, its slowness included.
    #[inline]
    pub fn of(outcome: Outcome, slow: bool) -> Judged {
        match outcome {
            Outcome::Ignored => Judged::Ignored,
            Outcome::Success => Judged::Counted {
                failure: false,
                slow,
            },
            Outcome::Failure => Judged::Counted {
                failure: true,
                slow,
            },
        }
    }
}

/// The verdict on `error` with `classifier`, as a breaker gives it: the classifier's, except
/// that a call shed by a concurrency limit (fusebox's [`Overloaded`] or tower's
/// `load_shed`), which the classifier ignores, is a failure when the breaker counts them
/// (`count_overloaded`).
///
/// [`Overloaded`]: fusebox_classify::error::Overloaded
pub fn error_verdict<C: Classifier>(
    classifier: &C,
    call: &Call<'_>,
    error: &(dyn Error + 'static),
    count_overloaded: bool,
) -> Verdict {
    counting_overloaded(
        classifier.classify_error(call, error),
        error,
        count_overloaded,
    )
}

/// `verdict`, the classifier's on `error`, as a breaker with `count_overloaded` takes it:
/// an ignored shed call is a failure when the breaker counts them.
#[inline]
pub(crate) fn counting_overloaded(
    verdict: Verdict,
    error: &(dyn Error + 'static),
    count_overloaded: bool,
) -> Verdict {
    if count_overloaded
        && verdict.outcome() == Outcome::Ignored
        && ErrorKind::of(error).is_overloaded()
    {
        return Verdict::FAILURE.with_retry(verdict.retry());
    }
    verdict
}

/// How a breaker with `count_overloaded` judges a call on `route` that ended with `answer`
/// after `latency` (for a response, the time to its head: a streamed call's slowness is its
/// time to the headers): the route's classifier decides the outcome, the route's slow-call
/// threshold the slowness.
pub fn judge<C: Classifier>(
    route: &Route<C>,
    call: &Call<'_>,
    answer: Answer<'_>,
    latency: Duration,
    count_overloaded: bool,
) -> Judged {
    let classifier = route.classifier();
    let verdict = match answer {
        Answer::Response {
            status,
            headers,
            trailers,
        } => match classifier.classify_response(call, status, headers) {
            Classified::Ready(v) => v,
            Classified::AtEndOfStream => classifier.classify_eos(call, trailers),
        },
        Answer::Error(error) => error_verdict(classifier, call, error, count_overloaded),
        Answer::Cancelled => return Judged::Ignored,
    };
    Judged::of(verdict.outcome(), route.is_slow(latency))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_classify::error::{CircuitOpen, Elapsed, Overloaded, TowerOverloaded};
    use fusebox_classify::{RouteId, StandardClassifier};
    use http::{HeaderValue, Method};

    fn call() -> Call<'static> {
        Call::new(RouteId::DEFAULT, "default", &Method::GET, true)
    }

    fn status(route: &Route, code: u16, latency_ms: u64) -> Judged {
        let headers = HeaderMap::new();
        let answer = Answer::Response {
            status: StatusCode::from_u16(code).unwrap(),
            headers: &headers,
            trailers: None,
        };
        judge(
            route,
            &call(),
            answer,
            Duration::from_millis(latency_ms),
            false,
        )
    }

    const FAILED: Judged = Judged::Counted {
        failure: true,
        slow: false,
    };
    const OK: Judged = Judged::Counted {
        failure: false,
        slow: false,
    };

    #[test]
    fn statuses_follow_the_route_and_slowness_its_threshold() {
        let plain = Route::default().slow_call_duration(Duration::from_millis(100));
        let throttled = Route::new(StandardClassifier::new().count_throttling(true));
        assert_eq!(status(&plain, 200, 5), OK);
        assert_eq!(status(&plain, 503, 5), FAILED);
        assert_eq!(status(&plain, 429, 5), Judged::Ignored);
        assert_eq!(status(&throttled, 429, 5), FAILED);
        // At the threshold a call is slow; an ignored call counts nothing, however slow.
        assert_eq!(
            status(&plain, 200, 100),
            Judged::Counted {
                failure: false,
                slow: true
            }
        );
        assert_eq!(status(&plain, 200, 99), OK);
        assert_eq!(status(&plain, 429, 500), Judged::Ignored);
        assert_eq!(
            status(&throttled, 200, 10_000),
            OK,
            "no threshold: never slow"
        );
    }

    #[test]
    fn errors_and_count_overloaded() {
        let route = Route::default();
        let judged = |e: &(dyn Error + 'static), count: bool| {
            judge(&route, &call(), Answer::Error(e), Duration::ZERO, count)
        };
        let shed = Overloaded::new(1, Duration::ZERO);
        let tower_shed = TowerOverloaded::new();
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        let elapsed = Elapsed::new("r".into(), Duration::ZERO);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        for count in [false, true] {
            let shed_judged = if count { FAILED } else { Judged::Ignored };
            assert_eq!(judged(&shed, count), shed_judged);
            assert_eq!(judged(&tower_shed, count), shed_judged);
            // Only shed calls: another rejection stays ignored.
            assert_eq!(judged(&open, count), Judged::Ignored);
            assert_eq!(judged(&elapsed, count), FAILED);
            assert_eq!(judged(&reset, count), FAILED);
        }
        assert_eq!(
            judge(&route, &call(), Answer::Cancelled, Duration::ZERO, true),
            Judged::Ignored
        );
    }

    #[test]
    fn a_grpc_head_leaves_the_verdict_to_the_trailers() {
        let route = Route::default();
        let grpc = |status: Option<&'static str>| {
            let mut h = HeaderMap::new();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc"),
            );
            if let Some(s) = status {
                h.insert("grpc-status", HeaderValue::from_static(s));
            }
            h
        };
        let judged = |headers: &HeaderMap, trailers: Option<&HeaderMap>| {
            let answer = Answer::Response {
                status: StatusCode::OK,
                headers,
                trailers,
            };
            judge(&route, &call(), answer, Duration::ZERO, false)
        };
        let head = grpc(None);
        assert_eq!(
            judged(&head, Some(&grpc(Some("14")))),
            FAILED,
            "UNAVAILABLE"
        );
        assert_eq!(judged(&head, Some(&grpc(Some("0")))), OK);
        // In the head itself (a trailers-only answer).
        assert_eq!(judged(&grpc(Some("14")), None), FAILED);
    }
}
