//! How long to wait before a retry: exponential backoff with full jitter, or the delay the
//! server asked for (`Retry-After`, gRPC `grpc-retry-pushback-ms`), never longer than a cap.
//!
//! Full jitter (a uniform draw between zero and the exponential ceiling) spreads the
//! retries of many clients that failed together, so they do not return together
//! ("Exponential Backoff and Jitter", AWS Architecture Blog). A server's own delay is
//! honoured exactly: it knows when it expects to recover. A server asking for more than
//! the cap is not retried at all: waiting less than asked would hit it again too early,
//! and waiting longer holds the caller; the caller gets the answer with its header.
//!
//! `Retry-After` may be an HTTP date, which only wall-clock time can resolve. Wall-clock
//! time comes from a [`WallClock`], so tests can set it; [`SystemWallClock`] is the one
//! place in fusebox-retry that reads the system clock.

use fusebox_classify::RetryAfter;
use rand::Rng;
use std::fmt::Debug;
use std::time::{Duration, SystemTime};

/// Exponential backoff with full jitter: retry `n` (1-based) waits a uniform random time in
/// `0..=min(max, base × 2^(n-1))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff whose first ceiling is `base`, doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The ceiling of retry `retry` (1-based): `min(max, base × 2^(retry-1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1);
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// The delay before retry `retry` (1-based), drawn from `rng`.
    pub fn delay<R: Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> Duration {
        let ceiling = fusebox_classify::clock::duration_nanos(self.ceiling(retry));
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }
}

/// The delay a server asked for, seen from wall-clock `now`; `None` when it is longer than
/// `max` (do not retry).
pub fn server_delay(after: RetryAfter, now: SystemTime, max: Duration) -> Option<Duration> {
    let delay = after.delay_from(now);
    (delay <= max).then_some(delay)
}

/// A source of wall-clock time, for `Retry-After` dates.
///
/// The retry layer reads it only when a response carries a dated `Retry-After`. Tests
/// supply a clock that follows paused tokio time.
pub trait WallClock: Debug + Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock: the default [`WallClock`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    // The workspace bans `SystemTime::now` in library code because paused-time tests cannot
    // control it. This is the one exception in fusebox-retry: resolving an HTTP-date
    // `Retry-After` needs real wall-clock time, and tests replace this clock through
    // `RetryConfigBuilder::wall_clock`.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let b = Backoff::new(25 * MS, 1000 * MS);
        let ceilings: Vec<_> = (1..=8).map(|n| b.ceiling(n)).collect();
        assert_eq!(
            ceilings,
            [25, 50, 100, 200, 400, 800, 1000, 1000].map(|ms| ms * MS)
        );
        assert_eq!(b.ceiling(0), 25 * MS);
        assert_eq!(b.ceiling(u32::MAX), 1000 * MS, "no overflow");
        let huge = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
        assert_eq!(huge.ceiling(3), Duration::MAX);
    }

    #[test]
    fn seeded_jitter_is_exact_and_within_the_ceiling() {
        let b = Backoff::new(100 * MS, 400 * MS);
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (1..=4).map(|n| b.delay(n, &mut rng)).collect::<Vec<_>>()
        };
        let first = draw(42);
        assert_eq!(first, draw(42), "the same seed gives the same delays");
        assert_ne!(first, draw(43));
        assert_eq!(
            first,
            [
                Duration::from_nanos(SEEDED_42[0]),
                Duration::from_nanos(SEEDED_42[1]),
                Duration::from_nanos(SEEDED_42[2]),
                Duration::from_nanos(SEEDED_42[3]),
            ]
        );
        let mut rng = SmallRng::seed_from_u64(1);
        for n in 1..=10 {
            for _ in 0..100 {
                assert!(b.delay(n, &mut rng) <= b.ceiling(n));
            }
        }
    }

    /// The delays `SmallRng::seed_from_u64(42)` draws for retries 1 to 4 of a 100 ms / 400 ms
    /// backoff (rand 0.9's SmallRng on 64-bit targets is Xoshiro256++).
    const SEEDED_42: [u64; 4] = [81_430_515, 63_764_208, 393_557_668, 280_454_239];

    #[test]
    fn server_delays_are_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let max = Duration::from_secs(30);
        let secs = |s| RetryAfter::Delay(Duration::from_secs(s));
        assert_eq!(
            server_delay(secs(2), now, max),
            Some(Duration::from_secs(2))
        );
        assert_eq!(server_delay(secs(30), now, max), Some(max));
        assert_eq!(server_delay(secs(31), now, max), None);
        let at = |s| RetryAfter::At(now + Duration::from_secs(s));
        assert_eq!(server_delay(at(3), now, max), Some(Duration::from_secs(3)));
        assert_eq!(server_delay(at(60), now, max), None);
        let past = RetryAfter::At(now - Duration::from_secs(5));
        assert_eq!(server_delay(past, now, max), Some(Duration::ZERO));
    }

    #[test]
    fn system_clock_reads_the_system() {
        assert!(SystemWallClock.now() > SystemTime::UNIX_EPOCH);
    }
}
