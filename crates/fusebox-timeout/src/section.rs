//! [`TimeoutSection`] and [`DeadlineSection`]: the timeout layers' parts of a file, and
//! their `serde` forms.

use crate::config::{DeadlineConfig, DeadlineConfigBuilder, TimeoutConfig, TimeoutConfigBuilder};
use fusebox_classify::section::{Section, duration};
use fusebox_classify::{ConfigError, take_unset};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The timeout layer's settings as a file writes them (a policy's `timeout` table): every
/// key optional — the builder's default where absent — and unknown keys refused.
///
/// ```toml
/// default_timeout = "2s"           # routes without a timeout of their own
/// body_timeout = "30s"             # from the answer's head to the end of its body
/// propagate_grpc_timeout = true    # send the remaining time downstream
/// deadline_header = "x-request-timeout-ms"
/// ```
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TimeoutSection {
    /// The timeout of routes that set none.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub default_timeout: Option<Duration>,
    /// The longest a response body may take after its head.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "duration")]
    pub body_timeout: Option<Duration>,
    /// Send the remaining budget downstream as `grpc-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_grpc_timeout: Option<bool>,
    /// Also send (and honour) the remaining budget in milliseconds in this header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_header: Option<String>,
}

impl TimeoutSection {
    /// The builder with this section's settings.
    pub fn builder(&self) -> TimeoutConfigBuilder {
        let mut b = TimeoutConfig::builder();
        if let Some(d) = self.default_timeout {
            b = b.default_timeout(d);
        }
        if let Some(d) = self.body_timeout {
            b = b.body_timeout(d);
        }
        if let Some(p) = self.propagate_grpc_timeout {
            b = b.propagate_grpc_timeout(p);
        }
        if let Some(h) = &self.deadline_header {
            b = b.deadline_header(h.as_str());
        }
        b
    }
}

impl Section for TimeoutSection {
    type Config = TimeoutConfig;

    fn build(&self) -> Result<TimeoutConfig, ConfigError> {
        self.builder().build()
    }

    fn of(c: &TimeoutConfig) -> TimeoutSection {
        TimeoutSection {
            default_timeout: Some(c.default_timeout()),
            body_timeout: c.body_timeout(),
            propagate_grpc_timeout: Some(c.propagate_grpc_timeout()),
            deadline_header: c.deadline_header().map(|h| h.as_str().to_owned()),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        take_unset!(self, base; default_timeout, body_timeout, propagate_grpc_timeout,
            deadline_header);
        self
    }
}

/// The incoming-deadline layer's settings (server side): every key optional, unknown keys
/// refused.
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DeadlineSection {
    /// Read the caller's `grpc-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_timeout: Option<bool>,
    /// Also read a deadline in milliseconds from this header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

impl DeadlineSection {
    /// The builder with this section's settings.
    pub fn builder(&self) -> DeadlineConfigBuilder {
        let mut b = DeadlineConfig::builder();
        if let Some(g) = self.grpc_timeout {
            b = b.grpc_timeout(g);
        }
        if let Some(h) = &self.header {
            b = b.header(h.as_str());
        }
        b
    }
}

impl Section for DeadlineSection {
    type Config = DeadlineConfig;

    fn build(&self) -> Result<DeadlineConfig, ConfigError> {
        self.builder().build()
    }

    fn of(c: &DeadlineConfig) -> DeadlineSection {
        DeadlineSection {
            grpc_timeout: Some(c.grpc_timeout()),
            header: c.header().map(|h| h.as_str().to_owned()),
        }
    }

    fn over(mut self, base: &Self) -> Self {
        take_unset!(self, base; grpc_timeout, header);
        self
    }
}

impl<'de> Deserialize<'de> for TimeoutConfig {
    /// Reads a [`TimeoutSection`] and builds it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TimeoutSection::deserialize(d)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for TimeoutConfig {
    /// Writes the configuration as its [`TimeoutSection`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TimeoutSection::of(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for DeadlineConfig {
    /// Reads a [`DeadlineSection`] and builds it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DeadlineSection::deserialize(d)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for DeadlineConfig {
    /// Writes the configuration as its [`DeadlineSection`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        DeadlineSection::of(self).serialize(s)
    }
}
