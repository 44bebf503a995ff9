//! Partial failure: answers that name the key they count against, and the rule that keeps a
//! dependency-wide breaker from tripping on failures concentrated on a few keys.
//!
//! A breaker folds every outcome into one verdict. When a tenth of a dependency's shards
//! are hot, its window sees a tenth of its calls fail, and a dependency-wide breaker that
//! trips on that short-circuits the nine tenths that would have succeeded. Two pieces
//! address it:
//!
//! - [`answer_key`] reads the key an answer names (a response header or gRPC trailer such
//!   as `x-shard`), so that the failure can be charged to that key's breaker. A value that
//!   is absent, empty, longer than [`MAX_ANSWER_KEY_LEN`] bytes or not visible ASCII is
//!   ignored (`None`): the caller falls back to the request's key. A valid key is kept
//!   inline in a [`SmolStr`]: reading it allocates nothing.
//! - [`KeySpread`] decides whether failures seen on `failing` of `keys` distinct keys are
//!   spread widely enough to count against the dependency as a whole, and a
//!   [`KeySpreadGate`] applies it: taken from a keyed breaker
//!   ([`KeyedBreakerHandle::spread_gate`](crate::KeyedBreakerHandle::spread_gate)) and
//!   given to the dependency-wide breaker stacked around it
//!   ([`CircuitBreakerLayerBuilder::key_spread`](crate::CircuitBreakerLayerBuilder::key_spread)),
//!   it makes that breaker count a failure only while the keyed breaker sees failures on
//!   enough of its keys.
//!
//! # The rule
//!
//! A keyed breaker counts, per period (its `idle_timeout`), the distinct keys whose breakers
//! recorded a failure; the failing keys are those of the current period, or of the
//! previous one when it had more (so that a roll-over does not forget them all at once).
//! The keys are the ones it holds: used within about one to two `idle_timeout`s (see
//! [`KeyedCircuitBreakerLayer`](crate::KeyedCircuitBreakerLayer)). The dependency-wide
//! breaker then counts a failure only when [`KeySpread::counts`] says so for those two
//! numbers; otherwise the call is counted as ignored. Its successes always count.
//!
//! Failures on a key whose breaker is open never reach the dependency-wide breaker as
//! failures at all: the key's breaker refuses the call, and a breaker counts another
//! breaker's refusal as ignored. So a few hot keys open their own breakers and leave the
//! dependency-wide one closed, while a failure on most keys (a dependency that is down)
//! still opens it.

use fusebox_classify::clock::duration_nanos;
use fusebox_classify::{Clock, ConfigError, Nanos, Validator};
use http::{HeaderMap, HeaderName};
use smol_str::SmolStr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The longest key an answer may name, in bytes: the length a [`SmolStr`] keeps inline.
pub const MAX_ANSWER_KEY_LEN: usize = 23;

/// The key `headers` (an answer's headers or gRPC trailers) name under `name`, trimmed of
/// surrounding spaces and tabs; `None` when the header is absent, or its first value is
/// empty, longer than [`MAX_ANSWER_KEY_LEN`] bytes, or holds a byte that is not visible
/// ASCII. Never allocates and never panics, whatever the bytes.
pub fn answer_key(headers: &HeaderMap, name: &HeaderName) -> Option<SmolStr> {
    header_text(headers, name)
        .filter(|text| !text.is_empty() && text.len() <= MAX_ANSWER_KEY_LEN)
        .map(SmolStr::new)
}

/// The first value of header `name` in `headers`, trimmed of surrounding spaces and tabs,
/// when it is all visible ASCII (possibly empty); `None` when absent or when it holds
/// another byte. The one reading of a key from a header: an answer's
/// ([`answer_key`]) and a request's (a policy keyed by a header). Never allocates.
pub fn header_text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let value = headers.get(name)?.as_bytes().trim_ascii();
    if !value.iter().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    // Visible ASCII is valid UTF-8.
    std::str::from_utf8(value).ok()
}

