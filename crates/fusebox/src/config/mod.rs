//! Policies from configuration files: TOML (feature `toml`) and YAML (feature `yaml`).
//!
//! In the spirit of resilience4j's `instances:`, a file holds shared `defaults` and named
//! `policies` that inherit them and override what differs, key by key:
//!
//! ```toml
//! [defaults.breaker]
//! failure_rate_threshold = 50
//! open_wait = "30s"
//!
//! [defaults.timeout]
//! default_timeout = "2s"
//!
//! [policies.fraud-eu.breaker]
//! failure_rate_threshold = 25           # overrides the default; open_wait is inherited
//!
//! [policies.fraud-eu.limit]
//! max_concurrency = 64
//!
//! [policies.fraud-eu.routes."POST /score"]
//! timeout = "150ms"
//! count_throttling = true               # this partner's 429s mean it is struggling
//! retry = false
//! ```
//!
//! # What is checked
//!
//! Reading a file checks everything and reports **every** problem at once, each with its
//! path and the rule it breaks — unknown keys (a typo must not silently keep a default),
//! values of the wrong type, values out of range, and settings that do not fit together:
//!
//! ```text
//! invalid configuration (2 problems);
//! policies.fraud-eu.breaker.failure_rate_threshold: must be within 1..=100, got 150;
//! defaults.timeout.default_timout: unknown key; did you mean `default_timeout`?
//! ```
//!
//! A value inherited from `defaults` is reported where it is written (`defaults....`),
//! once, however many policies inherit it. The same checks are open to other files:
//! see [`check`].
//!
//! # The keys
//!
//! A policy (and `defaults`) has up to seven sections; a policy uses a layer when it or
//! the defaults have its section, unless the policy says `enabled = false`. Durations are
//! strings with a unit (`"250ms"`, `"30s"`, `"1m 30s"`). Each key is the builder method of
//! the same name, with the same default and the same rule.
//!
//! | section | keys |
//! |---|---|
//! | `breaker` | `enabled`, `name` (default: the policy's), `count_window` or `time_window` + `time_window_buckets`, `minimum_calls`, `failure_rate_threshold` (percent), `slow_call_rate_threshold` (percent), `consecutive_failures`, `open_wait`, `open_wait_jitter`, `open_wait_multiplier`, `max_open_wait`, `permitted_probes`, `probe_successes`, `max_half_open_wait` (or `"none"`), `on_close` (`"clear"`, `"keep"`), `count_overloaded`, `seed`, `key` (`"host"`, `"authority"`, `"route"`: one breaker per key), `max_keys`, `idle_timeout`, `store` (a table, below) |
//! | `breaker.store` | `kind` (`"memory"`, `"redis"`; required), and for Redis: `url` (required), `scope` (`"dep:<name>"`, optionally `":region:<r>"`, `":tenant:<t>"`; default: the breaker's name as the dependency), `prefix`, `mode` (`"batched"`, `"strict"`), `flush_interval`, `timeout`, `poll_interval`, `retry_interval`, `probe_lease`, `idle_ttl`, `max_in_flight`, `fallback` (`"local"`, `"fail_open"`, `"fail_closed"`), `shared_keys` (a list: the keys of a keyed breaker that the fleet shares) — see [Breaker state on Redis](#breaker-state-on-redis) |
//! | `limit` | `enabled`, `name`, `max_concurrency` or `adaptive` (a table: `algorithm` = `"aimd"` or `"vegas"`, `min_limit`, `max_limit`, `initial_limit`, `backoff_ratio`; AIMD: `additive_increase`; Vegas: `smoothing`, `alpha`, `beta`, `probe_interval`, `probe_samples`), `queue` (`max_waiters`, `max_wait`), `release` (`"response"`, `"end_of_body"`), `retry_after`, `log_step` |
//! | `timeout` | `enabled`, `default_timeout`, `body_timeout` (applied by [`Policy::body_timeout_layer`](crate::Policy::body_timeout_layer) around the policy's service), `propagate_grpc_timeout`, `deadline_header` |
//! | `retry` | `enabled`, `name`, `retry_ratio`, `min_retries_per_second`, `ttl`, `failure_rate_threshold` (a share, or `"none"`), `cutoff_minimum_calls`, `max_attempts`, `base_delay`, `max_delay`, `max_retry_after`, `max_replay_body_bytes`, `hedge_delay`, `seed` |
//! | `recovery_ramp` | `enabled`, `initial_limit`, `duration` |
//! | `default_route`, `routes."<route>"` | `timeout`, `slow_call_duration`, `count_throttling` (429 and RESOURCE_EXHAUSTED count as failures), `retry`, `idempotent`, `protocol` (`"auto"`, `"http"`, `"grpc"`), `failure_statuses`, `success_statuses` (lists of HTTP codes), `fallback` |
//!
//! Route keys are those of [`RouteTable`]: `"GET /users/{id}"`,
//! `"/users/{id}"` (any method), `"/pkg.Service/Method"`. A policy's routes are the
//! defaults' routes and its own; a route in both merges key by key.
//!
//! Inheritance is key by key within a section, with two exceptions that replace rather
//! than merge: the nested tables `limit.adaptive` and `limit.queue`, and the choice between
//! `max_concurrency` and `adaptive` (or `count_window` and `time_window`), which the most
//! specific level that makes it decides.
//!
//! # Breaker state on Redis
//!
//! A breaker's `store` says where its state lives. By default (`kind = "memory"`) each
//! replica's breaker judges the calls that replica made. With `kind = "redis"` (feature
//! `redis`) every replica whose file names the same Redis and scope shares one breaker:
//! one window, one state, one half-open probe budget, fleet-wide (see `fusebox::redis`
//! for how, and its staleness bounds):
//!
//! ```toml
//! [defaults.breaker.store]              # every policy's breaker on this Redis...
//! kind = "redis"
//! url = "redis://cache:6379/0"
//! mode = "batched"
//! flush_interval = "5ms"
//! timeout = "50ms"
//!
//! [policies.payments.breaker.store]
//! scope = "dep:payments:region:eu"      # ...each in its own key space (default: dep:<name>)
//!
//! [policies.ledger.breaker.store]
//! kind = "memory"                       # ...but this one, which stays local
//! ```
//!
//! The section sits under `breaker` because the breaker is the one layer whose state a
//! fleet can share — the limit, the retry budget and the timeout are about this process —
//! and so that it is inherited from `defaults.breaker.store` key by key like the rest of
//! the breaker: one Redis for every policy, one scope per policy. Building a policy
//! connects to nothing and never waits on Redis; until Redis answers, and whenever it does
//! not, each replica decides on its own calls (the store's `fallback`), so an outage of
//! Redis never fails a call by itself.
//!
//! Every problem is reported at its path: the store's own rules
//! (`policies.payments.breaker.store.flush_interval: must be within 1ms..=1s, got 0ns`) and
//! how it fits the breaker — a keyed breaker must list its `shared_keys` (keys computed
//! from requests never reach Redis otherwise), an unkeyed one must list none, a breaker
//! keyed by route cannot share (route names are not valid scope parts), and the breaker's
//! name must be a valid scope part when `scope` does not name the dependency. Without the
//! `redis` feature, `kind = "redis"` is an error naming the feature.
//!
//! # Hooks that only code can give
//!
//! A route's `fallback = true` opts it in to the policy's fallback *function*, which is
//! code: [`PolicyFile::policy`] returns a [`FilePolicy`] to add it to (and breaker event
//! listeners, a custom breaker key) before building. Building a policy whose routes ask for
//! a fallback without giving one is an error.
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "toml")] {
//! use fusebox::config::PolicyFile;
//!
//! let file = PolicyFile::from_toml(r#"
//!     [defaults.breaker]
//!     minimum_calls = 10
//!
//!     [policies.payments.breaker]
//!     failure_rate_threshold = 25
//!
//!     [policies.payments.timeout]
//!     default_timeout = "500ms"
//! "#)?;
//! let payments = file.build("payments")?;
//! assert!(payments.breaker_handle().is_some());
//!
//! let err = PolicyFile::from_toml(r#"
//!     [policies.payments.breaker]
//!     failure_rate_threshold = 150
//!     minimum_cals = 10
//! "#).unwrap_err();
//! let problems: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
//! assert_eq!(problems, [
//!     "policies.payments.breaker.minimum_cals: unknown key; did you mean `minimum_calls`?",
//!     "policies.payments.breaker.failure_rate_threshold: must be within 1..=100, got 150",
//! ]);
//! # }
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

pub mod check;
mod node;
mod schema;

use self::node::Node;
use self::schema::{
    ADAPTIVE, AIMD_ONLY, BREAKER, Field, LIMIT, POLICY, QUEUE, RAMP, RETRY, ROUTE, STORE, TIMEOUT,
    VEGAS_ONLY, check_table, join,
};
use crate::policy::{BreakerStore, Fallback, KeyBy, Policy, PolicyBuilder, RecoveryRamp};
use fusebox_breaker::{BreakerEvent, CircuitBreakerConfig, OnClose};
use fusebox_classify::Protocol;
use fusebox_classify::{
    ConfigError, HttpClassifier, Problem, Route, RouteTable, StandardClassifier, Validator,
};
use fusebox_limit::{AimdConfig, ConcurrencyLimitConfig, Release, VegasConfig};
use fusebox_retry::RetryConfig;
use fusebox_timeout::TimeoutConfig;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// A checked policy file: shared `defaults` and named `policies`. See the
/// [module docs](self) for the format.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    root: Node,
    names: Vec<String>,
}

