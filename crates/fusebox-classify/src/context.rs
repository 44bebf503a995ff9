//! What fusebox works out about a call before it is sent — the route it belongs to in a
//! [`RouteTable`] and whether it is safe to repeat — worked out once per call and read by
//! every fusebox stage and layer the call passes through.
//!
//! A [`Scope`] holds that context for one call. The runner of a stage ([`Staged`]) makes
//! one per call and hands it to every stage it runs ([`Stage::admit`]), so the breaker,
//! the limit and the timeout of one runner resolve the call once between them; a stage asks
//! the scope through [`RouteTable::resolve_in`] and [`RouteTable::meta_in`], which match the
//! request only when the scope has no answer yet for that table.
//!
//! Layers stacked by hand are separate services, each with its own runner. While a fusebox
//! service hands a call to the service inside it, its scope is the call's *current* scope
//! ([`Scope::enter`]): the fusebox services inside read what the outer one resolved instead
//! of resolving again, whatever (non-fusebox) middleware sits between them. The outermost
//! fusebox service resolves; every one inside it reuses. The retry layer enters its scope
//! again for each attempt it sends, so the attempts are not resolved again either.
//!
//! # Why not the request's extensions
//!
//! The context could travel in the request's [`Extensions`](http::Extensions), as some
//! proxies carry their per-request classifier. Inserting a value there allocates, on every
//! call (a box for the value, and the map itself when the request has none), and fusebox's
//! healthy path allocates nothing. A scope lives on the stack of the call that made it, and
//! is current only while that call hands the request on (synchronously, inside
//! [`Service::call`](tower_service::Service::call)). A waiting call keeps its scope with it
//! and makes it current again when it is finally sent.
//!
//! # Which request
//!
//! A scope names the request it was made for by the address and length of its URI's path
//! and by its method: cloning or moving a request keeps its path where it is, and a
//! middleware that rewrites the path makes a new one. A layer that finds a current scope
//! for a different request — a path rewritten on the way in, or a request the inner service
//! makes of its own — resolves that request itself. A request with an extension method is
//! resolved by each layer (such a method cannot be named in a scope without allocating).
//!
//! The context is what the outermost fusebox service saw: a middleware between two fusebox
//! layers that changes the request's headers (say, adds an `Idempotency-Key`) or axum's
//! `MatchedPath` without touching its path is not seen by the layers inside it.
//!
//! ```
//! use fusebox_classify::context::Scope;
//! use fusebox_classify::{Route, RouteTable};
//! use http::Request;
//!
//! let table = RouteTable::builder(Route::default())
//!     .route("GET /users/{id}", Route::default())
//!     .build()?;
//! let request = Request::get("/users/7").body(())?;
//!
//! // An outer layer resolves the call and hands it on in its scope ...
//! let mut outer = Scope::new();
//! let route = table.resolve_in(&request, &mut outer);
//! assert_eq!(table.name(route), "GET /users/{id}");
//! let entered = outer.enter();
//!
//! // ... and a layer inside it, with a scope of its own, finds the route already resolved.
//! let mut inner = Scope::new();
//! assert_eq!(inner.resolved(&table, &request), Some(route));
//! drop(entered);
//! assert_eq!(Scope::new().resolved(&table, &request), None, "no longer current");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Staged`]: crate::stage::Staged
//! [`Stage::admit`]: crate::stage::Stage::admit

use crate::call::STANDARD_METHODS;
use crate::route::{RouteId, RouteTable};
use http::{Method, Request};
use std::cell::Cell;
use std::fmt;
use std::num::NonZeroU8;

/// How many tables' resolutions a scope holds: a policy's layers share one table, and
/// layers stacked by hand rarely have more than two between them. A third table replaces
/// the older of the two.
const TABLES: usize = 2;

/// One call's context: what has been resolved about it, per route table. See the
/// [module docs](self).
///
/// Cheap to make (it starts empty and reads nothing), to copy and to keep: a few words.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// The request this scope is about, once a stage has asked about one.
    call: Option<CallKey>,
    /// Whether the current scope has been consulted for `call` yet.
    inherited: bool,
    /// Whether this scope knows something the current scope it took over from did not (a
    /// route, or whether the call is safe to repeat): only then does handing the call on
    /// ([`Scope::hand_on`]) have to make it current.
    added: bool,
    /// Resolutions, newest first; a table id of 0 is an empty slot.
    entries: [Entry; TABLES],
    /// Which slot the next new table takes.
    next: u8,
}

/// What a scope knows of a request in one route table.
enum Lookup<'a> {
    /// The request's entry: resolved already.
    Found(&'a mut Entry),
    /// The scope is about the request now, and has nothing for the table yet: what is
    /// resolved goes in with [`Scope::record`].
    Missing,
    /// A request a scope cannot name (an extension method), which each layer resolves.
    Unnamed,
}