/// Whether failures are spread over enough keys to count against a dependency-wide
/// breaker.
///
/// Failures seen on `failing` of the `keys` distinct keys that answered in a window count
/// against the dependency only when `failing / keys >= min_failing_key_share` and
/// `keys >= min_keys`; with fewer keys than `min_keys` there is no telling concentrated
/// from spread failure, and failures count as they would without the rule.
///
/// The default share, 0.5, sits where the two failures this separates meet: a few hot
/// shards (well under half the keys) are the per-key breakers' business, while a failure
/// on most keys is the dependency's, and a share above one half can never be reached by
/// a minority of keys however they fail.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpread {
    min_failing_key_share: f64,
    min_keys: usize,
}

impl Default for KeySpread {
    fn default() -> Self {
        KeySpread {
            min_failing_key_share: 0.5,
            min_keys: 2,
        }
    }
}

impl KeySpread {
    /// The rule with the share of failing keys (within `(0, 1]`) at which failures count
    /// against the dependency, and the number of keys (at least 1) below which they
    /// always do. Errors name the field (`min_failing_key_share`, `min_keys`) and the rule.
    pub fn new(min_failing_key_share: f64, min_keys: usize) -> Result<Self, ConfigError> {
        let mut v = Validator::new();
        v.check(
            min_failing_key_share > 0.0 && min_failing_key_share <= 1.0,
            "min_failing_key_share",
            || format!("must be within (0, 1], got {min_failing_key_share}"),
        );
        v.check(min_keys >= 1, "min_keys", || {
            "must be at least 1, got 0".into()
        });
        v.finish(KeySpread {
            min_failing_key_share,
            min_keys,
        })
    }

    /// The share of failing keys at which failures count against the dependency.
    pub fn min_failing_key_share(&self) -> f64 {
        self.min_failing_key_share
    }

    /// The number of keys below which failures always count against the dependency.
    pub fn min_keys(&self) -> usize {
        self.min_keys
    }

    /// Whether failures on `failing` of `keys` distinct keys count against the dependency.
    /// `failing` is capped at `keys`.
    pub fn counts(&self, failing: usize, keys: usize) -> bool {
        if failing == 0 {
            return false;
        }
        if keys < self.min_keys {
            return true;
        }
        let failing = failing.min(keys);
        failing as f64 >= self.min_failing_key_share * keys as f64
    }
}

/// A keyed breaker's count of its keys and of those that failed lately: what a
/// [`KeySpreadGate`] reads.
#[derive(Debug)]
pub(crate) struct SpreadCounts {
    /// The keys the keyed breaker holds.
    held: AtomicUsize,
    /// The distinct keys that failed in the current and the previous period.
    failing: Mutex<Periods>,
    period: u64,
    clock: Clock,
}

#[derive(Debug, Default)]
struct Periods {
    index: u64,
    current: usize,
    previous: usize,
}

impl Periods {
    /// Moves on to period `index`, if it is a later one.
    fn roll(&mut self, index: u64) {
        if index == self.index {
            return;
        }
        self.previous = if index == self.index + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.index = index;
    }
}

impl SpreadCounts {
    pub(crate) fn new(period: Duration, clock: Clock) -> Arc<Self> {
        Arc::new(SpreadCounts {
            held: AtomicUsize::new(0),
            failing: Mutex::new(Periods::default()),
            period: duration_nanos(period).max(1),
            clock,
        })
    }

    /// Counts a failure of the key whose breaker keeps `last` (the period of its last
    /// counted failure, truncated to 32 bits), once per period, as of `now`.
    pub(crate) fn failed(&self, last: &AtomicU32, now: Nanos) {
        let index = self.index(now);
        // Truncated: two periods 2^32 apart look alike, which only delays one count.
        if last.swap(index as u32, Ordering::Relaxed) == index as u32 {
            return;
        }
        let mut periods = self.lock();
        periods.roll(index);
        periods.current += 1;
    }

    /// The keyed breaker now holds `added` more keys and `removed` fewer.
    pub(crate) fn held_changed(&self, added: usize, removed: usize) {
        if added > 0 {
            self.held.fetch_add(added, Ordering::Relaxed);
        }
        if removed > 0 {
            self.held.fetch_sub(removed, Ordering::Relaxed);
        }
    }

