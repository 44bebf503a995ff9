//! Where each of a policy's route settings comes from: [`PolicyFile::explain`].

use super::PolicyFile;
use super::node::Node;
use super::route_table;
use fusebox_classify::section::RouteSection;
use fusebox_classify::{ConfigError, RouteId};
use std::fmt;

/// The level of a file a route's setting comes from, the most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The policy's own table for the route (`policies.<name>.routes."<route>"`).
    Route,
    /// The defaults' table for the same route (`defaults.routes."<route>"`).
    DefaultsRoute,
    /// The policy's default route (`policies.<name>.default_route`), which a named route
    /// inherits from.
    DefaultRoute,
    /// The defaults' default route (`defaults.default_route`).
    DefaultsDefaultRoute,
    /// No level sets it: the built-in default.
    BuiltIn,
}

impl Origin {
    /// The table that writes the setting, as problems are reported: `policy` is where the
    /// policy's own table stands (`policies.payments`), `route` the route's key
    /// (`policies.payments.routes["GET /a"]`, `defaults.default_route`); `None` for
    /// [`BuiltIn`](Origin::BuiltIn).
    pub fn table(self, policy: &str, route: &str) -> Option<String> {
        match self {
            Origin::Route => Some(format!("{policy}.routes[{route:?}]")),
            Origin::DefaultsRoute => Some(format!("defaults.routes[{route:?}]")),
            Origin::DefaultRoute => Some(format!("{policy}.default_route")),
            Origin::DefaultsDefaultRoute => Some("defaults.default_route".to_owned()),
            Origin::BuiltIn => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Route => "the route",
            Origin::DefaultsRoute => "the defaults' route",
            Origin::DefaultRoute => "the default route",
            Origin::DefaultsDefaultRoute => "the defaults' default route",
            Origin::BuiltIn => "built in",
        })
    }
}

/// One route of a policy as built from a file: its effective settings, and where each key
/// of them is written.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteExplanation {
    /// The route's key (`"GET /users/{id}"`), or `"default"` for the default route.
    pub route: String,
    /// Whether this is the policy's default route.
    pub default: bool,
    /// Every setting the built route has, set by the route itself or inherited
    /// ([`RouteSection::effective`]); a key left out is at its built-in default.
    pub section: RouteSection,
    /// Every key some level writes for this route (the most specific level's first), with
    /// the most specific level that writes it (the one whose value the route has; a status list's codes also
    /// combine with those of the less specific levels' lists, code by code).
    pub origins: Vec<(String, Origin)>,
}

impl RouteExplanation {
    /// Where `key`'s value comes from ([`Origin::BuiltIn`] when no level writes it).
    pub fn origin(&self, key: &str) -> Origin {
        self.origins
            .iter()
            .find(|(k, _)| k == key)
            .map_or(Origin::BuiltIn, |(_, o)| *o)
    }
}

impl PolicyFile {
    /// The routes of policy `name` as built — its default route first, then its named
    /// routes in table order — each with its effective settings and where each comes
    /// from: the policy's own route, the defaults' route of the same key, the policy's
    /// `default_route`, the defaults' `default_route`, or the built-in default.
    ///
    /// ```
    /// # #[cfg(feature = "toml")] {
    /// use fusebox::config::{Origin, PolicyFile};
    /// use std::time::Duration;
    ///
    /// let file = PolicyFile::from_toml(r#"
    ///     [defaults.default_route]
    ///     slow_call_duration = "1s"
    ///     [policies.api.routes."GET /a"]
    ///     timeout = "250ms"
    /// "#)?;
    /// let routes = file.explain("api")?;
    /// let a = &routes[1];
    /// assert_eq!(a.route, "GET /a");
    /// assert_eq!(a.section.slow_call_duration, Some(Some(Duration::from_secs(1))));
    /// assert_eq!(a.origin("slow_call_duration"), Origin::DefaultsDefaultRoute);
    /// assert_eq!(a.origin("timeout"), Origin::Route);
    /// assert_eq!(a.origin("retry"), Origin::BuiltIn);
    /// # }
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn explain(&self, name: &str) -> Result<Vec<RouteExplanation>, ConfigError> {
        // Known, or the same problem `policy` reports.
        self.policy(name)?;
        let (table, _) = route_table(&self.merged(name));
        let table = table.build()?;
        let own = self.root.get("policies").and_then(|p| p.get(name));
        let defaults = self.root.get("defaults");
        let at = |level: Option<&Node>, keys: &[&str]| {
            keys.iter()
                .try_fold(level?, |node, key| node.get(key))
                .cloned()
        };
        let default_levels = [
            (Origin::DefaultRoute, at(own, &["default_route"])),
            (
                Origin::DefaultsDefaultRoute,
                at(defaults, &["default_route"]),
            ),
        ];
        let mut out = Vec::new();
        for (id, key, route) in table.iter() {
            let default = id == RouteId::DEFAULT;
            let mut levels = Vec::new();
            if !default {
                levels.push((Origin::Route, at(own, &["routes", key])));
                levels.push((Origin::DefaultsRoute, at(defaults, &["routes", key])));
            }
            levels.extend(default_levels.iter().cloned());
            let mut origins: Vec<(String, Origin)> = Vec::new();
            for (origin, node) in &levels {
                for (k, _) in node.as_ref().and_then(Node::as_map).unwrap_or(&[]) {
                    if !origins.iter().any(|(seen, _)| seen == k) {
                        origins.push((k.clone(), *origin));
                    }
                }
            }
            out.push(RouteExplanation {
                route: key.to_owned(),
                default,
                section: RouteSection::effective(&route),
                origins,
            });
        }
        Ok(out)
    }
}