/// Names a request: its path's address and length (a URI is shorter than 64 KiB), and
/// one more than its method's index among the standard methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallKey {
    path: usize,
    len: u32,
    method: NonZeroU8,
}

/// What a scope knows of the call in one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    table: u64,
    route: RouteId,
    /// Worked out when a stage first needs it.
    idempotent: Option<bool>,
}

const EMPTY: Entry = Entry {
    table: 0,
    route: RouteId::DEFAULT,
    idempotent: None,
};

thread_local! {
    /// The scope of the call being handed on on this thread, if any.
    static CURRENT: Cell<Scope> = const { Cell::new(Scope::new()) };
}

impl Scope {
    /// An empty scope, for a call nothing has been resolved about yet.
    pub const fn new() -> Self {
        Scope {
            call: None,
            inherited: false,
            added: false,
            entries: [EMPTY; TABLES],
            next: 0,
        }
    }

    /// The route of `request` in `table`, if this scope (or the scope current when it was
    /// first asked) has resolved it.
    pub fn resolved<C, B>(
        &mut self,
        table: &RouteTable<C>,
        request: &Request<B>,
    ) -> Option<RouteId> {
        match self.lookup(table.id(), request) {
            Lookup::Found(entry) => Some(entry.route),
            Lookup::Missing | Lookup::Unnamed => None,
        }
    }

    /// Whether [`hand_on`](Self::hand_on) would make this scope current: it has resolved
    /// something of its own. A caller with nothing else to give back if the call it hands
    /// on unwinds can then skip the guard, and the call's result is built straight into
    /// its place (with a guard to drop on unwinding, it is built aside and copied).
    #[inline]
    pub fn hands_on(&self) -> bool {
        self.added
    }

    /// Makes this scope the current one until the returned guard is dropped: fusebox
    /// services called meanwhile on this thread read what it resolved. A scope that has
    /// resolved nothing changes nothing.
    #[inline]
    #[must_use = "the scope is current only until the guard is dropped"]
    pub fn enter(&self) -> Entered {
        if self.call.is_none() {
            return Entered { previous: None };
        }
        let scope = *self;
        Entered {
            previous: CURRENT.try_with(|current| current.replace(scope)).ok(),
        }
    }

    /// Makes this scope current, as [`enter`](Self::enter) does, for a call handed on at
    /// once from where its stages were asked (inside
    /// [`Service::call`](tower_service::Service::call)): a scope that only took over the
    /// current scope's resolutions adds nothing to it, and is not entered again.
    #[inline]
    #[must_use = "the scope is current only until the guard is dropped"]
    pub fn hand_on(&self) -> Entered {
        if !self.added {
            return Entered { previous: None };
        }
        self.enter()
    }

    /// What this scope knows of `request` in `table`, after making sure it is about
    /// `request` (taking over the current scope's resolutions when that is about the same
    /// request).
    #[inline]
    fn lookup<B>(&mut self, table: u64, request: &Request<B>) -> Lookup<'_> {
        let Some(key) = CallKey::of(request) else {
            return Lookup::Unnamed;
        };
        if self.call != Some(key) {
            *self = Scope::new();
            self.call = Some(key);
        }
        if !self.inherited {
            self.inherited = true;
            self.inherit(key);
        }
        match self.entries.iter_mut().find(|e| e.table == table) {
            Some(entry) => Lookup::Found(entry),
            None => Lookup::Missing,
        }
    }

    /// Takes over the current scope's resolutions if it is about the same request.
    #[inline]
    fn inherit(&mut self, key: CallKey) {
        if let Ok(current) = CURRENT.try_with(Cell::get)
            && current.call == Some(key)
        {
            self.entries = current.entries;
            self.next = current.next;
        }
    }

    /// Records that `request` is on `route` of `table`.
    #[inline]
    fn keep<B>(
        &mut self,
        table: u64,
        request: &Request<B>,
        route: RouteId,
        idempotent: Option<bool>,
    ) {
        let Some(key) = CallKey::of(request) else {
            return;
        };
        if self.call != Some(key) {
            *self = Scope::new();
            self.call = Some(key);
            self.inherited = true;
        }
        self.record(table, route, idempotent);
    }

    /// Records the route of the request a [`Lookup::Missing`] was about (which this scope
    /// is about since) in `table`.
    #[inline]
    fn record(&mut self, table: u64, route: RouteId, idempotent: Option<bool>) {
        self.added = true;
        let slot = usize::from(self.next) % TABLES;
        self.entries[slot] = Entry {
            table,
            route,
            idempotent,
        };
        self.next = ((slot + 1) % TABLES) as u8;
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope::new()
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables: Vec<_> = self
            .entries
            .iter()
            .filter(|e| e.table != 0)
            .map(|e| (e.table, e.route.index(), e.idempotent))
            .collect();
        f.debug_struct("Scope")
            .field("call", &self.call)
            .field("resolved", &tables)
            .finish()
    }
}

