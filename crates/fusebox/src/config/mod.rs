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
//! strings with a unit (`"250ms"`, `"30s"`, `"1m 30s"`); a setting that can be turned off
//! takes `"none"`. Each layer's keys are its crate's section type — the file format *is*
//! that type, read through it and built through the layer's own builder, with the same
//! defaults and the same rules as code — and this loader adds only the keys that are about
//! the policy:
//!
//! | section | the layer's keys | the policy's own keys |
//! |---|---|---|
//! | `breaker` | [`CircuitBreakerSection`] (`name` defaults to the policy's) | `enabled`, `key` (`"host"`, `"authority"`, `"route"`, `"header"`: one breaker per key), `key_header` (with `key = "header"`: the request header whose value is the key), `answer_key_header` (an answer carrying this header counts against the key it names: [`KeyBy::named_by_answer`]), `max_keys`, `idle_timeout`, `store`, `spread` |
//! | `breaker.spread` | | with a `key`: a dependency-wide breaker, gated by the keys' spread, around the keyed one ([`PolicyBuilder::key_spread`]): `min_failing_key_share` (within `(0, 1]`, default 0.5), `min_keys` (at least 1, default 2); refused without a `key` |
//! | `breaker.store` | with `kind = "redis"`: `fusebox_redis::RedisStoreSection` (feature `redis`); see [Breaker state on Redis](#breaker-state-on-redis) | `kind` (`"memory"`, `"redis"`; required) |
//! | `limit` | [`LimitSection`] | `enabled` |
//! | `timeout` | [`TimeoutSection`] (`body_timeout` is applied by [`Policy::body_timeout_layer`](crate::Policy::body_timeout_layer) around the policy's service) | `enabled` |
//! | `retry` | [`RetrySection`] | `enabled` |
//! | `recovery_ramp` | | `enabled`, `initial_limit`, `duration` |
//! | `default_route`, `routes."<route>"` | [`RouteSection`] | `fallback` |
//!
//! Route keys are those of [`RouteTable`]: `"GET /users/{id}"`,
//! `"/users/{id}"` (any method), `"/pkg.Service/Method"`. A policy's routes are the
//! defaults' routes and its own; a route in both merges key by key. A named route then
//! takes from the default route every setting it does not set itself (its slow-call
//! threshold, timeout, classifier settings, retries, idempotency), as a route table built in
//! code does; `timeout = "none"` or `slow_call_duration = "none"` turns an inherited one
//! off.
//!
//! Inheritance is key by key within a section, with two exceptions that replace rather
//! than merge: the nested tables `limit.adaptive` and `limit.queue`, and the choice between
//! `max_concurrency` and `adaptive` (or `count_window` and `time_window`), which the most
//! specific level that makes it decides.
//!
//! Beside `defaults` and `policies`, a file may have a `[metrics]` table for the process's
//! metrics: `duration_buckets`, the call-duration histogram's bucket bounds in seconds
//! (`[0.005, 0.05, 0.5, 5]`; finite, greater than zero, increasing), read back with
//! [`PolicyFile::duration_buckets`] for the exporter.
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
//! # What a policy ends up with
//!
//! [`PolicyFile::explain`] lists a policy's routes with their effective settings and where
//! each comes from (the route, the defaults' route, the default route, the defaults'
//! default route, or the built-in default). A built policy writes back as a file
//! ([`PolicyFileSection`]: every setting written out) that reads back into the same
//! policy; written as JSON, it is read as YAML (`.json` files load through the YAML
//! reader).
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
mod explain;
mod node;
mod read;
mod write;

pub use self::explain::{Origin, RouteExplanation};
pub use self::write::{PolicyFileSection, PolicySection};

use self::check::{join, unknown_key_among};
use self::node::Node;
use self::read::load;
use crate::policy::{BreakerStore, Fallback, KeyBy, Policy, PolicyBuilder, RecoveryRamp};
use crate::reload::Reload;
use fusebox_breaker::spread::KeySpread;
use fusebox_breaker::{BreakerEvent, CircuitBreakerSection};
use fusebox_classify::section::{RouteSection, Section, count, duration};
use fusebox_classify::{
    ConfigError, Problem, Route, RouteTable, RouteTableBuilder, StandardClassifier, Validator,
};
use fusebox_limit::LimitSection;
use fusebox_retry::RetrySection;
use fusebox_timeout::TimeoutSection;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::time::Duration;

#[cfg(feature = "redis")]
use fusebox_redis::RedisStoreSection;

