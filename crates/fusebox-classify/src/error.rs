//! fusebox's own errors, shared by every layer so that each can recognise the others'.
//!
//! They are opaque structs with lowercase messages and accessors, and travel as
//! [`BoxError`]: callers downcast (`err.downcast_ref::<CircuitOpen>()`) rather than match
//! nested enums. They live in this crate, below every layer, so that the classifier and
//! every layer can recognise them without depending on one another.
//!
//! # Recognising an error
//!
//! An error reaches a layer wrapped by whatever stood between it and the layer (a tower
//! `Buffer`, a client's own error type), so every place that asks "was this a rejection or
//! a timeout?" walks the `source()` chain. [`ErrorKind::of`] is that walk, written once: it
//! names the first error in the chain that fusebox knows — one of its own, tower's
//! `timeout` and `load_shed` errors (from a user's own tower layers; they mean what
//! [`Elapsed`] and [`Overloaded`] mean), or an `io::Error` — and every layer, the glue and
//! the CLI decide from it.

use std::error::Error;
use std::fmt;
use std::io;
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

impl BudgetExhausted {
    /// The last attempt's error, borrowed.
    pub fn last(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.last
    }
}

/// tower's load-shedding error (`tower::load_shed::LoadShed`), recognised as fusebox's
/// [`Overloaded`].
pub use tower::load_shed::error::Overloaded as TowerOverloaded;
/// tower's timeout error (`tower::timeout::Timeout`), recognised as fusebox's [`Elapsed`].
pub use tower::timeout::error::Elapsed as TowerElapsed;

