//! One configuration, three ways in: a layer's section written in a policy file and read by
//! the facade's loader, the same section read through the layer's own `serde` type, and the
//! same settings given to the layer's builder in code give the same configuration — and,
//! for settings that break a rule, the same problems at the same paths. Random sections
//! (proptest), for the breaker, the limit, the timeout and the retry budget.

use fusebox::config::PolicyFile;
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerSection, OnClose};
use fusebox_classify::ConfigError;
use fusebox_limit::{
    AdaptiveSection, AimdConfig, Algorithm, ConcurrencyLimitConfig, LimitSection, QueueSection,
    Release, VegasConfig,
};
use fusebox_retry::{RetryConfig, RetrySection};
use fusebox_timeout::{TimeoutConfig, TimeoutSection};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

fn problems(e: &ConfigError) -> Vec<String> {
    e.problems().iter().map(ToString::to_string).collect()
}

/// `section` as the `[policies.p.<name>]` table of a file, and as a table of its own.
fn texts(name: &str, section: &impl Serialize) -> (String, String) {
    let own = toml::to_string(section).expect("a section writes as TOML");
    let table = toml::Table::try_from(section).expect("a section is a table");
    let mut layer = toml::Table::new();
    layer.insert(name.to_owned(), toml::Value::Table(table));
    let mut policies = toml::Table::new();
    policies.insert("p".to_owned(), toml::Value::Table(layer));
    let mut file = toml::Table::new();
    file.insert("policies".to_owned(), toml::Value::Table(policies));
    (file.to_string(), own)
}

/// What the loader made of `file`: the policy, or every problem.
fn loaded(file: &str) -> Result<fusebox::Policy, Vec<String>> {
    PolicyFile::from_toml(file)
        .and_then(|f| f.build("p"))
        .map_err(|e| problems(&e))
}

/// The builder's problems as the loader reports them, under `policies.p.<name>`.
fn in_file(name: &str, e: &ConfigError) -> Vec<String> {
    problems(&e.clone().prefixed(&format!("policies.p.{name}")))
}

/// Asserts that the three ways in agree.
fn agree<T, S>(
    name: &str,
    section: &S,
    built: Result<T, ConfigError>,
    from_policy: impl Fn(&fusebox::Policy) -> T,
    same: impl Fn(&T, &T) -> bool,
) where
    S: Serialize,
    T: DeserializeOwned + std::fmt::Debug,
{
    let (file, own) = texts(name, section);
    let serde: Result<T, String> = toml::from_str(&own).map_err(|e| e.to_string());
    match (&built, loaded(&file)) {
        (Ok(b), Ok(policy)) => {
            let l = from_policy(&policy);
            assert!(same(&l, b), "file {l:?}\nbuilder {b:?}\n{file}");
            let s = serde.unwrap_or_else(|e| panic!("{e}\n{own}"));
            assert!(same(&s, b), "serde {s:?}\nbuilder {b:?}\n{own}");
        }
        (Err(e), Err(found)) => {
            assert_eq!(found, in_file(name, e), "{file}");
            let s = serde.expect_err("serde refuses it too");
            // serde stops at the first problem: it is one of the builder's.
            assert!(
                e.problems().iter().any(|p| s.contains(p.rule())),
                "{s} is none of {e}"
            );
        }
        (b, l) => panic!("builder {b:?}, file {l:?}\n{file}"),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn opt<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.6, s)
}

// === the breaker ===

#[derive(Debug, Clone)]
enum Window {
    Default,
    Count(u32),
    Time(u64, Option<u32>),
}

fn breaker_section() -> impl Strategy<Value = CircuitBreakerSection> {
    let window = prop_oneof![
        Just(Window::Default),
        (0u32..300).prop_map(Window::Count),
        (0u64..120_000, opt(0u32..4000)).prop_map(|(d, b)| Window::Time(d, b)),
    ];
    (
        (
            window,
            opt(prop_oneof![Just("dep".to_owned()), Just(" ".to_owned())]),
            opt(0u32..200),
            opt(0u32..120),
            opt(0u32..120),
            opt(opt(0u32..20)),
        ),
        (
            opt(0u64..100_000),
            opt(0u64..10_000),
            opt((0u32..16).prop_map(|q| f64::from(q) * 0.25)),
            opt(0u64..600_000),
            opt(0u32..12),
            opt(0u32..12),
        ),
        (
            opt(opt(0u64..60_000)),
            opt(prop_oneof![Just(OnClose::Clear), Just(OnClose::Keep)]),
            opt(any::<bool>()),
            opt(0..=i64::MAX as u64),
        ),
    )
        .prop_map(|(a, b, c)| {
            let (window, name, minimum_calls, frt, srt, consecutive) = a;
            let (open_wait, jitter, multiplier, max_open, probes, successes) = b;
            let (max_half, on_close, count_overloaded, seed) = c;
            let (count_window, time_window, time_window_buckets) = match window {
                Window::Default => (None, None, None),
                Window::Count(n) => (Some(n), None, None),
                Window::Time(d, b) => (None, Some(ms(d)), b),
            };
            let mut section = CircuitBreakerSection::default();
            section.name = name;
            section.count_window = count_window;
            section.time_window = time_window;
            section.time_window_buckets = time_window_buckets;
            section.minimum_calls = minimum_calls;
            section.failure_rate_threshold = frt;
            section.slow_call_rate_threshold = srt;
            section.consecutive_failures = consecutive;
            section.open_wait = open_wait.map(ms);
            section.open_wait_jitter = jitter.map(ms);
            section.open_wait_multiplier = multiplier;
            section.max_open_wait = max_open.map(ms);
            section.permitted_probes = probes;
            section.probe_successes = successes;
            section.max_half_open_wait = max_half.map(|m| m.map(ms));
            section.on_close = on_close;
            section.count_overloaded = count_overloaded;
            section.seed = seed;
            section
        })
}

