//! The Redis store's configuration: where Redis is, which scope a breaker shares, how
//! outcomes travel (strict or batched), and what to do when Redis is slow or down.
//!
//! Every setting has a default; [`RedisStoreConfigBuilder::build`] checks them all and
//! reports every problem with its field. The same settings can be written as one URL —
//! `redis://cache:6379/0?dep=payments&region=eu&mode=batched&flush=5ms` — which is how a
//! configuration file's `store = "redis://..."` is read ([`RedisStoreConfig::from_url`]).

use fusebox_classify::{ConfigError, Validator};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The longest scope part, in bytes.
pub const MAX_SCOPE_PART: usize = 64;

/// Whether `part` may appear in a Redis key: 1 to 64 ASCII letters, digits, `.`, `_` or
/// `-`. No `{`, `}` (they would break the Cluster hash tag), no `:` (the separator), no
/// spaces, no request data by construction.
pub fn is_valid_scope_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= MAX_SCOPE_PART
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn part_rule(value: &str) -> String {
    format!("must be 1 to {MAX_SCOPE_PART} ASCII letters, digits, '.', '_' or '-', got {value:?}")
}

/// Which breakers share one state in Redis: a dependency, optionally narrowed to a region
/// and a tenant. All of a scope's keys carry the scope as their Redis Cluster hash tag
/// (`fusebox:{dep:payments:region:eu}:state`), so one script call reaches them all.
///
/// Scope parts come from configuration, never from requests: they are checked when the
/// configuration is built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    dep: Option<String>,
    region: Option<String>,
    tenant: Option<String>,
}

impl Scope {
    /// The scope of dependency `dep`.
    pub fn dep(dep: impl Into<String>) -> Self {
        Scope {
            dep: Some(dep.into()),
            ..Scope::default()
        }
    }

    /// A scope named after each breaker: the dependency is the breaker's name.
    pub fn breaker_name() -> Self {
        Scope::default()
    }

    /// Narrows the scope to a region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Narrows the scope to a tenant.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The dependency, when set (else the breaker's name is used).
    pub fn dep_name(&self) -> Option<&str> {
        self.dep.as_deref()
    }

