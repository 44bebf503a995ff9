//! Configuration sections: the file format of each layer's settings, owned by the layer.
//!
//! Every fusebox layer crate has one [`Section`] type: a `serde` struct whose fields are the
//! keys of that layer's part of a policy file, every one optional, unknown keys refused.
//! It *is* the file format — there is no other list of the layer's keys — and it builds the
//! layer's validated configuration through the layer's own builder, so a file, the `serde`
//! form and code all go through the same defaults and the same rules. A built
//! configuration turns back into its section ([`Section::of`]), so what a service runs
//! with can be written out and read back.
//!
//! A file loader (the facade's `fusebox::config`) merges a policy's section over the
//! `defaults`' key by key, with two kinds of exception the section declares:
//! [`Section::REPLACE`] (nested tables a more specific level replaces whole) and
//! [`Section::CHOICES`] (keys that exclude each other, decided together by the most specific
//! level that sets any of them).
//!
//! The value formats are shared: durations are [`humantime`] strings (`"250ms"`, `"30s"`,
//! `"1m 30s"`), and a setting that can be turned off takes `"none"`. The modules below are
//! the `serde(with = ...)` helpers every section uses for them, so each format is written
//! once; their messages name the rule a value breaks (`must be a duration such as "250ms"
//! or "30s", got "2 parsecs"`).
//!
//! [`humantime`]: https://docs.rs/humantime

use crate::config::ConfigError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// One layer's part of a policy file: every key optional, unknown keys refused.
pub trait Section: Serialize + DeserializeOwned + Default + Clone + PartialEq + fmt::Debug {
    /// What the section builds.
    type Config;

    /// Keys holding tables that a more specific level replaces whole rather than merging
    /// key by key (a queue, an adaptive algorithm's settings: half of one and half of
    /// another would be neither).
    const REPLACE: &'static [&'static str] = &[];

    /// Groups of keys that exclude each other (a count window or a time window): the most
    /// specific level that sets any key of a group sets the whole group.
    const CHOICES: &'static [&'static [&'static str]] = &[];

    /// Checks which keys this table holds together (one of two that exclude each other,
    /// a key that needs another), as written: a loader calls it on every level of a file
    /// before merging them, so that such a problem is reported where it was written.
    /// [`build`](Section::build) checks it too. The default finds nothing.
    fn check_keys(&self, v: &mut crate::config::Validator) {
        let _ = v;
    }

    /// Builds the configuration through the layer's builder: the builder's defaults for
    /// every key not set, every problem reported with its key.
    fn build(&self) -> Result<Self::Config, ConfigError>;

    /// The section that builds `config`, every key written out.
    fn of(config: &Self::Config) -> Self;

    /// `self` over `base`: every key `self` does not set is taken from `base`, following
    /// [`REPLACE`](Section::REPLACE) and [`CHOICES`](Section::CHOICES).
    fn over(self, base: &Self) -> Self;
}

/// Takes `base`'s value of every field `self` leaves unset: `Option::or` per field, for
/// [`Section::over`] implementations.
#[macro_export]
macro_rules! take_unset {
    ($self:ident, $base:ident; $($field:ident),* $(,)?) => {
        $( if $self.$field.is_none() { $self.$field = $base.$field.clone(); } )*
    };
}

fn show_unexpected(u: &serde::de::Unexpected<'_>) -> String {
    use serde::de::Unexpected;
    match u {
        Unexpected::Str(s) => format!("{s:?}"),
        Unexpected::Bool(b) => b.to_string(),
        Unexpected::Unsigned(n) => n.to_string(),
        Unexpected::Signed(n) => n.to_string(),
        Unexpected::Float(f) => f.to_string(),
        Unexpected::Map => "a table".into(),
        Unexpected::Seq => "a list".into(),
        Unexpected::Unit | Unexpected::Option => "nothing".into(),
        other => other.to_string(),
    }
}

/// The words for `got ...` in a message about an unexpected value.
pub fn unexpected(u: serde::de::Unexpected<'_>) -> String {
    show_unexpected(&u)
}

/// Visitor methods that say "`rule`, got `value`" for booleans, floats, tables and lists.
macro_rules! refuse_non_integers {
    ($rule:expr) => {
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Err(E::custom(format!("{}, got {v}", $rule)))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Err(E::custom(format!("{}, got {v}", $rule)))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(serde::de::Error::custom(format!("{}, got a table", $rule)))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(serde::de::Error::custom(format!("{}, got a list", $rule)))
        }
    };
}

/// As [`refuse_non_integers`], and for integers too.
macro_rules! refuse_other_values {
    ($rule:expr) => {
        refuse_non_integers!($rule);
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(E::custom(format!("{}, got {v}", $rule)))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Err(E::custom(format!("{}, got {v}", $rule)))
        }
    };
}

const DURATION_RULE: &str = "must be a duration with a unit, such as \"250ms\" or \"30s\"";

/// Reads a duration as every file writes it (`"250ms"`, `"30s"`, `"1m 30s"`), or says
/// which rule it breaks.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("must be a duration such as \"250ms\" or \"30s\", got {s:?} ({e})"))
}

