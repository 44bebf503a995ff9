//! `fusebox replay`: recorded traffic through the configured breakers, on virtual time.
//!
//! Thresholds copied from a blog post are guesses. Replaying a day of real calls through
//! the breaker answers the questions that matter before it is trusted: when would it have
//! opened, and why? How many calls would it have rejected — and how many of those would
//! have succeeded? How long would the dependency have been cut off? Would it have flapped?
//!
//! Each call is admitted (or rejected) by the breaker's exact state machine
//! ([`fusebox_breaker::sim::Simulator`]) at its timestamp, and its outcome is recorded
//! when it completes, at timestamp + latency. The outcome is the live breaker's judgement
//! ([`fusebox_breaker::judge`]) of the answer the log records — an HTTP status, a gRPC
//! status (as a trailers-only gRPC response), or the error an error kind stands for — on
//! the call's route: the route's classifier (its statuses, 429 where the route says
//! `count_throttling`), and the breaker's `count_overloaded` for calls a concurrency limit
//! shed. Each result code is judged once per route, when the route is first seen. A call
//! is slow when its latency is at least the route's slow-call threshold, as the breaker's
//! route judges it; an ignored outcome (a local rejection, a cancelled call) counts
//! nothing, its slowness included. Completions wait in a per-breaker event queue ordered
//! by time, so a slow call's failure lands after the fast calls that started later, as it
//! would live. A completion at the same instant as a new call is recorded first. A call
//! the breaker rejects never reaches the dependency: its logged outcome is what the
//! breaker saved (a failure) or cost (a success). Jitter is seeded (0 unless the file sets
//! `seed`), so a replay is reproducible. Each transition names the calls-file line of the
//! call that made it: the call whose completion tripped the breaker, or decided a
//! half-open period, or that came first after the open wait.
//!
//! [`sweep`] replays the same calls over a grid of thresholds.

pub mod calls;
pub mod sweep;

use crate::config::{BreakerOverrides, Policies, PolicySpec};
use crate::input::InputError;
use calls::{CallReader, Format, RESULT_CODES, TimeStyle, judge_result};
use fusebox_breaker::judge::Judged;
use fusebox_breaker::sim::{Recorded, Simulator};
use fusebox_breaker::state::{Permit, PermitKind};
use fusebox_breaker::{
    CircuitBreakerConfig, Reason, State, Transition, WindowConfig, WindowTotals,
};
use fusebox_classify::section::format_duration;
use fusebox_classify::{Nanos, RouteId};
use serde::Serialize;
use std::collections::{BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

const SUCCESS: u8 = 0;
const FAILURE: u8 = 1;
const IGNORED: u8 = 2;

/// How one (policy, route) pair judges a call.
#[derive(Debug, Clone)]
struct Class {
    breaker: Option<u16>,
    policy: usize,
    label: String,
    /// The breaker's judgement of each result code on this route (`SUCCESS`, `FAILURE`,
    /// `IGNORED`), judged once when the route is first seen.
    outcomes: Box<[u8]>,
    /// The route's slow-call threshold in nanoseconds (`u64::MAX`: none): a call at least
    /// this long is slow.
    slow_ns: u64,
}

/// Maps the routes written in a calls file to their policy, breaker and classification.
///
/// Resolution is cached: a route is compared with the routes seen so far (the first 32 in
/// a short list, checked by length and end bytes before their text; more in a map); only
/// a route never seen goes through the route tables.
#[derive(Debug)]
pub struct Resolver<'p> {
    policies: &'p Policies,
    /// Breakers are given out as classes appear: one per policy, or one per route of a
    /// policy whose breaker is keyed by route.
    breaker_of_policy: Vec<Option<u16>>,
    next_breaker: u16,
    /// Only this policy's routes run (a sweep runs one).
    only: Option<usize>,
    classes: Vec<Class>,
    class_of: HashMap<(usize, RouteId), u32>,
    seen: Vec<Seen>,
    seen_map: HashMap<Box<[u8]>, u32>,
    slow_override: Option<u64>,
}

/// A route seen before, with its first and last eight bytes as numbers.
#[derive(Debug)]
struct Seen {
    route: Box<[u8]>,
    head: u64,
    tail: u64,
    class: u32,
}

impl Seen {
    /// The first and last eight bytes of `route` (a shorter route, zero-padded, twice).
    #[inline]
    fn words(route: &[u8]) -> (u64, u64) {
        let mut head = [0u8; 8];
        let mut tail = [0u8; 8];
        if route.len() >= 8 {
            head.copy_from_slice(&route[..8]);
            tail.copy_from_slice(&route[route.len() - 8..]);
        } else {
            head[..route.len()].copy_from_slice(route);
            tail = head;
        }
        (u64::from_ne_bytes(head), u64::from_ne_bytes(tail))
    }
}

