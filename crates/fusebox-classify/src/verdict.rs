//! One classification per answer, shared by everything that judges it.
//!
//! A call through several fusebox stages (a breaker, an adaptive limit) and a retry is
//! judged by each of them, and they usually ask the same classifier — the same route of
//! the same [`RouteTable`] — about the same answer. A [`SharedVerdict`] is handed to each
//! of them with the answer: the first to ask classifies, the others read its verdict. A
//! stage that asks with another table or route (layers stacked with different tables)
//! classifies again, which is what it would have done alone.
//!
//! What is shared is the classifier's own verdict ([`Classified`]): what a stage then
//! makes of it stays its own — a breaker's `count_overloaded`, the retry layer treating
//! fusebox's rejections as not retryable, each stage's slowness against its own
//! threshold.
//!
//! The stage runner keeps the verdict it shared once its future is done
//! ([`StagedFuture::judgement`](crate::stage::StagedFuture::judgement)), so that what sits
//! around the runner (the `Policy`'s retry and its call span) reads it instead of
//! classifying once more; and when a layer is asked to, it leaves the verdict in the
//! response's extensions as an [`AnswerVerdict`] for the caller to read.
//!
//! A retry under which no stage judged the answer (a policy with only a retry budget)
//! classifies it itself, in its own future's poll. It [`offer`]s that verdict, and a
//! caller that polls the retry inside [`collect`] (the `Policy`, when its call span or its
//! exposed verdict wants one) receives it: the answer is classified once for all of them,
//! without the retry's future growing by a verdict (32 bytes) that every call would carry.
//! Offering outside `collect` costs one thread-local read and keeps nothing.
//!
//! ```
//! use fusebox_classify::{Classified, RouteId, RouteTable, SharedVerdict, Verdict};
//!
//! let table = RouteTable::default();
//! let shared = SharedVerdict::new();
//! let mut asked = 0;
//! for _ in 0..3 {
//!     let classified = shared.classify(&table, RouteId::DEFAULT, |_| {
//!         asked += 1;
//!         Classified::Ready(Verdict::FAILURE)
//!     });
//!     assert_eq!(classified, Classified::Ready(Verdict::FAILURE));
//! }
//! assert_eq!(asked, 1, "classified once, read twice");
//! assert_eq!(shared.judgement().unwrap().of(&table, RouteId::DEFAULT), Some(Classified::Ready(Verdict::FAILURE)));
//! ```

use crate::classifier::Classifier;
use crate::outcome::{Classified, Verdict};
use crate::route::{RouteId, RouteTable};
use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

/// The verdict a classifier gave one answer, with the classifier it came from: which
/// route of which route table.
///
/// The table is named by its address, compared only while both tables are alive (the
/// one that judged was alive when it judged, the one asking is alive for the whole call),
/// so two different tables never compare equal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Judgement {
    table: usize,
    route: RouteId,
    classified: Classified,
}

impl Judgement {
    /// What `table`'s classifier for `route` said of an answer: for a caller that asked
    /// that classifier itself (a retry that judged its attempt's answer) and [`offer`]s
    /// the verdict to what sits around it, which reads it with [`of`](Self::of) instead
    /// of asking again.
    #[inline]
    pub fn new<C: Classifier>(
        table: &RouteTable<C>,
        route: RouteId,
        classified: Classified,
    ) -> Self {
        Judgement {
            table: table.address(),
            route,
            classified,
        }
    }

    /// The classifier's verdict: from the head, or left to the end of the stream.
    pub fn classified(&self) -> Classified {
        self.classified
    }

    /// The route whose classifier judged.
    pub fn route(&self) -> RouteId {
        self.route
    }

    /// The verdict, if it is `table`'s verdict for `route` (what `table`'s classifier for
    /// `route` would have said); `None` if another classifier gave it.
    #[inline]
    pub fn of<C: Classifier>(&self, table: &RouteTable<C>, route: RouteId) -> Option<Classified> {
        (self.table == table.address() && self.route == route).then_some(self.classified)
    }
}

impl fmt::Debug for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Judgement")
            .field("route", &self.route)
            .field("classified", &self.classified)
            .finish_non_exhaustive()
    }
}

/// Whether verdicts are being collected on this thread ([`collect`]), and the last one
/// offered while they are.
#[derive(Clone, Copy)]
enum Offered {
    Closed,
    Open(Option<Judgement>),
}

thread_local! {
    static OFFERED: Cell<Offered> = const { Cell::new(Offered::Closed) };
}

/// Runs `f`, and returns with its result the last verdict [`offer`]ed on this thread while
/// it ran (see the [module docs](self)). Nested calls each collect their own; the outer
/// one's state is back when the inner one returns, or unwinds.
pub fn collect<R>(f: impl FnOnce() -> R) -> (R, Option<Judgement>) {
    /// Puts the outer state back, also when `f` panics.
    struct Restore(Offered);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = OFFERED.try_with(|o| o.set(self.0));
        }
    }
    let Ok(outer) = OFFERED.try_with(|o| o.replace(Offered::Open(None))) else {
        return (f(), None);
    };
    let restore = Restore(outer);
    let result = f();
    let offered = match OFFERED.try_with(Cell::get) {
        Ok(Offered::Open(judgement)) => judgement,
        _ => None,
    };
    drop(restore);
    (result, offered)
}

