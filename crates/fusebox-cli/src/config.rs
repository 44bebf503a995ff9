//! Policy files: the breaker, timeout, concurrency limit and retry settings of each
//! dependency, in TOML.
//!
//! `fusebox replay --config`, `fusebox drill --config` and `fusebox check` read this
//! format; a drill scenario's `[policy]` table is one policy in the same shape. It is the
//! command's own format until the `fusebox` facade's `Policy` configuration lands; the
//! key names are the layer builders' own (`minimum_calls`, `failure_rate_threshold`,
//! `open_wait`, ...), so a policy written here reads the same there.
//!
//! ```toml
//! # Every policy starts from these (optional).
//! [defaults]
//! slow_call_duration = "500ms"      # a call at or above this is slow (default route)
//!
//! [defaults.breaker]
//! window = { kind = "count", size = 100 }   # or { kind = "time", duration = "30s", buckets = 10 }
//! minimum_calls = 20
//! failure_rate_threshold = 50       # percent
//! slow_call_rate_threshold = 80     # percent
//! open_wait = "10s"
//! open_wait_jitter = "1s"
//! permitted_probes = 3
//!
//! [policies.payments]               # one breaker per policy, named after it
//! count_throttling = true           # 429 / RESOURCE_EXHAUSTED count as failures
//!
//! [policies.payments.timeout]
//! default_timeout = "800ms"
//!
//! [policies.payments.limit]
//! max_concurrency = 64
//! queue = { max_waiters = 32, max_wait = "50ms" }
//!
//! [policies.payments.retry]
//! max_attempts = 3
//! retry_ratio = 0.1
//!
//! [policies.payments.routes."POST /charges"]
//! slow_call_duration = "1s"
//! timeout = "2s"
//! retry = false
//! failure_statuses = [409]
//! ```
//!
//! A policy serves the routes it lists (`"METHOD /path/{param}"` or `"/path"`, as the
//! route table matches them); `default_policy = "name"` at the top level names the policy
//! that serves every other route. Sections a policy (or `[defaults]`) leaves out are layers
//! it does not have. Unknown keys are errors, and every problem is reported with its
//! position and its path, e.g. `policies.payments.breaker.failure_rate_threshold: must be
//! within 1..=100, got 150`.

use crate::input::{InputError, SourceFile};
use fusebox_breaker::{CircuitBreakerConfig, OnClose, WindowConfig};
use fusebox_classify::{ConfigError, HttpClassifier, Route, RouteTable, StandardClassifier};
use fusebox_limit::{ConcurrencyLimitConfig, Limit};
use fusebox_retry::RetryConfig;
use fusebox_timeout::TimeoutConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