/// A class index meaning "not in this run" (another policy's route in a sweep).
const SKIP: u32 = u32::MAX;

impl<'p> Resolver<'p> {
    /// A resolver for `policies`; with `only`, routes of other policies are skipped.
    /// `slow_override` replaces every route's slow-call threshold.
    pub fn new(
        policies: &'p Policies,
        only: Option<usize>,
        slow_override: Option<Duration>,
    ) -> Self {
        Resolver {
            policies,
            breaker_of_policy: vec![None; policies.policies.len()],
            next_breaker: 0,
            only,
            classes: Vec::new(),
            class_of: HashMap::new(),
            seen: Vec::new(),
            seen_map: HashMap::new(),
            slow_override: slow_override.map(fusebox_classify::clock::duration_nanos),
        }
    }

    #[inline]
    fn resolve(&mut self, route: &[u8]) -> Result<u32, String> {
        let (head, tail) = Seen::words(route);
        let found = match self.seen.iter().find(|s| {
            // Lengths and end words first: most candidates differ there, and they are the
            // whole route up to 16 bytes.
            s.route.len() == route.len()
                && s.head == head
                && s.tail == tail
                && (route.len() <= 16 || *s.route == *route)
        }) {
            Some(s) => s.class,
            None => match self.seen_map.get(route) {
                Some(&c) => c,
                None => {
                    let c = self.resolve_new(route)?;
                    if self.seen.len() < 32 {
                        self.seen.push(Seen {
                            route: route.into(),
                            head,
                            tail,
                            class: c,
                        });
                    } else if self.seen_map.len() < 100_000 {
                        self.seen_map.insert(route.into(), c);
                    }
                    c
                }
            },
        };
        Ok(found)
    }

    #[cold]
    fn resolve_new(&mut self, route: &[u8]) -> Result<u32, String> {
        let text = std::str::from_utf8(route)
            .map_err(|_| "the route is not UTF-8".to_owned())?
            .trim();
        let policies = self.policies;
        // A key exactly as a policy lists it.
        for (pi, p) in policies.policies.iter().enumerate() {
            if let Some((id, _, _)) = p.routes().iter().skip(1).find(|(_, name, _)| *name == text) {
                return Ok(self.class(pi, id));
            }
        }
        // A concrete request: "METHOD /path" (a bare path is a GET).
        let (method, path) = match text.split_once(char::is_whitespace) {
            Some((m, p)) => (http::Method::from_bytes(m.as_bytes()).ok(), p.trim()),
            None => (Some(http::Method::GET), text),
        };
        if let Some(method) = method
            && path.starts_with('/')
        {
            for (pi, p) in policies.policies.iter().enumerate() {
                let id = p.routes().resolve_path(&method, path);
                if id != RouteId::DEFAULT {
                    return Ok(self.class(pi, id));
                }
            }
        }
        if let Some(d) = self.policies.default_policy {
            return Ok(self.class(d, RouteId::DEFAULT));
        }
        let names: Vec<&str> = self
            .policies
            .policies
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        Err(format!(
            "unknown route {text:?}: no policy lists it (policies: {}); add it to a policy's routes or pass --default-policy NAME",
            names.join(", ")
        ))
    }

    fn class(&mut self, policy: usize, id: RouteId) -> u32 {
        if self.only.is_some_and(|o| o != policy) {
            return SKIP;
        }
        if let Some(&c) = self.class_of.get(&(policy, id)) {
            return c;
        }
        let p = &self.policies.policies[policy];
        let route = p.routes().route(id);
        let (breaker, label) = if p.breaker().is_none() {
            (None, p.name.clone())
        } else if p.breaker_per_route() {
            self.next_breaker += 1;
            (
                Some(self.next_breaker - 1),
                format!("{}/{}", p.name, p.routes().name(id)),
            )
        } else {
            let b = match self.breaker_of_policy[policy] {
                Some(b) => b,
                None => {
                    self.next_breaker += 1;
                    self.breaker_of_policy[policy] = Some(self.next_breaker - 1);
                    self.next_breaker - 1
                }
            };
            (Some(b), p.name.clone())
        };
        // Every result code judged once, as the breaker judges a live call on this route
        // (a policy without a breaker judges nothing: its calls are only counted).
        let count_overloaded = p.breaker().is_some_and(|b| b.count_overloaded());
        let name = p.routes().name(id);
        let call = fusebox_classify::Call::new(id, name, &http::Method::GET, true);
        let outcomes = (0..RESULT_CODES)
            .map(|code| {
                let judged = u16::try_from(code)
                    .ok()
                    .and_then(|code| judge_result(code, &route, &call, count_overloaded));
                match judged {
                    Some(Judged::Counted { failure: true, .. }) => FAILURE,
                    Some(Judged::Counted { failure: false, .. }) => SUCCESS,
                    Some(Judged::Ignored) | None => IGNORED,
                }
            })
            .collect();
        let slow_ns = self.slow_override.unwrap_or_else(|| {
            route
                .slow_call_threshold()
                .map_or(u64::MAX, fusebox_classify::clock::duration_nanos)
        });
        let c = self.classes.len() as u32;
        self.classes.push(Class {
            breaker,
            policy,
            label,
            outcomes,
            slow_ns,
        });
        self.class_of.insert((policy, id), c);
        c
    }
}

