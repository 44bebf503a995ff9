//! The breaker's response future.

use crate::breaker::{EosRecorder, Guard};
use crate::store::Store;
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::{BoxError, ClassifiedBody, Classifier};
use http::Response;
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// The response body of a breaker-wrapped service: the inner body, reporting the call's
/// verdict at the end of the stream when the response head could not decide it (gRPC).
pub type ResponseBody<B, C, St> = ClassifiedBody<B, EosRecorder<C, St>>;

/// The future of [`CircuitBreaker`](crate::CircuitBreaker): the inner call, or a rejection.
#[pin_project]
pub struct ResponseFuture<F, C: Classifier, St: Store> {
    #[pin]
    kind: Kind<F, C, St>,
}

#[pin_project(project = KindProj)]
enum Kind<F, C: Classifier, St: Store> {
    Called {
        #[pin]
        future: F,
        guard: Option<Guard<C, St>>,
    },
    Rejected {
        /// Taken by the poll that returns it.
        error: Option<CircuitOpen>,
    },
}

impl<F, C: Classifier, St: Store> fmt::Debug for ResponseFuture<F, C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Called { guard, .. } => f
                .debug_struct("ResponseFuture::Called")
                .field("guard", guard)
                .finish_non_exhaustive(),
            Kind::Rejected { error } => f
                .debug_struct("ResponseFuture::Rejected")
                .field("error", error)
                .finish(),
        }
    }
}

impl<F, C: Classifier, St: Store> ResponseFuture<F, C, St> {
    pub(crate) fn called(future: F, guard: Guard<C, St>) -> Self {
        ResponseFuture {
            kind: Kind::Called {
                future,
                guard: Some(guard),
            },
        }
    }

    pub(crate) fn rejected(error: CircuitOpen) -> Self {
        ResponseFuture {
            kind: Kind::Rejected { error: Some(error) },
        }
    }
}

impl<F, B, E, C, St> Future for ResponseFuture<F, C, St>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: Body,
    C: Classifier,
    St: Store,
{
    type Output = Result<Response<ResponseBody<B, C, St>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Rejected { error } => match error.take() {
                Some(error) => Poll::Ready(Err(Box::new(error))),
                None => panic!("fusebox_breaker::ResponseFuture polled after completion"),
            },
            KindProj::Called { future, guard } => {
                let result = ready!(future.poll(cx));
                // The healthy path classifies the response where it lies and moves it only
                // once, into the output: a response head is over a hundred bytes, and each
                // extra move of it costs more than the breaker's own bookkeeping.
                if let (Ok(response), Some(g)) = (&result, guard.as_mut()) {
                    match g.classify_response(response.status(), response.headers()) {
                        Some(verdict) => {
                            g.finish_in_place(verdict);
                            *guard = None;
                        }
                        None => {
                            if let Some(recorder) = guard.take().map(Guard::at_end_of_stream) {
                                return Poll::Ready(
                                    result
                                        .map(|r| ClassifiedBody::for_response(r, recorder))
                                        .map_err(Into::into),
                                );
                            }
                        }
                    }
                }
                Poll::Ready(match result {
                    Ok(response) => Ok(response.map(ClassifiedBody::passthrough)),
                    Err(error) => {
                        let error: BoxError = error.into();
                        // `None`: polled again after completion; pass the error on unrecorded.
                        if let Some(guard) = guard.take() {
                            let verdict = guard.classify_error(&*error);
                            guard.finish(verdict);
                        }
                        Err(error)
                    }
                })
            }
        }
    }
}
