//! [`PerRoute`]: values a reader needs per route of a table on every call, that grow as
//! routes are added to the table.

use super::RouteId;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// Values kept per route of a [`RouteTable`](super::RouteTable), by [`RouteId`]: a
/// layer's per-route timeouts, metric handles, the table's slow-call thresholds.
///
/// The values of the routes there were when it was made are one slice, read with one
/// bounds check. A table can gain routes while it runs ([`RouteTable::edit`]); their
/// values are appended, in an append-only vector read out of line, either when the table
/// adds them or the first time a reader asks for one ([`get_or_grow`](PerRoute::get_or_grow)).
/// A value, once there, stays at its place: a reader holding `&T` never sees it move.
///
/// There is always a value for the default route ([`RouteId::DEFAULT`]), so that a reader
/// can fall back to it ([`get_or_default`](PerRoute::get_or_default)). Share it the way
/// its owner is shared (in an `Arc`): it is one allocation until a route is added.
///
/// [`RouteTable::edit`]: super::RouteTable::edit
pub struct PerRoute<T> {
    /// Never empty: `made[0]` is the default route's.
    made: Box<[T]>,
    /// Route `made.len() + i` is `added[i]`.
    added: boxcar::Vec<T>,
    /// Held while values are appended, so that each lands at its route's place.
    grow: Mutex<()>,
}

impl<T> PerRoute<T> {
    /// The default route's value, then the values of routes `1..n` in route order.
    pub fn new(default: T, rest: impl IntoIterator<Item = T>) -> Self {
        PerRoute {
            made: std::iter::once(default).chain(rest).collect(),
            added: boxcar::Vec::new(),
            grow: Mutex::new(()),
        }
    }

    /// The value of route `id`, if there is one yet.
    #[inline]
    pub fn get(&self, id: RouteId) -> Option<&T> {
        self.at(id.index())
    }

    /// The value of the route whose [`index`](RouteId::index) is `index`, if there is one
    /// yet.
    #[inline]
    pub fn at(&self, index: usize) -> Option<&T> {
        match self.made.get(index) {
            Some(value) => Some(value),
            None => self.get_added(index),
        }
    }

    /// The value of route `id`, or the default route's when `id` has none (yet).
    #[inline]
    pub fn get_or_default(&self, id: RouteId) -> &T {
        match self.get(id) {
            Some(value) => value,
            None => &self.made[0],
        }
    }

    /// Out of line: nearly every call is on a route there was when the values were made.
    #[cold]
    #[inline(never)]
    fn get_added(&self, index: usize) -> Option<&T> {
        self.added.get(index.checked_sub(self.made.len())?)
    }

    /// The value of route `id`; when it has none yet and `id` is one of the first `count`
    /// routes (its table's [`route_count`](super::RouteTable::route_count)), first appends
    /// a value made by `make` for each route up to it. `None` for an id past `count`.
    #[inline]
    pub fn get_or_grow(
        &self,
        id: RouteId,
        count: usize,
        make: impl FnMut(RouteId) -> T,
    ) -> Option<&T> {
        match self.get(id) {
            Some(value) => Some(value),
            None => self.grow(id, count, make),
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&self, id: RouteId, count: usize, mut make: impl FnMut(RouteId) -> T) -> Option<&T> {
        if id.index() >= count {
            return None;
        }
        let _grow = self.grow.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = self.len();
        while next <= id.index() {
            // Ids are u16 (a table refuses more routes), so this never truncates.
            let route = RouteId(u16::try_from(next).unwrap_or(u16::MAX));
            self.added.push(make(route));
            next += 1;
        }
        self.get(id)
    }

    /// How many routes have a value.
    pub fn len(&self) -> usize {
        self.made.len() + self.added.count()
    }

    /// Whether no route has a value: never, the default route always has one.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every value, in route order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.made.iter().chain(self.added.iter().map(|(_, v)| v))
    }
}

impl<T: fmt::Debug> fmt::Debug for PerRoute<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn values_grow_in_route_order_once_and_stay_in_place() {
        let values = PerRoute::new(10u32, [11]);
        let made = AtomicUsize::new(0);
        let make = |id: RouteId| {
            made.fetch_add(1, Ordering::Relaxed);
            100 + id.0 as u32
        };
        assert_eq!(values.get(RouteId(1)), Some(&11));
        assert_eq!(values.get(RouteId(2)), None);
        assert_eq!(values.get_or_default(RouteId(2)), &10);
        // Past the table's count: nothing is made.
        assert_eq!(values.get_or_grow(RouteId(4), 4, make), None);
        assert_eq!(made.load(Ordering::Relaxed), 0);
        // Route 4 of 5: routes 2 and 3 are made on the way, in order.
        let four = values.get_or_grow(RouteId(4), 5, make).unwrap();
        assert_eq!(*four, 104);
        assert_eq!(made.load(Ordering::Relaxed), 3);
        assert_eq!(values.get(RouteId(3)), Some(&103));
        assert!(
            std::ptr::eq(four, values.get(RouteId(4)).unwrap()),
            "it stays in place"
        );
        // Asked again: made once.
        assert_eq!(values.get_or_grow(RouteId(2), 5, make), Some(&102));
        assert_eq!(made.load(Ordering::Relaxed), 3);
        assert_eq!(values.len(), 5);
        assert_eq!(
            values.iter().copied().collect::<Vec<_>>(),
            [10, 11, 102, 103, 104]
        );
        assert_eq!(format!("{values:?}"), "[10, 11, 102, 103, 104]");
    }

    #[test]
    fn threads_growing_at_once_make_each_value_once() {
        let values = Arc::new(PerRoute::new(0usize, []));
        let made = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (values, made) = (Arc::clone(&values), Arc::clone(&made));
                std::thread::spawn(move || {
                    for i in (1..200u16).rev().skip(t) {
                        let v = values.get_or_grow(RouteId(i), 200, |id| {
                            made.fetch_add(1, Ordering::Relaxed);
                            id.index()
                        });
                        assert_eq!(v, Some(&usize::from(i)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(made.load(Ordering::Relaxed), 199);
        assert!(values.iter().enumerate().all(|(i, v)| i == *v));
    }
}
