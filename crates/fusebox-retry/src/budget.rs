//! The retry budget and the failure-rate cut-off: pure, synchronous bookkeeping over a
//! sliding window of time buckets.
//!
//! # Why a budget
//!
//! A retry policy without a budget multiplies load exactly when the dependency can least
//! afford it. Here every request *deposits* and every retry (or hedge) *withdraws*; within
//! the window (the last `ttl`) the retries may not exceed `retry_ratio` × requests plus a
//! floor of `min_retries_per_second` × `ttl`, so that a quiet service can still retry a
//! little. This is the scheme of Finagle, Envoy and tower's `TpsBudget`.
//!
//! # Exactness
//!
//! tower's `TpsBudget` checks the balance and then subtracts from it in two steps, so
//! concurrent callers can all see the last token and all take it.
//! Here a withdrawal decides and records under one short mutex (never held across an
//! `.await`), so withdrawals are serialised and each sees every earlier one. Deposits and
//! outcomes do not take the mutex: each is one compare-and-swap on a counter of the current
//! bucket. A deposit racing a withdrawal can only be missed by it, which makes the
//! withdrawal more conservative, never less. All arithmetic is in integers: the ratio is
//! kept exactly, in billionths (a request deposits `ratio × 10^9` units, a retry costs
//! `10^9`), so the budget allows exactly `⌊ratio × requests + floor × ttl⌋` retries —
//! [`RetryConfig`] refuses a ratio it could not keep rather than round it.
//!
//! # Deposits without a clock read
//!
//! Reading the clock costs more than counting (the `policy` bench's `policy_floors` group
//! times one read: `docs/performance.md`), so [`RetryBudget::deposit`] does not read it:
//! it adds to a pending count (one atomic add), and every
//! [`PLACE_EVERY`]th deposit — or any withdrawal, outcome record or snapshot, which read the
//! clock anyway — places the pending deposits into a bucket. The pending count is kept per
//! thread ([`fusebox_classify::shard`]): every request deposits, so with one shared counter
//! threads calling the dependency would all write one cache line on every call. They are placed in the bucket
//! of the *previous* placement, the earliest time any of them can have happened, so they
//! leave the window no later than they really would: the budget may count fewer deposits
//! than there were (after a long quiet spell, up to `PLACE_EVERY - 1` of them per thread
//! may be dropped as too old), never more. [`RetryBudget::deposit_at`] places at once, exactly.
//!
//! # Buckets
//!
//! The window is [`BUCKETS`] buckets of `ttl / BUCKETS` each. Each counter stores its
//! bucket's epoch (time / bucket width, truncated to 32 bits) next to its count in one
//! `AtomicU64`, so a bucket is reset by the first writer of a new epoch without any sweep,
//! and a reader ignores counts whose epoch has left the window.
//! Two deposits into one bucket, and a deposit racing the bucket's reset to a new epoch,
//! are model-checked with loom (`loom_model`, run by `.ci/loom`): none is lost, none is
//! counted in an epoch it does not belong to.
//!
//! # Cut-off
//!
//! The same buckets count failed and ignored attempts. When, within the window, at least
//! `cutoff_minimum_calls` attempts were counted and the failed share reaches the
//! threshold, retries stop until the share falls again (as failures age out of the window).
//! Attempts are the requests plus the retries and hedges, less the ignored attempts.

use crate::config::{RATIO_SCALE, RetryConfig};
use fusebox_classify::shard::{shard_count, thread_slot};
use fusebox_classify::{Clock, Nanos, Outcome};
#[cfg(fusebox_loom)]
use loom::sync::atomic::AtomicU64;
#[cfg(not(fusebox_loom))]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One thread's count of pending deposits, on a cache line (pair) of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Pending(AtomicU64);

/// The number of buckets in the window (each covers `ttl / BUCKETS`).
pub const BUCKETS: usize = 10;

/// The healthy path places its pending deposits into a bucket every this many deposits.
pub const PLACE_EVERY: u64 = 64;

/// Units of one retry; a request deposits `ratio × SCALE` units.
const SCALE: u64 = RATIO_SCALE;

/// A count tagged with the epoch it belongs to: epoch in the high 32 bits, count in the low.
#[derive(Debug, Default)]
struct Tagged(AtomicU64);

const COUNT_MASK: u64 = u32::MAX as u64;

