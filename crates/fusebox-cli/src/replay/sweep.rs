//! `fusebox replay --sweep`: the same recorded calls over a grid of thresholds.
//!
//! Tuning a breaker is a trade: a low failure threshold or a small minimum opens quickly in
//! an incident and also on a handful of unlucky calls on a quiet night; a large window is
//! stable and slow. The sweep replays the calls once per combination of failure-rate
//! threshold, slow-call duration, slow-call-rate threshold, minimum calls and window, and
//! prints what each would have done. Given a labelled incident (`--incident START..END`)
//! it marks the settings that opened within `--within` of the incident's start and never
//! opened outside it: the ones that would have helped without crying wolf.
//!
//! The calls are read and resolved once into a compact array; each setting replays that
//! array on its own thread (as many as the machine has cores).

use super::calls::{CallReader, Format, TimeStyle};
use super::{Engine, ReplayOptions, Resolved, Resolver, format_time, thousands};
use crate::config::{BreakerOverrides, Policies};
use crate::input::InputError;
use fusebox_breaker::WindowConfig;
use fusebox_classify::section::{format_duration, parse_duration};
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The thresholds to try; an empty list keeps the configured value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grid {
    /// `failure_rate_threshold` values, percent.
    pub failure_rates: Vec<u32>,
    /// Slow-call durations (every route of the policy).
    pub slow_call_durations: Vec<Duration>,
    /// `slow_call_rate_threshold` values, percent.
    pub slow_rates: Vec<u32>,
    /// `minimum_calls` values.
    pub minimum_calls: Vec<u32>,
    /// Windows.
    pub windows: Vec<WindowConfig>,
}

/// Parses a window: `count:100`, `time:30s`, `time:30s/20` (20 buckets).
pub fn parse_window(s: &str) -> Result<WindowConfig, String> {
    let s = s.trim();
    if let Some(n) = s.strip_prefix("count:") {
        return n
            .trim()
            .parse()
            .map(|size| WindowConfig::Count { size })
            .map_err(|_| format!("bad window {s:?}: count:N takes a number of calls"));
    }
    if let Some(rest) = s.strip_prefix("time:") {
        let (d, buckets) = match rest.split_once('/') {
            Some((d, b)) => (
                d,
                b.trim().parse().map_err(|_| {
                    format!("bad window {s:?}: the buckets after / must be a number")
                })?,
            ),
            None => (rest, WindowConfig::DEFAULT_BUCKETS),
        };
        let duration = parse_duration(d).map_err(|e| format!("bad window {s:?}: {e}"))?;
        return Ok(WindowConfig::Time { duration, buckets });
    }
    Err(format!(
        "bad window {s:?}: write count:N (the last N calls) or time:30s (the last 30 s)"
    ))
}

fn window_name(w: WindowConfig) -> String {
    match w {
        WindowConfig::Count { size } => format!("count:{size}"),
        WindowConfig::Time { duration, buckets } if buckets == WindowConfig::DEFAULT_BUCKETS => {
            format!("time:{}", format_duration(duration))
        }
        WindowConfig::Time { duration, buckets } => {
            format!("time:{}/{buckets}", format_duration(duration))
        }
        other => format!("{other:?}"),
    }
}

/// A labelled incident: when it started and ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentSpec {
    start: String,
    end: String,
}

impl IncidentSpec {
    /// Parses `START..END`: RFC 3339 timestamps, seconds since the epoch, or offsets from
    /// the first call (`+10m..+25m`).
    pub fn parse(s: &str) -> Result<IncidentSpec, String> {
        let (a, b) = s
            .split_once("..")
            .ok_or_else(|| format!("bad incident {s:?}: write START..END"))?;
        Ok(IncidentSpec {
            start: a.trim().to_owned(),
            end: b.trim().to_owned(),
        })
    }

