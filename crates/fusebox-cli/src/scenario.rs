//! Drill scenarios: how the flaky dependency behaves over time, what traffic the client
//! sends, which policy protects it, and what the breaker is expected to do.
//!
//! A scenario is a TOML file. The built-in ones ([`BUILTIN`], `fusebox drill --list`,
//! `fusebox drill --show NAME` prints one to start from) cover the classic drills; users
//! write their own in the same format:
//!
//! ```toml
//! name = "brownout"
//! description = "40 % 503s and the rest very slow, then recovery"
//! seed = 7                       # the dependency's dice and the breaker's jitter
//!
//! [traffic]
//! rate = 100                     # calls started per second (open loop)
//! concurrency = 200              # most calls in flight; past it a call is skipped
//! method = "GET"
//! path = "/orders/42"
//!
//! [policy.default_route]         # the client's policy: the keys of a policy file's
//! slow_call_duration = "500ms"   # [policies.NAME] table (see `fusebox check`)
//! [policy.breaker]
//! count_window = 50
//! minimum_calls = 20
//! failure_rate_threshold = 50
//! slow_call_rate_threshold = 50
//! open_wait = "2s"
//! [policy.timeout]
//! default_timeout = "2s"
//!
//! [[phases]]
//! name = "healthy"
//! duration = "4s"
//! status = 200
//! latency = { p50 = "20ms", p99 = "60ms" }    # log-normal through these percentiles
//!
//! [[phases]]
//! name = "brownout"
//! duration = "8s"
//! responses = [                               # a mix, by weight
//!   { weight = 40, status = 503, latency = "5ms" },
//!   { weight = 60, status = 200, latency = { min = "800ms", max = "1200ms" } },
//! ]
//!
//! [[phases]]
//! name = "recovery"
//! duration = "6s"
//! ramp = true                    # the share of calls behaving like this phase grows
//! status = 200                   # from 0 to 100 % over it; the rest behave like the
//! latency = "20ms"               # phase before: a gradual recovery
//!
//! [expect]                       # checked at the end; any failed check exits 1
//! opens = true
//! first_open_in = "brownout"
//! closed_at_end = true
//! max_half_open_calls = 3
//! ```
//!
//! Latency is a fixed duration (`"20ms"`), uniform (`{ min, max }`) or log-normal through
//! two percentiles (`{ p50, p99 }`). A response is a `status` or `reset = true` (the
//! connection is closed without an answer, after the latency).
//!
//! Expectations: `opens` (whether the breaker opens at all), `open_reason` (the first
//! opening's reason, one of a list), `first_open_in` (the phase in which it first opens),
//! `no_open_in` (phases in which it must not open), `closed_at_end`,
//! `max_half_open_calls` (no half-open period lets more calls through), `half_open_calls`
//! (every half-open period decided by its probes let exactly this many through),
//! `min_calls_to_open` / `max_calls_to_open` (calls the breaker admitted from the start
//! of `first_open_in` until it opened) and `max_dependency_in_flight` (the most requests
//! the dependency handled at once: no stampede). With several replicas, each replica's
//! breaker is checked, and `max_dependency_in_flight` bounds each replica's share (the
//! dependency may see that many from every replica). When the replicas share one breaker
//! on a store (`--store`), a half-open period is the fleet's: its calls are every
//! replica's probes in that period's epoch, and `min_calls_to_open` counts the calls every
//! replica admitted (one window cannot open on fewer, whichever replicas made them).
//!
//! Partial failure. `traffic.keys = N` spreads the calls over `N` keys (`key-00`,
//! `key-01`, …, one per call in turn), sent in the request header the policy's breaker is
//! keyed by (`breaker.key = "header"`, `key_header`); the dependency names each answer's
//! key back in the same header. `traffic.endpoints = N` runs the dependency as `N`
//! servers and the client as tower's balancer over them with a breaker per endpoint
//! (`fusebox::pool`), under the ejection rules of a `[pool]` table
//! (`max_ejection_percent`, `panic_threshold`, `endpoint_capacity`). In either, a phase
//! with `affects = K` applies to the first `K` keys or endpoints only; the others behave
//! as in the phase before. `[dependency]` bounds what the dependency (each endpoint)
//! takes: `capacity` requests at once, the rest waiting in line, and at most `queue`
//! waiting, the rest answered 503 at once. Their expectations: `affected_open` (every
//! affected key's breaker opens, or every affected endpoint trips), `unaffected_open`,
//! `max_unaffected_rejected` (calls for unaffected keys refused by a breaker),
//! `min_ok_percent` / `max_ok_percent` (of the calls started in the phase
//! `ok_percent_in`, answered 1xx–4xx) and, for a pool, `max_ejected` / `min_ejected` (the
//! most endpoints out at once). A keyed drill's dependency-wide breaker is the one
//! `opens` and the other expectations above judge; a pool has none, and refuses them.
//!
//! Reading a scenario reports every problem at once, each at its path and position, as
//! policy files are checked ([`fusebox::config::check`]): unknown keys (with the nearest
//! known key), values of the wrong type or shape, values out of range, settings that do
//! not fit together.

use crate::config::{PolicySpec, locate_problems, policy_from_table, split_path, toml_span};
use crate::input::{InputError, SourceFile};
use fusebox::KeyBy;
use fusebox::config::check::{self, Field, Kind, Node, check_table};
use fusebox_classify::Validator;
use fusebox_classify::section::format_duration;
use std::fmt;
use std::time::Duration;

/// The built-in scenarios: name, TOML. The first is the default.
pub const BUILTIN: [(&str, &str); 8] = [
    ("brownout", include_str!("../scenarios/brownout.toml")),
    (
        "latency-injection",
        include_str!("../scenarios/latency-injection.toml"),
    ),
    (
        "bad-requests",
        include_str!("../scenarios/bad-requests.toml"),
    ),
    ("unavailable", include_str!("../scenarios/unavailable.toml")),
    (
        "gradual-recovery",
        include_str!("../scenarios/gradual-recovery.toml"),
    ),
    ("hot-shard", include_str!("../scenarios/hot-shard.toml")),
    (
        "ejection-cascade",
        include_str!("../scenarios/ejection-cascade.toml"),
    ),
    (
        "ejection-cascade-unguarded",
        include_str!("../scenarios/ejection-cascade-unguarded.toml"),
    ),
];

/// The built-in scenario's text, by name.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// How long one call takes at the dependency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// Always this long.
    Fixed(Duration),
    /// Uniform between the two.
    Uniform(Duration, Duration),
    /// Log-normal with this median and 99th percentile.
    LogNormal {
        /// The median.
        p50: Duration,
        /// The 99th percentile.
        p99: Duration,
    },
}