/// A checked policy file: shared `defaults` and named `policies`. See the
/// [module docs](self) for the format.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    root: Node,
    defaults: Level,
    policies: Vec<(String, Level)>,
    /// `[metrics]`: settings of the process's metrics, not of a policy.
    duration_buckets: Option<crate::metrics::DurationBuckets>,
}

/// `[metrics]`: what the file says about the process's metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duration_buckets: Option<Vec<f64>>,
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

    /// The call-duration histogram's buckets the file gives (`duration_buckets`, seconds, in
    /// its `[metrics]` table), checked when the file was read; give them to the exporter
    /// (see [`DurationBuckets`](crate::metrics::DurationBuckets)).
    ///
    /// ```
    /// # #[cfg(feature = "toml")] {
    /// use fusebox::config::PolicyFile;
    ///
    /// let file = PolicyFile::from_toml("[metrics]\nduration_buckets = [0.01, 0.1, 1]\n")?;
    /// assert_eq!(file.duration_buckets().map(|b| b.as_slice()), Some(&[0.01, 0.1, 1.0][..]));
    ///
    /// let err = PolicyFile::from_toml("[metrics]\nduration_buckets = [0.5, 0.1]\n").unwrap_err();
    /// assert_eq!(err.problems()[0].path(), "metrics.duration_buckets[1]");
    /// # }
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn duration_buckets(&self) -> Option<&crate::metrics::DurationBuckets> {
        self.duration_buckets.as_ref()
    }

    /// Reads and checks a policy file written in `syntax`
    /// ([`from_toml`](PolicyFile::from_toml) or [`from_yaml`](PolicyFile::from_yaml)); an
    /// error if the syntax's feature is not enabled.
    pub fn parse(text: &str, syntax: Syntax) -> Result<PolicyFile, ConfigError> {
        match syntax {
            #[cfg(feature = "toml")]
            Syntax::Toml => PolicyFile::from_toml(text),
            #[cfg(feature = "yaml")]
            Syntax::Yaml => PolicyFile::from_yaml(text),
            #[allow(unreachable_patterns)]
            other => Err(ConfigError::new(
                "file",
                format!("is {other}, which this build does not read (its feature is off)"),
            )),
        }
    }

    /// Reads and checks a policy file, TOML or YAML by its extension
    /// ([`Syntax::of_path`]: `.toml`, `.yaml`, `.yml`; `.json` is read as the YAML it is).
    pub fn load(path: impl AsRef<Path>) -> Result<PolicyFile, ConfigError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(shown.clone(), format!("cannot be read: {e}")))?;
        let parsed = match Syntax::of_path(path) {
            Some(syntax) if SUPPORTED.contains(&syntax) => PolicyFile::parse(&text, syntax),
            _ => Err(ConfigError::new(
                "file",
                format!(
                    "has extension {:?}: expected one of {}",
                    path.extension().and_then(|e| e.to_str()).unwrap_or(""),
                    SUPPORTED
                        .iter()
                        .flat_map(|s| s.extensions())
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        };
        parsed.map_err(|e| with_file(e, &shown))
    }

    /// Checks a file already read into a tree (TOML and YAML both deserialize into one):
    /// every problem of every level, then every problem of every policy built from them.
    fn from_node(root: Node) -> Result<PolicyFile, ConfigError> {
        let mut problems: Vec<Problem> = Vec::new();
        let mut defaults = Level::default();
        let mut policies = Vec::new();
        let mut duration_buckets = None;
        match root.as_map() {
            None => push(
                &mut problems,
                "file",
                format!("must be a table, got {}", root.kind()),
            ),
            Some(entries) => {
                for (key, value) in entries {
                    match key.as_str() {
                        "defaults" => defaults = read_level(value, "defaults", &mut problems),
                        "policies" => match value.as_map() {
                            None => push(
                                &mut problems,
                                "policies",
                                format!("must be a table of policies, got {}", value.kind()),
                            ),
                            Some(named) => {
                                for (name, policy) in named {
                                    let path = format!("policies.{name}");
                                    policies.push((
                                        name.clone(),
                                        read_level(policy, &path, &mut problems),
                                    ));
                                }
                            }
                        },
                        "metrics" => {
                            let (section, found) = load::<MetricsSection>(value, "metrics", &[]);
                            problems.extend(found);
                            if let Some(bounds) = section.duration_buckets {
                                match crate::metrics::DurationBuckets::new(bounds) {
                                    Ok(b) => duration_buckets = Some(b),
                                    Err(e) => problems.extend(e.problems().iter().cloned()),
                                }
                            }
                        }
                        other => push(
                            &mut problems,
                            other,
                            unknown_key_among(other, &["defaults", "policies", "metrics"]),
                        ),
                    }
                }
            }
        }
        let file = PolicyFile {
            root,
            defaults,
            policies,
            duration_buckets,
        };
        // Every value has its type; now what each policy describes, by every layer's rules.
        for (name, _) in &file.policies {
            // The fallback function is code, given later: stand in for it.
            let placeholder =
                Fallback::new(|_| http::Response::new(bytes::Bytes::new())).all_routes();
            // Checking only: a store on Redis is checked, not connected to.
            let FilePolicy { builder, origins } = file.read(name);
            let check = builder.fallback(placeholder).check_only();
            if let Err(e) = check.build() {
                for p in origins.map_error(e).problems() {
                    if !problems.contains(p) {
                        problems.push(p.clone());
                    }
                }
            }
        }
        match problems.split_first() {
            None => Ok(file),
            Some((first, rest)) => {
                let mut all = ConfigError::new(first.path(), first.rule());
                for p in rest {
                    all.extend(ConfigError::new(p.path(), p.rule()));
                }
                Err(all)
            }
        }
    }

    /// The names of the file's policies, in file order.
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|(n, _)| n.as_str())
    }

    /// The policy `name` as the file describes it, to add what only code can give
    /// (a fallback function, event listeners, a custom breaker key) before building.
    pub fn policy(&self, name: &str) -> Result<FilePolicy, ConfigError> {
        if !self.policies.iter().any(|(n, _)| n == name) {
            let names: Vec<&str> = self.policy_names().collect();
            return Err(ConfigError::new(
                "policies",
                format!(
                    "has no policy named {name:?}; the file has: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
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

    /// Applies this file to running policies, each by its name, keeping their breakers'
    /// state (see [`reload`](crate::reload) for what applies in place and what is
    /// reported as needing a rebuild), and reports what changed for each.
    ///
    /// Everything is checked before anything changes: a policy that is running but not in
    /// the file, or that the file describes in a way that does not build, fails the whole
    /// reload with every problem (each under `policies.NAME`), and no policy changes. (A
    /// file that does not parse or check fails earlier, in [`load`](PolicyFile::load), with
    /// every problem, as `fusebox check` reports them.) Policies of the file that are not
    /// given are not built. The fallback *function* is code, not part of the file: the running
    /// policy keeps its own (the routes the file opts in to it are compared).
    pub fn reload(&self, running: &[&Policy]) -> Result<Vec<Reload>, ConfigError> {
        let built = self.build_for(running)?;
        Ok(running
            .iter()
            .zip(&built)
            .map(|(policy, new)| policy.reload(new))
            .collect())
    }

    /// What [`reload`](PolicyFile::reload) would change in `running`, changing nothing.
    pub fn diff(&self, running: &[&Policy]) -> Result<Vec<Reload>, ConfigError> {
        let built = self.build_for(running)?;
        Ok(running
            .iter()
            .zip(&built)
            .map(|(policy, new)| policy.diff(new))
            .collect())
    }

    /// Each running policy as this file describes it, or every problem.
    fn build_for(&self, running: &[&Policy]) -> Result<Vec<Policy>, ConfigError> {
        let mut built = Vec::new();
        let mut problems: Option<ConfigError> = None;
        let mut fail = |e: ConfigError| match &mut problems {
            Some(all) => all.extend(e),
            None => problems = Some(e),
        };
        for policy in running {
            let name = policy.name();
            if !self.policies.iter().any(|(n, _)| n == name) {
                fail(ConfigError::new(
                    format!("policies.{name}"),
                    "is running but not in the file: a reload must describe every policy it is applied to",
                ));
                continue;
            }
            let mut described = self.read(name);
            if described.wants_fallback() {
                // Stands in for the function: a reload never changes which one serves.
                described =
                    described.fallback(Fallback::new(|_| http::Response::new(bytes::Bytes::new())));
            }
            match described.build() {
                Ok(p) => built.push(p),
                Err(e) => fail(e),
            }
        }
        match problems {
            Some(all) => Err(all),
            None => Ok(built),
        }
    }

    /// The policy `name` with `defaults` merged in, as the file writes it.
    fn merged(&self, name: &str) -> Level {
        let own = self
            .policies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| l.clone())
            .unwrap_or_default();
        own.over(&self.defaults)
    }

    fn read(&self, name: &str) -> FilePolicy {
        let prefix = format!("policies.{name}");
        let own = self.root.get("policies").and_then(|p| p.get(name)).cloned();
        let defaults = self.root.get("defaults").cloned();
        let origins = Origins {
            policy: prefix,
            levels: [own, defaults]
                .into_iter()
                .zip([format!("policies.{name}"), "defaults".to_owned()])
                .filter_map(|(n, p)| n.map(|n| (p, n)))
                .collect(),
        };
        FilePolicy {
            builder: describe(name, &self.merged(name)),
            origins,
        }
    }
}

#[cfg(all(feature = "toml", feature = "yaml"))]
const SUPPORTED: &[Syntax] = &[Syntax::Toml, Syntax::Yaml];
#[cfg(all(feature = "toml", not(feature = "yaml")))]
const SUPPORTED: &[Syntax] = &[Syntax::Toml];
#[cfg(all(feature = "yaml", not(feature = "toml")))]
const SUPPORTED: &[Syntax] = &[Syntax::Yaml];
#[cfg(not(any(feature = "toml", feature = "yaml")))]
const SUPPORTED: &[Syntax] = &[];

/// The syntax a policy file is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// TOML (feature `toml`).
    Toml,
    /// YAML (feature `yaml`), and JSON, which is YAML: a file written as JSON (`fusebox
    /// check --json`) reads as one.
    Yaml,
}

impl Syntax {
    /// The syntax of a file by its extension, in any case: `.toml`; `.yaml`, `.yml` and
    /// `.json`. `None` for any other.
    ///
    /// ```
    /// use fusebox::config::Syntax;
    ///
    /// assert_eq!(Syntax::of_path("fusebox.toml"), Some(Syntax::Toml));
    /// assert_eq!(Syntax::of_path("effective.JSON"), Some(Syntax::Yaml));
    /// assert_eq!(Syntax::of_path("policies.ini"), None);
    /// ```
    pub fn of_path(path: impl AsRef<Path>) -> Option<Syntax> {
        let ext = path.as_ref().extension()?.to_str()?;
        [Syntax::Toml, Syntax::Yaml]
            .into_iter()
            .find(|s| s.extensions().iter().any(|e| e.eq_ignore_ascii_case(ext)))
    }

    /// The extensions of files in this syntax.
    pub fn extensions(self) -> &'static [&'static str] {
        match self {
            Syntax::Toml => &["toml"],
            Syntax::Yaml => &["yaml", "yml", "json"],
        }
    }
}

impl fmt::Display for Syntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Syntax::Toml => "TOML",
            Syntax::Yaml => "YAML",
        })
    }
}

