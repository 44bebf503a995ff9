//! The Lua script that holds a scope's state machine, the arguments it takes, and the reply
//! every call (and every pub/sub message) carries.
//!
//! One script serves every operation, so a replica loads one SHA (`SCRIPT LOAD` once, then
//! `EVALSHA`, with redis-rs reloading it on `NOSCRIPT` after a Redis restart). The script
//! reads Redis's clock (`TIME`), compares rates in integers, and answers every call with the
//! whole state: the caller's local view is refreshed by the answer to its own write.

use fusebox_breaker::sim::{Recorded, Simulator};
use fusebox_breaker::{CircuitBreakerConfig, OnClose, Reason, State, WindowConfig, WindowTotals};
use fusebox_classify::Nanos;
use std::sync::LazyLock;
use std::time::Duration;

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("breaker.lua");

/// The script, hashed once.
pub(crate) static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE));

/// The keys and channel of one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) scope: String,
    pub(crate) state: String,
    pub(crate) window: String,
    pub(crate) ring: String,
    pub(crate) leases: String,
    pub(crate) epoch: String,
    pub(crate) channel: String,
}

impl Keys {
    /// `prefix:{scope}:state`, ...: the scope in braces is the Cluster hash tag.
    pub(crate) fn new(prefix: &str, scope: &str) -> Keys {
        let k = |suffix: &str| format!("{prefix}:{{{scope}}}:{suffix}");
        Keys {
            scope: scope.to_owned(),
            state: k("state"),
            window: k("window"),
            ring: k("ring"),
            leases: k("leases"),
            epoch: k("epoch"),
            channel: k("events"),
        }
    }
}

/// The breaker configuration as the script's fixed arguments (2 to 16), rendered once per
/// store.
#[derive(Debug, Clone)]
pub(crate) struct ConfigArgs {
    args: Vec<String>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The most open waits of a growth schedule sent to the script; trips past it reuse the
/// last.
const MAX_SCHEDULE: usize = 64;

/// The base open wait of the 1st, 2nd, ... trip in a row, as the breaker's own state
/// machine computes it (with `open_wait_growth`), until it stops growing: the breaker's
/// [`Simulator`] is tripped, then re-opened by failed probes, on virtual time. The fleet's
/// script picks the wait of its trip count from this list.
pub(crate) fn open_wait_schedule(config: &CircuitBreakerConfig) -> Vec<u64> {
    let mut sim = Simulator::new(config.clone());
    let mut now = Nanos::ZERO;
    let mut trip = None;
    for _ in 0..config
        .minimum_calls()
        .max(config.consecutive_failures().unwrap_or(1))
    {
        let Ok(permit) = sim.acquire(now).0 else {
            break;
        };
        if let Recorded::Transition(t) = sim.record(permit, true, false, now) {
            trip = Some(t);
            break;
        }
    }
    let mut waits: Vec<u64> = Vec::new();
    while let Some(t) = trip.take() {
        let open_for = t.open_for.unwrap_or_default();
        let base = micros(open_for.saturating_sub(t.jitter.unwrap_or_default()));
        if waits.last() == Some(&base) || waits.len() == MAX_SCHEDULE {
            break;
        }
        waits.push(base);
        // Past the wait, the probe fails: the next trip in a row.
        now = now.plus(open_for);
        if let (Ok(probe), _) = sim.acquire(now)
            && let Recorded::Transition(next) = sim.record(probe, true, false, now)
        {
            trip = Some(next);
        }
    }
    if waits.is_empty() {
        waits.push(micros(config.open_wait()));
    }
    waits
}

impl ConfigArgs {
    pub(crate) fn new(
        channel: &str,
        config: &CircuitBreakerConfig,
        idle_ttl: Duration,
    ) -> ConfigArgs {
        // A window the script does not keep never gets here: `OnRedis` keeps such a breaker
        // in this process (and refuses it when a layer is built).
        let (kind, size, buckets) = window_args(config.window()).unwrap_or(("c", 0, 0));
        let args = vec![
            channel.to_owned(),
            kind.to_owned(),
            size.to_string(),
            buckets.to_string(),
            config.minimum_calls().to_string(),
            config.failure_rate_threshold().to_string(),
            config.slow_call_rate_threshold().to_string(),
            config.consecutive_failures().unwrap_or(0).to_string(),
            open_wait_schedule(config)
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            config.max_half_open_wait().map_or(0, micros).to_string(),
            config.permitted_probes().to_string(),
            config.probe_successes().to_string(),
            if config.on_close() == OnClose::Clear {
                "1"
            } else {
                "0"
            }
            .to_owned(),
            u64::try_from(idle_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .to_string(),
        ];
        ConfigArgs { args }
    }
}

/// One operation of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Read the state (and apply a half-open timeout that is due).
    Sync,
    /// Record one call admitted in `epoch`: counted, or a probe holding lease `token`.
    Record {
        epoch: u64,
        probe: Option<String>,
        failure: bool,
        slow: bool,
    },
    /// Record a batch of counted calls admitted in `epoch`.
    Batch {
        epoch: u64,
        calls: u32,
        failures: u32,
        slow: u32,
        trailing_failures: u32,
    },
    /// Claim probe leases for `lease`: as many of `tokens` as the fleet's budget has room
    /// for, in order (the reply's `claimed` says how many).
    Claim {
        tokens: Vec<String>,
        lease: Duration,
    },
    /// Give back probe lease `token` of `epoch`.
    Release { epoch: u64, token: String },
    /// An operator's order.
    Command(&'static str),
}

impl Op {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Sync => "sync",
            Op::Record { .. } => "rec",
            Op::Batch { .. } => "bat",
            Op::Claim { .. } => "clm",
            Op::Release { .. } => "rel",
            Op::Command(_) => "cmd",
        }
    }
}

