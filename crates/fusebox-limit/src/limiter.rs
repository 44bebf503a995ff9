//! The state one layer value shares with every service it builds: the permit counter, the
//! queue of waiters, the partitions' counts, the adaptive algorithm and the metrics.
//!
//! The fixed-limit path is one compare-and-swap to take a permit and one subtraction to give
//! it back, on a counter no other state shares a lock with. Everything else — queueing,
//! partitions, adaptive samples — goes through short critical sections that are never held
//! across an `.await` and allocate nothing once the queue has reached its largest size.
//!
//! What races without the lock — a release's decrement and its look for waiters against a
//! call that queues, a raised limit against a call that queues, a release against a waiter
//! that withdraws — is model-checked with loom (`loom_model`, run by `.ci/loom`): no lost
//! wake-up, no leaked permit.

use crate::adaptive::ExtensionMethods;
use crate::algorithm::{Aimd, LimitAlgorithm, Sample, Vegas};
use crate::config::{ConcurrencyLimitConfig, Limit, QueueConfig, Release};
use crate::observe::{self, Metrics};
use crate::partition::reservations;
use fusebox_classify::error::Overloaded;
use fusebox_classify::shard::{Lease, Leases};
use fusebox_classify::{Classifier, Clock, Nanos, Outcome, RouteId, RouteTable, Verdict};
#[cfg(fusebox_loom)]
use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize},
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, PoisonError};
#[cfg(not(fusebox_loom))]
use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize},
};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A limiter's lanes, root first, each leased per thread.
pub(crate) type Lanes<C> = Arc<[Leases<Lane<C>>]>;

/// At most this many queue slots are allocated up front; a larger queue grows on demand
/// (and keeps what it grew).
const PREALLOCATED_WAITERS: usize = 256;

// `repr(C)`: the counters every call writes come first, right after the lane's tag and the
// `Arc`'s reference counts (see `Lane`).
#[repr(C)]
pub(crate) struct Limiter<C> {
    // Written on every call.
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    limit: AtomicUsize,

    pub(crate) name: Arc<str>,
    pub(crate) release: Release,
    pub(crate) retry_after: Duration,
    /// The queue's settings now, and whether there is one: a reload may add one, remove it,
    /// or change its size and wait ([`Limiter::reconfigure`]).
    queue: QueueNow,
    pub(crate) table: RouteTable<C>,
    pub(crate) clock: Clock,
    partitioned: bool,
    /// Whether each answer's verdict is left in its response's extensions.
    pub(crate) expose: bool,
    shares: Box<[f64]>,
    log_step: usize,
    slow: Mutex<Slow>,
    /// Whether the limit is adaptive now: its calls are timed and fed to `adaptive`'s
    /// algorithm, which owns the limit's value. A reload may turn it on or off
    /// ([`Limiter::reconfigure`]); a call reads it once, when admitted.
    adaptive_on: AtomicBool,
    /// The adaptive algorithm, while the limit is adaptive. Held while the limit changes
    /// kind, and by [`set_limit`](Limiter::set_limit), so that a fixed value is never set
    /// under an algorithm.
    adaptive: Mutex<Option<Adaptive>>,
    /// The settings as built, with the limit and queue the last reload gave
    /// ([`Limiter::config`]).
    config: Mutex<ConcurrencyLimitConfig>,
    pub(crate) metrics: Metrics,
    pub(crate) extension_methods: ExtensionMethods,
}

impl<C> fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("name", &self.name)
            .field("limit", &self.limit.load(Relaxed))
            .field("in_flight", &self.in_flight.load(Relaxed))
            .field("waiting", &self.waiting.load(Relaxed))
            .field("partitions", &self.shares.len())
            .finish_non_exhaustive()
    }
}

/// A queue's settings as calls read them now: each a relaxed atomic, read once where it is
/// used (a reload stores new values; a call sees them from its next read on), and whether
/// there is a queue.
#[derive(Debug)]
struct QueueNow {
    /// Whether a call that finds the limit full may queue (else it is shed at once).
    accepts: AtomicBool,
    /// Whether the limit has had a queue since it was built: from then on, a release looks
    /// for waiters, and a call never goes ahead of one. Never turned off, so that waiters
    /// a reload leaves queued when it removes the queue are still served.
    ///
    /// A release that finds it off does not look for waiters, so a call that queues because
    /// a reload has just turned it on must see that release's permit itself: the queued
    /// call's admission attempt reads the permit count with a read-modify-write
    /// (`Limiter::admit_counter`), which reads the latest count. If that count is not yet
    /// the release's, the release's decrement reads from the attempt and so comes after
    /// the reload's store (which the queued call saw): the release then finds the queue
    /// and the waiter. (Checked by `loom_model`.)
    since: AtomicBool,
    max_waiters: AtomicUsize,
    max_wait_nanos: std::sync::atomic::AtomicU64,
}