impl PolicyFile {
    /// Reads and checks a TOML policy file.
    #[cfg(feature = "toml")]
    #[cfg_attr(docsrs, doc(cfg(feature = "toml")))]
    pub fn from_toml(text: &str) -> Result<PolicyFile, ConfigError> {
        let root: Node = toml::from_str(text)
            .map_err(|e| ConfigError::new("file", format!("is not valid TOML: {e}")))?;
        PolicyFile::from_node(root)
    }

    /// Reads and checks a YAML policy file.
    #[cfg(feature = "yaml")]
    #[cfg_attr(docsrs, doc(cfg(feature = "yaml")))]
    pub fn from_yaml(text: &str) -> Result<PolicyFile, ConfigError> {
        let root: Node = serde_norway::from_str(text)
            .map_err(|e| ConfigError::new("file", format!("is not valid YAML: {e}")))?;
        PolicyFile::from_node(root)
    }

    /// Reads and checks a policy file, TOML or YAML by its extension (`.toml`, `.yaml`,
    /// `.yml`).
    pub fn load(path: impl AsRef<Path>) -> Result<PolicyFile, ConfigError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(shown.clone(), format!("cannot be read: {e}")))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let parsed = match ext {
            #[cfg(feature = "toml")]
            "toml" => PolicyFile::from_toml(&text),
            #[cfg(feature = "yaml")]
            "yaml" | "yml" => PolicyFile::from_yaml(&text),
            other => Err(ConfigError::new(
                "file",
                format!(
                    "has extension {other:?}: expected one of {}",
                    SUPPORTED.join(", ")
                ),
            )),
        };
        parsed.map_err(|e| with_file(e, &shown))
    }

    fn from_node(root: Node) -> Result<PolicyFile, ConfigError> {
        let mut v = Validator::new();
        let mut names = Vec::new();
        match root.as_map() {
            None => v.fail("file", format!("must be a table, got {}", root.kind())),
            Some(entries) => {
                for (key, value) in entries {
                    match key.as_str() {
                        "defaults" => check_policy(value, "defaults", &mut v),
                        "policies" => match value.as_map() {
                            None => v.fail(
                                "policies",
                                format!("must be a table of policies, got {}", value.kind()),
                            ),
                            Some(policies) => {
                                for (name, policy) in policies {
                                    check_policy(policy, &format!("policies.{name}"), &mut v);
                                    names.push(name.clone());
                                }
                            }
                        },
                        other => v.fail(other, schema::unknown_key(other, schema::TOP)),
                    }
                }
            }
        }
        let file = PolicyFile { root, names };
        // Types are checked; now what each policy describes, with every layer's rules.
        let mut seen: Vec<Problem> = Vec::new();
        let mut problems = v.finish(()).err();
        for name in &file.names {
            // The fallback function is code, given later: stand in for it.
            let placeholder =
                Fallback::new(|_| http::Response::new(bytes::Bytes::new())).all_routes();
            // Checking only: a store on Redis is checked, not connected to.
            let FilePolicy { builder, origins } = file.read(name);
            let check = builder.fallback(placeholder).check_only();
            if let Err(e) = check.build().map_err(|e| origins.map_error(e)) {
                for p in e.problems() {
                    if !seen.contains(p) {
                        seen.push(p.clone());
                        let one = ConfigError::new(p.path(), p.rule());
                        match &mut problems {
                            Some(all) => all.extend(one),
                            None => problems = Some(one),
                        }
                    }
                }
            }
        }
        match problems {
            Some(e) => Err(e),
            None => Ok(file),
        }
    }

    /// The names of the file's policies, in file order.
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The policy `name` as the file describes it, to add what only code can give
    /// (a fallback function, event listeners, a custom breaker key) before building.
    pub fn policy(&self, name: &str) -> Result<FilePolicy, ConfigError> {
        if !self.names.iter().any(|n| n == name) {
            return Err(ConfigError::new(
                "policies",
                format!(
                    "has no policy named {name:?}; the file has: {}",
                    if self.names.is_empty() {
                        "none".to_owned()
                    } else {
                        self.names.join(", ")
                    }
                ),
            ));
        }
        Ok(self.read(name))
    }

    /// Builds the policy `name` as the file describes it.
    pub fn build(&self, name: &str) -> Result<Policy, ConfigError> {
        self.policy(name)?.build()
    }

    fn read(&self, name: &str) -> FilePolicy {
        let own = self.root.get("policies").and_then(|p| p.get(name));
        let defaults = self.root.get("defaults");
        let prefix = format!("policies.{name}");
        let levels: Vec<(&str, &Node)> = [(prefix.as_str(), own), ("defaults", defaults)]
            .into_iter()
            .filter_map(|(p, n)| n.map(|n| (p, n)))
            .collect();
        let mut origins = Origins {
            policy: prefix.clone(),
            map: HashMap::new(),
        };
        origins.record(&levels);
        let builder = describe(name, &levels);
        FilePolicy { builder, origins }
    }
}

