//! One scope's background task: everything that waits on Redis so that the request path
//! never does.
//!
//! It polls the fleet state (every `poll_interval`, or at once when pub/sub reconnected),
//! flushes the batch (`flush_interval` after its first outcome, or at once when it fills
//! up), claims probe leases when calls want them (and when an OPEN wait ends after calls
//! were rejected), gives back leases left unused, asks Redis to apply a half-open timeout
//! that is due, carries out operators' orders, and — while Redis is away — tries it again
//! every `retry_interval` and resynchronises when it answers. It stops when its store is
//! dropped.

use crate::batch::tag;
use crate::script::{self, Op};
use crate::store::{Lease, Shared};
use fusebox_breaker::State;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

struct Timers {
    next_poll: Instant,
    next_retry: Instant,
    flush_at: Option<Instant>,
    next_claim: Instant,
    next_deadline_check: Instant,
}

pub(crate) async fn run(shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    shared.backend.subscribe(&shared);
    let now = Instant::now();
    let mut t = Timers {
        next_poll: now,
        next_retry: now,
        flush_at: None,
        next_claim: now,
        next_deadline_check: now,
    };
    loop {
        step(&shared, &mut t).await;
        let wake = next_wake(&shared, &t);
        tokio::select! {
            biased;
            _ = &mut stop => break,
            () = shared.notify.notified() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
    shared.backend.unsubscribe(&shared);
}

/// How long a claimed lease may wait for a call before it is given back: half the lease,
/// so that leases claimed the moment an open wait ends are still held when the calls that
/// were rejected during the wait come again, and a replica whose calls stopped blocks the
/// others' probes for no longer than that.
fn lease_hold(shared: &Shared) -> Duration {
    shared.backend.config.probe_lease / 2
}

fn next_wake(s: &Shared, t: &Timers) -> Instant {
    let cfg = &s.backend.config;
    if !s.is_healthy() || !s.is_synced() {
        return t.next_retry;
    }
    let mut wake = t.next_poll;
    if let Some(f) = t.flush_at {
        wake = wake.min(f);
    } else if !s.batch.is_empty() {
        wake = wake.min(Instant::now() + cfg.flush_interval);
    }
    let clock = s.spec.clock;
    let v = s.view();
    let wanting = s.want_lease.load(Ordering::Relaxed) > 0;
    match v.state {
        State::Open if wanting || s.demand.load(Ordering::Relaxed) > 0 => {
            // The moment the wait ends (as this replica's view times it), claim.
            wake = wake.min(clock.instant(v.open_until).max(t.next_claim));
        }
        State::HalfOpen => {
            if let Some(until) = v.half_open_until {
                wake = wake.min(clock.instant(until).max(t.next_deadline_check));
            }
            if let Some(oldest) = v
                .leases
                .iter()
                .filter(|l| !l.in_use)
                .map(|l| l.claimed)
                .min()
            {
                wake = wake.min(clock.instant(oldest) + lease_hold(s));
            }
            if wanting {
                wake = wake.min(t.next_claim);
            }
        }
        _ => {}
    }
    wake
}

async fn step(s: &Arc<Shared>, t: &mut Timers) {
    let cfg = &s.backend.config;
    let now = Instant::now();
    if !s.is_healthy() || !s.is_synced() {
        if now < t.next_retry {
            return;
        }
        t.next_retry = now + cfg.retry_interval;
        if let Some(reply) = s.call(&Op::Sync).await {
            s.resync(reply).await;
            if s.is_healthy() {
                s.give_back_all();
            }
            t.next_poll = Instant::now() + cfg.poll_interval;
            s.notify.notify_one(); // carry on with the rest at once
        }
        return;
    }

    // An operator's order.
    let pending = s.pending.lock().ok().and_then(|mut p| p.take());
    // (`Shared::command` takes only orders the script knows.)
    if let Some((command, code)) = pending.and_then(|c| Some((c, script::command_code(c)?))) {
        match s.call(&Op::Command(code)).await {
            Some(reply) => s.apply_now(&reply),
            None => {
                if let Ok(mut p) = s.pending.lock() {
                    p.get_or_insert(command);
                }
                return;
            }
        }
    }

    // The fleet state, re-read.
    if s.poll_now.swap(false, Ordering::Relaxed) || now >= t.next_poll {
        t.next_poll = now + cfg.poll_interval;
        match s.call(&Op::Sync).await {
            Some(reply) => s.apply_now(&reply),
            None => return,
        }
    }

    // The batch.
    if s.batch.is_empty() {
        t.flush_at = None;
    } else {
        let due = *t.flush_at.get_or_insert(now + cfg.flush_interval);
        if s.flush_now.swap(false, Ordering::Relaxed) || now >= due {
            t.flush_at = None;
            if !flush(s).await {
                return;
            }
        }
    }

    // Half-open: a timeout that is due is Redis's to apply.
    let (state, open_over, half_open_over) = {
        let v = s.view();
        let local_now = s.spec.clock.now();
        (
            v.state,
            local_now >= v.open_until,
            v.half_open_until.is_some_and(|u| local_now >= u),
        )
    };
    if state == State::HalfOpen && half_open_over && now >= t.next_deadline_check {
        t.next_deadline_check = now + cfg.retry_interval;
        match s.call(&Op::Sync).await {
            Some(reply) => s.apply_now(&reply),
            None => return,
        }
    }

    // Probe leases: claim them when calls want them, give back those left unused.
    let want = s.want_lease.load(Ordering::Relaxed);
    let wanted = match state {
        State::HalfOpen => want > 0,
        State::Open => open_over && (want > 0 || s.demand.load(Ordering::Relaxed) > 0),
        _ => {
            s.want_lease.store(0, Ordering::Relaxed);
            s.demand.store(0, Ordering::Relaxed);
            false
        }
    };
    if wanted && now >= t.next_claim && !claim(s, t).await {
        return;
    }
    let idle: Vec<Lease> = {
        let mut v = s.view();
        let local_now = s.spec.clock.now();
        let hold = lease_hold(s);
        let mut idle = Vec::new();
        v.leases.retain(|l| {
            let keep = l.in_use || local_now.since(l.claimed) < hold;
            if !keep {
                idle.push(l.clone());
            }
            keep
        });
        idle
    };
    for lease in idle {
        s.spawn_release(lease);
    }
}

/// Sends the batch. False when Redis did not answer.
async fn flush(s: &Arc<Shared>) -> bool {
    let (epoch, stamp, counts, trailing) = {
        // Under the view's lock, so that the batch is re-stamped with the epoch the view
        // holds and no other.
        let v = s.view();
        let (stamp, counts, trailing) = s.batch.take(v.epoch);
        (v.epoch, stamp, counts, trailing)
    };
    if counts.calls == 0 || stamp != tag(epoch) {
        return true; // nothing, or outcomes of an epoch the fleet has left
    }
    let op = Op::Batch {
        epoch,
        calls: counts.calls,
        failures: counts.failures,
        slow: counts.slow,
        trailing_failures: trailing.min(counts.failures),
    };
    match s.call(&op).await {
        Some(reply) => {
            s.apply_now(&reply);
            true
        }
        None => {
            s.count_dropped(u64::from(counts.calls));
            false
        }
    }
}

/// Claims probe leases for the calls that wanted one since the last claim (at most the
/// budget, less the leases this replica holds), in one round trip. False when Redis did not
/// answer.
async fn claim(s: &Arc<Shared>, t: &mut Timers) -> bool {
    let cfg = &s.backend.config;
    let wanted = s.want_lease.swap(0, Ordering::Relaxed) + s.demand.swap(0, Ordering::Relaxed);
    let n = {
        let v = s.view();
        let probes = s.spec.config.permitted_probes() as usize;
        let unused = v.leases.iter().filter(|l| !l.in_use).count();
        (wanted as usize)
            .saturating_sub(unused)
            .min(probes.saturating_sub(v.leases.len()))
    };
    if n == 0 {
        return true;
    }
    let tokens: Vec<String> = (0..n).map(|_| s.backend.token()).collect();
    let op = Op::Claim {
        tokens: tokens.clone(),
        lease: cfg.probe_lease,
    };
    // The epoch the claim is made in: claiming moves OPEN to HALF_OPEN, which keeps it.
    let epoch = s.view().epoch;
    let Some(reply) = s.call(&op).await else {
        s.demand.fetch_add(wanted, Ordering::Relaxed);
        // Redis may have granted the claim without the answer arriving (a call past its
        // time bound can still run): give the tokens back once it answers again, or they
        // would hold the fleet's probe budget until the leases expire.
        for token in tokens {
            s.give_back(Some(Lease {
                token,
                epoch,
                claimed: fusebox_classify::Nanos::ZERO,
                in_use: false,
            }));
        }
        return false;
    };
    s.apply_now(&reply);
    let granted = (reply.claimed as usize).min(n);
    if granted < n {
        if reply.state == State::Open {
            // Redis's clock says the wait is not over yet: claim again when it is.
            let v = s.view();
            t.next_claim = s.spec.clock.instant(v.open_until);
            s.demand.fetch_add(wanted, Ordering::Relaxed);
        } else if granted == 0 {
            // The fleet's probes are all out: ask again later, not on every rejected call.
            t.next_claim = Instant::now() + cfg.retry_interval;
        }
    }
    let claimed = s.spec.clock.now();
    let leases = tokens.into_iter().take(granted).map(|token| Lease {
        token,
        epoch: reply.epoch,
        claimed,
        in_use: false,
    });
    let mut v = s.view();
    if v.state == State::HalfOpen && v.epoch == reply.epoch {
        v.leases.extend(leases);
    } else {
        // The fleet moved on while the claim travelled.
        drop(v);
        leases.for_each(|lease| s.spawn_release(lease));
    }
    true
}
