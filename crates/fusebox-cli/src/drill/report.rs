//! What a drill found: the summary, the timeline behind the chart, the transitions, and
//! the scenario's expectations checked against them.
//!
//! The report is built after the drill from three records: every call as the caller saw
//! it, every request as the dependency saw it, and each replica's ordered log of breaker
//! transitions and tapped calls (see [`super::stack`]). It serializes to the JSON report
//! and feeds the chart.

use super::stack::Tap;
use super::{clock, state_name};
use crate::config::describe_policy;
use crate::replay::thousands;
use crate::scenario::Scenario;
use fusebox_breaker::{Reason, State, WindowTotals};
use fusebox_classify::section::format_duration;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Duration;

/// What the caller got from one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// A response with this status.
    Status(u16),
    /// Rejected by the breaker (`CircuitOpen`).
    RejectedBreaker,
    /// Rejected by the concurrency limit (`Overloaded`).
    RejectedLimit,
    /// Timed out (`Elapsed`).
    Timeout,
    /// The connection failed or was reset.
    ConnectionError,
    /// Not started: the client already had `concurrency` calls in flight.
    Skipped,
}

/// One call, as the caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRecord {
    /// Start, ns since the drill began.
    pub start: u64,
    /// The call's key, with keys.
    pub part: Option<u32>,
    /// Latency seen by the caller, ns.
    pub latency: u64,
    /// What came back.
    pub outcome: CallOutcome,
}

/// A breaker transition, timed on the drill's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionInfo {
    /// When, ns since the drill began.
    pub at: u64,
    /// From.
    pub from: State,
    /// To.
    pub to: State,
    /// Why.
    pub reason: Reason,
    /// The window then.
    pub window: WindowTotals,
    /// For an opening: the open wait.
    pub open_for: Option<Duration>,
    /// For an opening: its jitter.
    pub jitter: Option<Duration>,
    /// The breaker's generation after it (with a shared store, the fleet's epoch: one
    /// half-open period has one epoch on every replica).
    pub generation: u64,
}

/// One entry of a replica's ordered log.
#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    /// A call seen at a tap, at ns since the start.
    Tap(Tap, u64),
    /// A transition.
    Transition(TransitionInfo),
}

/// The breaker's state and rates at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// When, ms since the start.
    pub at_ms: f64,
    /// The state.
    pub state: &'static str,
    /// The window's failure rate, percent.
    pub failure_rate: f64,
    /// The window's slow-call rate, percent.
    pub slow_rate: f64,
    /// Calls in the window.
    pub window_calls: u32,
}

/// One replica's raw record, for [`build`].
#[derive(Debug, Clone)]
pub struct ReplicaInput {
    /// The state at the end.
    pub final_state: State,
    /// The ordered log.
    pub log: Vec<Logged>,
    /// Every call.
    pub records: Vec<CallRecord>,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// A transition in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionReport {
    /// When, ms since the start.
    pub at_ms: f64,
    /// From.
    pub from: &'static str,
    /// To.
    pub to: &'static str,
    /// Why.
    pub reason: &'static str,
    /// The phase it happened in.
    pub phase: String,
    /// Calls in the window.
    pub calls: u32,
    /// Failures in the window.
    pub failures: u32,
    /// Slow calls in the window.
    pub slow: u32,
    /// Failure rate, percent.
    pub failure_rate: f64,
    /// Slow-call rate, percent.
    pub slow_rate: f64,
    /// For an opening: the open wait, ms.
    pub open_ms: Option<f64>,
    /// For an opening: the jitter, ms.
    pub jitter_ms: Option<f64>,
    /// For a transition out of HALF_OPEN: calls sent to the dependency while half-open
    /// (by every replica, when they share a store).
    pub half_open_calls: Option<u32>,
}

/// One replica's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Calls the client tried to make.
    pub calls: u64,
    /// Calls answered by the dependency (any status).
    pub served: u64,
    /// Answered 1xx–3xx.
    pub ok: u64,
    /// Answered 4xx.
    pub client_errors: u64,
    /// Answered 5xx.
    pub server_errors: u64,
    /// Rejected by the breaker.
    pub rejected_breaker: u64,
    /// Rejected by the concurrency limit.
    pub rejected_limit: u64,
    /// Timed out.
    pub timeouts: u64,
    /// Connection errors and resets.
    pub connection_errors: u64,
    /// Not started: the client was at its concurrency.
    pub skipped: u64,
    /// Retries (attempts beyond the first).
    pub retries: u64,
    /// Transitions.
    pub transitions: u64,
    /// Openings from CLOSED.
    pub openings: u64,
    /// Time closed, ms.
    pub time_closed_ms: f64,
    /// Time open, ms.
    pub time_open_ms: f64,
    /// Time half-open, ms.
    pub time_half_open_ms: f64,
    /// Median latency seen by callers, ms.
    pub caller_p50_ms: f64,
    /// 99th percentile latency seen by callers, ms.
    pub caller_p99_ms: f64,
}

