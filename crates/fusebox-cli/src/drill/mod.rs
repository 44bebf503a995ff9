//! `fusebox drill`: a live fault drill against a real, flaky dependency.
//!
//! A breaker should be tried under failure before it is trusted. A drill starts the
//! scenario's dependency on 127.0.0.1 ([`server`]), wraps a hyper-util client in the
//! scenario's policy ([`stack`]), drives traffic at the scenario's rate and concurrency
//! for the length of its phases, prints progress and every breaker transition as it
//! happens, and ends with a report ([`report`]): a summary table, the expectations
//! checked, a JSON document and an SVG chart ([`crate::chart`]).
//!
//! Everything runs on tokio's clock. The binary runs drills in real time (they are live
//! drills); `--virtual-time` (and the tests) run them on a paused clock that jumps over
//! idle waits, so the same sockets and layers take milliseconds instead of seconds.

pub mod report;
pub mod server;
pub mod stack;

use crate::input::InputError;
use crate::scenario::Scenario;
use bytes::Bytes;
use fusebox::pool::PoolEventKind;
use fusebox_breaker::{BreakerEvent, BreakerHandle, EventKind, State};
use fusebox_classify::ErrorKind;
use fusebox_classify::section::format_duration;
use fusebox_redis::{OnRedis, RedisStoreConfig};
use http::Request;
use http_body_util::{BodyExt, Empty};
use report::{CallOutcome, CallRecord, DrillReport, Logged, Sample, TransitionInfo};
use stack::{Tap, TapFn};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

/// How long a drill gives its `--store` to answer a first time before it refuses to run.
/// The store's own `timeout` (50 ms unless the URL says otherwise) bounds the calls a
/// breaker makes on the call path; the first call also connects and loads the script, and
/// on a loaded machine that can take longer. The drill asks again, at growing intervals,
/// until one call is answered or this has passed.
const STORE_ANSWERS_WITHIN: Duration = Duration::from_secs(3);

/// Whether the store answers one call (the breaker's state, read) within
/// [`STORE_ANSWERS_WITHIN`].
async fn answers(redis: &OnRedis, breaker: &fusebox_breaker::CircuitBreakerConfig) -> bool {
    let until = Instant::now() + STORE_ANSWERS_WITHIN;
    let mut pause = Duration::from_millis(20);
    loop {
        if redis.prefetch(breaker, None).await.is_some() {
            return true;
        }
        if Instant::now() + pause >= until {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Where live output goes (one line per call).
pub type Out = Arc<dyn Fn(&str) + Send + Sync>;

/// How to run a drill, beyond the scenario.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    /// Client replicas, each with its own breaker (in-memory state).
    pub replicas: usize,
    /// Print a progress line every this often (`None`: no progress lines).
    pub progress: Option<Duration>,
    /// Keep the replicas' breaker state on Redis, shared (`None`: in memory, each its own).
    pub store: Option<RedisStoreConfig>,
}

impl Default for DrillOptions {
    fn default() -> Self {
        DrillOptions {
            replicas: 1,
            progress: Some(Duration::from_secs(1)),
            store: None,
        }
    }
}

/// The Redis store for `--store URL`. Unless the URL names a scope (`dep=`), the drill gets
/// a fresh one of its own (`fusebox-drill-<scenario>-<random>`), so that state left by an
/// earlier run cannot start this one open.
pub fn store_config(url: &str, scenario: &Scenario) -> Result<RedisStoreConfig, InputError> {
    let has_scope = url
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("dep=")));
    let url = if has_scope {
        url.to_owned()
    } else {
        let name: String = scenario
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let nonce = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id(),
        ) & 0xff_ffff;
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}dep=fusebox-drill-{name}-{nonce:06x}")
    };
    RedisStoreConfig::from_url(&url).map_err(|e| InputError::new(format!("--store: {e}")))
}

/// Why a drill could not run.
#[derive(Debug)]
pub enum DrillError {
    /// Bad input (a policy that cannot be built).
    Input(InputError),
    /// The machine said no (a port, a socket).
    Io(std::io::Error),
}

