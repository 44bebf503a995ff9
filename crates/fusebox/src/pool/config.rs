//! The pool's settings and the arithmetic of ejection: how many endpoints may be out at
//! once, when the pool panics, and whether the survivors can take an endpoint's traffic.
//! Pure and synchronous, so that it is tested without a runtime.

use fusebox_classify::{ConfigError, Validator};

/// The share of the pool that may be ejected at once, by default: 10 %, Envoy's
/// `max_ejection_percent` default (outlier detection).
pub const DEFAULT_MAX_EJECTION_PERCENT: u8 = 10;

/// Below this share of healthy endpoints the pool panics and uses every endpoint, by
/// default: 50 %, Envoy's `healthy_panic_threshold` default.
pub const DEFAULT_PANIC_THRESHOLD: u8 = 50;

/// A validated pool configuration: the ejection cap, the healthy-panic threshold and,
/// optionally, how many calls an endpoint can take at once. Built with
/// [`PoolConfig::builder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    max_ejection_percent: u8,
    panic_threshold: u8,
    endpoint_capacity: Option<u32>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_ejection_percent: DEFAULT_MAX_EJECTION_PERCENT,
            panic_threshold: DEFAULT_PANIC_THRESHOLD,
            endpoint_capacity: None,
        }
    }
}

impl PoolConfig {
    /// A builder with the defaults:
    ///
    /// | setting | default | why |
    /// |---|---|---|
    /// | `max_ejection_percent` | 10 % of the pool, at least 1 endpoint | Envoy's default; a pool of fewer than ten endpoints can still eject one |
    /// | `panic_threshold` | 50 % | Envoy's default: below half healthy, a breaker per endpoint would send everything to the few left |
    /// | `endpoint_capacity` | none (ejection does not look at load) | a capacity is a property of the endpoints, not something to guess |
    pub fn builder() -> PoolConfigBuilder {
        PoolConfigBuilder {
            config: PoolConfig::default(),
        }
    }

    /// The share of the pool, in percent, that may be ejected at once.
    pub fn max_ejection_percent(&self) -> u8 {
        self.max_ejection_percent
    }

    /// The share of healthy endpoints, in percent, below which the pool panics.
    pub fn panic_threshold(&self) -> u8 {
        self.panic_threshold
    }

    /// How many calls one endpoint can take at once, if set.
    pub fn endpoint_capacity(&self) -> Option<u32> {
        self.endpoint_capacity
    }

    /// The most endpoints of a pool of `endpoints` that may be out at once (see
    /// [`max_ejected`]).
    pub fn max_ejected(&self, endpoints: usize) -> usize {
        max_ejected(endpoints, self.max_ejection_percent)
    }

    /// Whether a pool of `endpoints` with `healthy` of them healthy panics (see
    /// [`in_panic`]).
    pub fn in_panic(&self, healthy: usize, endpoints: usize) -> bool {
        in_panic(healthy, endpoints, self.panic_threshold)
    }
}

/// Builds a [`PoolConfig`].
#[derive(Debug, Clone)]
pub struct PoolConfigBuilder {
    config: PoolConfig,
}

impl PoolConfigBuilder {
    /// The share of the pool, in percent (1–100), that may be ejected at once (default
    /// 10). The share is rounded down and never below one endpoint: 10 % of 25 endpoints
    /// is 2, 10 % of 4 is 1.
    pub fn max_ejection_percent(mut self, percent: u8) -> Self {
        self.config.max_ejection_percent = percent;
        self
    }

    /// The share of healthy endpoints, in percent (0–100), below which the pool uses every
    /// endpoint, ejecting none (default 50). 0 turns the panic off.
    pub fn panic_threshold(mut self, percent: u8) -> Self {
        self.config.panic_threshold = percent;
        self
    }

    /// How many calls one endpoint can take at once (at least 1): an endpoint is then
    /// ejected only when the endpoints left serving have room for its share of the calls
    /// in flight (see [`absorbs`]). An endpoint whose headroom is measured by its
    /// concurrency limit ([`PoolLayer::measured`](super::PoolLayer::measured)) uses its
    /// limit instead.
    pub fn endpoint_capacity(mut self, calls: u32) -> Self {
        self.config.endpoint_capacity = Some(calls);
        self
    }

    /// The configuration, or every problem found, each naming its field.
    pub fn build(self) -> Result<PoolConfig, ConfigError> {
        let c = self.config;
        let mut v = Validator::new();
        v.check(
            (1..=100).contains(&c.max_ejection_percent),
            "max_ejection_percent",
            || {
                format!(
                    "must be between 1 and 100, got {} (to never eject, disable the breaker)",
                    c.max_ejection_percent
                )
            },
        );
        v.check(c.panic_threshold <= 100, "panic_threshold", || {
            format!("must be between 0 and 100, got {}", c.panic_threshold)
        });
        v.check(c.endpoint_capacity != Some(0), "endpoint_capacity", || {
            "must be at least 1, got 0".into()
        });
        v.finish(c)
    }
}

/// The most endpoints of a pool of `endpoints` that may be out at once: `percent` of the
/// pool rounded down, and at least one endpoint of a pool that has any (the minimum that
/// lets a small pool eject at all; the panic threshold keeps it from ejecting the last
/// healthy endpoint); never more than the pool, whatever `percent` (above 100 reads as
/// 100).
pub fn max_ejected(endpoints: usize, percent: u8) -> usize {
    if endpoints == 0 {
        return 0;
    }
    (endpoints.saturating_mul(usize::from(percent.min(100))) / 100).clamp(1, endpoints)
}