impl QueueNow {
    fn new(q: Option<&QueueConfig>) -> Self {
        let now = QueueNow {
            accepts: AtomicBool::new(false),
            since: AtomicBool::new(false),
            max_waiters: AtomicUsize::new(0),
            max_wait_nanos: Default::default(),
        };
        now.set(q);
        now
    }

    /// Takes `q`'s settings, or removes the queue: calls that find the limit full are then
    /// shed, and waiters already queued keep their places and deadlines.
    fn set(&self, q: Option<&QueueConfig>) {
        match q {
            Some(q) => {
                self.max_waiters.store(q.max_waiters(), Relaxed);
                self.max_wait_nanos.store(
                    fusebox_classify::clock::duration_nanos(q.max_wait()),
                    Relaxed,
                );
                self.since.store(true, Release);
                self.accepts.store(true, Release);
            }
            None => self.accepts.store(false, Release),
        }
    }

    /// The queue's settings, if there is one now.
    fn get(&self) -> Option<QueueConfig> {
        self.accepts.load(Relaxed).then(|| {
            QueueConfig::new(
                self.max_waiters.load(Relaxed),
                Duration::from_nanos(self.max_wait_nanos.load(Relaxed)),
            )
        })
    }

    /// Whether releases must look for waiters, and calls must not go ahead of them.
    #[inline]
    fn has_had_one(&self) -> bool {
        self.since.load(Acquire)
    }
}

/// What the slow paths share, behind one lock.
struct Slow {
    queue: Queue,
    /// Calls in flight per partition.
    partition_in_flight: Vec<usize>,
    /// Calls in flight that belong to no partition.
    unlisted_in_flight: usize,
    /// Scratch space: the reservations at the current limit.
    reserved: Vec<usize>,
}

struct Adaptive {
    algorithm: Algorithm,
    /// The limit last reported in an event.
    reported: usize,
}

enum Algorithm {
    Aimd(Aimd),
    Vegas(Vegas),
}

impl Algorithm {
    /// The algorithm of an adaptive `limit`, taking over from `running` (the limit's
    /// algorithm now, if it is adaptive) at the limit `current`: the same algorithm takes
    /// the new settings, keeping its value and measurements; another, or a limit that was
    /// fixed, starts from `current` (Vegas first measures the no-load latency, at its
    /// minimum, as it does when built). `None` for a fixed `limit`.
    fn taking(limit: &Limit, running: Option<&Algorithm>, current: usize) -> Option<Algorithm> {
        Some(match (limit, running) {
            (Limit::Aimd(c), Some(Algorithm::Aimd(running))) => {
                Algorithm::Aimd(running.reconfigured(c))
            }
            (Limit::Vegas(c), Some(Algorithm::Vegas(running))) => {
                Algorithm::Vegas(running.reconfigured(c))
            }
            (Limit::Aimd(c), _) => Algorithm::Aimd(Aimd::new(&c.clone().initial_limit(current))),
            (Limit::Vegas(c), _) => Algorithm::Vegas(Vegas::new(&c.clone().initial_limit(current))),
            (Limit::Fixed(_), _) => return None,
        })
    }

    fn update(&mut self, sample: &Sample) -> usize {
        match self {
            Algorithm::Aimd(a) => a.update(sample),
            Algorithm::Vegas(v) => v.update(sample),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Algorithm::Aimd(_) => "aimd",
            Algorithm::Vegas(_) => "vegas",
        }
    }

    fn limit(&self) -> usize {
        match self {
            Algorithm::Aimd(a) => a.limit(),
            Algorithm::Vegas(v) => v.limit(),
        }
    }
}

/// Why a call was shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shed {
    Full,
    QueueFull,
    QueueTimeout,
}