    /// The region, when set.
    pub fn region_name(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The tenant, when set.
    pub fn tenant_name(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The scope's text (`dep:payments:region:eu`) for a breaker named `breaker` and,
    /// for a keyed breaker, a shared key. `None` when the dependency (the breaker's name,
    /// when no dependency is configured) is not a valid scope part.
    pub fn render(&self, breaker: &str, key: Option<&str>) -> Option<String> {
        let dep = self.dep.as_deref().unwrap_or(breaker);
        if !is_valid_scope_part(dep) {
            return None;
        }
        let mut s = format!("dep:{dep}");
        if let Some(r) = &self.region {
            s.push_str(":region:");
            s.push_str(r);
        }
        if let Some(t) = &self.tenant {
            s.push_str(":tenant:");
            s.push_str(t);
        }
        if let Some(k) = key {
            if !is_valid_scope_part(k) {
                return None;
            }
            s.push_str(":key:");
            s.push_str(k);
        }
        Some(s)
    }

    fn validate(&self, v: &mut Validator, path: &str) {
        for (name, part) in [
            ("dep", &self.dep),
            ("region", &self.region),
            ("tenant", &self.tenant),
        ] {
            if let Some(p) = part {
                v.check(is_valid_scope_part(p), &format!("{path}.{name}"), || {
                    part_rule(p)
                });
            }
        }
    }
}

/// A scope as a file writes it, and as its keys in Redis show it: `"dep:payments"`,
/// `"dep:payments:region:eu:tenant:acme"`, or `"region:eu"` (the dependency is then the
/// breaker's name). Each part's value is checked when the configuration is built.
impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(text: &str) -> Result<Scope, String> {
        let rule = || {
            format!(
                "must be \"dep:<name>\", optionally followed by \":region:<region>\" and \":tenant:<tenant>\", got {text:?}"
            )
        };
        let parts: Vec<&str> = text.split(':').collect();
        if !parts.len().is_multiple_of(2) {
            return Err(rule());
        }
        let mut scope = Scope::default();
        for pair in parts.chunks(2) {
            let slot = match pair[0] {
                "dep" => &mut scope.dep,
                "region" => &mut scope.region,
                "tenant" => &mut scope.tenant,
                _ => return Err(rule()),
            };
            if slot.replace(pair[1].to_owned()).is_some() {
                return Err(format!("names {:?} twice in {text:?}", pair[0]));
            }
        }
        Ok(scope)
    }
}

impl fmt::Display for Scope {
    /// The file form (`dep:payments:region:eu`); a scope whose dependency is the breaker's
    /// name leaves `dep` out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("dep", &self.dep),
            ("region", &self.region),
            ("tenant", &self.tenant),
        ];
        let mut first = true;
        for (name, part) in parts {
            if let Some(p) = part {
                if !first {
                    f.write_str(":")?;
                }
                write!(f, "{name}:{p}")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// How outcomes reach Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Mode {
    /// One check-and-record script call per finished call, sent in the background; the
    /// reply refreshes the local view. The fleet window is exact; the cost is one round
    /// trip to Redis per call (beyond `max_in_flight` calls waiting on Redis, outcomes
    /// are batched instead).
    Strict,
    /// Outcomes are aggregated locally and flushed every `flush_interval` (one script call
    /// per flush); a fast success in a full, clean count window is not sent at all. Near
    /// the in-memory store's cost; the fleet sees an outcome up to one flush interval late.
    #[default]
    Batched,
}

/// What a breaker does while Redis is unreachable (or before it first answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Fallback {
    /// Judge by a window of this replica's own calls (a fresh in-memory breaker), until
    /// Redis answers again. A fleet OPEN state known when Redis went away is kept until its
    /// open wait ends.
    #[default]
    Local,
    /// Admit every call and record nothing (the breaker shows as DISABLED).
    FailOpen,
    /// Reject every call (the breaker shows as FORCED_OPEN).
    FailClosed,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "strict" => Some(Mode::Strict),
            "batched" => Some(Mode::Batched),
            _ => None,
        }
    }
}

impl Fallback {
    fn parse(s: &str) -> Option<Fallback> {
        match s {
            "local" => Some(Fallback::Local),
            "fail_open" | "fail-open" => Some(Fallback::FailOpen),
            "fail_closed" | "fail-closed" => Some(Fallback::FailClosed),
            _ => None,
        }
    }
}

/// A validated configuration of the Redis store. Build it with
/// [`RedisStoreConfig::builder`] or [`RedisStoreConfig::from_url`].
#[derive(Clone)]
pub struct RedisStoreConfig {
    pub(crate) url: String,
    pub(crate) client: redis::Client,
    pub(crate) scope: Scope,
    pub(crate) prefix: String,
    pub(crate) mode: Mode,
    pub(crate) flush_interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) probe_lease: Duration,
    pub(crate) idle_ttl: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) fallback: Fallback,
    pub(crate) shared_keys: BTreeSet<String>,
}

/// The URL without its password (for logs and `Debug`).
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let mut out = format!("{scheme}://{user}:***@{host}{tail}");
            if let Some(i) = out.find("pass=") {
                let end = out[i..].find('&').map_or(out.len(), |e| i + e);
                out.replace_range(i + 5..end, "***");
            }
            out
        }
        None => {
            let mut out = url.to_owned();
            if let Some(i) = out.find("pass=") {
                let end = out[i..].find('&').map_or(out.len(), |e| i + e);
                out.replace_range(i + 5..end, "***");
            }
            out
        }
    }
}

