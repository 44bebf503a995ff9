//! A built policy written back as a file would write it: every setting of every layer,
//! through each layer's own section ([`Section::of`]), so that what a service runs with can
//! be shown (`fusebox check --json`), logged at start-up, and read back.

use super::{BreakerKeys, Header, KeyKind, RampSection, SpreadSection, StoreKind};
use crate::policy::{BreakerStore, KeyBy, Policy};
use fusebox_breaker::CircuitBreakerSection;
use fusebox_classify::section::{RouteSection, Section, count_of};
use fusebox_limit::LimitSection;
use fusebox_retry::RetrySection;
use fusebox_timeout::TimeoutSection;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

#[cfg(feature = "redis")]
use fusebox_redis::RedisStoreSection;

/// A policy as a file writes it (a `policies.<name>` table), every setting written out.
/// Loading it back builds the same policy; what only code can give is left out: a
/// fallback *function* (the routes that use one say `fallback = true`, and need one again),
/// breaker event listeners, and a custom breaker key function. A Redis URL is written
/// without its password.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySection {
    #[serde(skip_serializing_if = "Option::is_none")]
    breaker: Option<BreakerOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<LimitSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<TimeoutSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<RetrySection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recovery_ramp: Option<RampSection>,
    default_route: RouteOut,
    #[serde(skip_serializing_if = "Routes::is_empty")]
    routes: Routes,
}

#[derive(Debug, Clone, Serialize)]
struct BreakerOut {
    #[serde(flatten)]
    keys: BreakerKeys,
    #[serde(flatten)]
    section: CircuitBreakerSection,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<StoreOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spread: Option<SpreadSection>,
}

#[derive(Debug, Clone, Serialize)]
struct StoreOut {
    kind: StoreKind,
    #[cfg(feature = "redis")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    redis: Option<RedisStoreSection>,
}

#[derive(Debug, Clone, Serialize)]
struct RouteOut {
    #[serde(flatten)]
    section: RouteSection,
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback: Option<bool>,
}

/// The named routes, in table order.
#[derive(Debug, Clone, Default)]
struct Routes(Vec<(String, RouteOut)>);

impl Routes {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Routes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (key, route) in &self.0 {
            map.serialize_entry(key, route)?;
        }
        map.end()
    }
}

impl PolicySection {
    /// The section of `policy`.
    pub fn of(policy: &Policy) -> PolicySection {
        let fallback: Vec<&str> = policy.fallback_routes().collect();
        let route = |name: &str, r: &fusebox_classify::Route| RouteOut {
            section: RouteSection::of(r),
            fallback: fallback.contains(&name).then_some(true),
        };
        let mut default_route = None;
        let mut routes = Vec::new();
        for (id, name, r) in policy.routes().iter() {
            if id == fusebox_classify::RouteId::DEFAULT {
                default_route = Some(route(name, &r));
            } else {
                routes.push((name.to_owned(), route(name, &r)));
            }
        }
        let (max_keys, idle_timeout) = policy.breaker_key_limits();
        let breaker = policy.breaker_config().map(|config| BreakerOut {
            keys: BreakerKeys {
                enabled: None,
                key: policy.breaker_key().and_then(key_kind),
                key_header: policy.breaker_key().and_then(key_header).map(Header),
                answer_key_header: match policy.breaker_key() {
                    Some(KeyBy::Answered(_, header)) => Some(Header(header.clone())),
                    _ => None,
                },
                max_keys: max_keys.map(count_of),
                idle_timeout,
            },
            section: CircuitBreakerSection::of(config),
            store: match policy.breaker_store() {
                BreakerStore::InMemory => None,
                #[cfg(feature = "redis")]
                BreakerStore::Redis(on) => Some(StoreOut {
                    kind: StoreKind::Redis,
                    redis: Some(RedisStoreSection::of(on.config())),
                }),
            },
            spread: policy.key_spread().map(SpreadSection::of),
        });
        PolicySection {
            breaker,
            limit: policy.limit_config().as_ref().map(LimitSection::of),
            timeout: policy.timeout_config().map(TimeoutSection::of),
            retry: policy.retry_config().as_deref().map(RetrySection::of),
            recovery_ramp: policy.recovery_ramp().map(|r| RampSection {
                enabled: None,
                initial_limit: Some(count_of(r.initial_limit())),
                duration: Some(r.duration()),
            }),
            default_route: default_route.unwrap_or(RouteOut {
                section: RouteSection::default(),
                fallback: None,
            }),
            routes: Routes(routes),
        }
    }
}

/// Policies as a policy file writes them (`[policies.<name>]` tables), every setting
/// written out: `toml::to_string(&PolicyFileSection::of(&[&a, &b]))` is a file that builds
/// the same policies.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyFileSection {
    policies: Policies,
}

#[derive(Debug, Clone)]
struct Policies(Vec<(String, PolicySection)>);

impl Serialize for Policies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, policy) in &self.0 {
            map.serialize_entry(name, policy)?;
        }
        map.end()
    }
}

impl PolicyFileSection {
    /// The file of `policies`, in this order.
    pub fn of(policies: &[&Policy]) -> PolicyFileSection {
        PolicyFileSection {
            policies: Policies(
                policies
                    .iter()
                    .map(|p| (p.name().to_owned(), PolicySection::of(p)))
                    .collect(),
            ),
        }
    }
}

/// How a file writes a policy's key; `None` for a key only code can give.
fn key_kind(key: &KeyBy) -> Option<KeyKind> {
    match key {
        KeyBy::Host => Some(KeyKind::Host),
        KeyBy::Authority => Some(KeyKind::Authority),
        KeyBy::Route => Some(KeyKind::Route),
        KeyBy::Header(_) => Some(KeyKind::Header),
        KeyBy::Answered(inner, _) => key_kind(inner),
        _ => None,
    }
}

/// The request header a policy's key is the value of, if it is one.
fn key_header(key: &KeyBy) -> Option<http::HeaderName> {
    match key {
        KeyBy::Header(name) => Some(name.clone()),
        KeyBy::Answered(inner, _) => key_header(inner),
        _ => None,
    }
}