fn push(problems: &mut Vec<Problem>, path: impl Into<String>, rule: impl Into<String>) {
    let p = ConfigError::new(path, rule).problems()[0].clone();
    if !problems.contains(&p) {
        problems.push(p);
    }
}

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

// === the levels of a file ===

/// The sections of a policy (or of `defaults`).
const POLICY_KEYS: &[&str] = &[
    "breaker",
    "limit",
    "timeout",
    "retry",
    "recovery_ramp",
    "default_route",
    "routes",
];

/// The breaker's keys that are about the policy, not the breaker itself.
const BREAKER_KEYS: &[&str] = &[
    "enabled",
    "key",
    "key_header",
    "answer_key_header",
    "max_keys",
    "idle_timeout",
    "store",
    "spread",
];

/// `enabled`, beside a layer's own keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Enabled {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
}

/// What a keyed breaker's key is (`"header"`: the value of the request header
/// `key_header` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeyKind {
    Host,
    Authority,
    Route,
    Header,
}

/// A header's name in a file: lower case or not, it must be a valid HTTP header name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header(http::HeaderName);

const HEADER_RULE: &str = "a header name (letters, digits and `!#$%&'*+-.^_`|~`)";

impl Serialize for Header {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        http::HeaderName::from_bytes(text.as_bytes())
            .map(Header)
            .map_err(|_| serde::de::Error::custom(format!("must be {HEADER_RULE}, got {text:?}")))
    }
}

