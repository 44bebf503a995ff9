//! tonic: a [`Policy`] around a client `Channel` or in a gRPC server, with fusebox's errors
//! as [`tonic::Status`].
//!
//! gRPC puts a call's status in the trailers: the policy's layers classify gRPC responses
//! at the end of the stream (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN and
//! DATA_LOSS are failures by default; RESOURCE_EXHAUSTED counts only on routes that say
//! so), including server-streaming calls whose status comes after many messages. Route
//! keys are gRPC method paths: `"/pkg.Service/Method"`, or `"/pkg.Service/{*method}"`.
//!
//! fusebox's own errors become statuses a gRPC caller understands:
//!
//! | error | status |
//! |---|---|
//! | [`CircuitOpen`], [`Overloaded`] | `UNAVAILABLE`, with `grpc-retry-pushback-ms` (the retry hint, in milliseconds) in its metadata |
//! | tower's `load_shed` `Overloaded` | `UNAVAILABLE`, without pushback |
//! | [`Elapsed`], tower's `timeout` `Elapsed`, [`DeadlineExceeded`] | `DEADLINE_EXCEEDED` |
//!
//! Other errors pass through unchanged (tonic makes them `UNKNOWN`, or finds a `Status`
//! among their sources).
//!
//! # Client
//!
//! [`channel`] puts a policy in front of a `Channel` (or any service that takes tonic's
//! request body); hand the result to a generated client (`FooClient::new(svc)`) or to
//! `tonic::client::Grpc::new(svc)`.
//!
//! # Server
//!
//! [`ServerLayer`] goes into `Server::builder().layer(...)`: it reads the caller's
//! `grpc-timeout` into a [`Deadline`](crate::Deadline) (so the policy's timeout honours
//! it and calls made under it can pass the remainder on), runs the policy, and answers
//! fusebox's errors with the statuses above.
//!
//! ```
//! use fusebox::{CircuitBreakerConfig, Policy};
//! use std::time::Duration;
//!
//! let policy = Policy::builder("ledger")
//!     .timeout(Duration::from_millis(500))
//!     .circuit_breaker(CircuitBreakerConfig::builder("ledger"))
//!     .build()?;
//! let layer = fusebox::tonic::ServerLayer::new(policy);
//! // tonic::transport::Server::builder().layer(layer).add_service(...)
//! # let _ = layer;
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::policy::{Policy, PolicyService};
#[cfg(any(doc, test))]
use fusebox_classify::error::{CircuitOpen, DeadlineExceeded, Elapsed, Overloaded};
use fusebox_classify::{BoxError, Classifier, ErrorKind, StandardClassifier};
use fusebox_retry::ReplayBody;
use fusebox_timeout::{IncomingDeadline, IncomingDeadlineLayer};
use http::Request;
use pin_project::pin_project;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tonic::body::Body;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use tower_layer::Layer;
use tower_service::Service;

