//! `soak`: sustained load through a full fusebox [`Policy`] against a loopback dependency
//! that keeps failing and recovering, with key churn, for as long as you like.
//!
//! Benchmarks say what a call costs; a soak says whether the stack *stays* right after
//! thousands of breaker cycles and hundreds of thousands of keys: memory flat, every
//! breaker opening when its dependency fails and closing when it recovers, no request lost
//! or stuck, no panic. It runs on real time against a real socket, so it is a program, not a
//! paused-time test; CI runs it for 45 seconds (`tests/tests/soak.rs`).
//!
//! Run with: `cargo run -p fusebox-tests --bin soak -- --duration 60s`
//! (`--release` and `--duration 2h` for a long local run; `--redis` to keep the hot keys'
//! breakers on a real `redis-server` the soak starts on 127.0.0.1, or `--redis-url` for a
//! running one; `--help` for every option).
//!
//! # What runs
//!
//! - **The dependency**: a hyper HTTP/1 server on 127.0.0.1 that alternates, phase by
//!   phase, between *healthy* (200s, a tenth of them after 20 ms) and *failing* (of every 20
//!   requests, 12 answered 503, 4 held past the policy's timeout, 4 reset without an answer).
//!   The run starts and ends with a healthy phase (an odd number of phases).
//! - **The policy**: retry budget → keyed circuit breaker → concurrency limit → timeout,
//!   around a hyper-util client. Each request carries a breaker key in `x-soak-key`: half
//!   of them go to a few *hot* keys that live through every phase; the other half to
//!   *churn* keys, each used twice and never again, so that many more distinct keys pass
//!   than the breaker's `max_keys` and eviction runs all the time.
//! - **The load**: `--concurrency` workers issue requests at `--rate` per second in total,
//!   each with a [`Deadline`] of `--deadline`.
//!
//! # What must hold (otherwise the exit status is 1 and each failure is printed)
//!
//! - **No panic**: a panic hook counts panics anywhere in the process; a worker task that
//!   ends in a `JoinError` counts too.
//! - **Memory flat**: resident memory (`VmRSS` of `/proc/self/status`) is sampled every
//!   second. The warm-up is the first 20 % of the run, and at least its first two phases
//!   (one healthy, one failing: every code path has run and the allocator has its arenas).
//!   After it, the largest sample must stay within the warm-up's largest plus the larger of
//!   16 MiB and 25 % (`--rss-slack-mib`, `--rss-slack-percent`). Why that bound: the
//!   allocator keeps freed memory per thread and fragments, so RSS wanders by a few MiB
//!   with no leak; what the bound must catch is growth with the number of calls or keys —
//!   a leak of 100 bytes per request is 275 MiB over a 2-hour run at the default rate (and
//!   16 MiB within 7 minutes), and a breaker map that did not evict would hold every one of
//!   the run's 720,000 churn keys.
//! - **Every breaker cycling**: each hot key's breaker stays closed through the first
//!   healthy phase, opens (closed → open) in every failing phase and never closes there,
//!   closes (half-open → closed) in every later healthy phase and does not re-open after
//!   closing in it. Churn keys, used twice each, never reach `minimum_calls` and never
//!   move. At the end every hot key's breaker reads closed in the keyed handle. The
//!   transitions are counted per key and per phase by a listener on the policy's breaker
//!   events. The keys held never exceed `max_keys` plus the calls in flight. A hot key
//!   whose breaker was evicted and made anew (told by a second transition of the first
//!   generation) is counted and reported. One lost while open or half-open fails the run:
//!   the keyed breaker never evicts a breaker that is not closed to make room, and a new
//!   one would let calls through to the failing dependency. One lost while closed does not:
//!   the keyed breaker may evict a closed breaker by design.
//! - **No request lost or stuck**: every request issued ends, with a response or an error,
//!   within its deadline plus `--grace` (time for timers and a loaded scheduler; the
//!   policy itself enforces the deadline); issued equals completed; the in-flight counts
//!   (workers, the concurrency limit, the server) return to 0; and the server's count is
//!   consistent with the client's: every response the client got was received by the
//!   server, the server received no more than the client sent, and every attempt the
//!   client sent ended as a response, an error, or a cancellation by the timeout.
//!
//! # The schedule
//!
//! Phase lengths derive from the breaker's open wait (`--open-wait`, jitter a quarter of
//! it): a phase lasts 4 × (open wait + jitter) by default and at least 2 × that plus a
//! second. A failing phase opens a hot key's breaker within its first `minimum_calls`
//! calls; a healthy phase finds it open with at most one open wait to go, then three
//! probes close it, with more than half the phase to spare. The checks demand that each
//! cycle happened in its phase, never that it happened at a given instant, so a slow,
//! loaded machine passes as long as it can serve the load at all.

use bytes::Bytes;
use clap::Parser;
use fusebox::breaker::{BreakerEvent, EventKind, KeyedBreakerHandle, State};
use fusebox::error::{BudgetExhausted, CircuitOpen, DeadlineExceeded, Elapsed, Overloaded};
use fusebox::limit::LimitHandle;
use fusebox::policy::BreakerKey;
use fusebox::{BoxError, CircuitBreakerConfig, Deadline, KeyBy, Policy, RetryConfig};
use fusebox_redis::RedisStoreConfig;
use fusebox_tests::redis_server::RedisServer;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// Writes a line to stdout (a broken pipe is not worth a panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

const KEY_HEADER: &str = "x-soak-key";
const MIB: u64 = 1024 * 1024;

// === the command line ===

/// Sustained load through a fusebox Policy against a loopback dependency that alternates
/// between healthy and failing phases; exits 1 if any soak check fails.
#[derive(Debug, Parser)]
#[command(name = "soak", version)]
struct Args {
    /// How long to run (`45s`, `10m`, `2h`). Rounded down to an odd number of phases, so
    /// that the run starts and ends healthy.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Requests per second, in total.
    #[arg(long, default_value_t = 400)]
    rate: u32,
    /// Workers issuing requests (the most requests in flight).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Hot keys: breaker keys that live through every phase (half the requests).
    #[arg(long, default_value_t = 4)]
    keys: usize,
    /// The keyed breaker's cap on keys held at once; the churn keys pass many more.
    #[arg(long, default_value_t = 256)]
    max_keys: usize,
    /// The breaker's open wait (its jitter is a quarter of it).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    open_wait: Duration,
    /// Length of each phase; by default 4 × (open wait + jitter).
    #[arg(long, value_parser = humantime::parse_duration)]
    phase: Option<Duration>,
    /// The policy's timeout per attempt.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Each request's deadline (all attempts, backoff included).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// How late past its deadline a request may end before it counts as stuck.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Resident memory may grow after the warm-up by the larger of this many MiB ...
    #[arg(long, default_value_t = 16)]
    rss_slack_mib: u64,
    /// ... and this percentage of the warm-up's level.
    #[arg(long, default_value_t = 25)]
    rss_slack_percent: u64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seed of the breaker's jitter and the retry backoff's.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress line per phase (the summary is still printed).
    #[arg(long)]
    quiet: bool,
    /// Keep the hot keys' breakers on a real `redis-server` that the soak starts on
    /// 127.0.0.1 (on a free port, stopped at the end) instead of in memory; the churn keys'
    /// stay in the process, as a keyed store on Redis keeps only the keys it is told to
    /// share.
    #[arg(long, conflicts_with = "redis_url")]
    redis: bool,
    /// Keep the breakers' state on the Redis server at this URL (`redis://127.0.0.1:6379/0`).
    #[arg(long)]
    redis_url: Option<String>,
    /// Allocate and keep this many KiB per second after the warm-up: a deliberate leak,
    /// to see the memory check fail.
    #[arg(long, default_value_t = 0, hide = true)]
    leak_kib_per_sec: u64,
}

