//! Configuration of the timeout layer (client side) and the incoming-deadline layer (server
//! side).
//!
//! Both are built with a builder whose `build()` checks every field and reports every
//! problem at once as a [`ConfigError`] naming the field and the rule; nothing panics on a
//! bad configuration. With the `serde` feature both deserialize, durations written the
//! human way (`"250ms"`, `"2s"`), and are checked the same way.

use fusebox_classify::{ConfigError, Validator};
use http::HeaderName;
use std::sync::Arc;
use std::time::Duration;

/// The name of a timeout nobody named.
const UNNAMED: &str = "default";

/// The timeout used for routes of the [`RouteTable`](fusebox_classify::RouteTable) that
/// name none, unless the configuration says otherwise: 15 seconds, the default route
/// timeout of Envoy.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// How a [`TimeoutLayer`](crate::TimeoutLayer) (and its
/// [`BodyTimeoutLayer`](crate::BodyTimeoutLayer)) bound calls.
///
/// - `name`: the `dependency` label of the timeout's metrics (default `"default"`; a
///   `Policy` names an unnamed timeout after itself).
/// - `default_timeout`: the timeout of routes that have none in the route table
///   (default [`DEFAULT_TIMEOUT`]).
/// - `body_timeout`: how long a response body may take, from its headers to its end,
///   enforced by the [`BodyTimeoutLayer`](crate::BodyTimeoutLayer) (default: unbounded,
///   except by a caller's deadline).
/// - `propagate_grpc_timeout`: when a request carries a
///   [`Deadline`](fusebox_classify::Deadline), send the remaining budget downstream in
///   `grpc-timeout` (default `true`).
/// - `deadline_header`: also send it, in whole milliseconds, in this header (for example
///   `x-request-timeout-ms`; default none).
///
/// ```
/// use fusebox_timeout::TimeoutConfig;
/// use std::time::Duration;
///
/// let config = TimeoutConfig::builder()
///     .default_timeout(Duration::from_millis(250))
///     .body_timeout(Duration::from_secs(5))
///     .deadline_header("x-request-timeout-ms")
///     .build()?;
/// assert_eq!(config.default_timeout(), Duration::from_millis(250));
///
/// let err = TimeoutConfig::builder()
///     .default_timeout(Duration::ZERO)
///     .deadline_header("not a header")
///     .build()
///     .unwrap_err();
/// assert_eq!(err.problems().len(), 2);
/// assert_eq!(err.problems()[0].path(), "default_timeout");
/// # Ok::<(), fusebox_classify::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutConfig {
    name: Arc<str>,
    named: bool,
    default_timeout: Duration,
    body_timeout: Option<Duration>,
    propagate_grpc_timeout: bool,
    deadline_header: Option<HeaderName>,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        TimeoutConfig {
            name: Arc::from(UNNAMED),
            named: false,
            default_timeout: DEFAULT_TIMEOUT,
            body_timeout: None,
            propagate_grpc_timeout: true,
            deadline_header: None,
        }
    }
}

impl TimeoutConfig {
    /// A builder with the defaults.
    pub fn builder() -> TimeoutConfigBuilder {
        TimeoutConfigBuilder::default()
    }

    /// The name, shared.
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The name: the `dependency` label of the timeout's metrics.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the name was given (a policy names an unnamed timeout after itself).
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// This configuration, named `name` (what a policy does to a timeout nobody named).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.named = true;
        self
    }

    /// The timeout of routes that have none.
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// The response-body timeout, if any.
    pub fn body_timeout(&self) -> Option<Duration> {
        self.body_timeout
    }

    /// Whether the remaining budget is sent downstream in `grpc-timeout`.
    pub fn propagate_grpc_timeout(&self) -> bool {
        self.propagate_grpc_timeout
    }

    /// The header that carries the remaining budget in milliseconds, if any.
    pub fn deadline_header(&self) -> Option<&HeaderName> {
        self.deadline_header.as_ref()
    }

    /// The same configuration with `timeout` for routes that have none (a reloaded
    /// policy's running settings; a zero timeout is kept as it was).
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        if !timeout.is_zero() {
            self.default_timeout = timeout;
        }
        self
    }

    /// Whether a call with a deadline writes any header downstream.
    pub(crate) fn propagates(&self) -> bool {
        self.propagate_grpc_timeout || self.deadline_header.is_some()
    }
}

