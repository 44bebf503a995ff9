//! Model checks of the limiter's counters and queue: every interleaving, and every
//! visibility of memory the C11 model allows, of the operations that race without the lock
//! (a release's decrement and look at the waiters against a queued call's increment and
//! admission attempt; a limit raised against a call that queues; a release against a
//! waiter that withdraws; a queue added, or removed, by a reload against a release and a
//! call that finds the limit full; two reloads of the limit's kind at once; a limit set by
//! hand against one made adaptive; a limit an adaptive sample raised against a call that
//! queues).
//!
//! Built with loom's atomics and mutex in place of std's:
//!
//! ```sh
//! RUSTFLAGS="--cfg fusebox_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p fusebox-limit --lib loom_model
//! ```
//!
//! (A cfg of its own, not `loom`: tokio reads `cfg(loom)` for its own model checks.)

use super::{Limiter, SlotState};
use crate::config::ConcurrencyLimitConfig;
use fusebox_classify::RouteTable;
use loom::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Preemptions per execution for the three-thread model.
const PREEMPTIONS: usize = 3;

/// A limiter of `max` permits with a queue of two waiters.
fn limiter(max: usize) -> Arc<Limiter<fusebox_classify::StandardClassifier>> {
    let config = ConcurrencyLimitConfig::builder()
        .name("loom")
        .max_concurrency(max)
        .queue(2, Duration::from_secs(1))
        .build()
        .expect("a valid limit");
    Arc::new(Limiter::new(&config, RouteTable::default(), &[]))
}

/// A call that finds no permit: its queue slot, or `None` if it was admitted at once.
fn call(limiter: &Limiter<fusebox_classify::StandardClassifier>) -> Option<(usize, u64)> {
    if limiter.admit(None) {
        None
    } else {
        let (index, generation, _) = limiter.enqueue(None).expect("room in the queue");
        Some((index, generation))
    }
}

/// Whether the waiter in `slot` holds a permit now (and the slot is then freed).
fn granted(limiter: &Limiter<fusebox_classify::StandardClassifier>, slot: (usize, u64)) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    limiter.poll_slot(slot.0, slot.1, &mut cx) == Poll::Ready(())
}

/// A release racing a call that queues: once both are done, the queued call holds the
/// permit — the release saw it waiting, or its own admission attempt saw the permit free —
/// and exactly one permit is out.
#[test]
fn loom_model_a_release_racing_an_enqueue_loses_no_wake_up() {
    loom::model(|| {
        let limiter = limiter(1);
        assert!(limiter.admit(None), "the first call takes the permit");
        let releaser = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.release(None))
        };
        let queued = call(&limiter);
        releaser.join().expect("the release");
        if let Some(slot) = queued {
            assert!(
                granted(&limiter, slot),
                "a free permit and a waiter left waiting"
            );
        }
        assert_eq!(limiter.in_flight(), 1, "one permit out");
        assert_eq!(limiter.waiting(), 0, "nobody waiting");
    });
}

/// Two releases racing two calls that queue behind a full limit of two: both calls end up
/// holding a permit, and the permits out never exceed the limit. Three threads explore too
/// many interleavings to finish in a test's time unbounded; three preemptions per execution
/// cover the races between any two of them (loom's usual bound).
#[test]
fn loom_model_two_releases_racing_two_waiters_leak_nothing() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let limiter = limiter(2);
        assert!(limiter.admit(None));
        assert!(limiter.admit(None));
        let releasers: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                loom::thread::spawn(move || limiter.release(None))
            })
            .collect();
        let first = call(&limiter);
        let second = call(&limiter);
        for r in releasers {
            r.join().expect("a release");
        }
        for slot in [first, second].into_iter().flatten() {
            assert!(
                granted(&limiter, slot),
                "two permits free, a waiter left waiting"
            );
        }
        assert_eq!(limiter.in_flight(), 2);
        assert_eq!(limiter.waiting(), 0);
    });
}

