//! What a policy file may contain, and the checks of its values' types.

use super::node::Node;
use fusebox_classify::Validator;
use std::time::Duration;

/// The type of a key's value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Bool,
    /// A whole number within `0..=max`.
    Uint(u64),
    Float,
    /// A number, or `"none"`.
    OptFloat,
    Duration,
    /// A duration, or `"none"`.
    OptDuration,
    Str,
    /// A list of strings.
    Strs,
    OneOf(&'static [&'static str]),
    /// A list of HTTP status codes.
    Statuses,
    /// A nested table.
    Table(&'static [Field]),
    /// Checked by the caller (`policies`, `routes`: tables of named tables).
    Named,
}

/// A known key and its type.
pub(crate) type Field = (&'static str, Kind);

const U32: Kind = Kind::Uint(u32::MAX as u64);
const USIZE: Kind = Kind::Uint(u32::MAX as u64);
const U64: Kind = Kind::Uint(u64::MAX);

pub(crate) const TOP: &[Field] = &[("defaults", Kind::Table(POLICY)), ("policies", Kind::Named)];

pub(crate) const POLICY: &[Field] = &[
    ("breaker", Kind::Table(BREAKER)),
    ("limit", Kind::Table(LIMIT)),
    ("timeout", Kind::Table(TIMEOUT)),
    ("retry", Kind::Table(RETRY)),
    ("recovery_ramp", Kind::Table(RAMP)),
    ("default_route", Kind::Table(ROUTE)),
    ("routes", Kind::Named),
];

pub(crate) const BREAKER: &[Field] = &[
    ("enabled", Kind::Bool),
    ("name", Kind::Str),
    ("count_window", U32),
    ("time_window", Kind::Duration),
    ("time_window_buckets", U32),
    ("minimum_calls", U32),
    ("failure_rate_threshold", U32),
    ("slow_call_rate_threshold", U32),
    ("consecutive_failures", U32),
    ("open_wait", Kind::Duration),
    ("open_wait_jitter", Kind::Duration),
    ("open_wait_multiplier", Kind::Float),
    ("max_open_wait", Kind::Duration),
    ("permitted_probes", U32),
    ("probe_successes", U32),
    ("max_half_open_wait", Kind::OptDuration),
    ("on_close", Kind::OneOf(&["clear", "keep"])),
    ("count_overloaded", Kind::Bool),
    ("seed", U64),
    ("key", Kind::OneOf(&["host", "authority", "route"])),
    ("max_keys", USIZE),
    ("idle_timeout", Kind::Duration),
    ("store", Kind::Table(STORE)),
];

/// `breaker.store`: where the breaker keeps its state.
pub(crate) const STORE: &[Field] = &[
    ("kind", Kind::OneOf(&["memory", "redis"])),
    ("url", Kind::Str),
    ("scope", Kind::Str),
    ("prefix", Kind::Str),
    ("mode", Kind::OneOf(&["strict", "batched"])),
    ("flush_interval", Kind::Duration),
    ("timeout", Kind::Duration),
    ("poll_interval", Kind::Duration),
    ("retry_interval", Kind::Duration),
    ("probe_lease", Kind::Duration),
    ("idle_ttl", Kind::Duration),
    ("max_in_flight", USIZE),
    (
        "fallback",
        Kind::OneOf(&["local", "fail_open", "fail_closed"]),
    ),
    ("shared_keys", Kind::Strs),
];

pub(crate) const LIMIT: &[Field] = &[
    ("enabled", Kind::Bool),
    ("name", Kind::Str),
    ("max_concurrency", USIZE),
    ("adaptive", Kind::Table(ADAPTIVE)),
    ("queue", Kind::Table(QUEUE)),
    ("release", Kind::OneOf(&["response", "end_of_body"])),
    ("retry_after", Kind::Duration),
    ("log_step", USIZE),
];

pub(crate) const ADAPTIVE: &[Field] = &[
    ("algorithm", Kind::OneOf(&["aimd", "vegas"])),
    ("min_limit", USIZE),
    ("max_limit", USIZE),
    ("initial_limit", USIZE),
    ("backoff_ratio", Kind::Float),
    ("additive_increase", Kind::Float),
    ("smoothing", Kind::Float),
    ("alpha", Kind::Float),
    ("beta", Kind::Float),
    ("probe_interval", Kind::Duration),
    ("probe_samples", USIZE),
];

/// Keys of `adaptive` that only one algorithm reads.
pub(crate) const AIMD_ONLY: &[&str] = &["additive_increase"];
pub(crate) const VEGAS_ONLY: &[&str] = &[
    "smoothing",
    "alpha",
    "beta",
    "probe_interval",
    "probe_samples",
];

pub(crate) const QUEUE: &[Field] = &[("max_waiters", USIZE), ("max_wait", Kind::Duration)];

pub(crate) const TIMEOUT: &[Field] = &[
    ("enabled", Kind::Bool),
    ("default_timeout", Kind::Duration),
    ("body_timeout", Kind::Duration),
    ("propagate_grpc_timeout", Kind::Bool),
    ("deadline_header", Kind::Str),
];

pub(crate) const RETRY: &[Field] = &[
    ("enabled", Kind::Bool),
    ("name", Kind::Str),
    ("retry_ratio", Kind::Float),
    ("min_retries_per_second", U32),
    ("ttl", Kind::Duration),
    ("failure_rate_threshold", Kind::OptFloat),
    ("cutoff_minimum_calls", U32),
    ("max_attempts", U32),
    ("base_delay", Kind::Duration),
    ("max_delay", Kind::Duration),
    ("max_retry_after", Kind::Duration),
    ("max_replay_body_bytes", USIZE),
    ("hedge_delay", Kind::OptDuration),
    ("seed", U64),
];

pub(crate) const RAMP: &[Field] = &[
    ("enabled", Kind::Bool),
    ("initial_limit", USIZE),
    ("duration", Kind::Duration),
];

pub(crate) const ROUTE: &[Field] = &[
    ("timeout", Kind::Duration),
    ("slow_call_duration", Kind::Duration),
    ("count_throttling", Kind::Bool),
    ("retry", Kind::Bool),
    ("idempotent", Kind::Bool),
    ("protocol", Kind::OneOf(&["auto", "http", "grpc"])),
    ("failure_statuses", Kind::Statuses),
    ("success_statuses", Kind::Statuses),
    ("fallback", Kind::Bool),
];

/// Checks a table against its known keys, recursively: every unknown key and every value
/// of the wrong type is reported under its path.
pub(crate) fn check_table(node: &Node, path: &str, fields: &[Field], v: &mut Validator) {
    let Some(entries) = node.as_map() else {
        v.fail(path, format!("must be a table, got {}", node.kind()));
        return;
    };
    for (key, value) in entries {
        let here = join(path, key);
        match fields.iter().find(|(k, _)| k == key) {
            None => v.fail(here, unknown_key(key, fields)),
            Some((_, Kind::Table(inner))) => check_table(value, &here, inner, v),
            Some((_, kind)) => {
                if let Err(rule) = check_value(value, *kind) {
                    v.fail(here, rule);
                }
            }
        }
    }
}

fn check_value(node: &Node, kind: Kind) -> Result<(), String> {
    match kind {
        Kind::Bool => boolean(node).map(drop),
        Kind::Uint(max) => uint(node, max).map(drop),
        Kind::Float => float(node).map(drop),
        Kind::OptFloat => opt_float(node).map(drop),
        Kind::Duration => duration(node).map(drop),
        Kind::OptDuration => opt_duration(node).map(drop),
        Kind::Str => string(node).map(drop),
        Kind::Strs => strings(node).map(drop),
        Kind::OneOf(options) => one_of(node, options).map(drop),
        Kind::Statuses => statuses(node).map(drop),
        // Tables are checked by `check_table`, named tables by the caller.
        Kind::Table(_) | Kind::Named => Ok(()),
    }
}

/// `path.key`.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// "unknown key", with the nearest known key when one is close.
pub(crate) fn unknown_key(key: &str, fields: &[Field]) -> String {
    let nearest = fields
        .iter()
        .map(|(k, _)| (distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min();
    match nearest {
        Some((_, k)) => format!("unknown key; did you mean `{k}`?"),
        None => {
            let known: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
            format!("unknown key; expected one of: {}", known.join(", "))
        }
    }
}

/// Levenshtein distance, for suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

// === value readers: the rule broken, as a message, on error ===

pub(crate) fn boolean(node: &Node) -> Result<bool, String> {
    match node {
        Node::Bool(b) => Ok(*b),
        other => Err(format!("must be true or false, got {}", other.show())),
    }
}

pub(crate) fn uint(node: &Node, max: u64) -> Result<u64, String> {
    match node {
        Node::Int(i) if (0..=i128::from(max)).contains(i) => Ok(*i as u64),
        Node::Int(i) => Err(format!("must be a whole number within 0..={max}, got {i}")),
        other => Err(format!("must be a whole number, got {}", other.show())),
    }
}

pub(crate) fn float(node: &Node) -> Result<f64, String> {
    match node {
        Node::Int(i) => Ok(*i as f64),
        Node::Float(f) => Ok(*f),
        other => Err(format!("must be a number, got {}", other.show())),
    }
}

pub(crate) fn opt_float(node: &Node) -> Result<Option<f64>, String> {
    match node {
        Node::Str(s) if s == "none" => Ok(None),
        Node::Null => Ok(None),
        other => float(other)
            .map(Some)
            .map_err(|_| format!("must be a number or \"none\", got {}", other.show())),
    }
}

pub(crate) fn duration(node: &Node) -> Result<Duration, String> {
    match node {
        Node::Str(s) => humantime::parse_duration(s).map_err(|e| {
            format!("must be a duration such as \"250ms\" or \"30s\", got {s:?} ({e})")
        }),
        other => Err(format!(
            "must be a duration with a unit, such as \"250ms\" or \"30s\", got {}",
            other.show()
        )),
    }
}

pub(crate) fn opt_duration(node: &Node) -> Result<Option<Duration>, String> {
    match node {
        Node::Str(s) if s == "none" => Ok(None),
        Node::Null => Ok(None),
        other => duration(other)
            .map(Some)
            .map_err(|e| format!("{e}, or \"none\"")),
    }
}

pub(crate) fn string(node: &Node) -> Result<String, String> {
    match node {
        Node::Str(s) => Ok(s.clone()),
        other => Err(format!("must be a string, got {}", other.show())),
    }
}

pub(crate) fn strings(node: &Node) -> Result<Vec<String>, String> {
    let Node::List(items) = node else {
        return Err(format!("must be a list of strings, got {}", node.show()));
    };
    items
        .iter()
        .map(|item| match item {
            Node::Str(s) => Ok(s.clone()),
            other => Err(format!("must be a list of strings, got {}", other.show())),
        })
        .collect()
}

pub(crate) fn one_of(node: &Node, options: &[&'static str]) -> Result<&'static str, String> {
    let quoted = || {
        options
            .iter()
            .map(|o| format!("\"{o}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match node {
        Node::Str(s) => options
            .iter()
            .find(|o| **o == s.as_str())
            .copied()
            .ok_or_else(|| format!("must be one of {}, got {s:?}", quoted())),
        other => Err(format!("must be one of {}, got {}", quoted(), other.show())),
    }
}

pub(crate) fn statuses(node: &Node) -> Result<Vec<u16>, String> {
    let Node::List(items) = node else {
        return Err(format!(
            "must be a list of HTTP status codes, got {}",
            node.show()
        ));
    };
    items
        .iter()
        .map(|item| match item {
            Node::Int(i) if (100..=999).contains(i) => Ok(*i as u16),
            other => Err(format!(
                "must be a list of HTTP status codes (100..=999), got {}",
                other.show()
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_for_typos() {
        assert_eq!(
            unknown_key("failur_rate_threshold", BREAKER),
            "unknown key; did you mean `failure_rate_threshold`?"
        );
        assert!(unknown_key("zzz", QUEUE).starts_with("unknown key; expected one of: max_waiters"));
    }

    #[test]
    fn value_rules() {
        assert_eq!(
            duration(&Node::Str("750ms".into())),
            Ok(Duration::from_millis(750))
        );
        assert!(
            duration(&Node::Int(750))
                .unwrap_err()
                .contains("with a unit")
        );
        assert_eq!(
            uint(&Node::Int(-1), 10).unwrap_err(),
            "must be a whole number within 0..=10, got -1"
        );
        assert_eq!(opt_duration(&Node::Str("none".into())), Ok(None));
        assert_eq!(
            one_of(&Node::Str("keep".into()), &["clear", "keep"]),
            Ok("keep")
        );
        assert!(statuses(&Node::List(vec![Node::Int(1000)])).is_err());
        assert_eq!(float(&Node::Int(2)), Ok(2.0));
    }
}