#[cfg(all(feature = "toml", feature = "yaml"))]
const SUPPORTED: &[&str] = &["toml", "yaml", "yml"];
#[cfg(all(feature = "toml", not(feature = "yaml")))]
const SUPPORTED: &[&str] = &["toml"];
#[cfg(all(feature = "yaml", not(feature = "toml")))]
const SUPPORTED: &[&str] = &["yaml", "yml"];
#[cfg(not(any(feature = "toml", feature = "yaml")))]
const SUPPORTED: &[&str] = &[];

fn with_file(e: ConfigError, file: &str) -> ConfigError {
    let mut problems = e.problems().iter();
    let rewrite = |p: &Problem| {
        if p.path() == "file" {
            ConfigError::new(file, p.rule())
        } else {
            ConfigError::new(p.path(), p.rule())
        }
    };
    let Some(first) = problems.next() else {
        return e;
    };
    let mut out = rewrite(first);
    for p in problems {
        out.extend(rewrite(p));
    }
    out
}

/// Checks one policy (or `defaults`) table: known sections, known keys, value types, and
/// the settings that exclude each other within one table.
fn check_policy(node: &Node, path: &str, v: &mut Validator) {
    check_table(node, path, POLICY, v);
    if let Some(routes) = node.get("routes") {
        let routes_path = join(path, "routes");
        match routes.as_map() {
            None => v.fail(
                routes_path,
                format!("must be a table of routes, got {}", routes.kind()),
            ),
            Some(entries) => {
                for (key, route) in entries {
                    check_table(route, &format!("{path}.routes[{key:?}]"), ROUTE, v);
                }
            }
        }
    }
    if let Some(breaker) = node.get("breaker")
        && breaker.get("count_window").is_some()
        && breaker.get("time_window").is_some()
    {
        v.fail(
            format!("{path}.breaker.time_window"),
            "set either count_window or time_window, not both",
        );
    }
    if let Some(store) = node.get("breaker").and_then(|b| b.get("store"))
        && let Some(Ok("memory")) = store
            .get("kind")
            .map(|k| schema::one_of(k, &["memory", "redis"]))
    {
        for (key, _) in store.as_map().unwrap_or(&[]) {
            if key != "kind" && STORE.iter().any(|(k, _)| k == key) {
                v.fail(
                    format!("{path}.breaker.store.{key}"),
                    "only read with kind = \"redis\"",
                );
            }
        }
    }
    if let Some(limit) = node.get("limit") {
        if limit.get("max_concurrency").is_some() && limit.get("adaptive").is_some() {
            v.fail(
                format!("{path}.limit.adaptive"),
                "set either max_concurrency or adaptive, not both",
            );
        }
        if let Some(adaptive) = limit.get("adaptive").filter(|a| a.as_map().is_some()) {
            let here = format!("{path}.limit.adaptive");
            match adaptive
                .get("algorithm")
                .map(|a| schema::one_of(a, &["aimd", "vegas"]))
            {
                None => v.fail(join(&here, "algorithm"), "required: \"aimd\" or \"vegas\""),
                Some(Ok(algorithm)) => {
                    let (others, other) = if algorithm == "aimd" {
                        (VEGAS_ONLY, "vegas")
                    } else {
                        (AIMD_ONLY, "aimd")
                    };
                    for key in others {
                        if adaptive.get(key).is_some() {
                            v.fail(
                                join(&here, key),
                                format!(
                                    "only read by algorithm = \"{other}\", not \"{algorithm}\""
                                ),
                            );
                        }
                    }
                }
                // Reported by the type check.
                Some(Err(_)) => {}
            }
        }
    }
}