/// Builds the invocation of `op` for the scope `keys` with the fixed `config` arguments and
/// `jitter` for an opening.
pub(crate) fn invocation<'a>(
    keys: &Keys,
    config: &ConfigArgs,
    op: &Op,
    jitter: Duration,
) -> redis::ScriptInvocation<'a> {
    let mut inv = SCRIPT.prepare_invoke();
    inv.key(&keys.state)
        .key(&keys.window)
        .key(&keys.ring)
        .key(&keys.leases)
        .key(&keys.epoch)
        .arg(op.name());
    for a in &config.args {
        inv.arg(a);
    }
    inv.arg(micros(jitter));
    let flag = |b: bool| u8::from(b);
    match op {
        Op::Sync => {}
        Op::Record {
            epoch,
            probe,
            failure,
            slow,
        } => {
            inv.arg(*epoch)
                .arg(if probe.is_some() { "p" } else { "c" })
                .arg(probe.as_deref().unwrap_or(""))
                .arg(flag(*failure))
                .arg(flag(*slow));
        }
        Op::Batch {
            epoch,
            calls,
            failures,
            slow,
            trailing_failures,
        } => {
            inv.arg(*epoch)
                .arg(*calls)
                .arg(*failures)
                .arg(*slow)
                .arg(*trailing_failures);
        }
        Op::Claim { tokens, lease } => {
            inv.arg(micros(*lease));
            for token in tokens {
                inv.arg(token);
            }
        }
        Op::Release { epoch, token } => {
            inv.arg(*epoch).arg(token);
        }
        Op::Command(code) => {
            inv.arg(*code);
        }
    }
    inv
}

/// A window as the script keeps it: its kind (`"c"`ount or `"t"`ime), its size (calls, or
/// a bucket's span in microseconds) and its buckets; `None` for a window it does not keep.
pub(crate) fn window_args(window: WindowConfig) -> Option<(&'static str, u64, u64)> {
    Some(match window {
        WindowConfig::Count { size } => ("c", u64::from(size), 0u64),
        WindowConfig::Time { duration, buckets } => {
            let buckets = u64::from(buckets.max(1));
            ("t", (micros(duration) / buckets).max(1), buckets)
        }
        _ => return None,
    })
}