    fn resolve(&self, t0: u64) -> Result<(u64, u64), String> {
        let one = |s: &str| -> Result<u64, String> {
            if let Some(rel) = s.strip_prefix('+') {
                let d = parse_duration(rel)?;
                return t0
                    .checked_add(fusebox_classify::clock::duration_nanos(d))
                    .ok_or_else(|| {
                        format!(
                            "bad time {s:?}: after {}, the latest time a replay can count",
                            super::calls::LATEST
                        )
                    });
            }
            let b = s.as_bytes();
            if b.len() >= 19 && b[4] == b'-' {
                super::calls::parse_rfc3339(b).map_err(|e| format!("bad time {s:?}: {e}"))
            } else {
                super::calls::parse_seconds(b).map_err(|e| match e {
                    super::calls::TOO_LATE => format!("bad time {s:?}: {e}"),
                    _ => format!("bad time {s:?}: expected RFC 3339, seconds since the epoch, or +OFFSET from the first call"),
                })
            }
        };
        let (start, end) = (one(&self.start)?, one(&self.end)?);
        if end < start {
            return Err(format!(
                "bad incident {}..{}: it ends before it starts",
                self.start, self.end
            ));
        }
        Ok((start, end))
    }
}

/// How to sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The grid.
    pub grid: Grid,
    /// Which policy (required when the file has several with a breaker).
    pub policy: Option<String>,
    /// The labelled incident, if any.
    pub incident: Option<IncidentSpec>,
    /// A setting "detects" the incident if it opens within this time of its start.
    pub within: Duration,
    /// Flap window and seed.
    pub replay: ReplayOptions,
    /// Threads (0: one per core).
    pub threads: usize,
}

/// One setting's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    /// `failure_rate_threshold`.
    pub failure_rate: u32,
    /// Slow-call duration (`None`: as configured per route).
    pub slow_call_duration: Option<String>,
    /// `slow_call_rate_threshold`.
    pub slow_rate: u32,
    /// `minimum_calls`.
    pub minimum_calls: u32,
    /// The window (`count:100`, `time:30s`).
    pub window: String,
    /// Why the setting could not run (an invalid combination), if so.
    pub invalid: Option<String>,
    /// CLOSED → OPEN transitions.
    pub openings: u32,
    /// Openings outside the incident.
    pub openings_outside: u32,
    /// Flaps (re-openings soon after closing).
    pub flaps: u32,
    /// The first opening at or after the incident's start, ns after the start.
    pub detected_after: Option<u64>,
    /// Calls rejected.
    pub rejected: u64,
    /// Rejected calls that would have succeeded.
    pub rejected_successes: u64,
    /// Of those, outside the incident.
    pub rejected_successes_outside: u64,
    /// Rejected calls that would have failed.
    pub rejected_failures: u64,
    /// Time open, ns.
    pub time_open: u64,
    /// Opened within `within` of the incident's start and never outside it.
    pub good: bool,
}

/// A sweep's result.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// The policy swept.
    pub policy: String,
    /// Calls read (all routes).
    pub calls: u64,
    /// Calls on the policy's routes.
    pub policy_calls: u64,
    /// The incident, ns since the epoch.
    pub incident: Option<(u64, u64)>,
    /// The detection bound.
    #[serde(skip)]
    pub within: Duration,
    /// How the file writes time.
    #[serde(skip)]
    pub time_style: TimeStyle,
    /// One row per setting, best first when there is an incident.
    pub rows: Vec<SweepRow>,
}

