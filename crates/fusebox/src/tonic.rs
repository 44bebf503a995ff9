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
//! ## Which calls are retried
//!
//! A retry sends the request's bytes again, so the policy's retry budget can only retry
//! (and hedge) a call whose request it holds whole. tonic streams every request body and
//! does not say how long it is, so the channel reads what the body has *ready* when the call
//! is made ([`Replayable`]), without waiting for anything:
//!
//! - **unary and server-streaming calls** send one message, encoded before the call: the
//!   request is complete, and up to the retry budget's `max_replay_body_bytes` it is kept
//!   and replayed. On a route that allows retries and is marked
//!   [`idempotent`](crate::Route::idempotent) (gRPC calls are POSTs), an `UNAVAILABLE`
//!   answer (or a `RESOURCE_EXHAUSTED` one, honouring `grpc-retry-pushback-ms`) is retried,
//!   and the call is hedged if the budget has a `hedge_delay`. Any call whose request was
//!   never sent (connection refused) is retried, idempotent or not. A call is retried only
//!   on an answer that is decided by its headers (a trailers-only answer, as servers send
//!   for an error before any message): once messages are streaming to the caller, the answer
//!   is the caller's.
//! - **client-streaming and bidirectional calls** whose request stream is still open when
//!   the call is made (messages still to come) are sent once, never retried or hedged. So is
//!   a request larger than `max_replay_body_bytes`.
//!
//! Nothing is read ahead on a policy without a retry budget, or on a route whose retries are
//! off: those calls hand tonic its own request body, untouched.
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
//!     .circuit_breaker(CircuitBreakerConfig::builder().name("ledger"))
//!     .build()?;
//! let layer = fusebox::tonic::ServerLayer::new(policy);
//! // tonic::transport::Server::builder().layer(layer).add_service(...)
//! # let _ = layer;
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::policy::{Policy, PolicyService};
use bytes::Bytes;
use fusebox_classify::context::Scope;
#[cfg(any(doc, test))]
use fusebox_classify::error::{CircuitOpen, DeadlineExceeded, Elapsed, Overloaded};
use fusebox_classify::{BoxError, Classifier, ErrorKind, RouteTable, StandardClassifier};
use fusebox_retry::ReplayBody;
use fusebox_timeout::{IncomingDeadline, IncomingDeadlineLayer};
use http::HeaderMap;
use http::Request;
use http_body::{Body as _, Frame, SizeHint};
use pin_project::pin_project;
use std::collections::VecDeque;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Waker;
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
        // An I/O error, no error of fusebox's, or one this function does not know.
        _ => None,
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

/// Reads, when a call is made, what its tonic request body has ready, so that a request
/// that is complete can be replayed by the policy's retry budget (see
/// [Which calls are retried](self#which-calls-are-retried)). The outermost service of
/// [`PolicyChannel`].
#[derive(Debug)]
pub struct Replayable<S, C = StandardClassifier> {
    inner: S,
    /// The routes and the most bytes read ahead, when the policy retries at all.
    read_ahead: Option<(RouteTable<C>, usize)>,
}

impl<S: Clone, C> Clone for Replayable<S, C> {
    fn clone(&self) -> Self {
        Replayable {
            inner: self.inner.clone(),
            read_ahead: self.read_ahead.clone(),
        }
    }
}

impl<S, C: Classifier> Replayable<S, C> {
    /// Wraps `inner` (a service behind `policy`): requests are read ahead only when
    /// `policy` has a retry budget that may send a request more than once.
    pub fn new(policy: &Policy<C>, inner: S) -> Self {
        let read_ahead = policy
            .retry_config()
            .filter(|config| config.max_attempts() > 1)
            .map(|config| (policy.routes().clone(), config.max_replay_body_bytes()));
        Replayable { inner, read_ahead }
    }
}

