//! [`RedisStoreSection`]: a breaker's Redis store as a policy file writes it, and the
//! `serde` form of [`RedisStoreConfig`].

use crate::config::{Fallback, Mode, RedisStoreConfig, RedisStoreConfigBuilder, Scope};

use fusebox_classify::section::{Section, count, count_of, duration};
use fusebox_classify::{ConfigError, Validator, take_unset};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// A breaker's Redis store as a file writes it (a policy's `breaker.store` table, beside
/// `kind = "redis"`): every key optional but `url`, unknown keys refused.
///
/// ```toml
/// url = "redis://cache:6379/0"
/// scope = "dep:payments:region:eu"   # default: the breaker's name as the dependency
/// mode = "batched"                   # or "strict"
/// flush_interval = "5ms"
/// timeout = "50ms"
/// fallback = "local"                 # or "fail_open", "fail_closed"
/// shared_keys = ["shard-1"]          # a keyed breaker's keys the fleet shares
/// ```
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisStoreSection {
    /// The Redis URL (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The scope: `"dep:<name>"`, optionally `":region:<r>"` and `":tenant:<t>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The prefix of every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `"strict"` or `"batched"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Batched mode: how often outcomes are flushed.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub flush_interval: Option<Duration>,
    /// The bound of every Redis call.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub timeout: Option<Duration>,
    /// How often the fleet's state is read when nothing was heard.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub poll_interval: Option<Duration>,
    /// How often Redis is tried again while it is away.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub retry_interval: Option<Duration>,
    /// How long a half-open probe's lease lasts.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub probe_lease: Option<Duration>,
    /// How long a CLOSED scope nobody writes to stays.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub idle_ttl: Option<Duration>,
    /// Strict mode: script calls waiting on Redis at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// What decides while Redis is away: `"local"`, `"fail_open"`, `"fail_closed"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// The keys of a keyed breaker that the fleet shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_keys: Option<Vec<String>>,
}

impl RedisStoreSection {
    /// The file's key for what the store's builder or checks call `path`: the scope is one
    /// string in a file (`scope.dep` is `scope`).
    pub fn file_key(path: &str) -> &str {
        if path.starts_with("scope.") {
            "scope"
        } else {
            path
        }
    }

    /// The builder with this section's settings, and the problems only the file form can
    /// have (no `url`, a scope string of the wrong shape).
    fn builder_checked(&self, v: &mut Validator) -> RedisStoreConfigBuilder {
        let url = match &self.url {
            Some(url) => url.clone(),
            None => {
                v.fail(
                    "url",
                    "is required with kind = \"redis\": a URL such as \"redis://127.0.0.1:6379/0\"",
                );
                // Check the other keys against a stand-in.
                "redis://127.0.0.1:6379/0".to_owned()
            }
        };
        let mut b = RedisStoreConfig::builder(url);
        if let Some(scope) = &self.scope {
            match scope.parse::<Scope>() {
                Ok(scope) => b = b.scope(scope),
                Err(rule) => v.fail("scope", rule),
            }
        }
        if let Some(x) = &self.prefix {
            b = b.prefix(x.as_str());
        }
        if let Some(x) = self.mode {
            b.mode = x;
        }
        if let Some(x) = self.flush_interval {
            b.flush_interval = x;
        }
        if let Some(x) = self.timeout {
            b = b.timeout(x);
        }
        if let Some(x) = self.poll_interval {
            b = b.poll_interval(x);
        }
        if let Some(x) = self.retry_interval {
            b = b.retry_interval(x);
        }
        if let Some(x) = self.probe_lease {
            b = b.probe_lease(x);
        }
        if let Some(x) = self.idle_ttl {
            b = b.idle_ttl(x);
        }
        if let Some(x) = self.max_in_flight {
            b = b.max_in_flight(count(x));
        }
        if let Some(x) = self.fallback {
            b = b.fallback(x);
        }
        for key in self.shared_keys.iter().flatten() {
            b = b.share_key(key.as_str());
        }
        b
    }

    /// The builder with this section's settings.
    pub fn builder(&self) -> RedisStoreConfigBuilder {
        self.builder_checked(&mut Validator::new())
    }
}

impl Section for RedisStoreSection {
    type Config = RedisStoreConfig;

    fn build(&self) -> Result<RedisStoreConfig, ConfigError> {
        let mut v = Validator::new();
        match self.builder_checked(&mut v).build() {
            Ok(config) => v.finish(config),
            Err(e) => {
                for p in e.problems() {
                    v.fail(Self::file_key(p.path()), p.rule());
                }
                // `v` holds at least `e`'s problems.
                Err(v.finish(()).err().unwrap_or(e))
            }
        }
    }

    /// Every key written out, but the URL's password: the section of a configuration is
    /// for showing and logging it, and a password must not travel with it.
    fn of(c: &RedisStoreConfig) -> RedisStoreSection {
        let scope = c.scope().to_string();
        let shared: Vec<String> = c.shared_keys().map(str::to_owned).collect();
        RedisStoreSection {
            url: Some(crate::config::redact(c.url())),
            scope: (!scope.is_empty()).then_some(scope),
            prefix: Some(c.prefix().to_owned()),
            mode: Some(c.mode()),
            flush_interval: Some(c.flush_interval()),
            timeout: Some(c.timeout()),
            poll_interval: Some(c.poll_interval()),
            retry_interval: Some(c.retry_interval()),
            probe_lease: Some(c.probe_lease()),
            idle_ttl: Some(c.idle_ttl()),
            max_in_flight: Some(count_of(c.max_in_flight())),
            fallback: Some(c.fallback()),
            shared_keys: (!shared.is_empty()).then_some(shared),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        take_unset!(self, base; url, scope, prefix, mode, flush_interval, timeout,
            poll_interval, retry_interval, probe_lease, idle_ttl, max_in_flight, fallback,
            shared_keys);
        self
    }
}

/// Either a URL string (`"redis://host/0?dep=payments&mode=strict"`, see
/// [`RedisStoreConfig::from_url`]) or a [`RedisStoreSection`] table; validated while
/// deserializing.
impl<'de> Deserialize<'de> for RedisStoreConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = RedisStoreConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a redis:// URL or a table with a `url`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                RedisStoreConfig::from_url(v).map_err(E::custom)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                RedisStoreSection::deserialize(serde::de::value::MapAccessDeserializer::new(map))?
                    .build()
                    .map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(Either)
    }
}

impl Serialize for RedisStoreConfig {
    /// Writes the configuration as its [`RedisStoreSection`] (the URL without its
    /// password, as `Debug` shows it).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RedisStoreSection::of(self).serialize(s)
    }
}
