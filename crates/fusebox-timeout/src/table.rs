//! [`Timeouts`]: the timeout a running [`Timeout`](crate::Timeout) gives each call, so that
//! a reloaded configuration can change it without rebuilding the service.

use crate::config::TimeoutConfig;
use fusebox_classify::clock::duration_nanos;
use fusebox_classify::{RouteId, RouteTable, RouteTimeouts};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The timeout of each call: its route's own, as the route table holds it now
/// ([`RouteTable::route_timeouts`]), or this layer's default for a route that sets none.
/// Read once per call (two relaxed atomic loads at most, no lock, no allocation). A call
/// admitted after [`set_default`](Timeouts::set_default), or after its route's timeout was
/// changed in the table ([`RouteTable::replace_route`], [`RouteTable::edit`], a policy's
/// reload), is bounded by the new value; a call already running keeps the bound it started
/// with.
///
/// Cloning shares the timeouts: a [`TimeoutLayer`](crate::TimeoutLayer) makes them, and
/// every service it builds reads them.
#[derive(Clone)]
pub struct Timeouts(Arc<Shared>);

struct Shared {
    /// Each route's own timeout, as the table holds it.
    routes: RouteTimeouts,
    /// The timeout of routes that set none, in nanoseconds.
    default: AtomicU64,
}

impl Timeouts {
    /// The timeouts of the calls on `routes`' routes: each route's own
    /// ([`timeout_duration`](fusebox_classify::Route::timeout_duration)), and `config`'s
    /// default for routes that set none.
    pub fn new<C>(routes: &RouteTable<C>, config: &TimeoutConfig) -> Self {
        Timeouts(Arc::new(Shared {
            routes: routes.route_timeouts(),
            default: AtomicU64::new(duration_nanos(config.default_timeout())),
        }))
    }

    /// The timeout of a call on `route` (an unknown route: the default route's, as the
    /// route table falls back).
    #[inline]
    pub fn get(&self, route: RouteId) -> Duration {
        match self.0.routes.get(route) {
            Some(own) => own,
            None => self.default_timeout(),
        }
    }

    /// The timeout of routes that set none.
    pub fn default_timeout(&self) -> Duration {
        Duration::from_nanos(self.0.default.load(Ordering::Relaxed))
    }

    /// The timeout route `route` sets itself, if any, as its table holds it now.
    pub fn route(&self, route: RouteId) -> Option<Duration> {
        self.0.routes.get(route)
    }

    /// Sets the timeout of routes that set none, from the next call on.
    pub fn set_default(&self, timeout: Duration) {
        self.0
            .default
            .store(duration_nanos(timeout), Ordering::Relaxed);
    }
}

impl fmt::Debug for Timeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeouts")
            .field("default", &self.default_timeout())
            .field("routes", &self.0.routes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_classify::Route;

    /// A timeout whose routes without one of their own take 1 s.
    fn one_second() -> TimeoutConfig {
        TimeoutConfig::builder()
            .default_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    }

    #[test]
    fn routes_without_a_timeout_follow_the_default_and_changes_apply() {
        let routes = RouteTable::builder(Route::default())
            .route(
                "GET /fast",
                Route::default().timeout(Duration::from_millis(50)),
            )
            .build()
            .unwrap();
        let t = Timeouts::new(&routes, &one_second());
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
        assert!(routes.replace_route(fast, Route::default()));
        assert_eq!(
            t.get(fast),
            Duration::from_secs(2),
            "now it takes the default"
        );
        assert!(routes.replace_route(default, Route::default().timeout(Duration::from_millis(7))));
        assert_eq!(t.get(default), Duration::from_millis(7));
        let wider = RouteTable::builder(Route::default())
            .route("GET /1", Route::default())
            .route("GET /2", Route::default())
            .build()
            .unwrap();
        let unknown = wider.id_of("GET /2").unwrap();
        assert!(!routes.replace_route(unknown, Route::default()));
    }

    #[test]
    fn routes_added_and_added_back_are_bounded_by_their_timeout_in_the_table() {
        let ms = Duration::from_millis;
        let routes = RouteTable::builder(Route::default())
            .route("GET /a", Route::default().timeout(ms(100)))
            .build()
            .unwrap();
        let t = Timeouts::new(&routes, &one_second());
        let a = routes.id_of("GET /a").unwrap();
        let mut edit = routes.edit();
        edit.add("GET /b", Route::default().timeout(ms(30)))
            .remove(a);
        let b = edit.commit().unwrap()[0];
        assert_eq!(t.get(b), ms(30), "an added route's own");
        assert_eq!(t.route(b), Some(ms(30)));
        // Added back with another timeout: the layer reads that one.
        let mut edit = routes.edit();
        edit.add("GET /a", Route::default().timeout(ms(250)));
        assert_eq!(edit.commit().unwrap(), [a]);
        assert_eq!(t.get(a), ms(250));
        assert_eq!(
            format!("{t:?}"),
            "Timeouts { default: 1s, routes: [None, Some(250ms), Some(30ms)] }"
        );
    }
}
