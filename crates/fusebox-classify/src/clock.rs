//! The one clock every fusebox layer reads.
//!
//! Time in fusebox is a [`Nanos`] count since a clock's origin, read from
//! [`tokio::time::Instant`], so that tests on paused tokio time
//! (`#[tokio::test(start_paused = true)]` with `tokio::time::advance`) drive every window,
//! open wait and deadline exactly. Layers read the clock as rarely as their semantics allow:
//! a count-window breaker without slow-call tracking reads it only when it is not closed.

use std::time::Duration;
use tokio::time::Instant;

/// A point in time: nanoseconds since the clock's origin. Cheap to copy, store in an atomic
/// and compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The origin.
    pub const ZERO: Nanos = Nanos(0);

    /// `self + d`, saturating.
    pub fn plus(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_nanos(d)))
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A monotonic clock that paused tokio time controls.
///
/// Cloning is cheap; clones share the origin.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub fn now(&self) -> Nanos {
        self.nanos_at(Instant::now())
    }

    /// The [`Nanos`] of this clock that `instant` stands for (zero before the origin).
    ///
    /// For callers that read [`Instant::now`] themselves and need a [`Nanos`] only
    /// sometimes: comparing two instants is cheaper than converting both.
    #[inline]
    pub fn nanos_at(&self, instant: Instant) -> Nanos {
        Nanos(duration_nanos(
            instant.saturating_duration_since(self.origin),
        ))
    }

    /// The tokio instant a [`Nanos`] of this clock stands for (for `tokio::time::sleep_until`).
    pub fn instant(&self, at: Nanos) -> Instant {
        self.origin + Duration::from_nanos(at.0)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time() {
        let clock = Clock::new();
        assert_eq!(clock.now(), Nanos::ZERO);
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now(), Nanos(1_500_000_000));
        assert_eq!(
            clock.now().since(Nanos(500_000_000)),
            Duration::from_secs(1)
        );
        assert_eq!(Nanos(5).since(Nanos(9)), Duration::ZERO);
        assert_eq!(
            clock.instant(Nanos(1_500_000_000)),
            clock.instant(Nanos::ZERO) + Duration::from_millis(1500)
        );
        assert_eq!(
            Nanos(u64::MAX - 1).plus(Duration::from_secs(1)),
            Nanos(u64::MAX)
        );
        let later = Instant::now() + Duration::from_millis(250);
        assert_eq!(clock.nanos_at(later), Nanos(1_750_000_000));
        assert_eq!(
            clock.nanos_at(clock.instant(Nanos::ZERO) - Duration::from_secs(1)),
            Nanos::ZERO
        );
    }
}