impl Latency {
    /// Draws a latency; `u1`, `u2` are uniform in [0, 1).
    pub fn sample(&self, u1: f64, u2: f64) -> Duration {
        match *self {
            Latency::Fixed(d) => d,
            Latency::Uniform(a, b) => a + (b - a).mul_f64(u1),
            Latency::LogNormal { p50, p99 } => {
                // Box–Muller; σ from the 99th percentile (z = 2.326).
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                let m = p50.as_secs_f64().max(1e-6);
                let sigma = (p99.as_secs_f64().max(m) / m).ln() / 2.326;
                let x = m * (sigma * z).exp();
                // Cap the far tail so one draw cannot stall a short drill.
                Duration::from_secs_f64(x.min(p99.as_secs_f64() * 4.0).max(0.0))
            }
        }
    }

    fn describe(&self) -> String {
        match *self {
            Latency::Fixed(d) => format_duration(d),
            Latency::Uniform(a, b) => format!("{}–{}", format_duration(a), format_duration(b)),
            Latency::LogNormal { p50, p99 } => {
                format!("p50 {} p99 {}", format_duration(p50), format_duration(p99))
            }
        }
    }
}

/// What the dependency does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reply {
    /// Answers with this status.
    Status(u16),
    /// Closes the connection without answering.
    Reset,
}

/// One kind of response in a phase's mix.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseSpec {
    /// Relative weight.
    pub weight: u32,
    /// The reply.
    pub reply: Reply,
    /// Its latency.
    pub latency: Latency,
}

/// A stretch of time with one behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// The name (in output and expectations).
    pub name: String,
    /// How long.
    pub duration: Duration,
    /// Whether the share of calls following this phase grows from 0 to 100 % (the rest
    /// follow the phase before).
    pub ramp: bool,
    /// With keys or endpoints: only the first this many follow this phase; the others
    /// behave as in the phase before (`None`: every one).
    pub affects: Option<u32>,
    /// The response mix.
    pub responses: Vec<ResponseSpec>,
}

impl Phase {
    /// Picks a response by weight; `u` is uniform in [0, 1).
    pub fn pick(&self, u: f64) -> &ResponseSpec {
        let total: u32 = self.responses.iter().map(|r| r.weight).sum();
        let mut x = (u * f64::from(total)) as u32;
        for r in &self.responses {
            if x < r.weight {
                return r;
            }
            x -= r.weight;
        }
        &self.responses[self.responses.len() - 1]
    }

    /// One line: the mix (`unit`: what `affects` counts, `key` or `endpoint`).
    pub fn describe(&self, unit: &str) -> String {
        let total: u32 = self.responses.iter().map(|r| r.weight).sum();
        let parts: Vec<String> = self
            .responses
            .iter()
            .map(|r| {
                let what = match r.reply {
                    Reply::Status(s) => s.to_string(),
                    Reply::Reset => "reset".into(),
                };
                let share = if self.responses.len() > 1 {
                    format!("{:.0} % ", f64::from(r.weight) * 100.0 / f64::from(total))
                } else {
                    String::new()
                };
                format!("{share}{what} at {}", r.latency.describe())
            })
            .collect();
        let only = match self.affects {
            Some(1) => format!("the first {unit}: "),
            Some(n) => format!("the first {n} {unit}s: "),
            None => String::new(),
        };
        format!(
            "{only}{}{}",
            if self.ramp { "ramping to " } else { "" },
            parts.join(", ")
        )
    }
}

/// The client's traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    /// Calls started per second.
    pub rate: f64,
    /// Most calls in flight at once.
    pub concurrency: usize,
    /// The method.
    pub method: http::Method,
    /// The path (and query).
    pub path: String,
    /// Calls cycle over this many keys (`key-00`, `key-01`, …), sent in the header the
    /// policy's keyed breaker reads (`breaker.key_header`); `None`: no key.
    pub keys: Option<u32>,
    /// The dependency runs as this many endpoints, balanced by the client with a breaker
    /// per endpoint (`fusebox::pool`); `None`: one dependency.
    pub endpoints: Option<u32>,
}

impl Traffic {
    /// The keys or endpoints the calls are spread over (0: neither).
    pub fn parts(&self) -> u32 {
        self.keys.or(self.endpoints).unwrap_or(0)
    }

    /// What [`Phase::affects`] counts: `endpoint` in a pool, else `key`.
    pub fn unit(&self) -> &'static str {
        if self.endpoints.is_some() {
            "endpoint"
        } else {
            "key"
        }
    }
}

/// The name of key `i` of a keyed drill.
pub fn key_name(i: u32) -> String {
    format!("key-{i:02}")
}

/// The index of a key named as [`key_name`] makes them.
pub fn key_index(name: &str) -> Option<u32> {
    name.strip_prefix("key-")?.parse().ok()
}

/// How much the dependency takes at once (each endpoint, in a pool).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Requests handled at once; the rest wait in line (`None`: no limit).
    pub capacity: Option<u32>,
    /// Requests waiting in line at most; past that a request is answered 503 at once
    /// (`None`: the line has no end).
    pub queue: Option<u32>,
}

/// What the breaker is expected to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expect {
    /// Whether it opens at all.
    pub opens: Option<bool>,
    /// The first opening's reason is one of these.
    pub open_reason: Option<Vec<String>>,
    /// It first opens during this phase.
    pub first_open_in: Option<String>,
    /// It does not open during these phases.
    pub no_open_in: Vec<String>,
    /// It is closed when the drill ends.
    pub closed_at_end: Option<bool>,
    /// No half-open period lets more calls through.
    pub max_half_open_calls: Option<u32>,
    /// Every half-open period decided by its probes lets exactly this many through.
    pub half_open_calls: Option<u32>,
    /// Calls admitted from the start of `first_open_in` until the opening, at least.
    pub min_calls_to_open: Option<u64>,
    /// Likewise, at most.
    pub max_calls_to_open: Option<u64>,
    /// The most requests the dependency handles at once.
    pub max_dependency_in_flight: Option<usize>,
    /// Whether every key or endpoint a phase affects has its breaker open at some time.
    pub affected_open: Option<bool>,
    /// Whether any key or endpoint no phase affects has its breaker open at some time.
    pub unaffected_open: Option<bool>,
    /// Calls for keys no phase affects that a breaker refused, at most.
    pub max_unaffected_rejected: Option<u64>,
    /// The phase `min_ok_percent` and `max_ok_percent` measure.
    pub ok_percent_in: Option<String>,
    /// Of the calls started in `ok_percent_in`, at least this percent answered 1xx–4xx.
    pub min_ok_percent: Option<f64>,
    /// Likewise, at most.
    pub max_ok_percent: Option<f64>,
    /// The most endpoints out of the pool at once, at most.
    pub max_ejected: Option<u32>,
    /// Likewise, at least.
    pub min_ejected: Option<u32>,
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// What it drills.
    pub description: String,
    /// Seeds the dependency's randomness and the breaker's jitter.
    pub seed: u64,
    /// The traffic.
    pub traffic: Traffic,
    /// The client's policy.
    pub policy: PolicySpec,
    /// With endpoints: the pool's ejection rules.
    pub pool: Option<fusebox::pool::PoolConfig>,
    /// What the dependency (each endpoint) takes at once.
    pub capacity: Capacity,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// The expectations.
    pub expect: Expect,
}