/// The number of waiters, read as a read-modify-write that changes nothing: it reads the
/// latest value and, acquiring and releasing, orders what this thread did before it against
/// a waiter's increment (see `Limiter::release`).
#[inline]
fn waiters_seen(waiting: &AtomicUsize) -> usize {
    waiting.fetch_add(0, AcqRel)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; if one ever did, the counts are still
    // the best information there is.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C> Limiter<C> {
    pub(crate) fn new(
        config: &ConcurrencyLimitConfig,
        table: RouteTable<C>,
        shares: &[f64],
    ) -> Self {
        let initial = config.initial_limit().max(1);
        let adaptive = match config.limit() {
            Limit::Fixed(_) => None,
            Limit::Aimd(c) => Some(Algorithm::Aimd(Aimd::new(c))),
            Limit::Vegas(c) => Some(Algorithm::Vegas(Vegas::new(c))),
        };
        let capacity = config
            .queue()
            .map_or(0, |q| q.max_waiters().min(PREALLOCATED_WAITERS));
        let metrics = Metrics::new(config.name());
        metrics.limit.set(initial as f64);
        Limiter {
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            limit: AtomicUsize::new(initial),
            name: Arc::clone(&config.name),
            release: config.release(),
            retry_after: config.retry_after(),
            queue: QueueNow::new(config.queue()),
            table,
            clock: Clock::new(),
            partitioned: !shares.is_empty(),
            expose: false,
            shares: shares.into(),
            log_step: config.log_step(),
            slow: Mutex::new(Slow {
                queue: Queue::with_capacity(capacity),
                partition_in_flight: vec![0; shares.len()],
                unlisted_in_flight: 0,
                reserved: vec![0; shares.len()],
            }),
            adaptive_on: AtomicBool::new(adaptive.is_some()),
            adaptive: Mutex::new(adaptive.map(|algorithm| Adaptive {
                algorithm,
                reported: initial,
            })),
            config: Mutex::new(config.clone()),
            metrics,
            extension_methods: ExtensionMethods::default(),
        }
    }

    /// The same limiter, leaving each answer's verdict in its response's extensions when
    /// `expose`.
    pub(crate) fn exposing(mut self, expose: bool) -> Self {
        self.expose = expose;
        self
    }

    /// The queue's settings now, if the limit has a queue.
    pub(crate) fn queue(&self) -> Option<QueueConfig> {
        self.queue.get()
    }

    /// Takes `config`'s limit and queue from now on, keeping the permits in flight and the
    /// waiters (see [`LimitHandle::reconfigure`](crate::LimitHandle::reconfigure)): a fixed
    /// value; an adaptive algorithm's settings, another algorithm, a limit made adaptive or
    /// fixed ([`Algorithm::taking`]); a queue's settings, a queue added or removed. A limit
    /// whose setting is unchanged keeps the value it has.
    pub(crate) fn reconfigure(&self, config: &ConcurrencyLimitConfig) {
        let limit_changed = {
            let mut now = lock(&self.config);
            let changed = now.limit != *config.limit();
            now.limit = config.limit().clone();
            now.queue = config.queue().copied();
            changed
        };
        self.queue.set(config.queue());
        if !limit_changed {
            // The limit as it is: a value set by hand or by a recovery ramp stays.
            return;
        }
        let (old, new) = match config.limit() {
            Limit::Fixed(max) => {
                // Under the algorithm's lock: a reload making it adaptive, or a `set_limit`,
                // comes wholly before or after.
                let mut adaptive = lock(&self.adaptive);
                *adaptive = None;
                self.adaptive_on.store(false, SeqCst);
                self.set_fixed(*max);
                return;
            }
            limit => {
                let mut adaptive = lock(&self.adaptive);
                let current = self.limit.load(Relaxed);
                let running = adaptive.as_ref().map(|a| &a.algorithm);
                let Some(algorithm) = Algorithm::taking(limit, running, current) else {
                    return;
                };
                let new = algorithm.limit();
                let reported = adaptive.as_ref().map_or(current, |a| a.reported);
                *adaptive = Some(Adaptive {
                    algorithm,
                    reported,
                });
                self.adaptive_on.store(true, SeqCst);
                if new != current {
                    self.limit.store(new, SeqCst);
                    self.metrics.limit.set(new as f64);
                }
                (current, new)
            }
        };
        if new > old && waiters_seen(&self.waiting) != 0 {
            let mut slow = lock(&self.slow);
            self.pump(&mut slow);
        }
    }

    /// Whether the limit is adaptive now (its calls are timed and fed to its algorithm).
    #[inline]
    pub(crate) fn is_adaptive(&self) -> bool {
        self.adaptive_on.load(Relaxed)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// Sets a fixed limit to `limit` (at least 1) and admits waiters it makes room for.
    /// Returns `false`, changing nothing, for an adaptive limit: its algorithm owns the value.
    pub(crate) fn set_limit(&self, limit: usize) -> bool {
        let adaptive = lock(&self.adaptive);
        if adaptive.is_some() {
            return false;
        }
        self.set_fixed(limit);
        true
    }

    /// The settings now: as built, with the limit and queue the last reload gave.
    pub(crate) fn config(&self) -> ConcurrencyLimitConfig {
        lock(&self.config).clone()
    }

    /// Sets the limit to `limit` (at least 1) and admits waiters it makes room for.
    fn set_fixed(&self, limit: usize) {
        let limit = limit.max(1);
        let old = self.limit.swap(limit, SeqCst);
        if old != limit {
            self.metrics.limit.set(limit as f64);
        }
        // A read-modify-write, as in `release`: a call that queues meanwhile either is seen
        // here or sees the new limit.
        if limit > old && waiters_seen(&self.waiting) != 0 {
            let mut slow = lock(&self.slow);
            self.pump(&mut slow);
        }
    }

    /// The error a shed call fails with; counts it.
    pub(crate) fn shed(&self, why: Shed) -> Overloaded {
        match why {
            Shed::Full => self.metrics.rejected_full.increment(1),
            Shed::QueueFull => self.metrics.rejected_queue_full.increment(1),
            Shed::QueueTimeout => self.metrics.rejected_queue_timeout.increment(1),
        }
        Overloaded::new(self.limit(), self.retry_after)
    }

    /// Counts a call in if a slot is free and nobody is queued ahead.
    #[inline]
    fn admit(&self, partition: Option<u16>) -> bool {
        let admitted = if self.partitioned {
            let mut slow = lock(&self.slow);
            // Nobody is let ahead of a waiter who could be admitted: under this lock, every
            // waiter left is one that could not. Without a queue (a reload removed it while
            // calls waited), a call is admitted if the partition rules allow it, rather than
            // shed behind waiters of other partitions.
            (self.waiting.load(SeqCst) == 0 || !self.queue.accepts.load(Acquire))
                && self.admit_locked(&mut slow, partition).is_some()
        } else {
            if self.queue.has_had_one() && self.waiting.load(SeqCst) != 0 {
                return false;
            }
            self.admit_counter(false).is_some()
        };
        if admitted {
            self.metrics.in_flight.increment(1.0);
            self.metrics.admitted.increment(1);
        }
        admitted
    }

    /// The number of partitions.
    pub(crate) fn partitions(&self) -> usize {
        self.shares.len()
    }

    /// One compare-and-swap: a slot below the limit, or `None`. `latest`: the count is
    /// first read with a read-modify-write, so that it is the latest one (a queued call's
    /// attempt; see `QueueNow::since`), not a plain load (a call's first attempt).
    #[inline]
    fn admit_counter(&self, latest: bool) -> Option<usize> {
        let limit = self.limit.load(Relaxed);
        let mut current = if latest {
            self.in_flight.fetch_add(0, AcqRel)
        } else {
            self.in_flight.load(Relaxed)
        };
        loop {
            if current >= limit {
                return None;
            }
            match self
                .in_flight
                .compare_exchange_weak(current, current + 1, SeqCst, Relaxed)
            {
                Ok(_) => return Some(current + 1),
                Err(actual) => current = actual,
            }
        }
    }

    /// Admits a call of `partition` if the limit and the partition rules allow it, counting
    /// it; returns the calls in flight with it.
    fn admit_locked(&self, slow: &mut Slow, partition: Option<u16>) -> Option<usize> {
        if !self.partitioned {
            return self.admit_counter(true);
        }
        let limit = self.limit.load(Relaxed);
        if self.in_flight.load(SeqCst) >= limit {
            return None;
        }
        let unreserved = reservations(limit, &self.shares, &mut slow.reserved);
        let within_reservation = partition.is_some_and(|i| {
            let i = usize::from(i);
            slow.partition_in_flight[i] < slow.reserved[i]
        });
        if !within_reservation {
            let borrowed = slow.unlisted_in_flight
                + slow
                    .partition_in_flight
                    .iter()
                    .zip(&slow.reserved)
                    .map(|(n, r)| n.saturating_sub(*r))
                    .sum::<usize>();
            if borrowed >= unreserved {
                return None;
            }
        }
        match partition {
            Some(i) => slow.partition_in_flight[usize::from(i)] += 1,
            None => slow.unlisted_in_flight += 1,
        }
        Some(self.in_flight.fetch_add(1, SeqCst) + 1)
    }

    /// Gives a permit back.
    fn release(&self, partition: Option<u16>) {
        self.metrics.in_flight.decrement(1.0);
        if self.partitioned {
            let mut slow = lock(&self.slow);
            self.release_locked(&mut slow, partition);
            return;
        }
        self.in_flight.fetch_sub(1, SeqCst);
        // Either this sees a waiter that queued meanwhile, or that waiter's own admission
        // attempt sees this slot free. A load would not do: the waiter's increment and this
        // look are a store and a load on different locations each followed by a load of the
        // other's (a store buffer can let both see the old values). As read-modify-writes,
        // both land in `waiting`'s one modification order, each reading the latest value:
        // if this one comes first, the waiter's increment acquires from it, and so sees
        // the decrement above. (Checked by `loom_model`.)
        if self.queue.has_had_one() && waiters_seen(&self.waiting) != 0 {
            let mut slow = lock(&self.slow);
            self.pump(&mut slow);
        }
    }

    fn release_locked(&self, slow: &mut Slow, partition: Option<u16>) {
        if self.partitioned {
            match partition {
                Some(i) => {
                    let n = &mut slow.partition_in_flight[usize::from(i)];
                    *n = n.saturating_sub(1);
                }
                None => slow.unlisted_in_flight = slow.unlisted_in_flight.saturating_sub(1),
            }
        }
        self.in_flight.fetch_sub(1, SeqCst);
        if self.waiting.load(SeqCst) != 0 {
            self.pump(slow);
        }
    }

    /// Grants permits to waiters, first come first served among those that can be admitted.
    fn pump(&self, slow: &mut Slow) {
        let mut i = 0;
        while i < slow.queue.order.len() {
            let index = slow.queue.order[i];
            let SlotState::Waiting { partition, .. } = slow.queue.slots[index].state else {
                // Only waiting slots are in the order; skip anything else defensively.
                slow.queue.order.remove(i);
                continue;
            };
            match self.admit_locked(slow, partition) {
                Some(_) => {
                    slow.queue.order.remove(i);
                    self.waiting.fetch_sub(1, SeqCst);
                    self.metrics.waiting.decrement(1.0);
                    self.metrics.in_flight.increment(1.0);
                    self.metrics.admitted.increment(1);
                    let slot = &mut slow.queue.slots[index];
                    let previous = std::mem::replace(&mut slot.state, SlotState::Granted);
                    if let SlotState::Waiting {
                        waker: Some(waker), ..
                    } = previous
                    {
                        waker.wake();
                    }
                }
                // Unpartitioned: nobody behind can be admitted either.
                None if !self.partitioned => break,
                None => i += 1,
            }
        }
    }

    /// Queues a call that found the limit full: its slot in the queue and how long it may
    /// wait there, or why it is shed.
    fn enqueue(&self, partition: Option<u16>) -> Result<(usize, u64, Duration), Shed> {
        let queue = &self.queue;
        if !queue.accepts.load(Acquire) {
            return Err(Shed::Full);
        }
        let max_wait = Duration::from_nanos(queue.max_wait_nanos.load(Relaxed));
        let max_waiters = queue.max_waiters.load(Relaxed);
        let mut slow = lock(&self.slow);
        if slow.queue.order.len() >= max_waiters {
            return Err(Shed::QueueFull);
        }
        let slot = slow.queue.insert(partition);
        self.waiting.fetch_add(1, SeqCst);
        self.metrics.waiting.increment(1.0);
        // A permit may have come free between the failed attempt and now.
        self.pump(&mut slow);
        Ok((slot.0, slot.1, max_wait))
    }

    /// Whether the queue slot's permit has been granted (the slot is then freed); registers
    /// `cx`'s waker if not.
    fn poll_slot(&self, index: usize, generation: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut slow = lock(&self.slow);
        let Some(slot) = slow.queue.get_mut(index, generation) else {
            // Invariant: a live ticket owns its slot. Treat a lost one as never granted.
            return Poll::Pending;
        };
        match &mut slot.state {
            SlotState::Granted => {
                slow.queue.free(index);
                Poll::Ready(())
            }
            SlotState::Waiting { waker, .. } => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Free => Poll::Pending,
        }
    }

    /// Withdraws a queue slot. `true` if its permit had been granted meanwhile: the caller
    /// then holds it.
    fn withdraw(&self, index: usize, generation: u64) -> bool {
        let mut slow = lock(&self.slow);
        let Some(slot) = slow.queue.get_mut(index, generation) else {
            return false;
        };
        let state = std::mem::replace(&mut slot.state, SlotState::Free);
        slow.queue.free(index);
        match state {
            SlotState::Granted => true,
            SlotState::Waiting { .. } => {
                if let Some(pos) = slow.queue.order.iter().position(|&i| i == index) {
                    slow.queue.order.remove(pos);
                }
                self.waiting.fetch_sub(1, SeqCst);
                self.metrics.waiting.decrement(1.0);
                false
            }
            SlotState::Free => false,
        }
    }

    /// Feeds a finished call to the adaptive algorithm (nothing for a fixed limit).
    pub(crate) fn record(&self, sample: Sample) {
        if !self.is_adaptive() {
            return;
        }
        let (old, new) = {
            let mut adaptive = lock(&self.adaptive);
            // Made fixed by a reload since the call was admitted: its sample is dropped.
            let Some(a) = adaptive.as_mut() else {
                return;
            };
            let old = self.limit.load(Relaxed);
            let new = a.algorithm.update(&sample);
            if new != old {
                self.limit.store(new, SeqCst);
                self.metrics.limit.set(new as f64);
                if new.abs_diff(a.reported) >= self.log_step {
                    tracing::info!(
                        target: observe::TARGET,
                        limiter = %self.name,
                        algorithm = a.algorithm.name(),
                        from = a.reported,
                        to = new,
                        dropped = sample.dropped,
                        latency_us = u64::try_from(sample.latency().as_micros()).unwrap_or(u64::MAX),
                        in_flight = self.in_flight.load(Relaxed),
                        "concurrency limit changed"
                    );
                    a.reported = new;
                }
            }
            (old, new)
        };
        // A read-modify-write, as in `release`: a call that queues meanwhile either is seen
        // here or sees the raised limit.
        if new > old && waiters_seen(&self.waiting) != 0 {
            let mut slow = lock(&self.slow);
            self.pump(&mut slow);
        }
    }
}

impl<C: Classifier> Limiter<C> {
    /// Feeds a classified call admitted at `start` (in the clock's microseconds, wrapping)
    /// to the adaptive algorithm: ignored verdicts are not counted; failures, and calls the
    /// route deems slow, are drops.
    pub(crate) fn record_verdict(&self, route: RouteId, verdict: Verdict, start: u32) {
        if !self.is_adaptive() || verdict.outcome() == Outcome::Ignored {
            return;
        }
        let end = self.clock.now();
        let latency_us = micros(end).wrapping_sub(start);
        let latency = Duration::from_micros(u64::from(latency_us));
        let route = self.table.route(route);
        let dropped = verdict.is_failure() || verdict.is_slow() || route.is_slow(latency);
        self.record(Sample {
            start: Nanos(end.0.saturating_sub(u64::from(latency_us) * 1_000)),
            end,
            in_flight: self.in_flight.load(Relaxed),
            dropped,
        });
    }
}

/// A point in time in whole microseconds, wrapping (every 71 minutes): differences of two
/// are exact for calls shorter than that, and fit in four bytes.
pub(crate) fn micros(at: Nanos) -> u32 {
    (at.0 / 1_000) as u32
}

// === impl Lane ===

/// A way into the limiter: what a permit points to.
///
/// The unreserved pool's lane *is* the limiter, so that the reference count a permit bumps
/// sits beside the counter it admits with: on a busy server both are written by every call
/// on every core, and one cache line moving between cores costs less than two. Each
/// partition has a lane of its own that points to it, so a permit stays one pointer and
/// knows which partition to give its slot back to.
#[allow(
    clippy::large_enum_variant,
    reason = "one lane per partition, made once: boxing the root would split the line"
)]
pub(crate) enum Lane<C> {
    Root(Limiter<C>),
    Partition { root: Arc<Lane<C>>, index: u16 },
}