/// The breaker's keys that are about the policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<KeyKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_header: Option<Header>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer_key_header: Option<Header>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_keys: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    idle_timeout: Option<Duration>,
}

/// `breaker.spread`: the rule of the dependency-wide breaker gated by the keys' spread
/// ([`PolicyBuilder::key_spread`]); a key left out takes [`KeySpread::default`]'s value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpreadSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_failing_key_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_keys: Option<u32>,
}

impl SpreadSection {
    fn over(self, base: &SpreadSection) -> SpreadSection {
        SpreadSection {
            min_failing_key_share: self.min_failing_key_share.or(base.min_failing_key_share),
            min_keys: self.min_keys.or(base.min_keys),
        }
    }

    /// The rule, or its problems (under the section's keys).
    fn spread(&self) -> Result<KeySpread, ConfigError> {
        let default = KeySpread::default();
        KeySpread::new(
            self.min_failing_key_share
                .unwrap_or(default.min_failing_key_share()),
            self.min_keys.map_or(default.min_keys(), count),
        )
    }

    /// How a file writes `spread`: every key written out.
    fn of(spread: &KeySpread) -> SpreadSection {
        SpreadSection {
            min_failing_key_share: Some(spread.min_failing_key_share()),
            min_keys: Some(fusebox_classify::section::count_of(spread.min_keys())),
        }
    }
}

