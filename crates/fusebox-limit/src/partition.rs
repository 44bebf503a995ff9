//! Partitions: a guaranteed share of the limit per route, tenant or host, so that one noisy
//! partition cannot take every slot.
//!
//! # Semantics
//!
//! With a current limit `L` (fixed, or wherever an adaptive limit stands) and partitions
//! with shares `s₁ … sₙ` (each within `(0, 1]`, together at most 1):
//!
//! - partition `i` has `rᵢ = ⌊L × sᵢ⌋` **reserved** slots;
//! - the remaining `U = L − Σ rᵢ` slots are **unreserved**, shared by everyone;
//! - a call of partition `i` is admitted if its partition has fewer than `rᵢ` calls in flight
//!   (it uses its reservation), or else if fewer than `U` calls are borrowing unreserved
//!   slots (it borrows one). A call whose key matches no partition can only borrow;
//! - reserved slots are never lent: a partition always finds its reservation free, however
//!   busy the others are, and the total in flight never exceeds `L`.
//!
//! So a share is both a floor (what the partition is guaranteed) and, with the unreserved
//! pool, a partition may reach `rᵢ + U`. Leave part of the limit unreserved to let busy
//! partitions use the capacity idle ones do not need; reserve it all to isolate them fully.
//! Reservations follow an adaptive limit as it moves (they are recomputed from `L` at each
//! admission). Rounding down means a very small limit may reserve nothing for a small share.
//!
//! Queued calls (with a queue configured) are granted in arrival order among those that
//! can be admitted: a waiter of a full partition does not block a waiter of another.

use fusebox_classify::{ConfigError, Validator};
use http::Request;
use std::fmt;
use std::sync::Arc;

/// Finds a request's partition.
///
/// Implemented by [`Unpartitioned`] (no partitions) and [`Partitions`] (a key function and
/// a share per key).
pub trait Partitioner<B> {
    /// The index of the request's partition in the partition list, or `None` when it
    /// belongs to none (it may then only borrow unreserved slots).
    fn partition(&self, request: &Request<B>) -> Option<usize>;
}

/// No partitions: every call competes for the whole limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unpartitioned;

impl<B> Partitioner<B> for Unpartitioned {
    #[inline]
    fn partition(&self, _: &Request<B>) -> Option<usize> {
        None
    }
}

/// Partitions by a key: a function of the request and a guaranteed share per key. See the
/// [module docs](crate::partition) for the exact semantics.
///
/// The key function runs once per call and should not allocate: return a route id, an
/// enum, a `&'static str`, or a cloned `http::HeaderValue` (a reference-count bump). Keys
/// are compared with `==` against the listed ones, in order (partitions are few).
///
/// ```
/// use fusebox_limit::partition::{Partitioner, Partitions};
/// use http::{HeaderValue, Request};
///
/// let tenants = Partitions::builder(|req: &Request<()>| req.headers().get("x-tenant").cloned())
///     .partition(Some(HeaderValue::from_static("checkout")), 0.5)
///     .partition(Some(HeaderValue::from_static("search")), 0.2)
///     .build()?;
/// let req = Request::get("/").header("x-tenant", "search").body(())?;
/// assert_eq!(tenants.partition(&req), Some(1));
/// assert_eq!(tenants.partition(&Request::new(())), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Partitions<K, F> {
    key: F,
    keys: Arc<[K]>,
    shares: Arc<[f64]>,
}

impl<K, F: Clone> Clone for Partitions<K, F> {
    fn clone(&self) -> Self {
        Partitions {
            key: self.key.clone(),
            keys: Arc::clone(&self.keys),
            shares: Arc::clone(&self.shares),
        }
    }
}

impl<K: fmt::Debug, F> fmt::Debug for Partitions<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partitions")
            .field("keys", &self.keys)
            .field("shares", &self.shares)
            .finish_non_exhaustive()
    }
}

impl<K, F> Partitions<K, F> {
    /// A builder partitioning by `key`, a function of the request.
    pub fn builder<B>(key: F) -> PartitionsBuilder<K, F>
    where
        F: Fn(&Request<B>) -> K,
    {
        PartitionsBuilder {
            key,
            entries: Vec::new(),
        }
    }

    /// The shares, in the order the partitions were listed.
    pub fn shares(&self) -> &[f64] {
        &self.shares
    }

    /// The keys, in the order the partitions were listed.
    pub fn keys(&self) -> &[K] {
        &self.keys
    }
}

impl<B, K, F> Partitioner<B> for Partitions<K, F>
where
    K: PartialEq,
    F: Fn(&Request<B>) -> K,
{
    #[inline]
    fn partition(&self, request: &Request<B>) -> Option<usize> {
        let key = (self.key)(request);
        self.keys.iter().position(|k| *k == key)
    }
}

