//! Which breaker a call belongs to, when a policy keeps one breaker per key.

use fusebox_breaker::spread::{answer_key, header_text};
use fusebox_breaker::{KeyFn, RequestHead, host_key};
use fusebox_classify::RouteId;
use http::{HeaderMap, HeaderName};
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
    /// A request header's value, trimmed ([`BreakerKey::Value`]; requests without it, or
    /// with a value that is not visible ASCII, share the empty key; no allocation for
    /// values of up to 23 bytes): the shard, tenant or partition a client names.
    Header(HeaderName),
    /// The key of the inner `KeyBy`, unless the answer names another in this header (a
    /// response header, or a gRPC trailer): built by [`KeyBy::named_by_answer`].
    Answered(Arc<KeyBy>, HeaderName),
}

impl KeyBy {
    /// A key function of the request head.
    pub fn custom(f: impl Fn(&RequestHead<'_>) -> String + Send + Sync + 'static) -> Self {
        KeyBy::Custom(Arc::new(f))
    }

    /// These keys, except that an answer carrying `header` counts against the key it
    /// names instead of the request's: the shard a server reports as overloaded, say. The
    /// named text is a key as this `KeyBy` makes them (a host for [`KeyBy::Host`], a value
    /// for [`KeyBy::Header`]); a malformed value names none, and a breaker keyed by route
    /// cannot take its keys from answers (building the policy fails). See
    /// `fusebox_breaker::AnswerKeyed` for the rules.
    ///
    /// ```
    /// use fusebox::{CircuitBreakerConfig, KeyBy, Policy};
    /// use http::HeaderName;
    ///
    /// let shard = HeaderName::from_static("x-shard");
    /// let policy = Policy::builder("store")
    ///     .circuit_breaker(CircuitBreakerConfig::builder())
    ///     .breaker_key(KeyBy::Header(shard.clone()).named_by_answer(shard))
    ///     .build()?;
    /// # let _ = policy;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn named_by_answer(self, header: HeaderName) -> Self {
        KeyBy::Answered(Arc::new(self), header)
    }

    /// The key this `KeyBy` makes of a key's text, if it makes keys of text.
    fn key_of_text(&self, text: SmolStr) -> Option<BreakerKey> {
        match self {
            KeyBy::Host | KeyBy::Authority => Some(BreakerKey::host(text)),
            KeyBy::Header(_) => Some(BreakerKey::Value(text)),
            KeyBy::Custom(_) => Some(BreakerKey::Text(text.into())),
            KeyBy::Route => None,
            KeyBy::Answered(inner, _) => inner.key_of_text(text),
        }
    }

    /// Whether its keys can be named by an answer (every kind but the route).
    pub(crate) fn takes_text(&self) -> bool {
        match self {
            KeyBy::Route => false,
            KeyBy::Answered(inner, _) => inner.takes_text(),
            _ => true,
        }
    }
}

/// A request header's value as a key: trimmed, the empty key when absent or not visible
/// ASCII.
fn header_value(headers: &HeaderMap, name: &HeaderName) -> SmolStr {
    header_text(headers, name)
        .map(SmolStr::new)
        .unwrap_or_default()
}

impl fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyBy::Host => f.write_str("KeyBy::Host"),
            KeyBy::Authority => f.write_str("KeyBy::Authority"),
            KeyBy::Route => f.write_str("KeyBy::Route"),
            KeyBy::Custom(_) => f.write_str("KeyBy::Custom(..)"),
            KeyBy::Header(name) => f.debug_tuple("KeyBy::Header").field(name).finish(),
            KeyBy::Answered(inner, name) => f
                .debug_tuple("KeyBy::Answered")
                .field(inner)
                .field(name)
                .finish(),
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
    /// A request header's value ([`KeyBy::Header`]), or a key an answer named. Kept inline
    /// up to 23 bytes.
    Value(SmolStr),
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
            KeyBy::Header(name) => BreakerKey::Value(header_value(head.headers(), name)),
            KeyBy::Answered(inner, _) => inner.key(head),
        }
    }

    fn reads_answers(&self) -> bool {
        matches!(self, KeyBy::Answered(..))
    }

    fn answer_key(&self, headers: &HeaderMap) -> Option<BreakerKey> {
        match self {
            KeyBy::Answered(inner, name) => inner.key_of_text(answer_key(headers, name)?),
            _ => None,
        }
    }

    fn describe_answer_key(&self, key: &BreakerKey) -> Arc<str> {
        match key {
            BreakerKey::Route(_) => Arc::from(""),
            BreakerKey::Host(text) | BreakerKey::Value(text) => Arc::from(text.as_str()),
            BreakerKey::Text(text) => Arc::from(text.as_str()),
        }
    }

    fn describe(&self, key: &BreakerKey, head: &RequestHead<'_>) -> Arc<str> {
        match key {
            BreakerKey::Route(_) => Arc::from(head.route_name()),
            BreakerKey::Host(host) => Arc::from(host.as_str()),
            BreakerKey::Text(text) => Arc::from(text.as_str()),
            BreakerKey::Value(text) => Arc::from(text.as_str()),
        }
    }
}