impl<C> Lane<C> {
    /// The lanes of a limiter: the root (the unreserved pool) first, then one per partition.
    pub(crate) fn all(limiter: Limiter<C>) -> Lanes<C> {
        let partitions = limiter.partitions();
        let root = Arc::new(Lane::Root(limiter));
        let mut lanes = Vec::with_capacity(partitions + 1);
        lanes.push(Arc::clone(&root));
        for index in (0..partitions).filter_map(|i| u16::try_from(i).ok()) {
            lanes.push(Arc::new(Lane::Partition {
                root: Arc::clone(&root),
                index,
            }));
        }
        lanes.into_iter().map(Leases::new).collect()
    }

    #[inline]
    pub(crate) fn limiter(&self) -> &Limiter<C> {
        let mut lane = self;
        loop {
            match lane {
                Lane::Root(limiter) => return limiter,
                Lane::Partition { root, .. } => lane = root,
            }
        }
    }

    #[inline]
    fn partition(&self) -> Option<u16> {
        match self {
            Lane::Root(_) => None,
            Lane::Partition { index, .. } => Some(*index),
        }
    }

    /// Takes a permit if one is free and nobody is queued ahead. `None` when full.
    #[inline]
    /// A permit on `lane` if the limit has room; the permit holds this thread's lease on
    /// the lane ([`fusebox_classify::shard`]): the limit's own count is the only line every
    /// call writes.
    pub(crate) fn try_acquire(lane: &Leases<Lane<C>>) -> Option<Permit<C>> {
        if lane.limiter().admit(lane.partition()) {
            Some(Permit { lane: lane.lease() })
        } else {
            None
        }
    }