impl Scenario {
    /// The sum of the phases.
    pub fn duration(&self) -> Duration {
        self.phases.iter().map(|p| p.duration).sum()
    }

    /// The phase at `t` since the start (the last one past the end), and how far into it
    /// (0..1).
    pub fn phase_at(&self, t: Duration) -> (usize, f64) {
        let mut start = Duration::ZERO;
        for (i, p) in self.phases.iter().enumerate() {
            let end = start + p.duration;
            if t < end {
                let f = (t - start).as_secs_f64() / p.duration.as_secs_f64().max(1e-9);
                return (i, f);
            }
            start = end;
        }
        (self.phases.len().saturating_sub(1), 1.0)
    }

    /// When phase `i` starts.
    pub fn phase_start(&self, i: usize) -> Duration {
        self.phases.iter().take(i).map(|p| p.duration).sum()
    }

    /// The phase whose behaviour key or endpoint `part` follows during phase `i`: `i`
    /// itself, unless `i` affects only the first few and `part` is not one of them
    /// (or is `None`); then, likewise, the phase before.
    pub fn phase_for(&self, mut i: usize, part: Option<u32>) -> usize {
        while i > 0
            && self.phases[i]
                .affects
                .is_some_and(|n| part.is_none_or(|p| p >= n))
        {
            i -= 1;
        }
        i
    }

    /// Whether some phase affects key or endpoint `part` (with no phase limited to the
    /// first few, every part is affected by every phase).
    pub fn affected(&self, part: u32) -> bool {
        let limited = self.phases.iter().any(|p| p.affects.is_some());
        !limited
            || self
                .phases
                .iter()
                .any(|p| p.affects.is_some_and(|n| part < n))
    }
}

const U32: Kind = Kind::Uint(u32::MAX as u64);
const U64: Kind = Kind::Uint(u64::MAX);

/// What a scenario file may contain: keys checked, with every problem reported at its
/// path, as policy files are ([`fusebox::config::check`]).
const SCENARIO: &[Field] = &[
    ("name", Kind::Str),
    ("description", Kind::Str),
    ("seed", U64),
    ("traffic", Kind::Table(TRAFFIC)),
    // A policy file's [policies.NAME] table: checked by the policy file's own rules.
    ("policy", Kind::Custom),
    ("phases", Kind::List(PHASE)),
    ("expect", Kind::Table(EXPECT)),
    ("pool", Kind::Table(POOL)),
    ("dependency", Kind::Table(DEPENDENCY)),
];

const POOL: &[Field] = &[
    ("max_ejection_percent", U64),
    ("panic_threshold", U64),
    ("endpoint_capacity", U64),
];

const DEPENDENCY: &[Field] = &[("capacity", U64), ("queue", U64)];

const TRAFFIC: &[Field] = &[
    ("rate", Kind::Float),
    ("concurrency", U64),
    ("method", Kind::Str),
    ("path", Kind::Str),
    ("keys", U64),
    ("endpoints", U64),
];

const PHASE: &[Field] = &[
    ("name", Kind::Str),
    ("duration", Kind::Duration),
    ("ramp", Kind::Bool),
    ("affects", U64),
    ("status", U64),
    ("reset", Kind::Bool),
    // A duration, { min, max } or { p50, p99 }.
    ("latency", Kind::Custom),
    ("responses", Kind::List(RESPONSE)),
];

const RESPONSE: &[Field] = &[
    ("weight", U32),
    ("status", U64),
    ("reset", Kind::Bool),
    ("latency", Kind::Custom),
];

const UNIFORM: &[Field] = &[("min", Kind::Duration), ("max", Kind::Duration)];
const LOG_NORMAL: &[Field] = &[("p50", Kind::Duration), ("p99", Kind::Duration)];
const LATENCY_TABLE: &[Field] = &[
    ("min", Kind::Duration),
    ("max", Kind::Duration),
    ("p50", Kind::Duration),
    ("p99", Kind::Duration),
];

const EXPECT: &[Field] = &[
    ("opens", Kind::Bool),
    // A reason, or a list of them.
    ("open_reason", Kind::Custom),
    ("first_open_in", Kind::Str),
    ("no_open_in", Kind::Strs),
    ("closed_at_end", Kind::Bool),
    ("max_half_open_calls", U32),
    ("half_open_calls", U32),
    ("min_calls_to_open", U64),
    ("max_calls_to_open", U64),
    ("max_dependency_in_flight", U64),
    ("affected_open", Kind::Bool),
    ("unaffected_open", Kind::Bool),
    ("max_unaffected_rejected", U64),
    ("ok_percent_in", Kind::Str),
    ("min_ok_percent", Kind::Float),
    ("max_ok_percent", Kind::Float),
    ("max_ejected", U64),
    ("min_ejected", U64),
];

const REASONS: [&str; 3] = ["failure_rate", "slow_call_rate", "consecutive_failures"];

/// The longest latency a response may have.
const MAX_LATENCY: Duration = Duration::from_secs(600);

/// A scenario's problems, each at its place in the file.
struct Problems<'s> {
    src: &'s SourceFile,
    found: Vec<InputError>,
}

impl Problems<'_> {
    /// `path: rule`, at the value `path` names (at the table it would be in, if it is
    /// missing; at the file, if there is none).
    fn at(&mut self, path: &str, rule: impl fmt::Display) {
        self.place(path, format!("{path}: {rule}"));
    }

    /// `reason`, at the value `place` names.
    fn place(&mut self, place: &str, reason: String) {
        let error = match toml_span(self.src.text(), &split_path(place), false) {
            Some(span) => self.src.error_at(span, reason),
            None => self.src.error(reason),
        };
        self.found.push(error);
    }

    /// `reason`, about the whole file.
    fn file(&mut self, reason: impl Into<String>) {
        self.found.push(self.src.error(reason));
    }

    /// Checks the table `node` at `path` against `fields`: every unknown key (with the
    /// nearest known one) and every value of the wrong type.
    fn check(&mut self, node: &Node, path: &str, fields: &[Field]) {
        let mut v = Validator::new();
        check_table(node, path, fields, &mut v);
        if let Err(e) = v.finish(()) {
            self.found.extend(locate_problems(self.src, &e, &[], &[]));
        }
    }
}

/// A checked value of `node` read by `read`: `None` when it is absent, or of the wrong
/// type (a problem the check of its table reported).
fn read<T>(node: Option<&Node>, read: impl Fn(&Node) -> Result<T, String>) -> Option<T> {
    node.and_then(|n| read(n).ok())
}

