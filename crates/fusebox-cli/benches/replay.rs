//! Replay throughput: recorded calls per second, read and run through the breakers.
//!
//! Run with: `cargo bench -p fusebox-cli --bench replay`
//!
//! The data is generated: a million calls (about six minutes at ~2,800 calls per second)
//! on four routes of two policies, latencies from 2 ms to 2 s, an incident of 503s and slow
//! calls in the middle (so the breakers trip, probe and close), as CSV with RFC 3339
//! timestamps and as JSON lines. Each iteration replays the whole buffer, parsing
//! included; criterion reports elements (calls) per second.
//!
//! `csv` and `jsonl` measure wall time: a replay reads on one thread and replays on
//! another. The machine may be shared (other builds beside the benchmark), so `csv_cpu`,
//! `jsonl_cpu` and the sweep measure the process's CPU time instead — all its threads
//! together, so their figures are calls per CPU-second. `read_csv_cpu` and
//! `read_jsonl_cpu` time the reading stage alone (the calling thread's CPU time, no
//! replay): the wall-time figure is bounded by the slower of reading and replaying.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusebox_cli::config::load_policy_file;
use fusebox_cli::input::SourceFile;
use fusebox_cli::replay::calls::{CallReader, Format, format_rfc3339};
use fusebox_cli::replay::sweep::{Grid, SweepOptions, sweep};
use fusebox_cli::replay::{ReplayOptions, TransitionRecord, replay};
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