/// A completion waiting in the event queue, packed into 24 bytes (the queue moves these
/// around on every push and pop): the permit's generation keeps its low 32 bits, which is
/// all a comparison with the current generation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    at: u64,
    seq: u32,
    generation: u32,
    /// The calls-file line of the call (for the transition its completion may make).
    line: u32,
    /// Bit 0: a probe; bits 1–2: the verdict; bit 3: slow.
    flags: u8,
}

impl Pending {
    fn new(at: u64, seq: u32, line: u32, permit: Permit, verdict: u8, slow: bool) -> Self {
        Pending {
            at,
            seq,
            generation: permit.generation() as u32,
            line,
            flags: u8::from(permit.kind() == PermitKind::Probe)
                | (verdict << 1)
                | (u8::from(slow) << 3),
        }
    }

    #[inline]
    fn verdict(self) -> u8 {
        (self.flags >> 1) & 3
    }

    #[inline]
    fn slow(self) -> bool {
        self.flags & 8 != 0
    }

    /// The permit, with the high bits of the generation taken from `current`.
    #[inline]
    fn permit(self, current: u64) -> Permit {
        let kind = if self.flags & 1 != 0 {
            PermitKind::Probe
        } else {
            PermitKind::Counted
        };
        Permit::new((current & !0xffff_ffff) | u64::from(self.generation), kind)
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: the earliest (then first admitted) on top.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One state change, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    /// When, nanoseconds since the Unix epoch (or since zero for second-stamped logs).
    pub at: u64,
    /// The calls-file line (1-based) of the call that made the change: for an opening,
    /// the call whose failure (or slowness), completing, tripped the breaker; for the
    /// move to half-open, the first call after the open wait; for a decision in
    /// half-open, the probe that decided it.
    pub line: u32,
    /// The state left.
    pub from: &'static str,
    /// The state entered.
    pub to: &'static str,
    /// Why.
    pub reason: &'static str,
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub failures: u32,
    /// Slow calls in the window.
    pub slow: u32,
    /// The window's failure rate, percent.
    pub failure_rate: f64,
    /// The window's slow-call rate, percent.
    pub slow_rate: f64,
    /// For an opening: the open wait, milliseconds (jitter included).
    pub open_ms: Option<u64>,
    /// For an opening: the jitter, milliseconds.
    pub jitter_ms: Option<u64>,
}

/// What one breaker did over the replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BreakerStats {
    /// Calls on the breaker's routes.
    pub calls: u64,
    /// Calls the breaker let through.
    pub admitted: u64,
    /// Calls it rejected.
    pub rejected: u64,
    /// Rejected calls whose logged outcome was a failure (load the dependency was spared).
    pub rejected_failures: u64,
    /// Rejected calls whose logged outcome was a success (the cost of the rejections).
    pub rejected_successes: u64,
    /// Rejected calls inside the incident (sweeps).
    pub rejected_in_incident: u64,
    /// Rejected successes outside the incident (sweeps).
    pub rejected_successes_outside: u64,
    /// Admitted calls that failed.
    pub failures: u64,
    /// Admitted calls that were slow.
    pub slow: u64,
    /// Admitted calls whose outcome is ignored (429 by default, cancellations).
    pub ignored: u64,
    /// CLOSED → OPEN transitions.
    pub openings: u32,
    /// Openings within the flap window of the previous closing.
    pub flaps: u32,
    /// Nanoseconds in CLOSED, OPEN and HALF_OPEN.
    pub time_closed: u64,
    /// Nanoseconds in OPEN.
    pub time_open: u64,
    /// Nanoseconds in HALF_OPEN.
    pub time_half_open: u64,
}