impl fmt::Debug for RedisStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreConfig")
            .field("url", &redact(&self.url))
            .field("scope", &self.scope)
            .field("prefix", &self.prefix)
            .field("mode", &self.mode)
            .field("flush_interval", &self.flush_interval)
            .field("timeout", &self.timeout)
            .field("poll_interval", &self.poll_interval)
            .field("retry_interval", &self.retry_interval)
            .field("probe_lease", &self.probe_lease)
            .field("idle_ttl", &self.idle_ttl)
            .field("max_in_flight", &self.max_in_flight)
            .field("fallback", &self.fallback)
            .field("shared_keys", &self.shared_keys)
            .finish()
    }
}

impl PartialEq for RedisStoreConfig {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
            && self.scope == other.scope
            && self.prefix == other.prefix
            && self.mode == other.mode
            && self.flush_interval == other.flush_interval
            && self.timeout == other.timeout
            && self.poll_interval == other.poll_interval
            && self.retry_interval == other.retry_interval
            && self.probe_lease == other.probe_lease
            && self.idle_ttl == other.idle_ttl
            && self.max_in_flight == other.max_in_flight
            && self.fallback == other.fallback
            && self.shared_keys == other.shared_keys
    }
}

impl RedisStoreConfig {
    /// A builder for Redis at `url` (`redis://host:port/db`, `redis+unix:///path`), with
    /// the defaults:
    ///
    /// | setting | default | why |
    /// |---|---|---|
    /// | scope | the breaker's name | one scope per dependency |
    /// | `prefix` | `fusebox` | |
    /// | `mode` | [`Mode::Batched`], `flush_interval` 5 ms | per-call cost near the in-memory store's |
    /// | `timeout` | 50 ms | the longest any Redis call may take before the breaker falls back |
    /// | `poll_interval` | 1 s | fleet state re-read even when pub/sub is lost |
    /// | `retry_interval` | 200 ms | how often an unreachable Redis is tried again |
    /// | `probe_lease` | 10 s | must outlast the slowest probe call (its timeout) |
    /// | `idle_ttl` | 10 min | a CLOSED scope nobody writes to disappears after this |
    /// | `max_in_flight` | 1024 | strict mode: script calls waiting on Redis before outcomes are batched |
    /// | `fallback` | [`Fallback::Local`] | |
    /// | shared keys | none | keyed breakers stay local unless their keys are listed |
    pub fn builder(url: impl Into<String>) -> RedisStoreConfigBuilder {
        RedisStoreConfigBuilder {
            url: url.into(),
            scope: Scope::default(),
            prefix: "fusebox".into(),
            mode: Mode::Batched,
            flush_interval: Duration::from_millis(5),
            timeout: Duration::from_millis(50),
            poll_interval: Duration::from_secs(1),
            retry_interval: Duration::from_millis(200),
            probe_lease: Duration::from_secs(10),
            idle_ttl: Duration::from_secs(600),
            max_in_flight: 1024,
            fallback: Fallback::Local,
            shared_keys: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    /// Reads a configuration from one URL: Redis's own URL plus fusebox's settings as query
    /// parameters, e.g.
    /// `redis://cache:6379/0?dep=payments&region=eu&mode=strict&timeout=20ms&fallback=fail_closed`.
    ///
    /// Parameters: `dep`, `region`, `tenant`, `prefix`, `mode` (`strict`, `batched`),
    /// `flush`, `timeout`, `poll`, `retry`, `lease`, `idle_ttl` (durations as `5ms`,
    /// `2s`), `max_in_flight`, `fallback` (`local`, `fail_open`, `fail_closed`) and `keys`
    /// (comma-separated shared keys). Redis's own parameters (`protocol`, `db`, `user`,
    /// `pass`) pass through; anything else is an error.
    ///
    /// ```
    /// use fusebox_redis::{Mode, RedisStoreConfig};
    /// use std::time::Duration;
    ///
    /// let config = RedisStoreConfig::from_url("redis://127.0.0.1:6379/0?dep=payments&mode=strict&timeout=20ms")?;
    /// assert_eq!(config.mode(), Mode::Strict);
    /// assert_eq!(config.timeout(), Duration::from_millis(20));
    /// assert_eq!(config.scope().dep_name(), Some("payments"));
    /// # Ok::<(), fusebox_classify::ConfigError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<RedisStoreConfig, ConfigError> {
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut passed = Vec::new();
        let mut b = RedisStoreConfig::builder(base);
        let mut scope = Scope::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let path = format!("url.{k}");
            let duration = |b: &mut RedisStoreConfigBuilder| match humantime::parse_duration(v) {
                Ok(d) => Some(d),
                Err(e) => {
                    b.problems.push((
                        path.clone(),
                        format!("must be a duration like 5ms, got {v:?}: {e}"),
                    ));
                    None
                }
            };
            match k {
                "dep" => scope.dep = Some(v.to_owned()),
                "region" => scope.region = Some(v.to_owned()),
                "tenant" => scope.tenant = Some(v.to_owned()),
                "prefix" => b.prefix = v.to_owned(),
                "mode" => match Mode::parse(v) {
                    Some(m) => b.mode = m,
                    None => b
                        .problems
                        .push((path, format!("must be strict or batched, got {v:?}"))),
                },
                "fallback" => match Fallback::parse(v) {
                    Some(f) => b.fallback = f,
                    None => b.problems.push((
                        path,
                        format!("must be local, fail_open or fail_closed, got {v:?}"),
                    )),
                },
                "flush" => {
                    if let Some(d) = duration(&mut b) {
                        b.flush_interval = d;
                    }
                }
                "timeout" => {
                    if let Some(d) = duration(&mut b) {
                        b.timeout = d;
                    }
                }
                "poll" => {
                    if let Some(d) = duration(&mut b) {
                        b.poll_interval = d;
                    }
                }
                "retry" => {
                    if let Some(d) = duration(&mut b) {
                        b.retry_interval = d;
                    }
                }
                "lease" => {
                    if let Some(d) = duration(&mut b) {
                        b.probe_lease = d;
                    }
                }
                "idle_ttl" => {
                    if let Some(d) = duration(&mut b) {
                        b.idle_ttl = d;
                    }
                }
                "max_in_flight" => match v.parse() {
                    Ok(n) => b.max_in_flight = n,
                    Err(_) => b
                        .problems
                        .push((path, format!("must be a whole number, got {v:?}"))),
                },
                "keys" => {
                    for key in v.split(',').filter(|k| !k.is_empty()) {
                        b.shared_keys.insert(key.to_owned());
                    }
                }
                "protocol" | "db" | "user" | "pass" => passed.push(pair),
                other => b.problems.push((
                    path,
                    format!("unknown parameter {other:?} (fusebox: dep, region, tenant, prefix, mode, flush, timeout, poll, retry, lease, idle_ttl, max_in_flight, fallback, keys; Redis: protocol, db, user, pass)"),
                )),
            }
        }
        if !passed.is_empty() {
            b.url = format!("{base}?{}", passed.join("&"));
        }
        b.scope = scope;
        b.build()
    }