/// A limit raised racing a call that queues: the call gets the new permit.
#[test]
fn loom_model_a_raised_limit_racing_an_enqueue_admits_the_waiter() {
    loom::model(|| {
        let limiter = limiter(1);
        assert!(limiter.admit(None));
        let raiser = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || assert!(limiter.set_limit(2)))
        };
        let queued = call(&limiter);
        raiser.join().expect("the raise");
        if let Some(slot) = queued {
            assert!(
                granted(&limiter, slot),
                "room under the new limit, a waiter left"
            );
        }
        assert_eq!(limiter.in_flight(), 2);
        assert_eq!(limiter.waiting(), 0);
    });
}

/// A release racing a waiter that gives up (its queue timeout or its caller's drop): the
/// permit is either granted to the waiter, which then holds it (`withdraw` says so) and
/// gives it back, or left free — never lost.
#[test]
fn loom_model_a_release_racing_a_withdrawal_leaks_no_permit() {
    loom::model(|| {
        let limiter = limiter(1);
        assert!(limiter.admit(None));
        let (index, generation, _) = limiter.enqueue(None).expect("room in the queue");
        let slot = (index, generation);
        let releaser = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.release(None))
        };
        if limiter.withdraw(slot.0, slot.1) {
            // Granted meanwhile: the withdrawing caller holds the permit and returns it.
            limiter.release(None);
        }
        releaser.join().expect("the release");
        assert_eq!(limiter.in_flight(), 0, "the permit came back");
        assert_eq!(limiter.waiting(), 0);
        let state = &super::lock(&limiter.slow).queue.slots[slot.0].state;
        assert!(matches!(state, SlotState::Free), "the slot was freed");
    });
}

/// A queue added by a reload racing a release and a call that finds the limit full: the
/// call is shed (it found no queue yet), or it queues and ends up holding the permit — the
/// release saw it waiting, or its own admission attempt saw the permit free — and is never
/// left waiting beside a free permit.
#[test]
fn loom_model_a_queue_added_racing_a_release_loses_no_wake_up() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let built = ConcurrencyLimitConfig::builder()
            .name("loom")
            .max_concurrency(1)
            .build()
            .expect("a valid limit");
        let limiter = Arc::new(Limiter::new(&built, RouteTable::default(), &[]));
        assert!(limiter.admit(None), "the first call takes the permit");
        let releaser = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.release(None))
        };
        let reloader = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || {
                let queued = ConcurrencyLimitConfig::builder()
                    .name("loom")
                    .max_concurrency(1)
                    .queue(1, Duration::from_secs(1))
                    .build()
                    .expect("a valid limit");
                limiter.reconfigure(&queued);
            })
        };
        let admitted = limiter.admit(None);
        let queued = if admitted {
            None
        } else {
            limiter
                .enqueue(None)
                .ok()
                .map(|(index, generation, _)| (index, generation))
        };
        releaser.join().expect("the release");
        reloader.join().expect("the reload");
        let holds = admitted
            || match queued {
                Some(slot) => {
                    assert!(
                        granted(&limiter, slot),
                        "a free permit and a waiter left waiting"
                    );
                    true
                }
                None => false,
            };
        assert_eq!(limiter.in_flight(), usize::from(holds), "no permit leaked");
        assert_eq!(limiter.waiting(), 0, "nobody waiting");
    });
}

/// A fixed limit of `max` permits, with a queue of two waiters or none.
fn fixed(max: usize, queue: bool) -> ConcurrencyLimitConfig {
    let config = ConcurrencyLimitConfig::builder()
        .name("loom")
        .max_concurrency(max);
    let config = if queue {
        config.queue(2, Duration::from_secs(1))
    } else {
        config
    };
    config.build().expect("a valid limit")
}

/// An AIMD limit starting at `initial` (1 to 10), with a queue of two waiters or none.
fn aimd(initial: usize, queue: bool) -> ConcurrencyLimitConfig {
    let config = ConcurrencyLimitConfig::builder().name("loom").aimd(
        crate::AimdConfig::new()
            .initial_limit(initial)
            .min_limit(1)
            .max_limit(10),
    );
    let config = if queue {
        config.queue(2, Duration::from_secs(1))
    } else {
        config
    };
    config.build().expect("a valid limit")
}

