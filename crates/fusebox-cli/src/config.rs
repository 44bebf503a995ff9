//! Policy files: read and built by the `fusebox` facade's loader, located to the line.
//!
//! The command reads the same policy files a service does: TOML or YAML (a `.json` file is
//! read as the YAML it is) with shared `[defaults]` and named `[policies.NAME]`, each with
//! `breaker`, `limit`, `timeout`, `retry`, `recovery_ramp`, `default_route` and
//! `routes."METHOD /path"` sections (see [`fusebox::config`] for every key). The facade
//! checks the file, reports every problem at its path and builds each policy; this module
//! adds the position of each problem in the file (`policies.toml:12:26:
//! policies.payments.breaker.failure_rate_threshold: must be within 1..=100, got 150`) and
//! keeps each built [`fusebox::Policy`] — its route table and its layers' configurations,
//! which drills, replays and sweeps read — with where each route setting came from
//! ([`fusebox::config::PolicyFile::explain`]), which `fusebox check` prints.
//!
//! ```toml
//! [defaults.breaker]
//! count_window = 100
//! minimum_calls = 20
//! failure_rate_threshold = 50
//! open_wait = "10s"
//!
//! [policies.payments.default_route]
//! slow_call_duration = "500ms"
//!
//! [policies.payments.timeout]
//! default_timeout = "800ms"
//!
//! [policies.payments.routes."POST /charges"]
//! slow_call_duration = "1s"
//! count_throttling = true
//! ```

use crate::input::{InputError, SourceFile};
use fusebox::config::{PolicyFile, RouteExplanation, Syntax};
use fusebox::{KeyBy, Policy};
use fusebox_breaker::{CircuitBreakerConfig, WindowConfig};
use fusebox_classify::section::{RouteSection, Section, format_duration};
use fusebox_classify::{ConfigError, RouteTable, StandardClassifier};
use fusebox_limit::{ConcurrencyLimitConfig, Limit};
use fusebox_retry::RetryConfig;
use fusebox_timeout::TimeoutConfig;
use std::fmt::Write as _;
use std::ops::Range;

/// Changes to a policy's breaker, for replays and sweeps: applied to the built
/// configuration ([`CircuitBreakerConfig::to_builder`]) and checked again by the
/// breaker's own rules.
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
    /// The jitter's seed, used when the configuration sets none.
    pub default_seed: Option<u64>,
}

impl BreakerOverrides {
    /// `config` with these changes, or every problem with them (each with its key and
    /// rule, e.g. `minimum_calls: must not exceed the count window's size (10), got 20`).
    pub fn apply(
        &self,
        config: &CircuitBreakerConfig,
    ) -> Result<CircuitBreakerConfig, ConfigError> {
        let mut b = config.to_builder();
        if let Some(window) = self.window {
            b = b.window(window);
        }
        if let Some(x) = self.minimum_calls {
            b = b.minimum_calls(x);
        }
        if let Some(x) = self.failure_rate_threshold {
            b = b.failure_rate_threshold(x);
        }
        if let Some(x) = self.slow_call_rate_threshold {
            b = b.slow_call_rate_threshold(x);
        }
        if let (None, Some(seed)) = (config.seed(), self.default_seed) {
            b = b.seed(seed);
        }
        b.build()
    }
}

/// One dependency's policy, built by the facade from a file: what a drill wraps its client
/// in and what a replay runs recorded calls through.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// The policy's name.
    pub name: String,
    policy: Policy,
    explained: Vec<RouteExplanation>,
    /// Where the policy's table stands in its file (`policies.NAME`, a scenario's `policy`).
    at: String,
}

impl PolicySpec {
    /// The built policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The routes: classifier, slow threshold, timeout, retry switch.
    pub fn routes(&self) -> &RouteTable<StandardClassifier> {
        self.policy.routes()
    }

    /// The breaker, if the policy has one.
    pub fn breaker(&self) -> Option<&CircuitBreakerConfig> {
        self.policy.breaker_config()
    }

    /// The timeout, if any.
    pub fn timeout(&self) -> Option<&TimeoutConfig> {
        self.policy.timeout_config()
    }

    /// The concurrency limit, if any.
    pub fn limit(&self) -> Option<ConcurrencyLimitConfig> {
        self.policy.limit_config()
    }

    /// The retry budget, if any.
    pub fn retry(&self) -> Option<std::sync::Arc<RetryConfig>> {
        self.policy.retry_config()
    }