/// Where the breaker's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoreKind {
    Memory,
    Redis,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<StoreKind>,
}

/// `breaker.store` at one level.
#[derive(Debug, Clone, Default)]
struct StoreLevel {
    kind: Option<StoreKind>,
    #[cfg(feature = "redis")]
    redis: RedisStoreSection,
}

/// `recovery_ramp`: the policy's own section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RampSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    initial_limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    duration: Option<Duration>,
}

/// `fallback`, beside a route's own keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fallback: Option<bool>,
}

/// A layer's section and whether it is on.
#[derive(Debug, Clone, Default)]
struct Layer<S> {
    enabled: Option<bool>,
    section: S,
}

#[derive(Debug, Clone, Default)]
struct BreakerLevel {
    keys: BreakerKeys,
    section: CircuitBreakerSection,
    store: Option<StoreLevel>,
    spread: Option<SpreadSection>,
}

#[derive(Debug, Clone, Default)]
struct RouteLevel {
    fallback: Option<bool>,
    section: RouteSection,
}

/// One level of a file: a policy, or `defaults`, as read (types checked, nothing merged).
#[derive(Debug, Clone, Default)]
struct Level {
    breaker: Option<BreakerLevel>,
    limit: Option<Layer<LimitSection>>,
    timeout: Option<Layer<TimeoutSection>>,
    retry: Option<Layer<RetrySection>>,
    ramp: Option<RampSection>,
    default_route: Option<RouteLevel>,
    routes: Vec<(String, RouteLevel)>,
}

fn take<T>(problems: &mut Vec<Problem>, (value, found): (T, Vec<Problem>)) -> T {
    for p in found {
        if !problems.contains(&p) {
            problems.push(p);
        }
    }
    value
}

fn is_table(node: &Node, path: &str, problems: &mut Vec<Problem>) -> bool {
    let ok = node.as_map().is_some();
    if !ok {
        push(
            problems,
            path,
            format!("must be a table, got {}", node.kind()),
        );
    }
    ok
}

/// The section's rules about which keys one table may hold together, on this level.
fn check_keys<S: Section>(section: &S, path: &str, problems: &mut Vec<Problem>) {
    let mut v = Validator::new();
    section.check_keys(&mut v);
    if let Err(e) = v.finish(()) {
        for p in e.problems() {
            push(problems, join(path, p.path()), p.rule());
        }
    }
}

/// A layer's table: its `enabled`, and the rest read as the layer's section.
fn read_layer<S: Section>(node: &Node, path: &str, problems: &mut Vec<Problem>) -> Layer<S> {
    if !is_table(node, path, problems) {
        return Layer::default();
    }
    let (mine, rest) = node.split(&["enabled"]);
    let enabled: Enabled = take(problems, load(&mine, path, &[]));
    let section: S = take(problems, load(&rest, path, &["enabled"]));
    check_keys(&section, path, problems);
    Layer {
        enabled: enabled.enabled,
        section,
    }
}

fn read_store(node: &Node, path: &str, problems: &mut Vec<Problem>) -> StoreLevel {
    if !is_table(node, path, problems) {
        return StoreLevel::default();
    }
    let (mine, rest) = node.split(&["kind"]);
    let keys: StoreKeys = take(problems, load(&mine, path, &[]));
    if keys.kind == Some(StoreKind::Memory) {
        for (key, _) in rest.as_map().unwrap_or(&[]) {
            push(problems, join(path, key), "only read with kind = \"redis\"");
        }
    }
    #[cfg(not(feature = "redis"))]
    let _ = rest;
    StoreLevel {
        kind: keys.kind,
        #[cfg(feature = "redis")]
        redis: if keys.kind == Some(StoreKind::Memory) {
            RedisStoreSection::default()
        } else {
            take(problems, load(&rest, path, &["kind"]))
        },
    }
}

