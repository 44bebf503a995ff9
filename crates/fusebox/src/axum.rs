//! axum: a [`Policy`] in front of handlers, with fusebox's errors turned into responses.
//!
//! A router wants services that never fail (`Error = Infallible`): every error must already
//! be a response. [`PolicyLayer`] wraps a policy and does that mapping, so that no
//! `HandleErrorLayer` is needed:
//!
//! | error | response |
//! |---|---|
//! | [`CircuitOpen`] | `503 Service Unavailable`, `Retry-After` from the breaker |
//! | [`Overloaded`] | `503 Service Unavailable`, `Retry-After` from the limit |
//! | tower's `load_shed` `Overloaded` | `503 Service Unavailable`, no `Retry-After` |
//! | [`Elapsed`] (a timeout), or tower's `timeout` `Elapsed` | `504 Gateway Timeout` |
//! | [`DeadlineExceeded`] (the caller's deadline had passed) | `504 Gateway Timeout` |
//! | anything else | `500 Internal Server Error`, or what [`PolicyLayer::map_error`] says |
//!
//! `Retry-After` is in whole seconds, rounded up, at least 1. Responses the handlers return
//! — a handler's own 500 or 404 — pass through untouched.
//!
//! With the `axum` feature, route keys come from axum's `MatchedPath` (the route template
//! `"/users/{id}"`), so a [`RouteTable`](crate::RouteTable) keyed by templates classifies
//! each route's calls. `Router::layer` and `Router::route_layer` call [`Layer::layer`] once
//! per route; the policy's state (breaker, limit, budget) lives in the layer and is shared
//! by all of them, not reset per route.
//!
//! ```
//! use axum::{Router, routing::get};
//! use fusebox::{CircuitBreakerConfig, Policy};
//! use fusebox::axum::PolicyLayer;
//!
//! let policy = Policy::builder("api")
//!     .concurrency_limit(256)
//!     .circuit_breaker(CircuitBreakerConfig::builder().name("api"))
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/users/{id}", get(|| async { "user" }))
//!     .route_layer(PolicyLayer::new(policy));
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::policy::{Policy, PolicyBody, PolicyService};
use axum::body::Body;
use axum::response::Response;
#[cfg(doc)]
use fusebox_classify::error::DeadlineExceeded;
#[cfg(any(doc, test))]
use fusebox_classify::error::{CircuitOpen, Elapsed, Overloaded};
use fusebox_classify::{BoxError, Classifier, ErrorKind, StandardClassifier};
use fusebox_retry::ReplayBody;
use http::{HeaderValue, Request, StatusCode, header};
use pin_project::pin_project;
use std::convert::Infallible;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;

type MapError = dyn Fn(&(dyn Error + Send + Sync + 'static)) -> Option<Response> + Send + Sync;

/// A [`Policy`] whose errors become responses: see the [module docs](self).
pub struct PolicyLayer<C = StandardClassifier> {
    policy: Policy<C>,
    map_error: Option<Arc<MapError>>,
}

impl<C> Clone for PolicyLayer<C> {
    fn clone(&self) -> Self {
        PolicyLayer {
            policy: self.policy.clone(),
            map_error: self.map_error.clone(),
        }
    }
}

impl<C> fmt::Debug for PolicyLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyLayer")
            .field("policy", &self.policy)
            .field("map_error", &self.map_error.is_some())
            .finish()
    }
}

impl<C: Classifier> PolicyLayer<C> {
    /// Wraps `policy`.
    pub fn new(policy: Policy<C>) -> Self {
        PolicyLayer {
            policy,
            map_error: None,
        }
    }