/// Where each key of a policy's sections comes from: the policy itself or `defaults`.
#[derive(Debug, Clone)]
struct Origins {
    policy: String,
    map: HashMap<String, String>,
}

impl Origins {
    fn record(&mut self, levels: &[(&str, &Node)]) {
        for (prefix, node) in levels {
            for (section, _) in POLICY {
                let Some(table) = node.get(section) else {
                    continue;
                };
                self.insert(section.to_string(), prefix);
                if *section == "routes" {
                    for (key, route) in table.as_map().unwrap_or(&[]) {
                        let route_path = format!("routes[{key:?}]");
                        for (field, _) in route.as_map().unwrap_or(&[]) {
                            self.insert(format!("{route_path}.{field}"), prefix);
                        }
                        self.insert(route_path, prefix);
                    }
                    continue;
                }
                for (field, value) in table.as_map().unwrap_or(&[]) {
                    self.insert(format!("{section}.{field}"), prefix);
                    // `breaker.store` merges key by key: each key has its own origin.
                    if *section == "breaker" && field == "store" {
                        for (key, _) in value.as_map().unwrap_or(&[]) {
                            self.insert(format!("{section}.{field}.{key}"), prefix);
                        }
                    }
                }
            }
        }
    }

    fn insert(&mut self, key: String, prefix: &str) {
        self.map.entry(key).or_insert_with(|| prefix.to_owned());
    }

    /// The file path of a problem that a builder reported at `path`.
    fn locate(&self, path: &str) -> String {
        if path == "name" {
            return self.policy.clone();
        }
        let path = if path == "breaker_key" {
            "breaker.key"
        } else {
            path
        };
        // `routes["GET /a.b"].timeout`: the route key may hold dots.
        let (section, rest) = match path.strip_prefix("routes[") {
            Some(after) => match after.find("\"]") {
                Some(end) => {
                    let split = "routes[".len() + end + 2;
                    (&path[..split], path[split..].strip_prefix('.'))
                }
                None => (path, None),
            },
            None => match path.split_once('.') {
                Some((s, r)) => (s, Some(r)),
                None => (path, None),
            },
        };
        let rest = rest.map(|r| rename(section, r));
        // The most specific recorded key: `breaker.store.url`, else `breaker.store`, else
        // `breaker`.
        let mut fields = rest.as_deref().map(|r| r.split('.')).into_iter().flatten();
        let field = fields.next();
        let nested = field.zip(fields.next());
        let origin = nested
            .and_then(|(f, g)| self.map.get(&format!("{section}.{f}.{g}")))
            .or_else(|| field.and_then(|f| self.map.get(&format!("{section}.{f}"))))
            .or_else(|| self.map.get(section))
            .unwrap_or(&self.policy);
        match rest {
            Some(rest) => format!("{origin}.{section}.{rest}"),
            None => format!("{origin}.{section}"),
        }
    }

    fn map_error(&self, e: ConfigError) -> ConfigError {
        let mut out: Option<ConfigError> = None;
        let mut seen: Vec<(String, String)> = Vec::new();
        for p in e.problems() {
            let path = self.locate(p.path());
            if seen.iter().any(|(a, b)| *a == path && b == p.rule()) {
                continue;
            }
            seen.push((path.clone(), p.rule().to_owned()));
            let one = ConfigError::new(path, p.rule());
            match &mut out {
                Some(all) => all.extend(one),
                None => out = Some(one),
            }
        }
        out.unwrap_or(e)
    }
}

