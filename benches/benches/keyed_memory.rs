//! Memory of keyed circuit breakers: bytes per key at a count window of 100, and live bytes
//! while a million distinct keys pass through a breaker capped at 10 000 keys.
//!
//! Run with: `cargo bench -p fusebox-benches --bench keyed_memory`
//!
//! A counting global allocator (stats_alloc's) says how many bytes are live; see
//! [`fusebox_benches::keyed`]. Two measurements:
//!
//! - bytes per key: 1 000, 10 000 and 100 000 keys made under a cap four times larger (none
//!   evicted), live bytes ÷ keys held, the map's buckets included (target ≤ 512 B);
//! - churn: 1 000 000 distinct keys, one call each, cap 10 000: live bytes and keys held
//!   after 10 k, 100 k and 1 M keys, and the peak over the run, sampled every 1 000 keys
//!   (target: flat — the peak after the cap is first reached stays where it was).
//!
//! `FUSEBOX_KEYED_CHURN` sets the number of distinct keys of the churn run. Without
//! `--bench` (as `cargo test --benches` runs it) it makes 20 000 keys, to show it works;
//! `--list` lists nothing.
#![allow(clippy::print_stdout, reason = "a bench reports on stdout")]

use fusebox_benches::keyed::{Sample, bytes_per_key, churn};
use fusebox_benches::{current_thread, env_usize};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use std::alloc::System;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const WINDOW: u32 = 100;
const CAP: usize = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let rt = current_thread();

    println!("== bytes per key, count window {WINDOW}, no eviction");
    println!("{:>8} {:>12} {:>10}", "keys", "live bytes", "bytes/key");
    let sizes: &[u64] = if full {
        &[1_000, 10_000, 100_000]
    } else {
        &[1_000]
    };
    for &keys in sizes {
        let m = bytes_per_key(GLOBAL, &rt, WINDOW, keys);
        println!("{:>8} {:>12} {:>10.1}", m.keys, m.bytes, m.per_key());
    }

    let total = if full {
        env_usize("FUSEBOX_KEYED_CHURN", 1_000_000) as u64
    } else {
        20_000
    };
    println!("\n== churn: {total} distinct keys, cap {CAP}, count window {WINDOW}");
    let samples = churn(GLOBAL, &rt, WINDOW, CAP, total, 1_000);
    let at = |n: u64| samples.iter().find(|s| s.keys_seen == n);
    println!(
        "{:>10} {:>10} {:>12} {:>12}",
        "keys seen", "keys held", "live bytes", "peak so far"
    );
    for n in [10_000, 20_000, 100_000, 1_000_000] {
        if let Some(Sample {
            keys_seen,
            keys_held,
            live,
            peak,
        }) = at(n)
        {
            println!("{keys_seen:>10} {keys_held:>10} {live:>12} {peak:>12}");
        }
    }
    let max_held = samples.iter().map(|s| s.keys_held).max().unwrap_or(0);
    let peak_at_cap = samples
        .iter()
        .filter(|s| s.keys_seen <= 2 * CAP as u64)
        .map(|s| s.peak)
        .max()
        .unwrap_or(0);
    let peak = samples.last().map_or(0, |s| s.peak);
    println!(
        "most keys held at any sample: {max_held} (cap {CAP}); peak live bytes over the first {} keys: {peak_at_cap}, over all {total}: {peak} ({:.3}x)",
        2 * CAP,
        peak as f64 / peak_at_cap.max(1) as f64
    );
}