fn pack(tag: u32, count: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(count)
}

fn split(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, (v & COUNT_MASK) as u32)
}

/// Whether epoch tag `a` is later than `b`, modulo 2^32.
fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Tagged {
    /// Adds `n` to the count of `epoch`, resetting the bucket if it still holds an older
    /// epoch. An event of an epoch older than the bucket's (a thread stalled for a whole
    /// window) belongs to no window any reader looks at and is dropped.
    #[inline]
    fn add(&self, epoch: u64, n: u32) {
        let tag = epoch as u32; // truncation intended: tags compare modulo 2^32
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (t, count) = split(current);
            let next = if t == tag {
                pack(tag, count.saturating_add(n))
            } else if later(tag, t) {
                pack(tag, n)
            } else {
                return;
            };
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The count of `epoch` (zero when the bucket holds another epoch).
    #[inline]
    fn get(&self, epoch: u64) -> u64 {
        let (t, count) = split(self.0.load(Ordering::Acquire));
        if t == epoch as u32 {
            u64::from(count)
        } else {
            0
        }
    }
}

/// The counters of one bucket slot.
#[derive(Debug, Default)]
struct Slot {
    requests: Tagged,
    retries: Tagged,
    failures: Tagged,
    ignored: Tagged,
}

/// No cut-off: the value of [`RetryBudget`]'s `cutoff_permille` when none is set.
const NO_CUTOFF: u64 = u64::MAX;

/// The counts in the window at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BudgetSnapshot {
    /// Requests (deposits) in the window.
    pub requests: u64,
    /// Retries and hedges (withdrawals) in the window.
    pub retries: u64,
    /// Failed attempts in the window.
    pub failures: u64,
    /// Ignored attempts in the window.
    pub ignored: u64,
    /// How many more retries the budget would allow now.
    pub available: u64,
    /// Whether the failure-rate cut-off stops retries now.
    pub cut_off: bool,
}

/// A retry budget with a failure-rate cut-off, shared by every clone of a retry layer.
///
/// Built by [`RetryBudgetLayer`](crate::RetryBudgetLayer) from its [`RetryConfig`]; also
/// usable on its own. Every method has an `_at` form taking the time explicitly (a
/// [`Nanos`] of [`clock`](RetryBudget::clock)), for deterministic tests.
#[derive(Debug)]
pub struct RetryBudget {
    clock: Clock,
    bucket_nanos: u64,
    /// The window's length (fixed: the buckets are cut from it).
    ttl_nanos: u64,
    // The settings a reload may change ([`RetryBudget::reconfigure`]), each read once
    // where it is used; a reader sees each new value from its next read on.
    deposit_units: std::sync::atomic::AtomicU64,
    min_per_second: std::sync::atomic::AtomicU64,
    /// The cut-off's threshold in permille, or [`NO_CUTOFF`].
    cutoff_permille: std::sync::atomic::AtomicU64,
    cutoff_minimum_calls: std::sync::atomic::AtomicU64,
    slots: [Slot; BUCKETS],
    /// Deposits not yet placed in a bucket, counted per thread (a power of two of shards).
    pending: Box<[Pending]>,
    /// When pending deposits were last placed: no pending deposit is older.
    placed: Mutex<Nanos>,
    /// Serialises withdrawals: the check and the record happen under it.
    withdraw: Mutex<()>,
}

impl RetryBudget {
    /// A budget with the settings of `config`, on a new [`Clock`] (tokio time).
    pub fn new(config: &RetryConfig) -> Self {
        Self::with_clock(config, Clock::new())
    }

    /// A budget with the settings of `config`, reading `clock`.
    pub fn with_clock(config: &RetryConfig, clock: Clock) -> Self {
        let ttl_nanos = fusebox_classify::clock::duration_nanos(config.ttl()).max(1);
        let bucket_nanos = (ttl_nanos / BUCKETS as u64).max(1);
        RetryBudget {
            clock,
            bucket_nanos,
            ttl_nanos,
            deposit_units: Default::default(),
            min_per_second: Default::default(),
            cutoff_permille: Default::default(),
            cutoff_minimum_calls: Default::default(),
            slots: Default::default(),
            pending: (0..shard_count()).map(|_| Pending::default()).collect(),
            placed: Mutex::new(clock.now()),
            withdraw: Mutex::new(()),
        }
        .with_settings(config)
    }

