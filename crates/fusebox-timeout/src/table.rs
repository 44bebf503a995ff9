//! [`Timeouts`]: each route's timeout as a running [`Timeout`](crate::Timeout) reads it, so
//! that a reloaded configuration can change it without rebuilding the service.

use crate::config::TimeoutConfig;
use fusebox_classify::clock::duration_nanos;
use fusebox_classify::route::PerRoute;
use fusebox_classify::{Classifier, RouteId, RouteTable};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A route that sets no timeout of its own (it takes the default).
const UNSET: u64 = u64::MAX;

/// Each route's timeout and the default of routes that set none, read once per call (one
/// relaxed atomic load, no lock, no allocation) and changed in place by a reload: a call
/// admitted after [`set_default`](Timeouts::set_default) or
/// [`set_route`](Timeouts::set_route) is bounded by the new value; a call already running
/// keeps the bound it started with.
///
/// A route added to the table while it runs ([`RouteTable::edit`]) takes its timeout from
/// the table the first time a call is on it ([`get_in`](Timeouts::get_in)), or when
/// [`grow`](Timeouts::grow) is asked to.
///
/// Cloning shares the table: a [`TimeoutLayer`](crate::TimeoutLayer) makes one, and every
/// service it builds reads it.
#[derive(Clone)]
pub struct Timeouts(Arc<Slots>);

struct Slots {
    /// By route id: the route's own timeout in nanoseconds, or [`UNSET`].
    routes: PerRoute<AtomicU64>,
    /// The timeout of routes that set none, in nanoseconds.
    default: AtomicU64,
}

impl Timeouts {
    /// The timeouts of `routes` (each route's
    /// [`timeout_duration`](fusebox_classify::Route::timeout_duration)), with `config`'s
    /// default for routes that set none.
    pub fn new<C: Classifier>(routes: &RouteTable<C>, config: &TimeoutConfig) -> Self {
        Timeouts(Arc::new(Slots {
            routes: routes.per_route(|id| own(routes, id)),
            default: AtomicU64::new(duration_nanos(config.default_timeout())),
        }))
    }

    /// The timeout of a call on `route` (an unknown route: the default route's, as the
    /// route table falls back).
    #[inline]
    pub fn get(&self, route: RouteId) -> Duration {
        self.bound(self.0.routes.get_or_default(route))
    }

    /// The timeout of a call on route `route` of `routes`, the table these timeouts were
    /// made from: a route added to the table since gets its timeout from it now.
    #[inline]
    pub fn get_in<C: Classifier>(&self, route: RouteId, routes: &RouteTable<C>) -> Duration {
        let own = match self.0.routes.get(route) {
            Some(own) => own,
            None => self.added(route, routes),
        };
        self.bound(own)
    }

    #[cold]
    #[inline(never)]
    fn added<C: Classifier>(&self, route: RouteId, routes: &RouteTable<C>) -> &AtomicU64 {
        let slots = &self.0.routes;
        routes
            .grow(slots, route, |id| own(routes, id))
            .unwrap_or_else(|| slots.get_or_default(RouteId::DEFAULT))
    }

    /// Gives every route added to `routes` (the table these timeouts were made from) since
    /// they were made its timeout, as the table holds it now.
    pub fn grow<C: Classifier>(&self, routes: &RouteTable<C>) {
        routes.grow_all(&self.0.routes, |id| own(routes, id));
    }

    #[inline]
    fn bound(&self, own: &AtomicU64) -> Duration {
        let own = own.load(Ordering::Relaxed);
        let nanos = if own == UNSET {
            self.0.default.load(Ordering::Relaxed)
        } else {
            own
        };
        Duration::from_nanos(nanos)
    }

    /// The timeout of routes that set none.
    pub fn default_timeout(&self) -> Duration {
        Duration::from_nanos(self.0.default.load(Ordering::Relaxed))
    }

    /// The timeout route number `index` sets itself, if any.
    pub fn route(&self, index: usize) -> Option<Duration> {
        let t = self.0.routes.at(index)?.load(Ordering::Relaxed);
        (t != UNSET).then(|| Duration::from_nanos(t))
    }

    /// How many routes there are.
    pub fn len(&self) -> usize {
        self.0.routes.len()
    }

    /// Whether there are no routes (never: a route table always has its default route).
    pub fn is_empty(&self) -> bool {
        self.0.routes.is_empty()
    }

    /// Sets the timeout of routes that set none, from the next call on.
    pub fn set_default(&self, timeout: Duration) {
        self.0
            .default
            .store(duration_nanos(timeout), Ordering::Relaxed);
    }

    /// Sets route number `index`'s own timeout (`None`: it takes the default), from the
    /// next call on; returns whether the route exists (a route added to the table has its
    /// timeout here once [`grow`](Timeouts::grow) or a call on it gave it one).
    pub fn set_route(&self, index: usize, timeout: Option<Duration>) -> bool {
        match self.0.routes.at(index) {
            Some(t) => {
                t.store(timeout.map_or(UNSET, nanos), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

/// Route `id`'s own timeout in `routes`, as stored.
fn own<C: Classifier>(routes: &RouteTable<C>, id: RouteId) -> AtomicU64 {
    AtomicU64::new(routes.route(id).timeout_duration().map_or(UNSET, nanos))
}

/// Nanoseconds of a route's own timeout, never [`UNSET`] (a timeout of centuries is
/// bounded just below it).
fn nanos(d: Duration) -> u64 {
    duration_nanos(d).min(UNSET - 1)
}

impl fmt::Debug for Timeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeouts")
            .field("default", &self.default_timeout())
            .field(
                "routes",
                &(0..self.len()).map(|i| self.route(i)).collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_classify::Route;

    #[test]
    fn routes_without_a_timeout_follow_the_default_and_changes_apply() {
        let routes = RouteTable::builder(Route::default())
            .route(
                "GET /fast",
                Route::default().timeout(Duration::from_millis(50)),
            )
            .build()
            .unwrap();
        let config = TimeoutConfig::builder()
            .default_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let t = Timeouts::new(&routes, &config);
        let (default, fast) = {
            let mut ids = routes.iter().map(|(id, _, _)| id);
            (ids.next().unwrap(), ids.next().unwrap())
        };
        assert_eq!(t.get(default), Duration::from_secs(1));
        assert_eq!(t.get(fast), Duration::from_millis(50));

        t.set_default(Duration::from_secs(2));
        assert_eq!(t.get(default), Duration::from_secs(2));
        assert_eq!(
            t.get(fast),
            Duration::from_millis(50),
            "its own timeout stays"
        );
        assert!(t.set_route(fast.index(), None));
        assert_eq!(
            t.get(fast),
            Duration::from_secs(2),
            "now it takes the default"
        );
        assert!(t.set_route(default.index(), Some(Duration::from_millis(7))));
        assert_eq!(t.get(default), Duration::from_millis(7));
        assert!(!t.set_route(9, None));
    }
}