/// The section's settings given to the builder in code, one by one.
fn breaker_in_code(s: &CircuitBreakerSection) -> Result<CircuitBreakerConfig, ConfigError> {
    let mut b = CircuitBreakerConfig::builder();
    if let Some(n) = &s.name {
        b = b.name(n.as_str());
    }
    if let Some(n) = s.count_window {
        b = b.count_window(n);
    }
    if let Some(d) = s.time_window {
        b = b.time_window(d, s.time_window_buckets.unwrap_or(10));
    }
    if let Some(n) = s.minimum_calls {
        b = b.minimum_calls(n);
    }
    if let Some(n) = s.failure_rate_threshold {
        b = b.failure_rate_threshold(n);
    }
    if let Some(n) = s.slow_call_rate_threshold {
        b = b.slow_call_rate_threshold(n);
    }
    if let Some(Some(n)) = s.consecutive_failures {
        b = b.consecutive_failures(n);
    }
    if let Some(d) = s.open_wait {
        b = b.open_wait(d);
    }
    if let Some(d) = s.open_wait_jitter {
        b = b.open_wait_jitter(d);
    }
    if s.open_wait_multiplier.is_some() || s.max_open_wait.is_some() {
        let base = s.open_wait.unwrap_or(Duration::from_secs(30));
        b = b.open_wait_growth(
            s.open_wait_multiplier.unwrap_or(1.0),
            s.max_open_wait
                .unwrap_or(Duration::from_secs(300).max(base)),
        );
    }
    if let Some(n) = s.permitted_probes {
        b = b.permitted_probes(n);
    }
    if let Some(n) = s.probe_successes {
        b = b.probe_successes(n);
    }
    if let Some(m) = s.max_half_open_wait {
        b = b.max_half_open_wait(m);
    }
    if let Some(o) = s.on_close {
        b = b.on_close(o);
    }
    if let Some(c) = s.count_overloaded {
        b = b.count_overloaded(c);
    }
    if let Some(x) = s.seed {
        b = b.seed(x);
    }
    b.build()
}

/// Configurations equal but for a name nobody gave (the policy names its breaker).
fn same_breaker(a: &CircuitBreakerConfig, b: &CircuitBreakerConfig) -> bool {
    let name = |c: &CircuitBreakerConfig| {
        if c.is_named() {
            c.clone()
        } else {
            c.clone().with_name("p")
        }
    };
    name(a) == name(b)
}

// === the limit ===

fn limit_section() -> impl Strategy<Value = LimitSection> {
    let adaptive = (
        any::<bool>(),
        opt(0u32..50),
        opt(0u32..500),
        opt(0u32..200),
        opt((0u32..12).prop_map(|q| f64::from(q) / 10.0)),
        opt((0u32..12).prop_map(|q| f64::from(q) / 4.0)),
        opt(0u64..120_000),
    )
        .prop_map(|(vegas, min, max, initial, backoff, x, probe)| {
            let mut section = AdaptiveSection::default();
            section.algorithm = Some(if vegas {
                Algorithm::Vegas
            } else {
                Algorithm::Aimd
            });
            section.min_limit = min;
            section.max_limit = max;
            section.initial_limit = initial;
            section.backoff_ratio = backoff;
            section.additive_increase = (!vegas).then_some(x).flatten();
            section.smoothing = vegas.then_some(x.map(|x| x / 3.0)).flatten();
            section.probe_interval = vegas.then_some(probe.map(ms)).flatten();
            section
        });
    let kind = prop_oneof![
        (0u32..100).prop_map(|n| (Some(n), None)),
        adaptive.prop_map(|a| (None, Some(a))),
    ];
    (
        kind,
        opt(prop_oneof![Just("lim".to_owned()), Just("".to_owned())]),
        opt((0u32..50, 0u64..1000)),
        opt(prop_oneof![
            Just(Release::OnResponse),
            Just(Release::AtEndOfBody)
        ]),
        opt(0u64..5000),
        opt(0u32..10),
    )
        .prop_map(
            |((max, adaptive), name, queue, release, retry_after, log_step)| {
                let mut section = LimitSection::default();
                section.name = name;
                section.max_concurrency = max;
                section.adaptive = adaptive;
                section.queue = queue.map(|(w, d)| {
                    let mut queue = QueueSection::default();
                    queue.max_waiters = Some(w);
                    queue.max_wait = Some(ms(d));
                    queue
                });
                section.release = release;
                section.retry_after = retry_after.map(ms);
                section.log_step = log_step;
                section
            },
        )
}

