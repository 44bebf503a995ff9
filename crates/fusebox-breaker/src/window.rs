//! Sliding windows over recent calls: count-based (the last N calls) and time-based (the
//! last T, in buckets).
//!
//! Both keep running aggregates — calls, failures, slow calls — so that recording a call
//! and reading the totals are O(1): nothing is ever rescanned. A count window keeps one
//! byte per call; a time window keeps one small bucket per slice of time and expires whole
//! buckets as time moves on (at most one pass over the buckets however far time jumps).
//!
//! These are plain synchronous data structures; the breaker decides how they are shared.

use fusebox_classify::Nanos;
use std::time::Duration;

/// The totals of a window: how many calls it holds, how many failed, how many were slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub struct WindowTotals {
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub failures: u32,
    /// Slow calls in the window (successes and failures alike).
    pub slow: u32,
}

impl WindowTotals {
    /// Totals of `calls` calls, `failures` of them failed and `slow` of them slow.
    pub const fn new(calls: u32, failures: u32, slow: u32) -> Self {
        WindowTotals {
            calls,
            failures,
            slow,
        }
    }

    /// The failure rate in percent (0 when empty), for display. Decisions compare integers.
    pub fn failure_rate(&self) -> f64 {
        rate(self.failures, self.calls)
    }

    /// The slow-call rate in percent (0 when empty), for display.
    pub fn slow_rate(&self) -> f64 {
        rate(self.slow, self.calls)
    }

    /// Whether failures make up at least `percent` of the calls (`failures * 100 >= percent *
    /// calls`, in integers). False for an empty window.
    pub fn failure_rate_at_least(&self, percent: u8) -> bool {
        at_least(self.failures, self.calls, percent)
    }

    /// Whether slow calls make up at least `percent` of the calls. False for an empty window.
    pub fn slow_rate_at_least(&self, percent: u8) -> bool {
        at_least(self.slow, self.calls, percent)
    }
}

fn rate(part: u32, total: u32) -> f64 {
    if total == 0 {
        0.0
    } else {
        f64::from(part) * 100.0 / f64::from(total)
    }
}

fn at_least(part: u32, total: u32, percent: u8) -> bool {
    total > 0 && u64::from(part) * 100 >= u64::from(percent) * u64::from(total)
}

const FAILED: u8 = 0b01;
const SLOW: u8 = 0b10;

fn code(failure: bool, slow: bool) -> u8 {
    (if failure { FAILED } else { 0 }) | (if slow { SLOW } else { 0 })
}

/// Calls kept per word of a count window: two bits each (failed, slow).
const PER_WORD: usize = 32;

/// The last `size` calls.
///
/// Two bits per call, packed 32 to a `u64`: a window of 100 calls keeps 32 bytes, not
/// 100 — it matters for keyed breakers, which keep one window per key.
#[derive(Debug, Clone)]
pub struct CountWindow {
    slots: Box<[u64]>,
    size: u32,
    next: u32,
    totals: WindowTotals,
}

impl CountWindow {
    /// A window over the last `size` calls (at least 1).
    pub fn new(size: u32) -> Self {
        let size = size.max(1);
        CountWindow {
            slots: vec![0; (size as usize).div_ceil(PER_WORD)].into_boxed_slice(),
            size,
            next: 0,
            totals: WindowTotals::default(),
        }
    }

    /// How many calls the window holds when full.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Records one call, evicting the oldest when full.
    pub fn record(&mut self, failure: bool, slow: bool) {
        let new = code(failure, slow);
        let i = self.next as usize;
        let (word, shift) = (i / PER_WORD, (i % PER_WORD) * 2);
        let slot = &mut self.slots[word];
        if self.totals.calls == self.size {
            let old = ((*slot >> shift) & 0b11) as u8;
            self.totals.failures -= u32::from(old & FAILED != 0);
            self.totals.slow -= u32::from(old & SLOW != 0);
        } else {
            self.totals.calls += 1;
        }
        *slot = (*slot & !(0b11 << shift)) | (u64::from(new) << shift);
        self.totals.failures += u32::from(failure);
        self.totals.slow += u32::from(slow);
        self.next += 1;
        if self.next == self.size {
            self.next = 0;
        }
    }

