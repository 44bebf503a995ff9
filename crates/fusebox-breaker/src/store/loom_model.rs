//! Model checks of the memory store's lock-free publication: every interleaving, and every
//! visibility of memory the C11 model allows, of the calls that read the hot word without
//! the lock (admission; a fast success skipped in a clean window) against the locked
//! updates that publish it (a trip, the move to HALF_OPEN, an operator's reset, a failure
//! dirtying the window).
//!
//! Built with loom's atomics and mutex in place of std's (`store.rs`'s `sync`), run by
//! `.ci/loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg fusebox_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p fusebox-breaker --lib loom_model
//! ```
//!
//! The machine itself is covered by the exhaustive interleavings of whole operations in
//! `state.rs`; these models check what lies outside its mutex.

use super::{MemoryStore, Store, StoreSpec};
use crate::config::{CircuitBreakerConfig, CircuitBreakerConfigBuilder};
use crate::events::EventSink;
use crate::state::{Command, Permit, PermitKind, Rejected, State};
use fusebox_classify::{Clock, Nanos};
use loom::sync::Arc;
use loom::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Preemptions per execution for the three-thread models: enough for every race between
/// any two of the threads (loom's usual bound), few enough to finish in seconds.
const PREEMPTIONS: usize = 3;

/// A memory store for the breaker `config` describes.
fn store(config: CircuitBreakerConfigBuilder) -> Arc<MemoryStore> {
    let config = std::sync::Arc::new(config.name("loom").build().expect("a valid config"));
    let events = EventSink::new(std::sync::Arc::clone(&config.name), Vec::new());
    Arc::new(MemoryStore::new(StoreSpec::new(
        config,
        Clock::new(),
        events,
    )))
}

/// Checks that the hot word, once every thread is done, says what the machine says.
fn hot_agrees(s: &MemoryStore) {
    let snapshot = s.snapshot();
    assert_eq!(
        s.hot_word(),
        (snapshot.state, snapshot.generation),
        "the hot word is stale"
    );
}

/// A call admitted while it should have been refused, or refused then admitted.
fn admissions_in_order(results: &[Result<Permit, Rejected>], trip_seen: bool) {
    let mut refused = trip_seen;
    for r in results {
        match r {
            Ok(p) if p.kind == PermitKind::Counted => {
                assert!(!refused, "admitted past a trip it had seen: {results:?}");
                assert_eq!(p.generation, 0, "a counted call of a later generation");
            }
            Ok(_) | Err(_) => refused = true,
        }
    }
}

/// (a) No admission past a published trip. One thread records the failure that opens the
/// breaker, another a success that makes the window clean (a second publisher of the hot
/// word, which must never overwrite the trip with an older state), while a third admits
/// lock-free. An admission ordered after the trip (its thread saw the tripping thread
/// done), or after a refusal of its own, is refused; a call that finds OPEN in the word
/// is refused from the hot line (it sees this open wait's end, no lock needed); once all
/// are done the word says OPEN, and the next call is refused.
#[test]
fn loom_model_no_call_is_admitted_past_a_published_trip() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let s = store(
            CircuitBreakerConfig::builder()
                .count_window(2)
                .minimum_calls(2)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(60))
                .open_wait_jitter(Duration::ZERO),
        );
        let first = s.acquire().expect("closed");
        s.record(first, false, false, None);
        let (failing, succeeding) = (s.acquire().expect("closed"), s.acquire().expect("closed"));
        let tripped = Arc::new(AtomicBool::new(false));

        let tripper = {
            let (s, tripped) = (Arc::clone(&s), Arc::clone(&tripped));
            loom::thread::spawn(move || {
                // One failure of two calls: 50 %, the threshold. Whichever order the two
                // records take, the window trips.
                s.record(failing, true, false, None);
                tripped.store(true, Ordering::Release);
            })
        };
        let cleaner = {
            let s = Arc::clone(&s);
            loom::thread::spawn(move || s.record(succeeding, false, false, None))
        };

        let trip_seen = tripped.load(Ordering::Acquire);
        if s.hot_word().0 == State::Open {
            assert!(
                s.inside_open_wait().is_some(),
                "OPEN in the hot word without its open wait's end"
            );
        }
        let results = [s.acquire(), s.acquire()];
        admissions_in_order(&results, trip_seen);

        tripper.join().expect("the trip");
        cleaner.join().expect("the success");
        assert_eq!(s.snapshot().state, State::Open);
        hot_agrees(&s);
        assert!(s.acquire().is_err(), "admitted after the trip");
    });
}

