//! Admission as values: what [`ConcurrencyLimit::acquire`](crate::ConcurrencyLimit::acquire)
//! decides for one call, and what the call then owes the limit.
//!
//! The limit's stage ([`LimitStage`](crate::LimitStage)), which its own service and
//! fusebox's `Policy` run, is built from these; a caller can drive the limit by hand with
//! them too:
//!
//! - [`Acquire::Admitted`]: the call may go. Report its end with [`Admitted::on_response`]
//!   or [`Admitted::on_error`]; dropping it unreported (the call was cancelled) gives the
//!   permit back and counts nothing.
//! - [`Acquire::Queued`]: the limit is full and the call has a place in its queue. Poll
//!   [`Queued::poll_admit`] until it is admitted or shed (the queue's wait ran out).
//! - [`Acquire::Shed`]: the limit is full and the call cannot wait.
//!
//! # Example
//!
//! ```
//! use fusebox_limit::compose::Acquire;
//! use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};
//! use http::{HeaderMap, Request, StatusCode};
//! use std::time::Duration;
//! use tower::Layer;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let config = ConcurrencyLimitConfig::builder()
//!     .max_concurrency(1)
//!     .queue(1, Duration::from_millis(50))
//!     .build()?;
//! let layer = ConcurrencyLimitLayer::new(config);
//! let handle = layer.handle();
//! // The limit's decisions, without an inner service to call.
//! let limit = layer.layer(());
//! let request = Request::new(());
//!
//! let Acquire::Admitted(first) = limit.acquire(&request) else { unreachable!() };
//! assert_eq!(handle.in_flight(), 1);
//! // Full: the next call waits in the queue, the one after is shed.
//! let Acquire::Queued(queued) = limit.acquire(&request) else { unreachable!() };
//! assert!(matches!(limit.acquire(&request), Acquire::Shed(_)));
//!
//! // The first call's answer is in: its permit goes to the queued call.
//! assert!(first.on_response(StatusCode::OK, &HeaderMap::new()).is_none());
//! let mut queued = Box::pin(queued);
//! let second = std::future::poll_fn(|cx| queued.as_mut().poll_admit(cx)).await?;
//! assert_eq!(handle.in_flight(), 1);
//! drop(second); // cancelled: the permit goes back, nothing is counted
//! assert_eq!(handle.in_flight(), 0);
//! # Ok(())
//! # }
//! ```

use crate::adaptive::CallInfo;
use crate::body::{Completion, Pending};
use crate::config::Release;
use crate::limiter::{Permit, Shed, Ticket};
use fusebox_classify::error::Overloaded;
use fusebox_classify::{Classified, Classifier, SharedVerdict};
use http::{HeaderMap, StatusCode};
use pin_project::pin_project;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::{Instant, Sleep};

/// The limit's answer to one call.
///
/// Closed: a call goes now, waits, or is refused; there is no fourth answer to add.
#[derive(Debug)]
pub enum Acquire<C> {
    /// A permit: the call may go now.
    Admitted(Admitted<C>),
    /// No permit free: the call waits in the queue.
    Queued(Queued<C>),
    /// No permit free and no room to wait: the call is shed.
    Shed(Overloaded),
}

/// An admitted call's permit, and what an adaptive limit measures of it.
///
/// Dropped without [`on_response`](Self::on_response) or [`on_error`](Self::on_error), it
/// gives the permit back and counts nothing (the call was cancelled).
pub struct Admitted<C> {
    permit: Permit<C>,
    call: Option<CallInfo>,
}

impl<C> fmt::Debug for Admitted<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("permit", &self.permit)
            .field("adaptive", &self.call.is_some())
            .finish()
    }
}

impl<C: Classifier> Admitted<C> {
    #[inline]
    pub(crate) fn new(permit: Permit<C>, mut call: Option<CallInfo>) -> Self {
        if let Some(call) = call.as_mut() {
            call.admitted(permit.limiter().clock.now());
        }
        Admitted { permit, call }
    }