fn cpu(clock: rustix::time::ClockId) -> Duration {
    let t = rustix::time::clock_gettime(clock);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Times `iters` runs of `f` in CPU time of `clock`.
fn cpu_time(clock: rustix::time::ClockId, iters: u64, mut f: impl FnMut()) -> Duration {
    let start = cpu(clock);
    for _ in 0..iters {
        f();
    }
    cpu(clock).saturating_sub(start)
}

const POLICIES: &str = r#"
[policies.orders.default_route]
slow_call_duration = "500ms"
[policies.orders.breaker]
count_window = 100
minimum_calls = 20
failure_rate_threshold = 50
slow_call_rate_threshold = 80
open_wait = "5s"
open_wait_jitter = "1s"
[policies.orders.routes."GET /orders/{id}"]
slow_call_duration = "500ms"
[policies.orders.routes."POST /orders"]
slow_call_duration = "1s"

[policies.payments.breaker]
time_window = "10s"
time_window_buckets = 10
minimum_calls = 10
failure_rate_threshold = 30
[policies.payments.routes."POST /charges"]
[policies.payments.routes."GET /charges/{id}"]
"#;

const ROUTES: [&str; 4] = [
    "GET /orders/{id}",
    "POST /orders",
    "POST /charges",
    "GET /charges/{id}",
];

/// `n` calls; xorshift for reproducible noise.
fn generate(n: usize, json: bool) -> Vec<u8> {
    let mut s = String::with_capacity(n * 60);
    if !json {
        s.push_str("timestamp,route,status,latency_ms\n");
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let start: u64 = 1_714_564_800_000_000_000;
    let mut t = start;
    for i in 0..n {
        t += 200_000 + next() % 300_000; // 0.2–0.5 ms apart
        let r = next();
        let route = ROUTES[(r % 4) as usize];
        let incident = (n * 2 / 5..n / 2).contains(&i);
        let status = match (incident, r % 100) {
            (true, 0..=59) => "503",
            (true, _) => "200",
            (false, 0) => "503",
            (false, 1) => "timeout",
            (false, 2) => "404",
            (false, 3) => "429",
            _ => "200",
        };
        let latency_us = if incident && r % 7 == 0 {
            800_000 + next() % 1_200_000
        } else {
            2_000 + next() % 40_000
        };
        let ts = format_rfc3339(t);
        if json {
            let _ = writeln!(
                s,
                "{{\"timestamp\":\"{ts}\",\"route\":\"{route}\",\"status\":\"{status}\",\"latency_ms\":{}.{:03}}}",
                latency_us / 1000,
                latency_us % 1000
            );
        } else {
            let _ = writeln!(
                s,
                "{ts},{route},{status},{}.{:03}",
                latency_us / 1000,
                latency_us % 1000
            );
        }
    }
    s.into_bytes()
}

/// Reads every call of `data`; returns a sum of their fields so nothing is optimised away.
fn read_all(data: &[u8], format: Format) -> u64 {
    let mut reader = CallReader::new("calls", black_box(data), format);
    let mut sum = 0u64;
    while let Ok(Some(c)) = reader.next_call() {
        sum = sum
            .wrapping_add(c.at ^ c.latency)
            .wrapping_add(u64::from(c.result) + c.route.len() as u64);
    }
    sum
}

fn bench(c: &mut Criterion) {
    let policies = load_policy_file(&SourceFile::new("bench.toml", POLICIES))
        .expect("the bench policies are valid");
    let n = 1_000_000;
    let csv = generate(n, false);
    let jsonl = generate(n, true);
    let options = ReplayOptions::default();

    // Sanity: the incident trips the breakers.
    let report = replay(&policies, "calls.csv", &csv, &options).expect("replays");
    assert!(report.breakers.iter().all(|b| b.stats.openings > 0));
    // Both formats hold the same calls and replay alike; each call sits one line further
    // down in the CSV file, under its header.
    let from_json = replay(&policies, "calls.jsonl", &jsonl, &options).expect("replays");
    assert_eq!(from_json.calls, n as u64);
    for (a, b) in report.breakers.iter().zip(&from_json.breakers) {
        let below_header: Vec<_> = b
            .transitions
            .iter()
            .map(|t| TransitionRecord {
                line: t.line + 1,
                ..t.clone()
            })
            .collect();
        assert_eq!((&a.stats, &a.transitions), (&b.stats, &below_header));
    }

    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    // Wall time: what a user waits (reading and replaying run on two threads).
    g.bench_function("csv", |b| {
        b.iter(|| black_box(replay(&policies, "calls.csv", black_box(&csv), &options).ok()))
    });
    g.bench_function("jsonl", |b| {
        b.iter(|| black_box(replay(&policies, "calls.jsonl", black_box(&jsonl), &options).ok()))
    });
    // CPU time of the whole process (both threads): the cost per call, unaffected by what
    // else the machine runs.
    let process = rustix::time::ClockId::ProcessCPUTime;
    g.bench_function("csv_cpu", |b| {
        b.iter_custom(|iters| {
            cpu_time(process, iters, || {
                black_box(replay(&policies, "calls.csv", black_box(&csv), &options).ok());
            })
        })
    });
    g.bench_function("jsonl_cpu", |b| {
        b.iter_custom(|iters| {
            cpu_time(process, iters, || {
                black_box(replay(&policies, "calls.jsonl", black_box(&jsonl), &options).ok());
            })
        })
    });
    // The reading stage alone, on this thread: every call parsed, none replayed.
    let thread = rustix::time::ClockId::ThreadCPUTime;
    for (name, data, format) in [
        ("read_csv_cpu", &csv, Format::Csv),
        ("read_jsonl_cpu", &jsonl, Format::JsonLines),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                cpu_time(thread, iters, || {
                    black_box(read_all(data, format));
                })
            })
        });
    }
    let grid = Grid {
        failure_rates: vec![30, 50, 70],
        minimum_calls: vec![10, 50],
        ..Grid::default()
    };
    let sweep_options = SweepOptions {
        grid,
        policy: Some("orders".into()),
        incident: None,
        within: Duration::from_secs(30),
        replay: options.clone(),
        threads: 0,
    };
    // A sweep of 6 settings: throughput counts every call of every setting.
    let swept = sweep(&policies, "calls.csv", &csv, &sweep_options).expect("the sweep runs");
    assert_eq!((swept.calls, swept.rows.len()), (n as u64, 6));
    g.throughput(Throughput::Elements(6 * n as u64));
    g.bench_function("sweep_6_settings_csv_cpu", |b| {
        b.iter_custom(|iters| {
            cpu_time(process, iters, || {
                black_box(sweep(&policies, "calls.csv", black_box(&csv), &sweep_options).ok());
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