/// An operator's order as the script names it; `None` for an order it does not know (the
/// store does not take those).
pub(crate) fn command_code(command: fusebox_breaker::Command) -> Option<&'static str> {
    use fusebox_breaker::Command;
    Some(match command {
        Command::ForceOpen => "f",
        Command::Disable => "d",
        Command::MetricsOnly => "m",
        Command::Reset => "r",
        _ => return None,
    })
}

/// A state by its number in the script (the same numbers as `State::code`).
pub(crate) fn state_from_code(code: i64) -> Option<State> {
    Some(match code {
        0 => State::Closed,
        1 => State::Open,
        2 => State::HalfOpen,
        3 => State::ForcedOpen,
        4 => State::Disabled,
        5 => State::MetricsOnly,
        _ => return None,
    })
}

/// A reason by its number in the script.
pub(crate) fn reason_from_code(code: i64) -> Option<Reason> {
    Some(match code {
        0 => Reason::FailureRate,
        1 => Reason::SlowCallRate,
        2 => Reason::ConsecutiveFailures,
        3 => Reason::OpenWaitElapsed,
        4 => Reason::ProbeFailed,
        5 => Reason::HalfOpenTimeout,
        6 => Reason::ProbesSucceeded,
        7 => Reason::ForcedOpen,
        8 => Reason::Disabled,
        9 => Reason::MetricsOnly,
        10 => Reason::Reset,
        _ => return None,
    })
}

/// The fleet state as one script call (or pub/sub message) reported it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    /// Whether the operation took effect (a result counted, a lease granted, ...).
    pub(crate) applied: bool,
    /// For a claim: how many of its tokens were granted (the first ones).
    pub(crate) claimed: u32,
    pub(crate) state: State,
    pub(crate) epoch: u64,
    /// Redis's clock when the script ran (microseconds since the Unix epoch).
    pub(crate) now_us: i64,
    pub(crate) open_until_us: i64,
    pub(crate) half_open_since_us: i64,
    pub(crate) window: WindowTotals,
    /// Live probe leases.
    pub(crate) leases: u32,
    pub(crate) probes_succeeded: u32,
    /// A fast success would change nothing (a full count window of fast successes).
    pub(crate) clean: bool,
    pub(crate) would_open: bool,
    /// The last transition: why, from where, when it and the one before happened, and for
    /// an opening its wait and jitter.
    pub(crate) reason: Reason,
    pub(crate) from: State,
    pub(crate) entered_us: i64,
    pub(crate) prev_entered_us: i64,
    pub(crate) open_for_us: i64,
    pub(crate) jitter_us: i64,
    pub(crate) trips: u32,
    /// Whether the scope has a record in Redis.
    pub(crate) exists: bool,
    pub(crate) would_reason: Reason,
    /// This call opened the breaker (with the jitter it sent). Always false in a pub/sub
    /// message.
    pub(crate) opened: bool,
}

const REPLY_LEN: usize = 23;

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

impl Reply {
    /// Reads a reply; `None` if it is not the script's vector.
    pub(crate) fn decode(v: &[i64]) -> Option<Reply> {
        if v.len() != REPLY_LEN {
            return None;
        }
        Some(Reply {
            applied: v[0] != 0,
            claimed: count(v[0]),
            state: state_from_code(v[1])?,
            epoch: u64::try_from(v[2]).ok()?,
            now_us: v[3],
            open_until_us: v[4],
            half_open_since_us: v[5],
            window: WindowTotals::new(count(v[6]), count(v[7]), count(v[8])),
            leases: count(v[9]),
            probes_succeeded: count(v[10]),
            clean: v[11] != 0,
            would_open: v[12] != 0,
            reason: reason_from_code(v[13])?,
            from: state_from_code(v[14])?,
            entered_us: v[15],
            prev_entered_us: v[16],
            open_for_us: v[17],
            jitter_us: v[18],
            trips: count(v[19]),
            exists: v[20] != 0,
            would_reason: reason_from_code(v[21])?,
            opened: v[22] != 0,
        })
    }

    /// Reads a pub/sub message: the same vector, space-separated.
    pub(crate) fn parse(message: &str) -> Option<Reply> {
        let mut v = [0i64; REPLY_LEN];
        let mut n = 0;
        for part in message.split(' ') {
            *v.get_mut(n)? = part.parse().ok()?;
            n += 1;
        }
        if n != REPLY_LEN {
            return None;
        }
        Reply::decode(&v)
    }