fn read_breaker(node: &Node, path: &str, problems: &mut Vec<Problem>) -> BreakerLevel {
    if !is_table(node, path, problems) {
        return BreakerLevel::default();
    }
    let (mine, rest) = node.split(BREAKER_KEYS);
    let (store, mine) = mine.split(&["store"]);
    let (spread, mine) = mine.split(&["spread"]);
    // In file order: the breaker's own problems and the policy's keys' interleave.
    let section: CircuitBreakerSection = take(problems, load(&rest, path, BREAKER_KEYS));
    check_keys(&section, path, problems);
    let keys = take(problems, load(&mine, path, &[]));
    BreakerLevel {
        keys,
        section,
        store: store
            .get("store")
            .map(|s| read_store(s, &join(path, "store"), problems)),
        spread: spread.get("spread").map(|s| {
            let here = join(path, "spread");
            if is_table(s, &here, problems) {
                take(problems, load(s, &here, &[]))
            } else {
                SpreadSection::default()
            }
        }),
    }
}

fn read_route(node: &Node, path: &str, problems: &mut Vec<Problem>) -> RouteLevel {
    if !is_table(node, path, problems) {
        return RouteLevel::default();
    }
    let (mine, rest) = node.split(&["fallback"]);
    let section = take(problems, load(&rest, path, &["fallback"]));
    let keys: RouteKeys = take(problems, load(&mine, path, &[]));
    RouteLevel {
        fallback: keys.fallback,
        section,
    }
}

/// Reads one level (a policy or `defaults`), recording every problem of its values.
fn read_level(node: &Node, path: &str, problems: &mut Vec<Problem>) -> Level {
    let mut level = Level::default();
    let Some(entries) = node.as_map() else {
        push(
            problems,
            path,
            format!("must be a table, got {}", node.kind()),
        );
        return level;
    };
    for (key, value) in entries {
        let here = join(path, key);
        match key.as_str() {
            "breaker" => level.breaker = Some(read_breaker(value, &here, problems)),
            "limit" => level.limit = Some(read_layer(value, &here, problems)),
            "timeout" => level.timeout = Some(read_layer(value, &here, problems)),
            "retry" => level.retry = Some(read_layer(value, &here, problems)),
            "recovery_ramp" => {
                level.ramp = Some(if is_table(value, &here, problems) {
                    take(problems, load(value, &here, &[]))
                } else {
                    RampSection::default()
                })
            }
            "default_route" => level.default_route = Some(read_route(value, &here, problems)),
            "routes" => match value.as_map() {
                None => push(
                    problems,
                    &here,
                    format!("must be a table of routes, got {}", value.kind()),
                ),
                Some(routes) => {
                    for (route, table) in routes {
                        let route_path = format!("{path}.routes[{route:?}]");
                        level
                            .routes
                            .push((route.clone(), read_route(table, &route_path, problems)));
                    }
                }
            },
            other => push(problems, here, unknown_key_among(other, POLICY_KEYS)),
        }
    }
    level
}

/// `a` over `b`, with `over` when both are there.
fn over_opt<T: Clone>(a: Option<T>, b: &Option<T>, over: impl FnOnce(T, &T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(over(a, b)),
        (Some(a), None) => Some(a),
        (None, b) => b.clone(),
    }
}

impl<S: Section> Layer<S> {
    fn over(self, base: &Layer<S>) -> Layer<S> {
        Layer {
            enabled: self.enabled.or(base.enabled),
            section: self.section.over(&base.section),
        }
    }

    fn used(layer: &Option<Layer<S>>) -> Option<&S> {
        layer
            .as_ref()
            .filter(|l| l.enabled != Some(false))
            .map(|l| &l.section)
    }
}

impl StoreLevel {
    fn over(self, base: &StoreLevel) -> StoreLevel {
        StoreLevel {
            kind: self.kind.or(base.kind),
            #[cfg(feature = "redis")]
            redis: self.redis.over(&base.redis),
        }
    }

    /// The store, or every problem with it (under the store's keys).
    fn store(&self) -> Result<BreakerStore, ConfigError> {
        match self.kind {
            None => Err(ConfigError::new(
                "kind",
                "is required: \"memory\" or \"redis\"",
            )),
            Some(StoreKind::Memory) => Ok(BreakerStore::InMemory),
            #[cfg(feature = "redis")]
            Some(StoreKind::Redis) => self.redis.build().map(BreakerStore::from),
            #[cfg(not(feature = "redis"))]
            Some(StoreKind::Redis) => Err(ConfigError::new(
                "kind",
                "is \"redis\", which needs fusebox's `redis` feature, and this build does not have it: enable the feature, or use kind = \"memory\"",
            )),
        }
    }
}

