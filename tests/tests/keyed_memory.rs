//! Keyed circuit breakers hold a bounded amount of memory: a few hundred bytes per key, and
//! no growth while many more distinct keys pass than the cap allows.
//!
//! Its own test binary, because it installs a counting global allocator (stats_alloc's: the
//! workspace forbids `unsafe`, which a hand-written `GlobalAlloc` needs): live bytes are the
//! bytes requested and not yet freed. The measurement is the one the `keyed_memory` bench
//! runs (`fusebox_benches::keyed`), at a smaller scale: the bench passes a million keys.
//! The tests share the global counters, so they take a lock and never run at once.

use fusebox_benches::keyed::{bytes_per_key, churn};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, StatsAlloc};
use std::alloc::System;
use std::sync::{Mutex, PoisonError};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One measurement at a time: the allocator's counters are global.
static MEASURING: Mutex<()> = Mutex::new(());

const WINDOW: u32 = 100;
const CAP: usize = 10_000;

/// The target: at most 512 bytes per key at a count window of 100.
const TARGET_BYTES_PER_KEY: f64 = 512.0;

fn measured_bytes_per_key() -> f64 {
    let rt = alloc::runtime();
    let m = bytes_per_key(GLOBAL, &rt, WINDOW, 10_000);
    assert_eq!(m.keys, 10_000, "every key is held (the cap is above them)");
    m.per_key()
}

#[test]
fn memory_stays_flat_while_keys_churn_past_the_cap() {
    let _one = MEASURING.lock().unwrap_or_else(PoisonError::into_inner);
    let rt = alloc::runtime();
    // 30 x the cap in distinct keys, sampled every 1 000 keys.
    let samples = churn(GLOBAL, &rt, WINDOW, CAP, 30 * CAP as u64, 1_000);
    assert_eq!(samples.len(), 300);
    let most_held = samples.iter().map(|s| s.keys_held).max().unwrap_or(0);
    assert!(most_held <= CAP, "at most {CAP} keys held, saw {most_held}");
    // The peak while the cap is first reached (the first 2 x cap keys) is the bound for
    // the rest of the run: 28 more rounds of the cap in new keys add nothing.
    let early = samples
        .iter()
        .filter(|s| s.keys_seen <= 2 * CAP as u64)
        .map(|s| s.live)
        .max()
        .unwrap_or(0);
    let later = samples
        .iter()
        .filter(|s| s.keys_seen > 2 * CAP as u64)
        .map(|s| s.live)
        .max()
        .unwrap_or(0);
    assert!(early > 0, "the keyed breaker holds memory once keys arrive");
    assert!(
        later as f64 <= early as f64 * 1.05,
        "live bytes grew under churn: peak {early} over the first {} keys, {later} after",
        2 * CAP
    );
    let per_key_now = samples
        .last()
        .map_or(0.0, |s| s.live as f64 / s.keys_held.max(1) as f64);
    assert!(
        per_key_now <= TARGET_BYTES_PER_KEY * 1.5,
        "{per_key_now:.0} live bytes per key held at the end of the churn"
    );
}

/// 489 B measured (docs/performance.md): a change that makes each key's breaker larger
/// than the target fails here.
#[test]
fn bytes_per_key_at_a_count_window_of_100_are_at_most_512() {
    let _one = MEASURING.lock().unwrap_or_else(PoisonError::into_inner);
    let per_key = measured_bytes_per_key();
    assert!(
        per_key <= TARGET_BYTES_PER_KEY,
        "{per_key:.1} live bytes per key at a count window of {WINDOW} (target {TARGET_BYTES_PER_KEY})"
    );
}
