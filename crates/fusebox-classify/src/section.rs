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

    /// Every key of the section, in declaration order: the list serde derives from the
    /// type's fields (see [`keys_of`]).
    fn keys() -> &'static [&'static str] {
        keys_of::<Self>()
    }
}

/// The keys a struct declares to serde: the field list its derived `Deserialize` hands to
/// `deserialize_struct`, that is the type's own list, not a copy; empty for a type that is
/// not a struct of named fields (or that flattens another into it).
pub fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};

    /// Stops the read as soon as the keys are known.
    #[derive(Debug)]
    struct Stop;

    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("only the keys are read")
        }
    }

    impl std::error::Error for Stop {}

    impl de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }

    /// Records the fields a struct asks for.
    struct Fields<'a>(&'a mut &'static [&'static str]);

    impl<'de> de::Deserializer<'de> for Fields<'_> {
        type Error = Stop;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut keys: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut keys));
    keys
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

impl RouteSection {
    /// Every setting `route` has, set itself or taken from its table's default route (see
    /// [`Route::inherited`]): the section that builds a route judging calls as `route`
    /// does. A key it leaves out is at its built-in default. ([`Section::of`] writes only
    /// what a named route sets itself, which is what reads back into the same table.)
    pub fn effective(route: &Route<StandardClassifier>) -> RouteSection {
        let inherited = route.inherited();
        let mut section = RouteSection::of(route);
        if inherited.timeout {
            section.timeout = Some(route.timeout_duration());
        }
        if inherited.slow_call_duration {
            section.slow_call_duration = Some(route.slow_call_threshold());
        }
        if inherited.retry {
            section.retry = Some(route.retry_enabled());
        }
        if inherited.idempotent {
            section.idempotent = route.idempotent_override();
        }
        section
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::RouteTable;
    use http::Method;

    #[test]
    fn a_sections_keys_are_its_fields() {
        assert_eq!(
            RouteSection::keys(),
            [
                "timeout",
                "slow_call_duration",
                "count_throttling",
                "retry",
                "idempotent",
                "protocol",
                "failure_statuses",
                "success_statuses",
                "ignored_statuses",
            ]
        );
        assert!(keys_of::<u32>().is_empty());
    }

    #[test]
    fn durations_read_and_write_as_files_write_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("750ms"), Ok(ms(750)));
        assert_eq!(parse_duration(" 1m 30s "), Ok(Duration::from_secs(90)));
        let bad = parse_duration("5 sex").unwrap_err();
        assert!(bad.starts_with("must be a duration"), "{bad}");
        for (d, text) in [
            (ms(750), "750ms"),
            (ms(1500), "1s 500ms"),
            (Duration::from_secs(2), "2s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text} reads back");
        }
    }

    #[test]
    fn a_named_routes_effective_section_holds_what_it_inherited() {
        let ms = Duration::from_millis;
        let default = RouteSection {
            slow_call_duration: Some(Some(ms(250))),
            timeout: Some(Some(ms(800))),
            retry: Some(false),
            idempotent: Some(true),
            count_throttling: Some(true),
            ..RouteSection::default()
        };
        let own = RouteSection {
            timeout: Some(Some(ms(1000))),
            failure_statuses: Some(vec![409]),
            ..RouteSection::default()
        };
        let table = RouteTable::builder(default.build().unwrap())
            .route("GET /a", own.build().unwrap())
            .build()
            .unwrap();
        let a = table.route(table.resolve_path(&Method::GET, "/a"));
        let effective = RouteSection::effective(&a);
        assert_eq!(
            effective,
            RouteSection {
                slow_call_duration: Some(Some(ms(250))),
                timeout: Some(Some(ms(1000))),
                retry: Some(false),
                idempotent: Some(true),
                count_throttling: Some(true),
                failure_statuses: Some(vec![409]),
                ..RouteSection::default()
            }
        );
        // What it writes back leaves the inherited scalars to the default route.
        let written = RouteSection::of(&a);
        assert_eq!(
            (
                written.slow_call_duration,
                written.retry,
                written.idempotent
            ),
            (None, None, None)
        );
        // The effective section alone builds a route that judges as the named one does.
        let alone = effective.build().unwrap();
        assert_eq!(alone.slow_call_threshold(), a.slow_call_threshold());
        assert_eq!(alone.timeout_duration(), a.timeout_duration());
        assert_eq!(alone.retry_enabled(), a.retry_enabled());
        assert_eq!(alone.idempotent_override(), a.idempotent_override());
        for code in [200, 409, 429, 503] {
            let status = http::StatusCode::from_u16(code).unwrap();
            assert_eq!(
                alone.classifier().http_rules().outcome(status),
                a.classifier().http_rules().outcome(status),
                "{code}"
            );
        }
    }
}