/// Offers the verdict a classifier gave an answer to the [`collect`] running on this
/// thread, if any (it keeps the last one offered); without one, nothing is kept.
#[inline]
pub fn offer(judgement: Judgement) {
    let _ = OFFERED.try_with(|o| {
        if let Offered::Open(_) = o.get() {
            o.set(Offered::Open(Some(judgement)));
        }
    });
}

/// The verdict on one answer, classified by the first stage that asks and read by the
/// others (see the [module docs](self)).
///
/// Made by the stage runner for each answer — a response head, an error, the end of a
/// stream — and lent to every stage that judges it; it lives on the stack, for the length
/// of one call of the stages, and allocates nothing.
pub struct SharedVerdict {
    /// The address of the table whose classifier gave the verdict (see [`Judgement`]);
    /// 0 while no stage has asked.
    ///
    /// The verdict is kept field by field, not as one `Option<Judgement>`: each field is
    /// written and read whole, so a stage reading what the one before it wrote, right
    /// after, reads it from the store that wrote it (a wider read of narrower stores waits
    /// for them to reach the cache).
    table: Cell<usize>,
    route: Cell<RouteId>,
    /// The classifier's verdict, as [`Classified::to_words`] writes it.
    classified: [Cell<u64>; 2],
    /// The route name of the verdict a stage asked to be left in the response.
    exposed: Cell<Option<Arc<str>>>,
}

impl Default for SharedVerdict {
    fn default() -> Self {
        SharedVerdict::new()
    }
}

impl SharedVerdict {
    /// A verdict nobody has asked for yet.
    pub const fn new() -> Self {
        SharedVerdict {
            table: Cell::new(0),
            route: Cell::new(RouteId::DEFAULT),
            classified: [Cell::new(0), Cell::new(0)],
            exposed: Cell::new(None),
        }
    }

    /// The verdict of `table`'s classifier for `route`: the one given already when the
    /// first stage to ask asked the same table and route, else `classify`'s with that
    /// classifier (remembered if nobody had asked before).
    #[inline]
    pub fn classify<C: Classifier>(
        &self,
        table: &RouteTable<C>,
        route: RouteId,
        classify: impl FnOnce(&C) -> Classified,
    ) -> Classified {
        // A table's address is never 0, the mark of a verdict nobody has given yet.
        let first = self.table.get();
        if first == table.address() && self.route.get() == route {
            return self.classified();
        }
        let classified = classify(table.route(route).classifier());
        if first == 0 {
            self.table.set(table.address());
            self.route.set(route);
            let [first, second] = classified.to_words();
            self.classified[0].set(first);
            self.classified[1].set(second);
        }
        classified
    }

    /// [`classify`](Self::classify) for an answer whose verdict is always known: an error,
    /// or the end of a stream.
    #[inline]
    pub fn verdict<C: Classifier>(
        &self,
        table: &RouteTable<C>,
        route: RouteId,
        classify: impl FnOnce(&C) -> Verdict,
    ) -> Verdict {
        match self.classify(table, route, |c| Classified::Ready(classify(c))) {
            Classified::Ready(verdict) => verdict,
            // Only a response head defers: the same table and route gave this answer a
            // head's verdict, which cannot be (one shared verdict per answer).
            Classified::AtEndOfStream => Verdict::IGNORED,
        }
    }

    /// The verdict given first, with the classifier it came from; `None` if no stage asked.
    #[inline]
    pub fn judgement(&self) -> Option<Judgement> {
        let table = self.table.get();
        (table != 0).then(|| Judgement {
            table,
            route: self.route.get(),
            classified: self.classified(),
        })
    }

    /// The verdict kept, read a word at a time.
    #[inline]
    fn classified(&self) -> Classified {
        Classified::from_words([self.classified[0].get(), self.classified[1].get()])
    }

    /// Asks the runner to leave the verdict in the response's extensions, as an
    /// [`AnswerVerdict`] naming the route `table` gives it (for a stage whose layer was
    /// asked to expose its verdicts). Clones the route's name (a reference count).
    pub fn expose<C: Classifier>(&self, table: &RouteTable<C>) {
        if self.table.get() != 0 {
            self.exposed.set(Some(table.shared_name(self.route.get())));
        }
    }

    /// The verdict a stage asked to expose, with its route's name; taken (a second call
    /// gives `None`).
    #[inline]
    pub(crate) fn take_exposed(&self) -> Option<AnswerVerdict> {
        let route = self.exposed.take()?;
        let judged = self.judgement()?;
        Some(AnswerVerdict {
            route,
            id: judged.route,
            classified: judged.classified,
        })
    }
}

impl fmt::Debug for SharedVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedVerdict")
            .field("judged", &self.judgement())
            .finish_non_exhaustive()
    }
}