impl RouteLevel {
    fn over(self, base: &RouteLevel) -> RouteLevel {
        RouteLevel {
            fallback: self.fallback.or(base.fallback),
            section: self.section.over(&base.section),
        }
    }

    fn route(&self) -> Route {
        // A route's section builds whatever it holds: its values are checked by the table.
        self.section.build().unwrap_or_default()
    }
}

impl Level {
    /// This level over `base` (`defaults`), section by section, key by key.
    fn over(self, base: &Level) -> Level {
        // Route keys: this level's first, then those only `base` has.
        let mut routes: Vec<(String, RouteLevel)> = Vec::new();
        for (key, route) in self.routes {
            let merged = match base.routes.iter().find(|(k, _)| *k == key) {
                Some((_, b)) => route.over(b),
                None => route,
            };
            routes.push((key, merged));
        }
        for (key, route) in &base.routes {
            if !routes.iter().any(|(k, _)| k == key) {
                routes.push((key.clone(), route.clone()));
            }
        }
        Level {
            breaker: over_opt(self.breaker, &base.breaker, |a, b| BreakerLevel {
                keys: BreakerKeys {
                    enabled: a.keys.enabled.or(b.keys.enabled),
                    key: a.keys.key.or(b.keys.key),
                    key_header: a.keys.key_header.or_else(|| b.keys.key_header.clone()),
                    answer_key_header: a
                        .keys
                        .answer_key_header
                        .or_else(|| b.keys.answer_key_header.clone()),
                    max_keys: a.keys.max_keys.or(b.keys.max_keys),
                    idle_timeout: a.keys.idle_timeout.or(b.keys.idle_timeout),
                },
                section: a.section.over(&b.section),
                store: over_opt(a.store, &b.store, StoreLevel::over),
                spread: over_opt(a.spread, &b.spread, SpreadSection::over),
            }),
            limit: over_opt(self.limit, &base.limit, Layer::over),
            timeout: over_opt(self.timeout, &base.timeout, Layer::over),
            retry: over_opt(self.retry, &base.retry, Layer::over),
            ramp: over_opt(self.ramp, &base.ramp, |a, b| RampSection {
                enabled: a.enabled.or(b.enabled),
                initial_limit: a.initial_limit.or(b.initial_limit),
                duration: a.duration.or(b.duration),
            }),
            default_route: over_opt(self.default_route, &base.default_route, RouteLevel::over),
            routes,
        }
    }
}

/// The route table a merged policy describes, and the routes that ask for the fallback.
fn route_table(level: &Level) -> (RouteTableBuilder<StandardClassifier>, Vec<String>) {
    let default = level
        .default_route
        .as_ref()
        .map(RouteLevel::route)
        .unwrap_or_default();
    let mut table = RouteTable::builder(default);
    let mut fallback = Vec::new();
    if level.default_route.as_ref().and_then(|r| r.fallback) == Some(true) {
        fallback.push(fusebox_classify::route::DEFAULT_ROUTE.to_owned());
    }
    for (key, route) in &level.routes {
        if route.fallback == Some(true) {
            fallback.push(key.clone());
        }
        table = table.route(key.as_str(), route.route());
    }
    (table, fallback)
}