impl<S, C> Replayable<S, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, C> Service<Request<Body>> for Replayable<S, C>
where
    S: Service<Request<RequestBody>>,
    C: Classifier,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<Body>) -> S::Future {
        // Resolved here, the route is read by the policy inside instead of resolved again.
        let mut scope = Scope::new();
        let cap = match &self.read_ahead {
            Some((routes, cap))
                if routes
                    .route(routes.resolve_in(&request, &mut scope))
                    .retry_enabled() =>
            {
                Some(*cap)
            }
            _ => None,
        };
        let _current = scope.hand_on();
        self.inner.call(request.map(|body| match cap {
            Some(cap) => RequestBody::read_ahead(body, cap),
            None => RequestBody::untouched(body),
        }))
    }
}

/// A tonic request body as the policy sees it: tonic's own, untouched, or read (in part or
/// whole) when the call was made ([`Replayable`]). A body read whole has an exact size,
/// which is what lets the retry budget keep it for a replay.
#[derive(Debug)]
pub struct RequestBody {
    kind: RequestKind,
}

#[derive(Debug)]
enum RequestKind {
    /// tonic's body, not read.
    Untouched(Body),
    /// Chunks read ahead, then how the body goes on.
    Read {
        chunks: Chunks,
        remaining: u64,
        then: Then,
    },
}

/// The chunks read ahead. One chunk (a unary call's message) is kept without a queue.
#[derive(Debug)]
enum Chunks {
    Zero,
    One(Bytes),
    Many(VecDeque<Bytes>),
}

impl Chunks {
    fn push(&mut self, chunk: Bytes) {
        *self = match std::mem::replace(self, Chunks::Zero) {
            Chunks::Zero => Chunks::One(chunk),
            Chunks::One(first) => Chunks::Many(VecDeque::from([first, chunk])),
            Chunks::Many(mut all) => {
                all.push_back(chunk);
                Chunks::Many(all)
            }
        };
    }

    fn pop(&mut self) -> Option<Bytes> {
        match std::mem::replace(self, Chunks::Zero) {
            Chunks::Zero => None,
            Chunks::One(chunk) => Some(chunk),
            Chunks::Many(mut all) => {
                let next = all.pop_front();
                if !all.is_empty() {
                    *self = Chunks::Many(all);
                }
                next
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Chunks::Zero)
    }
}

/// What follows the chunks read ahead.
#[derive(Debug)]
enum Then {
    /// Nothing more: the body was complete (its trailers, if it had any).
    End(Option<Box<HeaderMap>>),
    /// The rest of tonic's body, not ready when the call was made.
    Rest(Body),
    /// The body failed while it was read ahead.
    Failed(Option<Status>),
}

impl RequestBody {
    /// `body`, passed through untouched.
    pub fn untouched(body: Body) -> Self {
        RequestBody {
            kind: RequestKind::Untouched(body),
        }
    }