/// Writes a duration as the files write it (`"250ms"`, `"1m 30s"`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `Option<Duration>` fields: a duration string, absent when not set.
pub mod duration {
    use super::*;

    struct V;

    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(DURATION_RULE)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_duration(v).map_err(E::custom)
        }

        refuse_other_values!(DURATION_RULE);
    }

    struct Present(Duration);

    impl<'de> Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(V).map(Present)
        }
    }

    /// Reads a set value (serde calls this only for a key that is present).
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Present::deserialize(d).map(|p| Some(p.0))
    }

    /// Writes a set value (pair with `skip_serializing_if = "Option::is_none"`).
    pub fn serialize<S: serde::Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&format_duration(*d)),
            None => s.serialize_none(),
        }
    }
}

/// `Option<Option<Duration>>` fields: a duration, or `"none"` to turn the setting off;
/// absent when not set.
pub mod duration_or_none {
    use super::*;

    const RULE: &str = "must be a duration with a unit, such as \"250ms\" or \"30s\", or \"none\"";

    struct V;

    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(RULE)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<Duration>, E> {
            if v.trim() == "none" {
                return Ok(None);
            }
            parse_duration(v)
                .map(Some)
                .map_err(|e| E::custom(format!("{e}, or \"none\"")))
        }

        refuse_other_values!(RULE);
    }

    struct Present(Option<Duration>);

    impl<'de> Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(V).map(Present)
        }
    }

    /// Reads a set value.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<Duration>>, D::Error> {
        Present::deserialize(d).map(|p| Some(p.0))
    }

    /// Writes a set value: the duration, or `"none"`.
    pub fn serialize<S: serde::Serializer>(
        v: &Option<Option<Duration>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(Some(d)) => s.serialize_str(&format_duration(*d)),
            Some(None) => s.serialize_str("none"),
            None => s.serialize_none(),
        }
    }
}

/// `Option<Option<u32>>` fields: a whole number, or `"none"` to turn the setting off.
pub mod uint_or_none {
    use super::*;

    const RULE: &str = "must be a whole number or \"none\"";

    struct V;

    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<u32>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(RULE)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<u32>, E> {
            if v.trim() == "none" {
                Ok(None)
            } else {
                Err(E::custom(format!("{RULE}, got {v:?}")))
            }
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Option<u32>, E> {
            u32::try_from(v).map(Some).map_err(|_| {
                E::custom(format!(
                    "must be a whole number within 0..={}, got {v}",
                    u32::MAX
                ))
            })
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Option<u32>, E> {
            u32::try_from(v).map(Some).map_err(|_| {
                E::custom(format!(
                    "must be a whole number within 0..={}, got {v}",
                    u32::MAX
                ))
            })
        }

        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Option<u32>, E> {
            Err(E::custom(format!("{RULE}, got {v}")))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Option<u32>, E> {
            Err(E::custom(format!("{RULE}, got {v}")))
        }
    }

    struct Present(Option<u32>);

    impl<'de> Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(V).map(Present)
        }
    }

    /// Reads a set value.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<u32>>, D::Error> {
        Present::deserialize(d).map(|p| Some(p.0))
    }

    /// Writes a set value: the number, or `"none"`.
    pub fn serialize<S: serde::Serializer>(
        v: &Option<Option<u32>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(Some(n)) => s.serialize_u32(*n),
            Some(None) => s.serialize_str("none"),
            None => s.serialize_none(),
        }
    }
}

/// `Option<Vec<u16>>` fields: a list of HTTP status codes (100..=999).
pub mod statuses {
    use super::*;

    const RULE: &str = "must be a list of HTTP status codes (100..=999)";

    struct V;

    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<u16>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(RULE)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u16>, A::Error> {
            let mut out = Vec::new();
            while let Some(code) = seq.next_element::<Code>()? {
                out.push(code.0);
            }
            Ok(out)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u16>, E> {
            Err(E::custom(format!(
                "must be a list of HTTP status codes, got {v:?}"
            )))
        }

        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Vec<u16>, E> {
            Err(E::custom(format!(
                "must be a list of HTTP status codes, got {v}"
            )))
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Vec<u16>, E> {
            Err(E::custom(format!(
                "must be a list of HTTP status codes, got {v}"
            )))
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Vec<u16>, E> {
            Err(E::custom(format!(
                "must be a list of HTTP status codes, got {v}"
            )))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Vec<u16>, E> {
            Err(E::custom(format!(
                "must be a list of HTTP status codes, got {v}"
            )))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Vec<u16>, A::Error> {
            Err(serde::de::Error::custom(
                "must be a list of HTTP status codes, got a table",
            ))
        }
    }

    struct Code(u16);

    impl<'de> Deserialize<'de> for Code {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct C;
            impl<'de> serde::de::Visitor<'de> for C {
                type Value = u16;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str(RULE)
                }
                fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u16, E> {
                    u16::try_from(v)
                        .ok()
                        .filter(|c| (100..=999).contains(c))
                        .ok_or_else(|| E::custom(format!("{RULE}, got {v}")))
                }
                fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u16, E> {
                    u16::try_from(v)
                        .ok()
                        .filter(|c| (100..=999).contains(c))
                        .ok_or_else(|| E::custom(format!("{RULE}, got {v}")))
                }
                refuse_non_integers!(RULE);
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u16, E> {
                    Err(E::custom(format!("{RULE}, got {v:?}")))
                }
            }
            d.deserialize_u16(C).map(Code)
        }
    }

    struct Present(Vec<u16>);

    impl<'de> Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_seq(V).map(Present)
        }
    }