    /// The totals.
    pub fn totals(&self) -> WindowTotals {
        self.totals
    }

    /// Whether the window is full and holds only fast successes: recording another fast
    /// success would change nothing, whichever slot it replaced.
    pub fn is_clean(&self) -> bool {
        self.totals.calls == self.size && self.totals.failures == 0 && self.totals.slow == 0
    }

    /// Forgets every call.
    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.next = 0;
        self.totals = WindowTotals::default();
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    calls: u32,
    failures: u32,
    slow: u32,
}

/// The calls of the last `duration`, in `buckets` slices. A call lands in the slice of the
/// time it finished; a slice leaves the window whole once it is `duration` old, so the
/// window spans between `duration - duration / buckets` and `duration` of history.
#[derive(Debug, Clone)]
pub struct TimeWindow {
    buckets: Box<[Bucket]>,
    width: u64,
    /// Absolute index (time / width) of the newest bucket.
    head: u64,
    totals: WindowTotals,
}

impl TimeWindow {
    /// A window over the last `duration`, in `buckets` slices (both at least 1; a slice is
    /// at least 1 ns).
    pub fn new(duration: Duration, buckets: u32) -> Self {
        let n = buckets.max(1);
        let width = (fusebox_classify::clock::duration_nanos(duration) / u64::from(n)).max(1);
        TimeWindow {
            buckets: vec![Bucket::default(); n as usize].into_boxed_slice(),
            width,
            head: 0,
            totals: WindowTotals::default(),
        }
    }

    fn advance(&mut self, now: Nanos) {
        let index = now.0 / self.width;
        if index <= self.head {
            return;
        }
        let n = self.buckets.len() as u64;
        if index - self.head >= n {
            self.buckets.fill(Bucket::default());
            self.totals = WindowTotals::default();
        } else {
            for i in self.head + 1..=index {
                let slot = &mut self.buckets[(i % n) as usize];
                self.totals.calls -= slot.calls;
                self.totals.failures -= slot.failures;
                self.totals.slow -= slot.slow;
                *slot = Bucket::default();
            }
        }
        self.head = index;
    }

    /// Records one call finished at `now`. A call from before the newest bucket (clocks read
    /// on different threads) counts in the newest bucket.
    pub fn record(&mut self, failure: bool, slow: bool, now: Nanos) {
        self.advance(now);
        let n = self.buckets.len() as u64;
        let slot = &mut self.buckets[(self.head % n) as usize];
        slot.calls = slot.calls.saturating_add(1);
        slot.failures = slot.failures.saturating_add(u32::from(failure));
        slot.slow = slot.slow.saturating_add(u32::from(slow));
        self.totals.calls = self.totals.calls.saturating_add(1);
        self.totals.failures = self.totals.failures.saturating_add(u32::from(failure));
        self.totals.slow = self.totals.slow.saturating_add(u32::from(slow));
    }

    /// The totals as of `now` (expired buckets are dropped first).
    pub fn totals(&mut self, now: Nanos) -> WindowTotals {
        self.advance(now);
        self.totals
    }

    /// Forgets every call.
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
        self.totals = WindowTotals::default();
    }
}

/// Either window, as configured.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Window {
    /// The last N calls.
    Count(CountWindow),
    /// The last T.
    Time(TimeWindow),
}

impl Window {
    /// Records one call finished at `now`.
    pub fn record(&mut self, failure: bool, slow: bool, now: Nanos) {
        match self {
            Window::Count(w) => w.record(failure, slow),
            Window::Time(w) => w.record(failure, slow, now),
        }
    }

    /// The totals as of `now`.
    pub fn totals(&mut self, now: Nanos) -> WindowTotals {
        match self {
            Window::Count(w) => w.totals(),
            Window::Time(w) => w.totals(now),
        }
    }

    /// Whether a fast success would change nothing (count windows only).
    pub fn is_clean(&self) -> bool {
        match self {
            Window::Count(w) => w.is_clean(),
            Window::Time(_) => false,
        }
    }

    /// Whether totals depend on the time they are read at.
    pub fn is_timed(&self) -> bool {
        matches!(self, Window::Time(_))
    }

