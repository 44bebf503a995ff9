//! The errors a [`Timeout`](crate::Timeout) adds, shared with every fusebox layer.
//!
//! They are defined in `fusebox-classify`, below every layer, so that the classifier, the
//! breaker and the retry layer recognise them without depending on this crate:
//! [`Elapsed`] counts as a failure (retryable), [`DeadlineExceeded`] as ignored (the call
//! was never sent). Both travel as [`BoxError`]; downcast to tell them apart.

pub use fusebox_classify::BoxError;
pub use fusebox_classify::error::{DeadlineExceeded, Elapsed};