/// The file's name for what a layer's builder calls `path` (the first segment).
fn rename(section: &str, path: &str) -> String {
    let renamed = match section {
        "breaker" => [
            ("window.size", "count_window"),
            ("window.duration", "time_window"),
            ("window.buckets", "time_window_buckets"),
            // The Redis store's scope is one string in a file.
            ("store.scope.dep", "store.scope"),
            ("store.scope.region", "store.scope"),
            ("store.scope.tenant", "store.scope"),
        ]
        .iter()
        .find(|(from, _)| path == *from)
        .map(|(_, to)| (*to).to_owned()),
        "limit" => path
            .strip_prefix("aimd.")
            .or_else(|| path.strip_prefix("vegas."))
            .map(|rest| format!("adaptive.{rest}")),
        _ => None,
    };
    renamed.unwrap_or_else(|| path.to_owned())
}

/// One section of a policy, seen through its levels (the policy first, then `defaults`).
struct Section<'a> {
    levels: Vec<&'a Node>,
}

impl<'a> Section<'a> {
    fn new(levels: &[(&str, &'a Node)], name: &str) -> Self {
        Section {
            levels: levels.iter().filter_map(|(_, n)| n.get(name)).collect(),
        }
    }

    fn of(nodes: Vec<&'a Node>) -> Self {
        Section { levels: nodes }
    }

    fn present(&self) -> bool {
        !self.levels.is_empty()
    }

    fn node(&self, key: &str) -> Option<&'a Node> {
        self.levels.iter().find_map(|n| n.get(key))
    }

    /// The value of `key` from the most specific level that has it. Values of the wrong
    /// type were reported when the file was checked and read as absent here.
    fn get<T>(&self, key: &str, read: impl Fn(&Node) -> Result<T, String>) -> Option<T> {
        self.node(key).and_then(|n| read(n).ok())
    }

    fn u32(&self, key: &str) -> Option<u32> {
        self.get(key, |n| schema::uint(n, u64::from(u32::MAX)))
            .map(|x| x as u32)
    }

    fn usize(&self, key: &str) -> Option<usize> {
        self.get(key, |n| schema::uint(n, u64::from(u32::MAX)))
            .map(|x| x as usize)
    }

    fn u64(&self, key: &str) -> Option<u64> {
        self.get(key, |n| schema::uint(n, u64::MAX))
    }

    fn f64(&self, key: &str) -> Option<f64> {
        self.get(key, schema::float)
    }

    fn bool(&self, key: &str) -> Option<bool> {
        self.get(key, schema::boolean)
    }

    fn duration(&self, key: &str) -> Option<Duration> {
        self.get(key, schema::duration)
    }

    fn string(&self, key: &str) -> Option<String> {
        self.get(key, schema::string)
    }

    fn enabled(&self) -> bool {
        self.present() && self.bool("enabled").unwrap_or(true)
    }

    /// The first level (most specific first) that sets any of `keys`.
    fn deciding(&self, keys: &[&str]) -> Option<&'a Node> {
        self.levels
            .iter()
            .copied()
            .find(|n| keys.iter().any(|k| n.get(k).is_some()))
    }
}

/// The builder a policy's levels describe.
fn describe(name: &str, levels: &[(&str, &Node)]) -> PolicyBuilder {
    let routes = route_table(levels);
    let mut b = Policy::builder(name).routes(routes.table);
    for route in routes.fallback {
        b = b.fallback_route(route);
    }

    let timeout = Section::new(levels, "timeout");
    if timeout.enabled() {
        let mut t = TimeoutConfig::builder();
        if let Some(d) = timeout.duration("default_timeout") {
            t = t.default_timeout(d);
        }
        if let Some(d) = timeout.duration("body_timeout") {
            t = t.body_timeout(d);
        }
        if let Some(p) = timeout.bool("propagate_grpc_timeout") {
            t = t.propagate_grpc_timeout(p);
        }
        if let Some(h) = timeout.string("deadline_header") {
            t = t.deadline_header(h);
        }
        b = b.timeout_config(t);
    }

    let limit = Section::new(levels, "limit");
    if limit.enabled() {
        b = b.concurrency_limit_config(limit_config(&limit, name));
    }

    let breaker = Section::new(levels, "breaker");
    if breaker.enabled() {
        let (config, key) = breaker_config(&breaker, name);
        b = b.circuit_breaker(config);
        if let Some(key) = key {
            b = b.breaker_key(key);
        }
        if let Some(max) = breaker.usize("max_keys") {
            b = b.max_keys(max);
        }
        if let Some(idle) = breaker.duration("idle_timeout") {
            b = b.idle_timeout(idle);
        }
        let store = Section::of(
            breaker
                .levels
                .iter()
                .filter_map(|n| n.get("store"))
                .collect(),
        );
        if store.present() {
            b = b.breaker_store(store_config(&store));
        }
    }

    let retry = Section::new(levels, "retry");
    if retry.enabled() {
        b = b.retry_budget(retry_config(&retry, name));
    }

    let ramp = Section::new(levels, "recovery_ramp");
    if ramp.enabled() {
        b = b.recovery_ramp(RecoveryRamp::new(
            ramp.usize("initial_limit").unwrap_or(1),
            ramp.duration("duration").unwrap_or(Duration::ZERO),
        ));
    }
    b
}

struct Routes {
    table: fusebox_classify::RouteTableBuilder<StandardClassifier>,
    fallback: Vec<String>,
}