/// Sweeps the grid over the calls in `data`.
pub fn sweep(
    policies: &Policies,
    file: &str,
    data: &[u8],
    options: &SweepOptions,
) -> Result<SweepReport, InputError> {
    let with_breaker: Vec<usize> = policies
        .policies
        .iter()
        .enumerate()
        .filter(|(_, p)| p.breaker().is_some())
        .map(|(i, _)| i)
        .collect();
    let index = match &options.policy {
        Some(name) => {
            let i = policies
                .policies
                .iter()
                .position(|p| &p.name == name)
                .ok_or_else(|| {
                    InputError::in_file(&policies.file, format!("no policy named {name:?}"))
                })?;
            if policies.policies[i].breaker().is_none() {
                return Err(InputError::in_file(
                    &policies.file,
                    format!("policy {name:?} has no [breaker] to sweep"),
                ));
            }
            i
        }
        None => match with_breaker.as_slice() {
            [i] => *i,
            [] => {
                return Err(InputError::in_file(
                    &policies.file,
                    "no policy has a [breaker] to sweep",
                ));
            }
            _ => {
                return Err(InputError::in_file(
                    &policies.file,
                    "several policies have a breaker; choose one with --policy",
                ));
            }
        },
    };
    let policy = &policies.policies[index];

    // Read and resolve once.
    let mut resolver = Resolver::new(policies, Some(index), None);
    let format = options
        .replay
        .format
        .unwrap_or_else(|| Format::detect(file, data));
    let mut reader = CallReader::new(file, data, format);
    let mut calls: Vec<Resolved> = Vec::with_capacity(data.len() / 40);
    let mut total = 0u64;
    while let Some(c) = reader.next_call()? {
        total += 1;
        let class = resolver
            .resolve(c.route)
            .map_err(|why| reader.error_at(c.route, why))?;
        if class != super::SKIP {
            calls.push(Resolved {
                at: c.at,
                latency: c.latency,
                class,
                result: c.result,
            });
        }
    }
    if total == 0 {
        return Err(InputError::in_file(file, "no calls in the file"));
    }
    let t0 = calls.first().map_or(0, |c| c.at);
    let incident = match &options.incident {
        Some(i) => Some(
            i.resolve(t0)
                .map_err(|e| InputError::new(format!("--incident: {e}")))?,
        ),
        None => None,
    };

    // The grid, the configured value where a dimension is not swept.
    let base = policy
        .breaker_with(&BreakerOverrides::default())
        .and_then(Result::ok)
        .ok_or_else(|| InputError::in_file(&policies.file, "the policy's breaker is invalid"))?;
    let g = &options.grid;
    let or = |v: &Vec<u32>, d: u32| if v.is_empty() { vec![d] } else { v.clone() };
    let failure_rates = or(&g.failure_rates, u32::from(base.failure_rate_threshold()));
    let slow_rates = or(&g.slow_rates, u32::from(base.slow_call_rate_threshold()));
    let minimums = or(&g.minimum_calls, base.minimum_calls());
    let windows = if g.windows.is_empty() {
        vec![base.window()]
    } else {
        g.windows.clone()
    };
    let slows: Vec<Option<Duration>> = if g.slow_call_durations.is_empty() {
        vec![None]
    } else {
        g.slow_call_durations.iter().copied().map(Some).collect()
    };
    let mut points = Vec::new();
    for &f in &failure_rates {
        for &sd in &slows {
            for &sr in &slow_rates {
                for &m in &minimums {
                    for &w in &windows {
                        points.push((f, sd, sr, m, w));
                    }
                }
            }
        }
    }

    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<(usize, SweepRow)>> = Mutex::new(Vec::with_capacity(points.len()));
    let threads = if options.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        options.threads
    }
    .min(points.len())
    .max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(f, sd, sr, m, w)) = points.get(i) else {
                        break;
                    };
                    let overrides = BreakerOverrides {
                        failure_rate_threshold: Some(f),
                        slow_call_rate_threshold: Some(sr),
                        minimum_calls: Some(m),
                        window: Some(w),
                        default_seed: None,
                    };
                    let row = run_point(
                        policies, index, &resolver, &calls, &overrides, sd, options, incident, file,
                    );
                    if let Ok(mut rows) = rows.lock() {
                        rows.push((i, row));
                    }
                }
            });
        }
    });
    let mut rows: Vec<(usize, SweepRow)> = rows.into_inner().unwrap_or_default();
    rows.sort_by_key(|(i, _)| *i);
    let mut rows: Vec<SweepRow> = rows.into_iter().map(|(_, r)| r).collect();
    if incident.is_some() {
        // Best first: good ones, then by the successes they cost, then by how fast they
        // detected the incident.
        rows.sort_by_key(|r| {
            (
                r.invalid.is_some(),
                !r.good,
                r.openings_outside,
                r.rejected_successes,
                r.detected_after.unwrap_or(u64::MAX),
            )
        });
    }
    Ok(SweepReport {
        policy: policy.name.clone(),
        calls: total,
        policy_calls: calls.len() as u64,
        incident,
        within: options.within,
        time_style: reader.time_style(),
        rows,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_point(
    policies: &Policies,
    index: usize,
    resolver: &Resolver<'_>,
    calls: &[Resolved],
    overrides: &BreakerOverrides,
    slow: Option<Duration>,
    options: &SweepOptions,
    incident: Option<(u64, u64)>,
    file: &str,
) -> SweepRow {
    let mut row = SweepRow {
        failure_rate: overrides.failure_rate_threshold.unwrap_or_default(),
        slow_call_duration: slow.map(format_duration),
        slow_rate: overrides.slow_call_rate_threshold.unwrap_or_default(),
        minimum_calls: overrides.minimum_calls.unwrap_or_default(),
        window: overrides.window.map(window_name).unwrap_or_default(),
        invalid: None,
        openings: 0,
        openings_outside: 0,
        flaps: 0,
        detected_after: None,
        rejected: 0,
        rejected_successes: 0,
        rejected_successes_outside: 0,
        rejected_failures: 0,
        time_open: 0,
        good: false,
    };
    let mut engine = match Engine::new(
        policies,
        Some(index),
        overrides,
        slow,
        &options.replay,
        incident,
    ) {
        Ok(e) => e,
        Err(e) => {
            let reason = e.reason().to_owned();
            row.invalid = Some(
                reason
                    .split_once("invalid: ")
                    .map_or(reason.clone(), |(_, r)| r.to_owned()),
            );
            return row;
        }
    };
    let slow_ns = slow.map(fusebox_classify::clock::duration_nanos);
    engine.resolver.classes = resolver
        .classes
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if let Some(s) = slow_ns {
                c.slow_ns = s;
            }
            c
        })
        .collect();
    for c in calls {
        // A row reports no transitions: the calls keep no lines.
        engine.feed_class(c.at, 0, c.class, c.result, c.latency);
    }
    let report = engine.finish(file, TimeStyle::Seconds);
    let Some(b) = report.breakers.first() else {
        return row;
    };
    row.openings = b.stats.openings;
    row.flaps = b.stats.flaps;
    row.rejected = b.stats.rejected;
    row.rejected_successes = b.stats.rejected_successes;
    row.rejected_successes_outside = b.stats.rejected_successes_outside;
    row.rejected_failures = b.stats.rejected_failures;
    row.time_open = b.stats.time_open;
    if let Some((start, end)) = incident {
        for t in b
            .transitions
            .iter()
            .filter(|t| t.from == "closed" && t.to == "open")
        {
            if t.at < start || t.at > end {
                row.openings_outside += 1;
            } else if row.detected_after.is_none() {
                row.detected_after = Some(t.at - start);
            }
        }
        let within = fusebox_classify::clock::duration_nanos(options.within);
        row.good = row.openings_outside == 0 && row.detected_after.is_some_and(|d| d <= within);
    }
    row
}