/// One breaker's replay.
#[derive(Debug)]
struct BreakerRun {
    sim: Simulator,
    heap: BinaryHeap<Pending>,
    seq: u32,
    stats: BreakerStats,
    transitions: Vec<TransitionRecord>,
    last_change: u64,
    last_closed: Option<u64>,
    flap_window: u64,
    t0: u64,
    incident: Option<(u64, u64)>,
    /// The breaker's state and generation, as its transitions said: while CLOSED,
    /// admission needs no question to the state machine (it admits every call, as
    /// counted, in the current generation, and changes nothing).
    closed: bool,
    generation: u64,
}

impl BreakerRun {
    fn new(config: CircuitBreakerConfig, flap_window: u64, incident: Option<(u64, u64)>) -> Self {
        BreakerRun {
            sim: Simulator::new(config),
            heap: BinaryHeap::with_capacity(1024),
            seq: 0,
            stats: BreakerStats::default(),
            transitions: Vec::new(),
            last_change: 0,
            last_closed: None,
            flap_window,
            t0: 0,
            incident,
            closed: true,
            generation: 0,
        }
    }

    /// Records completions up to and including `now`.
    #[inline]
    fn drain_until(&mut self, now: u64) {
        while let Some(top) = self.heap.peek() {
            if top.at > now {
                break;
            }
            let p = *top;
            self.heap.pop();
            self.complete(p);
        }
    }

    #[inline]
    fn complete(&mut self, p: Pending) {
        let permit = p.permit(self.generation);
        if p.verdict() == IGNORED {
            self.sim.release(permit);
            return;
        }
        if let Recorded::Transition(t) =
            self.sim
                .record(permit, p.verdict() == FAILURE, p.slow(), Nanos(p.at))
        {
            self.moved(&t, p.line);
        }
    }

    #[inline]
    fn call(&mut self, at: u64, line: u32, verdict: u8, slow: bool, latency: u64) {
        self.drain_until(at);
        self.stats.calls += 1;
        let admitted = if self.closed {
            Ok(Permit::new(self.generation, PermitKind::Counted))
        } else {
            let (admitted, moved) = self.sim.acquire(Nanos(at));
            if let Some(t) = moved {
                self.moved(&t, line);
            }
            admitted
        };
        match admitted {
            Ok(permit) => {
                self.stats.admitted += 1;
                match verdict {
                    FAILURE => self.stats.failures += 1,
                    IGNORED => self.stats.ignored += 1,
                    _ => {}
                }
                if slow && verdict != IGNORED {
                    self.stats.slow += 1;
                }
                if verdict == IGNORED && permit.kind() != PermitKind::Probe {
                    // Nothing to record and no probe slot to give back.
                    return;
                }
                self.seq = self.seq.wrapping_add(1);
                self.heap.push(Pending::new(
                    at.saturating_add(latency),
                    self.seq,
                    line,
                    permit,
                    verdict,
                    slow,
                ));
            }
            Err(_) => self.rejected(at, verdict),
        }
    }

    #[cold]
    fn rejected(&mut self, at: u64, verdict: u8) {
        self.stats.rejected += 1;
        let inside = self.incident.is_some_and(|(s, e)| (s..=e).contains(&at));
        if inside {
            self.stats.rejected_in_incident += 1;
        }
        match verdict {
            FAILURE => self.stats.rejected_failures += 1,
            SUCCESS => {
                self.stats.rejected_successes += 1;
                if !inside {
                    self.stats.rejected_successes_outside += 1;
                }
            }
            _ => {}
        }
    }

    #[cold]
    fn moved(&mut self, t: &Transition, line: u32) {
        let at = t.at.0;
        self.closed = t.to == State::Closed;
        self.generation = t.generation;
        self.add_time(t.from, at.saturating_sub(self.last_change));
        self.last_change = at;
        if t.from == State::Closed && t.to == State::Open {
            self.stats.openings += 1;
            if self
                .last_closed
                .is_some_and(|c| at.saturating_sub(c) <= self.flap_window)
            {
                self.stats.flaps += 1;
            }
        }
        if t.to == State::Closed {
            self.last_closed = Some(at);
        }
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        self.transitions.push(TransitionRecord {
            at: self.t0.saturating_add(at),
            line,
            from: t.from.as_str(),
            to: t.to.as_str(),
            reason: t.reason.as_str(),
            calls: t.window.calls,
            failures: t.window.failures,
            slow: t.window.slow,
            failure_rate: t.window.failure_rate(),
            slow_rate: t.window.slow_rate(),
            open_ms: ms(t.open_for),
            jitter_ms: ms(t.jitter),
        });
    }

    fn add_time(&mut self, state: State, d: u64) {
        match state {
            State::Open | State::ForcedOpen => self.stats.time_open += d,
            State::HalfOpen => self.stats.time_half_open += d,
            _ => self.stats.time_closed += d,
        }
    }