    /// Forgets every call.
    pub fn clear(&mut self) {
        match self {
            Window::Count(w) => w.clear(),
            Window::Time(w) => w.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Call { failure: bool, slow: bool },
        Wait(u64),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            prop_oneof![
                4 => (any::<bool>(), any::<bool>()).prop_map(|(failure, slow)| Step::Call { failure, slow }),
                1 => (0u64..3_000).prop_map(Step::Wait),
            ],
            0..600,
        )
    }

    fn recount(calls: &[(bool, bool)]) -> WindowTotals {
        WindowTotals {
            calls: calls.len() as u32,
            failures: calls.iter().filter(|c| c.0).count() as u32,
            slow: calls.iter().filter(|c| c.1).count() as u32,
        }
    }

    proptest! {
        #[test]
        fn count_window_equals_a_naive_recount(size in 1u32..64, steps in steps()) {
            let mut w = CountWindow::new(size);
            let mut all = Vec::new();
            for step in steps {
                if let Step::Call { failure, slow } = step {
                    w.record(failure, slow);
                    all.push((failure, slow));
                    let start = all.len().saturating_sub(size as usize);
                    prop_assert_eq!(w.totals(), recount(&all[start..]));
                    let last = &all[start..];
                    prop_assert_eq!(w.is_clean(), last.len() == size as usize && last.iter().all(|c| !c.0 && !c.1));
                }
            }
        }

        #[test]
        fn time_window_equals_a_naive_recount(buckets in 1u32..12, width_ms in 1u64..500, steps in steps()) {
            let width = Duration::from_millis(width_ms);
            let mut w = TimeWindow::new(width * buckets, buckets);
            let width_ns = width_ms * 1_000_000;
            let mut now = 0u64;
            let mut all: Vec<(u64, bool, bool)> = Vec::new();
            for step in steps {
                match step {
                    Step::Wait(ms) => now += ms * 1_000_000 / 7,
                    Step::Call { failure, slow } => {
                        w.record(failure, slow, Nanos(now));
                        all.push((now / width_ns, failure, slow));
                    }
                }
                // Calls whose bucket is one of the newest `buckets` buckets.
                let head = now / width_ns;
                let live: Vec<(bool, bool)> = all
                    .iter()
                    .filter(|(b, _, _)| head - b < u64::from(buckets))
                    .map(|(_, f, s)| (*f, *s))
                    .collect();
                prop_assert_eq!(w.totals(Nanos(now)), recount(&live));
            }
        }
    }

    #[test]
    fn long_runs_do_not_dilute_the_window() {
        // A window of 100 that has seen 1000 successes holds 50 % failures after 50 more
        // failures, not after 1000.
        let mut w = CountWindow::new(100);
        for _ in 0..1000 {
            w.record(false, false);
        }
        assert!(w.is_clean());
        for i in 1..=50 {
            w.record(true, false);
            assert_eq!(
                w.totals().failure_rate_at_least(50),
                i == 50,
                "after {i} failures"
            );
        }
        assert_eq!(
            w.totals(),
            WindowTotals {
                calls: 100,
                failures: 50,
                slow: 0
            }
        );
    }

    #[test]
    fn time_window_expires_whole_buckets() {
        let mut w = TimeWindow::new(Duration::from_secs(10), 10);
        w.record(true, false, Nanos(0));
        w.record(false, true, Nanos(500_000_000));
        assert_eq!(
            w.totals(Nanos(9_999_999_999)),
            WindowTotals {
                calls: 2,
                failures: 1,
                slow: 1
            }
        );
        assert_eq!(w.totals(Nanos(10_000_000_000)), WindowTotals::default());
        // A jump far ahead clears everything in one pass.
        w.record(true, true, Nanos(11_000_000_000));
        assert_eq!(w.totals(Nanos(u64::MAX)), WindowTotals::default());
    }

    #[test]
    fn rates_compare_in_integers() {
        let t = WindowTotals {
            calls: 3,
            failures: 1,
            slow: 2,
        };
        assert!(!t.failure_rate_at_least(34));
        assert!(t.failure_rate_at_least(33));
        assert!(t.slow_rate_at_least(66));
        assert!(!t.slow_rate_at_least(67));
        assert!(!WindowTotals::default().failure_rate_at_least(1));
        assert!((t.failure_rate() - 33.333).abs() < 0.01);
    }
}