/// The queue removed by a reload while a call waits in it, racing a release and a third
/// call: the waiter is never left beside a free permit, and the one permit the release
/// gave back is held by the waiter or by the third call.
#[test]
fn loom_model_a_queue_removed_with_a_waiter_racing_a_release_serves_it() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let limiter = limiter(1);
        assert!(limiter.admit(None));
        let (index, generation, _) = limiter.enqueue(None).expect("room in the queue");
        let releaser = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.release(None))
        };
        let reloader = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.reconfigure(&fixed(1, false)))
        };
        // A third call: admitted only if nobody waits, shed once the queue is gone.
        let third = if limiter.admit(None) {
            Some(true)
        } else {
            limiter.enqueue(None).ok().map(|_| false)
        };
        releaser.join().expect("the release");
        reloader.join().expect("the reload");
        let served = granted(&limiter, (index, generation));
        match third {
            Some(true) => assert!(!served, "two permits out of one"),
            // Queued behind the waiter (before the reload took the queue away).
            Some(false) => assert!(served, "the first waiter is served first"),
            None => assert!(served, "a free permit and a waiter left waiting"),
        }
        assert_eq!(limiter.in_flight(), 1, "the one permit, held once");
    });
}

/// Two reloads of the limit's kind at once, one fixed and one adaptive: whichever comes
/// last, the limit is adaptive exactly when it holds an algorithm.
#[test]
fn loom_model_two_reloads_of_the_kind_leave_it_whole() {
    loom::model(|| {
        let limiter = Arc::new(Limiter::new(&aimd(4, false), RouteTable::default(), &[]));
        let fixing = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.reconfigure(&fixed(3, false)))
        };
        limiter.reconfigure(&aimd(5, false));
        fixing.join().expect("the other reload");
        let has_algorithm = super::lock(&limiter.adaptive).is_some();
        assert_eq!(
            limiter.is_adaptive(),
            has_algorithm,
            "kind and algorithm agree"
        );
    });
}

/// A limit set by hand racing a reload that makes it adaptive: once the limit is
/// adaptive, its value is the algorithm's, whether `set_limit` came first (and was
/// overruled) or after (and was refused).
#[test]
fn loom_model_a_limit_set_by_hand_racing_a_limit_made_adaptive_leaves_the_algorithm_its_value() {
    loom::model(|| {
        let limiter = Arc::new(Limiter::new(&fixed(4, false), RouteTable::default(), &[]));
        let setter = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || limiter.set_limit(7))
        };
        limiter.reconfigure(&aimd(1, false));
        let _ = setter.join().expect("the setter");
        let algorithm = super::lock(&limiter.adaptive)
            .as_ref()
            .map(|a| a.algorithm.limit());
        assert_eq!(
            Some(limiter.limit()),
            algorithm,
            "the algorithm owns the value"
        );
    });
}

/// An adaptive limit raised by a sample racing a call that queues: the call gets the new
/// permit.
#[test]
fn loom_model_a_limit_raised_by_a_sample_racing_an_enqueue_admits_the_waiter() {
    loom::model(|| {
        let limiter = Arc::new(Limiter::new(&aimd(1, true), RouteTable::default(), &[]));
        assert!(limiter.admit(None));
        let sampler = {
            let limiter = Arc::clone(&limiter);
            loom::thread::spawn(move || {
                limiter.record(crate::algorithm::Sample::ok(
                    fusebox_classify::Nanos(0),
                    fusebox_classify::Nanos(1),
                    1,
                ));
            })
        };
        let queued = call(&limiter);
        sampler.join().expect("the sample");
        assert_eq!(limiter.limit(), 2, "a success raised the limit");
        if let Some(slot) = queued {
            assert!(
                granted(&limiter, slot),
                "room under the raised limit, a waiter left"
            );
        }
        assert_eq!(limiter.in_flight(), 2);
    });
}