/// The sweep as a table.
pub fn render_sweep(r: &SweepReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "sweep of policy {:?}: {} settings over {} calls ({} on its routes)",
        r.policy,
        r.rows.len(),
        thousands(r.calls),
        thousands(r.policy_calls)
    );
    if let Some((a, b)) = r.incident {
        let _ = writeln!(
            s,
            "incident {} .. {}: a setting is marked ✓ when it opened within {} of the start and never outside the incident",
            format_time(a, r.time_style),
            format_time(b, r.time_style),
            format_duration(r.within)
        );
    }
    let _ = writeln!(s);
    let incident = r.incident.is_some();
    let mut header = format!(
        "{:>2} {:>5} {:>8} {:>5} {:>7} {:<12} {:>8} {:>6} {:>9} {:>12} {:>12} {:>10}",
        "",
        "fail%",
        "slow at",
        "slow%",
        "minimum",
        "window",
        "openings",
        "flaps",
        "rejected",
        "ok rejected",
        "bad rejected",
        "time open"
    );
    if incident {
        header = format!(
            "{:>2} {:>5} {:>8} {:>5} {:>7} {:<12} {:>8} {:>8} {:>6} {:>9} {:>9} {:>12} {:>12} {:>10}",
            "",
            "fail%",
            "slow at",
            "slow%",
            "minimum",
            "window",
            "detected",
            "openings",
            "flaps",
            "outside",
            "rejected",
            "ok rejected",
            "bad rejected",
            "time open"
        );
    }
    let _ = writeln!(s, "{}", header.trim_end());
    for row in &r.rows {
        let slow = row
            .slow_call_duration
            .clone()
            .unwrap_or_else(|| "config".into());
        if let Some(why) = &row.invalid {
            let _ = writeln!(
                s,
                "{:>2} {:>5} {:>8} {:>5} {:>7} {:<12} invalid: {why}",
                "", row.failure_rate, slow, row.slow_rate, row.minimum_calls, row.window
            );
            continue;
        }
        let open = format_duration(Duration::from_millis(row.time_open / 1_000_000));
        if incident {
            let detected = match row.detected_after {
                Some(d) => format!("+{}", format_duration(Duration::from_millis(d / 1_000_000))),
                None => "never".into(),
            };
            let _ = writeln!(
                s,
                "{:>2} {:>5} {:>8} {:>5} {:>7} {:<12} {:>8} {:>8} {:>6} {:>9} {:>9} {:>12} {:>12} {:>10}",
                if row.good { "✓" } else { "" },
                row.failure_rate,
                slow,
                row.slow_rate,
                row.minimum_calls,
                row.window,
                detected,
                row.openings,
                row.flaps,
                row.openings_outside,
                thousands(row.rejected),
                thousands(row.rejected_successes),
                thousands(row.rejected_failures),
                open
            );
        } else {
            let _ = writeln!(
                s,
                "{:>2} {:>5} {:>8} {:>5} {:>7} {:<12} {:>8} {:>6} {:>9} {:>12} {:>12} {:>10}",
                "",
                row.failure_rate,
                slow,
                row.slow_rate,
                row.minimum_calls,
                row.window,
                row.openings,
                row.flaps,
                thousands(row.rejected),
                thousands(row.rejected_successes),
                thousands(row.rejected_failures),
                open
            );
        }
    }
    if incident {
        let good = r.rows.iter().filter(|r| r.good).count();
        let _ = writeln!(
            s,
            "\n{good} of {} settings detected the incident in time without opening outside it.",
            r.rows.len()
        );
    }
    let _ = writeln!(
        s,
        "columns: detected = first opening after the incident's start; outside = openings outside the incident;\n         ok rejected = rejected calls that would have succeeded; bad rejected = rejected calls that would have failed"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_incidents_parse() {
        assert_eq!(
            parse_window("count:50"),
            Ok(WindowConfig::Count { size: 50 })
        );
        assert_eq!(
            parse_window("time:30s/20"),
            Ok(WindowConfig::Time {
                duration: Duration::from_secs(30),
                buckets: 20
            })
        );
        assert!(parse_window("ring:5").is_err());
        assert_eq!(window_name(WindowConfig::Count { size: 7 }), "count:7");
        let i = IncidentSpec::parse("+10s..+1m").unwrap();
        assert_eq!(i.resolve(5), Ok((10_000_000_005, 60_000_000_005)));
        let i = IncidentSpec::parse("2024-05-01T12:00:00Z..1714564860").unwrap();
        assert_eq!(
            i.resolve(0),
            Ok((1_714_564_800_000_000_000, 1_714_564_860_000_000_000))
        );
        assert!(
            IncidentSpec::parse("+10s..+5s")
                .unwrap()
                .resolve(0)
                .is_err()
        );
        assert!(IncidentSpec::parse("soon").is_err());
    }
}