/// Builds a [`TimeoutConfig`]; see there for the fields and their defaults.
#[derive(Debug, Clone)]
pub struct TimeoutConfigBuilder {
    name: Option<Arc<str>>,
    default_timeout: Duration,
    body_timeout: Option<Duration>,
    propagate_grpc_timeout: bool,
    deadline_header: Option<String>,
}

impl Default for TimeoutConfigBuilder {
    fn default() -> Self {
        TimeoutConfigBuilder {
            name: None,
            default_timeout: DEFAULT_TIMEOUT,
            body_timeout: None,
            propagate_grpc_timeout: true,
            deadline_header: None,
        }
    }
}

impl TimeoutConfigBuilder {
    /// The name, used as the `dependency` label of the timeout's metrics. Unset, a policy
    /// names its timeout after itself, and one used alone is named `"default"`.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The timeout of routes that name none (must be greater than zero).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Bounds how long a response body may take from its headers to its end (must be
    /// greater than zero), in a [`BodyTimeoutLayer`](crate::BodyTimeoutLayer). When it
    /// fires, the body ends with an
    /// [`Elapsed`](crate::error::Elapsed) error.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = Some(timeout);
        self
    }

    /// Whether to send the remaining budget of calls with a deadline in `grpc-timeout`
    /// (default `true`).
    pub fn propagate_grpc_timeout(mut self, propagate: bool) -> Self {
        self.propagate_grpc_timeout = propagate;
        self
    }

    /// Also sends the remaining budget of calls with a deadline in this header, in whole
    /// milliseconds (a valid header name, such as `x-request-timeout-ms`).
    pub fn deadline_header(mut self, name: impl Into<String>) -> Self {
        self.deadline_header = Some(name.into());
        self
    }

    /// Checks every field.
    pub fn build(self) -> Result<TimeoutConfig, ConfigError> {
        let mut v = Validator::new();
        v.check(!self.default_timeout.is_zero(), "default_timeout", || {
            "must be greater than zero".into()
        });
        if let Some(body) = self.body_timeout {
            v.check(!body.is_zero(), "body_timeout", || {
                "must be greater than zero".into()
            });
        }
        let deadline_header = header_name(self.deadline_header, "deadline_header", &mut v);
        v.finish(TimeoutConfig {
            named: self.name.is_some(),
            name: self.name.unwrap_or_else(|| Arc::from(UNNAMED)),
            default_timeout: self.default_timeout,
            body_timeout: self.body_timeout,
            propagate_grpc_timeout: self.propagate_grpc_timeout,
            deadline_header,
        })
    }
}

/// Which incoming headers an [`IncomingDeadlineLayer`](crate::IncomingDeadlineLayer) reads.
///
/// - `grpc_timeout`: read `grpc-timeout` (default `true`).
/// - `header`: also read this header, holding whole milliseconds (default none).
///
/// When both are present the smaller wins. Malformed values are ignored (and counted).
///
/// ```
/// use fusebox_timeout::DeadlineConfig;
///
/// let config = DeadlineConfig::builder().header("x-request-timeout-ms").build()?;
/// assert_eq!(config.header().map(|h| h.as_str()), Some("x-request-timeout-ms"));
/// assert!(config.grpc_timeout());
/// # Ok::<(), fusebox_classify::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlineConfig {
    grpc_timeout: bool,
    header: Option<HeaderName>,
}

impl Default for DeadlineConfig {
    fn default() -> Self {
        DeadlineConfig {
            grpc_timeout: true,
            header: None,
        }
    }
}

impl DeadlineConfig {
    /// A builder with the defaults.
    pub fn builder() -> DeadlineConfigBuilder {
        DeadlineConfigBuilder::default()
    }

    /// Whether `grpc-timeout` is read.
    pub fn grpc_timeout(&self) -> bool {
        self.grpc_timeout
    }

    /// The milliseconds header read, if any.
    pub fn header(&self) -> Option<&HeaderName> {
        self.header.as_ref()
    }
}

/// Builds a [`DeadlineConfig`]; see there for the fields and their defaults.
#[derive(Debug, Clone)]
pub struct DeadlineConfigBuilder {
    grpc_timeout: bool,
    header: Option<String>,
}