/// One replica's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaReport {
    /// 1-based.
    pub replica: usize,
    /// The state at the end.
    pub final_state: &'static str,
    /// Totals.
    pub summary: Summary,
    /// Every transition.
    pub transitions: Vec<TransitionReport>,
    /// The breaker sampled over time.
    pub samples: Vec<Sample>,
}

/// The dependency's side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DependencyReport {
    /// Requests received.
    pub received: u64,
    /// The most handled at once.
    pub max_in_flight: u64,
    /// Median latency it gave, ms.
    pub latency_p50_ms: f64,
    /// 99th percentile latency it gave, ms.
    pub latency_p99_ms: f64,
}

/// One slice of the timeline (all replicas together).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Bucket {
    /// Start, ms since the drill began.
    pub start_ms: f64,
    /// Calls started.
    pub calls: u64,
    /// Answered 1xx–4xx.
    pub ok: u64,
    /// Answered 5xx.
    pub server_errors: u64,
    /// Rejected by the breaker.
    pub rejected_breaker: u64,
    /// Rejected by the limit.
    pub rejected_limit: u64,
    /// Timed out.
    pub timeouts: u64,
    /// Connection errors.
    pub connection_errors: u64,
    /// Skipped.
    pub skipped: u64,
    /// Median caller latency of the calls started here, ms (answered or not).
    pub caller_p50_ms: Option<f64>,
    /// 99th percentile caller latency, ms.
    pub caller_p99_ms: Option<f64>,
    /// Median latency the dependency gave requests arriving here, ms.
    pub dependency_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub dependency_p99_ms: Option<f64>,
    /// Requests the dependency received here.
    pub dependency_received: u64,
    /// Of those, answered 5xx or reset.
    pub dependency_failed: u64,
}

/// A phase in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReport {
    /// Its name.
    pub name: String,
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// What the dependency does.
    pub behaviour: String,
}

/// One expectation, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// The expectation as written (`opens = true`).
    pub expectation: String,
    /// Whether it held.
    pub ok: bool,
    /// What happened.
    pub detail: String,
}

/// The thresholds the chart draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thresholds {
    /// Failure-rate threshold, percent.
    pub failure_rate: u8,
    /// Slow-call-rate threshold, percent.
    pub slow_rate: u8,
    /// Slow-call duration of the default route, ms.
    pub slow_call_ms: Option<f64>,
    /// The timeout of the default route, ms.
    pub timeout_ms: Option<f64>,
    /// Calls needed before a rate can trip.
    pub minimum_calls: u32,
    /// Probes in half-open.
    pub permitted_probes: u32,
}

/// A change of one key's breaker or of one endpoint's place in the pool, timed on the
/// drill's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartChange {
    /// When, ns since the drill began.
    pub at: u64,
    /// The key or endpoint.
    pub part: u32,
    /// What it is now: a breaker state (`closed`, `open`, `half_open`, …) for a key, a
    /// status (`serving`, `ejected`, `probing`, `would_eject`) for an endpoint.
    pub to: &'static str,
}

/// What keyed and pooled drills record beyond the calls, for [`build`].
#[derive(Debug, Clone, Default)]
pub struct PartsInput {
    /// Every change, in order.
    pub changes: Vec<PartChange>,
    /// The most endpoints out of the pool at once (pool drills).
    pub max_ejected: Option<u32>,
}

/// One key or endpoint in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartRow {
    /// Its name (`key-03`, `e1`).
    pub name: String,
    /// Whether some phase affects it.
    pub affected: bool,
    /// Times its breaker opened (a key) or it tripped, ejected or not (an endpoint).
    pub openings: u32,
    /// Calls made for it (keys only: a pool picks the endpoint).
    pub calls: Option<u64>,
    /// Of those, refused by a breaker.
    pub rejected: Option<u64>,
    /// Its changes: ms since the start, and what it became (it starts `closed` or
    /// `serving`).
    pub changes: Vec<(f64, &'static str)>,
}

/// The keys' or endpoints' part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartsReport {
    /// `key` or `endpoint`.
    pub kind: &'static str,
    /// One row per key or endpoint.
    pub rows: Vec<PartRow>,
    /// The most endpoints out of the pool at once (pool drills).
    pub max_ejected: Option<u32>,
}