    fn with_settings(self, config: &RetryConfig) -> Self {
        self.set(config);
        self
    }

    fn set(&self, config: &RetryConfig) {
        use std::sync::atomic::Ordering::Relaxed;
        self.deposit_units
            .store(config.retry_ratio_billionths(), Relaxed);
        self.min_per_second
            .store(u64::from(config.min_retries_per_second()), Relaxed);
        self.cutoff_minimum_calls
            .store(u64::from(config.cutoff_minimum_calls()), Relaxed);
        self.cutoff_permille.store(
            config
                .cutoff_threshold_permille()
                .map_or(NO_CUTOFF, u64::from),
            Relaxed,
        );
    }

    /// Takes `config`'s ratio, floor and cut-off from now on, keeping the window's counts
    /// (a reload of a running layer). The window's length (`ttl`) cannot change this way:
    /// its buckets are cut from it. Returns `false`, changing nothing, when `config`'s
    /// `ttl` differs from this budget's.
    ///
    /// ```
    /// use fusebox_retry::{RetryBudget, RetryConfig};
    ///
    /// let budget = RetryBudget::new(&RetryConfig::builder().min_retries_per_second(0).build()?);
    /// assert_eq!(budget.snapshot().available, 0);
    /// let more = RetryConfig::builder().min_retries_per_second(5).build()?;
    /// assert!(budget.reconfigure(&more));
    /// assert_eq!(budget.snapshot().available, 50, "5 a second over the 10 s window");
    /// # Ok::<(), fusebox_classify::ConfigError>(())
    /// ```
    pub fn reconfigure(&self, config: &RetryConfig) -> bool {
        let ttl = fusebox_classify::clock::duration_nanos(config.ttl()).max(1);
        if ttl != self.ttl_nanos {
            return false;
        }
        let _serialised = self.withdraw.lock().unwrap_or_else(PoisonError::into_inner);
        self.set(config);
        true
    }

    /// The clock this budget reads.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    #[inline]
    fn epoch(&self, now: Nanos) -> u64 {
        now.0 / self.bucket_nanos
    }