/// A duration written the human way (`"750ms"`, `"2s"`, `"1m 30s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"750ms\" or \"2s\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dur, E> {
                parse_duration(s).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Parses `"750ms"`, `"2s"`, `"1m 30s"`, `"0s"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        format!("invalid duration {s:?} ({e}); write a number and a unit, e.g. \"750ms\" or \"2s\"")
    })
}

/// Formats a duration the way the files write it (`750ms`, `2s`, `1.5s`).
pub fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns >= 1_000_000_000 {
        format!("{}s", trim_float(d.as_secs_f64(), 3))
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns >= 1_000_000 {
        format!("{}ms", trim_float(ns as f64 / 1e6, 3))
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

fn trim_float(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

type Sp<T> = Spanned<T>;

/// Defines a raw (as-written) section: every field optional and spanned, a merge that
/// fills what `self` leaves out from `base`, and the span of a field by name.
macro_rules! raw_section {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            $(pub(crate) $field: Option<Sp<$ty>>,)*
        }

        impl $name {
            #[allow(dead_code)]
            pub(crate) fn merged(&self, base: &$name) -> $name {
                $name { $($field: self.$field.clone().or_else(|| base.$field.clone()),)* }
            }

            #[allow(dead_code)]
            pub(crate) fn span_of(&self, field: &str) -> Option<Range<usize>> {
                match field {
                    $(stringify!($field) => self.$field.as_ref().map(|f| f.span()),)*
                    _ => None,
                }
            }
        }
    };
}

/// A breaker window as written.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RawWindow {
    /// The last `size` calls.
    Count { size: u32 },
    /// The calls of the last `duration`.
    Time {
        duration: Dur,
        #[serde(default = "default_buckets")]
        buckets: u32,
    },
}

fn default_buckets() -> u32 {
    10
}

/// `on_close` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawOnClose {
    Clear,
    Keep,
}

/// A queue as written.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQueue {
    max_waiters: usize,
    max_wait: Dur,
}

raw_section!(
    /// `[breaker]`.
    RawBreaker {
        window: RawWindow,
        minimum_calls: u32,
        failure_rate_threshold: u32,
        slow_call_rate_threshold: u32,
        consecutive_failures: u32,
        open_wait: Dur,
        open_wait_jitter: Dur,
        open_wait_multiplier: f64,
        max_open_wait: Dur,
        permitted_probes: u32,
        probe_successes: u32,
        max_half_open_wait: Dur,
        on_close: RawOnClose,
        count_overloaded: bool,
        seed: u64,
    }
);

raw_section!(
    /// `[timeout]`.
    RawTimeout {
        default_timeout: Dur,
        body_timeout: Dur,
    }
);

raw_section!(
    /// `[limit]`.
    RawLimit {
        max_concurrency: usize,
        queue: RawQueue,
        retry_after: Dur,
    }
);

raw_section!(
    /// `[retry]`.
    RawRetry {
        max_attempts: u32,
        retry_ratio: f64,
        min_retries_per_second: u32,
        ttl: Dur,
        failure_rate_threshold: f64,
        cutoff_minimum_calls: u32,
        base_delay: Dur,
        max_delay: Dur,
        max_retry_after: Dur,
        seed: u64,
    }
);

raw_section!(
    /// `[routes."KEY"]`.
    RawRoute {
        slow_call_duration: Dur,
        timeout: Dur,
        count_throttling: bool,
        retry: bool,
        idempotent: bool,
        failure_statuses: Vec<u16>,
        success_statuses: Vec<u16>,
        ignored_statuses: Vec<u16>,
    }
);

/// A policy as written (also `[defaults]` and a scenario's `[policy]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    slow_call_duration: Option<Sp<Dur>>,
    count_throttling: Option<Sp<bool>>,
    failure_statuses: Option<Sp<Vec<u16>>>,
    success_statuses: Option<Sp<Vec<u16>>>,
    ignored_statuses: Option<Sp<Vec<u16>>>,
    breaker: Option<Sp<RawBreaker>>,
    timeout: Option<Sp<RawTimeout>>,
    limit: Option<Sp<RawLimit>>,
    retry: Option<Sp<RawRetry>>,
    #[serde(default)]
    routes: BTreeMap<Sp<String>, Sp<RawRoute>>,
}

/// A policy file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default_policy: Option<Sp<String>>,
    defaults: Option<Sp<RawPolicy>>,
    #[serde(default)]
    policies: BTreeMap<Sp<String>, Sp<RawPolicy>>,
}

fn merge_section<T: Clone>(
    own: &Option<Sp<T>>,
    base: &Option<Sp<T>>,
    merge: impl Fn(&T, &T) -> T,
) -> Option<Sp<T>> {
    match (own, base) {
        (Some(o), Some(b)) => Some(Spanned::new(o.span(), merge(o.get_ref(), b.get_ref()))),
        (Some(o), None) => Some(o.clone()),
        (None, Some(b)) => Some(b.clone()),
        (None, None) => None,
    }
}

impl RawPolicy {
    /// `self` with what it leaves out taken from `base` (section by section, field by
    /// field). Routes are the policy's own.
    pub(crate) fn merged(&self, base: &RawPolicy) -> RawPolicy {
        RawPolicy {
            slow_call_duration: self
                .slow_call_duration
                .clone()
                .or(base.slow_call_duration.clone()),
            count_throttling: self
                .count_throttling
                .clone()
                .or(base.count_throttling.clone()),
            failure_statuses: self
                .failure_statuses
                .clone()
                .or(base.failure_statuses.clone()),
            success_statuses: self
                .success_statuses
                .clone()
                .or(base.success_statuses.clone()),
            ignored_statuses: self
                .ignored_statuses
                .clone()
                .or(base.ignored_statuses.clone()),
            breaker: merge_section(&self.breaker, &base.breaker, RawBreaker::merged),
            timeout: merge_section(&self.timeout, &base.timeout, RawTimeout::merged),
            limit: merge_section(&self.limit, &base.limit, RawLimit::merged),
            retry: merge_section(&self.retry, &base.retry, RawRetry::merged),
            routes: self.routes.clone(),
        }
    }
}