impl std::fmt::Display for DrillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrillError::Input(e) => e.fmt(f),
            DrillError::Io(e) => write!(f, "cannot run the drill: {e}"),
        }
    }
}

impl std::error::Error for DrillError {}

struct Replica {
    service: stack::DrillService,
    /// The dependency-wide breaker (none in a pool drill).
    breaker: Option<BreakerHandle>,
    log: Arc<Mutex<Vec<Logged>>>,
    records: Arc<Mutex<Vec<CallRecord>>>,
    in_flight: Arc<AtomicUsize>,
    samples: Vec<Sample>,
}

fn ns_since(t0: Instant) -> u64 {
    Instant::now().saturating_duration_since(t0).as_nanos() as u64
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The state's name as the output writes it.
pub fn state_name(s: State) -> &'static str {
    match s {
        State::Closed => "CLOSED",
        State::Open => "OPEN",
        State::HalfOpen => "HALF_OPEN",
        State::ForcedOpen => "FORCED_OPEN",
        State::Disabled => "DISABLED",
        State::MetricsOnly => "METRICS_ONLY",
        other => other.as_str(),
    }
}

/// Seconds since the start, as the output writes them.
pub fn clock(ns: u64) -> String {
    format!("{:>7.3}s", ns as f64 / 1e9)
}

/// One live line for a transition.
pub fn transition_line(
    tag: &str,
    at: u64,
    t: &TransitionInfo,
    failure_threshold: u8,
    slow_threshold: u8,
) -> String {
    let w = &t.window;
    let cmp = |rate: f64, threshold: u8| {
        if rate >= f64::from(threshold) {
            format!("≥ {threshold} %")
        } else {
            format!("< {threshold} %")
        }
    };
    let mut line = format!(
        "[{}] {tag}{:<27} {:<20} window {} calls: {} failed ({:.1} % {}), {} slow ({:.1} % {})",
        clock(at),
        format!("{} → {}", state_name(t.from), state_name(t.to)),
        t.reason.as_str(),
        w.calls,
        w.failures,
        w.failure_rate(),
        cmp(w.failure_rate(), failure_threshold),
        w.slow,
        w.slow_rate(),
        cmp(w.slow_rate(), slow_threshold),
    );
    if let Some(open) = t.open_for {
        line.push_str(&format!(
            "  open {} (jitter {})",
            format_duration(Duration::from_millis(open.as_millis() as u64)),
            format_duration(Duration::from_millis(
                t.jitter.unwrap_or_default().as_millis() as u64
            ))
        ));
    }
    line
}

/// Classifies what the caller got. A deadline spent before the call was sent is a
/// timeout, like a timeout that fired; tower's own timeout and load shedding count as
/// fusebox's; a spent retry budget is judged by the last attempt's error.
fn outcome_of_error(e: &(dyn std::error::Error + 'static)) -> CallOutcome {
    match ErrorKind::of(e) {
        ErrorKind::CircuitOpen(_) => CallOutcome::RejectedBreaker,
        ErrorKind::Overloaded(_) | ErrorKind::TowerOverloaded(_) => CallOutcome::RejectedLimit,
        ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_) | ErrorKind::DeadlineExceeded(_) => {
            CallOutcome::Timeout
        }
        ErrorKind::BudgetExhausted(exhausted) => outcome_of_error(exhausted.last()),
        // An I/O error, or any other: the call did not get an answer.
        _ => CallOutcome::ConnectionError,
    }
}

