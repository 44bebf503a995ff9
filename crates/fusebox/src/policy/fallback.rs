//! Fallbacks: a response of the user's making in place of one of fusebox's own rejections.
//!
//! Fail fast is the default. A fallback must not fabricate a business truth — a cached
//! price may be fine, a made-up fraud score is not — so a fallback applies only to the
//! routes that opt in ([`Fallback::route`], [`Fallback::all_routes`]) and only to fusebox's
//! own rejections: an open breaker ([`CircuitOpen`]), a full concurrency limit
//! ([`Overloaded`]) and a timeout ([`Elapsed`]). Errors of the dependency itself reach the
//! caller unchanged unless [`Fallback::other_errors`] asks otherwise.
//!
//! Every fallback served is counted: `fusebox_policy_fallbacks_total{dependency, reason}`,
//! `dependency` being the policy's name.

use bytes::Bytes;
#[cfg(doc)]
use fusebox_classify::error::{CircuitOpen, Elapsed, Overloaded};
use fusebox_classify::series::{self, Family, Kind, Series, SeriesBuilder};
use fusebox_classify::{ErrorKind, RouteId};
use http::{Method, Response};
use metrics::Counter;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The counter of fallbacks served, labelled `dependency` (the policy's name) and `reason`.
pub const FALLBACKS_TOTAL: &str = "fusebox_policy_fallbacks_total";

/// The policy's own families (the fallbacks), with their labels and HELP text.
pub(crate) const FAMILIES: &[Family] = &[Family {
    name: FALLBACKS_TOTAL,
    kind: Kind::Counter,
    labels: &["dependency", "reason"],
    help: "Fallback responses a policy served in place of one of fusebox's rejections, by reason: circuit_open, overloaded, elapsed, other.",
}];

/// Why a fallback was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FallbackReason {
    /// The circuit breaker was open (or half-open with its probes taken).
    CircuitOpen,
    /// The concurrency limit was full.
    Overloaded,
    /// The call timed out.
    Elapsed,
    /// Any other error (only with [`Fallback::other_errors`]).
    Other,
}

impl FallbackReason {
    /// The reason's label in metrics: `circuit_open`, `overloaded`, `elapsed`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::CircuitOpen => "circuit_open",
            FallbackReason::Overloaded => "overloaded",
            FallbackReason::Elapsed => "elapsed",
            FallbackReason::Other => "other",
        }
    }

    /// The reason for an error: the first of fusebox's rejections in its `source()` chain
    /// ([`ErrorKind::of`]; tower's `load_shed` and `timeout` errors count as
    /// [`Overloaded`](FallbackReason::Overloaded) and [`Elapsed`](FallbackReason::Elapsed)),
    /// else [`Other`](FallbackReason::Other). A spent retry budget is judged by the last
    /// attempt's error.
    pub fn of(error: &(dyn Error + 'static)) -> FallbackReason {
        match ErrorKind::of(error) {
            ErrorKind::CircuitOpen(_) => FallbackReason::CircuitOpen,
            ErrorKind::Overloaded(_) | ErrorKind::TowerOverloaded(_) => FallbackReason::Overloaded,
            ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_) => FallbackReason::Elapsed,
            ErrorKind::BudgetExhausted(exhausted) => FallbackReason::of(exhausted.last()),
            // A passed deadline, an I/O error, anything else.
            _ => FallbackReason::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a fallback function is told about the call it stands in for.
#[derive(Debug)]
pub struct FallbackContext<'a> {
    pub(crate) policy: &'a str,
    pub(crate) route: &'a str,
    pub(crate) method: &'a Method,
    pub(crate) reason: FallbackReason,
    pub(crate) error: &'a (dyn Error + Send + Sync + 'static),
}

impl<'a> FallbackContext<'a> {
    /// The policy's name.
    pub fn policy(&self) -> &'a str {
        self.policy
    }

    /// The route's name in the route table (`"GET /price/{sku}"`, or `"default"`).
    pub fn route(&self) -> &'a str {
        self.route
    }

    /// The request method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// Why the call failed.
    pub fn reason(&self) -> FallbackReason {
        self.reason
    }

    /// The error the fallback replaces (downcast it for details, such as
    /// [`CircuitOpen::retry_after`]).
    pub fn error(&self) -> &'a (dyn Error + Send + Sync + 'static) {
        self.error
    }
}

