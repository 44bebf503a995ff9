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

use crate::config::{Dur, PolicySpec, fmt_duration, policy_from_table};
use crate::input::{InputError, SourceFile};
use serde::Deserialize;
use std::time::Duration;
use toml::Spanned;

/// The built-in scenarios: name, TOML. The first is the default.
pub const BUILTIN: [(&str, &str); 5] = [
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
            Latency::Fixed(d) => fmt_duration(d),
            Latency::Uniform(a, b) => format!("{}–{}", fmt_duration(a), fmt_duration(b)),
            Latency::LogNormal { p50, p99 } => {
                format!("p50 {} p99 {}", fmt_duration(p50), fmt_duration(p99))
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

    /// One line: the mix.
    pub fn describe(&self) -> String {
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
        format!(
            "{}{}",
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
}

type Sp<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<Sp<String>>,
    description: Option<String>,
    seed: Option<u64>,
    traffic: Sp<RawTraffic>,
    policy: Option<Sp<toml::Table>>,
    phases: Sp<Vec<Sp<RawPhase>>>,
    #[serde(default)]
    expect: Option<Sp<RawExpect>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraffic {
    rate: Sp<f64>,
    concurrency: Option<Sp<usize>>,
    method: Option<Sp<String>>,
    path: Option<Sp<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    name: Sp<String>,
    duration: Sp<Dur>,
    #[serde(default)]
    ramp: bool,
    status: Option<Sp<u16>>,
    reset: Option<bool>,
    latency: Option<Sp<RawLatency>>,
    responses: Option<Sp<Vec<Sp<RawResponse>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResponse {
    #[serde(default = "one")]
    weight: u32,
    status: Option<Sp<u16>>,
    reset: Option<bool>,
    latency: Option<Sp<RawLatency>>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawLatency {
    Fixed(Dur),
    Range { min: Dur, max: Dur },
    Percentiles { p50: Dur, p99: Dur },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    opens: Option<bool>,
    open_reason: Option<Sp<OneOrMany>>,
    first_open_in: Option<Sp<String>>,
    #[serde(default)]
    no_open_in: Vec<Sp<String>>,
    closed_at_end: Option<bool>,
    max_half_open_calls: Option<u32>,
    half_open_calls: Option<u32>,
    min_calls_to_open: Option<u64>,
    max_calls_to_open: Option<u64>,
    max_dependency_in_flight: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

const REASONS: [&str; 3] = ["failure_rate", "slow_call_rate", "consecutive_failures"];

/// Reads and validates a scenario, reporting every problem. `policy` replaces the
/// scenario's own `[policy]` (from `--config`).
pub fn load_scenario(
    src: &SourceFile,
    policy: Option<PolicySpec>,
) -> Result<Scenario, Vec<InputError>> {
    let raw: RawScenario = toml::from_str(src.text()).map_err(|e| vec![src.toml_error(&e)])?;
    let mut errors = Vec::new();
    let name = raw
        .name
        .as_ref()
        .map(|n| n.get_ref().clone())
        .unwrap_or_else(|| {
            std::path::Path::new(src.name())
                .file_stem()
                .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
        });

    // Traffic.
    let t = raw.traffic.get_ref();
    let rate = *t.rate.get_ref();
    if !(rate.is_finite() && rate > 0.0 && rate <= 20_000.0) {
        errors.push(src.error_at(
            t.rate.span(),
            format!(
                "traffic.rate: must be within 0 (exclusive)..=20000 calls per second, got {rate}"
            ),
        ));
    }
    let concurrency = t.concurrency.as_ref().map_or(64, |c| *c.get_ref());
    if let Some(c) = &t.concurrency
        && !(1..=10_000).contains(c.get_ref())
    {
        errors.push(src.error_at(
            c.span(),
            format!(
                "traffic.concurrency: must be within 1..=10000, got {}",
                c.get_ref()
            ),
        ));
    }
    let method = match &t.method {
        Some(m) => match http::Method::from_bytes(m.get_ref().as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                errors.push(src.error_at(
                    m.span(),
                    format!("traffic.method: {:?} is not an HTTP method", m.get_ref()),
                ));
                http::Method::GET
            }
        },
        None => http::Method::GET,
    };
    let path = t
        .path
        .as_ref()
        .map_or("/".to_owned(), |p| p.get_ref().clone());
    if let Some(p) = &t.path
        && (!p.get_ref().starts_with('/') || p.get_ref().parse::<http::Uri>().is_err())
    {
        errors.push(src.error_at(
            p.span(),
            format!(
                "traffic.path: {:?} must be a path starting with /",
                p.get_ref()
            ),
        ));
    }

    // Policy.
    let policy = match policy {
        Some(p) => Some(p),
        None => match &raw.policy {
            Some(p) => match policy_from_table(src, &["policy"], &name, p.get_ref()) {
                Ok(p) => Some(p),
                Err(mut e) => {
                    errors.append(&mut e);
                    None
                }
            },
            None => {
                errors.push(src.error(
                    "no [policy]: add one (the keys of a policy file's [policies.NAME]) or pass --config",
                ));
                None
            }
        },
    };
    if let Some(p) = &policy
        && p.breaker.is_none()
    {
        errors.push(src.error(format!(
            "policy {:?} has no breaker: a drill exercises one (add [policy.breaker])",
            p.name
        )));
    }

    // Phases.
    let mut phases = Vec::new();
    if raw.phases.get_ref().is_empty() {
        errors.push(src.error_at(raw.phases.span(), "phases: at least one phase is needed"));
    }
    for (i, ph) in raw.phases.get_ref().iter().enumerate() {
        let p = ph.get_ref();
        let path = format!("phases[{i}]");
        let duration = p.duration.get_ref().0;
        if duration.is_zero() {
            errors.push(src.error_at(
                p.duration.span(),
                format!("{path}.duration: must be greater than zero"),
            ));
        }
        if phases.iter().any(|q: &Phase| &q.name == p.name.get_ref()) {
            errors.push(src.error_at(
                p.name.span(),
                format!("{path}.name: {:?} is used twice", p.name.get_ref()),
            ));
        }
        if p.ramp && i == 0 {
            errors.push(src.error_at(
                ph.span(),
                format!("{path}.ramp: the first phase has no phase before it to ramp from"),
            ));
        }
        let mut responses = Vec::new();
        match (&p.responses, p.status.is_some() || p.reset.is_some()) {
            (Some(_), true) => errors.push(src.error_at(
                ph.span(),
                format!("{path}: give either status/reset (and latency) or responses, not both"),
            )),
            (None, false) => errors.push(src.error_at(
                ph.span(),
                format!("{path}: say what the dependency does: status = 200, reset = true, or responses = [...]"),
            )),
            (None, true) => {
                if let Some(r) = response(
                    src,
                    &path,
                    ph.span(),
                    1,
                    p.status.as_ref(),
                    p.reset,
                    p.latency.as_ref(),
                    &mut errors,
                ) {
                    responses.push(r);
                }
            }
            (Some(list), false) => {
                if list.get_ref().is_empty() {
                    errors.push(src.error_at(list.span(), format!("{path}.responses: empty")));
                }
                if p.latency.is_some() {
                    errors.push(src.error_at(
                        ph.span(),
                        format!("{path}.latency: with responses, each response has its own latency"),
                    ));
                }
                for (j, r) in list.get_ref().iter().enumerate() {
                    let rr = r.get_ref();
                    let rpath = format!("{path}.responses[{j}]");
                    if rr.weight == 0 {
                        errors.push(src.error_at(
                            r.span(),
                            format!("{rpath}.weight: must be at least 1"),
                        ));
                    }
                    if let Some(x) = response(
                        src,
                        &rpath,
                        r.span(),
                        rr.weight,
                        rr.status.as_ref(),
                        rr.reset,
                        rr.latency.as_ref(),
                        &mut errors,
                    ) {
                        responses.push(x);
                    }
                }
            }
        }
        phases.push(Phase {
            name: p.name.get_ref().clone(),
            duration,
            ramp: p.ramp,
            responses,
        });
    }
    let total: Duration = phases.iter().map(|p| p.duration).sum();
    if total > Duration::from_secs(3600) {
        errors.push(src.error_at(
            raw.phases.span(),
            format!(
                "phases: {} in all; a drill lasts at most an hour",
                fmt_duration(total)
            ),
        ));
    }

    // Expectations.
    let mut expect = Expect::default();
    if let Some(e) = &raw.expect {
        let e = e.get_ref();
        let phase_named = |n: &Sp<String>, field: &str, errors: &mut Vec<InputError>| {
            if !phases.iter().any(|p| &p.name == n.get_ref()) {
                errors.push(src.error_at(
                    n.span(),
                    format!(
                        "expect.{field}: no phase named {:?} (phases: {})",
                        n.get_ref(),
                        phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        };
        if let Some(n) = &e.first_open_in {
            phase_named(n, "first_open_in", &mut errors);
            expect.first_open_in = Some(n.get_ref().clone());
        }
        for n in &e.no_open_in {
            phase_named(n, "no_open_in", &mut errors);
            expect.no_open_in.push(n.get_ref().clone());
        }
        if let Some(r) = &e.open_reason {
            let list = match r.get_ref() {
                OneOrMany::One(s) => vec![s.clone()],
                OneOrMany::Many(v) => v.clone(),
            };
            for reason in &list {
                if !REASONS.contains(&reason.as_str()) {
                    errors.push(src.error_at(
                        r.span(),
                        format!(
                            "expect.open_reason: {reason:?} is not a reason to open (one of: {})",
                            REASONS.join(", ")
                        ),
                    ));
                }
            }
            expect.open_reason = Some(list);
        }
        expect.opens = e.opens;
        expect.closed_at_end = e.closed_at_end;
        expect.max_half_open_calls = e.max_half_open_calls;
        expect.half_open_calls = e.half_open_calls;
        expect.min_calls_to_open = e.min_calls_to_open;
        expect.max_calls_to_open = e.max_calls_to_open;
        expect.max_dependency_in_flight = e.max_dependency_in_flight;
        if (e.min_calls_to_open.is_some() || e.max_calls_to_open.is_some())
            && e.first_open_in.is_none()
        {
            errors.push(src.error_at(
                raw.expect.as_ref().map_or(0..0, Spanned::span),
                "expect: min_calls_to_open / max_calls_to_open count from the start of first_open_in: set it",
            ));
        }
    }

    match policy {
        Some(policy) if errors.is_empty() => Ok(Scenario {
            name,
            description: raw.description.unwrap_or_default(),
            seed: raw.seed.unwrap_or(1),
            traffic: Traffic {
                rate,
                concurrency,
                method,
                path,
            },
            policy,
            phases,
            expect,
        }),
        _ => Err(errors),
    }
}

#[allow(clippy::too_many_arguments)]
fn response(
    src: &SourceFile,
    path: &str,
    span: std::ops::Range<usize>,
    weight: u32,
    status: Option<&Sp<u16>>,
    reset: Option<bool>,
    latency: Option<&Sp<RawLatency>>,
    errors: &mut Vec<InputError>,
) -> Option<ResponseSpec> {
    let reply = match (status, reset) {
        (Some(s), None | Some(false)) => {
            if !(100..=999).contains(s.get_ref()) || *s.get_ref() < 200 {
                errors.push(src.error_at(
                    s.span(),
                    format!(
                        "{path}.status: {} is not a final HTTP status (200..=999)",
                        s.get_ref()
                    ),
                ));
                return None;
            }
            Reply::Status(*s.get_ref())
        }
        (None, Some(true)) => Reply::Reset,
        (Some(_), Some(true)) => {
            errors.push(src.error_at(
                span,
                format!("{path}: a response is a status or a reset, not both"),
            ));
            return None;
        }
        (None, _) => {
            errors.push(src.error_at(span, format!("{path}: needs status = N or reset = true")));
            return None;
        }
    };
    let latency = match latency {
        None => Latency::Fixed(Duration::ZERO),
        Some(l) => match l.get_ref() {
            RawLatency::Fixed(d) => Latency::Fixed(d.0),
            RawLatency::Range { min, max } => {
                if max.0 < min.0 {
                    errors.push(src.error_at(
                        l.span(),
                        format!(
                            "{path}.latency: max ({}) is below min ({})",
                            fmt_duration(max.0),
                            fmt_duration(min.0)
                        ),
                    ));
                }
                Latency::Uniform(min.0, max.0.max(min.0))
            }
            RawLatency::Percentiles { p50, p99 } => {
                if p99.0 < p50.0 || p50.0.is_zero() {
                    errors.push(
                        src.error_at(l.span(), format!("{path}.latency: need 0 < p50 <= p99")),
                    );
                }
                Latency::LogNormal {
                    p50: p50.0,
                    p99: p99.0.max(p50.0),
                }
            }
        },
    };
    if let Latency::Fixed(d) | Latency::Uniform(_, d) = latency
        && d > Duration::from_secs(600)
    {
        errors.push(src.error(format!("{path}.latency: at most 10 minutes")));
    }
    Some(ResponseSpec {
        weight,
        reply,
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid() {
        for (name, text) in BUILTIN {
            let s = load_scenario(&SourceFile::new(name, text), None)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(s.name, name);
            assert!(s.duration() <= Duration::from_secs(40), "{name} is short");
            assert!(s.policy.breaker.is_some());
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
        let errors: Vec<String> = load_scenario(&SourceFile::new("s.toml", text), None)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
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
}