/// How one route is classified and bounded (for display; the [`RouteTable`] holds the
/// same settings for the layers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// The route key (`"default"` for the policy's default route).
    pub key: String,
    /// The slow-call threshold.
    pub slow_call_duration: Option<Duration>,
    /// The route's timeout (else the timeout section's default).
    pub timeout: Option<Duration>,
    /// Whether 429 / RESOURCE_EXHAUSTED count as failures.
    pub count_throttling: bool,
    /// Whether the retry layer may retry this route.
    pub retry: bool,
    /// Whether requests are safe to repeat whatever their method (`None`: by method).
    pub idempotent: Option<bool>,
    /// Statuses moved to failures.
    pub failure_statuses: Vec<u16>,
    /// Statuses moved to successes.
    pub success_statuses: Vec<u16>,
    /// Statuses moved to ignored.
    pub ignored_statuses: Vec<u16>,
}

/// One dependency's effective settings, validated: what a drill wraps its client in and
/// what a replay runs recorded calls through.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// The policy's name (also the breaker's, the limit's and the retry budget's).
    pub name: String,
    /// The routes: classifier, slow threshold, timeout, retry switch.
    pub routes: RouteTable<StandardClassifier>,
    /// The routes as configured, default route first.
    pub route_specs: Vec<RouteSpec>,
    /// The breaker, if the policy has one.
    pub breaker: Option<CircuitBreakerConfig>,
    /// The timeout, if any.
    pub timeout: Option<TimeoutConfig>,
    /// The concurrency limit, if any.
    pub limit: Option<ConcurrencyLimitConfig>,
    /// The retry budget, if any.
    pub retry: Option<RetryConfig>,
    /// The breaker section as written, to rebuild it with overrides (replay seeds, sweeps).
    pub(crate) raw_breaker: Option<RawBreaker>,
}

/// A loaded policy file.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    /// Where it came from.
    pub file: String,
    /// The policies, in name order.
    pub policies: Vec<PolicySpec>,
    /// Which policy serves routes no policy lists.
    pub default_policy: Option<usize>,
}

impl PolicyFile {
    /// The policy named `name`.
    pub fn get(&self, name: &str) -> Option<&PolicySpec> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// Picks one policy: `name` if given, else the only one.
    pub fn pick(&self, name: Option<&str>) -> Result<&PolicySpec, InputError> {
        let names = || {
            self.policies
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self.get(n).ok_or_else(|| {
                InputError::in_file(
                    &self.file,
                    format!("no policy named {n:?} (the file has: {})", names()),
                )
            }),
            None if self.policies.len() == 1 => Ok(&self.policies[0]),
            None => Err(InputError::in_file(
                &self.file,
                format!(
                    "the file has {} policies ({}); choose one with --policy",
                    self.policies.len(),
                    names()
                ),
            )),
        }
    }
}