    /// `body`, with what it has ready now — up to `cap` bytes — read into memory. Reading
    /// never waits: a body with nothing ready is passed through as it is.
    pub fn read_ahead(mut body: Body, cap: usize) -> Self {
        let mut cx = Context::from_waker(Waker::noop());
        let mut chunks = Chunks::Zero;
        let mut read: u64 = 0;
        let then = loop {
            if read > cap as u64 {
                break Then::Rest(body);
            }
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Pending => {
                    if chunks.is_empty() {
                        return RequestBody::untouched(body);
                    }
                    // The waker of this read is a no-op: the next poll, by whoever sends
                    // the body, registers its own.
                    break Then::Rest(body);
                }
                Poll::Ready(None) => break Then::End(None),
                Poll::Ready(Some(Err(status))) => break Then::Failed(Some(status)),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        read += data.len() as u64;
                        if !data.is_empty() {
                            chunks.push(data);
                        }
                    }
                    Err(frame) => {
                        break Then::End(frame.into_trailers().ok().map(Box::new));
                    }
                },
            }
        };
        RequestBody {
            kind: RequestKind::Read {
                chunks,
                remaining: read,
                then,
            },
        }
    }

    /// Whether the body was read to its end when the call was made.
    pub fn is_complete(&self) -> bool {
        matches!(
            self.kind,
            RequestKind::Read {
                then: Then::End(_),
                ..
            }
        )
    }

    /// tonic's body back, when this one is tonic's own untouched; else this body.
    pub fn into_tonic(self) -> Result<Body, Self> {
        match self.kind {
            RequestKind::Untouched(body) => Ok(body),
            kind => Err(RequestBody { kind }),
        }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match &mut self.kind {
            RequestKind::Untouched(body) => Pin::new(body).poll_frame(cx),
            RequestKind::Read {
                chunks,
                remaining,
                then,
            } => {
                if let Some(chunk) = chunks.pop() {
                    *remaining = remaining.saturating_sub(chunk.len() as u64);
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                match then {
                    Then::End(trailers) => {
                        Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(*t))))
                    }
                    Then::Rest(body) => Pin::new(body).poll_frame(cx),
                    Then::Failed(status) => Poll::Ready(status.take().map(Err)),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Untouched(body) => body.is_end_stream(),
            RequestKind::Read { chunks, then, .. } => {
                chunks.is_empty()
                    && match then {
                        Then::End(trailers) => trailers.is_none(),
                        Then::Rest(body) => body.is_end_stream(),
                        Then::Failed(status) => status.is_none(),
                    }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Untouched(body) => body.size_hint(),
            RequestKind::Read {
                remaining, then, ..
            } => match then {
                Then::End(_) => SizeHint::with_exact(*remaining),
                Then::Rest(body) => {
                    let mut hint = SizeHint::new();
                    hint.set_lower(remaining.saturating_add(body.size_hint().lower()));
                    hint
                }
                Then::Failed(_) => {
                    let mut hint = SizeHint::new();
                    hint.set_lower(*remaining);
                    hint
                }
            },
        }
    }
}

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

impl<S> Service<Request<ReplayBody<RequestBody>>> for IntoTonicBody<S>
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
    fn call(&mut self, request: Request<ReplayBody<RequestBody>>) -> S::Future {
        // A body passed through untouched (no retries, or a stream still open) is tonic's
        // own again; an empty one becomes `Body::empty()`; a replayed (buffered) one, or
        // one read ahead, is boxed: one allocation, as tonic makes for every call. Its size
        // is not told below: gRPC frames its own messages, and a known size would only have
        // hyper add a `content-length` the bare channel does not send.
        self.inner
            .call(request.map(|body| match body.into_streaming() {
                Ok(original) => match original.into_tonic() {
                    Ok(tonic) => tonic,
                    Err(read) => Body::new(UnsizedBody { inner: read }),
                },
                Err(empty) if empty.is_empty() => Body::empty(),
                Err(replay) => Body::new(UnsizedBody { inner: replay }),
            }))
    }
}

/// A body that does not tell its size (see [`IntoTonicBody`]).
#[pin_project]
struct UnsizedBody<B> {
    #[pin]
    inner: B,
}

impl<B: http_body::Body> http_body::Body for UnsizedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// A tonic client service (a `Channel`) behind a policy, its errors as [`Status`]es.
pub type PolicyChannel<S, C = StandardClassifier> =
    Grpc<Replayable<PolicyService<IntoTonicBody<S>, C>, C>>;

/// Puts `policy` in front of `channel` (a `tonic::transport::Channel`, or any service of
/// tonic's request body). The result is a `GrpcService` for generated clients and
/// `tonic::client::Grpc`. Which calls its retry budget retries: see
/// [Which calls are retried](self#which-calls-are-retried).
pub fn channel<S, C: Classifier>(policy: &Policy<C>, channel: S) -> PolicyChannel<S, C> {
    Grpc {
        inner: Replayable::new(policy, policy.layer(IntoTonicBody::new(channel))),
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