    #[inline]
    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[(epoch % BUCKETS as u64) as usize]
    }

    /// The epochs of the window ending at `epoch`, oldest first.
    fn window(epoch: u64) -> std::ops::RangeInclusive<u64> {
        epoch.saturating_sub(BUCKETS as u64 - 1)..=epoch
    }

    fn sum(&self, epoch: u64, field: impl Fn(&Slot) -> &Tagged) -> u64 {
        Self::window(epoch)
            .map(|e| field(self.slot(e)).get(e))
            .sum()
    }

    /// Records a request: one deposit, the healthy path's only write. One atomic add; the
    /// clock is read once every [`PLACE_EVERY`] deposits (see the module docs).
    #[inline]
    pub fn deposit(&self) {
        let shard = &self.pending[thread_slot() & (self.pending.len() - 1)];
        let pending = shard.0.fetch_add(1, Ordering::Relaxed) + 1;
        if pending.is_multiple_of(PLACE_EVERY) {
            self.place(self.clock.now());
        }
    }

    /// Records a request made at `now`, placed in its bucket at once.
    #[inline]
    pub fn deposit_at(&self, now: Nanos) {
        let epoch = self.epoch(now);
        self.slot(epoch).requests.add(epoch, 1);
    }

    /// Places the pending deposits in the bucket of the previous placement (the earliest
    /// time any of them can have been made), and notes `now` as this placement's time.
    fn place(&self, now: Nanos) {
        let mut placed = self.placed.lock().unwrap_or_else(PoisonError::into_inner);
        let pending: u64 = self
            .pending
            .iter()
            .map(|shard| shard.0.swap(0, Ordering::AcqRel))
            .sum();
        if pending > 0 {
            let epoch = self.epoch(*placed);
            let count = u32::try_from(pending).unwrap_or(u32::MAX);
            self.slot(epoch).requests.add(epoch, count);
        }
        // `now` was read before the lock: a later placement may already have moved on.
        *placed = (*placed).max(now);
    }

    /// Takes one retry from the budget if it allows one; `false` leaves the budget as it was.
    pub fn try_withdraw(&self) -> bool {
        self.try_withdraw_at(self.clock.now())
    }

    /// [`try_withdraw`](RetryBudget::try_withdraw) at `now`.
    pub fn try_withdraw_at(&self, now: Nanos) -> bool {
        self.place(now);
        let epoch = self.epoch(now);
        let _serialised = self.withdraw.lock().unwrap_or_else(PoisonError::into_inner);
        if self.available_in(epoch) == 0 {
            return false;
        }
        self.slot(epoch).retries.add(epoch, 1);
        true
    }

    /// Retries the budget allows at `epoch`.
    fn available_in(&self, epoch: u64) -> u64 {
        let requests = self.sum(epoch, |s| &s.requests);
        let retries = self.sum(epoch, |s| &s.retries);
        // In u128: 2^64 requests × 10^12 units still fit, so nothing saturates or rounds.
        let deposit = self.deposit_units.load(Ordering::Relaxed);
        // floor per second × ttl seconds × SCALE units, with SCALE = 10^9 = ns per s.
        let reserve =
            u128::from(self.min_per_second.load(Ordering::Relaxed)) * u128::from(self.ttl_nanos);
        let credit = u128::from(requests) * u128::from(deposit) + reserve;
        u64::try_from(credit / u128::from(SCALE))
            .unwrap_or(u64::MAX)
            .saturating_sub(retries)
    }

    /// Records how an attempt ended, for the cut-off. Successes need no record (every
    /// attempt was already counted as a request or a retry).
    pub fn record(&self, outcome: Outcome) {
        if outcome != Outcome::Success {
            self.record_at(outcome, self.clock.now());
        }
    }

    /// [`record`](RetryBudget::record) at `now`.
    pub fn record_at(&self, outcome: Outcome, now: Nanos) {
        self.place(now);
        let epoch = self.epoch(now);
        match outcome {
            Outcome::Success => {}
            Outcome::Failure => self.slot(epoch).failures.add(epoch, 1),
            Outcome::Ignored => self.slot(epoch).ignored.add(epoch, 1),
        }
    }

    /// Whether the failure-rate cut-off stops retries now.
    pub fn is_cut_off(&self) -> bool {
        self.is_cut_off_at(self.clock.now())
    }

    /// [`is_cut_off`](RetryBudget::is_cut_off) at `now`.
    pub fn is_cut_off_at(&self, now: Nanos) -> bool {
        let threshold_permille = self.cutoff_permille.load(Ordering::Relaxed);
        if threshold_permille == NO_CUTOFF {
            return false;
        }
        let minimum_calls = self.cutoff_minimum_calls.load(Ordering::Relaxed);
        self.place(now);
        let epoch = self.epoch(now);
        let failures = self.sum(epoch, |s| &s.failures);
        if failures == 0 {
            return false;
        }
        let attempts = (self.sum(epoch, |s| &s.requests) + self.sum(epoch, |s| &s.retries))
            .saturating_sub(self.sum(epoch, |s| &s.ignored));
        attempts >= minimum_calls
            && failures.saturating_mul(1000) >= threshold_permille.saturating_mul(attempts)
    }

    /// The window's counts now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        self.snapshot_at(self.clock.now())
    }

    /// [`snapshot`](RetryBudget::snapshot) at `now`.
    pub fn snapshot_at(&self, now: Nanos) -> BudgetSnapshot {
        self.place(now);
        let epoch = self.epoch(now);
        BudgetSnapshot {
            requests: self.sum(epoch, |s| &s.requests),
            retries: self.sum(epoch, |s| &s.retries),
            failures: self.sum(epoch, |s| &s.failures),
            ignored: self.sum(epoch, |s| &s.ignored),
            available: self.available_in(epoch),
            cut_off: self.is_cut_off_at(now),
        }
    }

    /// The width of one bucket.
    pub fn bucket_width(&self) -> Duration {
        Duration::from_nanos(self.bucket_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;

    fn budget(ratio: f64, floor: u32, ttl_secs: u64, cutoff: Option<u32>) -> RetryBudget {
        let config = RetryConfig::builder()
            .retry_ratio(ratio)
            .min_retries_per_second(floor)
            .ttl(Duration::from_secs(ttl_secs))
            .failure_rate_threshold(cutoff)
            .cutoff_minimum_calls(10)
            .build()
            .unwrap();
        RetryBudget::with_clock(&config, Clock::new())
    }

    fn withdraw_all(b: &RetryBudget, now: Nanos) -> u64 {
        let mut n = 0;
        while b.try_withdraw_at(now) {
            n += 1;
            assert!(n < 1_000_000, "runaway budget");
        }
        n
    }

    #[test]
    fn floor_alone_allows_floor_times_ttl() {
        let b = budget(0.2, 10, 10, None);
        assert_eq!(withdraw_all(&b, Nanos(0)), 100);
        // Still spent half a window later; the floor comes back once the spend ages out.
        assert_eq!(withdraw_all(&b, Nanos(5 * SEC)), 0);
        assert_eq!(withdraw_all(&b, Nanos(10 * SEC)), 100);
    }

    #[test]
    fn deposits_add_the_ratio() {
        let b = budget(0.2, 0, 10, None);
        assert!(!b.try_withdraw_at(Nanos(0)));
        for _ in 0..4 {
            b.deposit_at(Nanos(0));
        }
        // 4 × 0.2 = 0.8: not a whole retry yet.
        assert!(!b.try_withdraw_at(Nanos(0)));
        b.deposit_at(Nanos(SEC));
        assert!(b.try_withdraw_at(Nanos(SEC)));
        assert!(!b.try_withdraw_at(Nanos(SEC)));
        let snap = b.snapshot_at(Nanos(SEC));
        assert_eq!((snap.requests, snap.retries, snap.available), (5, 1, 0));
        // The t=0 deposits leave the window at t=10 s; the t=1 s one stays.
        let snap = b.snapshot_at(Nanos(10 * SEC));
        assert_eq!((snap.requests, snap.retries), (1, 1));
        assert_eq!(b.snapshot_at(Nanos(11 * SEC)), BudgetSnapshot::default());
    }

    #[test]
    fn small_ratios_are_kept_exactly() {
        // 0.0015 allows 15 retries per 10,000 requests (rounded to thousandths it would be 0.002:
        // 20); 0.0005 one per 2,000 (not 0.001: two); 0.0004 four per 10,000 (not zero).
        for (ratio, requests, retries) in [
            (0.0015, 10_000, 15),
            (0.0015, 9_999, 14),
            (0.0005, 2_000, 1),
            (0.0005, 1_999, 0),
            (0.0004, 10_000, 4),
            (0.000_000_001, 1_000_000_000, 1),
        ] {
            let b = budget(ratio, 0, 10, None);
            for _ in 0..requests / 1_000_000 {
                // Large counts: a bucket's counter takes them a million at a time.
                b.slot(0).requests.add(0, 1_000_000);
            }
            for _ in 0..requests % 1_000_000 {
                b.deposit_at(Nanos(0));
            }
            assert_eq!(
                withdraw_all(&b, Nanos(0)),
                retries,
                "{ratio} × {requests} requests"
            );
        }
    }

    #[test]
    fn ratio_above_one() {
        let b = budget(2.5, 0, 1, None);
        b.deposit_at(Nanos(0));
        b.deposit_at(Nanos(0));
        assert_eq!(withdraw_all(&b, Nanos(0)), 5);
    }

    #[test]
    fn cut_off_needs_volume_and_rate_and_recovers() {
        let b = budget(0.2, 10, 10, Some(10));
        for _ in 0..9 {
            b.deposit_at(Nanos(0));
            b.record_at(Outcome::Failure, Nanos(0));
        }
        assert!(!b.is_cut_off_at(Nanos(0)), "9 calls are below the minimum");
        b.deposit_at(Nanos(0));
        assert!(b.is_cut_off_at(Nanos(0)), "9 of 10 failed");
        // Healthy traffic dilutes the rate: 9 / 90 = 10 % still cuts off, 9 / 91 does not.
        for _ in 0..80 {
            b.deposit_at(Nanos(SEC));
        }
        assert!(b.is_cut_off_at(Nanos(SEC)));
        b.deposit_at(Nanos(SEC));
        assert!(!b.is_cut_off_at(Nanos(SEC)));
        // Ignored attempts are not in the denominator.
        b.record_at(Outcome::Ignored, Nanos(SEC));
        assert!(b.is_cut_off_at(Nanos(SEC)));
        // The failures age out.
        assert!(!b.is_cut_off_at(Nanos(10 * SEC)));
        assert!(!budget(0.2, 10, 10, None).is_cut_off_at(Nanos(0)));
    }

    #[test]
    fn tags_wrap_and_stale_writers_are_dropped() {
        assert!(later(0, u32::MAX));
        assert!(!later(u32::MAX, 0));
        let t = Tagged::default();
        t.add(5, 1);
        t.add(5, 2);
        assert_eq!(t.get(5), 3);
        t.add(4, 7); // an older epoch: dropped
        assert_eq!(t.get(5), 3);
        t.add(15, 1);
        assert_eq!((t.get(5), t.get(15)), (0, 1));
        t.add(15, u32::MAX);
        assert_eq!(
            t.get(15),
            u64::from(u32::MAX),
            "saturates, never carries into the tag"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn clockless_deposits_are_placed_no_later_than_made() {
        let b = budget(0.5, 0, 10, None);
        for _ in 0..10 {
            b.deposit();
        }
        // Placed when read: 10 deposits at t = 0.
        assert_eq!(b.snapshot().requests, 10);
        assert_eq!(b.snapshot().available, 5);
        // 100 deposits at t = 3 s: the 64th places the 64 pending ones at the previous
        // placement (t = 0), the rest wait.
        tokio::time::advance(Duration::from_secs(3)).await;
        for _ in 0..100 {
            b.deposit();
        }
        let t0 = b.snapshot_at(Nanos(9 * SEC));
        assert_eq!(t0.requests, 110, "all inside the window at 9 s");
        // At 10 s the t = 0 bucket leaves: the 74 placed there go, although 64 of them were
        // made at 3 s (the conservative side); the 36 placed at 3 s stay.
        assert_eq!(b.snapshot_at(Nanos(10 * SEC)).requests, 36);
        // After a quiet spell longer than the window, pending deposits are dropped rather
        // than counted as recent.
        for _ in 0..5 {
            b.deposit();
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(b.snapshot().requests, 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Advance(u64),
        Deposit(u8),
        Withdraw(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..3_000).prop_map(Op::Advance),
            (1u8..20).prop_map(Op::Deposit),
            (1u8..20).prop_map(Op::Withdraw),
        ]
    }

    proptest! {
        /// The budget grants exactly what a naive recount of the window allows, and over
        /// the whole run never more than ratio × deposits + floor × (elapsed + ttl).
        #[test]
        fn withdrawals_never_exceed_the_budget(
            ratio_permille in 0u32..1500,
            floor in 0u32..5,
            ttl_secs in 1u64..5,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let b = budget(f64::from(ratio_permille) / 1000.0, floor, ttl_secs, None);
            let bucket = ttl_secs * SEC / BUCKETS as u64;
            let mut now = 0u64;
            let mut deposits: Vec<u64> = Vec::new(); // epochs
            let mut withdrawals: Vec<u64> = Vec::new();
            for op in ops {
                match op {
                    Op::Advance(ms) => now += ms * 1_000_000,
                    Op::Deposit(n) => for _ in 0..n {
                        b.deposit_at(Nanos(now));
                        deposits.push(now / bucket);
                    },
                    Op::Withdraw(n) => for _ in 0..n {
                        let epoch = now / bucket;
                        let lo = epoch.saturating_sub(BUCKETS as u64 - 1);
                        let d = deposits.iter().filter(|e| (lo..=epoch).contains(*e)).count() as u64;
                        let w = withdrawals.iter().filter(|e| (lo..=epoch).contains(*e)).count() as u64;
                        let allowed = (w + 1) * 1000
                            <= d * u64::from(ratio_permille) + u64::from(floor) * ttl_secs * 1000;
                        prop_assert_eq!(b.try_withdraw_at(Nanos(now)), allowed);
                        if allowed {
                            withdrawals.push(epoch);
                        }
                    },
                }
            }
            let elapsed_secs = now.div_ceil(SEC);
            let bound = deposits.len() as u64 * u64::from(ratio_permille)
                + u64::from(floor) * (elapsed_secs + ttl_secs) * 1000;
            prop_assert!(withdrawals.len() as u64 * 1000 <= bound,
                "{} withdrawals for {} deposits over {} s", withdrawals.len(), deposits.len(), elapsed_secs);
        }
    }
}

#[cfg(all(test, fusebox_loom))]
mod loom_model;