    fn finish(&mut self, end: u64) {
        self.drain_until(u64::MAX);
        let state = self.sim.state();
        self.add_time(state, end.saturating_sub(self.last_change));
        self.last_change = end;
    }
}

/// Settings of a replay beyond the policy file.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// An opening this soon after the previous closing counts as a flap.
    pub flap_window: Duration,
    /// The jitter seed for breakers whose config sets none.
    pub seed: u64,
    /// The calls file's format (`None`: detect it).
    pub format: Option<Format>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            flap_window: Duration::from_secs(60),
            seed: 0,
            format: None,
        }
    }
}

/// One breaker's part of a [`ReplayReport`].
#[derive(Debug, Clone, Serialize)]
pub struct BreakerReport {
    /// The breaker (policy) name.
    pub name: String,
    /// Its settings, in one line.
    pub settings: String,
    /// What it did.
    pub stats: BreakerStats,
    /// Every transition, in order.
    pub transitions: Vec<TransitionRecord>,
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The calls file.
    pub file: String,
    /// Calls read.
    pub calls: u64,
    /// Calls on routes whose policy has no breaker.
    pub unprotected: u64,
    /// The first call's timestamp (ns since the epoch).
    pub start: u64,
    /// The last completion (ns since the epoch).
    pub end: u64,
    /// How the file writes time.
    #[serde(skip)]
    pub time_style: TimeStyle,
    /// One entry per breaker.
    pub breakers: Vec<BreakerReport>,
}

/// Runs calls through every breaker of `policies`.
pub(crate) struct Engine<'p> {
    resolver: Resolver<'p>,
    /// Per policy: its breaker's config with the run's overrides, and how it reads.
    configs: Vec<Option<(CircuitBreakerConfig, String)>>,
    runs: Vec<BreakerRun>,
    names: Vec<(String, String)>,
    t0: Option<u64>,
    last_at: u64,
    end: u64,
    calls: u64,
    unprotected: u64,
    incident_abs: Option<(u64, u64)>,
    incident: Option<(u64, u64)>,
    flap_window: u64,
}

impl<'p> Engine<'p> {
    pub(crate) fn new(
        policies: &'p Policies,
        only: Option<usize>,
        overrides: &BreakerOverrides,
        slow_override: Option<Duration>,
        options: &ReplayOptions,
        incident: Option<(u64, u64)>,
    ) -> Result<Self, InputError> {
        let resolver = Resolver::new(policies, only, slow_override);
        let overrides = BreakerOverrides {
            default_seed: Some(options.seed),
            ..*overrides
        };
        let mut configs = Vec::with_capacity(policies.policies.len());
        for (i, p) in policies.policies.iter().enumerate() {
            if only.is_some_and(|o| o != i) {
                configs.push(None);
                continue;
            }
            configs.push(match p.breaker_with(&overrides) {
                Some(Ok(c)) => {
                    let settings = describe_breaker(&c, p, slow_override);
                    Some((c, settings))
                }
                Some(Err(e)) => {
                    let problems: Vec<String> =
                        e.problems().iter().map(ToString::to_string).collect();
                    return Err(InputError::new(format!(
                        "policy {:?}: the breaker with these settings is invalid: {}",
                        p.name,
                        problems.join("; ")
                    )));
                }
                None => None,
            });
        }
        Ok(Engine {
            resolver,
            configs,
            runs: Vec::new(),
            names: Vec::new(),
            t0: None,
            last_at: 0,
            end: 0,
            calls: 0,
            unprotected: 0,
            incident_abs: incident,
            incident: None,
            flap_window: fusebox_classify::clock::duration_nanos(options.flap_window),
        })
    }

    /// Starts the breakers up to index `b` (in class order, as they first appear).
    #[cold]
    fn grow(&mut self, b: usize) {
        while self.runs.len() <= b {
            let index = self.runs.len() as u16;
            let Some(class) = self
                .resolver
                .classes
                .iter()
                .find(|c| c.breaker == Some(index))
            else {
                return;
            };
            let Some((config, settings)) = self.configs[class.policy].clone() else {
                return;
            };
            let mut run = BreakerRun::new(config, self.flap_window, self.incident);
            run.t0 = self.t0.unwrap_or_default();
            self.names.push((class.label.clone(), settings));
            self.runs.push(run);
        }
    }