/// Reads and validates a scenario, reporting every problem, each with its path and
/// position: unknown keys (with the nearest known key), values of the wrong type, values
/// out of range, and settings that do not fit together. `policy` replaces the
/// scenario's own `[policy]` (from `--config`).
pub fn load_scenario(
    src: &SourceFile,
    policy: Option<PolicySpec>,
) -> Result<Scenario, Vec<InputError>> {
    let root: Node = toml::from_str(src.text()).map_err(|e| vec![src.toml_error(&e)])?;
    let mut p = Problems {
        src,
        found: Vec::new(),
    };
    p.check(&root, "", SCENARIO);
    let name = read(root.get("name"), check::string).unwrap_or_else(|| {
        std::path::Path::new(src.name())
            .file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
    });
    let traffic = read_traffic(&mut p, root.get("traffic"));

    // Policy.
    let policy = match policy {
        Some(policy) => Some(policy),
        None => match root.get("policy") {
            Some(Node::Map(_)) => {
                let table = toml::from_str::<toml::Table>(src.text())
                    .ok()
                    .and_then(|mut t| t.remove("policy"))
                    .and_then(|v| match v {
                        toml::Value::Table(t) => Some(t),
                        _ => None,
                    })
                    .unwrap_or_default();
                match policy_from_table(src, &["policy"], &name, &table) {
                    Ok(policy) => Some(policy),
                    Err(e) => {
                        p.found.extend(e);
                        None
                    }
                }
            }
            Some(other) => {
                p.at(
                    "policy",
                    format!(
                        "must be a table (the keys of a policy file's [policies.NAME]), got {}",
                        other.kind()
                    ),
                );
                None
            }
            None => {
                p.file("no [policy]: add one (the keys of a policy file's [policies.NAME]) or pass --config");
                None
            }
        },
    };
    if let Some(policy) = &policy
        && policy.breaker().is_none()
    {
        p.file(format!(
            "policy {:?} has no breaker: a drill exercises one (add [policy.breaker])",
            policy.name
        ));
    }

    let phases = read_phases(&mut p, root.get("phases"));
    let expect = match root.get("expect") {
        Some(e @ Node::Map(_)) => read_expect(&mut p, e, &phases),
        _ => Expect::default(),
    };
    if let Some(traffic) = &traffic {
        check_parts(&mut p, traffic, policy.as_ref(), &phases, &root);
    }
    let pool = read_pool(&mut p, root.get("pool"), traffic.as_ref());
    let capacity = read_capacity(root.get("dependency"));

    match (policy, traffic) {
        (Some(policy), Some(traffic)) if p.found.is_empty() => Ok(Scenario {
            name,
            description: read(root.get("description"), check::string).unwrap_or_default(),
            seed: read(root.get("seed"), |n| check::uint(n, u64::MAX)).unwrap_or(1),
            traffic,
            policy,
            pool,
            capacity,
            phases,
            expect,
        }),
        _ => Err(p.found),
    }
}

/// The header a keyed breaker reads the key from, if `policy` keys its breaker by one.
pub fn key_header(policy: &PolicySpec) -> Option<http::HeaderName> {
    let mut key = policy.policy().breaker_key()?;
    loop {
        match key {
            KeyBy::Header(name) => return Some(name.clone()),
            KeyBy::Answered(inner, _) => key = inner,
            _ => return None,
        }
    }
}

/// The settings of keyed and pooled drills, checked against each other: keys need a
/// breaker keyed by a header; `affects` needs keys or endpoints; the expectations about
/// keys, endpoints and the pool need them; a pool has no breaker of the dependency's.
fn check_parts(
    p: &mut Problems<'_>,
    traffic: &Traffic,
    policy: Option<&PolicySpec>,
    phases: &[Phase],
    root: &Node,
) {
    if let Some(keys) = traffic.keys {
        if !(1..=1000).contains(&keys) {
            p.at(
                "traffic.keys",
                format!("must be within 1..=1000, got {keys}"),
            );
        }
        if traffic.endpoints.is_some() {
            p.at(
                "traffic.endpoints",
                "a drill spreads its calls over keys or over endpoints, not both",
            );
        }
        if let Some(policy) = policy
            && key_header(policy).is_none()
        {
            p.at(
                "traffic.keys",
                "needs a breaker keyed by a request header: set policy.breaker.key = \"header\" and key_header",
            );
        }
    }
    if let Some(n) = traffic.endpoints
        && !(2..=64).contains(&n)
    {
        p.at(
            "traffic.endpoints",
            format!("must be within 2..=64, got {n}"),
        );
    }
    if traffic.endpoints.is_some()
        && let Some(policy) = policy
        && policy.policy().breaker_key().is_some()
    {
        p.at(
            "policy.breaker.key",
            "a pool keys its breakers by endpoint: leave the key out",
        );
    }
    let parts = traffic.parts();
    for (i, phase) in phases.iter().enumerate() {
        let Some(n) = phase.affects else { continue };
        let path = format!("phases[{i}].affects");
        if parts == 0 {
            p.at(&path, "needs traffic.keys or traffic.endpoints");
        } else if n == 0 || n > parts {
            p.at(&path, format!("must be within 1..={parts}, got {n}"));
        }
        if i == 0 {
            p.at(
                &path,
                "the first phase has no phase before it for the others to follow",
            );
        }
    }
    let Some(expect) = root.get("expect") else {
        return;
    };
    let has = |key: &str| expect.get(key).is_some();
    for key in ["affected_open", "unaffected_open"] {
        if has(key) && parts == 0 {
            p.at(
                &format!("expect.{key}"),
                "needs traffic.keys or traffic.endpoints",
            );
        }
    }
    if has("max_unaffected_rejected") && traffic.keys.is_none() {
        p.at("expect.max_unaffected_rejected", "needs traffic.keys");
    }
    for key in ["max_ejected", "min_ejected"] {
        if has(key) && traffic.endpoints.is_none() {
            p.at(&format!("expect.{key}"), "needs traffic.endpoints");
        }
    }
    if traffic.endpoints.is_some() {
        for key in [
            "opens",
            "open_reason",
            "first_open_in",
            "no_open_in",
            "closed_at_end",
            "max_half_open_calls",
            "half_open_calls",
            "min_calls_to_open",
            "max_calls_to_open",
        ] {
            if has(key) {
                p.at(
                    &format!("expect.{key}"),
                    "a pool has a breaker per endpoint and none for the dependency: use affected_open, unaffected_open, max_ejected or min_ejected",
                );
            }
        }
    }
}