/// (b) No probe beyond the budget. One thread trips the breaker (an open wait of 1 ns, long
/// over by the time anyone asks) and then asks for a call; two others ask twice each as
/// the breaker moves to HALF_OPEN, one of them giving back a probe it got (its call
/// dropped) before asking again. Probes out never exceed the budget of one, the machine
/// counts exactly the probes out, and a counted (non-probe) call is admitted only from
/// before the trip: never after the thread's own refusal or probe, never of a later
/// generation, never to the tripping thread once it has published the trip.
#[test]
fn loom_model_calls_racing_the_move_to_half_open_take_at_most_the_probe_budget() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let s = store(
            CircuitBreakerConfig::builder()
                .count_window(1)
                .minimum_calls(1)
                .open_wait(Duration::from_nanos(1))
                .open_wait_jitter(Duration::ZERO)
                .permitted_probes(1)
                .probe_successes(1),
        );
        let failing = s.acquire().expect("closed");
        // The trip is recorded as of the clock's origin, so its 1 ns wait is over before
        // the first call asks (and every execution takes the same path).
        while s.clock.now() < Nanos(1_000) {
            std::hint::spin_loop();
        }

        let tripper = {
            let s = Arc::clone(&s);
            loom::thread::spawn(move || {
                s.record(failing, true, false, Some(Nanos::ZERO));
                vec![s.acquire()]
            })
        };
        let dropper = {
            let s = Arc::clone(&s);
            loom::thread::spawn(move || {
                let first = s.acquire();
                // A probe whose call was dropped goes back.
                let returned = first.ok().filter(|p| p.kind == PermitKind::Probe);
                if let Some(p) = returned {
                    s.release(p);
                }
                (vec![first, s.acquire()], returned.is_some())
            })
        };
        let mine = vec![s.acquire(), s.acquire()];

        let theirs = tripper.join().expect("the tripper");
        let (dropped, returned) = dropper.join().expect("the dropper");
        admissions_in_order(&theirs, true);
        admissions_in_order(&dropped, false);
        admissions_in_order(&mine, false);

        let probes = theirs
            .iter()
            .chain(&dropped)
            .chain(&mine)
            .filter_map(|r| r.as_ref().ok())
            .filter(|p| p.kind == PermitKind::Probe)
            .inspect(|p| assert_eq!(p.generation, 2, "a probe of another generation"))
            .count();
        let held = probes - usize::from(returned);
        assert!(held <= 1, "{held} probes out, the budget is 1");
        let snapshot = s.snapshot();
        assert_eq!(snapshot.state, State::HalfOpen);
        assert_eq!(
            snapshot.probes_admitted as usize, held,
            "probe slots leaked"
        );
        hot_agrees(&s);
    });
}

/// (c) A fast success of a new generation is never skipped. The window is full of fast
/// successes (clean) when an operator resets the breaker, emptying it; a call admitted
/// meanwhile then succeeds fast. If it was admitted in the new generation, its success
/// must be counted (the empty window is not clean); admitted before the reset, it changes
/// nothing either way (skipped in the clean window, or discarded as stale).
#[test]
fn loom_model_a_reset_loses_no_success_of_the_new_generation() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(PREEMPTIONS);
    model.check(|| {
        let s = store(
            CircuitBreakerConfig::builder()
                .count_window(2)
                .minimum_calls(2),
        );
        for _ in 0..2 {
            let p = s.acquire().expect("closed");
            s.record(p, false, false, None);
        }
        let resetter = {
            let s = Arc::clone(&s);
            loom::thread::spawn(move || s.command(Command::Reset))
        };
        let p = s.acquire().expect("closed");
        s.record(p, false, false, None);
        resetter.join().expect("the reset");

        let snapshot = s.snapshot();
        assert_eq!(snapshot.generation, 1);
        assert_eq!(
            snapshot.window.calls,
            u32::from(p.generation == 1),
            "admitted in generation {}: its success is {}",
            p.generation,
            if p.generation == 1 {
                "lost"
            } else {
                "counted twice"
            }
        );
        hot_agrees(&s);
    });
}

/// (c) A failure dirties the window for every success ordered after it. In a clean window
/// of four, one thread records a failure (not enough to trip) while another records a fast
/// success and then three more. A success that comes after the failure (its thread saw the
/// failing thread done) must be counted, so the four successes push the failure out of
/// the window; skipped, the failure would stay.
#[test]
fn loom_model_a_success_after_a_failure_is_counted() {
    loom::model(|| {
        let s = store(
            CircuitBreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4),
        );
        for _ in 0..4 {
            let p = s.acquire().expect("closed");
            s.record(p, false, false, None);
        }
        let failing = s.acquire().expect("closed");
        let failed = Arc::new(AtomicBool::new(false));
        let failer = {
            let (s, failed) = (Arc::clone(&s), Arc::clone(&failed));
            loom::thread::spawn(move || {
                s.record(failing, true, false, None);
                failed.store(true, Ordering::Release);
            })
        };
        let after = failed.load(Ordering::Acquire);
        for _ in 0..4 {
            let p = s.acquire().expect("closed");
            s.record(p, false, false, None);
        }
        failer.join().expect("the failure");

        let snapshot = s.snapshot();
        assert_eq!(snapshot.state, State::Closed, "one failure in four");
        if after {
            assert_eq!(
                snapshot.window.failures, 0,
                "a success after the failure was skipped"
            );
        }
        hot_agrees(&s);
    });
}