    #[inline]
    /// Feeds one call, read from `line` of the calls file (0 where lines are not kept).
    fn feed_class(&mut self, at: u64, line: u32, class: u32, result: u16, latency: u64) {
        let t0 = match self.t0 {
            Some(t) => t,
            None => self.start(at),
        };
        self.calls += 1;
        if class == SKIP {
            return;
        }
        let rel = at.saturating_sub(t0);
        self.last_at = rel;
        let c = &self.resolver.classes[class as usize];
        let Some(b) = c.breaker else {
            self.unprotected += 1;
            return;
        };
        let verdict = c
            .outcomes
            .get(usize::from(result))
            .copied()
            .unwrap_or(IGNORED);
        let slow = latency >= c.slow_ns;
        let done = rel.saturating_add(latency);
        if done > self.end {
            self.end = done;
        }
        let b = usize::from(b);
        if b >= self.runs.len() {
            self.grow(b);
        }
        if let Some(run) = self.runs.get_mut(b) {
            run.call(rel, line, verdict, slow, latency);
        }
    }

    #[cold]
    fn start(&mut self, at: u64) -> u64 {
        self.t0 = Some(at);
        self.incident = self
            .incident_abs
            .map(|(s, e)| (s.saturating_sub(at), e.saturating_sub(at)));
        at
    }

    pub(crate) fn finish(mut self, file: &str, style: TimeStyle) -> ReplayReport {
        let end = self.end.max(self.last_at);
        let t0 = self.t0.unwrap_or_default();
        let mut breakers = Vec::new();
        for (run, (name, settings)) in self.runs.iter_mut().zip(self.names) {
            run.finish(end);
            breakers.push(BreakerReport {
                name,
                settings,
                stats: run.stats.clone(),
                transitions: std::mem::take(&mut run.transitions),
            });
        }
        ReplayReport {
            file: file.to_owned(),
            calls: self.calls,
            unprotected: self.unprotected,
            start: t0,
            end: t0.saturating_add(end),
            time_style: style,
            breakers,
        }
    }
}

/// A compact recorded call with its route resolved, for sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) at: u64,
    pub(crate) latency: u64,
    pub(crate) class: u32,
    pub(crate) result: u16,
}

/// Replays the calls in `data` (the contents of `file`) through every breaker of
/// `policies`.
pub fn replay(
    policies: &Policies,
    file: &str,
    data: &[u8],
    options: &ReplayOptions,
) -> Result<ReplayReport, InputError> {
    let mut engine = Engine::new(
        policies,
        None,
        &BreakerOverrides::default(),
        None,
        options,
        None,
    )?;
    let format = options.format.unwrap_or_else(|| Format::detect(file, data));
    // Two stages on two threads: this one replays while another reads and resolves the
    // next batch of calls.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(4);
    let style = std::thread::scope(|scope| {
        let reader = scope.spawn(move || read_batches(policies, file, data, format, &tx));
        for batch in rx {
            engine.resolver.classes.extend(batch.classes);
            for (c, &line) in batch.calls.iter().zip(&batch.lines) {
                engine.feed_class(c.at, line, c.class, c.result, c.latency);
            }
        }
        reader
            .join()
            .unwrap_or_else(|_| Err(InputError::in_file(file, "reading the calls failed")))
    })?;
    if engine.calls == 0 {
        return Err(InputError::in_file(file, "no calls in the file"));
    }
    Ok(engine.finish(file, style))
}

/// Calls read and resolved, with the classes first seen among them and each call's line.
struct Batch {
    classes: Vec<Class>,
    calls: Vec<Resolved>,
    lines: Vec<u32>,
}

const BATCH: usize = 8192;

/// Reads `data` into batches of resolved calls, sent to `tx`; returns how the file writes
/// time.
fn read_batches(
    policies: &Policies,
    file: &str,
    data: &[u8],
    format: Format,
    tx: &std::sync::mpsc::SyncSender<Batch>,
) -> Result<TimeStyle, InputError> {
    let mut resolver = Resolver::new(policies, None, None);
    let mut reader = CallReader::new(file, data, format);
    let mut calls = Vec::with_capacity(BATCH);
    let mut lines = Vec::with_capacity(BATCH);
    let mut sent_classes = 0;
    let mut send = |resolver: &Resolver<'_>, calls: &mut Vec<Resolved>, lines: &mut Vec<u32>| {
        let batch = Batch {
            classes: resolver.classes[sent_classes..].to_vec(),
            calls: std::mem::replace(calls, Vec::with_capacity(BATCH)),
            lines: std::mem::replace(lines, Vec::with_capacity(BATCH)),
        };
        sent_classes = resolver.classes.len();
        // The replaying side only stops early when it is gone: nothing left to do then.
        tx.send(batch).is_ok()
    };
    while let Some(c) = reader.next_call()? {
        let class = resolver
            .resolve(c.route)
            .map_err(|why| reader.error_at(c.route, why))?;
        calls.push(Resolved {
            at: c.at,
            latency: c.latency,
            class,
            result: c.result,
        });
        lines.push(reader.line());
        if calls.len() == BATCH && !send(&resolver, &mut calls, &mut lines) {
            return Ok(reader.time_style());
        }
    }
    if !calls.is_empty() {
        send(&resolver, &mut calls, &mut lines);
    }
    Ok(reader.time_style())
}