fn limit_in_code(s: &LimitSection) -> Result<ConcurrencyLimitConfig, ConfigError> {
    let u = |n: u32| n as usize;
    let mut b = ConcurrencyLimitConfig::builder();
    if let Some(n) = &s.name {
        b = b.name(n.as_str());
    }
    if let Some(n) = s.max_concurrency {
        b = b.max_concurrency(u(n));
    }
    if let Some(a) = &s.adaptive {
        b = match a.algorithm {
            Some(Algorithm::Vegas) => {
                let mut c = VegasConfig::new();
                if let Some(x) = a.min_limit {
                    c = c.min_limit(u(x));
                }
                if let Some(x) = a.max_limit {
                    c = c.max_limit(u(x));
                }
                if let Some(x) = a.initial_limit {
                    c = c.initial_limit(u(x));
                }
                if let Some(x) = a.backoff_ratio {
                    c = c.backoff_ratio(x);
                }
                if let Some(x) = a.smoothing {
                    c = c.smoothing(x);
                }
                if let Some(x) = a.probe_interval {
                    c = c.probe_interval(x);
                }
                b.vegas(c)
            }
            _ => {
                let mut c = AimdConfig::new();
                if let Some(x) = a.min_limit {
                    c = c.min_limit(u(x));
                }
                if let Some(x) = a.max_limit {
                    c = c.max_limit(u(x));
                }
                if let Some(x) = a.initial_limit {
                    c = c.initial_limit(u(x));
                }
                if let Some(x) = a.backoff_ratio {
                    c = c.backoff_ratio(x);
                }
                if let Some(x) = a.additive_increase {
                    c = c.additive_increase(x);
                }
                b.aimd(c)
            }
        };
    }
    if let Some(q) = &s.queue {
        b = b.queue(
            u(q.max_waiters.unwrap_or(0)),
            q.max_wait.unwrap_or_default(),
        );
    }
    if let Some(r) = s.release {
        b = b.release(r);
    }
    if let Some(d) = s.retry_after {
        b = b.retry_after(d);
    }
    if let Some(n) = s.log_step {
        b = b.log_step(u(n));
    }
    // A file writes an adaptive limit's settings under `adaptive`.
    b.build().map_err(|e| {
        let mut out: Option<ConfigError> = None;
        for p in e.problems() {
            let path = p
                .path()
                .strip_prefix("aimd.")
                .or_else(|| p.path().strip_prefix("vegas."))
                .map_or_else(|| p.path().to_owned(), |rest| format!("adaptive.{rest}"));
            let one = ConfigError::new(path, p.rule());
            match &mut out {
                Some(all) => all.extend(one),
                None => out = Some(one),
            }
        }
        out.unwrap_or(e)
    })
}

fn same_limit(a: &ConcurrencyLimitConfig, b: &ConcurrencyLimitConfig) -> bool {
    let name = |c: &ConcurrencyLimitConfig| {
        if c.is_named() {
            c.clone()
        } else {
            c.clone().with_name("p")
        }
    };
    name(a) == name(b)
}

// === the timeout ===

fn timeout_section() -> impl Strategy<Value = TimeoutSection> {
    (
        opt(0u64..10_000),
        opt(0u64..10_000),
        opt(any::<bool>()),
        opt(prop_oneof![
            Just("x-request-timeout-ms".to_owned()),
            Just("bad header".to_owned())
        ]),
    )
        .prop_map(|(d, body, propagate, header)| {
            let mut section = TimeoutSection::default();
            section.default_timeout = d.map(ms);
            section.body_timeout = body.map(ms);
            section.propagate_grpc_timeout = propagate;
            section.deadline_header = header;
            section
        })
}

fn timeout_in_code(s: &TimeoutSection) -> Result<TimeoutConfig, ConfigError> {
    let mut b = TimeoutConfig::builder();
    if let Some(d) = s.default_timeout {
        b = b.default_timeout(d);
    }
    if let Some(d) = s.body_timeout {
        b = b.body_timeout(d);
    }
    if let Some(p) = s.propagate_grpc_timeout {
        b = b.propagate_grpc_timeout(p);
    }
    if let Some(h) = &s.deadline_header {
        b = b.deadline_header(h.as_str());
    }
    b.build()
}

