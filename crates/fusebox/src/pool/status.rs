//! What the pool tells the world: its events, and the status an operator reads.

use super::shared::Shared;
use fusebox_breaker::{BreakerHandle, State};
use std::fmt;
use std::sync::Arc;

/// How the balancer may use an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Its breaker is closed (or an operator let it through): the balancer picks it.
    Serving,
    /// Its breaker tripped and the pool took it out: the balancer does not pick it until
    /// its open wait ends.
    Ejected,
    /// Out, and its breaker is half-open: the balancer picks it only while its probe
    /// budget has room, so the probes go to it alone.
    Probing,
    /// Its breaker tripped but the pool keeps it in (the cap is reached, the pool is in
    /// panic, or the others have no headroom): what its breaker rejects is sent anyway.
    WouldEject,
}

impl Status {
    /// `serving`, `ejected`, `probing` or `would_eject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Serving => "serving",
            Status::Ejected => "ejected",
            Status::Probing => "probing",
            Status::WouldEject => "would_eject",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a tripped endpoint is kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WouldEject {
    /// As many endpoints as the cap allows are out already.
    CapReached {
        /// Endpoints out.
        ejected: usize,
        /// The cap.
        max_ejected: usize,
    },
    /// Fewer than the panic threshold of the endpoints are healthy: none is ejected.
    Panic {
        /// Healthy endpoints.
        healthy: usize,
        /// Endpoints in the pool.
        endpoints: usize,
        /// The threshold, percent.
        panic_threshold: u8,
    },
    /// The endpoints left serving could not take this one's share of the calls in flight.
    NoHeadroom {
        /// Free calls on the endpoints that would keep serving (capacity minus in flight).
        headroom: u64,
        /// This endpoint's share of the calls in flight.
        share: u64,
    },
}

impl WouldEject {
    /// `cap_reached`, `panic` or `no_headroom`.
    pub fn as_str(&self) -> &'static str {
        match self {
            WouldEject::CapReached { .. } => "cap_reached",
            WouldEject::Panic { .. } => "panic",
            WouldEject::NoHeadroom { .. } => "no_headroom",
        }
    }
}

impl fmt::Display for WouldEject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WouldEject::CapReached {
                ejected,
                max_ejected,
            } => write!(
                f,
                "{ejected} of at most {max_ejected} endpoints ejected already"
            ),
            WouldEject::Panic {
                healthy,
                endpoints,
                panic_threshold,
            } => write!(
                f,
                "{healthy} of {endpoints} endpoints healthy, under the panic threshold of {panic_threshold} %"
            ),
            WouldEject::NoHeadroom { headroom, share } => write!(
                f,
                "the others have room for {headroom} calls, its share is {share}"
            ),
        }
    }
}

/// What happened in a pool.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PoolEvent {
    /// The pool's dependency (its breakers' name).
    pub dependency: Arc<str>,
    /// The endpoint, for an event of one endpoint.
    pub endpoint: Option<Arc<str>>,
    /// What happened.
    pub kind: PoolEventKind,
}

/// The kinds of [`PoolEvent`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PoolEventKind {
    /// The endpoint's breaker tripped and the pool took it out.
    Ejected {
        /// Endpoints out now, this one included.
        ejected: usize,
        /// The cap.
        max_ejected: usize,
    },
    /// The endpoint's breaker tripped but the pool keeps it in (or keeps it in for
    /// another kind of reason than before: the numbers of a reason may change without a new
    /// event, and the status always has the current ones).
    WouldEject {
        /// Why.
        reason: WouldEject,
    },
    /// The endpoint serves again: its breaker closed.
    Returned,
    /// The pool's panic started (`active`) or ended.
    Panic {
        /// Whether the pool is in panic now.
        active: bool,
        /// Healthy endpoints.
        healthy: usize,
        /// Endpoints in the pool.
        endpoints: usize,
        /// The threshold, percent.
        panic_threshold: u8,
    },
}

/// One endpoint in a [`PoolStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStatus {
    /// The endpoint's key, as its breaker's metrics and events label it.
    pub endpoint: Arc<str>,
    /// How the balancer may use it.
    pub status: Status,
    /// Its breaker's state.
    pub breaker: State,
    /// Its calls in flight (its load).
    pub in_flight: usize,
    /// Why it is kept in, while [`Status::WouldEject`].
    pub would_eject: Option<WouldEject>,
}

/// A pool's endpoints and counts, as of one moment ([`PoolHandle::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// Every endpoint, in the order they joined.
    pub endpoints: Vec<EndpointStatus>,
    /// Endpoints out.
    pub ejected: usize,
    /// The most endpoints that may be out at once.
    pub max_ejected: usize,
    /// Tripped endpoints kept in.
    pub would_eject: usize,
    /// Endpoints whose breaker has not tripped.
    pub healthy: usize,
    /// Whether the pool is in panic (uses every endpoint).
    pub panic: bool,
}

impl PoolStatus {
    /// The endpoint `key`'s status.
    pub fn endpoint(&self, key: &str) -> Option<&EndpointStatus> {
        self.endpoints.iter().find(|e| &*e.endpoint == key)
    }

    /// The keys of the endpoints in `status`, in the order they joined.
    pub fn with_status(&self, status: Status) -> Vec<&str> {
        self.endpoints
            .iter()
            .filter(|e| e.status == status)
            .map(|e| &*e.endpoint)
            .collect()
    }
}

impl fmt::Display for PoolStatus {
    /// One line per endpoint, then the counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.endpoints {
            write!(
                f,
                "{:<24} {:<12} breaker {:<12} in flight {}",
                e.endpoint,
                e.status.as_str(),
                e.breaker.as_str(),
                e.in_flight
            )?;
            if let Some(reason) = &e.would_eject {
                write!(f, "  ({reason})")?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "{} ejected of at most {}, {} would eject, {} of {} healthy{}",
            self.ejected,
            self.max_ejected,
            self.would_eject,
            self.healthy,
            self.endpoints.len(),
            if self.panic { ", in panic" } else { "" }
        )
    }
}

/// An operator's handle on a pool: its status, and each endpoint's breaker. Cheap to
/// clone.
#[derive(Clone)]
pub struct PoolHandle {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for PoolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolHandle")
            .field("dependency", &self.shared.name)
            .finish()
    }
}

impl PoolHandle {
    /// The pool's dependency.
    pub fn dependency(&self) -> &str {
        &self.shared.name
    }

    /// Every endpoint with its status, and the counts, as of now.
    pub fn status(&self) -> PoolStatus {
        self.shared.status()
    }

    /// The breaker of endpoint `key` (to force it open, reset it, read its window).
    pub fn breaker(&self, key: &str) -> Option<BreakerHandle> {
        self.shared.breaker_of(key)
    }
}