fn describe_breaker(
    c: &CircuitBreakerConfig,
    p: &PolicySpec,
    slow_override: Option<Duration>,
) -> String {
    let window = match c.window() {
        WindowConfig::Count { size } => format!("last {size} calls"),
        WindowConfig::Time { duration, .. } => format!("last {}", format_duration(duration)),
        other => format!("{other:?}"),
    };
    let slow = match slow_override {
        Some(d) => format_duration(d),
        None => {
            let mut t: Vec<String> = p
                .routes()
                .iter()
                .filter_map(|(_, _, r)| r.slow_call_threshold())
                .map(format_duration)
                .collect();
            t.dedup();
            if t.is_empty() {
                "never".into()
            } else {
                t.join("/")
            }
        }
    };
    format!(
        "window {window}, minimum_calls {}, failure ≥ {} %, slow ≥ {} % (slow at {slow}), open_wait {} + ≤{} jitter, {} probes",
        c.minimum_calls(),
        c.failure_rate_threshold(),
        c.slow_call_rate_threshold(),
        format_duration(c.open_wait()),
        format_duration(c.open_wait_jitter()),
        c.permitted_probes()
    )
}

/// A timestamp the way the calls file writes them.
pub fn format_time(ns: u64, style: TimeStyle) -> String {
    match style {
        TimeStyle::Rfc3339 => calls::format_rfc3339(ns),
        TimeStyle::Seconds => {
            format!(
                "{}.{:03}",
                ns / 1_000_000_000,
                (ns % 1_000_000_000) / 1_000_000
            )
        }
    }
}

/// A count with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0 %".into()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

/// The report as text: per breaker, what it did and each transition (at most
/// `max_events` per breaker).
pub fn render_report(r: &ReplayReport, max_events: usize) -> String {
    let mut s = String::new();
    let span = Duration::from_nanos(r.end.saturating_sub(r.start));
    let _ = writeln!(
        s,
        "{} calls from {} to {} ({})",
        thousands(r.calls),
        format_time(r.start, r.time_style),
        format_time(r.end, r.time_style),
        format_duration(Duration::from_millis(span.as_millis() as u64))
    );
    if r.unprotected > 0 {
        let _ = writeln!(
            s,
            "{} calls on routes whose policy has no breaker",
            thousands(r.unprotected)
        );
    }
    for b in &r.breakers {
        let st = &b.stats;
        let total = st.time_closed + st.time_open + st.time_half_open;
        let _ = writeln!(s);
        let _ = writeln!(s, "breaker {:?}: {}", b.name, b.settings);
        let _ = writeln!(
            s,
            "  calls {}   admitted {}   rejected {} ({})   of the rejected, {} would have failed and {} would have succeeded",
            thousands(st.calls),
            thousands(st.admitted),
            thousands(st.rejected),
            pct(st.rejected, st.calls),
            thousands(st.rejected_failures),
            thousands(st.rejected_successes)
        );
        let _ = writeln!(
            s,
            "  opened {} time{}   flapping {}   time open {} ({})   half-open {}",
            st.openings,
            if st.openings == 1 { "" } else { "s" },
            st.flaps,
            format_duration(Duration::from_millis(st.time_open / 1_000_000)),
            pct(st.time_open, total),
            format_duration(Duration::from_millis(st.time_half_open / 1_000_000)),
        );
        if b.transitions.is_empty() {
            let _ = writeln!(s, "  never opened");
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<26} {:>9} {:<22} {:<20} window",
            "when", "line", "transition", "reason"
        );
        for t in b.transitions.iter().take(max_events) {
            let _ = writeln!(s, "  {}", transition_line(t, r.time_style));
        }
        if b.transitions.len() > max_events {
            let _ = writeln!(
                s,
                "  ... {} more transitions (--max-events, or --json for all)",
                b.transitions.len() - max_events
            );
        }
    }
    s
}

fn transition_line(t: &TransitionRecord, style: TimeStyle) -> String {
    let mut line = format!(
        "{:<26} {:>9} {:<22} {:<20} {} calls, {} failed ({:.1} %), {} slow ({:.1} %)",
        format_time(t.at, style),
        t.line,
        format!("{} → {}", t.from, t.to),
        t.reason,
        t.calls,
        t.failures,
        t.failure_rate,
        t.slow,
        t.slow_rate
    );
    if let Some(ms) = t.open_ms {
        let _ = write!(
            line,
            "; open {}",
            format_duration(Duration::from_millis(ms))
        );
        if let Some(j) = t.jitter_ms {
            let _ = write!(
                line,
                " (jitter {})",
                format_duration(Duration::from_millis(j))
            );
        }
    }
    line
}

