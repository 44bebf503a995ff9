//! The policy's circuit breaker, concurrency limit and timeout as one stage, run by the
//! one stage runner ([`fusebox_classify::stage`]).
//!
//! Stacked as three tower services, the three layers each take the request by value and
//! move it on, each build a future around the next one's, and the breaker and the limit
//! each wrap the response body for their end-of-stream bookkeeping — so every healthy call
//! moves the request three times and the response twice, and nests three futures. What each
//! layer *decides* per call is small next to that. A policy runs the three layers' own
//! stages — [`BreakerStage`] (or [`KeyedStage`]), [`LimitStage`], [`TimeoutStage`] — as one
//! tuple in one future and one body wrapper, in the order the stack would have used them:
//!
//! 1. the breaker admits or rejects ([`CircuitOpen`](crate::error::CircuitOpen); nothing
//!    else happens);
//! 2. the limit admits, queues (the call waits in its future, as in the limit's own) or
//!    sheds ([`Overloaded`](crate::error::Overloaded), which the breaker then classifies);
//! 3. the timeout bounds the call from the moment it is sent (after any wait in the
//!    queue), or refuses it if the caller's deadline has passed;
//! 4. the answer — response head or error — is told to the limit, then to the breaker, as
//!    the stacked layers would see it, and classified once for both (and for the retry
//!    around them: [`SharedVerdict`]); a verdict that
//!    waits for the trailers travels in the one body wrapper, which tells both at the end
//!    of the stream, the trailers classified once.
//!
//! A keyed breaker with a [`key_spread`](crate::PolicyBuilder::key_spread) has a
//! dependency-wide breaker too, gated by the keys' spread. It is not a stage of its own
//! but runs in the keyed breaker's guards
//! ([`gate_keys`](fusebox_breaker::compose::gate_keys)), as when the two layers are
//! stacked by hand, the dependency-wide one outermost: it admits first (an open dependency
//! refuses without asking the keys), it is told each answer after the key's breaker (so
//! the keyed breaker has counted a failing key before the gate reads the spread), and a
//! refusal by a key's breaker reaches it as that error. One guard holds both breakers'
//! permits, and one recorder carries both to the end of the stream: as a stage of its own
//! it would need room for a second guard in every policy's future and a second recorder in
//! every policy's body, gated or not.
//!
//! These are the same stages the layers run alone
//! ([`CircuitBreaker`](crate::breaker::CircuitBreaker),
//! [`ConcurrencyLimit`](crate::limit::ConcurrencyLimit) and
//! [`Timeout`](crate::timeout::Timeout) are each the runner over one of them): there is one implementation of each layer's per-call logic.
//! An equivalence property test (`tests/tests/policy_equivalence.rs`, in the
//! `fusebox-tests` package) holds the policy to the stacked layers' behaviour.

use crate::policy::key::KeyBy;
use crate::policy::store::{BreakerStore, PolicyStore};
use fusebox_breaker::compose::{EosRecorder, Guard};
use fusebox_breaker::{BreakerStage, KeyedStage};
#[cfg(doc)]
use fusebox_classify::BoxError;
use fusebox_classify::context::Scope;
use fusebox_classify::stage::{
    Admit, Answer, Http, NoEnd, NoTimer, NoWait, Stage, Staged, StagedFuture,
};
use fusebox_classify::{ClassifiedBody, Classifier, SharedVerdict};
use fusebox_limit::{Completion, LimitStage};
use fusebox_timeout::TimeoutStage;
use http::Request;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The policy's breaker stage: one breaker, or one per key.
pub enum BreakerStages<C> {
    /// One breaker for the dependency.
    Single(BreakerStage<C, PolicyStore>),
    /// One breaker per key.
    Keyed(KeyedStage<KeyBy, C, BreakerStore>),
}

impl<C> fmt::Debug for BreakerStages<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerStages::Single(b) => b.fmt(f),
            BreakerStages::Keyed(b) => b.fmt(f),
        }
    }
}

impl<B, C: Classifier> Stage<Request<B>> for BreakerStages<C> {
    type Admitted = Option<Guard<C, PolicyStore>>;
    type Waiting = NoWait;
    type End = EosRecorder<C, PolicyStore>;
    type Timer = NoTimer;

    #[inline(always)]
    fn admit(&self, request: &mut Request<B>, scope: &mut Scope) -> Admit<Self::Admitted, NoWait> {
        match self {
            BreakerStages::Single(b) => b.admit(request, scope),
            BreakerStages::Keyed(b) => b.admit(request, scope),
        }
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut Request<B>,
        _: &mut Scope,
        _: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        match *waiting.get_mut() {}
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        // Both kinds of breaker answer the same way (a single breaker's guard is never
        // gated, and answers as the keyed stage's ungated guards do).
        <KeyedStage<KeyBy, C, BreakerStore> as Stage<Request<B>>>::on_answer(
            admitted, answer, verdict,
        )
    }
}

/// The stages a policy runs in one future: the breaker, then the limit, then the timeout,
/// each there or not. (A keyed breaker's dependency-wide gate runs inside the keyed
/// breaker's stage: see the [module docs](self).)
pub type PolicyStages<C> = (
    Option<BreakerStages<C>>,
    (Option<LimitStage<C>>, Option<TimeoutStage<C>>),
);

/// The circuit breaker, concurrency limit and timeout of a policy around `S`, as one
/// service (see the [module docs](self)): the stage runner over [`PolicyStages`].
///
/// Responses come back as `Response<GuardedBody<S's body, C>>`; errors as [`BoxError`],
/// fusebox's own ([`CircuitOpen`](crate::error::CircuitOpen),
/// [`Overloaded`](crate::error::Overloaded), [`Elapsed`](crate::error::Elapsed),
/// [`DeadlineExceeded`](crate::error::DeadlineExceeded)) or the inner service's.
pub type Guarded<S, C> = Staged<S, Arc<PolicyStages<C>>, Http>;

/// The future of [`Guarded`] around `S` called with `Request<R>`.
pub type GuardedFuture<S, R, C> = StagedFuture<S, Request<R>, Arc<PolicyStages<C>>, Http>;

/// What a response body still owes the limit and the breaker when its stream ends (the
/// limit is told first, as its body sat inside the breaker's in the stacked layers; a
/// keyed breaker's recorder tells its dependency-wide gate after the key's breaker).
pub type End<C> = (
    Option<(Option<NoEnd>, Option<Completion<C>>)>,
    Option<EosRecorder<C, PolicyStore>>,
);

/// The response body of [`Guarded`].
pub type GuardedBody<B, C> = ClassifiedBody<B, End<C>>;