    /// The Redis URL (with its password, if any: do not log it; `Debug` redacts it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The first part of every key (`fusebox`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How outcomes reach Redis.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How often batched outcomes are flushed.
    pub fn flush_interval(&self) -> Duration {
        self.flush_interval
    }

    /// The longest any Redis call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How often the fleet state is re-read without being told.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// How often an unreachable Redis is tried again.
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
    }

    /// How long a half-open probe's lease lasts.
    pub fn probe_lease(&self) -> Duration {
        self.probe_lease
    }

    /// How long an idle CLOSED scope lives in Redis.
    pub fn idle_ttl(&self) -> Duration {
        self.idle_ttl
    }

    /// Strict mode: script calls waiting on Redis at most.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// What happens while Redis is unreachable.
    pub fn fallback(&self) -> Fallback {
        self.fallback
    }

    /// The keys of a keyed breaker that share state in Redis.
    pub fn shared_keys(&self) -> impl Iterator<Item = &str> {
        self.shared_keys.iter().map(String::as_str)
    }
}

impl FromStr for RedisStoreConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        RedisStoreConfig::from_url(s)
    }
}

/// Builds a [`RedisStoreConfig`]; [`build`](RedisStoreConfigBuilder::build) checks every
/// field and reports every problem.
#[derive(Debug, Clone)]
pub struct RedisStoreConfigBuilder {
    url: String,
    scope: Scope,
    prefix: String,
    pub(crate) mode: Mode,
    pub(crate) flush_interval: Duration,
    timeout: Duration,
    poll_interval: Duration,
    retry_interval: Duration,
    probe_lease: Duration,
    idle_ttl: Duration,
    max_in_flight: usize,
    fallback: Fallback,
    shared_keys: BTreeSet<String>,
    pub(crate) problems: Vec<(String, String)>,
}