// === the retry budget ===

fn retry_section() -> impl Strategy<Value = RetrySection> {
    (
        (
            opt(prop_oneof![Just("r".to_owned()), Just(" ".to_owned())]),
            opt((0u32..3000).prop_map(|n| f64::from(n) / 1000.0)),
            opt(0u32..50),
            opt(0u64..90_000),
            opt(opt(0u32..120)),
            opt(0u32..40),
        ),
        (
            opt(0u32..120),
            opt(0u64..500),
            opt(0u64..5000),
            opt(0u64..60_000),
            opt(0u32..100_000),
            opt(opt(0u64..500)),
            opt(0..=i64::MAX as u64),
        ),
    )
        .prop_map(|(a, b)| {
            let (name, ratio, floor, ttl, cutoff, cutoff_calls) = a;
            let (attempts, base, max, retry_after, body, hedge, seed) = b;
            let mut section = RetrySection::default();
            section.name = name;
            section.retry_ratio = ratio;
            section.min_retries_per_second = floor;
            section.ttl = ttl.map(ms);
            section.failure_rate_threshold = cutoff;
            section.cutoff_minimum_calls = cutoff_calls;
            section.max_attempts = attempts;
            section.base_delay = base.map(ms);
            section.max_delay = max.map(ms);
            section.max_retry_after = retry_after.map(ms);
            section.max_replay_body_bytes = body;
            section.hedge_delay = hedge.map(|h| h.map(ms));
            section.seed = seed;
            section
        })
}

fn retry_in_code(s: &RetrySection) -> Result<RetryConfig, ConfigError> {
    let mut b = RetryConfig::builder();
    if let Some(n) = &s.name {
        b = b.name(n.as_str());
    }
    if let Some(x) = s.retry_ratio {
        b = b.retry_ratio(x);
    }
    if let Some(x) = s.min_retries_per_second {
        b = b.min_retries_per_second(x);
    }
    if let Some(x) = s.ttl {
        b = b.ttl(x);
    }
    if let Some(x) = s.failure_rate_threshold {
        b = b.failure_rate_threshold(x);
    }
    if let Some(x) = s.cutoff_minimum_calls {
        b = b.cutoff_minimum_calls(x);
    }
    if let Some(x) = s.max_attempts {
        b = b.max_attempts(x);
    }
    if let Some(x) = s.base_delay {
        b = b.base_delay(x);
    }
    if let Some(x) = s.max_delay {
        b = b.max_delay(x);
    }
    if let Some(x) = s.max_retry_after {
        b = b.max_retry_after(x);
    }
    if let Some(x) = s.max_replay_body_bytes {
        b = b.max_replay_body_bytes(x as usize);
    }
    if let Some(x) = s.hedge_delay {
        b = b.hedge_delay(x);
    }
    if let Some(x) = s.seed {
        b = b.seed(Some(x));
    }
    b.build()
}

/// Budgets equal in every setting (`RetryConfig` holds a clock and has no `==`), but for a
/// name nobody gave.
/// Equal, but for the name a policy gives an unnamed timeout (its own, `p`).
fn same_timeout(a: &TimeoutConfig, b: &TimeoutConfig) -> bool {
    let named = |c: &TimeoutConfig| {
        if c.is_named() {
            c.clone()
        } else {
            c.clone().with_name("p")
        }
    };
    named(a) == named(b)
}

fn same_retry(a: &RetryConfig, b: &RetryConfig) -> bool {
    let name = |c: &RetryConfig| {
        let c = if c.is_named() {
            c.clone()
        } else {
            c.clone().with_name("p")
        };
        fusebox_classify::section::Section::of(&c)
    };
    let (x, y): (RetrySection, RetrySection) = (name(a), name(b));
    x == y
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn breaker_sections_agree(s in breaker_section()) {
        agree("breaker", &s, breaker_in_code(&s), |p| p.breaker_config().cloned().expect("a breaker"), same_breaker);
    }

    #[test]
    fn limit_sections_agree(s in limit_section()) {
        agree("limit", &s, limit_in_code(&s), |p| p.limit_config().expect("a limit"), same_limit);
    }

    #[test]
    fn timeout_sections_agree(s in timeout_section()) {
        agree("timeout", &s, timeout_in_code(&s), |p| p.timeout_config().cloned().expect("a timeout"), same_timeout);
    }

    #[test]
    fn retry_sections_agree(s in retry_section()) {
        agree("retry", &s, retry_in_code(&s), |p| p.retry_config().map(|c| (*c).clone()).expect("a budget"), same_retry);
    }
}
