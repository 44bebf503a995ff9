//! [`RouteEdit`]: routes added to, removed from and replaced in a table while it is used.

use super::{Paths, Route, RouteId, RouteTable, Slot, route_id};
use crate::config::{ConfigError, Validator};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};

/// Changes to a [`RouteTable`]'s routes, made by [`RouteTable::edit`] and applied together
/// by [`commit`](RouteEdit::commit), for every layer that reads the table (its clones
/// share it), from the next call on.
///
/// - **Ids are never reused for another route.** A route keeps its id for as long as the
///   table lives: calls already on it, and whatever a layer keeps per route id (a keyed
///   breaker's keys by route, a timeout's per-route bound, each route's metric series),
///   stay on the route they were about. An added route takes the next id; a removed route
///   keeps its id and its settings for the calls already on it, matches no request and is
///   no longer listed ([`iter`](RouteTable::iter)); a route added again under a name the
///   table held before takes its old id back.
/// - **Reading a route the table was built with costs what it did.** Added routes, and the
///   matcher an edit builds, are read out of line: a table never edited reads neither.
/// - **Nothing changes unless everything can.** A key that is not a route key, a route
///   listed twice, paths the matcher cannot tell apart, a zero duration, an id the table
///   does not hold, the default route removed, or more routes than a table can hold: every
///   problem is reported, under `routes["<key>"]`, and the table is left as it was.
///
/// Routes are taken as they are: what a route leaves unset is not taken from the default
/// route (a route of a table built by [`RouteTableBuilder::build`] already holds what it
/// inherits; [`Route::inherit`] takes it from a default route of your choosing).
///
/// Edits apply one after another: an edit holds the table's edit lock from
/// [`RouteTable::edit`] until it is committed or dropped (dropping it applies nothing).
///
/// ```
/// use fusebox_classify::{Route, RouteTable};
/// use http::Method;
/// use std::time::Duration;
///
/// let table = RouteTable::builder(Route::default())
///     .route("GET /users/{id}", Route::default())
///     .build()?;
/// let users = table.resolve_path(&Method::GET, "/users/7");
///
/// let mut edit = table.edit();
/// edit.add("POST /orders", Route::default().timeout(Duration::from_millis(300)));
/// edit.remove(users);
/// let added = edit.commit()?;
///
/// assert_eq!(table.resolve_path(&Method::POST, "/orders"), added[0]);
/// assert_eq!(table.route(added[0]).timeout_duration(), Some(Duration::from_millis(300)));
/// // The removed route matches nothing, and is still read by id.
/// assert_eq!(table.resolve_path(&Method::GET, "/users/7"), fusebox_classify::RouteId::DEFAULT);
/// assert_eq!(table.name(users), "GET /users/{id}");
/// # Ok::<(), fusebox_classify::ConfigError>(())
/// ```
///
/// [`RouteTableBuilder::build`]: super::RouteTableBuilder::build
#[must_use = "an edit changes nothing until it is committed"]
pub struct RouteEdit<'a, C> {
    table: &'a RouteTable<C>,
    _held: MutexGuard<'a, ()>,
    replace: Vec<(RouteId, Route<C>)>,
    add: Vec<(String, Route<C>)>,
    remove: Vec<RouteId>,
}

impl<C> fmt::Debug for RouteEdit<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteEdit")
            .field(
                "replace",
                &self.replace.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            )
            .field("add", &self.add.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("remove", &self.remove)
            .finish()
    }
}

impl<C> RouteTable<C> {
    /// Starts an edit of this table's routes: routes added, removed or replaced, applied
    /// together by [`RouteEdit::commit`]. Waits for an edit under way to be committed or
    /// dropped.
    pub fn edit(&self) -> RouteEdit<'_, C> {
        RouteEdit {
            table: self,
            _held: self
                .table
                .edited
                .lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            replace: Vec::new(),
            add: Vec::new(),
            remove: Vec::new(),
        }
    }
}

