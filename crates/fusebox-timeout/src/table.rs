//! [`Timeouts`]: each route's timeout as a running [`Timeout`](crate::Timeout) reads it, so
//! that a reloaded configuration can change it without rebuilding the service.

use crate::config::TimeoutConfig;
use fusebox_classify::clock::duration_nanos;
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
/// Cloning shares the table: a [`TimeoutLayer`](crate::TimeoutLayer) makes one, in one
/// allocation, and every service it builds reads it.
#[derive(Clone)]
pub struct Timeouts {
    /// The default first, then by [`RouteId::index`]: the route's own timeout in
    /// nanoseconds, or [`UNSET`].
    slots: Arc<[AtomicU64]>,
}

impl Timeouts {
    /// The timeouts of `routes` (each route's
    /// [`timeout_duration`](fusebox_classify::Route::timeout_duration)), with `config`'s
    /// default for routes that set none.
    pub fn new<C: Classifier>(routes: &RouteTable<C>, config: &TimeoutConfig) -> Self {
        let default = duration_nanos(config.default_timeout());
        Timeouts {
            slots: std::iter::once(AtomicU64::new(default))
                .chain(
                    routes
                        .iter()
                        .map(|(_, _, r)| AtomicU64::new(r.timeout_duration().map_or(UNSET, nanos))),
                )
                .collect(),
        }
    }

    fn routes(&self) -> &[AtomicU64] {
        self.slots.get(1..).unwrap_or_default()
    }

    fn default_slot(&self) -> Option<&AtomicU64> {
        self.slots.first()
    }

    /// The timeout of a call on `route` (an unknown route: the default route's, as the
    /// route table falls back).
    #[inline]
    pub fn get(&self, route: RouteId) -> Duration {
        let routes = self.routes();
        let own = routes
            .get(route.index())
            .or_else(|| routes.first())
            .map_or(UNSET, |t| t.load(Ordering::Relaxed));
        let nanos = if own == UNSET {
            self.default_slot().map_or(0, |d| d.load(Ordering::Relaxed))
        } else {
            own
        };
        Duration::from_nanos(nanos)
    }

    /// The timeout of routes that set none.
    pub fn default_timeout(&self) -> Duration {
        Duration::from_nanos(self.default_slot().map_or(0, |d| d.load(Ordering::Relaxed)))
    }

    /// The timeout route number `index` sets itself, if any.
    pub fn route(&self, index: usize) -> Option<Duration> {
        let t = self.routes().get(index)?.load(Ordering::Relaxed);
        (t != UNSET).then(|| Duration::from_nanos(t))
    }

    /// How many routes there are.
    pub fn len(&self) -> usize {
        self.routes().len()
    }

    /// Whether there are no routes (never, for a table built from a route table).
    pub fn is_empty(&self) -> bool {
        self.routes().is_empty()
    }

    /// Sets the timeout of routes that set none, from the next call on.
    pub fn set_default(&self, timeout: Duration) {
        if let Some(d) = self.default_slot() {
            d.store(duration_nanos(timeout), Ordering::Relaxed);
        }
    }

    /// Sets route number `index`'s own timeout (`None`: it takes the default), from the
    /// next call on; returns whether the route exists.
    pub fn set_route(&self, index: usize, timeout: Option<Duration>) -> bool {
        match self.routes().get(index) {
            Some(t) => {
                t.store(timeout.map_or(UNSET, nanos), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
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
