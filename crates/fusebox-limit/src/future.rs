//! The response future: waits in the queue if it has to, calls the inner service, and
//! hands the permit to the response body or gives it back.

use crate::admission::{Admitted, Dequeued, Queued, Waiting};
use crate::body::ResponseBody;
use fusebox_classify::error::Overloaded;
use fusebox_classify::{BoxError, ClassifiedBody, Classifier};
use http::{Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
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
    admitted: Option<Admitted<C>>,
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
        waiter: Pin<Box<Waiting<S, B, C>>>,
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
    #[inline]
    pub(crate) fn called(future: S::Future, admitted: Admitted<C>) -> Self {
        ResponseFuture {
            state: State::Called { future },
            admitted: Some(admitted),
        }
    }

    pub(crate) fn queued(queued: Queued<C>, service: S, request: Request<B>) -> Self {
        ResponseFuture {
            state: State::Queued {
                waiter: Box::pin(Waiting::new(queued, service, request)),
            },
            admitted: None,
        }
    }

    pub(crate) fn shed(error: Overloaded) -> Self {
        ResponseFuture {
            state: State::Shed { error: Some(error) },
            admitted: None,
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
            .field("admitted", &self.admitted)
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
                let Some(admitted) = this.admitted.take() else {
                    panic!("fusebox_limit::ResponseFuture polled after completion")
                };
                return Poll::Ready(finish(result, admitted));
            }
            ready!(admit(this.state.as_mut(), this.admitted, cx))?;
        }
    }
}

/// Drives a call that is not admitted yet: waits for its permit (then calls the inner
/// service and leaves the state `Called`), or fails with why it was shed.
#[inline(never)]
fn admit<S, B, C>(
    mut state: Pin<&mut State<S, B, C>>,
    slot: &mut Option<Admitted<C>>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), BoxError>>
where
    S: Service<Request<B>>,
    C: Classifier,
{
    match state.as_mut().project() {
        StateProj::Called { .. } => Poll::Ready(Ok(())),
        StateProj::Queued { waiter } => {
            let Dequeued {
                admitted,
                mut service,
                request,
            } = match ready!(waiter.as_mut().poll_admit(cx)) {
                Ok(dequeued) => dequeued,
                Err(error) => {
                    state.set(State::Done);
                    return Poll::Ready(Err(error.into()));
                }
            };
            let future = service.call(request);
            *slot = Some(admitted);
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

/// Reports the outcome to the limit and hands the body what it still owes it.
#[inline]
fn finish<ResB, E, C>(
    result: Result<Response<ResB>, E>,
    admitted: Admitted<C>,
) -> Result<Response<ResponseBody<ResB, C>>, BoxError>
where
    ResB: Body,
    E: Into<BoxError>,
    C: Classifier,
{
    match result {
        Ok(response) if admitted.is_plain() => {
            drop(admitted);
            Ok(response.map(ClassifiedBody::passthrough))
        }
        Ok(response) => {
            let completion = admitted.on_response(response.status(), response.headers());
            Ok(match completion {
                Some(completion) => ClassifiedBody::for_response(response, completion),
                None => response.map(ClassifiedBody::passthrough),
            })
        }
        Err(error) => {
            let error = error.into();
            admitted.on_error(&*error);
            Err(error)
        }
    }
}