/// Everything a drill found.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// The scenario's name.
    pub scenario: String,
    /// What it drills.
    pub description: String,
    /// Its seed.
    pub seed: u64,
    /// Calls per second (per replica).
    pub rate: f64,
    /// Most calls in flight per replica.
    pub concurrency: usize,
    /// Replicas.
    pub replicas: usize,
    /// Where the replicas kept their breaker state (`None`: each in memory).
    pub store: Option<String>,
    /// How long traffic ran, ms.
    pub duration_ms: f64,
    /// When the drill ended (calls drained), ms.
    pub ended_ms: f64,
    /// The policy, as `fusebox check` prints it.
    pub policy: String,
    /// The breaker's thresholds.
    pub thresholds: Thresholds,
    /// The phases.
    pub phases: Vec<PhaseReport>,
    /// Per replica.
    pub replica_reports: Vec<ReplicaReport>,
    /// The dependency's side.
    pub dependency: DependencyReport,
    /// The timeline's slice width, ms.
    pub bucket_ms: f64,
    /// The timeline.
    pub timeline: Vec<Bucket>,
    /// Per key or endpoint, for keyed and pooled drills.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts: Option<PartsReport>,
    /// The expectations.
    pub expectations: Vec<Check>,
    /// Whether every expectation held.
    pub passed: bool,
}

/// A slice width giving a readable number of slices for a drill of `total`.
pub fn bucket_width(total: Duration) -> Duration {
    let target = total.as_secs_f64() / 120.0;
    let nice = [
        0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0,
    ];
    let w = nice.iter().copied().find(|&n| n >= target).unwrap_or(60.0);
    Duration::from_secs_f64(w)
}

