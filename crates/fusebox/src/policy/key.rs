//! Which breaker a call belongs to, when a policy keeps one breaker per key.

use fusebox_breaker::{KeyFn, RequestHead, host_key};
use fusebox_classify::RouteId;
use smol_str::SmolStr;
use std::fmt;
use std::sync::Arc;

/// How a keyed policy picks the breaker of a call: by host, by route, or by a function of
/// the request.
///
/// One policy value holds one key function; [`KeyBy`] is a type of its own (not a generic
/// parameter) so that a keyed policy and an unkeyed one have the same type.
///
/// ```
/// use fusebox::{KeyBy, Policy, CircuitBreakerConfig};
///
/// // One breaker per tenant, from a header.
/// let by_tenant = KeyBy::custom(|head| {
///     head.headers()
///         .get("x-tenant")
///         .and_then(|v| v.to_str().ok())
///         .unwrap_or("anonymous")
///         .to_owned()
/// });
/// let policy = Policy::builder("billing")
///     .circuit_breaker(CircuitBreakerConfig::builder().name("billing").build()?)
///     .breaker_key(by_tenant)
///     .build()?;
/// assert!(policy.keyed_breaker_handle().is_some());
/// # Ok::<(), fusebox::ConfigError>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyBy {
    /// The URI's host, else the `Host` header's, in lower case ([`BreakerKey::Host`]; no
    /// allocation for hosts of up to 23 bytes, one per call for longer ones).
    Host,
    /// The URI's host and port (`"api.example.com:8443"`; the host alone when the URI
    /// has no port), else the `Host` header, in lower case ([`BreakerKey::Host`]; no
    /// allocation for keys of up to 23 bytes, one per call for longer ones).
    Authority,
    /// The route of the route table (no allocation).
    Route,
    /// A function of the request head.
    Custom(Arc<dyn Fn(&RequestHead<'_>) -> String + Send + Sync>),
}

impl KeyBy {
    /// A key function of the request head.
    pub fn custom(f: impl Fn(&RequestHead<'_>) -> String + Send + Sync + 'static) -> Self {
        KeyBy::Custom(Arc::new(f))
    }
}

impl fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyBy::Host => f.write_str("KeyBy::Host"),
            KeyBy::Authority => f.write_str("KeyBy::Authority"),
            KeyBy::Route => f.write_str("KeyBy::Route"),
            KeyBy::Custom(_) => f.write_str("KeyBy::Custom(..)"),
        }
    }
}

/// The key of one breaker of a keyed policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerKey {
    /// A route of the route table ([`KeyBy::Route`]).
    Route(RouteId),
    /// A host, or a host and port, in lower case ([`KeyBy::Host`], [`KeyBy::Authority`]).
    /// Kept inline up to 23 bytes: looking up a known host allocates nothing.
    Host(SmolStr),
    /// A custom key ([`KeyBy::Custom`]).
    Text(String),
}

impl BreakerKey {
    /// The key [`KeyBy::Host`] or [`KeyBy::Authority`] gives a request for `host` (a host,
    /// or `host:port`): for looking up that host's breaker.
    pub fn host(host: impl AsRef<str>) -> Self {
        BreakerKey::Host(host_key(host.as_ref()))
    }
}

impl KeyFn for KeyBy {
    type Key = BreakerKey;

    #[inline]
    fn key(&self, head: &RequestHead<'_>) -> BreakerKey {
        match self {
            KeyBy::Host => BreakerKey::host(head.host().unwrap_or("")),
            KeyBy::Authority => BreakerKey::host(match head.uri().authority() {
                Some(a) => a.as_str(),
                None => head
                    .headers()
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or(""),
            }),
            KeyBy::Route => BreakerKey::Route(head.route()),
            KeyBy::Custom(f) => BreakerKey::Text(f(head)),
        }
    }

    fn describe(&self, key: &BreakerKey, head: &RequestHead<'_>) -> Arc<str> {
        match key {
            BreakerKey::Route(_) => Arc::from(head.route_name()),
            BreakerKey::Host(host) => Arc::from(host.as_str()),
            BreakerKey::Text(text) => Arc::from(text.as_str()),
        }
    }
}