    /// Maps errors that are not fusebox's own (a handler's error type, a transport error)
    /// to a response; `None` keeps the default `500`.
    pub fn map_error(
        mut self,
        f: impl Fn(&(dyn Error + Send + Sync + 'static)) -> Option<Response> + Send + Sync + 'static,
    ) -> Self {
        self.map_error = Some(Arc::new(f));
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy<C> {
        &self.policy
    }
}

impl<S, C: Classifier> Layer<S> for PolicyLayer<C> {
    type Service = PolicyHandler<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        PolicyHandler {
            inner: self.policy.layer(AxumBodies { inner }),
            map_error: self.map_error.clone(),
            not_ready: None,
        }
    }
}

/// A service behind a [`PolicyLayer`]: never fails, answers fusebox's errors with 503s and
/// 504s, and answers with axum [`Response`]s.
///
/// The service it wraps (the router's route, under `Router::layer` or `route_layer`)
/// receives axum [`Body`]s: the router's own body when the policy only passed it on, not
/// a copy or a wrapper ([`AxumBodies`]). A response body that no layer waits on any more
/// is handed back as the handler's own.
pub struct PolicyHandler<S, C = StandardClassifier> {
    inner: PolicyService<AxumBodies<S>, C>,
    map_error: Option<Arc<MapError>>,
    /// An error from the inner service's `poll_ready`, answered by the next call.
    not_ready: Option<BoxError>,
}

impl<S: Clone, C: Classifier> Clone for PolicyHandler<S, C> {
    fn clone(&self) -> Self {
        PolicyHandler {
            inner: self.inner.clone(),
            map_error: self.map_error.clone(),
            not_ready: None,
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for PolicyHandler<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyHandler")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, C, B, RB> Service<Request<B>> for PolicyHandler<S, C>
where
    PolicyService<AxumBodies<S>, C>:
        Service<Request<B>, Response = http::Response<PolicyBody<RB, C>>, Error = BoxError>,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    C: Classifier,
    B: http_body::Body,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture<<PolicyService<AxumBodies<S>, C> as Service<Request<B>>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.not_ready.is_none()
            && let Err(e) = ready!(self.inner.poll_ready(cx))
        {
            self.not_ready = Some(e);
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let map_error = self.map_error.clone();
        match self.not_ready.take() {
            Some(e) => ResponseFuture {
                kind: Kind::Failed {
                    error: Some(e),
                    map_error,
                },
            },
            None => ResponseFuture {
                kind: Kind::Called {
                    future: self.inner.call(request),
                    map_error,
                },
            },
        }
    }
}

/// The future of a [`PolicyHandler`].
#[pin_project]
pub struct ResponseFuture<F> {
    #[pin]
    kind: Kind<F>,
}

#[pin_project(project = KindProj)]
enum Kind<F> {
    Called {
        #[pin]
        future: F,
        map_error: Option<Arc<MapError>>,
    },
    Failed {
        error: Option<BoxError>,
        map_error: Option<Arc<MapError>>,
    },
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, RB, C> Future for ResponseFuture<F>
where
    F: Future<Output = Result<http::Response<PolicyBody<RB, C>>, BoxError>>,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    C: Classifier,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (error, map_error) = match self.project().kind.project() {
            KindProj::Called { future, map_error } => match ready!(future.poll(cx)) {
                // A body no layer waits on any more goes back to axum as the handler's
                // own body (already an axum `Body`: not boxed again).
                Ok(response) => {
                    return Poll::Ready(Ok(response.map(|body| match body.into_inner() {
                        Ok(own) => Body::new(own),
                        Err(wrapped) => Body::new(wrapped),
                    })));
                }
                Err(e) => (e, map_error.take()),
            },
            KindProj::Failed { error, map_error } => match error.take() {
                Some(e) => (e, map_error.take()),
                None => (BoxError::from("polled after completion"), None),
            },
        };
        Poll::Ready(Ok(respond(&*error, map_error.as_deref())))
    }
}

/// The service a [`PolicyHandler`]'s policy wraps: hands the handler (the router's route)
/// an axum [`Body`] instead of the retry layer's [`ReplayBody`].
///
/// A body the retry layer passed through is handed on as it is (the router's own `Body`,
/// not boxed again), an empty one as [`Body::empty`] (which allocates nothing), and only a
/// replayed one is boxed.
#[derive(Debug, Clone)]
pub struct AxumBodies<S> {
    inner: S,
}

impl<S, B> Service<Request<ReplayBody<B>>> for AxumBodies<S>
where
    S: Service<Request<Body>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<ReplayBody<B>>) -> S::Future {
        self.inner
            .call(request.map(|body| match body.into_streaming() {
                Ok(original) => Body::new(original),
                Err(empty) if empty.is_empty() => Body::empty(),
                Err(replay) => Body::new(replay),
            }))
    }
}

fn respond(error: &(dyn Error + Send + Sync + 'static), map_error: Option<&MapError>) -> Response {
    if let Some(response) = fusebox_response(error) {
        return response;
    }
    map_error.and_then(|f| f(error)).unwrap_or_else(|| {
        plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error",
            None,
        )
    })
}

/// The response for one of fusebox's own errors (anywhere in `error`'s `source()` chain),
/// as [`PolicyLayer`] answers it; `None` for any other error.
///
/// For hand-made stacks: a `HandleErrorLayer` can call it.
pub fn fusebox_response(error: &(dyn Error + 'static)) -> Option<Response> {
    const OVERLOADED: &str = "service unavailable: overloaded";
    match ErrorKind::of(error) {
        ErrorKind::CircuitOpen(open) => Some(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "service unavailable: circuit breaker open",
            Some(open.retry_after()),
        )),
        ErrorKind::Overloaded(over) => Some(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            OVERLOADED,
            Some(over.retry_after()),
        )),
        // tower's load shedding gives no hint of when to come back.
        ErrorKind::TowerOverloaded(_) => {
            Some(plain(StatusCode::SERVICE_UNAVAILABLE, OVERLOADED, None))
        }
        ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_) | ErrorKind::DeadlineExceeded(_) => {
            Some(plain(StatusCode::GATEWAY_TIMEOUT, "gateway timeout", None))
        }
        ErrorKind::BudgetExhausted(exhausted) => fusebox_response(exhausted.last()),
        // An I/O error, no error of fusebox's, or one this function does not know.
        _ => None,
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub fn retry_after_seconds(after: Duration) -> u64 {
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    secs.max(1)
}

fn plain(status: StatusCode, text: &'static str, retry_after: Option<Duration>) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(after) = retry_after {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after_seconds(after)),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusebox_errors_become_503_and_504() {
        let open = CircuitOpen::new("b".into(), None, Duration::from_millis(2500), false);
        let r = fusebox_response(&open).unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        let over = Overloaded::new(4, Duration::ZERO);
        let r = fusebox_response(&over).unwrap();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let elapsed = Elapsed::new("r".into(), Duration::from_secs(1));
        assert_eq!(
            fusebox_response(&elapsed).unwrap().status(),
            StatusCode::GATEWAY_TIMEOUT
        );
        assert!(fusebox_response(&std::io::Error::other("x")).is_none());
        // tower's own timeout and load shedding, from a user's layers.
        let tower_timeout = fusebox_classify::error::TowerElapsed::new();
        assert_eq!(
            fusebox_response(&tower_timeout).unwrap().status(),
            StatusCode::GATEWAY_TIMEOUT
        );
        let r = fusebox_response(&fusebox_classify::error::TowerOverloaded::new()).unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
        let other = std::io::Error::other("x");
        assert_eq!(
            respond(&other, None).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