/// The builder a merged policy describes.
fn describe(name: &str, level: &Level) -> PolicyBuilder {
    let (table, fallback) = route_table(level);
    let mut b = Policy::builder(name).routes(table);
    for route in fallback {
        b = b.fallback_route(route);
    }
    if let Some(timeout) = Layer::used(&level.timeout) {
        b = b.timeout_config(timeout.builder());
    }
    if let Some(limit) = Layer::used(&level.limit) {
        b = b.concurrency_limit_config(limit.build());
    }
    if let Some(breaker) = level
        .breaker
        .as_ref()
        .filter(|b| b.keys.enabled != Some(false))
    {
        b = b.circuit_breaker(breaker.section.build());
        let header = breaker.keys.key_header.as_ref().map(|Header(h)| h.clone());
        match (breaker.keys.key, header) {
            (Some(KeyKind::Header), None) => {
                b = b.file_problem(
                    "breaker_key",
                    "\"header\" needs `key_header`, the request header whose value is the key",
                );
            }
            (Some(KeyKind::Header), Some(name)) => b = b.breaker_key(KeyBy::Header(name)),
            (Some(_), Some(_)) => {
                b = b.file_problem("breaker_key_header", "only read with key = \"header\"");
            }
            (Some(key), None) => {
                b = b.breaker_key(match key {
                    KeyKind::Host => KeyBy::Host,
                    KeyKind::Authority => KeyBy::Authority,
                    // `Header` has its own arms above.
                    KeyKind::Route | KeyKind::Header => KeyBy::Route,
                })
            }
            (None, Some(_)) => {
                b = b.file_problem("breaker_key_header", "only read with key = \"header\"");
            }
            (None, None) => {}
        }
        if let Some(Header(name)) = &breaker.keys.answer_key_header {
            b = b.answer_key_header(name.clone());
        }
        if let Some(max) = breaker.keys.max_keys {
            b = b.max_keys(count(max));
        }
        if let Some(idle) = breaker.keys.idle_timeout {
            b = b.idle_timeout(idle);
        }
        if let Some(store) = &breaker.store {
            b = b.breaker_store(store.store());
        }
        if let Some(spread) = &breaker.spread {
            b = b.key_spread_config(spread.spread());
        }
    }
    if let Some(retry) = Layer::used(&level.retry) {
        b = b.retry_budget(retry.build());
    }
    if let Some(ramp) = level.ramp.as_ref().filter(|r| r.enabled != Some(false)) {
        b = b.recovery_ramp(RecoveryRamp::new(
            count(ramp.initial_limit.unwrap_or(1)),
            ramp.duration.unwrap_or(Duration::ZERO),
        ));
    }
    b
}

// === where a problem stands in the file ===

/// The levels of one policy, most specific first, each with the path it stands at.
#[derive(Debug, Clone)]
struct Origins {
    policy: String,
    levels: Vec<(String, Node)>,
}

/// The keys of a problem's path (`routes["GET /a.b"].timeout`: a route key may hold dots).
fn keys_of(path: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("routes[")
            && let Some(end) = after.find("\"]")
        {
            keys.push("routes".to_owned());
            let quoted = &after[..end + 1];
            keys.push(unquote(quoted).unwrap_or_else(|| quoted.trim_matches('"').to_owned()));
            rest = after[end + 2..]
                .strip_prefix('.')
                .unwrap_or(&after[end + 2..]);
            continue;
        }
        match rest.split_once('.') {
            Some((k, r)) => {
                keys.push(k.to_owned());
                rest = r;
            }
            None => {
                keys.push(rest.to_owned());
                rest = "";
            }
        }
    }
    keys
}

/// The file's key for what a builder calls `path`: a Redis store's scope is one string.
fn file_key(path: &str) -> String {
    #[cfg(feature = "redis")]
    if let Some(store) = path.strip_prefix("breaker.store.") {
        return format!("breaker.store.{}", RedisStoreSection::file_key(store));
    }
    path.to_owned()
}

/// A route key as `{:?}` wrote it, back.
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next()?);
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn has(node: &Node, keys: &[String]) -> bool {
    let mut node = node;
    for k in keys {
        match node.get(k) {
            Some(n) => node = n,
            None => return false,
        }
    }
    true
}

impl Origins {
    /// The file path of a problem that a builder reported at `path`: under the most
    /// specific level that writes the deepest key of it.
    fn locate(&self, path: &str) -> String {
        if path == "name" {
            return self.policy.clone();
        }
        let path = if path == "breaker_key" {
            "breaker.key".to_owned()
        } else if path == "breaker_answer_key" {
            "breaker.answer_key_header".to_owned()
        } else if path == "breaker_key_header" {
            "breaker.key_header".to_owned()
        } else {
            file_key(path)
        };
        let path = path.as_str();
        let keys = keys_of(path);
        for len in (1..=keys.len()).rev() {
            for (prefix, node) in &self.levels {
                if has(node, &keys[..len]) {
                    return format!("{prefix}.{path}");
                }
            }
        }
        format!("{}.{path}", self.policy)
    }

    fn map_error(&self, e: ConfigError) -> ConfigError {
        let mut out: Vec<Problem> = Vec::new();
        for p in e.problems() {
            push(&mut out, self.locate(p.path()), p.rule());
        }
        match out.split_first() {
            None => e,
            Some((first, rest)) => {
                let mut all = ConfigError::new(first.path(), first.rule());
                for p in rest {
                    all.extend(ConfigError::new(p.path(), p.rule()));
                }
                all
            }
        }
    }
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

#[cfg(test)]
mod tests;