/// The metadata key of gRPC's retry pushback, in milliseconds.
pub const RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// The status for one of fusebox's own errors (anywhere in `error`'s `source()` chain);
/// `None` for any other error.
pub fn status_of(error: &(dyn Error + 'static)) -> Option<Status> {
    match ErrorKind::of(error) {
        ErrorKind::CircuitOpen(open) => {
            Some(unavailable(open.to_string(), Some(open.retry_after())))
        }
        ErrorKind::Overloaded(over) => {
            Some(unavailable(over.to_string(), Some(over.retry_after())))
        }
        // tower's load shedding gives no hint of when to come back: no pushback.
        ErrorKind::TowerOverloaded(over) => Some(unavailable(over.to_string(), None)),
        ErrorKind::Elapsed(e) => Some(Status::new(Code::DeadlineExceeded, e.to_string())),
        ErrorKind::TowerElapsed(e) => Some(Status::new(Code::DeadlineExceeded, e.to_string())),
        ErrorKind::DeadlineExceeded(e) => Some(Status::new(Code::DeadlineExceeded, e.to_string())),
        ErrorKind::BudgetExhausted(exhausted) => status_of(exhausted.last()),
        ErrorKind::Io(_) | ErrorKind::Other => None,
    }
}

fn unavailable(message: String, retry_after: Option<Duration>) -> Status {
    let mut status = Status::new(Code::Unavailable, message);
    if let Some(after) = retry_after {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        status
            .metadata_mut()
            .insert(RETRY_PUSHBACK_MS, MetadataValue::from(ms));
    }
    status
}

/// `error` as tonic sees it: fusebox's errors as their [`Status`], anything else unchanged.
pub fn into_status_error(error: BoxError) -> BoxError {
    match status_of(&*error) {
        Some(status) => Box::new(status),
        None => error,
    }
}

// === client ===

/// Turns the policy's request body back into tonic's, for a `Channel` below a policy.
#[derive(Debug, Clone)]
pub struct IntoTonicBody<S> {
    inner: S,
}

impl<S> IntoTonicBody<S> {
    /// Wraps `inner`, a service of tonic's request body (a `Channel`).
    pub fn new(inner: S) -> Self {
        IntoTonicBody { inner }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S> Service<Request<ReplayBody<Body>>> for IntoTonicBody<S>
where
    S: Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<ReplayBody<Body>>) -> S::Future {
        // A body the retry layer passed through (a streaming call) is tonic's own again;
        // an empty one becomes `Body::empty()`; only a replayed (buffered) one is boxed,
        // one allocation, as tonic makes for every call.
        self.inner
            .call(request.map(|body| match body.into_streaming() {
                Ok(original) => original,
                Err(other) => Body::new(other),
            }))
    }
}

/// A tonic client service (a `Channel`) behind a policy, its errors as [`Status`]es.
pub type PolicyChannel<S, C = StandardClassifier> = Grpc<PolicyService<IntoTonicBody<S>, C>>;

/// Puts `policy` in front of `channel` (a `tonic::transport::Channel`, or any service of
/// tonic's request body). The result is a `GrpcService` for generated clients and
/// `tonic::client::Grpc`.
pub fn channel<S, C: Classifier>(policy: &Policy<C>, channel: S) -> PolicyChannel<S, C> {
    Grpc {
        inner: policy.layer(IntoTonicBody::new(channel)),
    }
}

// === server ===

/// A [`Policy`] for `tonic::transport::Server::builder().layer(..)`: see the
/// [module docs](self).
#[derive(Debug)]
pub struct ServerLayer<C = StandardClassifier> {
    policy: Policy<C>,
    deadlines: IncomingDeadlineLayer,
}

impl<C> Clone for ServerLayer<C> {
    fn clone(&self) -> Self {
        ServerLayer {
            policy: self.policy.clone(),
            deadlines: self.deadlines.clone(),
        }
    }
}

impl<C: Classifier> ServerLayer<C> {
    /// Runs `policy` in front of the server's services, reading `grpc-timeout`.
    pub fn new(policy: Policy<C>) -> Self {
        ServerLayer {
            policy,
            deadlines: IncomingDeadlineLayer::new(),
        }
    }

    /// Reads deadlines as `deadlines` says (for example, also a header of milliseconds).
    pub fn deadlines(mut self, deadlines: IncomingDeadlineLayer) -> Self {
        self.deadlines = deadlines;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy<C> {
        &self.policy
    }
}

impl<S, C: Classifier> Layer<S> for ServerLayer<C> {
    type Service = Grpc<IncomingDeadline<PolicyService<S, C>>>;

    fn layer(&self, inner: S) -> Self::Service {
        Grpc {
            inner: self.deadlines.layer(self.policy.layer(inner)),
        }
    }
}

// === Grpc ===

/// A service whose fusebox errors are [`Status`]es (see [`into_status_error`]).
#[derive(Debug, Clone)]
pub struct Grpc<S> {
    inner: S,
}

impl<S> Grpc<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B> Service<Request<B>> for Grpc<S>
where
    S: Service<Request<B>, Error = BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = StatusFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(into_status_error)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        StatusFuture {
            inner: self.inner.call(request),
        }
    }
}

/// The future of [`Grpc`]: the inner future, its fusebox errors as [`Status`]es.
#[pin_project]
pub struct StatusFuture<F> {
    #[pin]
    inner: F,
}

impl<F> fmt::Debug for StatusFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusFuture").finish_non_exhaustive()
    }
}

impl<F, T> Future for StatusFuture<F>
where
    F: Future<Output = Result<T, BoxError>>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(ready!(self.project().inner.poll(cx)).map_err(into_status_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusebox_errors_become_statuses() {
        let open = CircuitOpen::new("ledger".into(), None, Duration::from_millis(1500), false);
        let status = status_of(&open).unwrap();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.metadata().get(RETRY_PUSHBACK_MS).unwrap(), "1500");
        let over = Overloaded::new(3, Duration::from_secs(1));
        assert_eq!(status_of(&over).unwrap().code(), Code::Unavailable);
        let elapsed = Elapsed::new("r".into(), Duration::from_secs(1));
        assert_eq!(status_of(&elapsed).unwrap().code(), Code::DeadlineExceeded);
        assert_eq!(
            status_of(&DeadlineExceeded::new()).unwrap().code(),
            Code::DeadlineExceeded
        );
        let tower_timeout = fusebox_classify::error::TowerElapsed::new();
        assert_eq!(
            status_of(&tower_timeout).unwrap().code(),
            Code::DeadlineExceeded
        );
        let tower_shed = status_of(&fusebox_classify::error::TowerOverloaded::new()).unwrap();
        assert_eq!(tower_shed.code(), Code::Unavailable);
        assert!(tower_shed.metadata().get(RETRY_PUSHBACK_MS).is_none());
        let other: BoxError = Box::new(std::io::Error::other("x"));
        let back = into_status_error(other);
        assert!(back.downcast_ref::<Status>().is_none());
        let mapped = into_status_error(Box::new(open));
        assert_eq!(
            mapped.downcast_ref::<Status>().unwrap().code(),
            Code::Unavailable
        );
    }
}