/// Whether a pool of `endpoints` with `healthy` of them healthy is in panic: fewer than
/// `threshold` percent healthy (compared in integers). A pool with no endpoints, or a
/// threshold of 0, never panics.
pub fn in_panic(healthy: usize, endpoints: usize, threshold: u8) -> bool {
    endpoints > 0 && healthy.saturating_mul(100) < endpoints.saturating_mul(usize::from(threshold))
}

/// Whether endpoints with `headroom` free calls between them absorb an ejected endpoint's
/// share of the calls in flight: `in_flight` calls over `serving` endpoints (the ejected
/// one included), rounded up.
pub fn absorbs(headroom: u64, in_flight: u64, serving: u64) -> bool {
    headroom >= share(in_flight, serving)
}

/// One endpoint's share of `in_flight` calls spread over `serving` endpoints, rounded up.
pub fn share(in_flight: u64, serving: u64) -> u64 {
    if serving == 0 {
        return in_flight;
    }
    in_flight.div_ceil(serving)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_a_share_rounded_down_and_at_least_one() {
        assert_eq!(max_ejected(0, 10), 0);
        assert_eq!(max_ejected(1, 10), 1);
        assert_eq!(max_ejected(4, 10), 1);
        assert_eq!(max_ejected(4, 25), 1);
        assert_eq!(max_ejected(4, 50), 2);
        assert_eq!(max_ejected(9, 10), 1);
        assert_eq!(max_ejected(20, 10), 2);
        assert_eq!(max_ejected(25, 10), 2);
        assert_eq!(max_ejected(10, 100), 10);
        assert_eq!(max_ejected(usize::MAX, 100), usize::MAX / 100);
    }

    #[test]
    fn panic_is_fewer_healthy_than_the_threshold() {
        assert!(!in_panic(2, 4, 50), "exactly half healthy is not a panic");
        assert!(in_panic(1, 4, 50));
        assert!(in_panic(0, 1, 50));
        assert!(!in_panic(1, 1, 50));
        assert!(!in_panic(0, 4, 0), "a threshold of 0 never panics");
        assert!(!in_panic(0, 0, 50), "an empty pool never panics");
        assert!(in_panic(99, 100, 100));
        assert!(!in_panic(100, 100, 100));
        assert!(in_panic(4, 9, 50), "44 % healthy");
        assert!(!in_panic(5, 9, 50), "55 % healthy");
    }

    #[test]
    fn survivors_absorb_a_share_rounded_up() {
        assert_eq!(share(0, 4), 0);
        assert_eq!(share(9, 4), 3);
        assert_eq!(share(8, 4), 2);
        assert_eq!(share(5, 0), 5);
        assert!(absorbs(3, 9, 4));
        assert!(!absorbs(2, 9, 4));
        assert!(absorbs(0, 0, 4), "an idle pool absorbs anything");
    }

    #[test]
    fn a_bad_config_names_each_field() {
        let err = PoolConfig::builder()
            .max_ejection_percent(0)
            .panic_threshold(101)
            .endpoint_capacity(0)
            .build()
            .unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            paths,
            [
                "max_ejection_percent",
                "panic_threshold",
                "endpoint_capacity"
            ]
        );
        assert!(err.problems()[0].rule().contains("got 0"));
        let ok = PoolConfig::builder().build().unwrap();
        assert_eq!(ok, PoolConfig::default());
        assert_eq!((ok.max_ejection_percent(), ok.panic_threshold()), (10, 50));
    }

    proptest::proptest! {
        #[test]
        fn any_numbers_give_a_cap_a_panic_and_a_headroom_answer_without_panicking(
            endpoints in proptest::prelude::any::<usize>(),
            healthy in proptest::prelude::any::<usize>(),
            percent in proptest::prelude::any::<u8>(),
            headroom in proptest::prelude::any::<u64>(),
            in_flight in proptest::prelude::any::<u64>(),
            serving in proptest::prelude::any::<u64>(),
        ) {
            let cap = max_ejected(endpoints, percent);
            proptest::prop_assert!(cap <= endpoints, "never more than the pool");
            if endpoints > 0 {
                proptest::prop_assert!(cap >= 1, "at least one endpoint may go");
            }
            let _ = in_panic(healthy, endpoints, percent);
            let needed = share(in_flight, serving);
            proptest::prop_assert!(needed <= in_flight.max(1));
            proptest::prop_assert_eq!(absorbs(headroom, in_flight, serving), headroom >= needed);
            // Any settings either build or name their field.
            match PoolConfig::builder()
                .max_ejection_percent(percent)
                .panic_threshold(percent)
                .endpoint_capacity(headroom as u32)
                .build()
            {
                Ok(config) => {
                    proptest::prop_assert!(config.max_ejected(endpoints) <= endpoints);
                }
                Err(e) => {
                    for p in e.problems() {
                        proptest::prop_assert!(
                            ["max_ejection_percent", "panic_threshold", "endpoint_capacity"]
                                .contains(&p.path())
                        );
                    }
                }
            }
        }
    }
}