    /// Each route's effective settings and where each came from.
    pub fn explained(&self) -> &[RouteExplanation] {
        &self.explained
    }

    /// Whether the breaker is one per route (`breaker.key = "route"`).
    pub fn breaker_per_route(&self) -> bool {
        matches!(self.policy.breaker_key(), Some(KeyBy::Route))
    }

    /// The policy's breaker with `overrides` applied (and checked); `None` when the policy
    /// has no breaker.
    pub fn breaker_with(
        &self,
        overrides: &BreakerOverrides,
    ) -> Option<Result<CircuitBreakerConfig, ConfigError>> {
        self.breaker().map(|b| overrides.apply(b))
    }
}

/// A loaded policy file.
#[derive(Debug, Clone)]
pub struct Policies {
    /// Where it came from.
    pub file: String,
    /// The policies, in file order.
    pub policies: Vec<PolicySpec>,
    /// Which policy serves routes no policy lists (replay's `--default-policy`).
    pub default_policy: Option<usize>,
}

impl Policies {
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

    /// Routes no policy lists go to `name`'s default route.
    pub fn set_default_policy(&mut self, name: &str) -> Result<(), InputError> {
        let i = self
            .policies
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| {
                InputError::new(format!(
                    "--default-policy: {:?} has no policy named {name:?}",
                    self.file
                ))
            })?;
        self.default_policy = Some(i);
        Ok(())
    }

    /// The effective policies as a policy file writes them
    /// ([`fusebox::config::PolicyFileSection`]), every setting written out: read back, it
    /// builds the same policies.
    pub fn file_section(&self) -> fusebox::config::PolicyFileSection {
        let built: Vec<&Policy> = self.policies.iter().map(|p| &p.policy).collect();
        fusebox::config::PolicyFileSection::of(&built)
    }
}

/// Whether `src` is read as YAML: by its name, as the facade's loader decides
/// ([`Syntax::of_path`]); a name of no known extension is read as TOML.
fn is_yaml(src: &SourceFile) -> bool {
    Syntax::of_path(src.name()) == Some(Syntax::Yaml)
}

/// Reads, validates and builds a policy file (TOML, or YAML by its extension), reporting
/// every problem at its position.
pub fn load_policy_file(src: &SourceFile) -> Result<Policies, Vec<InputError>> {
    let yaml = is_yaml(src);
    // The syntax first, for the position of a syntax error (the facade names no position).
    if yaml {
        serde_norway::from_str::<serde_norway::Value>(src.text()).map_err(|e| {
            // At the byte the parser stopped at: its own line and column can lie past the
            // text's end (a line after the last, at the end of a file).
            let offset = e.location().map_or(0, |l| l.index());
            vec![src.error_at(offset..offset, format!("invalid YAML: {e}"))]
        })?;
    } else {
        toml::from_str::<toml::Table>(src.text()).map_err(|e| vec![src.toml_error(&e)])?;
    }
    let syntax = if yaml { Syntax::Yaml } else { Syntax::Toml };
    let file =
        PolicyFile::parse(src.text(), syntax).map_err(|e| locate_problems(src, &e, &[], &[]))?;
    let mut policies = Vec::new();
    let mut errors = Vec::new();
    for name in file.policy_names() {
        match spec_of(&file, name, format!("policies.{name}")) {
            Ok(p) => policies.push(p),
            Err(e) => errors.extend(locate_problems(src, &e, &[], &[])),
        }
    }
    if policies.is_empty() && errors.is_empty() {
        errors.push(src.error("no policies: add a [policies.NAME] table"));
    }
    if errors.is_empty() {
        Ok(Policies {
            file: src.name().to_owned(),
            policies,
            default_policy: None,
        })
    } else {
        Err(errors)
    }
}

/// Builds the policy `name` of `file`, whose table stands at `at`. Drills and replays do
/// not answer for the dependency, but a file may opt routes in to a fallback: those get
/// one that is never called.
fn spec_of(file: &PolicyFile, name: &str, at: String) -> Result<PolicySpec, ConfigError> {
    let mut described = file.policy(name)?;
    if described.wants_fallback() {
        described = described.fallback(fusebox::Fallback::new(|_| {
            http::Response::new(bytes::Bytes::new())
        }));
    }
    Ok(PolicySpec {
        name: name.to_owned(),
        policy: described.build()?,
        explained: file.explain(name)?,
        at,
    })
}