/// The `q` quantile (0..=1) of `v` by nearest rank; sorts `v`.
fn quantile(v: &mut [u64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1] as f64 / 1e6)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Builds the report.
#[allow(clippy::too_many_arguments)]
pub fn build(
    scenario: &Scenario,
    replicas: usize,
    store: Option<String>,
    total: Duration,
    ended: u64,
    bucket: Duration,
    inputs: Vec<ReplicaInput>,
    parts: Option<PartsInput>,
    served: Vec<super::server::Served>,
    max_in_flight: u64,
) -> DrillReport {
    let parts = parts.map(|p| parts_report(scenario, p, &inputs));
    let part_checks = parts
        .as_ref()
        .map(|p| check_parts(scenario, p, &inputs))
        .unwrap_or_default();
    let phase_name = |ns: u64| {
        let (i, _) = scenario.phase_at(Duration::from_nanos(ns));
        scenario.phases[i].name.clone()
    };
    let bucket_ns = bucket.as_nanos().max(1) as u64;
    let n_buckets = (ended.max(1)).div_ceil(bucket_ns) as usize;
    let mut timeline: Vec<Bucket> = (0..n_buckets)
        .map(|i| Bucket {
            start_ms: ms(i as u64 * bucket_ns),
            ..Bucket::default()
        })
        .collect();
    let mut caller_lat: Vec<Vec<u64>> = vec![Vec::new(); n_buckets];
    let mut dep_lat: Vec<Vec<u64>> = vec![Vec::new(); n_buckets];

    // Calls sent as probes, by half-open period (its generation): each replica's, or with
    // a shared store every replica's (one half-open period has one epoch fleet-wide). A call
    // counts where the breaker admitted it while half-open, as the tap right below the
    // breaker saw it in the call's own flow: counting the calls logged between two logged
    // transitions would also count calls admitted just after a transition that another task
    // had not reported yet, and with a fleet calls sent before or after a peer saw the
    // period.
    let probes_of = |logs: &mut dyn Iterator<Item = &Vec<Logged>>| {
        let mut by_period: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        for log in logs {
            for entry in log {
                if let Logged::Tap(
                    Tap::Sent {
                        half_open: Some(generation),
                    },
                    _,
                ) = entry
                {
                    *by_period.entry(*generation).or_default() += 1;
                }
            }
        }
        by_period
    };
    let fleet_half_open = if store.is_some() {
        probes_of(&mut inputs.iter().map(|i| &i.log))
    } else {
        Default::default()
    };
    let mut replica_reports = Vec::new();
    for (ri, input) in inputs.into_iter().enumerate() {
        let mut s = Summary::default();
        let mut lat = Vec::with_capacity(input.records.len());
        for c in &input.records {
            s.calls += 1;
            let b = ((c.start / bucket_ns) as usize).min(n_buckets - 1);
            let tb = &mut timeline[b];
            tb.calls += 1;
            match c.outcome {
                CallOutcome::Status(code) => {
                    s.served += 1;
                    match code {
                        500.. => {
                            s.server_errors += 1;
                            tb.server_errors += 1;
                        }
                        400..=499 => {
                            s.client_errors += 1;
                            tb.ok += 1;
                        }
                        _ => {
                            s.ok += 1;
                            tb.ok += 1;
                        }
                    }
                }
                CallOutcome::RejectedBreaker => {
                    s.rejected_breaker += 1;
                    tb.rejected_breaker += 1;
                }
                CallOutcome::RejectedLimit => {
                    s.rejected_limit += 1;
                    tb.rejected_limit += 1;
                }
                CallOutcome::Timeout => {
                    s.timeouts += 1;
                    tb.timeouts += 1;
                }
                CallOutcome::ConnectionError => {
                    s.connection_errors += 1;
                    tb.connection_errors += 1;
                }
                CallOutcome::Skipped => {
                    s.skipped += 1;
                    tb.skipped += 1;
                    continue;
                }
            }
            lat.push(c.latency);
            caller_lat[b].push(c.latency);
        }
        s.caller_p50_ms = quantile(&mut lat, 0.5).unwrap_or(0.0);
        s.caller_p99_ms = quantile(&mut lat, 0.99).unwrap_or(0.0);

        // Transitions, time in states, attempts, and calls sent while half-open.
        let mut transitions = Vec::new();
        let mut attempts = 0u64;
        let mut state = State::Closed;
        let mut since = 0u64;
        let own_half_open = probes_of(&mut std::iter::once(&input.log));
        let mut half_open_period = 0u64;
        let mut times = [0u64; 3];
        let add = |times: &mut [u64; 3], st: State, d: u64| match st {
            State::Open | State::ForcedOpen => times[1] += d,
            State::HalfOpen => times[2] += d,
            _ => times[0] += d,
        };
        for entry in &input.log {
            match entry {
                Logged::Tap(Tap::Attempt, _) => attempts += 1,
                Logged::Tap(..) => {}
                Logged::Transition(t) => {
                    add(&mut times, state, t.at.saturating_sub(since));
                    since = t.at;
                    let half_open_calls = (t.from == State::HalfOpen).then(|| {
                        let counts = if store.is_some() {
                            &fleet_half_open
                        } else {
                            &own_half_open
                        };
                        counts.get(&half_open_period).copied().unwrap_or(0)
                    });
                    if t.to == State::HalfOpen {
                        half_open_period = t.generation;
                    }
                    if t.from == State::Closed && t.to == State::Open {
                        s.openings += 1;
                    }
                    state = t.to;
                    transitions.push(TransitionReport {
                        at_ms: ms(t.at),
                        from: t.from.as_str(),
                        to: t.to.as_str(),
                        reason: t.reason.as_str(),
                        phase: phase_name(t.at),
                        calls: t.window.calls,
                        failures: t.window.failures,
                        slow: t.window.slow,
                        failure_rate: t.window.failure_rate(),
                        slow_rate: t.window.slow_rate(),
                        open_ms: t.open_for.map(|d| d.as_secs_f64() * 1e3),
                        jitter_ms: t.jitter.map(|d| d.as_secs_f64() * 1e3),
                        half_open_calls,
                    });
                }
            }
        }
        add(&mut times, state, ended.saturating_sub(since));
        s.time_closed_ms = ms(times[0]);
        s.time_open_ms = ms(times[1]);
        s.time_half_open_ms = ms(times[2]);
        s.transitions = transitions.len() as u64;
        let started = s.calls - s.skipped;
        s.retries = attempts.saturating_sub(started);
        replica_reports.push((
            ReplicaReport {
                replica: ri + 1,
                final_state: input.final_state.as_str(),
                summary: s,
                transitions,
                samples: input.samples,
            },
            input.log,
            input.final_state,
        ));
    }

    let mut dep = DependencyReport {
        received: served.len() as u64,
        max_in_flight,
        ..DependencyReport::default()
    };
    let mut all: Vec<u64> = served.iter().map(|s| s.latency).collect();
    dep.latency_p50_ms = quantile(&mut all, 0.5).unwrap_or(0.0);
    dep.latency_p99_ms = quantile(&mut all, 0.99).unwrap_or(0.0);
    for s in &served {
        let b = ((s.at / bucket_ns) as usize).min(n_buckets - 1);
        timeline[b].dependency_received += 1;
        if s.status == 0 || s.status >= 500 {
            timeline[b].dependency_failed += 1;
        }
        dep_lat[b].push(s.latency);
    }
    for (i, tb) in timeline.iter_mut().enumerate() {
        tb.caller_p50_ms = quantile(&mut caller_lat[i], 0.5);
        tb.caller_p99_ms = quantile(&mut caller_lat[i], 0.99);
        tb.dependency_p50_ms = quantile(&mut dep_lat[i], 0.5);
        tb.dependency_p99_ms = quantile(&mut dep_lat[i], 0.99);
    }

    let cfg = scenario.policy.breaker();
    // The route the drill's traffic takes.
    let table = scenario.policy.routes();
    let path = scenario.traffic.path.split('?').next().unwrap_or("/");
    let route = table.route(table.resolve_path(&scenario.traffic.method, path));
    let thresholds = Thresholds {
        failure_rate: cfg.map_or(50, |c| c.failure_rate_threshold()),
        slow_rate: cfg.map_or(100, |c| c.slow_call_rate_threshold()),
        slow_call_ms: route.slow_call_threshold().map(|d| d.as_secs_f64() * 1e3),
        timeout_ms: route
            .timeout_duration()
            .or_else(|| scenario.policy.timeout().map(|t| t.default_timeout()))
            .map(|d| d.as_secs_f64() * 1e3),
        minimum_calls: cfg.map_or(0, |c| c.minimum_calls()),
        permitted_probes: cfg.map_or(0, |c| c.permitted_probes()),
    };
    let phases = scenario
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| PhaseReport {
            name: p.name.clone(),
            start_ms: scenario.phase_start(i).as_secs_f64() * 1e3,
            end_ms: (scenario.phase_start(i) + p.duration).as_secs_f64() * 1e3,
            behaviour: p.describe(scenario.traffic.unit()),
        })
        .collect();

    let mut expectations = check_expectations(scenario, &replica_reports, &dep, store.is_some());
    expectations.extend(part_checks);
    let passed = expectations.iter().all(|c| c.ok);
    DrillReport {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        seed: scenario.seed,
        rate: scenario.traffic.rate,
        concurrency: scenario.traffic.concurrency,
        replicas,
        store,
        duration_ms: total.as_secs_f64() * 1e3,
        ended_ms: ms(ended),
        policy: describe_policy(&scenario.policy),
        thresholds,
        phases,
        replica_reports: replica_reports.into_iter().map(|r| r.0).collect(),
        dependency: dep,
        bucket_ms: bucket.as_secs_f64() * 1e3,
        timeline,
        parts,
        expectations,
        passed,
    }
}

