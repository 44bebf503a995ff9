//! A log-linear latency histogram, in the manner of HdrHistogram: each power of two is cut
//! into 32 equal buckets, so a recorded value is known to within 1/32 (about 3 %) of itself
//! from 1 ns to hours, in a fixed array of counters. Recording is an index computation and
//! an add — cheap enough to record every request of a load generator without disturbing it
//! — and histograms of several connections merge by adding counters.

use std::time::Duration;

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Buckets for every `u64`: the first `SUB` values one each, then `SUB` per power of two.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// Counts of values (nanoseconds) in log-linear buckets. See the [module docs](self).
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    sum: u128,
    max: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("max", &self.max)
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let top = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = top - SUB_BITS;
    let sub = ((v >> shift) as usize) & (SUB - 1);
    SUB + (shift as usize) * SUB + sub
}

/// The largest value that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = ((i - SUB) / SUB) as u32;
    let sub = ((i - SUB) % SUB) as u64;
    let low = (SUB as u64 + sub) << shift;
    low + ((1u64 << shift) - 1)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            sum: 0,
            max: 0,
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, latency: Duration) {
        let v = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(v)] += 1;
        self.total += 1;
        self.sum += u128::from(v);
        self.max = self.max.max(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += *b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The mean (zero when empty).
    pub fn mean(&self) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(u64::try_from(self.sum / u128::from(self.total)).unwrap_or(u64::MAX))
    }

    /// The largest value recorded.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max)
    }

    /// The value at quantile `q` (0.0 to 1.0): the upper edge of the bucket holding it,
    /// capped at the largest value recorded (zero when empty).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(upper(i).min(self.max));
            }
        }
        Duration::from_nanos(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_a_thirty_second_of_the_value() {
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1_000,
            123_456,
            9_999_999,
            u64::MAX / 3,
        ] {
            let i = index(v);
            let up = upper(i);
            assert!(up >= v, "{v}: upper {up}");
            assert!(up - v <= v / 32, "{v}: upper {up} too far");
            if i > 0 {
                assert!(upper(i - 1) < v, "{v}: the bucket below holds it");
            }
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_and_merge() {
        let mut a = Histogram::new();
        for us in 1..=100 {
            a.record(Duration::from_micros(us));
        }
        let p50 = a.quantile(0.5).as_nanos() as f64;
        assert!((50_000.0..=50_000.0 * 1.04).contains(&p50), "p50 {p50}");
        let p99 = a.quantile(0.99).as_nanos() as f64;
        assert!((99_000.0..=99_000.0 * 1.04).contains(&p99), "p99 {p99}");
        assert_eq!(a.max(), Duration::from_micros(100));
        let mut b = Histogram::new();
        b.record(Duration::from_millis(5));
        b.merge(&a);
        assert_eq!(b.count(), 101);
        assert_eq!(b.quantile(1.0), Duration::from_millis(5));
    }
}