/// Builds one policy from a table written inside another file (a scenario's `[policy]`),
/// read as a file with that one policy: `table_path` is where that table sits in `src`
/// (`["policy"]`), and problems are reported as `policy.breaker.minimum_calls` at their
/// position in `src`.
pub(crate) fn policy_from_table(
    src: &SourceFile,
    table_path: &[&str],
    name: &str,
    table: &toml::Table,
) -> Result<PolicySpec, Vec<InputError>> {
    let mut policies = toml::Table::new();
    policies.insert(name.to_owned(), toml::Value::Table(table.clone()));
    let mut root = toml::Table::new();
    root.insert("policies".into(), toml::Value::Table(policies));
    let text = toml::to_string(&root)
        .map_err(|e| vec![src.error(format!("cannot re-read the policy: {e}"))])?;
    let prefix = ["policies", name];
    let file =
        PolicyFile::from_toml(&text).map_err(|e| locate_problems(src, &e, &prefix, table_path))?;
    spec_of(&file, name, table_path.join("."))
        .map_err(|e| locate_problems(src, &e, &prefix, table_path))
}

/// Splits a problem path (`policies.a.routes["GET /x.y"].timeout`, `phases[2].latency`)
/// into segments: keys, and list indices as their digits.
pub(crate) fn split_path(path: &str) -> Vec<String> {
    /// Whether `s` opens a quoted key (`["`) or an index (`[2]`).
    fn opens_segment(s: &str) -> bool {
        s.starts_with("[\"")
            || s.strip_prefix('[')
                .and_then(|r| r.split_once(']'))
                .is_some_and(|(index, _)| {
                    !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
                })
    }
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("[\"") {
            // A quoted key: up to the closing `"]`, with JSON escapes.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let Some(end) = end else {
                out.push(after.to_owned());
                break;
            };
            let raw = &after[..end];
            out.push(
                serde_json::from_str::<String>(&format!("\"{raw}\"")).unwrap_or(raw.to_owned()),
            );
            rest = after[end + 1..].trim_start_matches(']');
            rest = rest.strip_prefix('.').unwrap_or(rest);
            continue;
        }
        if opens_segment(rest)
            && let Some((index, after)) = rest[1..].split_once(']')
        {
            out.push(index.to_owned());
            rest = after.strip_prefix('.').unwrap_or(after);
            continue;
        }
        // A plain key, up to a dot or a bracket that opens the next segment (a bracket
        // that opens none is part of the key: a name may hold one).
        let end = rest
            .char_indices()
            .skip(1)
            .find(|&(i, c)| c == '.' || (c == '[' && opens_segment(&rest[i..])))
            .map_or(rest.len(), |(i, _)| i);
        let end = if rest.starts_with('.') { 0 } else { end };
        out.push(rest[..end].to_owned());
        rest = &rest[end..];
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    out
}

