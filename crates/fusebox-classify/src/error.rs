//! fusebox's own errors, shared by every layer so that each can recognise the others'.
//!
//! They are opaque structs with lowercase messages and accessors, and travel as
//! [`BoxError`]: callers downcast (`err.downcast_ref::<CircuitOpen>()`) rather than match
//! nested enums. They live in this crate, below every layer, so that the classifier and
//! every layer can recognise them without depending on one another.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The error type that crosses fusebox's service boundaries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A circuit breaker rejected the call without sending it.
#[derive(Debug, Clone)]
pub struct CircuitOpen {
    breaker: Arc<str>,
    key: Option<Arc<str>>,
    retry_after: Duration,
    half_open: bool,
}

impl CircuitOpen {
    /// A rejection by `breaker` (and `key`, for keyed breakers); the caller may try again
    /// after `retry_after`. `half_open` says the breaker was probing and its probe budget
    /// was taken.
    pub fn new(
        breaker: Arc<str>,
        key: Option<Arc<str>>,
        retry_after: Duration,
        half_open: bool,
    ) -> Self {
        CircuitOpen {
            breaker,
            key,
            retry_after,
            half_open,
        }
    }

    /// The breaker's name.
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// The key of a keyed breaker.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// How long until the breaker may let a call through again. While half-open (probes in
    /// flight, see [`is_half_open`](CircuitOpen::is_half_open)) this is a short hint: the
    /// probes may close the breaker at any moment.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// Whether the breaker was half-open (probing) rather than open.
    pub fn is_half_open(&self) -> bool {
        self.half_open
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.half_open {
            "half-open, probes taken"
        } else {
            "open"
        };
        write!(f, "circuit breaker `{}`", self.breaker)?;
        if let Some(key) = &self.key {
            write!(f, " for `{key}`")?;
        }
        write!(
            f,
            " is {state}; retry after {} ms",
            self.retry_after.as_millis()
        )
    }
}

impl std::error::Error for CircuitOpen {}

/// A concurrency limit was full and the call was shed.
#[derive(Debug, Clone)]
pub struct Overloaded {
    limit: usize,
    retry_after: Duration,
}

impl Overloaded {
    /// A rejection by a limit of `limit` concurrent calls; `retry_after` is a hint.
    pub fn new(limit: usize, retry_after: Duration) -> Self {
        Overloaded { limit, retry_after }
    }

    /// The limit that was full.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// When trying again may succeed.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "concurrency limit of {} reached; request shed",
            self.limit
        )
    }
}

impl std::error::Error for Overloaded {}

/// A call took longer than its timeout (or its deadline ran out while it was in flight).
#[derive(Debug, Clone)]
pub struct Elapsed {
    route: Arc<str>,
    limit: Duration,
}

impl Elapsed {
    /// A call on `route` that did not finish within `limit`.
    pub fn new(route: Arc<str>, limit: Duration) -> Self {
        Elapsed { route, limit }
    }

    /// The route whose timeout fired.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// The timeout that fired.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request on `{}` timed out after {} ms",
            self.route,
            self.limit.as_millis()
        )
    }
}

impl std::error::Error for Elapsed {}

/// The caller's deadline had already passed before the call was sent.
#[derive(Debug, Clone, Default)]
pub struct DeadlineExceeded(());

impl DeadlineExceeded {
    /// The error.
    pub fn new() -> Self {
        DeadlineExceeded(())
    }
}

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline exceeded before the request was sent")
    }
}

impl std::error::Error for DeadlineExceeded {}

/// A retry was wanted but the retry budget had nothing left (the last attempt's error is
/// its source).
#[derive(Debug)]
pub struct BudgetExhausted {
    last: BoxError,
}

impl BudgetExhausted {
    /// Wraps the last attempt's error.
    pub fn new(last: BoxError) -> Self {
        BudgetExhausted { last }
    }

    /// The last attempt's error.
    pub fn into_last(self) -> BoxError {
        self.last
    }
}

impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("retry budget exhausted")
    }
}

impl std::error::Error for BudgetExhausted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase_and_informative() {
        let open = CircuitOpen::new(
            "fraud".into(),
            Some("eu-1".into()),
            Duration::from_secs(3),
            false,
        );
        assert_eq!(
            open.to_string(),
            "circuit breaker `fraud` for `eu-1` is open; retry after 3000 ms"
        );
        assert_eq!(open.breaker(), "fraud");
        assert_eq!(open.key(), Some("eu-1"));
        let boxed: BoxError = Box::new(open);
        assert!(boxed.downcast_ref::<CircuitOpen>().is_some());
        assert_eq!(
            Overloaded::new(10, Duration::from_millis(5)).to_string(),
            "concurrency limit of 10 reached; request shed"
        );
        assert_eq!(
            Elapsed::new("GET /a".into(), Duration::from_millis(250)).to_string(),
            "request on `GET /a` timed out after 250 ms"
        );
        let exhausted = BudgetExhausted::new(Box::new(DeadlineExceeded::new()));
        assert!(std::error::Error::source(&exhausted).is_some());
    }
}
