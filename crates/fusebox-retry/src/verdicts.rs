//! Where a retry layer takes each attempt's verdict from.
//!
//! A [`Retry`](crate::Retry) classifies every attempt's answer with its route's
//! classifier ([`Classify`], the default). Around fusebox's stage runner
//! ([`fusebox_classify::stage::Staged`]) — the `Policy`'s breaker, limit and timeout —
//! the stages have classified the answer already: a retry built to read their verdict
//! ([`FromStages`]) takes it from the attempt's future when it is the same table's
//! verdict for the same route, and classifies only when it is not (or no stage judged
//! the answer). A verdict it classified itself it offers
//! ([`fusebox_classify::verdict::offer`]) to whatever collects verdicts around it (the
//! `Policy`'s call span and exposed verdict). What it makes of the verdict is its own
//! either way: fusebox's rejections are never retried.

use fusebox_classify::Judgement;
use fusebox_classify::stage::Judged;

/// Where a retry takes an attempt's verdict from: [`Classify`] or [`FromStages`].
pub trait AttemptVerdicts<F>: 'static {
    /// Whether the attempt's future is kept, done, until the call's future is dropped, so
    /// that the verdict on the answer handed on can be read from it
    /// ([`ResponseFuture::judgement`](crate::future::ResponseFuture::judgement)).
    const KEEPS_ANSWERED: bool;

    /// The verdict on the answer the attempt's future completed with, if it knows one.
    fn judgement(attempt: &F) -> Option<Judgement>;
}

/// The retry classifies every answer itself (the default).
#[derive(Debug, Clone, Copy)]
pub enum Classify {}

impl<F> AttemptVerdicts<F> for Classify {
    const KEEPS_ANSWERED: bool = false;

    #[inline(always)]
    fn judgement(_: &F) -> Option<Judgement> {
        None
    }
}

/// The retry reads the verdict the stages under it gave the answer
/// ([`Judged`]), and classifies only when they gave none for its table and route.
#[derive(Debug, Clone, Copy)]
pub enum FromStages {}

impl<F: Judged> AttemptVerdicts<F> for FromStages {
    const KEEPS_ANSWERED: bool = true;

    #[inline(always)]
    fn judgement(attempt: &F) -> Option<Judgement> {
        attempt.judgement()
    }
}