/// Where a path of keys (and list indices) sits in a TOML source: the deepest part
/// found — a leaf's value (its key, with `at_key`), a table's key, a list item's value.
pub(crate) fn toml_span(text: &str, segments: &[String], at_key: bool) -> Option<Range<usize>> {
    use toml::de::{DeArray, DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let (mut table, mut list): (Option<&DeTable<'_>>, Option<&DeArray<'_>>) =
        (Some(doc.get_ref()), None);
    let mut found = None;
    for (i, seg) in segments.iter().enumerate() {
        let (key, value) = match (table, list) {
            (Some(t), _) => match t.iter().find(|(k, _)| k.get_ref().as_ref() == seg) {
                Some((k, v)) => (Some(k.span()), v),
                None => break,
            },
            (None, Some(l)) => match seg.parse::<usize>().ok().and_then(|n| l.get(n)) {
                Some(v) => (None, v),
                None => break,
            },
            (None, None) => break,
        };
        let leaf =
            i + 1 == segments.len() && !at_key && !matches!(value.get_ref(), DeValue::Table(_));
        found = Some(match key {
            Some(k) if !leaf => k,
            _ => value.span(),
        });
        (table, list) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    found
}

/// Where a path of keys sits in a YAML source, by looking for each key in turn.
fn yaml_offset(text: &str, segments: &[String]) -> Option<usize> {
    let mut from = 0;
    let mut found = None;
    for seg in segments {
        let candidates = [
            format!("{seg}:"),
            format!("\"{seg}\":"),
            format!("'{seg}':"),
        ];
        let hit = candidates
            .iter()
            .filter_map(|c| text[from..].find(c.as_str()).map(|p| (from + p, c.len())))
            .min();
        match hit {
            Some((p, len)) => {
                found = Some(p);
                from = p + len;
            }
            None => break,
        }
    }
    found
}

/// The facade's problems, each at its position in `src`. Paths under `prefix` (the
/// synthetic `policies.NAME` of a scenario's policy) are shown and looked up under
/// `shown` instead.
pub(crate) fn locate_problems(
    src: &SourceFile,
    e: &ConfigError,
    prefix: &[&str],
    shown: &[&str],
) -> Vec<InputError> {
    let yaml = is_yaml(src);
    e.problems()
        .iter()
        .map(|p| {
            let mut segments = split_path(p.path());
            let mut path = p.path().to_owned();
            if !prefix.is_empty()
                && segments
                    .iter()
                    .map(String::as_str)
                    .take(prefix.len())
                    .eq(prefix.iter().copied())
            {
                let rest: Vec<String> = segments.split_off(prefix.len());
                let tail = p.path()[prefix.join(".").len()..].to_owned();
                path = format!("{}{tail}", shown.join("."));
                segments = shown.iter().map(|s| (*s).to_owned()).chain(rest).collect();
            }
            let offset = if yaml {
                yaml_offset(src.text(), &segments)
            } else {
                toml_span(src.text(), &segments, p.rule().starts_with("unknown key"))
                    .map(|r| r.start)
            };
            let reason = format!("{path}: {}", p.rule());
            match offset {
                Some(o) => src.error_at(o..o, reason),
                None => src.error(reason),
            }
        })
        .collect()
}

// === display ===

/// What a keyed breaker's keys are, in words.
fn describe_key(key: &KeyBy) -> String {
    match key {
        KeyBy::Route => "one per route".into(),
        KeyBy::Host => "one per host".into(),
        KeyBy::Authority => "one per authority".into(),
        KeyBy::Header(name) => format!("one per value of the request header {name}"),
        KeyBy::Answered(inner, name) => format!(
            "{}; an answer with {name} counts against the key it names",
            describe_key(inner)
        ),
        _ => "one per key".into(),
    }
}

/// The effective settings of a policy, as `fusebox check` prints them: each layer's
/// configuration as built, and each route's behaviour followed by every setting some
/// level of the file gives it, with that level, and the keys no level writes (built in).
pub fn describe_policy(p: &PolicySpec) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "policy {:?}", p.name);
    match p.breaker() {
        Some(b) => {
            let window = match b.window() {
                WindowConfig::Count { size } => format!("last {size} calls"),
                WindowConfig::Time { duration, buckets } => {
                    format!("last {} in {buckets} buckets", format_duration(duration))
                }
                other => format!("{other:?}"),
            };
            let keyed = match (p.policy.breaker_key(), p.policy.key_spread()) {
                (None, _) => String::new(),
                (Some(key), None) => format!(" ({})", describe_key(key)),
                (Some(key), Some(spread)) => format!(
                    " ({}; around them a dependency-wide breaker that counts a failure only while at least {} % of at least {} keys fail)",
                    describe_key(key),
                    spread.min_failing_key_share() * 100.0,
                    spread.min_keys()
                ),
            };
            let _ = writeln!(
                s,
                "  breaker   {:?}{keyed}: window {window}, minimum_calls {}, failure_rate_threshold {} %, slow_call_rate_threshold {} %",
                b.name(),
                b.minimum_calls(),
                b.failure_rate_threshold(),
                b.slow_call_rate_threshold()
            );
            let _ = writeln!(
                s,
                "            open_wait {} + jitter up to {}, permitted_probes {} ({} must succeed), max_half_open_wait {}{}{}",
                format_duration(b.open_wait()),
                format_duration(b.open_wait_jitter()),
                b.permitted_probes(),
                b.probe_successes(),
                b.max_half_open_wait()
                    .map_or_else(|| "none".to_owned(), format_duration),
                b.consecutive_failures()
                    .map(|n| format!(", consecutive_failures {n}"))
                    .unwrap_or_default(),
                if b.count_overloaded() {
                    ", count_overloaded"
                } else {
                    ""
                }
            );
        }
        None => {
            let _ = writeln!(s, "  breaker   none");
        }
    }
    match p.timeout() {
        Some(t) => {
            let _ = writeln!(
                s,
                "  timeout   default {}{}",
                format_duration(t.default_timeout()),
                t.body_timeout()
                    .map(|b| format!(", body {}", format_duration(b)))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "  timeout   none");
        }
    }
    match p.limit() {
        Some(l) => {
            let limit = match l.limit() {
                Limit::Fixed(n) => format!("max_concurrency {n}"),
                Limit::Aimd(_) => "adaptive limit (AIMD)".to_owned(),
                Limit::Vegas(_) => "adaptive limit (Vegas)".to_owned(),
                other => format!("{other:?}"),
            };
            let queue = l.queue().map_or_else(
                || "no queue (fail fast)".to_owned(),
                |q| {
                    format!(
                        "queue {} waiters for at most {}",
                        q.max_waiters(),
                        format_duration(q.max_wait())
                    )
                },
            );
            let _ = writeln!(s, "  limit     {limit}, {queue}");
        }
        None => {
            let _ = writeln!(s, "  limit     none");
        }
    }
    match p.retry() {
        Some(r) => {
            let _ = writeln!(
                s,
                "  retry     max_attempts {}, retry_ratio {}, min_retries_per_second {}, backoff {}..{}{}",
                r.max_attempts(),
                r.retry_ratio(),
                r.min_retries_per_second(),
                format_duration(r.base_delay()),
                format_duration(r.max_delay()),
                r.failure_rate_threshold()
                    .map(|c| format!(", cut off at {c} % failures"))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "  retry     none");
        }
    }
    if let Some(ramp) = p.policy.recovery_ramp() {
        let _ = writeln!(
            s,
            "  ramp      after the breaker closes: from {} concurrent calls over {}",
            ramp.initial_limit(),
            format_duration(ramp.duration())
        );
    }
    let fallback: Vec<&str> = p.policy.fallback_routes().collect();
    for ((_, name, route), explained) in p.routes().iter().zip(&p.explained) {
        let mut parts = Vec::new();
        parts.push(format!(
            "slow at {}",
            route
                .slow_call_threshold()
                .map_or_else(|| "never".to_owned(), format_duration)
        ));
        if let Some(t) = route.timeout_duration() {
            parts.push(format!("timeout {}", format_duration(t)));
        }
        let too_many = http::StatusCode::TOO_MANY_REQUESTS;
        let counts_429 =
            route.classifier().http_rules().outcome(too_many) == fusebox_classify::Outcome::Failure;
        parts.push(format!(
            "429 {}",
            if counts_429 { "counts" } else { "ignored" }
        ));
        if !route.retry_enabled() {
            parts.push("no retries".into());
        }
        if let Some(i) = route.idempotent_override() {
            parts.push(format!("idempotent {i}"));
        }
        if fallback.contains(&name) {
            parts.push("fallback".into());
        }
        let label = if explained.default { "(default)" } else { name };
        let _ = writeln!(s, "  route     {label:<24} {}", parts.join(", "));
        // Every key the effective section holds, as the file writes it, with its level.
        let mut settings: Vec<(String, String)> = match serde_json::to_value(&explained.section) {
            Ok(serde_json::Value::Object(keys)) => keys
                .into_iter()
                .map(|(key, value)| (key, value.to_string()))
                .collect(),
            _ => Vec::new(),
        };
        if fallback.contains(&name) {
            settings.push(("fallback".to_owned(), "true".to_owned()));
        }
        for (key, value) in &settings {
            let origin = explained.origin(key);
            let from = origin
                .table(&p.at, &explained.route)
                .map_or_else(|| format!("({origin})"), |t| format!("from {t}"));
            let _ = writeln!(s, "{:14}{:<34} {from}", "", format!("{key} = {value}"));
        }
        // The keys no level writes: the summary above gives their built-in behaviour.
        let built_in: Vec<&str> = RouteSection::keys()
            .iter()
            .copied()
            .filter(|key| !settings.iter().any(|(k, _)| k == key))
            .collect();
        if !built_in.is_empty() {
            let _ = writeln!(s, "{:14}built in: {}", "", built_in.join(", "));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn load(name: &str, text: &str) -> Result<Policies, Vec<String>> {
        load_policy_file(&SourceFile::new(name, text))
            .map_err(|e| e.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn paths_split() {
        assert_eq!(
            split_path("policies.a.routes[\"GET /x.y\"].timeout"),
            ["policies", "a", "routes", "GET /x.y", "timeout"]
        );
        assert_eq!(split_path("defaults.breaker"), ["defaults", "breaker"]);
        // List indices, and brackets that open no segment (a name may hold one).
        assert_eq!(
            split_path("phases[2].responses[0].latency"),
            ["phases", "2", "responses", "0", "latency"]
        );
        assert_eq!(
            split_path("policies.a[b.breaker"),
            ["policies", "a[b", "breaker"]
        );
        assert_eq!(split_path("policies.[.x]"), ["policies", "[", "x]"]);
    }

    #[test]
    fn yaml_problems_are_located_past_quoted_keys_and_at_the_end() {
        // A quoted key of characters of several bytes before the problem.
        let errors = load(
            "p.yaml",
            "policies:\n  \"\u{e9}t\u{e9}\":\n    breaker:\n      minimum_calls: 0\n",
        )
        .unwrap_err();
        assert_eq!(
            errors,
            ["p.yaml:4:7: policies.\u{e9}t\u{e9}.breaker.minimum_calls: must be at least 1, got 0"]
        );
        // A syntax error at the end of the file is on its last line.
        let errors = load(
            "p.yaml",
            "policies:\n  a:\n    breaker:\n      count_window: 20\n      m",
        )
        .unwrap_err();
        assert!(
            errors[0].starts_with("p.yaml:5:8: invalid YAML"),
            "{errors:?}"
        );
    }

    #[test]
    fn defaults_are_inherited_and_breakers_rebuilt() {
        let f = load(
            "p.toml",
            r#"
[defaults.breaker]
count_window = 40
minimum_calls = 10
failure_rate_threshold = 40
[policies.a.breaker]
failure_rate_threshold = 60
time_window = "30s"
[policies.b.default_route]
slow_call_duration = "1s"
[policies.b.routes."GET /x"]
timeout = "2s"
"#,
        )
        .unwrap();
        let a = f.get("a").unwrap().breaker().cloned().unwrap();
        assert_eq!((a.minimum_calls(), a.failure_rate_threshold()), (10, 60));
        assert_eq!(
            a.window(),
            WindowConfig::Time {
                duration: Duration::from_secs(30),
                buckets: 10
            }
        );
        let b = f.get("b").unwrap();
        let bb = b.breaker().unwrap();
        assert_eq!(
            (bb.failure_rate_threshold(), bb.window()),
            (40, WindowConfig::Count { size: 40 })
        );
        assert!(f.get("a").unwrap().timeout().is_none());
        assert!(
            b.timeout().is_some(),
            "a route's timeout needs the timeout layer"
        );
        let over = b
            .breaker_with(&BreakerOverrides {
                minimum_calls: Some(5),
                window: Some(WindowConfig::Count { size: 8 }),
                ..BreakerOverrides::default()
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (over.minimum_calls(), over.window()),
            (5, WindowConfig::Count { size: 8 })
        );
        let text = describe_policy(b);
        assert!(text.contains("route     GET /x"), "{text}");
        assert!(text.contains("timeout 2s"), "{text}");
    }

    #[test]
    fn every_problem_is_reported_with_its_line_and_path() {
        let errors = load(
            "p.toml",
            r#"[policies.a.breaker]
failure_rate_threshold = 150
minimum_cals = 0
[policies.a.limit]
max_concurrency = 0
[policies.a.routes."GET /x"]
timeout = "0s"
"#,
        )
        .unwrap_err();
        for expected in [
            "p.toml:3:1: policies.a.breaker.minimum_cals: unknown key",
            "p.toml:2:26: policies.a.breaker.failure_rate_threshold: must be within 1..=100, got 150",
            "p.toml:5:19: policies.a.limit.max_concurrency: must be at least 1, got 0",
            "p.toml:7:11: policies.a.routes[\"GET /x\"].timeout: must be greater than zero",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(expected)),
                "{expected}\nnot in {errors:#?}"
            );
        }
    }

    #[test]
    fn syntax_errors_and_yaml_are_located() {
        let errors = load("p.toml", "[policies.a\n").unwrap_err();
        assert!(errors[0].starts_with("p.toml:1:"), "{errors:?}");
        let errors = load("p.toml", "").unwrap_err();
        assert_eq!(errors, ["p.toml: no policies: add a [policies.NAME] table"]);
        let f = load(
            "p.yaml",
            "policies:\n  a:\n    breaker:\n      minimum_calls: 5\n",
        )
        .unwrap();
        assert_eq!(f.policies[0].breaker().unwrap().minimum_calls(), 5);
        let errors = load(
            "p.yaml",
            "policies:\n  a:\n    breaker:\n      minimum_calls: 0\n",
        )
        .unwrap_err();
        assert_eq!(
            errors,
            ["p.yaml:4:7: policies.a.breaker.minimum_calls: must be at least 1, got 0"]
        );
    }
}
