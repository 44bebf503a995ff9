//! Model checks of the budget's epoch-tagged buckets: every interleaving, and every
//! visibility of memory the C11 model allows, of two deposits into one bucket, and of a
//! deposit racing the bucket's roll-over to a new epoch (the first writer of a new epoch
//! resets the count in the same compare-and-swap that tags it). Run by `.ci/loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg fusebox_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p fusebox-retry --lib loom_model
//! ```

use super::{BUCKETS, Tagged, split};
use loom::sync::Arc;
use std::sync::atomic::Ordering;

/// The bucket's tag and count, read after the threads are done.
fn state(bucket: &Tagged) -> (u32, u32) {
    split(bucket.0.load(Ordering::Acquire))
}

/// Two deposits of one epoch into one bucket: neither is lost.
#[test]
fn loom_model_two_deposits_of_one_epoch_are_both_counted() {
    loom::model(|| {
        let bucket = Arc::new(Tagged::default());
        bucket.add(7, 1);
        let other = {
            let bucket = Arc::clone(&bucket);
            loom::thread::spawn(move || bucket.add(7, 2))
        };
        bucket.add(7, 3);
        other.join().expect("the other deposit");
        assert_eq!(state(&bucket), (7, 6));
        assert_eq!(bucket.get(7), 6);
    });
}

/// A deposit of the bucket's current epoch racing the first deposit of the epoch that
/// reuses the bucket a window later: the new epoch's count is its own deposit, never the
/// old one's too (no double count) and never lost; the old deposit belongs to a window no
/// reader looks at any more. A reader meanwhile sees, for each epoch, nothing or exactly
/// that epoch's deposits.
#[test]
fn loom_model_a_deposit_racing_a_roll_over_is_neither_lost_nor_counted_twice() {
    loom::model(|| {
        let old = 3;
        let new = old + BUCKETS as u64;
        let bucket = Arc::new(Tagged::default());
        bucket.add(old, 1);
        let late = {
            let bucket = Arc::clone(&bucket);
            loom::thread::spawn(move || bucket.add(old, 2))
        };
        let reader = {
            let bucket = Arc::clone(&bucket);
            loom::thread::spawn(move || {
                let seen_old = bucket.get(old);
                assert!(
                    seen_old == 0 || seen_old == 1 || seen_old == 3,
                    "{seen_old}"
                );
                let seen_new = bucket.get(new);
                assert!(seen_new == 0 || seen_new == 5, "{seen_new}");
            })
        };
        bucket.add(new, 5);
        late.join().expect("the late deposit");
        reader.join().expect("the reader");
        assert_eq!(state(&bucket), (new as u32, 5), "the new epoch's own count");
        assert_eq!(bucket.get(old), 0, "the old epoch has left the bucket");
    });
}