    /// Queues a call that found the limit full (with how long it may wait, as the queue
    /// said when it took the call), or says why it is shed.
    pub(crate) fn enqueue(lane: &Leases<Lane<C>>) -> Result<(Ticket<C>, Duration), Shed> {
        let (index, generation, max_wait) = lane.limiter().enqueue(lane.partition())?;
        let ticket = Ticket {
            lane: lane.lease(),
            index,
            generation,
            done: false,
        };
        Ok((ticket, max_wait))
    }
}

impl<C> fmt::Debug for Lane<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lane")
            .field("limiter", &self.limiter())
            .field("partition", &self.partition())
            .finish()
    }
}

impl<C: Send + Sync> Observe for Lane<C> {
    fn name(&self) -> &str {
        &self.limiter().name
    }
    fn limit(&self) -> usize {
        self.limiter().limit()
    }
    fn in_flight(&self) -> usize {
        self.limiter().in_flight()
    }
    fn waiting(&self) -> usize {
        self.limiter().waiting()
    }
    fn set_limit(&self, limit: usize) -> bool {
        self.limiter().set_limit(limit)
    }
    fn reconfigure(&self, config: &ConcurrencyLimitConfig) {
        self.limiter().reconfigure(config)
    }
    fn config(&self) -> ConcurrencyLimitConfig {
        self.limiter().config()
    }
    fn queue(&self) -> Option<QueueConfig> {
        self.limiter().queue()
    }
}

