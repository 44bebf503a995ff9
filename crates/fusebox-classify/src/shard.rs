//! Per-thread handles on shared state, so that threads calling one dependency do not
//! write to the same cache line on every call.
//!
//! A response future that must outlive the service which made it keeps what it needs
//! alive with a reference count: an `Arc` clone when the call starts and a drop when it
//! ends, two atomic read-modify-writes. If every call of every thread counts on the *same*
//! `Arc`, that cache line moves between cores on every call, and with two or more threads
//! the bouncing costs more than all of a layer's own work: the second thread adds almost
//! no throughput. (The same holds for any counter every call bumps.)
//!
//! [`Leases`] spreads the counting: the shared value is reached through a few [`Lease`]s,
//! each its own reference-counted allocation on its own cache lines, and a call takes the
//! lease of the thread it runs on ([`thread_slot`]). Threads then count on different lines
//! and do not contend; a lease costs one uncontended atomic increment and decrement. The
//! leases hold the value, not the other way round, so there is no cycle: the value is
//! dropped with the last `Leases`, lease or other `Arc` holding it.
//!
//! fusebox's breaker, concurrency limit, timeout and retry layers all take their per-call
//! references this way.

use std::cell::Cell;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A small number for this thread, handed out in the order threads first ask: consecutive
/// threads (a runtime's workers) get consecutive numbers, so that taking it modulo a power
/// of two at least the number of workers gives every worker its own.
#[inline]
pub fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|slot| {
        let mut n = slot.get();
        if n == usize::MAX {
            n = NEXT.fetch_add(1, Ordering::Relaxed) % (usize::MAX / 2);
            slot.set(n);
        }
        n
    })
}

/// How many shards per-thread state gets: twice the threads that can run at once (so that
/// threads a runtime starts one after another rarely share one), a power of two, at least
/// 8 and at most 64.
///
/// Asked of the operating system once per process: `available_parallelism` reads the
/// process's CPU quota (cgroup files on Linux), which allocates and takes system calls.
pub fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let parallelism = std::thread::available_parallelism().map_or(4, usize::from);
        (parallelism * 2).next_power_of_two().clamp(8, 64)
    })
}

/// One lease on a shared value: dereferences to it. Aligned so that two leases' reference
/// counts never share a cache line (nor the adjacent line, which some CPUs prefetch in
/// pairs).
#[repr(align(128))]
pub struct Lease<T: ?Sized> {
    value: Arc<T>,
}

impl<T: ?Sized> Lease<T> {
    /// The shared value itself.
    pub fn shared(&self) -> &Arc<T> {
        &self.value
    }
}

impl<T: ?Sized> Deref for Lease<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Lease<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Lease").field(&&*self.value).finish()
    }
}

/// A shared value and per-thread leases on it; see the [module docs](self).
pub struct Leases<T: ?Sized> {
    value: Arc<T>,
    /// A power of two of them.
    leases: Box<[Arc<Lease<T>>]>,
}

impl<T: ?Sized> Leases<T> {
    /// Leases on `value`, [`shard_count`] of them.
    pub fn new(value: Arc<T>) -> Self {
        let leases = (0..shard_count())
            .map(|_| {
                Arc::new(Lease {
                    value: Arc::clone(&value),
                })
            })
            .collect();
        Leases { value, leases }
    }

    /// The shared value.
    #[inline]
    pub fn shared(&self) -> &Arc<T> {
        &self.value
    }

    /// How many leases there are (a power of two).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Never: there is always at least one lease.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The lease for a call on this thread: one uncontended reference-count increment.
    #[inline]
    pub fn lease(&self) -> Arc<Lease<T>> {
        Arc::clone(self.lease_of(thread_slot()))
    }

    /// The lease of the thread whose [`thread_slot`] is `slot`.
    #[inline]
    fn lease_of(&self, slot: usize) -> &Arc<Lease<T>> {
        &self.leases[slot & (self.leases.len() - 1)]
    }
}

impl<T: ?Sized> Deref for Leases<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Leases<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("value", &&*self.value)
            .field("leases", &self.leases.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_reach_one_value_and_hold_no_cycle() {
        let value = Arc::new(String::from("shared"));
        let leases = Leases::new(Arc::clone(&value));
        let n = leases.len();
        assert!(n.is_power_of_two() && (8..=64).contains(&n), "{n} leases");
        assert!(!leases.is_empty());
        assert_eq!(Arc::strong_count(&value), 2 + n);
        assert_eq!(&**leases, "shared");

        // A lease keeps the value alive past the leases, then lets it go.
        let lease = leases.lease();
        assert!(std::ptr::eq(&**lease, &*value));
        assert!(Arc::ptr_eq(lease.shared(), &value));
        drop(leases);
        assert_eq!(Arc::strong_count(&value), 2, "only the taken lease is left");
        drop(lease);
        assert_eq!(Arc::strong_count(&value), 1, "nothing holds the value");
    }

    #[test]
    fn a_thread_keeps_its_lease_and_consecutive_slots_take_different_ones() {
        let leases = Arc::new(Leases::new(Arc::new(0u8)));
        let here = leases.lease();
        assert!(
            Arc::ptr_eq(&here, &leases.lease()),
            "a thread keeps its lease"
        );
        assert!(Arc::ptr_eq(&here, leases.lease_of(thread_slot())));

        // Another thread takes the lease of its own slot.
        let (slot, taken) = {
            let leases = Arc::clone(&leases);
            std::thread::spawn(move || (thread_slot(), Arc::as_ptr(&leases.lease()) as usize))
                .join()
                .expect("a thread")
        };
        assert_eq!(taken, Arc::as_ptr(leases.lease_of(slot)) as usize);

        // Up to the number of leases, consecutive slots (a runtime's workers) never share.
        let n = leases.len();
        let mut distinct: Vec<usize> = (slot..slot + n)
            .map(|s| Arc::as_ptr(leases.lease_of(s)) as usize)
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), n);
    }

    #[test]
    fn threads_get_their_own_slots() {
        let here = thread_slot();
        assert_eq!(thread_slot(), here, "a thread keeps its slot");
        let mut slots: Vec<usize> = (0..4)
            .map(|_| std::thread::spawn(thread_slot))
            .map(|t| t.join().expect("a thread"))
            .collect();
        slots.push(here);
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), 5, "every thread has its own slot");
    }
}