/// The settings of one run, checked.
#[derive(Debug, Clone)]
struct Config {
    phases: u32,
    phase: Duration,
    rate: u32,
    concurrency: usize,
    hot_keys: usize,
    max_keys: usize,
    open_wait: Duration,
    jitter: Duration,
    timeout: Duration,
    slow_latency: Duration,
    deadline: Duration,
    grace: Duration,
    warm_up: Duration,
    rss_slack_mib: u64,
    rss_slack_percent: u64,
    threads: usize,
    seed: u64,
    quiet: bool,
    leak_kib_per_sec: u64,
    store: StoreChoice,
}

/// Where the breakers keep their state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreChoice {
    /// In the process.
    Memory,
    /// On a `redis-server` the soak starts and stops.
    StartRedis,
    /// On the Redis server at this URL.
    Redis(String),
}

impl Config {
    fn from_args(a: &Args) -> Result<Config, String> {
        let mut problems = Vec::new();
        let jitter = a.open_wait / 4;
        let cycle = a.open_wait + jitter;
        let phase = a.phase.unwrap_or(cycle * 4);
        let min_phase = cycle * 2 + Duration::from_secs(1);
        if a.open_wait.is_zero() {
            problems.push("--open-wait must be more than 0".to_owned());
        }
        if phase < min_phase {
            problems.push(format!(
                "--phase {} is too short for --open-wait {}: at least 2 × (open wait + jitter) + 1s = {}, so that every healthy phase can close the breaker",
                humantime::format_duration(phase),
                humantime::format_duration(a.open_wait),
                humantime::format_duration(min_phase),
            ));
        }
        let mut phases = if phase.is_zero() {
            0
        } else {
            u32::try_from(a.duration.as_nanos() / phase.as_nanos()).unwrap_or(u32::MAX)
        };
        if phases.is_multiple_of(2) {
            phases = phases.saturating_sub(1);
        }
        if phases < 3 {
            problems.push(format!(
                "--duration {} holds fewer than 3 phases of {} (healthy, failing, healthy)",
                humantime::format_duration(a.duration),
                humantime::format_duration(phase),
            ));
        }
        if a.rate == 0 {
            problems.push("--rate must be more than 0".to_owned());
        }
        if a.concurrency == 0 {
            problems.push("--concurrency must be more than 0".to_owned());
        }
        if a.keys == 0 {
            problems.push("--keys must be at least 1".to_owned());
        }
        if a.max_keys < a.keys * 2 {
            problems.push(format!(
                "--max-keys {} must be at least twice --keys {}, or the hot keys crowd out the churn",
                a.max_keys, a.keys
            ));
        }
        if a.timeout.is_zero() || a.timeout >= a.deadline {
            problems.push("--timeout must be more than 0 and less than --deadline".to_owned());
        }
        if a.threads == 0 {
            problems.push("--threads must be at least 1".to_owned());
        }
        if let Some(url) = &a.redis_url
            && let Err(e) = RedisStoreConfig::builder(url.as_str()).build()
        {
            problems.push(format!("--redis-url {url:?} is not usable: {e}"));
        }
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        let total = phase * phases;
        let warm_up = (total / 5).max(phase * 2);
        Ok(Config {
            phases,
            phase,
            rate: a.rate,
            concurrency: a.concurrency,
            hot_keys: a.keys,
            max_keys: a.max_keys,
            open_wait: a.open_wait,
            jitter,
            timeout: a.timeout,
            slow_latency: a.timeout * 4,
            deadline: a.deadline,
            grace: a.grace,
            warm_up,
            rss_slack_mib: a.rss_slack_mib,
            rss_slack_percent: a.rss_slack_percent,
            threads: a.threads,
            seed: a.seed,
            quiet: a.quiet,
            leak_kib_per_sec: a.leak_kib_per_sec,
            store: match (&a.redis_url, a.redis) {
                (Some(url), _) => StoreChoice::Redis(url.clone()),
                (None, true) => StoreChoice::StartRedis,
                (None, false) => StoreChoice::Memory,
            },
        })
    }

    fn total(&self) -> Duration {
        self.phase * self.phases
    }
}

// === the schedule ===

/// Which phase is when: phase `i` covers `[start + i × phase, start + (i + 1) × phase)`;
/// odd phases fail. Past the last phase the dependency is healthy.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: Instant,
    phase: Duration,
    phases: u32,
}

impl Schedule {
    /// The phase at `at`; `phases` (one past the last) once the run is over.
    fn index_at(&self, at: Instant) -> u32 {
        let elapsed = at.saturating_duration_since(self.start).as_nanos();
        let i = elapsed / self.phase.as_nanos().max(1);
        u32::try_from(i).unwrap_or(u32::MAX).min(self.phases)
    }

    fn failing(&self, index: u32) -> bool {
        index < self.phases && index % 2 == 1
    }

    fn end(&self) -> Instant {
        self.start + self.phase * self.phases
    }
}

// === the dependency ===

#[derive(Debug, Default)]
struct ServerStats {
    received: AtomicU64,
    completed: AtomicU64,
    in_flight: AtomicU64,
    ok: AtomicU64,
    unavailable: AtomicU64,
    held: AtomicU64,
    reset: AtomicU64,
}

/// The flaky dependency on 127.0.0.1; dropping it stops accepting.
#[derive(Debug)]
struct Dependency {
    addr: SocketAddr,
    stats: Arc<ServerStats>,
    _stop: watch::Sender<()>,
}

/// Counts a request out of the server however its handler ends (answered, reset, or
/// dropped with its connection).
struct Served(Arc<ServerStats>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.completed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Dependency {
    async fn start(schedule: Schedule, slow_latency: Duration) -> std::io::Result<Dependency> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ServerStats::default());
        let (stop, mut stopped) = watch::channel(());
        let server_stats = Arc::clone(&stats);
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stopped.changed() => return,
                };
                let stats = Arc::clone(&server_stats);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        answer(req, schedule, slow_latency, Arc::clone(&stats))
                    });
                    // A reset, or a client that hangs up, ends the connection: not an error here.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Dependency {
            addr,
            stats,
            _stop: stop,
        })
    }
}

/// One request, as the phase at its arrival says (and its arrival number, so that the mix
/// of failures is exact, not random).
async fn answer(
    req: Request<Incoming>,
    schedule: Schedule,
    slow_latency: Duration,
    stats: Arc<ServerStats>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    drop(req);
    let n = stats.received.fetch_add(1, Ordering::SeqCst);
    stats.in_flight.fetch_add(1, Ordering::SeqCst);
    let _served = Served(Arc::clone(&stats));
    let reply = |status: StatusCode| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"soak")));
        *response.status_mut() = status;
        response
    };
    if !schedule.failing(schedule.index_at(Instant::now())) {
        if n.is_multiple_of(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stats.ok.fetch_add(1, Ordering::Relaxed);
        return Ok(reply(StatusCode::OK));
    }
    match n % 20 {
        0..12 => {
            stats.unavailable.fetch_add(1, Ordering::Relaxed);
            Ok(reply(StatusCode::SERVICE_UNAVAILABLE))
        }
        12..16 => {
            // Longer than the policy's timeout: the client gives up first.
            stats.held.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(slow_latency).await;
            Ok(reply(StatusCode::SERVICE_UNAVAILABLE))
        }
        _ => {
            stats.reset.fetch_add(1, Ordering::Relaxed);
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected reset",
            ))
        }
    }
}

// === breaker cycles ===

/// What one hot key's breaker did in one phase.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Cell {
    /// closed → open
    opened: u32,
    /// half-open → open (a probe failed)
    reopened: u32,
    /// open → half-open
    half_opened: u32,
    /// half-open → closed
    closed: u32,
    /// to open after a close in the same phase
    opened_after_close: u32,
    /// any other transition (operators' states: none expected)
    other: u32,
}

/// The most unexpected transitions ([`Cell::other`]) kept to be named in the summary.
const ODD_KEPT: usize = 16;

/// One unexpected transition of a hot key, as the summary names it.
#[derive(Debug, Clone, Copy)]
struct Odd {
    hot: usize,
    from: State,
    to: State,
    at: Duration,
}