fn route_table(levels: &[(&str, &Node)]) -> Routes {
    let mut fallback = Vec::new();
    let default = Section::new(levels, "default_route");
    if default.bool("fallback") == Some(true) {
        fallback.push(fusebox_classify::route::DEFAULT_ROUTE.to_owned());
    }
    let mut table = RouteTable::builder(route(&default));
    // Route keys: the policy's first, then those only the defaults have.
    let mut keys: Vec<&str> = Vec::new();
    for (_, level) in levels {
        for (key, _) in level.get("routes").and_then(Node::as_map).unwrap_or(&[]) {
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
    }
    for key in keys {
        let section = Section::of(
            levels
                .iter()
                .filter_map(|(_, n)| n.get("routes").and_then(|r| r.get(key)))
                .collect(),
        );
        if section.bool("fallback") == Some(true) {
            fallback.push(key.to_owned());
        }
        table = table.route(key, route(&section));
    }
    Routes { table, fallback }
}

fn route(s: &Section<'_>) -> Route {
    let mut http = HttpClassifier::new();
    for code in s
        .get("failure_statuses", schema::statuses)
        .unwrap_or_default()
    {
        http = http.failure(code);
    }
    for code in s
        .get("success_statuses", schema::statuses)
        .unwrap_or_default()
    {
        http = http.success(code);
    }
    let mut classifier = StandardClassifier::new().http(http);
    if let Some(count) = s.bool("count_throttling") {
        classifier = classifier.count_throttling(count);
    }
    if let Some(p) = s.get("protocol", |n| schema::one_of(n, &["auto", "http", "grpc"])) {
        classifier = classifier.protocol(match p {
            "http" => Protocol::Http,
            "grpc" => Protocol::Grpc,
            _ => Protocol::Auto,
        });
    }
    let mut route = Route::new(classifier);
    if let Some(d) = s.duration("timeout") {
        route = route.timeout(d);
    }
    if let Some(d) = s.duration("slow_call_duration") {
        route = route.slow_call_duration(d);
    }
    if let Some(r) = s.bool("retry") {
        route = route.retry(r);
    }
    if let Some(i) = s.bool("idempotent") {
        route = route.idempotent(i);
    }
    route
}

fn breaker_config(
    s: &Section<'_>,
    policy: &str,
) -> (fusebox_breaker::CircuitBreakerConfigBuilder, Option<KeyBy>) {
    let mut b =
        CircuitBreakerConfig::builder(s.string("name").unwrap_or_else(|| policy.to_owned()));
    if let Some(level) = s.deciding(&["count_window", "time_window"]) {
        let one = Section::of(vec![level]);
        if let Some(size) = one.u32("count_window") {
            b = b.count_window(size);
        } else if let Some(duration) = one.duration("time_window") {
            b = b.time_window(duration, s.u32("time_window_buckets").unwrap_or(10));
        }
    }
    if let Some(x) = s.u32("minimum_calls") {
        b = b.minimum_calls(x);
    }
    if let Some(x) = s.u32("failure_rate_threshold") {
        b = b.failure_rate_threshold(x);
    }
    if let Some(x) = s.u32("slow_call_rate_threshold") {
        b = b.slow_call_rate_threshold(x);
    }
    if let Some(x) = s.u32("consecutive_failures") {
        b = b.consecutive_failures(x);
    }
    if let Some(x) = s.duration("open_wait") {
        b = b.open_wait(x);
    }
    if let Some(x) = s.duration("open_wait_jitter") {
        b = b.open_wait_jitter(x);
    }
    let multiplier = s.f64("open_wait_multiplier");
    let max_open = s.duration("max_open_wait");
    if multiplier.is_some() || max_open.is_some() {
        let base = s.duration("open_wait").unwrap_or(Duration::from_secs(30));
        b = b.open_wait_growth(
            multiplier.unwrap_or(1.0),
            max_open.unwrap_or(Duration::from_secs(300).max(base)),
        );
    }
    if let Some(x) = s.u32("permitted_probes") {
        b = b.permitted_probes(x);
    }
    if let Some(x) = s.u32("probe_successes") {
        b = b.probe_successes(x);
    }
    if let Some(x) = s.get("max_half_open_wait", schema::opt_duration) {
        b = b.max_half_open_wait(x);
    }
    if let Some(x) = s.get("on_close", |n| schema::one_of(n, &["clear", "keep"])) {
        b = b.on_close(if x == "keep" {
            OnClose::Keep
        } else {
            OnClose::Clear
        });
    }
    if let Some(x) = s.bool("count_overloaded") {
        b = b.count_overloaded(x);
    }
    if let Some(x) = s.u64("seed") {
        b = b.seed(x);
    }
    let key = s
        .get("key", |n| {
            schema::one_of(n, &["host", "authority", "route"])
        })
        .map(|k| match k {
            "host" => KeyBy::Host,
            "authority" => KeyBy::Authority,
            _ => KeyBy::Route,
        });
    (b, key)
}

/// `breaker.store`: in memory, or on Redis. Problems are reported at the store's keys
/// (`url`, `scope`, `flush_interval`, ...), under `breaker.store`.
fn store_config(s: &Section<'_>) -> Result<BreakerStore, ConfigError> {
    match s.get("kind", |n| schema::one_of(n, &["memory", "redis"])) {
        Some("memory") => Ok(BreakerStore::InMemory),
        Some(_) => redis_store(s),
        // A `kind` of the wrong type was reported when the file was checked.
        None if s.node("kind").is_some() => Ok(BreakerStore::InMemory),
        None => Err(ConfigError::new(
            "kind",
            "is required: \"memory\" or \"redis\"",
        )),
    }
}

#[cfg(not(feature = "redis"))]
fn redis_store(_: &Section<'_>) -> Result<BreakerStore, ConfigError> {
    Err(ConfigError::new(
        "kind",
        "is \"redis\", which needs fusebox's `redis` feature, and this build does not have it: enable the feature, or use kind = \"memory\"",
    ))
}

#[cfg(feature = "redis")]
fn redis_store(s: &Section<'_>) -> Result<BreakerStore, ConfigError> {
    use fusebox_redis::{Fallback as OnOutage, RedisStoreConfig};

    let mut problems: Option<ConfigError> = None;
    let mut fail = |path: &str, rule: String| {
        let one = ConfigError::new(path, rule);
        match &mut problems {
            Some(all) => all.extend(one),
            None => problems = Some(one),
        }
    };
    let url = match s.string("url") {
        Some(url) => url,
        None => {
            // A `url` of the wrong type was reported when the file was checked; check the
            // other keys against a stand-in.
            if s.node("url").is_none() {
                fail(
                    "url",
                    "is required with kind = \"redis\": a URL such as \"redis://127.0.0.1:6379/0\""
                        .into(),
                );
            }
            "redis://127.0.0.1:6379/0".to_owned()
        }
    };
    let mut b = RedisStoreConfig::builder(url);
    if let Some(scope) = s.string("scope") {
        match parse_scope(&scope) {
            Ok(scope) => b = b.scope(scope),
            Err(rule) => fail("scope", rule),
        }
    }
    if let Some(x) = s.string("prefix") {
        b = b.prefix(x);
    }
    match s.get("mode", |n| schema::one_of(n, &["strict", "batched"])) {
        Some("strict") => b = b.strict(),
        _ => {
            if let Some(flush) = s.duration("flush_interval") {
                b = b.batched(flush);
            }
        }
    }
    if let Some(x) = s.duration("timeout") {
        b = b.timeout(x);
    }
    if let Some(x) = s.duration("poll_interval") {
        b = b.poll_interval(x);
    }
    if let Some(x) = s.duration("retry_interval") {
        b = b.retry_interval(x);
    }
    if let Some(x) = s.duration("probe_lease") {
        b = b.probe_lease(x);
    }
    if let Some(x) = s.duration("idle_ttl") {
        b = b.idle_ttl(x);
    }
    if let Some(x) = s.usize("max_in_flight") {
        b = b.max_in_flight(x);
    }
    if let Some(x) = s.get("fallback", |n| {
        schema::one_of(n, &["local", "fail_open", "fail_closed"])
    }) {
        b = b.fallback(match x {
            "fail_open" => OnOutage::FailOpen,
            "fail_closed" => OnOutage::FailClosed,
            _ => OnOutage::Local,
        });
    }
    for key in s.get("shared_keys", check::strings).unwrap_or_default() {
        b = b.share_key(key);
    }
    match (b.build(), problems) {
        (Ok(config), None) => Ok(BreakerStore::from(config)),
        (Ok(_), Some(problems)) => Err(problems),
        (Err(e), None) => Err(e),
        (Err(e), Some(mut problems)) => {
            problems.extend(e);
            Err(problems)
        }
    }
}

/// A scope as a file writes it, as its keys in Redis show it: `"dep:payments"`,
/// `"dep:payments:region:eu:tenant:acme"`, or `"region:eu"` (the dependency is then the
/// breaker's name). Each part's value is checked by the store's own rule.
#[cfg(feature = "redis")]
fn parse_scope(text: &str) -> Result<fusebox_redis::Scope, String> {
    let rule = || {
        format!(
            "must be \"dep:<name>\", optionally followed by \":region:<region>\" and \":tenant:<tenant>\", got {text:?}"
        )
    };
    let parts: Vec<&str> = text.split(':').collect();
    if !parts.len().is_multiple_of(2) {
        return Err(rule());
    }
    let (mut dep, mut region, mut tenant) = (None, None, None);
    for pair in parts.chunks(2) {
        let slot = match pair[0] {
            "dep" => &mut dep,
            "region" => &mut region,
            "tenant" => &mut tenant,
            _ => return Err(rule()),
        };
        if slot.replace(pair[1]).is_some() {
            return Err(format!("names {:?} twice in {text:?}", pair[0]));
        }
    }
    let mut scope = match dep {
        Some(d) => fusebox_redis::Scope::dep(d),
        None => fusebox_redis::Scope::breaker_name(),
    };
    if let Some(r) = region {
        scope = scope.region(r);
    }
    if let Some(t) = tenant {
        scope = scope.tenant(t);
    }
    Ok(scope)
}

fn limit_config(s: &Section<'_>, policy: &str) -> fusebox_limit::ConcurrencyLimitConfigBuilder {
    let mut b = ConcurrencyLimitConfig::builder()
        .name(s.string("name").unwrap_or_else(|| policy.to_owned()));
    match s.deciding(&["max_concurrency", "adaptive"]) {
        Some(level) if level.get("max_concurrency").is_some() => {
            if let Some(n) = Section::of(vec![level]).usize("max_concurrency") {
                b = b.max_concurrency(n);
            }
        }
        Some(level) => {
            if let Some(adaptive) = level.get("adaptive") {
                let a = Section::of(vec![adaptive]);
                match a.get("algorithm", |n| schema::one_of(n, &["aimd", "vegas"])) {
                    Some("vegas") => {
                        let mut c = VegasConfig::new();
                        if let Some(x) = a.usize("min_limit") {
                            c = c.min_limit(x);
                        }
                        if let Some(x) = a.usize("max_limit") {
                            c = c.max_limit(x);
                        }
                        if let Some(x) = a.usize("initial_limit") {
                            c = c.initial_limit(x);
                        }
                        if let Some(x) = a.f64("backoff_ratio") {
                            c = c.backoff_ratio(x);
                        }
                        if let Some(x) = a.f64("smoothing") {
                            c = c.smoothing(x);
                        }
                        if let Some(x) = a.f64("alpha") {
                            c = c.alpha(x);
                        }
                        if let Some(x) = a.f64("beta") {
                            c = c.beta(x);
                        }
                        if let Some(x) = a.duration("probe_interval") {
                            c = c.probe_interval(x);
                        }
                        if let Some(x) = a.usize("probe_samples") {
                            c = c.probe_samples(x);
                        }
                        b = b.vegas(c);
                    }
                    Some(_) => {
                        let mut c = AimdConfig::new();
                        if let Some(x) = a.usize("min_limit") {
                            c = c.min_limit(x);
                        }
                        if let Some(x) = a.usize("max_limit") {
                            c = c.max_limit(x);
                        }
                        if let Some(x) = a.usize("initial_limit") {
                            c = c.initial_limit(x);
                        }
                        if let Some(x) = a.f64("backoff_ratio") {
                            c = c.backoff_ratio(x);
                        }
                        if let Some(x) = a.f64("additive_increase") {
                            c = c.additive_increase(x);
                        }
                        b = b.aimd(c);
                    }
                    // No (valid) algorithm: reported by the file check; keep a limit so
                    // that the builder does not report a second, misleading problem.
                    None => b = b.max_concurrency(1),
                }
            }
        }
        None => {}
    }
    if let Some(queue) = s.node("queue") {
        let q = Section::of(vec![queue]);
        b = b.queue(
            q.usize("max_waiters").unwrap_or(0),
            q.duration("max_wait").unwrap_or(Duration::ZERO),
        );
    }
    if let Some(r) = s.get("release", |n| {
        schema::one_of(n, &["response", "end_of_body"])
    }) {
        b = b.release(if r == "end_of_body" {
            Release::AtEndOfBody
        } else {
            Release::OnResponse
        });
    }
    if let Some(x) = s.duration("retry_after") {
        b = b.retry_after(x);
    }
    if let Some(x) = s.usize("log_step") {
        b = b.log_step(x);
    }
    b
}

fn retry_config(s: &Section<'_>, policy: &str) -> fusebox_retry::RetryConfigBuilder {
    let mut b = RetryConfig::builder().name(s.string("name").unwrap_or_else(|| policy.to_owned()));
    if let Some(x) = s.f64("retry_ratio") {
        b = b.retry_ratio(x);
    }
    if let Some(x) = s.u32("min_retries_per_second") {
        b = b.min_retries_per_second(x);
    }
    if let Some(x) = s.duration("ttl") {
        b = b.ttl(x);
    }
    if let Some(x) = s.get("failure_rate_threshold", schema::opt_float) {
        b = b.failure_rate_threshold(x);
    }
    if let Some(x) = s.u32("cutoff_minimum_calls") {
        b = b.cutoff_minimum_calls(x);
    }
    if let Some(x) = s.u32("max_attempts") {
        b = b.max_attempts(x);
    }
    if let Some(x) = s.duration("base_delay") {
        b = b.base_delay(x);
    }
    if let Some(x) = s.duration("max_delay") {
        b = b.max_delay(x);
    }
    if let Some(x) = s.duration("max_retry_after") {
        b = b.max_retry_after(x);
    }
    if let Some(x) = s.usize("max_replay_body_bytes") {
        b = b.max_replay_body_bytes(x);
    }
    if let Some(x) = s.get("hedge_delay", schema::opt_duration) {
        b = b.hedge_delay(x);
    }
    if let Some(x) = s.u64("seed") {
        b = b.seed(Some(x));
    }
    b
}

/// A policy as a file describes it, waiting for what only code can give.
///
/// Its [`build`](FilePolicy::build) reports problems at their paths in the file.
pub struct FilePolicy {
    builder: PolicyBuilder,
    origins: Origins,
}

impl fmt::Debug for FilePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilePolicy")
            .field("policy", &self.origins.policy)
            .field("builder", &self.builder)
            .finish()
    }
}

