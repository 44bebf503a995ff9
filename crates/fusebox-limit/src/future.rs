//! The response future: waits in the queue if it has to, calls the inner service, and
//! hands the permit to the response body or gives it back.

use crate::body::{Completion, Pending, ResponseBody};
use crate::config::Release;
use crate::limiter::{Permit, Shed, Ticket};
use fusebox_classify::error::Overloaded;
use fusebox_classify::{BoxError, CallMeta, Classified, ClassifiedBody, Classifier, Nanos};
use http::{Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// The future of a [`ConcurrencyLimit`](crate::ConcurrencyLimit) call.
///
/// Dropping it at any point gives back what it holds: its place in the queue, or its
/// permit. A call cancelled this way is not counted by an adaptive limit.
#[pin_project]
pub struct ResponseFuture<S, B, C>
where
    S: Service<Request<B>>,
{
    #[pin]
    state: State<S, B, C>,
    permit: Option<Permit<C>>,
    meta: Option<CallMeta>,
    start: Nanos,
}

// The queued state carries the request and a timer, which makes every future larger; boxing
// it would allocate per queued call instead. Measured in benches/benches/limit.rs.
#[allow(clippy::large_enum_variant)]
#[pin_project(project = StateProj)]
enum State<S, B, C>
where
    S: Service<Request<B>>,
{
    Called {
        #[pin]
        future: S::Future,
    },
    Queued {
        ticket: Ticket<C>,
        deadline: Instant,
        #[pin]
        sleep: Option<Sleep>,
        service: Option<S>,
        request: Option<Request<B>>,
    },
    Shed {
        error: Option<Overloaded>,
    },
    Done,
}

impl<S, B, C> ResponseFuture<S, B, C>
where
    S: Service<Request<B>>,
{
    pub(crate) fn called(
        future: S::Future,
        permit: Permit<C>,
        meta: Option<CallMeta>,
        start: Nanos,
    ) -> Self {
        ResponseFuture {
            state: State::Called { future },
            permit: Some(permit),
            meta,
            start,
        }
    }

    pub(crate) fn queued(
        ticket: Ticket<C>,
        deadline: Instant,
        service: S,
        request: Request<B>,
        meta: Option<CallMeta>,
    ) -> Self {
        ResponseFuture {
            state: State::Queued {
                ticket,
                deadline,
                sleep: None,
                service: Some(service),
                request: Some(request),
            },
            permit: None,
            meta,
            start: Nanos::ZERO,
        }
    }

    pub(crate) fn shed(error: Overloaded) -> Self {
        ResponseFuture {
            state: State::Shed { error: Some(error) },
            permit: None,
            meta: None,
            start: Nanos::ZERO,
        }
    }
}

impl<S, B, C> fmt::Debug for ResponseFuture<S, B, C>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Queued { .. } => "queued",
            State::Shed { .. } => "shed",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

impl<S, B, C, ResB> Future for ResponseFuture<S, B, C>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: Body,
    C: Classifier,
{
    type Output = Result<Response<ResponseBody<ResB, C>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let result = ready!(future.poll(cx));
                    let permit = this.permit.take();
                    let meta = this.meta.take();
                    this.state.set(State::Done);
                    return Poll::Ready(finish(result, permit, meta, *this.start));
                }
                StateProj::Queued {
                    ticket,
                    deadline,
                    mut sleep,
                    service,
                    request,
                } => {
                    let permit = match ticket.poll(cx) {
                        Poll::Ready(permit) => permit,
                        Poll::Pending => {
                            if sleep.is_none() {
                                sleep.set(Some(tokio::time::sleep_until(*deadline)));
                            }
                            if let Some(sleep) = sleep.as_pin_mut() {
                                ready!(sleep.poll(cx));
                            }
                            // Out of time; a permit granted at the last moment still wins.
                            match ticket.cancel() {
                                Some(permit) => permit,
                                None => {
                                    let error = ticket.limiter().shed(Shed::QueueTimeout);
                                    this.state.set(State::Done);
                                    return Poll::Ready(Err(error.into()));
                                }
                            }
                        }
                    };
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        unreachable!("a queued call holds its service and request until admitted")
                    };
                    if this.meta.is_some() {
                        *this.start = permit.limiter().clock.now();
                    }
                    let future = service.call(request);
                    *this.permit = Some(permit);
                    this.state.set(State::Called { future });
                }
                StateProj::Shed { error } => {
                    let error = error.take();
                    this.state.set(State::Done);
                    return Poll::Ready(match error {
                        Some(e) => Err(e.into()),
                        None => unreachable!("a shed call holds its error until polled"),
                    });
                }
                StateProj::Done => panic!("fusebox_limit::ResponseFuture polled after completion"),
            }
        }
    }
}

/// Classifies the outcome for an adaptive limit and decides who gives the permit back.
fn finish<ResB, E, C>(
    result: Result<Response<ResB>, E>,
    permit: Option<Permit<C>>,
    meta: Option<CallMeta>,
    start: Nanos,
) -> Result<Response<ResponseBody<ResB, C>>, BoxError>
where
    ResB: Body,
    E: Into<BoxError>,
    C: Classifier,
{
    match result {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let Some(permit) = permit else {
                unreachable!("a called future holds its permit")
            };
            let mut pending = None;
            if let Some(meta) = meta {
                let limiter = permit.limiter();
                let table = &limiter.table;
                let call = meta.call(table);
                let classifier = table.route(meta.route()).classifier();
                match classifier.classify_response(&call, parts.status, &parts.headers) {
                    Classified::Ready(verdict) => {
                        limiter.record_verdict(&meta, verdict, start, permit.in_flight());
                    }
                    Classified::AtEndOfStream => {
                        pending = Some(Pending {
                            limiter: Arc::clone(limiter),
                            in_flight: permit.in_flight(),
                            meta,
                            start,
                        });
                    }
                }
            }
            let hold = permit.limiter().release == Release::AtEndOfBody;
            let body = if hold {
                ClassifiedBody::new(body, Completion::new(Some(permit), pending))
            } else {
                drop(permit);
                match pending {
                    Some(p) => ClassifiedBody::new(body, Completion::new(None, Some(p))),
                    None => ClassifiedBody::passthrough(body),
                }
            };
            Ok(Response::from_parts(parts, body))
        }
        Err(error) => {
            let error: BoxError = error.into();
            if let (Some(meta), Some(permit)) = (meta, &permit) {
                let limiter = permit.limiter();
                let table = &limiter.table;
                let classifier = table.route(meta.route()).classifier();
                let verdict = classifier.classify_error(&meta.call(table), &*error);
                limiter.record_verdict(&meta, verdict, start, permit.in_flight());
            }
            drop(permit);
            Err(error)
        }
    }
}