/// How often a hot key's breaker was evicted and made anew, by the state it was lost in.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Remade {
    /// Lost while closed: harmless, a new breaker starts closed.
    closed: u32,
    /// Lost while open or half-open: the new breaker let calls through to a failing
    /// dependency again until it re-opened.
    open: u32,
}

/// The counts behind [`Cycles`]' lock.
#[derive(Debug)]
struct Tally {
    /// Per phase (and one after the run), per hot key.
    cells: Vec<Cell>,
    /// Per hot key: the highest generation seen and the state it entered.
    last: Vec<(u64, State)>,
    remade: Remade,
    /// The first [`ODD_KEPT`] unexpected transitions (allocated up front).
    odd: Vec<Odd>,
}

/// Counts transitions per hot key and per phase (plus one bucket for after the run), from
/// the policy's breaker events. The listener runs on the request path of the call that
/// caused the transition: a short lock, no allocation.
#[derive(Debug)]
struct Cycles {
    schedule: Schedule,
    hot: usize,
    cells: Mutex<Tally>,
    churn_transitions: AtomicU64,
    /// closed → open, open → half-open, half-open → open, half-open → closed, other.
    totals: [AtomicU64; 5],
}

impl Cycles {
    fn new(schedule: Schedule, hot: usize) -> Cycles {
        Cycles {
            schedule,
            hot,
            cells: Mutex::new(Tally {
                cells: vec![Cell::default(); (schedule.phases as usize + 1) * hot],
                last: vec![(0, State::Closed); hot],
                remade: Remade::default(),
                odd: Vec::with_capacity(ODD_KEPT),
            }),
            churn_transitions: AtomicU64::new(0),
            totals: Default::default(),
        }
    }

    fn hot_index(&self, key: Option<&str>) -> Option<usize> {
        key?.strip_prefix("hot-")?
            .parse::<usize>()
            .ok()
            .filter(|&i| i < self.hot)
    }

    fn record(&self, event: &BreakerEvent) {
        if let EventKind::Transition(t) = &event.kind {
            self.record_transition(
                event.key.as_deref(),
                (t.from, t.to, t.generation),
                Instant::now(),
            );
        }
    }

    /// Records a transition `(from, to, generation)` of `key`'s breaker seen at `at`.
    fn record_transition(&self, key: Option<&str>, transition: (State, State, u64), at: Instant) {
        let (from, to, generation) = transition;
        let kind = match (from, to) {
            (State::Closed, State::Open) => 0,
            (State::Open, State::HalfOpen) => 1,
            (State::HalfOpen, State::Open) => 2,
            (State::HalfOpen, State::Closed) => 3,
            _ => 4,
        };
        self.totals[kind].fetch_add(1, Ordering::Relaxed);
        let Some(h) = self.hot_index(key) else {
            self.churn_transitions.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let phase = self.schedule.index_at(at) as usize;
        let mut tally = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        let Tally {
            cells,
            last,
            remade,
            odd,
        } = &mut *tally;
        if kind == 4 && odd.len() < ODD_KEPT {
            odd.push(Odd {
                hot: h,
                from,
                to,
                at: at.saturating_duration_since(self.schedule.start),
            });
        }
        // A breaker starts at generation 0 and each transition adds one, so each breaker
        // has exactly one transition of generation 1: a second one means the key's breaker
        // was evicted and made anew. (Events may arrive out of order, by one, when two
        // transitions follow each other within microseconds; generation 1 is never one of
        // them, as the next transition waits for the open wait.)
        if let Some((max_generation, state)) = last.get_mut(h) {
            if generation == 1 && *max_generation >= 1 {
                match *state {
                    State::Closed => remade.closed += 1,
                    _ => remade.open += 1,
                }
                *max_generation = 0;
            }
            if generation > *max_generation {
                *max_generation = generation;
                *state = to;
            }
        }
        let Some(cell) = cells.get_mut(phase * self.hot + h) else {
            return;
        };
        if to == State::Open && cell.closed > 0 {
            cell.opened_after_close += 1;
        }
        match kind {
            0 => cell.opened += 1,
            1 => cell.half_opened += 1,
            2 => cell.reopened += 1,
            3 => cell.closed += 1,
            _ => cell.other += 1,
        }
    }

    fn cells(&self) -> Vec<Cell> {
        self.cells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cells
            .clone()
    }

    fn odd(&self) -> Vec<Odd> {
        self.cells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .odd
            .clone()
    }

    fn remade(&self) -> Remade {
        self.cells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remade
    }

    /// Every way the hot keys' breakers failed to cycle as the schedule says they must.
    fn check(&self) -> Vec<String> {
        let cells = self.cells();
        let mut failures = Vec::new();
        let secs = |p: u32| (self.schedule.phase * p).as_secs_f64();
        for p in 0..=self.schedule.phases {
            for h in 0..self.hot {
                let c = cells[p as usize * self.hot + h];
                let at = format!(
                    "hot-{h}, phase {}/{} ({:.1}s..{:.1}s)",
                    p + 1,
                    self.schedule.phases,
                    secs(p),
                    secs(p + 1)
                );
                if c.other > 0 {
                    failures.push(format!(
                        "{at}: {} transitions to or from an operator state, or skipping a state",
                        c.other
                    ));
                }
                if p == self.schedule.phases {
                    if c.opened + c.reopened > 0 {
                        failures.push(format!("hot-{h} opened after the run's last phase"));
                    }
                } else if p == 0 {
                    if c.opened + c.reopened > 0 {
                        failures.push(format!("{at}: opened in the first, healthy phase"));
                    }
                } else if self.schedule.failing(p) {
                    if c.opened == 0 {
                        failures.push(format!("{at}: failing, but the breaker never opened"));
                    }
                    if c.closed > 0 {
                        failures.push(format!(
                            "{at}: failing, but the breaker closed {} times",
                            c.closed
                        ));
                    }
                } else {
                    if c.closed == 0 {
                        failures.push(format!("{at}: healthy, but the breaker never closed"));
                    }
                    if c.opened_after_close > 0 {
                        failures.push(format!(
                            "{at}: healthy, but the breaker re-opened {} times after closing",
                            c.opened_after_close
                        ));
                    }
                }
            }
        }
        let churn = self.churn_transitions.load(Ordering::Relaxed);
        if churn > 0 {
            failures.push(format!(
                "{churn} transitions of churn keys, which never reach minimum_calls"
            ));
        }
        failures
    }
}

// === the load ===

/// How a request ended, from the caller's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Ok,
    Unavailable,
    OtherStatus,
    BodyError,
    CircuitOpen,
    Overloaded,
    Timeout,
    BudgetExhausted,
    Transport,
    OtherError,
}

const ENDINGS: [(Ending, &str); 10] = [
    (Ending::Ok, "200"),
    (Ending::Unavailable, "503"),
    (Ending::OtherStatus, "other status"),
    (Ending::BodyError, "body error"),
    (Ending::CircuitOpen, "circuit open"),
    (Ending::Overloaded, "overloaded"),
    (Ending::Timeout, "timeout"),
    (Ending::BudgetExhausted, "retry budget exhausted"),
    (Ending::Transport, "transport error"),
    (Ending::OtherError, "other error"),
];

fn classify_error(error: &BoxError) -> Ending {
    if error.is::<CircuitOpen>() {
        Ending::CircuitOpen
    } else if error.is::<Overloaded>() {
        Ending::Overloaded
    } else if error.is::<Elapsed>() || error.is::<DeadlineExceeded>() {
        Ending::Timeout
    } else if error.is::<BudgetExhausted>() {
        Ending::BudgetExhausted
    } else if error.is::<hyper_util::client::legacy::Error>() || error.is::<hyper::Error>() {
        Ending::Transport
    } else {
        Ending::OtherError
    }
}

/// Latency histogram: bucket `i` holds calls of less than `2^i` microseconds.
const BUCKETS: usize = 32;