/// Whether a reason is a trip from CLOSED.
pub fn is_trip(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::FailureRate | Reason::SlowCallRate | Reason::ConsecutiveFailures
    )
}

/// Window totals as text.
pub fn window_text(w: &WindowTotals) -> String {
    format!(
        "{} calls, {} failed ({:.1} %), {} slow ({:.1} %)",
        w.calls,
        w.failures,
        w.failure_rate(),
        w.slow,
        w.slow_rate()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_policy_file;
    use crate::input::SourceFile;

    fn policies(text: &str) -> Policies {
        load_policy_file(&SourceFile::new("p.toml", text)).unwrap()
    }

    const POLICY: &str = r#"
[policies.api.default_route]
slow_call_duration = "100ms"
[policies.api.routes."GET /a"]
slow_call_duration = "100ms"
[policies.api.breaker]
count_window = 10
minimum_calls = 4
failure_rate_threshold = 50
slow_call_rate_threshold = 100
open_wait = "10s"
open_wait_jitter = "0s"
permitted_probes = 2
"#;

    #[test]
    fn completions_are_recorded_at_timestamp_plus_latency() {
        let p = policies(POLICY);
        // Four failures start at t=0..3 but take 10 s; four fast successes at t=4..7 land
        // first. The window then holds 4 successes (no trip), then the failures arrive
        // at 10..13 s: the 4th failure brings 4/8 = 50 % → trip at 13 s.
        let mut csv = String::new();
        for i in 0..4 {
            csv += &format!("{i},GET /a,503,10s\n");
        }
        for i in 4..8 {
            csv += &format!("{i},GET /a,200,1ms\n");
        }
        let r = replay(&p, "c.csv", csv.as_bytes(), &ReplayOptions::default()).unwrap();
        let b = &r.breakers[0];
        assert_eq!(b.transitions.len(), 1);
        let t = &b.transitions[0];
        assert_eq!((t.from, t.to, t.reason), ("closed", "open", "failure_rate"));
        assert_eq!(t.at, 13_000_000_000);
        assert_eq!((t.calls, t.failures), (8, 4));
        assert_eq!(b.stats.openings, 1);
        assert_eq!(b.stats.time_open, 0, "ends at the opening");
    }

    #[test]
    fn rejections_probes_and_recovery() {
        let p = policies(POLICY);
        let mut csv = String::new();
        // Trip at t=3 (4 failures of 4).
        for i in 0..4 {
            csv += &format!("{i},GET /a,503,0\n");
        }
        // Rejected while open: two that would have failed, one success.
        csv += "5,GET /a,503,0\n6,GET /a,503,0\n7,GET /a,200,0\n";
        // At 13 s the wait is over: two probes succeed → closed at 13.09 s; the call at
        // 13.05 s finds both probes out and is rejected.
        csv += "13,GET /a,200,90ms\n13.01,GET /a,200,80ms\n13.05,GET /a,200,0\n";
        let r = replay(&p, "c.csv", csv.as_bytes(), &ReplayOptions::default()).unwrap();
        let b = &r.breakers[0];
        let moves: Vec<(u64, &str, &str)> = b
            .transitions
            .iter()
            .map(|t| (t.at / 1_000_000, t.from, t.to))
            .collect();
        assert_eq!(
            moves,
            [
                (3_000, "closed", "open"),
                (13_000, "open", "half_open"),
                (13_090, "half_open", "closed"),
            ]
        );
        assert_eq!(b.transitions[0].open_ms, Some(10_000));
        assert_eq!(
            b.stats.rejected, 4,
            "3 while open, 1 while both probes are out"
        );
        assert_eq!(b.stats.rejected_failures, 2);
        assert_eq!(b.stats.rejected_successes, 2);
        assert_eq!(b.stats.time_open, 10_000_000_000);
        assert_eq!(b.stats.time_half_open, 90_000_000);

        // A slow probe (at or above 100 ms) fails: the breaker re-opens when it completes.
        let mut csv = String::new();
        for i in 0..4 {
            csv += &format!("{i},GET /a,503,0\n");
        }
        csv += "13,GET /a,200,500ms\n";
        let r = replay(&p, "c.csv", csv.as_bytes(), &ReplayOptions::default()).unwrap();
        let last = r.breakers[0].transitions.last().unwrap();
        assert_eq!(
            (last.at, last.from, last.to, last.reason),
            (13_500_000_000, "half_open", "open", "probe_failed")
        );
    }
}