impl CallKey {
    #[inline]
    fn of<B>(request: &Request<B>) -> Option<CallKey> {
        let method = standard_method(request.method())?;
        let path = request.uri().path();
        Some(CallKey {
            path: path.as_ptr() as usize,
            len: u32::try_from(path.len()).ok()?,
            method,
        })
    }
}

/// One more than `method`'s place among [`STANDARD_METHODS`], if it is one: a jump on the
/// method's kind rather than a comparison with each.
#[inline]
fn standard_method(method: &Method) -> Option<NonZeroU8> {
    let place: u8 = match *method {
        Method::GET => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::HEAD => 5,
        Method::OPTIONS => 6,
        Method::PATCH => 7,
        Method::CONNECT => 8,
        Method::TRACE => 9,
        _ => return None,
    };
    debug_assert_eq!(STANDARD_METHODS[usize::from(place - 1)], *method);
    NonZeroU8::new(place)
}

/// Keeps a [`Scope`] current; see [`Scope::enter`]. Dropping it makes the scope that was
/// current before current again.
#[derive(Debug)]
pub struct Entered {
    previous: Option<Scope>,
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        if let Some(previous) = &self.previous {
            let _ = CURRENT.try_with(|current| current.set(*previous));
        }
    }
}

// === what the route table asks of a scope ===

impl<C> RouteTable<C> {
    /// The route of `request` as `scope` has it, or resolved now (and kept in `scope`).
    #[inline]
    pub(crate) fn scoped_route<B>(&self, request: &Request<B>, scope: &mut Scope) -> RouteId
    where
        C: crate::Classifier,
    {
        let id = self.id();
        match scope.lookup(id, request) {
            Lookup::Found(entry) => entry.route,
            Lookup::Missing => {
                let route = self.resolve(request);
                scope.record(id, route, None);
                route
            }
            Lookup::Unnamed => self.resolve(request),
        }
    }

    /// The route of `request` and whether it is safe to repeat, as `scope` has them, or
    /// worked out now (and kept in `scope`); `idempotent` works the latter out.
    #[inline]
    pub(crate) fn scoped_meta<B>(
        &self,
        request: &Request<B>,
        scope: &mut Scope,
        idempotent: impl FnOnce(RouteId) -> bool,
    ) -> (RouteId, bool)
    where
        C: crate::Classifier,
    {
        let id = self.id();
        match scope.lookup(id, request) {
            Lookup::Found(entry) => {
                let route = entry.route;
                if let Some(safe) = entry.idempotent {
                    return (route, safe);
                }
                let safe = idempotent(route);
                entry.idempotent = Some(safe);
                scope.added = true;
                (route, safe)
            }
            Lookup::Missing => {
                let route = self.resolve(request);
                let safe = idempotent(route);
                scope.record(id, route, Some(safe));
                (route, safe)
            }
            Lookup::Unnamed => {
                let route = self.resolve(request);
                (route, idempotent(route))
            }
        }
    }