type FallbackFn = dyn Fn(&FallbackContext<'_>) -> Response<Bytes> + Send + Sync;

/// A fallback: the function that makes the response, and where it applies.
///
/// ```
/// use bytes::Bytes;
/// use fusebox::{Fallback, FallbackReason};
/// use http::Response;
///
/// // A stale but harmless answer for the price route, when the breaker is open or the
/// // limit is full; timeouts still fail.
/// let fallback = Fallback::new(|ctx| {
///     Response::builder()
///         .header("x-fallback", ctx.reason().as_str())
///         .body(Bytes::from_static(b"{\"price\":null,\"stale\":true}"))
///         .expect("a valid response")
/// })
/// .route("GET /price/{sku}")
/// .reasons(&[FallbackReason::CircuitOpen, FallbackReason::Overloaded]);
/// # let _ = fallback;
/// ```
#[derive(Clone)]
pub struct Fallback {
    pub(crate) f: Arc<FallbackFn>,
    pub(crate) routes: Vec<String>,
    pub(crate) all_routes: bool,
    pub(crate) reasons: [bool; 4],
}

impl Fallback {
    /// A fallback made by `f`, for fusebox's three rejections, on no route yet: add routes
    /// with [`route`](Fallback::route) or [`all_routes`](Fallback::all_routes).
    pub fn new(
        f: impl Fn(&FallbackContext<'_>) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        Fallback {
            f: Arc::new(f),
            routes: Vec::new(),
            all_routes: false,
            reasons: [true, true, true, false],
        }
    }

    /// Applies on this route, named as in the route table (`"GET /price/{sku}"`, or
    /// `"default"` for calls that match no route). Unknown names are configuration errors.
    pub fn route(mut self, name: impl Into<String>) -> Self {
        self.routes.push(name.into());
        self
    }

    /// Applies on every route.
    pub fn all_routes(mut self) -> Self {
        self.all_routes = true;
        self
    }

    /// Applies only to these of fusebox's rejections (default: all three).
    pub fn reasons(mut self, reasons: &[FallbackReason]) -> Self {
        let other = self.reasons[FallbackReason::Other.index()];
        self.reasons = [false; 4];
        self.reasons[FallbackReason::Other.index()] = other;
        for r in reasons {
            self.reasons[r.index()] = true;
        }
        self
    }

    /// Also applies to every other error (the dependency's own failures, transport
    /// errors). Off by default: a fallback is for fusebox's rejections.
    pub fn other_errors(mut self, apply: bool) -> Self {
        self.reasons[FallbackReason::Other.index()] = apply;
        self
    }

    /// Whether the fallback applies to `reason`.
    pub fn applies_to(&self, reason: FallbackReason) -> bool {
        self.reasons[reason.index()]
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("routes", &self.routes)
            .field("all_routes", &self.all_routes)
            .field("reasons", &self.reasons)
            .finish_non_exhaustive()
    }
}

/// A fallback as a built policy holds it: routes resolved, counters registered.
pub(crate) struct Armed {
    pub(crate) fallback: Fallback,
    /// Indexed by route index.
    pub(crate) on_route: Box<[bool]>,
    counters: [Counter; 4],
    _series: Arc<Series>,
}

impl fmt::Debug for Armed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Armed")
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl Armed {
    /// Whether the fallback serves rejections of calls on `route`: a route it names, or
    /// any route, one added to the table since included, when it applies to all.
    #[inline]
    pub(crate) fn applies_on(&self, route: RouteId) -> bool {
        self.on_route
            .get(route.index())
            .copied()
            .unwrap_or(self.fallback.all_routes)
    }

    pub(crate) fn new(fallback: Fallback, on_route: Box<[bool]>, policy: &str) -> Self {
        crate::metrics::describe_policy();
        let b = SeriesBuilder::new(policy);
        let counter = |reason: FallbackReason| {
            b.counter(
                FALLBACKS_TOTAL,
                &[("reason", series::label(reason.as_str()))],
            )
        };
        Armed {
            fallback,
            on_route,
            counters: [
                counter(FallbackReason::CircuitOpen),
                counter(FallbackReason::Overloaded),
                counter(FallbackReason::Elapsed),
                counter(FallbackReason::Other),
            ],
            _series: b.finish(),
        }
    }

    /// The fallback response for `error`, if the fallback applies to it; counts it.
    pub(crate) fn respond(
        &self,
        error: &(dyn Error + Send + Sync + 'static),
        policy: &str,
        route: &str,
        method: &Method,
    ) -> Option<Response<Bytes>> {
        let reason = FallbackReason::of(error);
        if !self.fallback.applies_to(reason) {
            return None;
        }
        let ctx = FallbackContext {
            policy,
            route,
            method,
            reason,
            error,
        };
        let response = (self.fallback.f)(&ctx);
        self.counters[reason.index()].increment(1);
        tracing::debug!(
            target: "fusebox::fallback",
            policy,
            route,
            reason = reason.as_str(),
            "served a fallback"
        );
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_classify::error::{
        BudgetExhausted, CircuitOpen, Elapsed, Overloaded, TowerElapsed, TowerOverloaded,
    };
    use std::time::Duration;

    #[test]
    fn reasons_come_from_the_error_chain() {
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert_eq!(FallbackReason::of(&open), FallbackReason::CircuitOpen);
        let over = Overloaded::new(3, Duration::ZERO);
        assert_eq!(FallbackReason::of(&over), FallbackReason::Overloaded);
        let elapsed = Elapsed::new("r".into(), Duration::from_millis(1));
        assert_eq!(FallbackReason::of(&elapsed), FallbackReason::Elapsed);
        let io = std::io::Error::other("boom");
        assert_eq!(FallbackReason::of(&io), FallbackReason::Other);
        // tower's own timeout and load shedding mean what fusebox's do.
        let tower = TowerElapsed::new();
        assert_eq!(FallbackReason::of(&tower), FallbackReason::Elapsed);
        let tower = TowerOverloaded::new();
        assert_eq!(FallbackReason::of(&tower), FallbackReason::Overloaded);
        let exhausted = BudgetExhausted::new(Box::new(TowerElapsed::new()));
        assert_eq!(FallbackReason::of(&exhausted), FallbackReason::Elapsed);
    }

    #[test]
    fn reasons_are_opt_in() {
        let f = Fallback::new(|_| Response::new(Bytes::new()));
        assert!(f.applies_to(FallbackReason::CircuitOpen));
        assert!(!f.applies_to(FallbackReason::Other));
        let f = f.reasons(&[FallbackReason::Elapsed]).other_errors(true);
        assert!(!f.applies_to(FallbackReason::CircuitOpen));
        assert!(f.applies_to(FallbackReason::Elapsed));
        assert!(f.applies_to(FallbackReason::Other));
    }
}
