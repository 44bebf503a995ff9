//! Outcomes waiting to be flushed to Redis: counts in one atomic word, stamped with the
//! epoch they were admitted in.
//!
//! A word holds a 16-bit stamp of the epoch and three 16-bit counts (calls, failures, slow
//! calls). Adding checks the stamp and adds in one compare-and-swap, so an outcome is
//! counted in the batch of its own epoch or not at all: when the fleet moves to a new epoch
//! the worker swaps the word for an empty one with the new stamp, and a late outcome of the
//! old epoch finds the stamp changed and is dropped, exactly as the script would drop it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const TAG_SHIFT: u32 = 48;
const FAIL_SHIFT: u32 = 16;
const SLOW_SHIFT: u32 = 32;
const MASK: u64 = 0xffff;

/// The most calls one batch holds.
pub(crate) const BATCH_MAX: u32 = 0xffff;
/// Calls after which the worker is asked to flush early.
pub(crate) const BATCH_HIGH: u32 = 0x4000;

/// The stamp of `epoch` in a batch word: its four 16-bit parts folded into one, so that
/// epochs that differ anywhere (they are Redis clock readings in microseconds, see the
/// crate docs) rarely share a stamp.
pub(crate) fn tag(epoch: u64) -> u64 {
    (epoch ^ (epoch >> 16) ^ (epoch >> 32) ^ (epoch >> 48)) & MASK
}

/// What adding an outcome did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Counted; the batch now holds this many calls.
    Counted(u32),
    /// The batch is of another epoch: the outcome is stale.
    Stale,
    /// The batch is full: the outcome is dropped.
    Full,
}

/// Counts taken out of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) calls: u32,
    pub(crate) failures: u32,
    pub(crate) slow: u32,
}

/// The pending outcomes of one scope.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    word: AtomicU64,
    /// Failures since the last success (for the consecutive-failures trigger); approximate
    /// across concurrent calls, as the trigger is in batched mode.
    trailing: AtomicU32,
}

impl Batch {
    /// An empty batch for `epoch`.
    pub(crate) fn new(epoch: u64) -> Batch {
        Batch {
            word: AtomicU64::new(tag(epoch) << TAG_SHIFT),
            trailing: AtomicU32::new(0),
        }
    }

    /// Adds one outcome admitted in `epoch`.
    #[inline]
    pub(crate) fn add(&self, epoch: u64, failure: bool, slow: bool) -> Added {
        let delta = 1 | (u64::from(failure) << FAIL_SHIFT) | (u64::from(slow) << SLOW_SHIFT);
        let mut word = self.word.load(Ordering::Acquire);
        let added = loop {
            if word >> TAG_SHIFT != tag(epoch) {
                return Added::Stale;
            }
            let calls = (word & MASK) as u32;
            if calls >= BATCH_MAX {
                return Added::Full;
            }
            match self.word.compare_exchange_weak(
                word,
                word + delta,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break calls + 1,
                Err(now) => word = now,
            }
        };
        if failure {
            self.trailing.fetch_add(1, Ordering::Relaxed);
        } else if self.trailing.load(Ordering::Relaxed) != 0 {
            self.trailing.store(0, Ordering::Relaxed);
        }
        Added::Counted(added)
    }

    /// Takes the pending counts and their epoch stamp, leaving an empty batch stamped for
    /// `epoch`.
    pub(crate) fn take(&self, epoch: u64) -> (u64, Counts, u32) {
        let word = self.word.swap(tag(epoch) << TAG_SHIFT, Ordering::AcqRel);
        let counts = Counts {
            calls: (word & MASK) as u32,
            failures: ((word >> FAIL_SHIFT) & MASK) as u32,
            slow: ((word >> SLOW_SHIFT) & MASK) as u32,
        };
        (
            word >> TAG_SHIFT,
            counts,
            self.trailing.load(Ordering::Relaxed),
        )
    }

    /// Whether outcomes are waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.word.load(Ordering::Acquire) & MASK == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outcomes_of_its_own_epoch_only() {
        let b = Batch::new(7);
        assert!(b.is_empty());
        assert_eq!(b.add(7, false, false), Added::Counted(1));
        assert_eq!(b.add(7, true, false), Added::Counted(2));
        assert_eq!(b.add(7, true, true), Added::Counted(3));
        assert_eq!(b.add(6, true, true), Added::Stale);
        assert!(!b.is_empty());
        let (stamp, counts, trailing) = b.take(8);
        assert_eq!(stamp, tag(7));
        assert_eq!(
            counts,
            Counts {
                calls: 3,
                failures: 2,
                slow: 1
            }
        );
        assert_eq!(trailing, 2);
        // The new batch is of epoch 8: a late outcome of epoch 7 is stale.
        assert_eq!(b.add(7, true, false), Added::Stale);
        assert_eq!(b.add(8, false, false), Added::Counted(1));
        assert_eq!(b.take(8).1.calls, 1);
    }

    #[test]
    fn a_full_batch_drops_instead_of_overflowing() {
        let b = Batch::new(1);
        for _ in 0..BATCH_MAX {
            assert!(matches!(b.add(1, true, true), Added::Counted(_)));
        }
        assert_eq!(b.add(1, false, false), Added::Full);
        let (_, counts, _) = b.take(1);
        assert_eq!(counts.calls, BATCH_MAX);
        assert_eq!(counts.failures, BATCH_MAX);
        assert_eq!(counts.slow, BATCH_MAX);
    }

    #[test]
    fn concurrent_adds_are_all_counted() {
        let b = std::sync::Arc::new(Batch::new(3));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let b = std::sync::Arc::clone(&b);
                std::thread::spawn(move || {
                    for n in 0..1000 {
                        b.add(3, (n + i) % 4 == 0, false);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (_, counts, _) = b.take(3);
        assert_eq!(counts.calls, 4000);
        assert_eq!(counts.failures, 1000);
    }
}