/// Which of the errors fusebox knows an error is: the first one found in its `source()`
/// chain (see the [module docs](self)).
///
/// Non-exhaustive: fusebox may learn to recognise more errors, and a kind added here is not
/// a breaking change. A match outside this crate ends with a `_` arm, which decides for
/// [`Other`](ErrorKind::Other) and for kinds it does not know alike.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ErrorKind<'a> {
    /// A circuit breaker rejected the call without sending it.
    CircuitOpen(&'a CircuitOpen),
    /// fusebox's concurrency limit shed the call.
    Overloaded(&'a Overloaded),
    /// tower's `load_shed` shed the call (its inner service was not ready). Means what
    /// [`Overloaded`](ErrorKind::Overloaded) means; it carries no retry hint.
    TowerOverloaded(&'a TowerOverloaded),
    /// fusebox's timeout fired.
    Elapsed(&'a Elapsed),
    /// tower's `timeout` fired. Means what [`Elapsed`](ErrorKind::Elapsed) means.
    TowerElapsed(&'a TowerElapsed),
    /// The caller's deadline had passed before the call was sent.
    DeadlineExceeded(&'a DeadlineExceeded),
    /// A retry budget had nothing left (the last attempt's error is
    /// [`BudgetExhausted::last`]).
    BudgetExhausted(&'a BudgetExhausted),
    /// An I/O error: a transport failure (hyper and hyper-util carry theirs as a source).
    Io(&'a io::Error),
    /// None of the above anywhere in the chain.
    Other,
}

impl<'a> ErrorKind<'a> {
    /// The first error in `error`'s `source()` chain (`error` itself first) that is one of
    /// the kinds above; [`Other`](ErrorKind::Other) when there is none.
    pub fn of(error: &'a (dyn Error + 'static)) -> ErrorKind<'a> {
        let mut next = Some(error);
        while let Some(err) = next {
            if let Some(kind) = Self::one(err) {
                return kind;
            }
            next = err.source();
        }
        ErrorKind::Other
    }

    fn one(err: &'a (dyn Error + 'static)) -> Option<ErrorKind<'a>> {
        if let Some(e) = err.downcast_ref::<CircuitOpen>() {
            Some(ErrorKind::CircuitOpen(e))
        } else if let Some(e) = err.downcast_ref::<Overloaded>() {
            Some(ErrorKind::Overloaded(e))
        } else if let Some(e) = err.downcast_ref::<Elapsed>() {
            Some(ErrorKind::Elapsed(e))
        } else if let Some(e) = err.downcast_ref::<DeadlineExceeded>() {
            Some(ErrorKind::DeadlineExceeded(e))
        } else if let Some(e) = err.downcast_ref::<BudgetExhausted>() {
            Some(ErrorKind::BudgetExhausted(e))
        } else if let Some(e) = err.downcast_ref::<io::Error>() {
            Some(ErrorKind::Io(e))
        } else if let Some(e) = err.downcast_ref::<TowerElapsed>() {
            Some(ErrorKind::TowerElapsed(e))
        } else {
            err.downcast_ref::<TowerOverloaded>()
                .map(ErrorKind::TowerOverloaded)
        }
    }

    /// Whether a concurrency limit shed the call: fusebox's or tower's.
    pub fn is_overloaded(&self) -> bool {
        matches!(
            self,
            ErrorKind::Overloaded(_) | ErrorKind::TowerOverloaded(_)
        )
    }

    /// Whether a timeout fired: fusebox's or tower's.
    pub fn is_elapsed(&self) -> bool {
        matches!(self, ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_))
    }

    /// Whether this is one of the rejections made before the call reached the dependency:
    /// an open breaker, a shed call (fusebox's or tower's), a deadline already spent, or a
    /// spent retry budget.
    pub fn is_rejection(&self) -> bool {
        match self {
            ErrorKind::CircuitOpen(_)
            | ErrorKind::Overloaded(_)
            | ErrorKind::TowerOverloaded(_)
            | ErrorKind::DeadlineExceeded(_)
            | ErrorKind::BudgetExhausted(_) => true,
            ErrorKind::Elapsed(_)
            | ErrorKind::TowerElapsed(_)
            | ErrorKind::Io(_)
            | ErrorKind::Other => false,
        }
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

    #[derive(Debug)]
    struct Wrap(BoxError);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn kinds_are_found_anywhere_in_the_chain() {
        let kind = |e: BoxError| {
            let wrapped = Wrap(Wrap(e).into());
            let kind = format!("{:?}", ErrorKind::of(&wrapped));
            kind.split('(').next().unwrap_or("").to_owned()
        };
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert_eq!(kind(Box::new(open)), "CircuitOpen");
        assert_eq!(
            kind(Box::new(Overloaded::new(1, Duration::ZERO))),
            "Overloaded"
        );
        assert_eq!(kind(Box::new(TowerOverloaded::new())), "TowerOverloaded");
        assert_eq!(
            kind(Box::new(Elapsed::new("r".into(), Duration::ZERO))),
            "Elapsed"
        );
        assert_eq!(kind(Box::new(TowerElapsed::new())), "TowerElapsed");
        assert_eq!(kind(Box::new(DeadlineExceeded::new())), "DeadlineExceeded");
        assert_eq!(
            kind(Box::new(BudgetExhausted::new("x".into()))),
            "BudgetExhausted"
        );
        assert_eq!(kind(Box::new(io::Error::other("x"))), "Io");
        assert_eq!(kind("plain".into()), "Other");

        let tower_shed = TowerOverloaded::new();
        assert!(ErrorKind::of(&tower_shed).is_overloaded());
        assert!(ErrorKind::of(&tower_shed).is_rejection());
        let tower_timeout = TowerElapsed::new();
        assert!(ErrorKind::of(&tower_timeout).is_elapsed());
        assert!(!ErrorKind::of(&tower_timeout).is_rejection());
        // The first known error decides: a budget's wrapper before its last error.
        let exhausted = BudgetExhausted::new(Box::new(TowerElapsed::new()));
        match ErrorKind::of(&exhausted) {
            ErrorKind::BudgetExhausted(e) => assert!(ErrorKind::of(e.last()).is_elapsed()),
            other => panic!("{other:?}"),
        }
    }
}