/// Builds [`Partitions`]; [`build`](Self::build) checks the shares.
pub struct PartitionsBuilder<K, F> {
    key: F,
    entries: Vec<(K, f64)>,
}

impl<K: fmt::Debug, F> fmt::Debug for PartitionsBuilder<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionsBuilder")
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl<K: PartialEq, F> PartitionsBuilder<K, F> {
    /// Adds a partition: calls whose key equals `key` are guaranteed `share` of the limit
    /// (within `(0, 1]`).
    pub fn partition(mut self, key: K, share: f64) -> Self {
        self.entries.push((key, share));
        self
    }

    /// Checks the partitions: at least one; each share within `(0, 1]`; shares adding up to
    /// at most 1; no key listed twice. Problems name `partitions[i]`.
    pub fn build(self) -> Result<Partitions<K, F>, ConfigError> {
        let mut v = Validator::new();
        if self.entries.is_empty() {
            v.fail("partitions", "must list at least one partition");
        }
        if self.entries.len() > usize::from(u16::MAX) {
            v.fail(
                "partitions",
                format!(
                    "at most {} partitions, got {}",
                    u16::MAX,
                    self.entries.len()
                ),
            );
        }
        let mut total = 0.0;
        for (i, (key, share)) in self.entries.iter().enumerate() {
            let share = *share;
            v.check(
                share > 0.0 && share <= 1.0,
                &format!("partitions[{i}].share"),
                || format!("must be within (0, 1], got {share}"),
            );
            if share.is_finite() {
                total += share;
            }
            if self.entries[..i].iter().any(|(k, _)| k == key) {
                v.fail(format!("partitions[{i}]"), "key is listed twice");
            }
        }
        // A little slack for shares like 0.1 + 0.2 + 0.7.
        v.check(total <= 1.0 + 1e-9, "partitions", || {
            format!("shares must add up to at most 1, got {total}")
        });
        let (keys, shares): (Vec<K>, Vec<f64>) = self.entries.into_iter().unzip();
        v.finish(Partitions {
            key: self.key,
            keys: keys.into(),
            shares: shares.into(),
        })
    }
}

/// The reserved slots of each partition at limit `limit`, written into `out`; returns the
/// unreserved remainder.
pub(crate) fn reservations(limit: usize, shares: &[f64], out: &mut [usize]) -> usize {
    let mut reserved = 0usize;
    for (slot, share) in out.iter_mut().zip(shares) {
        // Shares are validated within (0, 1]: the product fits and floors safely.
        *slot = (limit as f64 * share).floor() as usize;
        reserved = reserved.saturating_add(*slot);
    }
    limit.saturating_sub(reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_checked() {
        let err = Partitions::builder(|_: &Request<()>| 0u8)
            .partition(1, 0.6)
            .partition(2, 0.0)
            .partition(1, 0.5)
            .build()
            .unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path()).collect();
        assert_eq!(
            paths,
            ["partitions[1].share", "partitions[2]", "partitions"]
        );
        assert_eq!(
            err.problems()[2].rule(),
            "shares must add up to at most 1, got 1.1"
        );
        let empty = Partitions::builder(|_: &Request<()>| 0u8)
            .build()
            .unwrap_err();
        assert_eq!(empty.problems()[0].path(), "partitions");
        assert!(
            Partitions::builder(|_: &Request<()>| 0u8)
                .partition(1, 0.1)
                .partition(2, 0.2)
                .partition(3, 0.7)
                .build()
                .is_ok()
        );
    }

    #[test]
    fn keys_map_to_indexes() {
        let p = Partitions::builder(|r: &Request<()>| r.uri().path() == "/a")
            .partition(true, 0.5)
            .build()
            .unwrap();
        let a = Request::get("/a").body(()).unwrap();
        let b = Request::get("/b").body(()).unwrap();
        assert_eq!(p.partition(&a), Some(0));
        assert_eq!(p.partition(&b), None);
        assert_eq!(Unpartitioned.partition(&a), None);
        assert_eq!(p.keys(), [true]);
        assert_eq!(p.shares(), [0.5]);
    }

    #[test]
    fn reservations_round_down() {
        let mut out = [0; 3];
        assert_eq!(reservations(10, &[0.25, 0.25, 0.3], &mut out), 3);
        assert_eq!(out, [2, 2, 3]);
        assert_eq!(reservations(1, &[0.5, 0.5, 0.0], &mut out), 1);
        assert_eq!(out, [0, 0, 0]);
        let mut full = [0; 2];
        assert_eq!(reservations(8, &[0.5, 0.5], &mut full), 0);
        assert_eq!(full, [4, 4]);
    }
}