// === impl Permit ===

/// One admitted call's slot. Dropping it gives the slot back.
///
/// One pointer, so that the futures and response bodies holding one stay small: every
/// healthy call moves them around a few times.
pub(crate) struct Permit<C> {
    lane: Arc<Lease<Lane<C>>>,
}

impl<C> Permit<C> {
    pub(crate) fn limiter(&self) -> &Limiter<C> {
        self.lane.limiter()
    }

    /// The lane, shared (to keep the limiter alive past the permit).
    pub(crate) fn lane(&self) -> &Arc<Lane<C>> {
        self.lane.shared()
    }
}

impl<C> fmt::Debug for Permit<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("lane", &self.lane).finish()
    }
}

impl<C> Drop for Permit<C> {
    #[inline]
    fn drop(&mut self) {
        self.lane.limiter().release(self.lane.partition());
    }
}

// === impl Ticket ===

/// A place in the queue. Dropping it withdraws from the queue (or gives back a permit that
/// was granted but not yet taken).
pub(crate) struct Ticket<C> {
    lane: Arc<Lease<Lane<C>>>,
    index: usize,
    generation: u64,
    done: bool,
}

impl<C> Ticket<C> {
    /// The permit, once granted.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Permit<C>> {
        if self.done {
            return Poll::Pending;
        }
        match self
            .lane
            .limiter()
            .poll_slot(self.index, self.generation, cx)
        {
            Poll::Ready(()) => {
                self.done = true;
                Poll::Ready(Permit {
                    lane: Arc::clone(&self.lane),
                })
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Withdraws; returns the permit if it was granted in the meantime.
    pub(crate) fn cancel(&mut self) -> Option<Permit<C>> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        self.lane
            .limiter()
            .withdraw(self.index, self.generation)
            .then(|| Permit {
                lane: Arc::clone(&self.lane),
            })
    }

    pub(crate) fn limiter(&self) -> &Limiter<C> {
        self.lane.limiter()
    }
}

impl<C> fmt::Debug for Ticket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("lane", &self.lane)
            .field("index", &self.index)
            .finish()
    }
}