impl Default for DeadlineConfigBuilder {
    fn default() -> Self {
        DeadlineConfigBuilder {
            grpc_timeout: true,
            header: None,
        }
    }
}

impl DeadlineConfigBuilder {
    /// Whether to read `grpc-timeout` (default `true`).
    pub fn grpc_timeout(mut self, read: bool) -> Self {
        self.grpc_timeout = read;
        self
    }

    /// Also reads this header, holding whole milliseconds (a valid header name, such as
    /// `x-request-timeout-ms`).
    pub fn header(mut self, name: impl Into<String>) -> Self {
        self.header = Some(name.into());
        self
    }

    /// Checks every field.
    pub fn build(self) -> Result<DeadlineConfig, ConfigError> {
        let mut v = Validator::new();
        let header = header_name(self.header, "header", &mut v);
        v.finish(DeadlineConfig {
            grpc_timeout: self.grpc_timeout,
            header,
        })
    }
}

fn header_name(name: Option<String>, path: &str, v: &mut Validator) -> Option<HeaderName> {
    let name = name?;
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(header) => Some(header),
        Err(_) => {
            v.fail(
                path,
                format!("must be a valid HTTP header name, got {name:?}"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let built = TimeoutConfig::builder().build().unwrap();
        assert_eq!(built, TimeoutConfig::default());
        assert_eq!(built.default_timeout(), DEFAULT_TIMEOUT);
        assert_eq!(built.body_timeout(), None);
        assert!(built.propagate_grpc_timeout());
        assert!(built.propagates());
        assert_eq!(
            DeadlineConfig::builder().build().unwrap(),
            DeadlineConfig::default()
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = TimeoutConfig::builder()
            .default_timeout(Duration::ZERO)
            .body_timeout(Duration::ZERO)
            .deadline_header("x request timeout")
            .build()
            .unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            paths,
            ["default_timeout", "body_timeout", "deadline_header"]
        );
        assert_eq!(err.problems()[0].rule(), "must be greater than zero");
        assert!(err.problems()[2].rule().contains("\"x request timeout\""));

        let err = DeadlineConfig::builder()
            .header("bad:name")
            .build()
            .unwrap_err();
        assert_eq!(err.problems()[0].path(), "header");
    }

    #[test]
    fn no_propagation_when_both_headers_are_off() {
        let quiet = TimeoutConfig::builder()
            .propagate_grpc_timeout(false)
            .build()
            .unwrap();
        assert!(!quiet.propagates());
        let millis_only = TimeoutConfig::builder()
            .propagate_grpc_timeout(false)
            .deadline_header("X-Request-Timeout-Ms")
            .build()
            .unwrap();
        assert!(millis_only.propagates());
        // Header names are case-insensitive: stored lowercase.
        assert_eq!(
            millis_only.deadline_header().map(HeaderName::as_str),
            Some("x-request-timeout-ms")
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserializes_human_durations_and_checks_them() {
        let config: TimeoutConfig = toml::from_str(
            r#"
            default_timeout = "250ms"
            body_timeout = "5s"
            deadline_header = "x-request-timeout-ms"
            "#,
        )
        .unwrap();
        assert_eq!(config.default_timeout(), Duration::from_millis(250));
        assert_eq!(config.body_timeout(), Some(Duration::from_secs(5)));
        assert!(config.propagate_grpc_timeout());

        let empty: TimeoutConfig = toml::from_str("").unwrap();
        assert_eq!(empty, TimeoutConfig::default());

        let err = toml::from_str::<TimeoutConfig>(r#"default_timeout = "0s""#).unwrap_err();
        assert!(
            err.to_string()
                .contains("default_timeout: must be greater than zero"),
            "{err}"
        );
        assert!(toml::from_str::<TimeoutConfig>(r#"default_timeout = "soon""#).is_err());
        assert!(toml::from_str::<TimeoutConfig>(r#"timeout = "1s""#).is_err());

        let deadline: DeadlineConfig =
            toml::from_str("grpc_timeout = false\nheader = \"x-request-timeout-ms\"").unwrap();
        assert!(!deadline.grpc_timeout());
        assert!(deadline.header().is_some());
        assert!(toml::from_str::<DeadlineConfig>(r#"header = "a b""#).is_err());
    }
}