    /// Whether [`on_response`](Self::on_response) has nothing to classify and nothing to
    /// hand to the body: a fixed limit that does not expose its verdicts, whose permit goes
    /// back with the response head.
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.call.is_none() && self.permit.limiter().release != Release::AtEndOfBody
    }

    /// The response head is in: an adaptive limit classifies it (unless its verdict is in
    /// the trailers), and the permit goes back now, or at the end of the body if the
    /// limit releases there. The [`Completion`] returned, if any, must be run at the end
    /// of the response body (wrap the body in a
    /// [`ClassifiedBody`](fusebox_classify::ClassifiedBody) with it).
    #[inline]
    pub fn on_response(self, status: StatusCode, headers: &HeaderMap) -> Option<Completion<C>> {
        if self.is_plain() {
            return None;
        }
        self.classify(status, headers, &SharedVerdict::new())
    }

    /// [`on_response`](Self::on_response) for a limit that is not plain, the verdict
    /// asked of `shared` (the answer's, shared with the other stages that judge it).
    #[inline(never)]
    pub(crate) fn classify(
        self,
        status: StatusCode,
        headers: &HeaderMap,
        shared: &SharedVerdict,
    ) -> Option<Completion<C>> {
        let Admitted { permit, call } = self;
        let hold = permit.limiter().release == Release::AtEndOfBody;
        let mut at_end = None;
        if let Some(call) = call {
            let limiter = permit.limiter();
            let classified = call.classify_shared(limiter, shared, |c, call| {
                c.classify_response(call, status, headers)
            });
            if limiter.expose {
                shared.expose(&limiter.table);
            }
            match classified {
                Classified::Ready(verdict) => call.record(limiter, verdict),
                Classified::AtEndOfStream => at_end = Some(call),
            }
        }
        match (at_end, hold) {
            (None, false) => None,
            (None, true) => Some(Completion::release(permit)),
            (Some(call), hold) => {
                let lane = Arc::clone(permit.lane());
                let permit = hold.then_some(permit);
                Some(Completion::record(Pending { lane, permit, call }))
            }
        }
    }

    /// The call failed with `error` (before a response head): an adaptive limit
    /// classifies it; the permit goes back.
    #[cold]
    #[inline(never)]
    pub fn on_error(self, error: &(dyn Error + 'static)) {
        self.on_error_shared(error, &SharedVerdict::new());
    }

    /// [`on_error`](Self::on_error), the verdict asked of `shared`.
    #[cold]
    #[inline(never)]
    pub(crate) fn on_error_shared(self, error: &(dyn Error + 'static), shared: &SharedVerdict) {
        if let Some(call) = self.call {
            let limiter = self.permit.limiter();
            let verdict =
                call.verdict_shared(limiter, shared, |c, call| c.classify_error(call, error));
            call.record(limiter, verdict);
        }
    }
}

/// A call waiting in the limit's queue for a permit, until its wait runs out.
///
/// Dropping it withdraws from the queue (or gives back a permit granted in the meantime).
#[pin_project]
pub struct Queued<C> {
    ticket: Ticket<C>,
    deadline: Instant,
    #[pin]
    sleep: Option<Sleep>,
    call: Option<CallInfo>,
}

impl<C> fmt::Debug for Queued<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queued")
            .field("ticket", &self.ticket)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<C: Classifier> Queued<C> {
    pub(crate) fn new(ticket: Ticket<C>, deadline: Instant, call: Option<CallInfo>) -> Self {
        Queued {
            ticket,
            deadline,
            sleep: None,
            call,
        }
    }

    /// The permit once granted, or [`Overloaded`] (queue timeout) when the wait runs out
    /// first. Polled again after it answered, it stays pending.
    pub fn poll_admit(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Admitted<C>, Overloaded>> {
        let mut this = self.project();
        let permit = match this.ticket.poll(cx) {
            Poll::Ready(permit) => permit,
            Poll::Pending => {
                if this.sleep.is_none() {
                    this.sleep
                        .set(Some(tokio::time::sleep_until(*this.deadline)));
                }
                if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                // Out of time; a permit granted at the last moment still wins.
                match this.ticket.cancel() {
                    Some(permit) => permit,
                    None => {
                        return Poll::Ready(Err(this.ticket.limiter().shed(Shed::QueueTimeout)));
                    }
                }
            }
        };
        Poll::Ready(Ok(Admitted::new(permit, this.call.take())))
    }
}