    /// Reads a set value.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u16>>, D::Error> {
        Present::deserialize(d).map(|p| Some(p.0))
    }

    /// Writes a set value.
    pub fn serialize<S: serde::Serializer>(v: &Option<Vec<u16>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(codes) => codes.serialize(s),
            None => s.serialize_none(),
        }
    }
}

// === impl RouteSection ===

use crate::classifier::{Protocol, StandardClassifier};
use crate::http::HttpClassifier;
use crate::outcome::Outcome;
use crate::route::Route;

/// A route's part of a policy file (`default_route`, `routes."<key>"`): every key
/// optional; a named route takes what it does not set from the default route.
///
/// Keys may be added: in code, start from `Default::default()` and set the fields you
/// need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteSection {
    /// The route's timeout, or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_or_none"
    )]
    pub timeout: Option<Option<Duration>>,
    /// Calls at least this long are slow, or `"none"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_or_none"
    )]
    pub slow_call_duration: Option<Option<Duration>>,
    /// 429 and gRPC RESOURCE_EXHAUSTED count as failures (`true`) or are ignored (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_throttling: Option<bool>,
    /// Whether the retry layer may retry calls on this route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// Whether requests on this route are safe to repeat, whatever their method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// `"auto"`, `"http"` or `"grpc"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// HTTP statuses that count as failures.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "statuses")]
    pub failure_statuses: Option<Vec<u16>>,
    /// HTTP statuses that count as successes.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "statuses")]
    pub success_statuses: Option<Vec<u16>>,
    /// HTTP statuses that do not count at all.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "statuses")]
    pub ignored_statuses: Option<Vec<u16>>,
}

impl Section for RouteSection {
    type Config = Route<StandardClassifier>;

    fn build(&self) -> Result<Route<StandardClassifier>, ConfigError> {
        let mut http = HttpClassifier::new();
        for code in self.failure_statuses.iter().flatten() {
            http = http.failure(*code);
        }
        for code in self.success_statuses.iter().flatten() {
            http = http.success(*code);
        }
        for code in self.ignored_statuses.iter().flatten() {
            http = http.ignore(*code);
        }
        let mut classifier = StandardClassifier::new().http(http);
        if let Some(count) = self.count_throttling {
            classifier = classifier.count_throttling(count);
        }
        if let Some(protocol) = self.protocol {
            classifier = classifier.protocol(protocol);
        }
        let mut route = Route::new(classifier);
        route = match self.timeout {
            Some(Some(d)) => route.timeout(d),
            Some(None) => route.no_timeout(),
            None => route,
        };
        route = match self.slow_call_duration {
            Some(Some(d)) => route.slow_call_duration(d),
            Some(None) => route.no_slow_call_duration(),
            None => route,
        };
        if let Some(retry) = self.retry {
            route = route.retry(retry);
        }
        if let Some(idempotent) = self.idempotent {
            route = route.idempotent(idempotent);
        }
        Ok(route)
    }

    /// What the route sets itself (not what it inherited from the default route).
    fn of(route: &Route<StandardClassifier>) -> RouteSection {
        let classifier = route.classifier();
        let http = classifier.http_rules();
        let mut section = RouteSection {
            timeout: route.sets_timeout().then(|| route.timeout_duration()),
            slow_call_duration: route
                .sets_slow_call_duration()
                .then(|| route.slow_call_threshold()),
            retry: route.sets_retry().then(|| route.retry_enabled()),
            idempotent: route
                .sets_idempotent()
                .then(|| route.idempotent_override())
                .flatten(),
            protocol: classifier.protocol_setting(),
            ..RouteSection::default()
        };
        let by = |outcome: Outcome| -> Option<Vec<u16>> {
            let codes: Vec<u16> = http
                .set_outcomes()
                .filter(|(code, o)| *o == outcome && *code != 429)
                .map(|(code, _)| code)
                .collect();
            (!codes.is_empty()).then_some(codes)
        };
        section.failure_statuses = by(Outcome::Failure);
        section.success_statuses = by(Outcome::Success);
        section.ignored_statuses = by(Outcome::Ignored);
        section.count_throttling = http
            .set_outcomes()
            .find(|(code, _)| *code == 429)
            .map(|(_, o)| o == Outcome::Failure);
        section
    }

    fn over(mut self, base: &Self) -> Self {
        take_unset!(self, base; timeout, slow_call_duration, count_throttling, retry,
            idempotent, protocol, failure_statuses, success_statuses, ignored_statuses);
        self
    }
}

/// A count a file writes as a whole number of at most `u32::MAX` (so that a file means the
/// same on every platform), as the builders take it.
pub fn count(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A builder's count as a file writes it (at most `u32::MAX`).
pub fn count_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