impl<C> Drop for Ticket<C> {
    fn drop(&mut self) {
        // A granted permit that nobody took goes back (and on to the next waiter).
        drop(self.cancel());
    }
}

// === impl Queue ===

/// Waiters in arrival order, in reusable slots.
struct Queue {
    slots: Vec<Slot>,
    free: Vec<usize>,
    order: VecDeque<usize>,
    next_generation: u64,
}

struct Slot {
    generation: u64,
    state: SlotState,
}

enum SlotState {
    Free,
    Waiting {
        waker: Option<Waker>,
        partition: Option<u16>,
    },
    Granted,
}

impl Queue {
    fn with_capacity(capacity: usize) -> Self {
        Queue {
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            order: VecDeque::with_capacity(capacity),
            next_generation: 0,
        }
    }

    fn insert(&mut self, partition: Option<u16>) -> (usize, u64) {
        self.next_generation += 1;
        let generation = self.next_generation;
        let state = SlotState::Waiting {
            waker: None,
            partition,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index] = Slot { generation, state };
                index
            }
            None => {
                self.slots.push(Slot { generation, state });
                self.slots.len() - 1
            }
        };
        self.order.push_back(index);
        (index, generation)
    }

    fn get_mut(&mut self, index: usize, generation: u64) -> Option<&mut Slot> {
        self.slots
            .get_mut(index)
            .filter(|s| s.generation == generation && !matches!(s.state, SlotState::Free))
    }

    fn free(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.state = SlotState::Free;
            slot.generation = 0;
            self.free.push(index);
        }
    }
}