#[derive(Debug, Default)]
struct Load {
    issued: AtomicU64,
    completed: AtomicU64,
    stuck: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    over_deadline: AtomicU64,
    max_latency_us: AtomicU64,
    endings: [AtomicU64; ENDINGS.len()],
    latency: [AtomicU64; BUCKETS],
    /// Per phase (and one after the run): requests issued and rejected by an open breaker.
    by_phase: Mutex<Vec<(u64, u64)>>,
}

impl Load {
    fn ended(&self, ending: Ending) {
        if let Some(i) = ENDINGS.iter().position(|(e, _)| *e == ending) {
            self.endings[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn count(&self, ending: Ending) -> u64 {
        ENDINGS
            .iter()
            .position(|(e, _)| *e == ending)
            .map_or(0, |i| self.endings[i].load(Ordering::Relaxed))
    }

    fn latency(&self, took: Duration, deadline: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.max_latency_us.fetch_max(us, Ordering::Relaxed);
        let bucket = (64 - us.leading_zeros() as usize).min(BUCKETS - 1);
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        if took > deadline {
            self.over_deadline.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The upper bound of the bucket holding the `q` quantile, in milliseconds.
    fn quantile_ms(&self, q: f64) -> f64 {
        let counts: Vec<u64> = self
            .latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let target = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= target && total > 0 {
                return (1u64 << i) as f64 / 1000.0;
            }
        }
        0.0
    }
}

/// What the client below the policy sent: each attempt, and how it ended.
#[derive(Debug, Default)]
struct Attempts {
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
}

/// One attempt in the hyper client: counted as cancelled if dropped before it ends (the
/// timeout fired, or the caller gave up).
struct Attempt {
    stats: Arc<Attempts>,
    done: bool,
}

impl Attempt {
    fn start(stats: &Arc<Attempts>) -> Attempt {
        stats.sent.fetch_add(1, Ordering::Relaxed);
        Attempt {
            stats: Arc::clone(stats),
            done: false,
        }
    }

    fn finish(mut self, ok: bool) {
        self.done = true;
        let counter = if ok {
            &self.stats.ok
        } else {
            &self.stats.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.done {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What every worker shares.
#[derive(Debug)]
struct Plan {
    config: Config,
    schedule: Schedule,
    url: http::Uri,
    next: AtomicU64,
    load: Load,
    hot_names: Vec<String>,
}

impl Plan {
    /// When request `n` is due.
    fn due(&self, n: u64) -> Instant {
        let nanos = u128::from(n) * 1_000_000_000 / u128::from(self.config.rate);
        self.schedule.start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Request `n`'s breaker key: even requests go round the hot keys, odd ones to churn
    /// keys used twice each.
    fn key(&self, n: u64) -> String {
        if n.is_multiple_of(2) {
            let hot = (n / 2) % self.hot_names.len() as u64;
            self.hot_names[hot as usize].clone()
        } else {
            format!("churn-{}", n / 4)
        }
    }

    fn request(&self, n: u64) -> Result<Request<Full<Bytes>>, http::Error> {
        Request::get(self.url.clone())
            .header(KEY_HEADER, self.key(n))
            .extension(Deadline::after(self.config.deadline))
            .body(Full::new(Bytes::new()))
    }
}

async fn worker<S, B>(svc: S, plan: Arc<Plan>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = BoxError> + Clone,
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    let end = plan.schedule.end();
    loop {
        let n = plan.next.fetch_add(1, Ordering::Relaxed);
        let due = plan.due(n);
        if due >= end {
            return;
        }
        tokio::time::sleep_until(due).await;
        let load = &plan.load;
        let phase = plan.schedule.index_at(Instant::now()) as usize;
        load.issued.fetch_add(1, Ordering::SeqCst);
        let now_in_flight = load.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        load.max_in_flight
            .fetch_max(now_in_flight, Ordering::Relaxed);
        let started = Instant::now();
        let call = async {
            let request = match plan.request(n) {
                Ok(r) => r,
                Err(_) => return Ending::OtherError,
            };
            match svc.clone().oneshot(request).await {
                Ok(response) => {
                    let status = response.status();
                    match response.into_body().collect().await {
                        Err(_) => Ending::BodyError,
                        Ok(_) if status == StatusCode::OK => Ending::Ok,
                        Ok(_) if status == StatusCode::SERVICE_UNAVAILABLE => Ending::Unavailable,
                        Ok(_) => Ending::OtherStatus,
                    }
                }
                Err(e) => classify_error(&e),
            }
        };
        let bound = plan.config.deadline + plan.config.grace;
        match tokio::time::timeout(bound, call).await {
            Ok(ending) => {
                load.latency(started.elapsed(), plan.config.deadline);
                load.ended(ending);
                let mut by_phase = load.by_phase.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((issued, rejected)) = by_phase.get_mut(phase) {
                    *issued += 1;
                    *rejected += u64::from(ending == Ending::CircuitOpen);
                }
                drop(by_phase);
                load.completed.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => {
                load.stuck.fetch_add(1, Ordering::SeqCst);
            }
        }
        load.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

// === panics and memory ===

static PANICS: AtomicUsize = AtomicUsize::new(0);
static FIRST_PANIC: OnceLock<String> = OnceLock::new();

/// Counts every panic in the process (and keeps the first one's message), then lets the
/// default hook print it.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        let _ = FIRST_PANIC.set(info.to_string());
        default(info);
    }));
}

/// Resident memory of this process, bytes (`VmRSS` of `/proc/self/status`).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One sample per second: (seconds into the run, RSS bytes).
#[derive(Debug, Default)]
struct Samples {
    rss: Vec<(f64, u64)>,
    max_keys_held: usize,
    leaked: Vec<Vec<u8>>,
}

/// The memory verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Memory {
    warm_level: u64,
    bound: u64,
    min: u64,
    max_after: u64,
    last: u64,
    samples: usize,
}

fn judge_memory(samples: &[(f64, u64)], warm_up: f64, slack_mib: u64, slack_pct: u64) -> Memory {
    let warm_level = samples
        .iter()
        .filter(|(t, _)| *t < warm_up)
        .map(|(_, r)| *r)
        .max()
        .unwrap_or(0);
    let bound = warm_level + (slack_mib * MIB).max(warm_level * slack_pct / 100);
    Memory {
        warm_level,
        bound,
        min: samples.iter().map(|(_, r)| *r).min().unwrap_or(0),
        max_after: samples
            .iter()
            .filter(|(t, _)| *t >= warm_up)
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(0),
        last: samples.last().map_or(0, |(_, r)| *r),
        samples: samples.len(),
    }
}

// === the run ===

/// The policy under soak: retry budget → breaker keyed by `x-soak-key` → concurrency limit
/// (three quarters of the workers, so that it sheds now and then in failing phases) →
/// timeout. The breaker trips at 50 % failures over the last 20 calls once it has 10 (the
/// churn keys, used twice each and retried at most twice, never get there); its events go
/// to `cycles`.
fn policy(config: &Config, cycles: Arc<Cycles>, redis: Option<&str>) -> Result<Policy, String> {
    let key_by = KeyBy::custom(|head| {
        head.headers()
            .get(KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    });
    let builder = Policy::builder("soak");
    let builder = match redis {
        None => builder,
        // The hot keys share their breakers on Redis; the churn keys, each used twice,
        // stay in the process (a keyed store keeps on Redis only the keys it lists).
        Some(url) => builder.breaker_store(
            (0..config.hot_keys)
                .fold(RedisStoreConfig::builder(url), |b, i| {
                    b.share_key(format!("hot-{i}"))
                })
                .build()
                .map_err(|e| format!("the soak's Redis store is invalid: {e}"))?,
        ),
    };
    builder
        .timeout(config.timeout)
        .concurrency_limit((config.concurrency * 3 / 4).max(1))
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("soak")
                .count_window(20)
                .minimum_calls(10)
                .failure_rate_threshold(50)
                .open_wait(config.open_wait)
                .open_wait_jitter(config.jitter)
                .permitted_probes(3)
                .max_half_open_wait(Some(config.phase))
                .seed(config.seed),
        )
        .breaker_key(key_by)
        .max_keys(config.max_keys)
        .idle_timeout(config.phase)
        .on_breaker_event(move |e| cycles.record(e))
        .retry_budget(
            RetryConfig::builder()
                .name("soak")
                .max_attempts(3)
                .base_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(100))
                .seed(Some(config.seed)),
        )
        .build()
        .map_err(|e| format!("the soak's policy is invalid: {e}"))
}

/// Samples RSS and the keys held every second until told to stop, printing a progress
/// line as each phase ends; keeps the deliberate leak (`--leak-kib-per-sec`) if asked.
async fn sample(
    plan: Arc<Plan>,
    cycles: Arc<Cycles>,
    keyed: KeyedBreakerHandle<BreakerKey>,
    server: Arc<ServerStats>,
    mut stopped: watch::Receiver<bool>,
) -> Samples {
    let config = &plan.config;
    let schedule = plan.schedule;
    let mut samples = Samples {
        rss: Vec::with_capacity(config.total().as_secs() as usize + 64),
        ..Samples::default()
    };
    let mut tick = tokio::time::interval_at(schedule.start, Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shown = 0u32;
    loop {
        let stop = tokio::select! {
            _ = tick.tick() => false,
            _ = stopped.changed() => true,
        };
        let now = Instant::now();
        let t = now.saturating_duration_since(schedule.start).as_secs_f64();
        if let Some(rss) = rss_bytes() {
            samples.rss.push((t, rss));
        }
        samples.max_keys_held = samples.max_keys_held.max(keyed.len());
        if config.leak_kib_per_sec > 0 && t >= config.warm_up.as_secs_f64() {
            let kib = usize::try_from(config.leak_kib_per_sec).unwrap_or(usize::MAX);
            samples.leaked.push(vec![1u8; kib.saturating_mul(1024)]);
        }
        let phase = schedule.index_at(now);
        while !config.quiet && shown < phase {
            let rss = samples.rss.last().map_or(0, |(_, r)| *r);
            say!(
                "{}",
                progress(&plan, &cycles, shown, keyed.len(), &server, rss)
            );
            shown += 1;
        }
        if stop {
            return samples;
        }
    }
}

/// The progress line of phase `done` (0-based), once it is over.
fn progress(
    plan: &Plan,
    cycles: &Cycles,
    done: u32,
    keys_held: usize,
    server: &ServerStats,
    rss: u64,
) -> String {
    let (issued, rejected) = plan
        .load
        .by_phase
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(done as usize)
        .copied()
        .unwrap_or((0, 0));
    let cells = cycles.cells();
    let h = plan.config.hot_keys;
    let range = done as usize * h..(done as usize + 1) * h;
    let sum = |f: fn(&Cell) -> u32| -> u32 {
        cells
            .get(range.clone())
            .map_or(0, |c| c.iter().map(f).sum())
    };
    let schedule = plan.schedule;
    format!(
        "phase {:>4}/{} {:<7} calls {:>7}  rejected open {:>6}  hot keys opened {:>2} closed {:>2}  keys held {:>5}  server received {:>8}  rss {:>6.1} MiB",
        done + 1,
        schedule.phases,
        if schedule.failing(done) {
            "failing"
        } else {
            "healthy"
        },
        issued,
        rejected,
        sum(|c| c.opened),
        sum(|c| c.closed),
        keys_held,
        server.received.load(Ordering::Relaxed),
        mib(rss),
    )
}

#[derive(Debug)]
struct Outcome {
    failures: Vec<String>,
    summary: String,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// The run's counts, read once at the end.
#[derive(Debug, Clone, Copy)]
struct Counts {
    issued: u64,
    completed: u64,
    stuck: u64,
    in_flight: u64,
    received: u64,
    server_done: u64,
    server_in_flight: u64,
    sent: u64,
    sent_ok: u64,
    sent_failed: u64,
    cancelled: u64,
    distinct_keys: u64,
    key_bound: usize,
}

/// Everything a finished run observed, to judge and to summarise.
struct Finished<'a> {
    elapsed: Duration,
    config: &'a Config,
    plan: &'a Plan,
    cycles: &'a Cycles,
    keyed: &'a KeyedBreakerHandle<BreakerKey>,
    limit: &'a LimitHandle,
    server: &'a ServerStats,
    attempts: &'a Attempts,
    samples: &'a Samples,
    memory: Memory,
    join_errors: &'a [String],
}

impl Finished<'_> {
    /// The counts both the checks and the summary read.
    fn counts(&self) -> Counts {
        let (load, s, a) = (&self.plan.load, self.server, self.attempts);
        let issued = load.issued.load(Ordering::SeqCst);
        Counts {
            issued,
            completed: load.completed.load(Ordering::SeqCst),
            stuck: load.stuck.load(Ordering::SeqCst),
            in_flight: load.in_flight.load(Ordering::SeqCst),
            received: s.received.load(Ordering::SeqCst),
            server_done: s.completed.load(Ordering::SeqCst),
            server_in_flight: s.in_flight.load(Ordering::SeqCst),
            sent: a.sent.load(Ordering::SeqCst),
            sent_ok: a.ok.load(Ordering::SeqCst),
            sent_failed: a.failed.load(Ordering::SeqCst),
            cancelled: a.cancelled.load(Ordering::SeqCst),
            // Odd requests go to churn keys, two each; plus the hot keys.
            distinct_keys: issued.div_ceil(4) + self.config.hot_keys as u64,
            key_bound: self.config.max_keys + self.config.concurrency,
        }
    }

    /// Every soak check that failed, each as a sentence.
    fn failures(&self) -> Vec<String> {
        let (config, plan, cycles, keyed, samples, memory) = (
            self.config,
            self.plan,
            self.cycles,
            self.keyed,
            self.samples,
            self.memory,
        );
        let load = &plan.load;
        let Counts {
            issued,
            completed,
            stuck,
            in_flight,
            received,
            server_done,
            server_in_flight,
            sent,
            sent_ok,
            sent_failed,
            cancelled,
            distinct_keys,
            key_bound,
        } = self.counts();
        let (limit, join_errors) = (self.limit, self.join_errors);
        let mut failures = Vec::new();
        let panics = PANICS.load(Ordering::SeqCst);
        if panics > 0 {
            failures.push(format!(
                "{panics} panics; the first: {}",
                FIRST_PANIC.get().map_or("?", String::as_str)
            ));
        }
        for e in join_errors {
            failures.push(format!("a task ended abnormally: {e}"));
        }

        if memory.samples == 0 {
            failures.push("no RSS sample: /proc/self/status is unreadable".to_owned());
        } else if memory.max_after > memory.bound {
            failures.push(format!(
                "resident memory grew after the warm-up: {:.1} MiB, over the bound of {:.1} MiB (warm-up level {:.1} MiB + max({} MiB, {} %))",
                mib(memory.max_after),
                mib(memory.bound),
                mib(memory.warm_level),
                config.rss_slack_mib,
                config.rss_slack_percent,
            ));
        }

        failures.extend(cycles.check());
        for (i, name) in plan.hot_names.iter().enumerate() {
            match keyed.get(&BreakerKey::Text(name.clone())) {
                Some(h) if h.state() != State::Closed => failures.push(format!(
                    "hot-{i}'s breaker is {} at the end of the run, after a healthy phase",
                    h.state()
                )),
                // Evicted while closed (a full shard evicts its least recently used closed
                // breaker with no call in flight): a missing breaker reads as closed.
                Some(_) | None => {}
            }
        }
        let remade = cycles.remade();
        if remade.open > 0 {
            failures.push(format!(
                "a hot key's breaker, in constant use, was evicted while open or half-open and made anew {} times: the new one let its calls through to the failing dependency",
                remade.open
            ));
        }
        if samples.max_keys_held > key_bound {
            failures.push(format!(
                "the keyed breaker held {} keys, over max_keys {} + {} calls in flight",
                samples.max_keys_held, config.max_keys, config.concurrency
            ));
        }

        if stuck > 0 {
            failures.push(format!(
                "{stuck} requests did not end within their deadline ({}) + grace ({})",
                humantime::format_duration(config.deadline),
                humantime::format_duration(config.grace)
            ));
        }
        if issued != completed + stuck {
            failures.push(format!(
                "{issued} requests issued, but {completed} completed and {stuck} stuck: {} lost",
                issued.saturating_sub(completed + stuck)
            ));
        }
        if in_flight != 0 {
            failures.push(format!(
                "{in_flight} requests still in flight in the workers"
            ));
        }
        if limit.in_flight() != 0 {
            failures.push(format!(
                "the concurrency limit still counts {} calls in flight",
                limit.in_flight()
            ));
        }
        let other = load.count(Ending::OtherError);
        if other > 0 {
            failures.push(format!(
                "{other} requests ended with an error that is neither fusebox's nor the client's"
            ));
        }
        if server_in_flight != 0 || server_done != received {
            failures.push(format!(
                "the server still has {server_in_flight} requests in flight ({received} received, {server_done} done)"
            ));
        }
        if sent != sent_ok + sent_failed + cancelled {
            failures.push(format!(
                "the client sent {sent} attempts, but {sent_ok} answered + {sent_failed} failed + {cancelled} cancelled = {}",
                sent_ok + sent_failed + cancelled
            ));
        }
        if received > sent {
            failures.push(format!(
                "the server received {received} requests, more than the {sent} the client sent"
            ));
        }
        if received < sent_ok {
            failures.push(format!(
                "the client got {sent_ok} responses, but the server received only {received} requests"
            ));
        }
        if distinct_keys <= config.max_keys as u64 {
            failures.push(format!(
                "only {distinct_keys} distinct keys were used, not more than max_keys {}: eviction was not exercised (raise --rate or --duration, or lower --max-keys)",
                config.max_keys
            ));
        }

        failures
    }

    /// What the run did, in a few lines.
    fn summary(&self) -> String {
        let (config, plan, cycles, keyed, samples, memory) = (
            self.config,
            self.plan,
            self.cycles,
            self.keyed,
            self.samples,
            self.memory,
        );
        let (load, s) = (&plan.load, self.server);
        let Counts {
            issued,
            completed,
            stuck,
            in_flight,
            received,
            server_done,
            server_in_flight,
            sent,
            sent_ok,
            sent_failed,
            cancelled,
            distinct_keys,
            key_bound,
        } = self.counts();
        let (elapsed, schedule) = (self.elapsed, plan.schedule);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak: {} phases of {} ({} issuing, {} healthy / {} failing), {} req/s target, {} workers, {} hot keys, max_keys {}, breaker state {}",
            config.phases,
            humantime::format_duration(config.phase),
            humantime::format_duration(Duration::from_millis(elapsed.as_millis() as u64)),
            config.phases / 2 + 1,
            config.phases / 2,
            config.rate,
            config.concurrency,
            config.hot_keys,
            config.max_keys,
            match &config.store {
                StoreChoice::Memory => "in memory",
                StoreChoice::StartRedis | StoreChoice::Redis(_) => "on Redis",
            },
        );
        let _ = writeln!(
            out,
            "requests: {issued} issued, {completed} completed, {stuck} stuck, {in_flight} in flight at the end; {:.0} req/s achieved",
            completed as f64 / elapsed.as_secs_f64().max(1e-9)
        );
        let endings: Vec<String> = ENDINGS
            .iter()
            .map(|(e, name)| format!("{name} {}", load.count(*e)))
            .collect();
        let _ = writeln!(out, "  by outcome: {}", endings.join(", "));
        let _ = writeln!(
            out,
            "  latency: p50 <= {:.1} ms, p99 <= {:.1} ms, max {:.1} ms; {} past the {} deadline (within grace)",
            load.quantile_ms(0.5),
            load.quantile_ms(0.99),
            load.max_latency_us.load(Ordering::Relaxed) as f64 / 1000.0,
            load.over_deadline.load(Ordering::Relaxed),
            humantime::format_duration(config.deadline),
        );
        let _ = writeln!(
            out,
            "client attempts: {sent} sent = {sent_ok} answered + {sent_failed} failed + {cancelled} cancelled; most requests in flight {}",
            load.max_in_flight.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "server: {received} received, {server_done} done, {server_in_flight} in flight; {} 200, {} 503, {} held past the timeout, {} reset",
            s.ok.load(Ordering::Relaxed),
            s.unavailable.load(Ordering::Relaxed),
            s.held.load(Ordering::Relaxed),
            s.reset.load(Ordering::Relaxed),
        );
        let t = |i: usize| cycles.totals[i].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "transitions: closed->open {}, open->half_open {}, half_open->open {}, half_open->closed {}, other {}; churn keys {}",
            t(0),
            t(1),
            t(2),
            t(3),
            t(4),
            cycles.churn_transitions.load(Ordering::Relaxed),
        );
        let cells = cycles.cells();
        for h in 0..config.hot_keys {
            let (mut opened_in, mut closed_in, mut sum) = (0, 0, Cell::default());
            for p in 0..config.phases {
                let c = cells[p as usize * config.hot_keys + h];
                if schedule.failing(p) && c.opened > 0 {
                    opened_in += 1;
                }
                if p > 0 && !schedule.failing(p) && c.closed > 0 {
                    closed_in += 1;
                }
                sum.opened += c.opened;
                sum.half_opened += c.half_opened;
                sum.reopened += c.reopened;
                sum.closed += c.closed;
            }
            let _ = writeln!(
                out,
                "  hot-{h}: opened in {opened_in}/{} failing phases, closed in {closed_in}/{} healthy ones; {} opens, {} half-opens, {} re-opens, {} closes",
                config.phases / 2,
                config.phases / 2,
                sum.opened,
                sum.half_opened,
                sum.reopened,
                sum.closed,
            );
        }
        let odd = cycles.odd();
        if !odd.is_empty() {
            let named: Vec<String> = odd
                .iter()
                .map(|o| {
                    format!(
                        "hot-{} {}->{} at {:.1}s (phase {})",
                        o.hot,
                        o.from.as_str(),
                        o.to.as_str(),
                        o.at.as_secs_f64(),
                        o.at.as_nanos() / schedule.phase.as_nanos().max(1) + 1,
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  other transitions (the first {}): {}",
                odd.len(),
                named.join(", ")
            );
        }
        let remade = cycles.remade();
        let _ = writeln!(
            out,
            "hot breakers evicted and made anew: {} while closed, {} while open or half-open",
            remade.closed, remade.open
        );
        if remade.open > 0 {
            let _ = writeln!(
                out,
                "  note: a hot key's breaker, in constant use, was evicted while open or half-open; the new one let its calls through to the failing dependency until it re-opened"
            );
        }
        let _ = writeln!(
            out,
            "keys: {distinct_keys} distinct over the run, at most {} held (bound {}), {} at the end",
            samples.max_keys_held,
            key_bound,
            keyed.len()
        );
        let _ = writeln!(
            out,
            "rss: {} samples, min {:.1} MiB, warm-up ({}) level {:.1} MiB, max after {:.1} MiB, last {:.1} MiB, bound {:.1} MiB",
            memory.samples,
            mib(memory.min),
            humantime::format_duration(config.warm_up),
            mib(memory.warm_level),
            mib(memory.max_after),
            mib(memory.last),
            mib(memory.bound),
        );
        out
    }
}

/// Starts the dependency, builds the policy, runs the workers and the sampler to the end of
/// the schedule, drains, and judges what happened. An error means the soak could not run.
async fn run(config: Config) -> Result<Outcome, String> {
    let start = Instant::now() + Duration::from_millis(100);
    let schedule = Schedule {
        start,
        phase: config.phase,
        phases: config.phases,
    };
    let server = Dependency::start(schedule, config.slow_latency)
        .await
        .map_err(|e| format!("cannot start the dependency on 127.0.0.1: {e}"))?;
    let cycles = Arc::new(Cycles::new(schedule, config.hot_keys));

    // The Redis server, when the soak starts its own: stopped when the run ends.
    let mut own_redis = None;
    let redis_url = match &config.store {
        StoreChoice::Memory => None,
        StoreChoice::Redis(url) => Some(url.clone()),
        StoreChoice::StartRedis => {
            let server = RedisServer::start().await;
            let url = server.url();
            own_redis = Some(server);
            Some(url)
        }
    };
    let policy = policy(&config, Arc::clone(&cycles), redis_url.as_deref())?;
    let keyed = policy
        .keyed_breaker_handle()
        .ok_or("the soak's policy has no keyed breaker")?;
    let limit = policy
        .limit_handle()
        .ok_or("the soak's policy has no concurrency limit")?;

    let attempts = Arc::new(Attempts::default());
    let client = fusebox::hyper::client();
    let counted = Arc::clone(&attempts);
    let inner = tower::service_fn(move |req| {
        let client = client.clone();
        let attempt = Attempt::start(&counted);
        async move {
            let result = client.request(req).await;
            attempt.finish(result.is_ok());
            result
        }
    });
    let svc = tower::Layer::layer(&policy, inner);

    let url: http::Uri = format!("http://{}/soak", server.addr)
        .parse()
        .map_err(|e| format!("bad URL: {e}"))?;
    let plan = Arc::new(Plan {
        schedule,
        url,
        next: AtomicU64::new(0),
        load: Load {
            by_phase: Mutex::new(vec![(0, 0); config.phases as usize + 1]),
            ..Load::default()
        },
        hot_names: (0..config.hot_keys).map(|i| format!("hot-{i}")).collect(),
        config: config.clone(),
    });

    let (stop_sampler, sampler_stopped) = watch::channel(false);
    let sampler = tokio::spawn(sample(
        Arc::clone(&plan),
        Arc::clone(&cycles),
        keyed.clone(),
        Arc::clone(&server.stats),
        sampler_stopped,
    ));

    let workers: Vec<_> = (0..config.concurrency)
        .map(|_| tokio::spawn(worker(svc.clone(), Arc::clone(&plan))))
        .collect();
    let mut join_errors = Vec::new();
    for w in workers {
        if let Err(e) = w.await {
            join_errors.push(e.to_string());
        }
    }
    let finished = Instant::now();

    // Drain: the server's held requests end within their latency (or with their connection).
    let drain_until = finished + config.slow_latency + Duration::from_secs(5);
    while server.stats.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_sampler.send(true);
    let samples = match sampler.await {
        Ok(s) => s,
        Err(e) => {
            join_errors.push(e.to_string());
            Samples::default()
        }
    };
    let memory = judge_memory(
        &samples.rss,
        config.warm_up.as_secs_f64(),
        config.rss_slack_mib,
        config.rss_slack_percent,
    );
    let finished = Finished {
        elapsed: finished.saturating_duration_since(start),
        config: &config,
        plan: &plan,
        cycles: &cycles,
        keyed: &keyed,
        limit: &limit,
        server: &server.stats,
        attempts: &attempts,
        samples: &samples,
        memory,
        join_errors: &join_errors,
    };
    let mut summary = finished.summary();
    let failures = finished.failures();
    if let Some(url) = &redis_url {
        if let Some(on) = policy.breaker_store().redis() {
            let st = on.stats();
            let _ = writeln!(
                summary,
                "redis store: {} script calls, {} errors, {} timeouts, {} returns from the fallback, {} pub/sub messages",
                st.calls, st.errors, st.timeouts, st.resyncs, st.messages
            );
        }
        summary.push_str(&redis_summary(url).await);
    }
    drop(own_redis);
    Ok(Outcome { failures, summary })
}

/// What the Redis server holds at the end of a run on Redis: its keys and its memory (the
/// breakers of the churn keys must not pile up there either).
async fn redis_summary(url: &str) -> String {
    let read = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?;
        Ok::<_, redis::RedisError>((keys, info))
    };
    match read.await {
        Ok((keys, info)) => {
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .unwrap_or("?")
                    .trim()
                    .to_owned()
            };
            format!(
                "redis: {keys} keys at the end, used_memory {} (peak {}), rss {}\n",
                field("used_memory_human"),
                field("used_memory_peak_human"),
                field("used_memory_rss_human"),
            )
        }
        Err(e) => format!("redis: could not read the server's keys and memory: {e}\n"),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(problems) => {
            let _ = writeln!(std::io::stderr().lock(), "soak: {problems}");
            return ExitCode::from(2);
        }
    };
    install_panic_hook();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "soak: cannot start tokio: {e}");
            return ExitCode::from(2);
        }
    };
    if !config.quiet {
        say!(
            "soak: {} phases of {} (open wait {} + up to {} jitter), {} req/s, {} workers; warm-up {}",
            config.phases,
            humantime::format_duration(config.phase),
            humantime::format_duration(config.open_wait),
            humantime::format_duration(config.jitter),
            config.rate,
            config.concurrency,
            humantime::format_duration(config.warm_up),
        );
    }
    let outcome = runtime.block_on(run(config));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "soak: {e}");
            ExitCode::from(2)
        }
        Ok(outcome) => {
            say!("{}", outcome.summary.trim_end());
            if outcome.failures.is_empty() {
                say!("soak passed");
                ExitCode::SUCCESS
            } else {
                say!("soak FAILED: {} checks failed", outcome.failures.len());
                for f in &outcome.failures {
                    say!("  - {f}");
                }
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(std::iter::once("soak").chain(extra.iter().copied()))
    }

    #[test]
    fn phases_derive_from_the_open_wait_and_the_run_starts_and_ends_healthy() {
        let c = Config::from_args(&args(&["--duration", "60s"])).unwrap();
        assert_eq!(c.phase, Duration::from_secs(5), "4 × (1s + 250ms)");
        assert_eq!(c.phases, 11, "60s holds 12 phases, rounded down to odd");
        assert_eq!(c.total(), Duration::from_secs(55));
        assert_eq!(c.warm_up, Duration::from_secs(11), "20 % of the run");
        let c = Config::from_args(&args(&["--duration", "45s"])).unwrap();
        assert_eq!(c.warm_up, Duration::from_secs(10), "at least two phases");
        let c = Config::from_args(&args(&["--duration", "2h"])).unwrap();
        assert_eq!(c.phases, 1439);
    }

    #[test]
    fn a_phase_too_short_to_close_the_breaker_is_refused() {
        let e = Config::from_args(&args(&["--open-wait", "2s", "--phase", "5s"])).unwrap_err();
        assert!(e.contains("--phase 5s is too short"), "{e}");
        assert!(e.contains("6s"), "2 × 2.5s + 1s: {e}");
        let e = Config::from_args(&args(&["--duration", "10s"])).unwrap_err();
        assert!(e.contains("fewer than 3 phases"), "{e}");
        let e = Config::from_args(&args(&["--keys", "200", "--max-keys", "256"])).unwrap_err();
        assert!(e.contains("--max-keys"), "{e}");
    }

    fn plan(hot: usize) -> Plan {
        let config = Config::from_args(&args(&["--keys", &hot.to_string()])).unwrap();
        Plan {
            schedule: Schedule {
                start: Instant::now(),
                phase: config.phase,
                phases: config.phases,
            },
            url: "http://127.0.0.1:1/soak".parse().unwrap(),
            next: AtomicU64::new(0),
            load: Load::default(),
            hot_names: (0..hot).map(|i| format!("hot-{i}")).collect(),
            config,
        }
    }

    #[test]
    fn half_the_requests_go_round_the_hot_keys_the_rest_to_keys_used_twice() {
        let p = plan(3);
        let keys: Vec<String> = (0..12).map(|n| p.key(n)).collect();
        assert_eq!(
            keys,
            [
                "hot-0", "churn-0", "hot-1", "churn-0", "hot-2", "churn-1", "hot-0", "churn-1",
                "hot-1", "churn-2", "hot-2", "churn-2"
            ]
        );
        assert_eq!(
            p.due(400) - p.schedule.start,
            Duration::from_secs(1),
            "400 req/s"
        );
    }

    /// Feeds the transitions of a run that cycles as it should, phase by phase.
    fn cycling(cycles: &Cycles, key: &str, skip: Option<u32>) {
        let s = cycles.schedule;
        let at = |p: u32, frac: f64| s.start + s.phase.mul_f64(f64::from(p) + frac);
        let mut generation = 0;
        let mut moved = |from, to, when| {
            generation += 1;
            cycles.record_transition(Some(key), (from, to, generation), when);
        };
        for p in 1..s.phases {
            if Some(p) == skip {
                continue;
            }
            if s.failing(p) {
                moved(State::Closed, State::Open, at(p, 0.1));
                moved(State::Open, State::HalfOpen, at(p, 0.4));
                moved(State::HalfOpen, State::Open, at(p, 0.4));
            } else {
                moved(State::Open, State::HalfOpen, at(p, 0.2));
                moved(State::HalfOpen, State::Closed, at(p, 0.25));
            }
        }
    }

    fn schedule() -> Schedule {
        Schedule {
            start: Instant::now(),
            phase: Duration::from_secs(5),
            phases: 5,
        }
    }

    #[test]
    fn other_transitions_fail_and_the_first_are_kept_for_the_summary() {
        let s = schedule();
        let cycles = Cycles::new(s, 2);
        let into = s.phase * 2 + Duration::from_secs(1);
        for _ in 0..ODD_KEPT + 3 {
            cycles.record_transition(
                Some("hot-1"),
                (State::Closed, State::HalfOpen, 7),
                s.start + into,
            );
        }
        let odd = cycles.odd();
        assert_eq!(odd.len(), ODD_KEPT, "only the first are kept");
        assert_eq!(
            (odd[0].hot, odd[0].from, odd[0].to, odd[0].at),
            (1, State::Closed, State::HalfOpen, into)
        );
        let failures = cycles.check();
        assert!(
            failures.iter().any(|f| f.starts_with("hot-1, phase 3/5")
                && f.contains(&format!("{} transitions to or from", ODD_KEPT + 3))),
            "{failures:?}"
        );
    }

    #[test]
    fn breakers_that_cycle_in_every_phase_pass() {
        let cycles = Cycles::new(schedule(), 2);
        cycling(&cycles, "hot-0", None);
        cycling(&cycles, "hot-1", None);
        assert_eq!(cycles.check(), Vec::<String>::new());
        assert_eq!(
            cycles.totals[0].load(Ordering::Relaxed),
            4,
            "closed -> open"
        );
        assert_eq!(
            cycles.totals[3].load(Ordering::Relaxed),
            4,
            "half-open -> closed"
        );
    }

    #[test]
    fn a_failing_phase_that_does_not_open_or_a_healthy_one_that_does_not_close_fails() {
        let cycles = Cycles::new(schedule(), 2);
        cycling(&cycles, "hot-0", Some(3));
        cycling(&cycles, "hot-1", Some(2));
        let failures = cycles.check();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(
            failures[0].starts_with(
                "hot-1, phase 3/5 (10.0s..15.0s): healthy, but the breaker never closed"
            ),
            "{failures:?}"
        );
        assert!(
            failures[1].starts_with(
                "hot-0, phase 4/5 (15.0s..20.0s): failing, but the breaker never opened"
            ),
            "{failures:?}"
        );
    }

    #[test]
    fn flapping_an_early_open_and_churn_keys_moving_fail() {
        let s = schedule();
        let cycles = Cycles::new(s, 1);
        cycling(&cycles, "hot-0", None);
        let in_phase = |p: u32| s.start + s.phase * p + Duration::from_secs(4);
        // Re-opens late in a healthy phase, after it closed.
        cycles.record_transition(Some("hot-0"), (State::Closed, State::Open, 99), in_phase(4));
        // Opens in the first, healthy phase.
        cycles.record_transition(
            Some("hot-0"),
            (State::Closed, State::Open, 100),
            in_phase(0),
        );
        // A churn key opens.
        cycles.record_transition(
            Some("churn-7"),
            (State::Closed, State::Open, 1),
            in_phase(1),
        );
        let failures = cycles.check();
        assert_eq!(failures.len(), 3, "{failures:?}");
        assert!(failures[0].contains("opened in the first, healthy phase"));
        assert!(failures[1].contains("phase 5/5") && failures[1].contains("re-opened 1 times"));
        assert!(failures[2].starts_with("1 transitions of churn keys"));
        assert_eq!(cycles.remade(), Remade::default());
    }

    #[test]
    fn a_hot_breaker_made_anew_is_told_by_its_generation() {
        let s = schedule();
        let cycles = Cycles::new(s, 1);
        let at = s.start + s.phase + Duration::from_secs(1);
        cycles.record_transition(Some("hot-0"), (State::Closed, State::Open, 1), at);
        cycles.record_transition(Some("hot-0"), (State::Open, State::HalfOpen, 2), at);
        // Delivered out of order by one: not a new breaker.
        cycles.record_transition(Some("hot-0"), (State::HalfOpen, State::Open, 4), at);
        cycles.record_transition(Some("hot-0"), (State::Open, State::HalfOpen, 3), at);
        assert_eq!(cycles.remade(), Remade::default());
        // Evicted while open, made anew (closed) and opened again; and again at once.
        cycles.record_transition(Some("hot-0"), (State::Closed, State::Open, 1), at);
        assert_eq!(cycles.remade(), Remade { closed: 0, open: 1 });
        cycles.record_transition(Some("hot-0"), (State::Closed, State::Open, 1), at);
        assert_eq!(cycles.remade(), Remade { closed: 0, open: 2 });
        let c = cycles.cells()[1];
        assert_eq!((c.opened, c.half_opened, c.reopened), (3, 2, 1));
    }

    #[test]
    fn memory_is_judged_against_the_warm_up_level_with_a_slack() {
        let flat: Vec<(f64, u64)> = (0..60)
            .map(|t| (f64::from(t), 10 * MIB + (t as u64 % 3) * MIB))
            .collect();
        let m = judge_memory(&flat, 12.0, 16, 25);
        assert_eq!(m.warm_level, 12 * MIB);
        assert_eq!(m.bound, 28 * MIB, "16 MiB is more than 25 %");
        assert!(m.max_after <= m.bound);
        let m = judge_memory(&flat, 12.0, 1, 25);
        assert_eq!(m.bound, 15 * MIB, "25 % of 12 MiB is more than 1 MiB");
        // Growing by 1 MiB a second: over the bound well before the end.
        let leaking: Vec<(f64, u64)> = (0..60)
            .map(|t| (f64::from(t), (10 + t as u64) * MIB))
            .collect();
        let m = judge_memory(&leaking, 12.0, 16, 25);
        assert_eq!(m.warm_level, 21 * MIB);
        assert!(m.max_after > m.bound, "{m:?}");
        assert_eq!(m.min, 10 * MIB);
        assert_eq!(m.last, 69 * MIB);
    }

    #[test]
    fn fusebox_errors_are_told_apart_from_the_clients() {
        let open: BoxError = Box::new(CircuitOpen::new(
            Arc::from("soak"),
            None,
            Duration::from_secs(1),
            false,
        ));
        assert_eq!(classify_error(&open), Ending::CircuitOpen);
        let elapsed: BoxError =
            Box::new(Elapsed::new(Arc::from("GET /"), Duration::from_millis(250)));
        assert_eq!(classify_error(&elapsed), Ending::Timeout);
        let other: BoxError = "something else".into();
        assert_eq!(classify_error(&other), Ending::OtherError);
    }
}