/// The rows of a keyed or pooled drill.
fn parts_report(scenario: &Scenario, input: PartsInput, replicas: &[ReplicaInput]) -> PartsReport {
    let pool = scenario.traffic.endpoints.is_some();
    let n = scenario.traffic.parts();
    let mut rows: Vec<PartRow> = (0..n)
        .map(|i| PartRow {
            name: if pool {
                format!("e{i}")
            } else {
                crate::scenario::key_name(i)
            },
            affected: scenario.affected(i),
            openings: 0,
            calls: (!pool).then_some(0),
            rejected: (!pool).then_some(0),
            changes: Vec::new(),
        })
        .collect();
    for c in &input.changes {
        let Some(row) = rows.get_mut(c.part as usize) else {
            continue;
        };
        let before = row
            .changes
            .last()
            .map_or(if pool { "serving" } else { "closed" }, |x| x.1);
        if before == c.to {
            continue;
        }
        let opened = if pool {
            matches!(c.to, "ejected" | "would_eject") && matches!(before, "serving")
        } else {
            c.to == "open" && before == "closed"
        };
        if opened {
            row.openings += 1;
        }
        row.changes.push((ms(c.at), c.to));
    }
    if !pool {
        for r in replicas.iter().flat_map(|r| &r.records) {
            let Some(row) = r.part.and_then(|p| rows.get_mut(p as usize)) else {
                continue;
            };
            if r.outcome == CallOutcome::Skipped {
                continue;
            }
            row.calls = row.calls.map(|c| c + 1);
            if r.outcome == CallOutcome::RejectedBreaker {
                row.rejected = row.rejected.map(|c| c + 1);
            }
        }
    }
    PartsReport {
        kind: if pool { "endpoint" } else { "key" },
        rows,
        max_ejected: input.max_ejected,
    }
}

