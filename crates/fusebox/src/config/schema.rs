//! What a policy file may contain, checked by [`super::check`].

pub(crate) use super::check::{
    Field, Kind, boolean, check_table, duration, float, join, one_of, opt_duration, opt_float,
    statuses, string, uint, unknown_key,
};

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
}
