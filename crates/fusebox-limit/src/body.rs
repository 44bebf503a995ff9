//! The response body: gives the permit back at the end of the stream when asked to, and
//! classifies gRPC calls whose verdict is in the trailers.
//!
//! The body is always a [`ClassifiedBody`] so that the response type is one type whatever
//! the configuration; when there is nothing to do at the end of the stream it is a
//! pass-through.

use crate::adaptive::CallInfo;
use crate::limiter::{Lane, Permit};
use fusebox_classify::{ClassifiedBody, Classifier, OnEndOfStream, SharedVerdict, StreamEnd};
use std::fmt;
use std::sync::Arc;

/// The body of a [`ConcurrencyLimit`](crate::ConcurrencyLimit)'s responses.
pub type ResponseBody<B, C> = ClassifiedBody<B, Completion<C>>;

/// What a [`ResponseBody`] does when its stream ends, fails or is dropped: record the
/// call's verdict if it was waiting for the trailers (a drop of the body records nothing:
/// the caller cancelled), then give the permit back if the body held it.
///
/// Two words: the body it sits in is moved with every response.
pub struct Completion<C>(Kind<C>);

enum Kind<C> {
    /// Give the permit back (by dropping it).
    Release(#[allow(dead_code, reason = "held for its Drop")] Permit<C>),
    /// Classify from the trailers (adaptive limits, gRPC), then give the permit back if
    /// there is one. Boxed: rare, and it would double the size of every response.
    Record(Box<Pending<C>>),
}

/// A verdict to be taken at the end of the stream.
pub(crate) struct Pending<C> {
    pub(crate) lane: Arc<Lane<C>>,
    pub(crate) permit: Option<Permit<C>>,
    pub(crate) call: CallInfo,
}

impl<C> Completion<C> {
    pub(crate) fn release(permit: Permit<C>) -> Self {
        Completion(Kind::Release(permit))
    }

    pub(crate) fn record(pending: Pending<C>) -> Self {
        Completion(Kind::Record(Box::new(pending)))
    }
}

impl<C> fmt::Debug for Completion<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (holds_permit, awaits_trailers) = match &self.0 {
            Kind::Release(_) => (true, false),
            Kind::Record(p) => (p.permit.is_some(), true),
        };
        f.debug_struct("Completion")
            .field("holds_permit", &holds_permit)
            .field("awaits_trailers", &awaits_trailers)
            .finish()
    }
}

impl<C: Classifier> OnEndOfStream for Completion<C> {
    fn on_end(self, end: StreamEnd<'_>) {
        self.on_end_shared(end, &SharedVerdict::new());
    }

    fn on_end_shared(self, end: StreamEnd<'_>, shared: &SharedVerdict) {
        let Kind::Record(pending) = self.0 else {
            // Dropping the permit gives it back.
            return;
        };
        let Pending { lane, permit, call } = *pending;
        let limiter = lane.limiter();
        let verdict = match end {
            StreamEnd::Trailers(trailers) => {
                Some(call.verdict_shared(limiter, shared, |c, call| c.classify_eos(call, trailers)))
            }
            StreamEnd::Error(error) => {
                Some(call.verdict_shared(limiter, shared, |c, call| c.classify_error(call, error)))
            }
            StreamEnd::Dropped => None,
        };
        if let Some(verdict) = verdict {
            call.record(limiter, verdict);
        }
        // Given back after the verdict, so a waiter is admitted under the updated limit.
        drop(permit);
    }
}