/// `[pool]`, with endpoints.
fn read_pool(
    p: &mut Problems<'_>,
    node: Option<&Node>,
    traffic: Option<&Traffic>,
) -> Option<fusebox::pool::PoolConfig> {
    let endpoints = traffic.and_then(|t| t.endpoints);
    if node.is_some() && endpoints.is_none() {
        p.at("pool", "needs traffic.endpoints");
        return None;
    }
    endpoints?;
    let mut builder = fusebox::pool::PoolConfig::builder();
    if let Some(node) = node {
        let percent = |key: &str| read(node.get(key), |n| check::uint(n, u64::MAX));
        for key in ["max_ejection_percent", "panic_threshold"] {
            if let Some(v) = percent(key) {
                let v = u8::try_from(v).unwrap_or(u8::MAX);
                builder = if key == "panic_threshold" {
                    builder.panic_threshold(v)
                } else {
                    builder.max_ejection_percent(v)
                };
            }
        }
        if let Some(c) = percent("endpoint_capacity") {
            builder = builder.endpoint_capacity(u32::try_from(c).unwrap_or(u32::MAX));
        }
    }
    match builder.build() {
        Ok(config) => Some(config),
        Err(e) => {
            for problem in e.problems() {
                let path = format!("pool.{}", problem.path());
                p.at(&path, problem.rule());
            }
            None
        }
    }
}

