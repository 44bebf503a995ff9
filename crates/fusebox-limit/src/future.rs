//! The response future: waits in the queue if it has to, calls the inner service, and
//! hands the permit to the response body or gives it back.

use crate::adaptive::CallInfo;
use crate::body::{Completion, Pending, ResponseBody};
use crate::config::Release;
use crate::limiter::{Permit, Shed, Ticket};
use fusebox_classify::error::Overloaded;
use fusebox_classify::{BoxError, Classified, ClassifiedBody, Classifier};
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
    call: Option<CallInfo>,
}

#[pin_project(project = StateProj)]
enum State<S, B, C>
where
    S: Service<Request<B>>,
{
    Called {
        #[pin]
        future: S::Future,
    },
    // Boxed: a waiting call carries its request, the ready service and a timer, which would
    // triple the size of every future (and the bytes every healthy call moves around). One
    // allocation for a call that has to wait anyway is the better trade (benches/limit.rs).
    Queued {
        waiter: Pin<Box<Waiter<S, B, C>>>,
    },
    Shed {
        error: Option<Overloaded>,
    },
    Done,
}

/// A call waiting for a permit.
#[pin_project(project = WaiterProj)]
struct Waiter<S, B, C> {
    ticket: Ticket<C>,
    deadline: Instant,
    #[pin]
    sleep: Option<Sleep>,
    service: Option<S>,
    request: Option<Request<B>>,
}

impl<S, B, C> ResponseFuture<S, B, C>
where
    S: Service<Request<B>>,
{
    pub(crate) fn called(future: S::Future, permit: Permit<C>, call: Option<CallInfo>) -> Self {
        ResponseFuture {
            state: State::Called { future },
            permit: Some(permit),
            call,
        }
    }

    pub(crate) fn queued(
        ticket: Ticket<C>,
        deadline: Instant,
        service: S,
        request: Request<B>,
        call: Option<CallInfo>,
    ) -> Self {
        ResponseFuture {
            state: State::Queued {
                waiter: Box::pin(Waiter {
                    ticket,
                    deadline,
                    sleep: None,
                    service: Some(service),
                    request: Some(request),
                }),
            },
            permit: None,
            call,
        }
    }

    pub(crate) fn shed(error: Overloaded) -> Self {
        ResponseFuture {
            state: State::Shed { error: Some(error) },
            permit: None,
            call: None,
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

    // The admitted path is small and inlined into the caller (as tower's futures are):
    // what it moves, the compiler can then move once. Waiting and shedding live apart.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let StateProj::Called { future } = this.state.as_mut().project() {
                // The spent inner future stays until this one is dropped, as in tower's
                // futures: replacing it here would cost every call a drop and a copy.
                let result = ready!(future.poll(cx));
                return Poll::Ready(finish(result, this.permit, this.call.take()));
            }
            ready!(admit(this.state.as_mut(), this.permit, this.call, cx))?;
        }
    }
}

/// Drives a call that is not admitted yet: waits for its permit (then calls the inner
/// service and leaves the state `Called`), or fails with why it was shed.
#[inline(never)]
fn admit<S, B, C>(
    mut state: Pin<&mut State<S, B, C>>,
    slot: &mut Option<Permit<C>>,
    call: &mut Option<CallInfo>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), BoxError>>
where
    S: Service<Request<B>>,
{
    match state.as_mut().project() {
        StateProj::Called { .. } => Poll::Ready(Ok(())),
        StateProj::Queued { waiter } => {
            let WaiterProj {
                ticket,
                deadline,
                mut sleep,
                service,
                request,
            } = waiter.as_mut().project();
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
                            state.set(State::Done);
                            return Poll::Ready(Err(error.into()));
                        }
                    }
                }
            };
            let (Some(mut service), Some(request)) = (service.take(), request.take()) else {
                unreachable!("a queued call holds its service and request until admitted")
            };
            if let Some(call) = call.as_mut() {
                call.admitted(permit.limiter().clock.now());
            }
            let future = service.call(request);
            *slot = Some(permit);
            state.set(State::Called { future });
            Poll::Ready(Ok(()))
        }
        StateProj::Shed { error } => {
            let error = error.take();
            state.set(State::Done);
            Poll::Ready(match error {
                Some(e) => Err(e.into()),
                None => unreachable!("a shed call holds its error until polled"),
            })
        }
        StateProj::Done => panic!("fusebox_limit::ResponseFuture polled after completion"),
    }
}

/// Classifies the outcome for an adaptive limit and decides who gives the permit back.
///
/// The permit is released in place (not moved around) on the common path: every byte a
/// healthy call moves shows in the benchmarks.
#[inline]
fn finish<ResB, E, C>(
    result: Result<Response<ResB>, E>,
    permit: &mut Option<Permit<C>>,
    call: Option<CallInfo>,
) -> Result<Response<ResponseBody<ResB, C>>, BoxError>
where
    ResB: Body,
    E: Into<BoxError>,
    C: Classifier,
{
    let hold = match permit {
        Some(p) => p.limiter().release == Release::AtEndOfBody,
        // The permit is taken with the result: only a second poll finds it gone.
        None => panic!("fusebox_limit::ResponseFuture polled after completion"),
    };
    match result {
        Ok(response) if call.is_none() && !hold => {
            *permit = None;
            Ok(response.map(ClassifiedBody::passthrough))
        }
        Ok(response) => Ok(classify(response, permit, call, hold)),
        Err(error) => Err(fail(error.into(), permit, call)),
    }
}

/// A failed call: classified for an adaptive limit, and its permit given back.
#[cold]
#[inline(never)]
fn fail<C: Classifier>(
    error: BoxError,
    permit: &mut Option<Permit<C>>,
    call: Option<CallInfo>,
) -> BoxError {
    if let (Some(call), Some(p)) = (call, permit.as_ref()) {
        let limiter = p.limiter();
        let verdict = call.classify(limiter, |c, call| c.classify_error(call, &*error));
        call.record(limiter, verdict);
    }
    *permit = None;
    error
}

/// The response of an adaptive call, or of one whose body holds the permit.
#[inline(never)]
fn classify<ResB, C>(
    response: Response<ResB>,
    slot: &mut Option<Permit<C>>,
    call: Option<CallInfo>,
    hold: bool,
) -> Response<ResponseBody<ResB, C>>
where
    ResB: Body,
    C: Classifier,
{
    let Some(permit) = slot.take() else {
        unreachable!("a called future holds its permit")
    };
    let (parts, body) = response.into_parts();
    let mut at_end = None;
    if let Some(call) = call {
        let limiter = permit.limiter();
        let classified = call.classify(limiter, |c, call| {
            c.classify_response(call, parts.status, &parts.headers)
        });
        match classified {
            Classified::Ready(verdict) => call.record(limiter, verdict),
            Classified::AtEndOfStream => at_end = Some(call),
        }
    }
    let body = match (at_end, hold) {
        (None, false) => {
            drop(permit);
            ClassifiedBody::passthrough(body)
        }
        (None, true) => ClassifiedBody::new(body, Completion::release(permit)),
        (Some(call), hold) => {
            let lane = Arc::clone(permit.lane());
            let permit = if hold {
                Some(permit)
            } else {
                drop(permit);
                None
            };
            let pending = Pending { lane, permit, call };
            ClassifiedBody::new(body, Completion::record(pending))
        }
    };
    Response::from_parts(parts, body)
}