/// The verdict on an attempt's answer, left in its response's extensions by a layer or
/// policy built with `expose_verdict(true)`.
///
/// Read it with `response.extensions().get::<AnswerVerdict>()`. Leaving it costs an
/// allocation per response (the extensions' map and the value), which is why it is off
/// unless asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerVerdict {
    route: Arc<str>,
    id: RouteId,
    classified: Classified,
}

impl AnswerVerdict {
    /// A verdict on `route` (named `name`), for a layer of your own that leaves one.
    pub fn new(route: RouteId, name: Arc<str>, classified: Classified) -> Self {
        AnswerVerdict {
            route: name,
            id: route,
            classified,
        }
    }

    /// The verdict, or `None` when it is only known at the end of the stream (a gRPC
    /// answer whose status comes in the trailers).
    pub fn verdict(&self) -> Option<Verdict> {
        match self.classified {
            Classified::Ready(verdict) => Some(verdict),
            Classified::AtEndOfStream => None,
        }
    }

    /// The classifier's answer as it gave it.
    pub fn classified(&self) -> Classified {
        self.classified
    }

    /// The route the call was judged on.
    pub fn route(&self) -> RouteId {
        self.id
    }

    /// The route's name, as written in the route table (`"default"` for the default route).
    pub fn route_name(&self) -> &str {
        &self.route
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Route;
    use http::Method;

    #[test]
    fn an_offer_reaches_the_innermost_collect_only_and_none_is_kept_outside_one() {
        let table = RouteTable::default();
        let failed = Judgement::new(&table, RouteId::DEFAULT, Verdict::FAILURE.into());
        let ok = Judgement::new(&table, RouteId::DEFAULT, Verdict::SUCCESS.into());
        // Outside a collect: kept nowhere.
        offer(failed);
        assert_eq!(collect(|| ()).1, None);
        // The last offer wins; an inner collect takes its own, and the outer one's state
        // is back after it (what the outer had before, and what it gets after).
        let ((inner, ()), outer) = collect(|| {
            offer(failed);
            let inner = collect(|| offer(ok));
            (inner, ())
        });
        assert_eq!(inner.1, Some(ok));
        assert_eq!(outer, Some(failed));
        let (_, outer) = collect(|| {
            let _ = collect(|| offer(failed));
            offer(ok);
        });
        assert_eq!(outer, Some(ok));
        // A panic inside puts the outer state back.
        let (_, outer) = collect(|| {
            offer(ok);
            let unwound = std::panic::catch_unwind(|| collect(|| -> () { panic!("inside") }));
            assert!(unwound.is_err());
        });
        assert_eq!(outer, Some(ok));
        offer(failed);
        assert_eq!(collect(|| ()).1, None, "closed again");
    }

    #[test]
    fn another_table_or_route_classifies_again_and_the_first_stays() {
        let a = RouteTable::builder(Route::default())
            .route("GET /x", Route::default())
            .build()
            .unwrap();
        let b = RouteTable::default();
        let x = a.resolve_path(&Method::GET, "/x");
        let shared = SharedVerdict::new();
        let asked = Cell::new(0);
        let asked = &asked;
        let ask = |v: Verdict| {
            move |_: &_| {
                asked.set(asked.get() + 1);
                Classified::Ready(v)
            }
        };
        let first = shared.classify(&a, x, ask(Verdict::FAILURE));
        assert_eq!(first, Classified::Ready(Verdict::FAILURE));
        // Another table, another route of the same table: their own classifier.
        assert_eq!(
            shared.classify(&b, RouteId::DEFAULT, ask(Verdict::SUCCESS)),
            Classified::Ready(Verdict::SUCCESS)
        );
        assert_eq!(
            shared.classify(&a, RouteId::DEFAULT, ask(Verdict::IGNORED)),
            Classified::Ready(Verdict::IGNORED)
        );
        assert_eq!(asked.get(), 3);
        // The first is what is kept, and read back for its own table and route only.
        assert_eq!(
            shared.classify(&a, x, ask(Verdict::SUCCESS)),
            Classified::Ready(Verdict::FAILURE)
        );
        assert_eq!(asked.get(), 3);
        let judged = shared.judgement().unwrap();
        assert_eq!(judged.of(&a, x), Some(Classified::Ready(Verdict::FAILURE)));
        assert_eq!(judged.of(&b, RouteId::DEFAULT), None);
        assert_eq!(
            judged.of(&a.clone(), x),
            judged.of(&a, x),
            "clones share a table"
        );
    }

    #[test]
    fn exposed_once_with_the_route_name() {
        let table = RouteTable::default();
        let shared = SharedVerdict::new();
        shared.expose(&table);
        assert_eq!(
            shared.take_exposed(),
            None,
            "nothing judged, nothing to expose"
        );
        shared.verdict(&table, RouteId::DEFAULT, |_| Verdict::FAILURE);
        assert_eq!(shared.take_exposed(), None, "not asked for");
        shared.expose(&table);
        let exposed = shared.take_exposed().unwrap();
        assert_eq!(exposed.route_name(), "default");
        assert_eq!(exposed.verdict(), Some(Verdict::FAILURE));
        assert_eq!(shared.take_exposed(), None);
    }
}
