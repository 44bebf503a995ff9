//! The response body: gives the permit back at the end of the stream when asked to, and
//! classifies gRPC calls whose verdict is in the trailers.
//!
//! The body is always a [`ClassifiedBody`] so that the response type is one type whatever
//! the configuration; when there is nothing to do at the end of the stream it is a
//! pass-through.

use crate::limiter::{Limiter, Permit};
use fusebox_classify::{CallMeta, ClassifiedBody, Classifier, Nanos, OnEndOfStream, StreamEnd};
use std::fmt;
use std::sync::Arc;

/// The body of a [`ConcurrencyLimit`](crate::ConcurrencyLimit)'s responses.
pub type ResponseBody<B, C> = ClassifiedBody<B, Completion<C>>;

/// What a [`ResponseBody`] does when its stream ends, fails or is dropped: record the
/// call's verdict if it was waiting for the trailers (a drop of the body records nothing:
/// the caller cancelled), then give the permit back if the body held it.
pub struct Completion<C> {
    permit: Option<Permit<C>>,
    pending: Option<Pending<C>>,
}

/// A verdict to be taken at the end of the stream.
pub(crate) struct Pending<C> {
    pub(crate) limiter: Arc<Limiter<C>>,
    pub(crate) meta: CallMeta,
    pub(crate) start: Nanos,
    pub(crate) in_flight: usize,
}

impl<C> Completion<C> {
    pub(crate) fn new(permit: Option<Permit<C>>, pending: Option<Pending<C>>) -> Self {
        Completion { permit, pending }
    }
}

impl<C> fmt::Debug for Completion<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("holds_permit", &self.permit.is_some())
            .field("awaits_trailers", &self.pending.is_some())
            .finish()
    }
}

impl<C: Classifier> OnEndOfStream for Completion<C> {
    fn on_end(self, end: StreamEnd<'_>) {
        if let Some(p) = self.pending {
            let table = &p.limiter.table;
            let call = p.meta.call(table);
            let classifier = table.route(p.meta.route()).classifier();
            let verdict = match end {
                StreamEnd::Trailers(trailers) => Some(classifier.classify_eos(&call, trailers)),
                StreamEnd::Error(error) => Some(classifier.classify_error(&call, error)),
                StreamEnd::Dropped => None,
            };
            if let Some(verdict) = verdict {
                p.limiter
                    .record_verdict(&p.meta, verdict, p.start, p.in_flight);
            }
        }
        // Given back after the verdict, so a waiter is admitted under the updated limit.
        drop(self.permit);
    }
}