    /// The reply of a scope with no state record: CLOSED, an empty window.
    #[cfg(test)]
    pub(crate) fn missing(epoch: u64, now_us: i64) -> Reply {
        Reply {
            applied: false,
            claimed: 0,
            state: State::Closed,
            epoch,
            now_us,
            open_until_us: 0,
            half_open_since_us: 0,
            window: WindowTotals::default(),
            leases: 0,
            probes_succeeded: 0,
            clean: false,
            would_open: false,
            reason: Reason::FailureRate,
            from: State::Closed,
            entered_us: 0,
            prev_entered_us: 0,
            open_for_us: 0,
            jitter_us: 0,
            trips: 0,
            exists: false,
            would_reason: Reason::FailureRate,
            opened: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_scope_shares_its_hash_tag() {
        let k = Keys::new("fusebox", "dep:payments:region:eu");
        for key in [
            &k.state, &k.window, &k.ring, &k.leases, &k.epoch, &k.channel,
        ] {
            assert!(
                key.starts_with("fusebox:{dep:payments:region:eu}:"),
                "{key}"
            );
            assert_eq!(key.matches('{').count(), 1);
            assert_eq!(key.matches('}').count(), 1);
        }
    }

    #[test]
    fn replies_and_messages_decode_alike() {
        let v: Vec<i64> = vec![
            1,
            1,
            7,
            1_700_000_000_000_000,
            1_700_000_030_000_000,
            0,
            20,
            12,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            1_700_000_000_000_000,
            1_699_999_000_000_000,
            30_000_000,
            0,
            1,
            1,
            0,
            1,
        ];
        let r = Reply::decode(&v).unwrap();
        assert_eq!(
            (r.state, r.epoch, r.reason, r.from),
            (State::Open, 7, Reason::FailureRate, State::Closed)
        );
        assert!(r.opened);
        assert_eq!(r.window, WindowTotals::new(20, 12, 0));
        let text: Vec<String> = v.iter().map(|n| n.to_string()).collect();
        assert_eq!(Reply::parse(&text.join(" ")), Some(r));
        assert_eq!(Reply::parse("1 2 3"), None);
        assert_eq!(Reply::decode(&[0; 3]), None);
        let mut bad = v.clone();
        bad[1] = 9;
        assert_eq!(Reply::decode(&bad), None);
    }

    #[test]
    fn the_open_wait_grows_as_the_breaker_says() {
        let c = CircuitBreakerConfig::builder()
            .name("d")
            .open_wait(Duration::from_secs(10))
            .open_wait_jitter(Duration::from_secs(2))
            .open_wait_growth(2.0, Duration::from_secs(60))
            .build()
            .unwrap();
        assert_eq!(
            open_wait_schedule(&c),
            [10_000_000, 20_000_000, 40_000_000, 60_000_000]
        );
        let flat = CircuitBreakerConfig::builder()
            .name("d")
            .count_window(1000)
            .minimum_calls(1000)
            .consecutive_failures(3)
            .open_wait(Duration::from_millis(1500))
            .build()
            .unwrap();
        assert_eq!(open_wait_schedule(&flat), [1_500_000]);
    }

    #[test]
    fn config_args_render_the_breaker() {
        let c = CircuitBreakerConfig::builder()
            .name("d")
            .time_window(Duration::from_secs(10), 10)
            .minimum_calls(5)
            .failure_rate_threshold(40)
            .consecutive_failures(3)
            .open_wait(Duration::from_millis(250))
            .max_half_open_wait(None)
            .permitted_probes(2)
            .on_close(OnClose::Keep)
            .build()
            .unwrap();
        let a = ConfigArgs::new("ch", &c, Duration::from_secs(60));
        assert_eq!(a.args[8], "250000", "no growth: one wait");
        assert_eq!(
            a.args,
            [
                "ch", "t", "1000000", "10", "5", "40", "100", "3", "250000", "0", "2", "2", "0",
                "60000"
            ]
        );
    }
}