/// The expectations about keys, endpoints and the pool.
fn check_parts(scenario: &Scenario, parts: &PartsReport, replicas: &[ReplicaInput]) -> Vec<Check> {
    let e = &scenario.expect;
    let mut checks = Vec::new();
    let kind = parts.kind;
    let names = |rows: &mut dyn Iterator<Item = &PartRow>| {
        let names: Vec<&str> = rows.map(|r| r.name.as_str()).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    if let Some(want) = e.affected_open {
        let missing = names(&mut parts.rows.iter().filter(|r| r.affected && r.openings == 0));
        let opened = names(&mut parts.rows.iter().filter(|r| r.affected && r.openings > 0));
        let all = parts
            .rows
            .iter()
            .filter(|r| r.affected)
            .all(|r| r.openings > 0);
        checks.push(Check {
            expectation: format!("affected_open = {want}"),
            ok: all == want,
            detail: format!("affected {kind}s that opened: {opened}; that did not: {missing}"),
        });
    }
    if let Some(want) = e.unaffected_open {
        let opened = names(&mut parts.rows.iter().filter(|r| !r.affected && r.openings > 0));
        let any = parts.rows.iter().any(|r| !r.affected && r.openings > 0);
        checks.push(Check {
            expectation: format!("unaffected_open = {want}"),
            ok: any == want,
            detail: format!("unaffected {kind}s that opened: {opened}"),
        });
    }
    if let Some(max) = e.max_unaffected_rejected {
        let rejected: u64 = parts
            .rows
            .iter()
            .filter(|r| !r.affected)
            .filter_map(|r| r.rejected)
            .sum();
        let calls: u64 = parts
            .rows
            .iter()
            .filter(|r| !r.affected)
            .filter_map(|r| r.calls)
            .sum();
        checks.push(Check {
            expectation: format!("max_unaffected_rejected = {max}"),
            ok: rejected <= max,
            detail: format!("{rejected} of {calls} calls for unaffected keys refused"),
        });
    }
    if let Some(phase) = &e.ok_percent_in
        && let Some(i) = scenario.phases.iter().position(|p| &p.name == phase)
    {
        let start = scenario.phase_start(i).as_nanos() as u64;
        let end = start + scenario.phases[i].duration.as_nanos() as u64;
        let (mut calls, mut ok) = (0u64, 0u64);
        for r in replicas.iter().flat_map(|r| &r.records) {
            if (start..end).contains(&r.start) {
                calls += 1;
                if matches!(r.outcome, CallOutcome::Status(s) if s < 500) {
                    ok += 1;
                }
            }
        }
        let percent = if calls == 0 {
            0.0
        } else {
            ok as f64 * 100.0 / calls as f64
        };
        let detail =
            format!("{ok} of {calls} calls started in {phase:?} answered 1xx–4xx ({percent:.1} %)");
        if let Some(min) = e.min_ok_percent {
            checks.push(Check {
                expectation: format!("min_ok_percent = {min} in {phase:?}"),
                ok: percent >= min,
                detail: detail.clone(),
            });
        }
        if let Some(max) = e.max_ok_percent {
            checks.push(Check {
                expectation: format!("max_ok_percent = {max} in {phase:?}"),
                ok: percent <= max,
                detail,
            });
        }
    }
    let most = parts.max_ejected.unwrap_or(0);
    let detail = format!(
        "at most {most} endpoint{} out at once",
        if most == 1 { "" } else { "s" }
    );
    if let Some(max) = e.max_ejected {
        checks.push(Check {
            expectation: format!("max_ejected = {max}"),
            ok: most <= max,
            detail: detail.clone(),
        });
    }
    if let Some(min) = e.min_ejected {
        checks.push(Check {
            expectation: format!("min_ejected = {min}"),
            ok: most >= min,
            detail,
        });
    }
    checks
}

/// Calls the breaker admitted from the start of `first_open_in` until it first opened
/// there; `None` if it did not open.
fn admitted_until_open(scenario: &Scenario, log: &[Logged]) -> Option<u64> {
    let phase = scenario.expect.first_open_in.as_deref().unwrap_or_default();
    let start = scenario
        .phases
        .iter()
        .position(|p| p.name == phase)
        .map_or(0, |i| scenario.phase_start(i).as_nanos() as u64);
    let mut admitted = 0u64;
    for entry in log {
        match entry {
            Logged::Tap(Tap::Admitted, at) if *at >= start => admitted += 1,
            Logged::Transition(t)
                if t.from == State::Closed && t.to == State::Open && t.at >= start =>
            {
                return Some(admitted);
            }
            _ => {}
        }
    }
    None
}

/// The scenario's expectations, checked for each replica (`shared`: the replicas kept
/// one breaker on a store).
fn check_expectations(
    scenario: &Scenario,
    replicas: &[(ReplicaReport, Vec<Logged>, State)],
    dep: &DependencyReport,
    shared: bool,
) -> Vec<Check> {
    let e = &scenario.expect;
    let mut checks = Vec::new();
    let many = replicas.len() > 1;
    for (r, log, final_state) in replicas {
        let tag = if many {
            format!("replica {}: ", r.replica)
        } else {
            String::new()
        };
        let openings: Vec<&TransitionReport> = r
            .transitions
            .iter()
            .filter(|t| t.from == "closed" && t.to == "open")
            .collect();
        let first = openings.first();
        let when = |t: &TransitionReport| format!("{:.3}s in {:?}", t.at_ms / 1e3, t.phase);
        let mut push = |expectation: String, ok: bool, detail: String| {
            checks.push(Check {
                expectation: format!("{tag}{expectation}"),
                ok,
                detail,
            });
        };
        if let Some(want) = e.opens {
            let detail = match first {
                Some(t) => format!(
                    "opened {} time{}, first at {}",
                    openings.len(),
                    if openings.len() == 1 { "" } else { "s" },
                    when(t)
                ),
                None => "never opened".into(),
            };
            push(format!("opens = {want}"), first.is_some() == want, detail);
        }
        if let Some(reasons) = &e.open_reason {
            let (ok, detail) = match first {
                Some(t) => (
                    reasons.iter().any(|x| x == t.reason),
                    format!("first opened on {}", t.reason),
                ),
                None => (false, "never opened".into()),
            };
            push(format!("open_reason = {}", reasons.join(" | ")), ok, detail);
        }
        if let Some(phase) = &e.first_open_in {
            let (ok, detail) = match first {
                Some(t) => (&t.phase == phase, format!("first opened at {}", when(t))),
                None => (false, "never opened".into()),
            };
            push(format!("first_open_in = {phase:?}"), ok, detail);
        }
        for phase in &e.no_open_in {
            let inside: Vec<&&TransitionReport> =
                openings.iter().filter(|t| &t.phase == phase).collect();
            let detail = match inside.first() {
                Some(t) => format!("opened at {:.3}s", t.at_ms / 1e3),
                None => "did not open".into(),
            };
            push(format!("no_open_in {phase:?}"), inside.is_empty(), detail);
        }
        if let Some(want) = e.closed_at_end {
            let closed = *final_state == State::Closed;
            push(
                format!("closed_at_end = {want}"),
                closed == want,
                format!("ended {}", state_name(*final_state)),
            );
        }
        let periods: Vec<(u32, &str)> = r
            .transitions
            .iter()
            .filter_map(|t| t.half_open_calls.map(|n| (n, t.reason)))
            .collect();
        if let Some(max) = e.max_half_open_calls {
            let most = periods.iter().map(|p| p.0).max();
            let ok = most.is_none_or(|m| m <= max);
            let detail = match most {
                Some(m) => format!(
                    "{} half-open period{}, at most {m} call{} sent in one",
                    periods.len(),
                    if periods.len() == 1 { "" } else { "s" },
                    if m == 1 { "" } else { "s" }
                ),
                None => "no half-open period".into(),
            };
            push(format!("max_half_open_calls = {max}"), ok, detail);
        }
        if let Some(n) = e.half_open_calls {
            let decided: Vec<u32> = periods
                .iter()
                .filter(|p| p.1 == "probe_failed" || p.1 == "probes_succeeded")
                .map(|p| p.0)
                .collect();
            let ok = !decided.is_empty() && decided.iter().all(|&c| c == n);
            let detail = if decided.is_empty() {
                "no half-open period was decided by its probes".into()
            } else {
                format!(
                    "calls sent per half-open period: {}",
                    decided
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            push(format!("half_open_calls = {n}"), ok, detail);
        }
        if e.min_calls_to_open.is_some() || e.max_calls_to_open.is_some() {
            let phase = e.first_open_in.clone().unwrap_or_default();
            let opened = admitted_until_open(scenario, log);
            let detail = match opened {
                Some(n) => format!("opened after {n} calls admitted since {phase:?} began"),
                None => format!("did not open after {phase:?} began"),
            };
            if let Some(min) = e.min_calls_to_open {
                if shared {
                    // One window for the fleet: it cannot open on fewer calls, whichever
                    // replicas made them.
                    let fleet: Option<u64> = replicas
                        .iter()
                        .map(|(_, log, _)| admitted_until_open(scenario, log))
                        .sum();
                    push(
                        format!("min_calls_to_open = {min} (fleet-wide)"),
                        fleet.is_some_and(|n| n >= min),
                        match fleet {
                            Some(n) => format!(
                                "the fleet opened after {n} calls admitted since {phase:?} began"
                            ),
                            None => detail.clone(),
                        },
                    );
                } else {
                    push(
                        format!("min_calls_to_open = {min}"),
                        opened.is_some_and(|n| n >= min),
                        detail.clone(),
                    );
                }
            }
            if let Some(max) = e.max_calls_to_open {
                push(
                    format!("max_calls_to_open = {max}"),
                    opened.is_some_and(|n| n <= max),
                    detail,
                );
            }
        }
    }
    if let Some(max) = e.max_dependency_in_flight {
        // Each replica's bulkhead bounds what that replica sends.
        let bound = max as u64 * replicas.len() as u64;
        checks.push(Check {
            expectation: if many {
                format!("max_dependency_in_flight = {max} per replica ({bound})")
            } else {
                format!("max_dependency_in_flight = {max}")
            },
            ok: dep.max_in_flight <= bound,
            detail: format!(
                "the dependency handled at most {} at once",
                dep.max_in_flight
            ),
        });
    }
    checks
}

fn fmt_ms(v: f64) -> String {
    format_duration(Duration::from_micros((v * 1e3).round() as u64))
}

/// The summary table, the dependency's side, and the expectations.
pub fn render_summary(r: &DrillReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nsummary of {:?}: {} of traffic at {} calls/s{}",
        r.scenario,
        fmt_ms(r.duration_ms),
        r.rate,
        if r.replicas > 1 {
            format!(" per replica, {} replicas", r.replicas)
        } else {
            String::new()
        }
    );
    if let Some(store) = &r.store {
        let _ = writeln!(
            s,
            "  the replicas shared one breaker on {store}: half-open counts are fleet-wide"
        );
    }
    let cols: Vec<&Summary> = r.replica_reports.iter().map(|x| &x.summary).collect();
    let mut header = format!("  {:<30}", "");
    for x in &r.replica_reports {
        if r.replicas > 1 {
            let _ = write!(header, "{:>14}", format!("replica {}", x.replica));
        } else {
            let _ = write!(header, "{:>14}", "client");
        }
    }
    let _ = writeln!(s, "{}", header.trim_end());
    let row = |s: &mut String, label: &str, f: &dyn Fn(&Summary) -> String| {
        let mut line = format!("  {label:<30}");
        for c in &cols {
            let _ = write!(line, "{:>14}", f(c));
        }
        let _ = writeln!(s, "{line}");
    };
    let n = |v: u64| thousands(v);
    row(&mut s, "calls", &|c| n(c.calls));
    row(&mut s, "  served by the dependency", &|c| n(c.served));
    row(&mut s, "    2xx/3xx", &|c| n(c.ok));
    row(&mut s, "    4xx", &|c| n(c.client_errors));
    row(&mut s, "    5xx", &|c| n(c.server_errors));
    row(&mut s, "  rejected by the breaker", &|c| {
        n(c.rejected_breaker)
    });
    row(&mut s, "  rejected by the limit", &|c| n(c.rejected_limit));
    row(&mut s, "  timed out", &|c| n(c.timeouts));
    row(&mut s, "  connection errors", &|c| n(c.connection_errors));
    row(&mut s, "  skipped (client at capacity)", &|c| n(c.skipped));
    row(&mut s, "retries", &|c| n(c.retries));
    // A pool has a breaker per endpoint and none for the dependency.
    let pool = r.parts.as_ref().is_some_and(|p| p.kind == "endpoint");
    if !pool {
        row(&mut s, "breaker transitions", &|c| n(c.transitions));
        row(&mut s, "  openings", &|c| n(c.openings));
        row(&mut s, "time closed", &|c| fmt_ms(c.time_closed_ms));
        row(&mut s, "time open", &|c| fmt_ms(c.time_open_ms));
        row(&mut s, "time half-open", &|c| fmt_ms(c.time_half_open_ms));
    }
    row(&mut s, "latency p50 seen by callers", &|c| {
        fmt_ms(c.caller_p50_ms)
    });
    row(&mut s, "latency p99 seen by callers", &|c| {
        fmt_ms(c.caller_p99_ms)
    });
    if let Some(parts) = &r.parts {
        let affected = parts.rows.iter().filter(|p| p.affected).count();
        let opened: Vec<String> = parts
            .rows
            .iter()
            .filter(|p| p.openings > 0)
            .map(|p| format!("{} ×{}", p.name, p.openings))
            .collect();
        let _ = writeln!(
            s,
            "  {}s: {} ({affected} affected by a phase); {}: {}",
            parts.kind,
            parts.rows.len(),
            if pool { "tripped" } else { "breakers opened" },
            if opened.is_empty() {
                "none".to_owned()
            } else {
                opened.join(", ")
            }
        );
        if let Some(most) = parts.max_ejected {
            let _ = writeln!(s, "  at most {most} endpoint(s) out of the pool at once");
        }
        if !pool {
            let (rejected, calls) = parts
                .rows
                .iter()
                .filter(|p| !p.affected)
                .fold((0, 0), |(r, c), p| {
                    (r + p.rejected.unwrap_or(0), c + p.calls.unwrap_or(0))
                });
            let _ = writeln!(
                s,
                "  calls for unaffected keys refused by a breaker: {} of {}",
                thousands(rejected),
                thousands(calls)
            );
        }
    }
    let _ = writeln!(
        s,
        "  dependency: {} requests, at most {} at once, latency p50 {} p99 {}",
        thousands(r.dependency.received),
        r.dependency.max_in_flight,
        fmt_ms(r.dependency.latency_p50_ms),
        fmt_ms(r.dependency.latency_p99_ms)
    );
    if !r.expectations.is_empty() {
        let _ = writeln!(s, "\nexpectations");
        for c in &r.expectations {
            let _ = writeln!(
                s,
                "  {} {:<36} {}",
                if c.ok { "✓" } else { "✗" },
                c.expectation,
                c.detail
            );
        }
        let failed = r.expectations.iter().filter(|c| !c.ok).count();
        if failed == 0 {
            let _ = writeln!(s, "PASS: the breaker behaved as {:?} expects", r.scenario);
        } else {
            let _ = writeln!(
                s,
                "FAIL: {failed} of {} expectations did not hold",
                r.expectations.len()
            );
        }
    }
    s
}

/// The transitions of one replica, one line each (for the end of the output).
pub fn render_transitions(r: &DrillReport) -> String {
    let mut s = String::new();
    for rep in &r.replica_reports {
        for t in &rep.transitions {
            let _ = writeln!(
                s,
                "[{}] r{} {} → {} ({}) in {:?}",
                clock((t.at_ms * 1e6) as u64),
                rep.replica,
                t.from,
                t.to,
                t.reason,
                t.phase
            );
        }
    }
    s
}