/// Runs `scenario` and returns its report. Live lines (phases, transitions, progress) go
/// to `out` as they happen.
pub async fn run(
    scenario: &Scenario,
    options: &DrillOptions,
    out: Out,
) -> Result<DrillReport, DrillError> {
    let replicas_n = options.replicas.max(1);
    let parts = scenario.traffic.parts();
    if parts > 0 && (replicas_n > 1 || options.store.is_some()) {
        return Err(DrillError::Input(InputError::new(
            "a drill over keys or endpoints runs one client, its breakers in memory: leave out --replicas and --store",
        )));
    }
    let t0 = Instant::now();
    let key_header = scenario
        .traffic
        .keys
        .and_then(|_| crate::scenario::key_header(&scenario.policy));
    let dependency = server::Dependency::start(scenario, t0, key_header.clone())
        .await
        .map_err(DrillError::Io)?;
    let host = if scenario.traffic.endpoints.is_some() {
        "pool".to_owned()
    } else {
        dependency.addr().to_string()
    };
    let uri: http::Uri = format!("http://{host}{}", scenario.traffic.path)
        .parse()
        .map_err(|e| DrillError::Input(InputError::new(format!("bad traffic.path: {e}"))))?;
    let breaker_cfg = scenario
        .policy
        .breaker()
        .cloned()
        .ok_or_else(|| DrillError::Input(InputError::new("the policy has no breaker")))?;
    let (fthr, sthr) = (
        breaker_cfg.failure_rate_threshold(),
        breaker_cfg.slow_call_rate_threshold(),
    );
    // Keyed and pooled drills: what each key's breaker or each endpoint did.
    let changes: Arc<Mutex<Vec<report::PartChange>>> = Arc::new(Mutex::new(Vec::new()));

    let mut replicas = Vec::with_capacity(replicas_n);
    let mut pool = None;
    for r in 0..replicas_n {
        let log: Arc<Mutex<Vec<Logged>>> = Arc::new(Mutex::new(Vec::new()));
        let tl = Arc::clone(&log);
        let tap: TapFn = Arc::new(move |tap: Tap| {
            let at = ns_since(t0);
            lock(&tl).push(Logged::Tap(tap, at));
        });
        if let (Some(_), Some(config)) = (scenario.traffic.endpoints, scenario.pool) {
            let (o, c) = (Arc::clone(&out), Arc::clone(&changes));
            let listener = move |ev: &fusebox::pool::PoolEvent| {
                let at = ns_since(t0);
                o(&pool_line(at, ev));
                let part = ev
                    .endpoint
                    .as_deref()
                    .and_then(|e| e.strip_prefix('e'))
                    .and_then(|n| n.parse().ok());
                let to = match ev.kind {
                    PoolEventKind::Ejected { .. } => "ejected",
                    PoolEventKind::WouldEject { .. } => "would_eject",
                    PoolEventKind::Returned => "serving",
                    _ => return,
                };
                if let Some(part) = part {
                    lock(&c).push(report::PartChange { at, part, to });
                }
            };
            let built = stack::build_pool(
                &scenario.policy,
                config,
                dependency.addrs(),
                scenario.seed,
                listener,
                tap,
            )
            .map_err(DrillError::Input)?;
            pool = Some(built.pool);
            replicas.push(Replica {
                service: built.service,
                breaker: None,
                log,
                records: Arc::new(Mutex::new(Vec::new())),
                in_flight: Arc::new(AtomicUsize::new(0)),
                samples: Vec::new(),
            });
            continue;
        }
        let tag = if replicas_n > 1 {
            format!("r{} ", r + 1)
        } else {
            String::new()
        };
        let (l, o, c) = (Arc::clone(&log), Arc::clone(&out), Arc::clone(&changes));
        let listener = move |ev: &BreakerEvent| {
            if let EventKind::Transition(t) = &ev.kind {
                let at = ns_since(t0);
                let info = TransitionInfo {
                    at,
                    from: t.from,
                    to: t.to,
                    reason: t.reason,
                    window: t.window,
                    open_for: t.open_for,
                    jitter: t.jitter,
                    generation: t.generation,
                };
                match ev.key.as_deref() {
                    // A key's breaker.
                    Some(key) => {
                        o(&transition_line(&format!("{key} "), at, &info, fthr, sthr));
                        if let Some(part) = crate::scenario::key_index(key) {
                            lock(&c).push(report::PartChange {
                                at,
                                part,
                                to: t.to.as_str(),
                            });
                        }
                    }
                    None => {
                        o(&transition_line(&tag, at, &info, fthr, sthr));
                        lock(&l).push(Logged::Transition(info));
                    }
                }
            }
        };
        let redis = match &options.store {
            Some(config) => {
                let redis = OnRedis::new(config.clone());
                if !answers(&redis, &breaker_cfg).await {
                    return Err(DrillError::Io(std::io::Error::other(format!(
                        "--store: Redis at {} does not answer",
                        config.url()
                    ))));
                }
                Some(redis)
            }
            None => None,
        };
        let stack = stack::build(
            &scenario.policy,
            scenario.seed + r as u64,
            listener,
            tap,
            redis,
        )
        .map_err(DrillError::Input)?;
        replicas.push(Replica {
            service: stack.service,
            breaker: Some(stack.breaker),
            log,
            records: Arc::new(Mutex::new(Vec::new())),
            in_flight: Arc::new(AtomicUsize::new(0)),
            samples: Vec::new(),
        });
    }

    let total = scenario.duration();
    let spread = match (scenario.traffic.keys, scenario.traffic.endpoints) {
        (Some(k), _) => format!(", over {k} keys"),
        (None, Some(n)) => format!(", over a pool of {n} endpoints"),
        (None, None) => String::new(),
    };
    out(&format!(
        "drill {:?}: {} at {} calls/s (at most {} in flight){}{spread}, dependency on http://{}",
        scenario.name,
        format_duration(total),
        scenario.traffic.rate,
        scenario.traffic.concurrency,
        if replicas_n > 1 {
            format!(", {replicas_n} replicas")
        } else {
            String::new()
        },
        dependency.addr()
    ));

    let bucket = report::bucket_width(total);
    let rate = scenario.traffic.rate;
    let tick = Duration::from_secs_f64((1.0 / rate).clamp(0.001, 0.05));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut calls: JoinSet<()> = JoinSet::new();
    let mut issued: u64 = 0;
    let mut phase_shown = usize::MAX;
    let mut next_sample = Duration::ZERO;
    let mut next_progress = options.progress.unwrap_or(Duration::MAX);
    let mut max_ejected = 0u32;
    loop {
        interval.tick().await;
        let elapsed = Instant::now().saturating_duration_since(t0);
        while elapsed >= next_sample {
            for r in &mut replicas {
                if let Some(breaker) = &r.breaker {
                    r.samples
                        .push(sample(next_sample.as_secs_f64() * 1e3, breaker));
                }
            }
            next_sample += bucket;
        }
        if let Some(pool) = &pool {
            // The pool's endpoints move on their own: read them at every tick.
            let status = pool.status();
            max_ejected = max_ejected.max(u32::try_from(status.ejected).unwrap_or(u32::MAX));
            let at = ns_since(t0);
            let mut c = lock(&changes);
            for e in &status.endpoints {
                let Some(part) = e.endpoint.strip_prefix('e').and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let to = e.status.as_str();
                let last = c
                    .iter()
                    .rev()
                    .find(|x| x.part == part)
                    .map_or("serving", |x| x.to);
                if last != to {
                    c.push(report::PartChange { at, part, to });
                }
            }
        }
        if elapsed >= total {
            break;
        }
        let (phase, _) = scenario.phase_at(elapsed);
        if phase != phase_shown {
            phase_shown = phase;
            let p = &scenario.phases[phase];
            out(&format!(
                "[{}] ── phase {:?} for {}: {}",
                clock(elapsed.as_nanos() as u64),
                p.name,
                format_duration(p.duration),
                p.describe(scenario.traffic.unit())
            ));
        }
        if elapsed >= next_progress {
            out(&progress_line(
                elapsed,
                &scenario.phases[phase].name,
                &replicas,
                pool.as_ref(),
            ));
            next_progress += options.progress.unwrap_or(Duration::MAX);
        }
        let due = (elapsed.as_secs_f64() * rate) as u64 + 1;
        while issued < due {
            let part = scenario
                .traffic
                .keys
                .map(|k| (issued % u64::from(k)) as u32);
            issued += 1;
            for r in &replicas {
                let start = ns_since(t0);
                if r.in_flight.load(Ordering::Relaxed) >= scenario.traffic.concurrency {
                    lock(&r.records).push(CallRecord {
                        start,
                        part,
                        latency: 0,
                        outcome: CallOutcome::Skipped,
                    });
                    continue;
                }
                r.in_flight.fetch_add(1, Ordering::Relaxed);
                let mut request = Request::builder()
                    .method(scenario.traffic.method.clone())
                    .uri(uri.clone());
                if let (Some(name), Some(part)) = (&key_header, part) {
                    request = request.header(name, crate::scenario::key_name(part));
                }
                let request = request.body(Empty::<Bytes>::new());
                let (svc, records, in_flight) = (
                    r.service.clone(),
                    Arc::clone(&r.records),
                    Arc::clone(&r.in_flight),
                );
                calls.spawn(async move {
                    let outcome = match request {
                        Ok(request) => match svc.oneshot(request).await {
                            Ok(response) => {
                                let status = response.status().as_u16();
                                match response.into_body().collect().await {
                                    Ok(_) => CallOutcome::Status(status),
                                    Err(e) => outcome_of_error(&*e),
                                }
                            }
                            Err(e) => outcome_of_error(&*e),
                        },
                        Err(_) => CallOutcome::ConnectionError,
                    };
                    let latency = ns_since(t0).saturating_sub(start);
                    lock(&records).push(CallRecord {
                        start,
                        part,
                        latency,
                        outcome,
                    });
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
        // Reap finished calls so the set stays small.
        while calls.try_join_next().is_some() {}
    }

    // Let the calls in flight finish, within reason: a timeout bounds each call; without
    // one, wait for the slowest latency the scenario can produce.
    let drain = scenario
        .policy
        .timeout()
        .map_or(Duration::from_secs(30), |t| t.default_timeout() * 2)
        + Duration::from_secs(1);
    let drained =
        tokio::time::timeout(drain, async { while calls.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        out(&format!(
            "[{}] {} calls still in flight after {}: abandoned",
            clock(ns_since(t0)),
            calls.len(),
            format_duration(drain)
        ));
        calls.abort_all();
        while calls.join_next().await.is_some() {}
    }
    let ended = ns_since(t0);
    for r in &mut replicas {
        if let Some(breaker) = &r.breaker {
            r.samples.push(sample(ended as f64 / 1e6, breaker));
        }
    }
    let shared_handle = replicas.first().and_then(|r| r.breaker.clone());
    let inputs: Vec<report::ReplicaInput> = replicas
        .into_iter()
        .map(|r| report::ReplicaInput {
            final_state: r
                .breaker
                .as_ref()
                .map_or(State::Closed, BreakerHandle::state),
            log: std::mem::take(&mut *lock(&r.log)),
            records: std::mem::take(&mut *lock(&r.records)),
            samples: r.samples,
        })
        .collect();
    if options.store.is_some()
        && let Some(first) = &shared_handle
    {
        // Leave the shared scope closed, so that Redis lets it expire.
        first.reset();
    }
    let parts = (parts > 0).then(|| report::PartsInput {
        changes: std::mem::take(&mut *lock(&changes)),
        max_ejected: pool.as_ref().map(|_| max_ejected),
    });
    let store = options.store.as_ref().map(|c| {
        // The URL without credentials, and the scope.
        let url = c.url();
        let shown = match (url.find("://"), url.rfind('@')) {
            (Some(p), Some(at)) if at > p => format!("{}{}", &url[..p + 3], &url[at + 1..]),
            _ => url.to_owned(),
        };
        match c.scope().dep_name() {
            Some(dep) => format!("{shown} (scope dep:{dep})"),
            None => shown,
        }
    });
    Ok(report::build(
        scenario,
        replicas_n,
        store,
        total,
        ended,
        bucket,
        inputs,
        parts,
        dependency.served(),
        dependency.max_in_flight(),
    ))
}

/// The breaker's state and rates now, for the chart.
fn sample(at_ms: f64, breaker: &BreakerHandle) -> Sample {
    let snap = breaker.snapshot();
    Sample {
        at_ms,
        state: snap.state.as_str(),
        failure_rate: snap.failure_rate,
        slow_rate: snap.slow_call_rate,
        window_calls: snap.window.calls,
    }
}

/// One live line for a pool event.
fn pool_line(at: u64, ev: &fusebox::pool::PoolEvent) -> String {
    let endpoint = ev.endpoint.as_deref().unwrap_or("");
    let what = match &ev.kind {
        PoolEventKind::Ejected {
            ejected,
            max_ejected,
        } => format!("{endpoint} ejected ({ejected} out, at most {max_ejected})"),
        PoolEventKind::WouldEject { reason } => {
            format!("{endpoint} would eject, kept in: {reason}")
        }
        PoolEventKind::Returned => format!("{endpoint} serves again"),
        PoolEventKind::Panic {
            active,
            healthy,
            endpoints,
            panic_threshold,
        } => format!(
            "panic {}: {healthy} of {endpoints} healthy (threshold {panic_threshold} %)",
            if *active { "on" } else { "off" }
        ),
        other => format!("{endpoint} {other:?}"),
    };
    format!("[{}] pool {what}", clock(at))
}

fn progress_line(
    elapsed: Duration,
    phase: &str,
    replicas: &[Replica],
    pool: Option<&fusebox::pool::PoolHandle>,
) -> String {
    let mut calls = 0u64;
    let mut ok = 0u64;
    let mut failed = 0u64;
    let mut rej_b = 0u64;
    let mut rej_l = 0u64;
    let mut timeouts = 0u64;
    let mut errors = 0u64;
    for r in replicas {
        for c in lock(&r.records).iter() {
            calls += 1;
            match c.outcome {
                CallOutcome::Status(s) if s < 500 => ok += 1,
                CallOutcome::Status(_) => failed += 1,
                CallOutcome::RejectedBreaker => rej_b += 1,
                CallOutcome::RejectedLimit => rej_l += 1,
                CallOutcome::Timeout => timeouts += 1,
                CallOutcome::ConnectionError => errors += 1,
                CallOutcome::Skipped => {}
            }
        }
    }
    let states = match pool {
        Some(pool) => {
            let s = pool.status();
            format!(
                "pool {} ejected of at most {}, {} would eject{}",
                s.ejected,
                s.max_ejected,
                s.would_eject,
                if s.panic { ", in panic" } else { "" }
            )
        }
        None => {
            let states: Vec<String> = replicas
                .iter()
                .filter_map(|r| r.breaker.as_ref())
                .map(|b| {
                    let s = b.snapshot();
                    format!(
                        "{} (failure {:.0} %, slow {:.0} %)",
                        s.state.as_str(),
                        s.failure_rate,
                        s.slow_call_rate
                    )
                })
                .collect();
            format!("breaker {}", states.join(", "))
        }
    };
    format!(
        "[{}] {:<12} done {calls}: {ok} answered, {failed} 5xx, {timeouts} timed out, {errors} conn errors, {rej_b} rejected by breaker, {rej_l} by limit | {states}",
        clock(elapsed.as_nanos() as u64),
        phase,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_classify::error::{
        BudgetExhausted, CircuitOpen, DeadlineExceeded, Elapsed, Overloaded, TowerElapsed,
        TowerOverloaded,
    };

    #[test]
    fn what_the_caller_got_comes_from_the_error_chain() {
        let open = CircuitOpen::new("b".into(), None, Duration::ZERO, false);
        assert_eq!(outcome_of_error(&open), CallOutcome::RejectedBreaker);
        let over = Overloaded::new(1, Duration::ZERO);
        assert_eq!(outcome_of_error(&over), CallOutcome::RejectedLimit);
        let elapsed = Elapsed::new("r".into(), Duration::ZERO);
        assert_eq!(outcome_of_error(&elapsed), CallOutcome::Timeout);
        // A deadline spent before sending is a timeout, not a connection error.
        assert_eq!(
            outcome_of_error(&DeadlineExceeded::new()),
            CallOutcome::Timeout
        );
        // tower's own timeout and load shedding mean what fusebox's do.
        assert_eq!(outcome_of_error(&TowerElapsed::new()), CallOutcome::Timeout);
        assert_eq!(
            outcome_of_error(&TowerOverloaded::new()),
            CallOutcome::RejectedLimit
        );
        let exhausted = BudgetExhausted::new(Box::new(TowerOverloaded::new()));
        assert_eq!(outcome_of_error(&exhausted), CallOutcome::RejectedLimit);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(outcome_of_error(&reset), CallOutcome::ConnectionError);
    }
}