/// Reads and validates a policy file, reporting every problem.
pub fn load_policy_file(src: &SourceFile) -> Result<PolicyFile, Vec<InputError>> {
    let raw: RawFile = toml::from_str(src.text()).map_err(|e| vec![src.toml_error(&e)])?;
    let mut errors = Vec::new();
    let base = raw.defaults.as_ref().map(|d| d.get_ref().clone());
    if let Some(d) = &raw.defaults
        && !d.get_ref().routes.is_empty()
    {
        errors.push(src.error_at(
            d.span(),
            "defaults: routes belong to a policy, not to [defaults]",
        ));
    }
    if raw.policies.is_empty() {
        errors.push(src.error("no policies: add a [policies.NAME] table"));
    }
    let mut policies = Vec::new();
    for (name, policy) in &raw.policies {
        let merged = match &base {
            Some(b) => policy.get_ref().merged(b),
            None => policy.get_ref().clone(),
        };
        let spanned = Spanned::new(policy.span(), merged);
        match build_policy(src, &format!("policies.{}", name.get_ref()), name, &spanned) {
            Ok(p) => policies.push(p),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let mut default_policy = None;
    if let Some(d) = &raw.default_policy {
        match raw.policies.keys().position(|k| k.get_ref() == d.get_ref()) {
            Some(i) => default_policy = Some(i),
            None => errors.push(src.error_at(
                d.span(),
                format!("default_policy: no policy named {:?}", d.get_ref()),
            )),
        }
    }
    if errors.is_empty() {
        // Route keys must not be listed by two policies: a call would not know its breaker.
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, policy) in &raw.policies {
            for key in policy.get_ref().routes.keys() {
                if let Some(other) = seen.insert(key.get_ref().as_str(), name.get_ref().as_str()) {
                    errors.push(src.error_at(
                        key.span(),
                        format!(
                            "policies.{}.routes: {:?} is already served by policy {other:?}",
                            name.get_ref(),
                            key.get_ref()
                        ),
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(PolicyFile {
            file: src.name().to_owned(),
            policies,
            default_policy,
        })
    } else {
        Err(errors)
    }
}

/// Validates one policy (already merged with its defaults) and builds its layer configs.
/// `path` prefixes every problem (`policies.payments`, `policy`).
pub(crate) fn build_policy(
    src: &SourceFile,
    path: &str,
    name: &Sp<String>,
    raw: &Sp<RawPolicy>,
) -> Result<PolicySpec, Vec<InputError>> {
    let mut errors = Vec::new();
    let p = raw.get_ref();
    let policy_name = name.get_ref().trim().to_owned();
    if policy_name.is_empty() {
        errors.push(src.error_at(name.span(), format!("{path}: a policy needs a name")));
    }

    // Routes: the default route from the policy's own keys, then each listed route.
    let default_spec = RouteSpec {
        key: "default".into(),
        slow_call_duration: p.slow_call_duration.as_ref().map(|d| d.get_ref().0),
        timeout: None,
        count_throttling: p.count_throttling.as_ref().is_some_and(|c| *c.get_ref()),
        retry: true,
        idempotent: None,
        failure_statuses: list(&p.failure_statuses),
        success_statuses: list(&p.success_statuses),
        ignored_statuses: list(&p.ignored_statuses),
    };
    check_statuses(
        src,
        path,
        p.failure_statuses.as_ref(),
        "failure_statuses",
        &mut errors,
    );
    check_statuses(
        src,
        path,
        p.success_statuses.as_ref(),
        "success_statuses",
        &mut errors,
    );
    check_statuses(
        src,
        path,
        p.ignored_statuses.as_ref(),
        "ignored_statuses",
        &mut errors,
    );
    let mut specs = vec![default_spec.clone()];
    let mut builder = RouteTable::builder(route_of(&default_spec));
    for (key, r) in &p.routes {
        let rr = r.get_ref();
        let rpath = format!("{path}.routes.{:?}", key.get_ref());
        for (field, value) in [
            ("failure_statuses", &rr.failure_statuses),
            ("success_statuses", &rr.success_statuses),
            ("ignored_statuses", &rr.ignored_statuses),
        ] {
            check_statuses(src, &rpath, value.as_ref(), field, &mut errors);
        }
        let spec = RouteSpec {
            key: key.get_ref().clone(),
            slow_call_duration: rr
                .slow_call_duration
                .as_ref()
                .map(|d| d.get_ref().0)
                .or(default_spec.slow_call_duration),
            timeout: rr.timeout.as_ref().map(|d| d.get_ref().0),
            count_throttling: rr
                .count_throttling
                .as_ref()
                .map_or(default_spec.count_throttling, |c| *c.get_ref()),
            retry: rr.retry.as_ref().is_none_or(|c| *c.get_ref()),
            idempotent: rr.idempotent.as_ref().map(|c| *c.get_ref()),
            failure_statuses: rr.failure_statuses.as_ref().map_or_else(
                || default_spec.failure_statuses.clone(),
                |v| v.get_ref().clone(),
            ),
            success_statuses: rr.success_statuses.as_ref().map_or_else(
                || default_spec.success_statuses.clone(),
                |v| v.get_ref().clone(),
            ),
            ignored_statuses: rr.ignored_statuses.as_ref().map_or_else(
                || default_spec.ignored_statuses.clone(),
                |v| v.get_ref().clone(),
            ),
        };
        builder = builder.route(key.get_ref().clone(), route_of(&spec));
        specs.push(spec);
    }
    let routes = match builder.build() {
        Ok(t) => Some(t),
        Err(e) => {
            for problem in e.problems() {
                let (span, field) = route_problem_span(raw, problem.path());
                let shown = match field {
                    Some(f) => format!("{path}.{f}"),
                    None => format!("{path}.{}", problem.path()),
                };
                errors.push(src.error_at(span, format!("{shown}: {}", problem.rule())));
            }
            None
        }
    };

    let breaker = p.breaker.as_ref().and_then(|b| {
        let r = b.get_ref();
        let cfg = breaker_config(&policy_name, r);
        collect(src, &format!("{path}.breaker"), b, cfg, &mut errors, |f| {
            let first = f.split('.').next().unwrap_or(f);
            let field = match first {
                "open_wait_multiplier" if r.open_wait_multiplier.is_none() => "max_open_wait",
                other => other,
            };
            r.span_of(field)
        })
    });
    let timeout = p.timeout.as_ref().and_then(|t| {
        let r = t.get_ref();
        let mut b = TimeoutConfig::builder();
        if let Some(d) = &r.default_timeout {
            b = b.default_timeout(d.get_ref().0);
        }
        if let Some(d) = &r.body_timeout {
            b = b.body_timeout(d.get_ref().0);
        }
        collect(
            src,
            &format!("{path}.timeout"),
            t,
            b.build(),
            &mut errors,
            |f| r.span_of(f),
        )
    });
    let limit = p.limit.as_ref().and_then(|l| {
        let r = l.get_ref();
        let mut b = ConcurrencyLimitConfig::builder().name(policy_name.clone());
        match &r.max_concurrency {
            Some(n) => b = b.max_concurrency(*n.get_ref()),
            None => {
                errors.push(src.error_at(
                    l.span(),
                    format!("{path}.limit.max_concurrency: required (the most calls in flight)"),
                ));
                return None;
            }
        }
        if let Some(q) = &r.queue {
            let q = q.get_ref();
            b = b.queue(q.max_waiters, q.max_wait.0);
        }
        if let Some(d) = &r.retry_after {
            b = b.retry_after(d.get_ref().0);
        }
        collect(
            src,
            &format!("{path}.limit"),
            l,
            b.build(),
            &mut errors,
            |f| r.span_of(f.split('.').next().unwrap_or(f)),
        )
    });
    let retry = p.retry.as_ref().and_then(|t| {
        let r = t.get_ref();
        let mut b = RetryConfig::builder().name(policy_name.clone());
        macro_rules! set {
            ($($field:ident),*) => {$(
                if let Some(v) = &r.$field {
                    b = b.$field(v.get_ref().clone().into());
                }
            )*};
        }
        set!(
            max_attempts,
            retry_ratio,
            min_retries_per_second,
            cutoff_minimum_calls
        );
        if let Some(v) = &r.failure_rate_threshold {
            b = b.failure_rate_threshold(Some(*v.get_ref()));
        }
        if let Some(v) = &r.ttl {
            b = b.ttl(v.get_ref().0);
        }
        if let Some(v) = &r.base_delay {
            b = b.base_delay(v.get_ref().0);
        }
        if let Some(v) = &r.max_delay {
            b = b.max_delay(v.get_ref().0);
        }
        if let Some(v) = &r.max_retry_after {
            b = b.max_retry_after(v.get_ref().0);
        }
        if let Some(v) = &r.seed {
            b = b.seed(Some(*v.get_ref()));
        }
        collect(
            src,
            &format!("{path}.retry"),
            t,
            b.build(),
            &mut errors,
            |f| r.span_of(f),
        )
    });

    match routes {
        Some(routes) if errors.is_empty() => Ok(PolicySpec {
            name: policy_name,
            routes,
            route_specs: specs,
            breaker,
            timeout,
            limit,
            retry,
            raw_breaker: p.breaker.as_ref().map(|b| b.get_ref().clone()),
        }),
        _ => Err(errors),
    }
}

fn list(v: &Option<Sp<Vec<u16>>>) -> Vec<u16> {
    v.as_ref().map(|v| v.get_ref().clone()).unwrap_or_default()
}

fn check_statuses(
    src: &SourceFile,
    path: &str,
    value: Option<&Sp<Vec<u16>>>,
    field: &str,
    errors: &mut Vec<InputError>,
) {
    if let Some(v) = value {
        for code in v.get_ref() {
            if !(100..=999).contains(code) {
                errors.push(src.error_at(
                    v.span(),
                    format!("{path}.{field}: {code} is not an HTTP status (100..=999)"),
                ));
            }
        }
    }
}

/// The classify crate's route for a spec.
fn route_of(spec: &RouteSpec) -> Route<StandardClassifier> {
    let mut http = HttpClassifier::new().count_too_many_requests(spec.count_throttling);
    for &c in &spec.failure_statuses {
        http = http.failure(c);
    }
    for &c in &spec.success_statuses {
        http = http.success(c);
    }
    for &c in &spec.ignored_statuses {
        http = http.ignore(c);
    }
    let classifier = StandardClassifier::new()
        .count_throttling(spec.count_throttling)
        .http(http);
    let mut route = Route::new(classifier).retry(spec.retry);
    if let Some(d) = spec.slow_call_duration {
        route = route.slow_call_duration(d);
    }
    if let Some(d) = spec.timeout {
        route = route.timeout(d);
    }
    if let Some(i) = spec.idempotent {
        route = route.idempotent(i);
    }
    route
}

/// Where a route table problem sits: `routes["KEY"].field` → that route's field.
fn route_problem_span(raw: &Sp<RawPolicy>, problem: &str) -> (Range<usize>, Option<String>) {
    let p = raw.get_ref();
    if let Some(rest) = problem.strip_prefix("default_route") {
        let field = rest.trim_start_matches('.');
        let span = p
            .slow_call_duration
            .as_ref()
            .filter(|_| field == "slow_call_duration")
            .map(|d| d.span())
            .unwrap_or_else(|| raw.span());
        return (span, Some(field.to_owned()).filter(|f| !f.is_empty()));
    }
    for (key, r) in &p.routes {
        let prefix = format!("routes[{:?}]", key.get_ref());
        if let Some(rest) = problem.strip_prefix(&prefix) {
            let field = rest.trim_start_matches('.');
            let span = r.get_ref().span_of(field).unwrap_or_else(|| key.span());
            let shown = if field.is_empty() {
                format!("routes.{:?}", key.get_ref())
            } else {
                format!("routes.{:?}.{field}", key.get_ref())
            };
            return (span, Some(shown));
        }
    }
    (raw.span(), None)
}

fn collect<T, R>(
    src: &SourceFile,
    path: &str,
    section: &Sp<R>,
    result: Result<T, ConfigError>,
    errors: &mut Vec<InputError>,
    span_of: impl Fn(&str) -> Option<Range<usize>>,
) -> Option<T> {
    match result {
        Ok(t) => Some(t),
        Err(e) => {
            for problem in e.problems() {
                let span = span_of(problem.path()).unwrap_or_else(|| section.span());
                errors.push(src.error_at(
                    span,
                    format!("{path}.{}: {}", problem.path(), problem.rule()),
                ));
            }
            None
        }
    }
}

/// Changes to a policy's breaker, for replays and sweeps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BreakerOverrides {
    /// `failure_rate_threshold`, percent.
    pub failure_rate_threshold: Option<u32>,
    /// `slow_call_rate_threshold`, percent.
    pub slow_call_rate_threshold: Option<u32>,
    /// `minimum_calls`.
    pub minimum_calls: Option<u32>,
    /// The window.
    pub window: Option<WindowConfig>,
    /// The jitter's seed, used when the file sets none.
    pub default_seed: Option<u64>,
}

impl PolicySpec {
    /// The policy's breaker with `overrides` applied (and checked); `None` when the policy
    /// has no breaker.
    pub fn breaker_with(
        &self,
        overrides: &BreakerOverrides,
    ) -> Option<Result<CircuitBreakerConfig, ConfigError>> {
        let raw = self.raw_breaker.as_ref()?;
        let mut r = raw.clone();
        let sp = |v| Some(Spanned::new(0..0, v));
        if let Some(v) = overrides.failure_rate_threshold {
            r.failure_rate_threshold = sp(v);
        }
        if let Some(v) = overrides.slow_call_rate_threshold {
            r.slow_call_rate_threshold = sp(v);
        }
        if let Some(v) = overrides.minimum_calls {
            r.minimum_calls = sp(v);
        }
        if let Some(w) = overrides.window {
            r.window = Some(Spanned::new(
                0..0,
                match w {
                    WindowConfig::Count { size } => RawWindow::Count { size },
                    WindowConfig::Time { duration, buckets } => RawWindow::Time {
                        duration: Dur(duration),
                        buckets,
                    },
                },
            ));
        }
        if r.seed.is_none()
            && let Some(seed) = overrides.default_seed
        {
            r.seed = Some(Spanned::new(0..0, seed));
        }
        Some(breaker_config(&self.name, &r))
    }
}

fn breaker_config(name: &str, r: &RawBreaker) -> Result<CircuitBreakerConfig, ConfigError> {
    let mut b = CircuitBreakerConfig::builder(name);
    if let Some(w) = &r.window {
        b = match *w.get_ref() {
            RawWindow::Count { size } => b.count_window(size),
            RawWindow::Time { duration, buckets } => b.time_window(duration.0, buckets),
        };
    }
    macro_rules! set {
        ($($field:ident),*) => {$(
            if let Some(v) = &r.$field {
                b = b.$field(*v.get_ref());
            }
        )*};
    }
    set!(
        minimum_calls,
        failure_rate_threshold,
        slow_call_rate_threshold,
        consecutive_failures,
        permitted_probes,
        probe_successes,
        count_overloaded,
        seed
    );
    if let Some(v) = &r.open_wait {
        b = b.open_wait(v.get_ref().0);
    }
    if let Some(v) = &r.open_wait_jitter {
        b = b.open_wait_jitter(v.get_ref().0);
    }
    if r.open_wait_multiplier.is_some() || r.max_open_wait.is_some() {
        let m = r
            .open_wait_multiplier
            .as_ref()
            .map_or(1.0, |m| *m.get_ref());
        let max = r
            .max_open_wait
            .as_ref()
            .map_or(Duration::from_secs(300), |m| m.get_ref().0);
        b = b.open_wait_growth(m, max);
    }
    if let Some(v) = &r.max_half_open_wait {
        let d = v.get_ref().0;
        // "0s" would be rejected by the builder: keep it so, with this field's name.
        b = b.max_half_open_wait(Some(d));
    }
    if let Some(v) = &r.on_close {
        b = b.on_close(match v.get_ref() {
            RawOnClose::Clear => OnClose::Clear,
            RawOnClose::Keep => OnClose::Keep,
        });
    }
    b.build()
}

// === display ===

/// The effective settings of a policy, as `fusebox check` prints them.
pub fn describe_policy(p: &PolicySpec) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "policy {:?}", p.name);
    match &p.breaker {
        Some(b) => {
            let window = match b.window() {
                WindowConfig::Count { size } => format!("last {size} calls"),
                WindowConfig::Time { duration, buckets } => {
                    format!("last {} in {buckets} buckets", fmt_duration(duration))
                }
            };
            let _ = writeln!(
                s,
                "  breaker   window {window}, minimum_calls {}, failure_rate_threshold {} %, slow_call_rate_threshold {} %",
                b.minimum_calls(),
                b.failure_rate_threshold(),
                b.slow_call_rate_threshold()
            );
            let _ = writeln!(
                s,
                "            open_wait {} + jitter up to {}, permitted_probes {} ({} must succeed), max_half_open_wait {}{}",
                fmt_duration(b.open_wait()),
                fmt_duration(b.open_wait_jitter()),
                b.permitted_probes(),
                b.probe_successes(),
                b.max_half_open_wait()
                    .map_or_else(|| "none".to_owned(), fmt_duration),
                b.consecutive_failures()
                    .map(|n| format!(", consecutive_failures {n}"))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "  breaker   none");
        }
    }
    match &p.timeout {
        Some(t) => {
            let _ = writeln!(
                s,
                "  timeout   default {}{}",
                fmt_duration(t.default_timeout()),
                t.body_timeout()
                    .map(|b| format!(", body {}", fmt_duration(b)))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "  timeout   none");
        }
    }
    match &p.limit {
        Some(l) => {
            let limit = match l.limit() {
                Limit::Fixed(n) => format!("max_concurrency {n}"),
                other => format!("{other:?}"),
            };
            let queue = l.queue().map_or_else(
                || "no queue (fail fast)".to_owned(),
                |q| {
                    format!(
                        "queue {} waiters for at most {}",
                        q.max_waiters(),
                        fmt_duration(q.max_wait())
                    )
                },
            );
            let _ = writeln!(s, "  limit     {limit}, {queue}");
        }
        None => {
            let _ = writeln!(s, "  limit     none");
        }
    }
    match &p.retry {
        Some(r) => {
            let _ = writeln!(
                s,
                "  retry     max_attempts {}, retry_ratio {}, min_retries_per_second {}, backoff {}..{}{}",
                r.max_attempts(),
                r.retry_ratio(),
                r.min_retries_per_second(),
                fmt_duration(r.base_delay()),
                fmt_duration(r.max_delay()),
                r.cutoff_threshold_permille()
                    .map(|c| format!(", cut off at {} % failures", c as f64 / 10.0))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "  retry     none");
        }
    }
    for r in &p.route_specs {
        let mut parts = Vec::new();
        parts.push(format!(
            "slow at {}",
            r.slow_call_duration
                .map_or_else(|| "never".to_owned(), fmt_duration)
        ));
        if let Some(t) = r.timeout {
            parts.push(format!("timeout {}", fmt_duration(t)));
        }
        parts.push(format!(
            "429 {}",
            if r.count_throttling {
                "counts"
            } else {
                "ignored"
            }
        ));
        if !r.retry {
            parts.push("no retries".into());
        }
        if let Some(i) = r.idempotent {
            parts.push(format!("idempotent {i}"));
        }
        for (label, v) in [
            ("failures", &r.failure_statuses),
            ("successes", &r.success_statuses),
            ("ignored", &r.ignored_statuses),
        ] {
            if !v.is_empty() {
                let codes: Vec<String> = v.iter().map(u16::to_string).collect();
                parts.push(format!("{label} +{}", codes.join(",")));
            }
        }
        let _ = writeln!(s, "  route     {:<24} {}", r.key, parts.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<PolicyFile, Vec<String>> {
        load_policy_file(&SourceFile::new("p.toml", text))
            .map_err(|e| e.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration("750ms"), Ok(Duration::from_millis(750)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(
            parse_duration("5 sex")
                .unwrap_err()
                .contains("invalid duration")
        );
        assert_eq!(fmt_duration(Duration::from_millis(750)), "750ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(fmt_duration(Duration::from_secs(2)), "2s");
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn defaults_are_inherited_and_overridden() {
        let f = load(
            r#"
[defaults]
slow_call_duration = "500ms"
[defaults.breaker]
minimum_calls = 10
failure_rate_threshold = 40
[policies.a.breaker]
failure_rate_threshold = 60
[policies.b]
slow_call_duration = "1s"
[policies.b.routes."GET /x"]
timeout = "2s"
"#,
        )
        .unwrap();
        let a = f.get("a").unwrap().breaker.clone().unwrap();
        assert_eq!((a.minimum_calls(), a.failure_rate_threshold()), (10, 60));
        let b = f.get("b").unwrap();
        assert_eq!(b.breaker.as_ref().unwrap().failure_rate_threshold(), 40);
        assert_eq!(b.route_specs[1].key, "GET /x");
        assert_eq!(
            b.route_specs[1].slow_call_duration,
            Some(Duration::from_secs(1))
        );
        assert_eq!(b.route_specs[1].timeout, Some(Duration::from_secs(2)));
        assert!(b.timeout.is_none());
    }

    #[test]
    fn every_problem_is_reported_with_its_line_and_path() {
        let errors = load(
            r#"[policies.a.breaker]
failure_rate_threshold = 150
minimum_calls = 0
[policies.a.limit]
max_concurrency = 0
[policies.a.routes."G@T /x"]
timeout = "1s"
"#,
        )
        .unwrap_err();
        assert_eq!(
            errors,
            [
                "p.toml:6:20: policies.a.routes.\"G@T /x\": `G@T` is not an HTTP method",
                "p.toml:3:17: policies.a.breaker.minimum_calls: must be at least 1, got 0",
                "p.toml:2:26: policies.a.breaker.failure_rate_threshold: must be within 1..=100, got 150",
                "p.toml:5:19: policies.a.limit.max_concurrency: must be at least 1, got 0",
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn syntax_and_unknown_keys_are_located() {
        let errors = load("[policies.a.breaker]\nfailure_rate = 50\n").unwrap_err();
        assert!(
            errors[0].starts_with("p.toml:2:1: unknown field `failure_rate`"),
            "{errors:?}"
        );
        let errors = load("[policies.a]\nslow_call_duration = \"5 sex\"\n").unwrap_err();
        assert!(
            errors[0].starts_with("p.toml:2:22: invalid duration"),
            "{errors:?}"
        );
        let errors = load("[policies.a\n").unwrap_err();
        assert!(errors[0].starts_with("p.toml:1:"), "{errors:?}");
        let errors = load("").unwrap_err();
        assert_eq!(errors, ["p.toml: no policies: add a [policies.NAME] table"]);
        let errors = load("default_policy = \"b\"\n[policies.a]\n").unwrap_err();
        assert_eq!(
            errors,
            ["p.toml:1:18: default_policy: no policy named \"b\""]
        );
    }
}