    fn index(&self, now: Nanos) -> u64 {
        now.0 / self.period
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Periods> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The failing keys and the keys held, as of now.
    pub(crate) fn read(&self) -> (usize, usize) {
        let index = self.index(self.clock.now());
        let mut periods = self.lock();
        periods.roll(index);
        let failing = periods.current.max(periods.previous);
        drop(periods);
        (failing, self.held.load(Ordering::Relaxed))
    }
}

/// The period stamp of a key that has not failed yet.
pub(crate) const NEVER_FAILED: u32 = u32::MAX;

/// A keyed breaker's view of how widely its keys fail, with the [`KeySpread`] rule: given
/// to the dependency-wide breaker stacked around the keyed one
/// ([`CircuitBreakerLayerBuilder::key_spread`](crate::CircuitBreakerLayerBuilder::key_spread)),
/// it makes that breaker count a failure only when the failures are spread over enough
/// keys (see the [module docs](self)). Cheap to clone; read only when a call failed.
#[derive(Debug, Clone)]
pub struct KeySpreadGate {
    counts: Arc<SpreadCounts>,
    rule: KeySpread,
}

impl KeySpreadGate {
    pub(crate) fn new(counts: Arc<SpreadCounts>, rule: KeySpread) -> Self {
        KeySpreadGate { counts, rule }
    }

    /// The rule it applies.
    pub fn rule(&self) -> KeySpread {
        self.rule
    }

    /// The keys that failed lately and the keys held, as the gate reads them now.
    pub fn failing_and_held(&self) -> (usize, usize) {
        self.counts.read()
    }

    /// Whether a failure now counts against the dependency.
    pub fn counts(&self) -> bool {
        let (failing, held) = self.counts.read();
        self.rule.counts(failing, held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    fn shard() -> HeaderName {
        HeaderName::from_static("x-shard")
    }

    fn with(value: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(shard(), HeaderValue::from_bytes(value).unwrap());
        h
    }

    #[test]
    fn answer_key_reads_a_valid_header() {
        assert_eq!(
            answer_key(&with(b" shard-7\t"), &shard()).as_deref(),
            Some("shard-7")
        );
        assert_eq!(answer_key(&HeaderMap::new(), &shard()), None);
    }

    #[test]
    fn answer_key_ignores_malformed_values() {
        assert_eq!(answer_key(&with(b""), &shard()), None);
        assert_eq!(answer_key(&with(b"   "), &shard()), None);
        assert_eq!(answer_key(&with(b"a b"), &shard()), None);
        assert_eq!(answer_key(&with(&[0xff, b'a']), &shard()), None);
        assert_eq!(answer_key(&with(&[b'a'; 24]), &shard()), None);
        let longest = answer_key(&with(&[b'a'; 23]), &shard()).unwrap();
        assert!(!longest.is_heap_allocated());
    }

    #[test]
    fn key_spread_edges() {
        let rule = KeySpread::default();
        assert!(!rule.counts(0, 10));
        assert!(!rule.counts(1, 10));
        assert!(!rule.counts(4, 10));
        assert!(rule.counts(5, 10));
        assert!(rule.counts(9, 10));
        assert!(rule.counts(20, 10));
        // Too few keys to tell: failures count.
        assert!(rule.counts(1, 1));
        let all = KeySpread::new(1.0, 1).unwrap();
        assert!(!all.counts(9, 10));
        assert!(all.counts(10, 10));
    }

    #[test]
    fn key_spread_rejects_bad_values_naming_the_field() {
        for share in [0.0, -0.1, 1.5, f64::NAN] {
            let err = KeySpread::new(share, 2).unwrap_err();
            assert_eq!(err.problems()[0].path(), "min_failing_key_share");
            assert!(err.problems()[0].rule().contains("(0, 1]"));
        }
        let err = KeySpread::new(0.5, 0).unwrap_err();
        assert_eq!(err.problems()[0].path(), "min_keys");
    }

    proptest! {
        #[test]
        fn answer_key_never_panics_and_stays_inline(bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(0x20u8..=0x7e, 0..64),
        ]) {
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                let mut h = HeaderMap::new();
                h.insert(shard(), value);
                if let Some(key) = answer_key(&h, &shard()) {
                    prop_assert!(key.len() <= MAX_ANSWER_KEY_LEN);
                    prop_assert!(!key.is_heap_allocated());
                    prop_assert!(key.bytes().all(|b| b.is_ascii_graphic()));
                }
            }
        }
    }
}