impl FilePolicy {
    /// The fallback function for the routes that say `fallback = true` (and any the
    /// fallback names itself).
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.builder = self.builder.fallback(fallback);
        self
    }

    /// Whether a route of this policy says `fallback = true`, and so needs a
    /// [`fallback`](FilePolicy::fallback) before it can be built.
    pub fn wants_fallback(&self) -> bool {
        self.builder.wants_fallback()
    }

    /// Calls `listener` with every breaker event.
    pub fn on_breaker_event(
        mut self,
        listener: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    ) -> Self {
        self.builder = self.builder.on_breaker_event(listener);
        self
    }

    /// A custom key function for keyed breakers (replacing the file's `breaker.key`).
    pub fn breaker_key(mut self, key: KeyBy) -> Self {
        self.builder = self.builder.breaker_key(key);
        self
    }

    /// The underlying builder, for anything else (problems are then reported at the
    /// builder's paths, not the file's).
    pub fn into_builder(self) -> PolicyBuilder {
        self.builder
    }

    /// Builds the policy; problems are reported at their paths in the file.
    pub fn build(self) -> Result<Policy, ConfigError> {
        let origins = self.origins;
        self.builder.build().map_err(|e| origins.map_error(e))
    }
}

// A compile-time check that every known-key table is used.
const _: [&[Field]; 8] = [BREAKER, LIMIT, TIMEOUT, RETRY, RAMP, QUEUE, ADAPTIVE, STORE];

#[cfg(test)]
mod tests;
