//! Errors of the retry layer.
//!
//! The layer's error type is [`BoxError`]. It passes the inner service's errors through
//! unchanged. It adds two: [`BodyExceedsSizeHint`] (its own) and fusebox's shared
//! [`DeadlineExceeded`], for a request whose deadline had passed before anything was sent.
//! fusebox's shared errors are re-exported here for callers that downcast.
//!
//! When the budget or the cut-off refuses a retry the layer does **not** wrap anything in
//! [`BudgetExhausted`]: the caller gets the last attempt's own answer, the response or the
//! error as the dependency gave it. Wrapping would hide the dependency's real failure (and
//! fusebox's classifier counts `BudgetExhausted` as ignored, so an outer circuit breaker
//! would stop seeing the failures). Refusals are visible in the metrics and in `tracing`.

use std::fmt;

pub use fusebox_classify::error::{
    BoxError, BudgetExhausted, CircuitOpen, DeadlineExceeded, Elapsed, Overloaded,
};

/// A request body yielded more bytes than its size hint promised, while the retry layer
/// was buffering it for replay. The body broke the `http_body::Body` contract; the request
/// was not sent.
#[derive(Debug, Clone)]
pub struct BodyExceedsSizeHint {
    limit: u64,
}

impl BodyExceedsSizeHint {
    /// A body that went past `limit` bytes.
    pub fn new(limit: u64) -> Self {
        BodyExceedsSizeHint { limit }
    }

    /// The number of bytes the body went past.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl fmt::Display for BodyExceedsSizeHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request body is longer than its size hint of at most {} bytes",
            self.limit
        )
    }
}

impl std::error::Error for BodyExceedsSizeHint {}

/// Whether `error` (or any error in its `source()` chain) is a rejection, which the retry
/// layer never retries: a breaker that is open, a concurrency limit that shed the call
/// (fusebox's, or tower's `load_shed`), a deadline already spent, or an inner retry layer
/// whose budget is spent (retrying it would multiply attempts across layers). See
/// [`ErrorKind::is_rejection`](fusebox_classify::ErrorKind::is_rejection).
pub(crate) fn is_fusebox_rejection(error: &(dyn std::error::Error + 'static)) -> bool {
    fusebox_classify::ErrorKind::of(error).is_rejection()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug)]
    struct Wrap(BoxError);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn rejections_are_found_in_the_chain() {
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert!(is_fusebox_rejection(&open));
        assert!(is_fusebox_rejection(&Wrap(Box::new(open))));
        assert!(is_fusebox_rejection(&Overloaded::new(1, Duration::ZERO)));
        assert!(is_fusebox_rejection(&DeadlineExceeded::new()));
        let tower_shed = fusebox_classify::error::TowerOverloaded::new();
        assert!(is_fusebox_rejection(&Wrap(Box::new(tower_shed))));
        let tower_timeout = fusebox_classify::error::TowerElapsed::new();
        assert!(!is_fusebox_rejection(&Wrap(Box::new(tower_timeout))));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!is_fusebox_rejection(&io));
        assert!(!is_fusebox_rejection(&Elapsed::new(
            "r".into(),
            Duration::ZERO
        )));
        assert_eq!(
            BodyExceedsSizeHint::new(10).to_string(),
            "request body is longer than its size hint of at most 10 bytes"
        );
    }
}