/// What operators and tests can read of a limit, whatever its classifier type.
pub(crate) trait Observe: Send + Sync + fmt::Debug {
    fn name(&self) -> &str;
    fn limit(&self) -> usize;
    fn in_flight(&self) -> usize;
    fn waiting(&self) -> usize;
    fn set_limit(&self, limit: usize) -> bool;
    fn reconfigure(&self, config: &ConcurrencyLimitConfig);
    fn config(&self) -> ConcurrencyLimitConfig;
    fn queue(&self) -> Option<QueueConfig>;
}

#[cfg(all(test, fusebox_loom))]
mod loom_model;

#[cfg(all(test, not(fusebox_loom)))]
mod tests {
    use super::*;
    use fusebox_classify::StandardClassifier;

    fn partitioned(queue: bool) -> ConcurrencyLimitConfig {
        let config = ConcurrencyLimitConfig::builder().max_concurrency(2);
        let config = if queue {
            config.queue(2, Duration::from_secs(1))
        } else {
            config
        };
        config.build().expect("a valid limit")
    }

    /// A reload that removes the queue while a call of one partition waits in it: a call of
    /// another partition whose reservation is free is admitted, not shed behind the waiter
    /// it would not overtake (a waiter left under the lock could not be admitted).
    #[test]
    fn without_a_queue_a_partition_is_not_shed_behind_another_ones_waiter() {
        let limiter: Limiter<StandardClassifier> =
            Limiter::new(&partitioned(true), RouteTable::default(), &[0.5, 0.5]);
        assert!(limiter.admit(Some(0)));
        assert!(
            !limiter.admit(Some(0)),
            "partition 0 holds its one reserved slot"
        );
        let (index, generation, max_wait) = limiter.enqueue(Some(0)).expect("room in the queue");
        assert_eq!(max_wait, Duration::from_secs(1), "the wait the queue gave");
        limiter.reconfigure(&partitioned(false));
        assert!(limiter.admit(Some(1)), "partition 1's reservation is free");
        assert_eq!(limiter.enqueue(Some(0)), Err(Shed::Full), "no queue: shed");
        // The waiter is still served when partition 0's slot comes back.
        limiter.release(Some(0));
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(
            limiter.poll_slot(index, generation, &mut cx),
            Poll::Ready(())
        );
        assert_eq!(limiter.in_flight(), 2);
    }
}