    /// A scope for `request` that knows it is on `route` and whether it is safe to
    /// repeat, as a layer that resolved it earlier (and kept only that) hands it on.
    pub fn scope_for<B>(&self, request: &Request<B>, route: RouteId, idempotent: bool) -> Scope {
        let mut scope = Scope::new();
        scope.keep(self.id(), request, route, Some(idempotent));
        scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Route;
    use http::Method;

    fn table() -> RouteTable {
        RouteTable::builder(Route::default())
            .route("GET /users/{id}", Route::default())
            .route("POST /orders", Route::default())
            .build()
            .unwrap()
    }

    #[test]
    fn a_scope_is_a_few_words() {
        assert!(
            std::mem::size_of::<Scope>() <= 64,
            "{}",
            std::mem::size_of::<Scope>()
        );
    }

    #[test]
    fn a_current_scope_is_read_only_for_its_own_request() {
        let table = table();
        let request = Request::get("/users/7").body(()).unwrap();
        let mut outer = Scope::new();
        let route = table.resolve_in(&request, &mut outer);
        let _entered = outer.enter();

        // The same request, moved and cloned parts: found.
        let (parts, ()) = request.into_parts();
        let moved = Request::from_parts(parts.clone(), ());
        assert_eq!(Scope::new().resolved(&table, &moved), Some(route));

        // The same path in another buffer (a rewrite), another method, another table: not.
        let rewritten = Request::get(String::from("/users/7")).body(()).unwrap();
        assert_eq!(Scope::new().resolved(&table, &rewritten), None);
        let mut post = Request::from_parts(parts, ());
        *post.method_mut() = Method::POST;
        assert_eq!(Scope::new().resolved(&table, &post), None);
        assert_eq!(Scope::new().resolved(&self::table(), &moved), None);

        // An extension method is never shared.
        let mut purge = moved;
        *purge.method_mut() = Method::from_bytes(b"PURGE").unwrap();
        let mut scope = Scope::new();
        table.resolve_in(&purge, &mut scope);
        assert_eq!(scope.resolved(&table, &purge), None);
        assert_eq!(scope.enter().previous, None, "nothing to make current");
    }

    #[test]
    fn entering_nests_and_restores() {
        let table = table();
        let request = Request::get("/users/7").body(()).unwrap();
        let mut outer = Scope::new();
        table.resolve_in(&request, &mut outer);
        let other = Request::post("/orders").body(()).unwrap();
        let mut inner = Scope::new();
        table.resolve_in(&other, &mut inner);
        {
            let _outer = outer.enter();
            {
                let _inner = inner.enter();
                assert!(Scope::new().resolved(&table, &other).is_some());
                assert!(Scope::new().resolved(&table, &request).is_none());
            }
            assert!(Scope::new().resolved(&table, &request).is_some());
        }
        assert!(Scope::new().resolved(&table, &request).is_none());
    }

    #[test]
    fn handing_on_enters_only_a_scope_that_adds_to_the_current_one() {
        let table = table();
        let request = Request::get("/users/7").body(()).unwrap();

        // Nothing current: the scope that resolved the call is entered.
        let mut outer = Scope::new();
        let route = table.resolve_in(&request, &mut outer);
        let entered = outer.hand_on();
        assert!(entered.previous.is_some(), "a new resolution is entered");

        // A scope that only took the current one's resolution over adds nothing: handing
        // the call on leaves the current scope as it is.
        let mut inner = Scope::new();
        assert_eq!(table.resolve_in(&request, &mut inner), route);
        assert!(
            inner.hand_on().previous.is_none(),
            "nothing new, not entered"
        );

        // One that worked out more (whether the call is safe to repeat) is entered, and
        // what it added is read inside it.
        let mut more = Scope::new();
        assert!(table.meta_in(&request, &mut more).idempotent());
        let more_entered = more.hand_on();
        assert!(more_entered.previous.is_some(), "an addition is entered");
        let current = CURRENT.with(Cell::get);
        let kept = current.entries.iter().find(|e| e.table == table.id());
        assert_eq!(kept.and_then(|e| e.idempotent), Some(true));
        drop(more_entered);
        drop(entered);
        assert_eq!(CURRENT.with(Cell::get), Scope::new(), "restored");
    }

    #[test]
    fn a_third_table_replaces_the_oldest() {
        let tables = [table(), table(), table()];
        let request = Request::get("/users/7").body(()).unwrap();
        let mut scope = Scope::new();
        for t in &tables {
            t.resolve_in(&request, &mut scope);
        }
        assert_eq!(scope.resolved(&tables[0], &request), None);
        assert!(scope.resolved(&tables[1], &request).is_some());
        assert!(scope.resolved(&tables[2], &request).is_some());
    }

    #[test]
    fn idempotency_is_worked_out_once_and_kept() {
        let table = table();
        let request = Request::post("/orders").body(()).unwrap();
        let mut scope = Scope::new();
        let first = table.meta_in(&request, &mut scope);
        assert!(!first.idempotent());
        // A header added after the scope resolved the call is not seen: the scope's answer
        // is the one the outermost layer worked out.
        let mut keyed = request;
        keyed
            .headers_mut()
            .insert(crate::IDEMPOTENCY_KEY, http::HeaderValue::from_static("k1"));
        assert!(!table.meta_in(&keyed, &mut scope).idempotent());
        assert!(table.meta_in(&keyed, &mut Scope::new()).idempotent());
    }

    #[test]
    fn a_scope_hands_on_only_what_it_resolved_itself() {
        let first = table();
        let request = Request::get("/users/7").body(()).unwrap();
        let mut outer = Scope::new();
        assert!(!outer.hands_on(), "a new scope has nothing to hand on");
        first.resolve_in(&request, &mut outer);
        assert!(outer.hands_on(), "it resolved the call's route");
        // A scope that only took over the current one's resolution adds nothing to it.
        let _current = outer.hand_on();
        let mut inner = Scope::new();
        first.resolve_in(&request, &mut inner);
        assert!(!inner.hands_on());
        // One that resolves a table the current scope has not seen has its own to hand on.
        table().resolve_in(&request, &mut inner);
        assert!(inner.hands_on());
    }
}