/// `[dependency]`: what the dependency takes at once.
fn read_capacity(node: Option<&Node>) -> Capacity {
    let count = |key: &str| {
        read(node.and_then(|n| n.get(key)), |n| check::uint(n, u64::MAX))
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    Capacity {
        capacity: count("capacity").map(|c| c.max(1)),
        queue: count("queue"),
    }
}

/// `[traffic]`: `None` if it is missing or wrong (reported).
fn read_traffic(p: &mut Problems<'_>, node: Option<&Node>) -> Option<Traffic> {
    let Some(t) = node else {
        p.file("no [traffic]: add one with the rate of calls, e.g. rate = 100 (calls per second)");
        return None;
    };
    // Not a table: reported by the check.
    t.as_map()?;
    let rate = match t.get("rate") {
        None => {
            p.at("traffic.rate", "is required: calls started per second");
            None
        }
        Some(n) => check::float(n).ok(),
    };
    if let Some(rate) = rate
        && !(rate.is_finite() && rate > 0.0 && rate <= 20_000.0)
    {
        p.at(
            "traffic.rate",
            format!("must be within 0 (exclusive)..=20000 calls per second, got {rate}"),
        );
    }
    let concurrency = read(t.get("concurrency"), |n| check::uint(n, u64::MAX));
    if let Some(c) = concurrency
        && !(1..=10_000).contains(&c)
    {
        p.at(
            "traffic.concurrency",
            format!("must be within 1..=10000, got {c}"),
        );
    }
    let method = match read(t.get("method"), check::string) {
        Some(m) => match http::Method::from_bytes(m.as_bytes()) {
            Ok(m) => Some(m),
            Err(_) => {
                p.at("traffic.method", format!("{m:?} is not an HTTP method"));
                None
            }
        },
        None => Some(http::Method::GET),
    };
    let path = read(t.get("path"), check::string).unwrap_or_else(|| "/".to_owned());
    if !path.starts_with('/') || path.parse::<http::Uri>().is_err() {
        p.at(
            "traffic.path",
            format!("{path:?} must be a path starting with /"),
        );
    }
    let count = |key: &str| {
        read(t.get(key), |n| check::uint(n, u64::MAX)).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    Some(Traffic {
        rate: rate?,
        concurrency: usize::try_from(concurrency.unwrap_or(64)).unwrap_or(usize::MAX),
        method: method?,
        path,
        keys: count("keys"),
        endpoints: count("endpoints"),
    })
}

/// `[[phases]]`, each as far as it is right (the wrong parts are reported).
fn read_phases(p: &mut Problems<'_>, node: Option<&Node>) -> Vec<Phase> {
    let mut phases: Vec<Phase> = Vec::new();
    let items = match node {
        Some(Node::List(items)) => items,
        // Not a list: reported by the check.
        Some(_) => return phases,
        None => {
            p.file("no [[phases]]: add at least one, e.g. [[phases]] name = \"healthy\" duration = \"5s\" status = 200");
            return phases;
        }
    };
    if items.is_empty() {
        p.at("phases", "at least one phase is needed");
    }
    for (i, ph) in items.iter().enumerate() {
        let path = format!("phases[{i}]");
        // Not a table: reported by the check.
        if ph.as_map().is_none() {
            continue;
        }
        let name = match ph.get("name") {
            None => {
                p.at(&format!("{path}.name"), "is required");
                String::new()
            }
            Some(n) => check::string(n).unwrap_or_default(),
        };
        let duration = match ph.get("duration") {
            None => {
                p.at(&format!("{path}.duration"), "is required, e.g. \"5s\"");
                Duration::ZERO
            }
            Some(d) => match check::duration(d) {
                Ok(d) if d.is_zero() => {
                    p.at(&format!("{path}.duration"), "must be greater than zero");
                    d
                }
                Ok(d) => d,
                Err(_) => Duration::ZERO,
            },
        };
        // A name of the wrong type was reported by the check, and is no second name.
        let named = ph.get("name").is_some_and(|n| check::string(n).is_ok());
        if named && phases.iter().any(|q| q.name == name) {
            p.at(&format!("{path}.name"), format!("{name:?} is used twice"));
        }
        let ramp = read(ph.get("ramp"), check::boolean).unwrap_or(false);
        if ramp && i == 0 {
            p.place(
                &path,
                format!("{path}.ramp: the first phase has no phase before it to ramp from"),
            );
        }
        let mut responses = Vec::new();
        let single = ph.get("status").is_some() || ph.get("reset").is_some();
        match (ph.get("responses"), single) {
            (Some(_), true) => p.place(
                &path,
                format!("{path}: give either status/reset (and latency) or responses, not both"),
            ),
            (None, false) => p.place(
                &path,
                format!("{path}: say what the dependency does: status = 200, reset = true, or responses = [...]"),
            ),
            (None, true) => responses.extend(response(p, &path, 1, ph)),
            (Some(Node::List(list)), false) => {
                if list.is_empty() {
                    p.at(&format!("{path}.responses"), "empty");
                }
                if ph.get("latency").is_some() {
                    p.place(
                        &path,
                        format!(
                            "{path}.latency: with responses, each response has its own latency"
                        ),
                    );
                }
                let mut total: u32 = 0;
                for (j, r) in list.iter().enumerate() {
                    let rpath = format!("{path}.responses[{j}]");
                    // Not a table: reported by the check.
                    if r.as_map().is_none() {
                        continue;
                    }
                    let weight = read(r.get("weight"), |n| check::uint(n, u64::from(u32::MAX)))
                        .map_or(1, |w| u32::try_from(w).unwrap_or(u32::MAX));
                    if weight == 0 {
                        p.place(&rpath, format!("{rpath}.weight: must be at least 1"));
                    }
                    match total.checked_add(weight) {
                        Some(t) => total = t,
                        None => {
                            p.place(
                                &rpath,
                                format!(
                                    "{rpath}.weight: the weights of {path}.responses add up to more than {}",
                                    u32::MAX
                                ),
                            );
                            total = u32::MAX;
                        }
                    }
                    responses.extend(response(p, &rpath, weight, r));
                }
            }
            // Not a list: reported by the check.
            (Some(_), false) => {}
        }
        let affects = read(ph.get("affects"), |n| check::uint(n, u64::MAX))
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        phases.push(Phase {
            name,
            duration,
            ramp,
            affects,
            responses,
        });
    }
    let total = phases
        .iter()
        .fold(Duration::ZERO, |t, ph| t.saturating_add(ph.duration));
    if total > Duration::from_secs(3600) {
        p.at(
            "phases",
            format!(
                "{} in all; a drill lasts at most an hour",
                format_duration(total)
            ),
        );
    }
    phases
}

/// `[expect]`; phase names are checked against `phases`.
fn read_expect(p: &mut Problems<'_>, e: &Node, phases: &[Phase]) -> Expect {
    let mut expect = Expect::default();
    let phase_named = |p: &mut Problems<'_>, name: &str, place: &str, field: &str| {
        if !phases.iter().any(|ph| ph.name == name) {
            p.place(
                place,
                format!(
                    "expect.{field}: no phase named {name:?} (phases: {})",
                    phases
                        .iter()
                        .map(|ph| ph.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    };
    if let Some(name) = read(e.get("first_open_in"), check::string) {
        phase_named(p, &name, "expect.first_open_in", "first_open_in");
        expect.first_open_in = Some(name);
    }
    for (j, name) in read(e.get("no_open_in"), check::strings)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        phase_named(p, &name, &format!("expect.no_open_in[{j}]"), "no_open_in");
        expect.no_open_in.push(name);
    }
    if let Some(r) = e.get("open_reason") {
        let list = match r {
            Node::Str(s) => Some(vec![s.clone()]),
            other => check::strings(other).ok(),
        };
        match list {
            Some(list) => {
                for reason in &list {
                    if !REASONS.contains(&reason.as_str()) {
                        p.at(
                            "expect.open_reason",
                            format!(
                                "{reason:?} is not a reason to open (one of: {})",
                                REASONS.join(", ")
                            ),
                        );
                    }
                }
                expect.open_reason = Some(list);
            }
            None => p.at(
                "expect.open_reason",
                format!(
                    "must be a reason or a list of reasons (of: {}), got {}",
                    REASONS.join(", "),
                    r.show()
                ),
            ),
        }
    }
    let u32_of = |key: &str| {
        read(e.get(key), |n| check::uint(n, u64::from(u32::MAX)))
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    expect.opens = read(e.get("opens"), check::boolean);
    expect.closed_at_end = read(e.get("closed_at_end"), check::boolean);
    expect.max_half_open_calls = u32_of("max_half_open_calls");
    expect.half_open_calls = u32_of("half_open_calls");
    expect.min_calls_to_open = read(e.get("min_calls_to_open"), |n| check::uint(n, u64::MAX));
    expect.max_calls_to_open = read(e.get("max_calls_to_open"), |n| check::uint(n, u64::MAX));
    expect.max_dependency_in_flight = read(e.get("max_dependency_in_flight"), |n| {
        check::uint(n, u64::MAX)
    })
    .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    expect.affected_open = read(e.get("affected_open"), check::boolean);
    expect.unaffected_open = read(e.get("unaffected_open"), check::boolean);
    expect.max_unaffected_rejected = read(e.get("max_unaffected_rejected"), |n| {
        check::uint(n, u64::MAX)
    });
    expect.max_ejected = u32_of("max_ejected");
    expect.min_ejected = u32_of("min_ejected");
    if let Some(name) = read(e.get("ok_percent_in"), check::string) {
        phase_named(p, &name, "expect.ok_percent_in", "ok_percent_in");
        expect.ok_percent_in = Some(name);
    }
    for key in ["min_ok_percent", "max_ok_percent"] {
        let Some(v) = read(e.get(key), check::float) else {
            continue;
        };
        if !(0.0..=100.0).contains(&v) {
            p.at(
                &format!("expect.{key}"),
                format!("must be within 0..=100, got {v}"),
            );
        }
        if expect.ok_percent_in.is_none() {
            p.place(
                "expect",
                format!("expect.{key}: measures the phase ok_percent_in names: set it"),
            );
        }
        if key == "min_ok_percent" {
            expect.min_ok_percent = Some(v);
        } else {
            expect.max_ok_percent = Some(v);
        }
    }
    if (e.get("min_calls_to_open").is_some() || e.get("max_calls_to_open").is_some())
        && e.get("first_open_in").is_none()
    {
        p.place(
            "expect",
            "expect: min_calls_to_open / max_calls_to_open count from the start of first_open_in: set it".into(),
        );
    }
    expect
}

/// The response a phase (or an item of its `responses`) at `path` describes; `None`, the
/// problems reported, if it is wrong.
fn response(p: &mut Problems<'_>, path: &str, weight: u32, node: &Node) -> Option<ResponseSpec> {
    let status = node.get("status");
    let reset = read(node.get("reset"), check::boolean);
    let reply = match (status, reset) {
        (Some(s), None | Some(false)) => {
            // Of the wrong type: reported by the check.
            let code = check::uint(s, u64::MAX).ok()?;
            match u16::try_from(code) {
                Ok(code) if (200..=999).contains(&code) => Reply::Status(code),
                _ => {
                    p.at(
                        &format!("{path}.status"),
                        format!("{code} is not a final HTTP status (200..=999)"),
                    );
                    return None;
                }
            }
        }
        (None, Some(true)) => Reply::Reset,
        (Some(_), Some(true)) => {
            p.place(
                path,
                format!("{path}: a response is a status or a reset, not both"),
            );
            return None;
        }
        (None, _) => {
            p.place(path, format!("{path}: needs status = N or reset = true"));
            return None;
        }
    };
    let latency = match node.get("latency") {
        None => Latency::Fixed(Duration::ZERO),
        Some(l) => latency(p, &format!("{path}.latency"), l)?,
    };
    Some(ResponseSpec {
        weight,
        reply,
        latency,
    })
}

/// A latency at `path`: a duration, `{ min, max }` or `{ p50, p99 }`, at most
/// [`MAX_LATENCY`].
fn latency(p: &mut Problems<'_>, path: &str, node: &Node) -> Option<Latency> {
    const SHAPES: &str = "a duration such as \"20ms\", { min, max } or { p50, p99 }";
    let has = |key: &str| node.get(key).is_some();
    // Both keys of a pair: each must be there (a wrong one was reported by the check).
    let pair = |p: &mut Problems<'_>, fields: &[Field]| {
        p.check(node, path, fields);
        let mut one = |key: &str| match node.get(key) {
            None => {
                let other = fields
                    .iter()
                    .map(|f| f.0)
                    .find(|k| *k != key)
                    .unwrap_or(key);
                p.at(
                    &format!("{path}.{key}"),
                    format!("is required with {other}"),
                );
                None
            }
            Some(d) => check::duration(d).ok(),
        };
        let (a, b) = (one(fields[0].0), one(fields[1].0));
        Some((a?, b?))
    };
    let latency = match node {
        Node::Str(_) => match check::duration(node) {
            Ok(d) => Latency::Fixed(d),
            Err(rule) => {
                p.at(
                    path,
                    rule.replacen("a duration such as \"250ms\" or \"30s\"", SHAPES, 1),
                );
                return None;
            }
        },
        Node::Map(_) if has("min") || has("max") => {
            let (min, max) = pair(p, UNIFORM)?;
            if max < min {
                p.at(
                    path,
                    format!(
                        "max ({}) is below min ({})",
                        format_duration(max),
                        format_duration(min)
                    ),
                );
            }
            Latency::Uniform(min, max.max(min))
        }
        Node::Map(_) if has("p50") || has("p99") => {
            let (p50, p99) = pair(p, LOG_NORMAL)?;
            if p99 < p50 || p50.is_zero() {
                p.at(path, "need 0 < p50 <= p99");
            }
            Latency::LogNormal {
                p50,
                p99: p99.max(p50),
            }
        }
        Node::Map(_) => {
            p.check(node, path, LATENCY_TABLE);
            p.at(
                path,
                format!("must be {SHAPES}: a table needs min and max, or p50 and p99"),
            );
            return None;
        }
        other => {
            p.at(path, format!("must be {SHAPES}, got {}", other.show()));
            return None;
        }
    };
    let longest = match latency {
        Latency::Fixed(d) | Latency::Uniform(_, d) | Latency::LogNormal { p99: d, .. } => d,
    };
    if longest > MAX_LATENCY {
        p.at(path, "at most 10 minutes");
    }
    Some(latency)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of scenario `text`, as printed.
    fn problems(name: &str, text: &str) -> Vec<String> {
        match load_scenario(&SourceFile::new(name, text), None) {
            Ok(s) => panic!("{name} loads as {:?}", s.name),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn builtins_are_valid() {
        for (name, text) in BUILTIN {
            let s = load_scenario(&SourceFile::new(name, text), None)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(s.name, name);
            assert!(s.duration() <= Duration::from_secs(40), "{name} is short");
            assert!(s.policy.breaker().is_some());
        }
        assert_eq!(BUILTIN[0].0, "brownout", "the default");
    }

    #[test]
    fn latency_draws() {
        let l = Latency::Uniform(Duration::from_millis(800), Duration::from_millis(1200));
        assert_eq!(l.sample(0.5, 0.0), Duration::from_millis(1000));
        let l = Latency::LogNormal {
            p50: Duration::from_millis(20),
            p99: Duration::from_millis(60),
        };
        // z = 0 at u2 = 0.25: the median.
        let d = l.sample(0.3, 0.25);
        assert!((d.as_secs_f64() - 0.020).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn phases_and_mix() {
        let s = load_scenario(&SourceFile::new("b", BUILTIN[0].1), None).unwrap();
        let (i, f) = s.phase_at(Duration::from_secs(5));
        assert_eq!((s.phases[i].name.as_str(), f > 0.0), ("brownout", true));
        assert_eq!(s.phase_at(Duration::from_secs(3600)).0, s.phases.len() - 1);
        let mix = &s.phases[1];
        assert_eq!(mix.pick(0.1).reply, Reply::Status(503));
        assert_eq!(mix.pick(0.9).reply, Reply::Status(200));
    }

    #[test]
    fn problems_are_located() {
        let text = r#"
[traffic]
rate = -1
path = "orders"
[policy.breaker]
minimum_calls = 0
[[phases]]
name = "a"
duration = "0s"
status = 99
[[phases]]
name = "a"
duration = "1s"
responses = [{ weight = 0, status = 200 }, { latency = "1s" }]
[expect]
first_open_in = "b"
open_reason = "bad_luck"
"#;
        let errors = problems("s.toml", text);
        assert_eq!(
            errors,
            [
                "s.toml:3:8: traffic.rate: must be within 0 (exclusive)..=20000 calls per second, got -1",
                "s.toml:4:8: traffic.path: \"orders\" must be a path starting with /",
                "s.toml:6:17: policy.breaker.minimum_calls: must be at least 1, got 0",
                "s.toml:9:12: phases[0].duration: must be greater than zero",
                "s.toml:10:10: phases[0].status: 99 is not a final HTTP status (200..=999)",
                "s.toml:12:8: phases[1].name: \"a\" is used twice",
                "s.toml:14:14: phases[1].responses[0].weight: must be at least 1",
                "s.toml:14:44: phases[1].responses[1]: needs status = N or reset = true",
                "s.toml:16:17: expect.first_open_in: no phase named \"b\" (phases: a, a)",
                "s.toml:17:15: expect.open_reason: \"bad_luck\" is not a reason to open (one of: failure_rate, slow_call_rate, consecutive_failures)",
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_path_types_and_unknown_keys_too() {
        let text = r#"[traffic]
rate = "fast"
concurrancy = 10

[policy.breaker]
count_window = 10
minimum_calls = 5

[[phases]]
name = "a"
duration = "1s"
status = 200
latency = "quick"

[[phases]]
name = "b"
duration = "1s"
responses = [{ weight = 1, status = 503, latency = { min = "1ms", mx = "2ms" } }, { status = "200" }]

[expect]
opens = "yes"
open_reason = ["failure_rate", 3]
frist_open_in = "b"
"#;
        let errors = problems("s.toml", text);
        assert_eq!(
            errors,
            [
                "s.toml:23:1: expect.frist_open_in: unknown key; did you mean `first_open_in`?",
                "s.toml:21:9: expect.opens: must be true or false, got \"yes\"",
                "s.toml:18:94: phases[1].responses[1].status: must be a whole number, got \"200\"",
                "s.toml:3:1: traffic.concurrancy: unknown key; did you mean `concurrency`?",
                "s.toml:2:8: traffic.rate: must be a number, got \"fast\"",
                "s.toml:13:11: phases[0].latency: must be a duration such as \"20ms\", { min, max } or { p50, p99 }, got \"quick\" (expected number at 0)",
                "s.toml:18:67: phases[1].responses[0].latency.mx: unknown key; did you mean `max`?",
                "s.toml:18:42: phases[1].responses[0].latency.max: is required with min",
                "s.toml:22:15: expect.open_reason: must be a reason or a list of reasons (of: failure_rate, slow_call_rate, consecutive_failures), got a list",
            ],
            "{errors:#?}"
        );
        // Keys misspelt at the top, and what is then missing.
        let errors = problems("t.toml", "[trafic]\nrate = 10\n[[phase]]\nname = \"a\"\n");
        assert_eq!(
            errors,
            [
                "t.toml:3:3: phase: unknown key; did you mean `phases`?",
                "t.toml:1:2: trafic: unknown key; did you mean `traffic`?",
                "t.toml: no [traffic]: add one with the rate of calls, e.g. rate = 100 (calls per second)",
                "t.toml: no [policy]: add one (the keys of a policy file's [policies.NAME]) or pass --config",
                "t.toml: no [[phases]]: add at least one, e.g. [[phases]] name = \"healthy\" duration = \"5s\" status = 200",
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn latencies_and_weights_past_what_a_drill_can_run_are_refused() {
        let scenario = |phase: &str| {
            format!(
                "[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\nminimum_calls = 5\n[[phases]]\nname = \"a\"\nduration = \"1s\"\n{phase}\n"
            )
        };
        for (phase, expected) in [
            (
                "status = 200\nlatency = { p50 = \"1ms\", p99 = \"500000000000y\" }",
                "s.toml:10:1: phases[0].latency: at most 10 minutes",
            ),
            (
                "responses = [{ weight = 4000000000, status = 200 }, { weight = 4000000000, status = 503 }]",
                "s.toml:9:53: phases[0].responses[1].weight: the weights of phases[0].responses add up to more than 4294967295",
            ),
            (
                "status = 200\n[[phases]]\nname = \"b\"\nduration = \"500000000000y\"\nstatus = 200\n[[phases]]\nname = \"c\"\nduration = \"500000000000y\"\nstatus = 200",
                "s.toml:6:1: phases: ",
            ),
        ] {
            let errors = problems("s.toml", &scenario(phase));
            assert!(
                errors.len() == 1 && errors[0].starts_with(expected),
                "{phase}\n{errors:#?}"
            );
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_is_reported_once() {
        let text = "[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\nminimum_calls = 5\n[[phases]]\nname = 1\nduration = \"1s\"\nstatus = 200\n[[phases]]\nname = 1\nduration = \"1s\"\nstatus = \"200\"\n";
        assert_eq!(
            problems("s.toml", text),
            [
                "s.toml:7:8: phases[0].name: must be a string, got 1",
                "s.toml:11:8: phases[1].name: must be a string, got 1",
                "s.toml:13:10: phases[1].status: must be a whole number, got \"200\"",
            ]
        );
    }

    #[test]
    fn keys_endpoints_and_their_expectations_are_checked_against_each_other() {
        let text = r#"[traffic]
rate = 10
keys = 4
endpoints = 3
[policy.breaker]
count_window = 10
minimum_calls = 5
[pool]
max_ejection_percent = 0
[[phases]]
name = "a"
duration = "1s"
status = 200
affects = 2
[[phases]]
name = "b"
duration = "1s"
status = 503
affects = 9
[expect]
max_ejected = 1
min_ok_percent = 120
opens = true
"#;
        assert_eq!(
            problems("s.toml", text),
            [
                "s.toml:22:18: expect.min_ok_percent: must be within 0..=100, got 120",
                "s.toml:20:2: expect.min_ok_percent: measures the phase ok_percent_in names: set it",
                "s.toml:4:13: traffic.endpoints: a drill spreads its calls over keys or over endpoints, not both",
                "s.toml:3:8: traffic.keys: needs a breaker keyed by a request header: set policy.breaker.key = \"header\" and key_header",
                "s.toml:14:11: phases[0].affects: the first phase has no phase before it for the others to follow",
                "s.toml:19:11: phases[1].affects: must be within 1..=4, got 9",
                "s.toml:23:9: expect.opens: a pool has a breaker per endpoint and none for the dependency: use affected_open, unaffected_open, max_ejected or min_ejected",
                "s.toml:9:24: pool.max_ejection_percent: must be between 1 and 100, got 0 (to never eject, disable the breaker)",
            ]
        );
        // Without keys or endpoints: `affects`, the rows' expectations and `[pool]` have
        // nothing to count.
        let text = r#"[traffic]
rate = 10
[policy.breaker]
count_window = 20
[pool]
panic_threshold = 10
[[phases]]
name = "a"
duration = "1s"
status = 200
[[phases]]
name = "b"
duration = "1s"
status = 503
affects = 1
[expect]
affected_open = true
max_unaffected_rejected = 0
"#;
        assert_eq!(
            problems("s.toml", text),
            [
                "s.toml:15:11: phases[1].affects: needs traffic.keys or traffic.endpoints",
                "s.toml:17:17: expect.affected_open: needs traffic.keys or traffic.endpoints",
                "s.toml:18:27: expect.max_unaffected_rejected: needs traffic.keys",
                "s.toml:5:2: pool: needs traffic.endpoints",
            ]
        );
        // A pool has no breaker of the dependency's to expect things of, and keys its
        // breakers by endpoint itself.
        let text = r#"[traffic]
rate = 10
endpoints = 3
[policy.breaker]
count_window = 20
key = "host"
[[phases]]
name = "a"
duration = "1s"
status = 200
[expect]
opens = true
closed_at_end = true
"#;
        assert_eq!(
            problems("s.toml", text),
            [
                "s.toml:6:7: policy.breaker.key: a pool keys its breakers by endpoint: leave the key out",
                "s.toml:12:9: expect.opens: a pool has a breaker per endpoint and none for the dependency: use affected_open, unaffected_open, max_ejected or min_ejected",
                "s.toml:13:17: expect.closed_at_end: a pool has a breaker per endpoint and none for the dependency: use affected_open, unaffected_open, max_ejected or min_ejected",
            ]
        );
    }

    #[test]
    fn a_phase_that_affects_a_few_leaves_the_others_to_the_phase_before() {
        let s = load_scenario(
            &SourceFile::new("c", builtin("ejection-cascade").unwrap()),
            None,
        )
        .unwrap();
        let degraded = 1;
        assert_eq!(s.phases[degraded].affects, Some(1));
        assert_eq!(s.phase_for(degraded, Some(0)), degraded, "e0 is degraded");
        assert_eq!(s.phase_for(degraded, Some(1)), 0, "e1 stays healthy");
        assert_eq!(s.phase_for(degraded, None), 0);
        assert_eq!(s.phase_for(2, Some(1)), 2, "every endpoint recovers");
        assert!(s.affected(0) && !s.affected(4));
        assert_eq!(
            s.phases[degraded].describe(s.traffic.unit()),
            "the first endpoint: 200 at 100ms"
        );
        assert_eq!(
            (key_name(7), key_index("key-07")),
            ("key-07".to_owned(), Some(7))
        );
        assert_eq!(key_index("shard-7"), None);
    }
}