impl<C> RouteEdit<'_, C> {
    /// Puts `route`'s settings in place of route `id`'s (see
    /// [`RouteTable::replace_route`]); the route keeps its id, name and the requests it
    /// matches.
    pub fn replace(&mut self, id: RouteId, route: Route<C>) -> &mut Self {
        self.replace.push((id, route));
        self
    }

    /// Adds a route, written as [`RouteTableBuilder::route`](super::RouteTableBuilder::route)
    /// takes it (`"GET /users/{id}"`, `"/users/{id}"`, `"/pkg.Service/Method"`). Its id is
    /// in what [`commit`](RouteEdit::commit) returns.
    pub fn add(&mut self, key: impl Into<String>, route: Route<C>) -> &mut Self {
        self.add.push((key.into(), route));
        self
    }

    /// Takes route `id` out of the table: it matches no request from then on.
    pub fn remove(&mut self, id: RouteId) -> &mut Self {
        self.remove.push(id);
        self
    }

    /// Applies the edit; returns the ids of the added routes, in the order they were
    /// added. On any problem nothing is applied, and every problem is returned.
    pub fn commit(self) -> Result<Vec<RouteId>, ConfigError> {
        let table = &*self.table.table;
        if table.shared_default {
            return Err(ConfigError::new(
                "routes",
                "the process-wide default table (RouteTable::default) is shared by every layer built without a table of its own: build a table of your own to edit its routes",
            ));
        }
        let mut v = Validator::new();
        let count = table.count();
        let name_of = |id: RouteId| table.name(id).map_or("?", |n| &**n).to_owned();
        let path_of = |name: &str| format!("routes[{name:?}]");

        // Every route the table has named but the default one, by name; and those that
        // match requests now, by id.
        let named: HashMap<Arc<str>, RouteId> = (1..count)
            .map(route_id)
            .filter_map(|id| Some((Arc::clone(table.name(id)?), id)))
            .collect();
        let mut live: BTreeMap<RouteId, Arc<str>> = named
            .iter()
            .filter(|(_, id)| table.slot(**id).is_some_and(|slot| !slot.is_removed()))
            .map(|(name, id)| (*id, Arc::clone(name)))
            .collect();

        for (id, route) in &self.replace {
            if table.slot(*id).is_none() {
                v.fail(
                    format!("routes[{}]", id.index()),
                    "is not a route id of this table",
                );
            } else {
                route.validate(&path_of(&name_of(*id)), &mut v);
            }
        }
        let rerouted = !self.add.is_empty() || !self.remove.is_empty();
        for id in &self.remove {
            if *id == RouteId::DEFAULT {
                v.fail(
                    path_of(super::DEFAULT_ROUTE),
                    "the default route cannot be removed: it answers every request no other route matches",
                );
            } else if table.slot(*id).is_none() {
                v.fail(
                    format!("routes[{}]", id.index()),
                    "is not a route id of this table",
                );
            } else {
                live.remove(id);
            }
        }
        // Routes new to the table, with their ids; routes it held before, back under theirs.
        let mut fresh = Vec::new();
        let mut revived = Vec::new();
        let mut ids = Vec::with_capacity(self.add.len());
        let mut next = count;
        let mut full = false;
        let mut adding: HashSet<String> = HashSet::new();
        for (key, route) in self.add {
            let path = path_of(&key);
            route.validate(&path, &mut v);
            let live_now = named
                .get(key.as_str())
                .is_some_and(|id| live.contains_key(id));
            if key == super::DEFAULT_ROUTE || live_now || !adding.insert(key.clone()) {
                v.fail(path, "route is listed twice");
                continue;
            }
            let (id, name) = match named.get(key.as_str()) {
                Some(id) => {
                    revived.push((*id, route));
                    (*id, Arc::clone(table.name(*id).unwrap_or(&table.names[0])))
                }
                None if next >= usize::from(u16::MAX) => {
                    if !full {
                        full = true;
                        v.fail(
                            "routes",
                            format!(
                                "at most {} route ids in a table, removed routes included: rebuild the table to start over",
                                u16::MAX - 1
                            ),
                        );
                    }
                    continue;
                }
                None => {
                    let id = route_id(next);
                    next += 1;
                    let name: Arc<str> = Arc::from(key.as_str());
                    fresh.push((id, Arc::clone(&name), route));
                    (id, name)
                }
            };
            live.insert(id, name);
            ids.push(id);
        }

        // The matcher of the routes the edit leaves, built before anything changes.
        let matcher = rerouted.then(|| {
            let mut paths = Paths::default();
            for (id, name) in &live {
                if let Err(rule) = paths.add(*id, name) {
                    v.fail(path_of(name), rule);
                }
            }
            paths.build(&mut v)
        });
        v.finish(())?;

        // Every route a request can match from now on gets its settings (and its slow-call
        // threshold) before the matcher can hand out its id.
        let edited = &table.edited;
        for (id, name, route) in fresh {
            // Its durations first: from its push on, the route is listed and counted.
            table.add_durations(id, &route);
            edited.added.push((name, Slot::new(route)));
        }
        for (id, route) in self.replace {
            if let Some(slot) = table.slot(id) {
                table.set_durations(id, &route);
                slot.replace(route);
            }
        }
        for (id, route) in revived {
            if let Some(slot) = table.slot(id) {
                table.set_durations(id, &route);
                slot.replace(route);
                slot.removed.store(false, Ordering::Release);
            }
        }
        for id in &self.remove {
            if let Some(slot) = table.slot(*id).filter(|_| !ids.contains(id)) {
                slot.removed.store(true, Ordering::Release);
            }
        }
        if let Some(matcher) = matcher {
            edited.router.store(matcher.map(Arc::new));
            edited.rerouted.store(true, Ordering::Release);
        }
        Ok(ids)
    }
}