impl RedisStoreConfigBuilder {
    /// The scope breakers share (default: each breaker's name as the dependency).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The first part of every key (default `fusebox`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Strict mode: one script call per finished call.
    pub fn strict(mut self) -> Self {
        self.mode = Mode::Strict;
        self
    }

    /// Batched mode: outcomes flushed every `flush_interval` (1 ms ..= 1 s).
    pub fn batched(mut self, flush_interval: Duration) -> Self {
        self.mode = Mode::Batched;
        self.flush_interval = flush_interval;
        self
    }

    /// The longest any Redis call may take (1 ms ..= 10 s); past it the call counts as a
    /// failure of Redis and the breaker falls back.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often the fleet state is re-read when nothing was heard (at least 10 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How often an unreachable Redis is tried again (at least 1 ms).
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// How long a half-open probe's lease lasts (longer than `timeout`). Set it longer than
    /// the slowest probe may take: a lease that expires while its probe still runs lets
    /// another probe start. A replica that dies holding a lease blocks that probe slot for
    /// this long; a lease no call used is given back after half of it.
    pub fn probe_lease(mut self, lease: Duration) -> Self {
        self.probe_lease = lease;
        self
    }

    /// How long a CLOSED scope nobody writes to stays in Redis (at least 1 s). States
    /// other than CLOSED never expire.
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = ttl;
        self
    }

    /// Strict mode: script calls waiting on Redis at most (at least 1); outcomes beyond
    /// it are batched.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// What to do while Redis is unreachable.
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Lets key `key` of a keyed breaker share state in Redis (scope
    /// `dep:<name>:key:<key>`). Keys not listed stay in this process: a key computed from
    /// a request never reaches Redis unless it is one the configuration names.
    pub fn share_key(mut self, key: impl Into<String>) -> Self {
        self.shared_keys.insert(key.into());
        self
    }

    /// Checks every field; every problem is reported, each with its field and rule.
    pub fn build(self) -> Result<RedisStoreConfig, ConfigError> {
        let mut v = Validator::new();
        for (path, rule) in &self.problems {
            v.fail(path.clone(), rule.clone());
        }
        let client = match redis::Client::open(self.url.as_str()) {
            Ok(c) => Some(c),
            Err(e) => {
                v.fail(
                    "url",
                    format!(
                        "must be a Redis URL (redis://host:port/db), got {:?}: {e}",
                        redact(&self.url)
                    ),
                );
                None
            }
        };
        self.scope.validate(&mut v, "scope");
        v.check(is_valid_scope_part(&self.prefix), "prefix", || {
            part_rule(&self.prefix)
        });
        let ms = Duration::from_millis;
        v.check(
            self.flush_interval >= ms(1) && self.flush_interval <= ms(1000),
            "flush_interval",
            || format!("must be within 1ms..=1s, got {:?}", self.flush_interval),
        );
        v.check(
            self.timeout >= ms(1) && self.timeout <= ms(10_000),
            "timeout",
            || format!("must be within 1ms..=10s, got {:?}", self.timeout),
        );
        v.check(self.poll_interval >= ms(10), "poll_interval", || {
            format!("must be at least 10ms, got {:?}", self.poll_interval)
        });
        v.check(self.retry_interval >= ms(1), "retry_interval", || {
            format!("must be at least 1ms, got {:?}", self.retry_interval)
        });
        v.check(self.probe_lease > self.timeout, "probe_lease", || {
            format!(
                "must be longer than timeout ({:?}), got {:?}",
                self.timeout, self.probe_lease
            )
        });
        v.check(self.idle_ttl >= ms(1000), "idle_ttl", || {
            format!("must be at least 1s, got {:?}", self.idle_ttl)
        });
        v.check(self.max_in_flight >= 1, "max_in_flight", || {
            "must be at least 1, got 0".into()
        });
        for key in &self.shared_keys {
            v.check(is_valid_scope_part(key), "shared_keys", || part_rule(key));
        }
        v.finish(())?;
        let Some(client) = client else {
            // `finish` returned Ok, so the URL parsed; keep the invariant explicit.
            return Err(ConfigError::new("url", "must be a Redis URL"));
        };
        Ok(RedisStoreConfig {
            url: self.url,
            client,
            scope: self.scope,
            prefix: self.prefix,
            mode: self.mode,
            flush_interval: self.flush_interval,
            timeout: self.timeout,
            poll_interval: self.poll_interval,
            retry_interval: self.retry_interval,
            probe_lease: self.probe_lease,
            idle_ttl: self.idle_ttl,
            max_in_flight: self.max_in_flight,
            fallback: self.fallback,
            shared_keys: self.shared_keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented() {
        let c = RedisStoreConfig::builder("redis://127.0.0.1:6379/0")
            .build()
            .unwrap();
        assert_eq!(c.mode(), Mode::Batched);
        assert_eq!(c.flush_interval(), Duration::from_millis(5));
        assert_eq!(c.timeout(), Duration::from_millis(50));
        assert_eq!(c.fallback(), Fallback::Local);
        assert_eq!(c.prefix(), "fusebox");
        assert_eq!(c.scope(), &Scope::breaker_name());
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = RedisStoreConfig::builder("http://nope")
            .scope(Scope::dep("pay{ments}").region("eu:west").tenant(""))
            .prefix("fuse box")
            .batched(Duration::ZERO)
            .timeout(Duration::ZERO)
            .poll_interval(Duration::from_millis(1))
            .retry_interval(Duration::ZERO)
            .probe_lease(Duration::ZERO)
            .idle_ttl(Duration::from_millis(10))
            .max_in_flight(0)
            .share_key("a b")
            .build()
            .unwrap_err();
        let fields: Vec<&str> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            fields,
            [
                "url",
                "scope.dep",
                "scope.region",
                "scope.tenant",
                "prefix",
                "flush_interval",
                "timeout",
                "poll_interval",
                "retry_interval",
                "probe_lease",
                "idle_ttl",
                "max_in_flight",
                "shared_keys",
            ]
        );
        assert!(
            err.to_string().contains("scope.dep: must be 1 to 64"),
            "{err}"
        );
    }

    #[test]
    fn scope_parts_are_restricted() {
        assert!(is_valid_scope_part("payments-eu_1.v2"));
        for bad in ["", "a:b", "{x}", "a b", "é", &"x".repeat(65)] {
            assert!(!is_valid_scope_part(bad), "{bad:?}");
        }
        let s = Scope::dep("payments").region("eu").tenant("acme");
        assert_eq!(
            s.render("ignored", None).as_deref(),
            Some("dep:payments:region:eu:tenant:acme")
        );
        assert_eq!(
            Scope::breaker_name()
                .render("fraud", Some("shard-1"))
                .as_deref(),
            Some("dep:fraud:key:shard-1")
        );
        assert_eq!(Scope::breaker_name().render("has space", None), None);
        assert_eq!(Scope::breaker_name().render("ok", Some("a}b")), None);
    }

    #[test]
    fn reads_a_url_with_settings() {
        let c = RedisStoreConfig::from_url(
            "redis://127.0.0.1:7000/2?dep=payments&region=eu&tenant=acme&mode=strict&timeout=20ms&flush=2ms&poll=500ms&retry=50ms&lease=3s&idle_ttl=1m&max_in_flight=8&fallback=fail_closed&keys=a,b&protocol=resp2&prefix=fb",
        )
        .unwrap();
        assert_eq!(c.mode(), Mode::Strict);
        assert_eq!(c.timeout(), Duration::from_millis(20));
        assert_eq!(c.flush_interval(), Duration::from_millis(2));
        assert_eq!(c.poll_interval(), Duration::from_millis(500));
        assert_eq!(c.retry_interval(), Duration::from_millis(50));
        assert_eq!(c.probe_lease(), Duration::from_secs(3));
        assert_eq!(c.idle_ttl(), Duration::from_secs(60));
        assert_eq!(c.max_in_flight(), 8);
        assert_eq!(c.fallback(), Fallback::FailClosed);
        assert_eq!(c.prefix(), "fb");
        assert_eq!(c.shared_keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            c.scope(),
            &Scope::dep("payments").region("eu").tenant("acme")
        );
        assert_eq!(c.url(), "redis://127.0.0.1:7000/2?protocol=resp2");
        let parsed: RedisStoreConfig = "redis://127.0.0.1/".parse().unwrap();
        assert_eq!(parsed.mode(), Mode::Batched);

        let err = RedisStoreConfig::from_url(
            "redis://127.0.0.1/?mode=eventually&timeout=soon&mdoe=strict&dep=a:b",
        )
        .unwrap_err();
        let fields: Vec<&str> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(fields, ["url.mode", "url.timeout", "url.mdoe", "scope.dep"]);
    }

    #[test]
    fn debug_hides_the_password() {
        let c = RedisStoreConfig::builder("redis://user:s3cret@127.0.0.1:6379/0")
            .build()
            .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("redis://user:***@127.0.0.1:6379/0"),
            "{shown}"
        );
        assert_eq!(redact("redis://:pw@h/0"), "redis://:***@h/0");
        assert_eq!(redact("redis://h/0"), "redis://h/0");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserializes_from_a_url_or_a_table() {
        #[derive(serde::Deserialize)]
        struct File {
            store: RedisStoreConfig,
        }
        let f: File =
            toml::from_str(r#"store = "redis://127.0.0.1:6379/0?dep=payments&mode=strict""#)
                .unwrap();
        assert_eq!(f.store.mode(), Mode::Strict);
        let f: File = toml::from_str(
            r#"
            [store]
            url = "redis://127.0.0.1:6379/0"
            scope = "dep:payments:region:eu"
            mode = "batched"
            flush_interval = "2ms"
            fallback = "fail_open"
            shared_keys = ["shard-1"]
            "#,
        )
        .unwrap();
        assert_eq!(f.store.flush_interval(), Duration::from_millis(2));
        assert_eq!(f.store.fallback(), Fallback::FailOpen);
        assert_eq!(f.store.scope(), &Scope::dep("payments").region("eu"));
        let err = toml::from_str::<File>(
            r#"
            [store]
            url = "redis://127.0.0.1:6379/0"
            scope = "dep:pay ments"
            "#,
        )
        .err()
        .unwrap();
        // One string in a file: the scope's problem is the `scope` key's.
        assert!(err.to_string().contains("scope: must be 1 to 64"), "{err}");
    }
}
