//! Checking a configuration file's tree: every unknown key (with the nearest known key
//! when one is close) and every value of the wrong type, each reported under its path.
//!
//! This is how policy files are checked (see the [module docs](super)), open to other
//! files that want the same reports: read the file into a [`Node`] (TOML and YAML both
//! deserialize into one), describe what each table may contain as a list of [`Field`]s,
//! and [`check_table`] reports every problem to a [`Validator`]. The value readers
//! ([`duration`], [`uint`], ...) then read checked values, or say which rule one breaks.
//!
//! ```
//! # #[cfg(feature = "toml")] {
//! use fusebox::config::check::{Kind, Node, check_table, duration};
//! use fusebox::classify::Validator;
//!
//! const PHASE: &[(&str, Kind)] = &[("name", Kind::Str), ("duration", Kind::Duration)];
//! const FILE: &[(&str, Kind)] = &[("seed", Kind::Uint(u64::MAX)), ("phases", Kind::List(PHASE))];
//!
//! let tree: Node = toml::from_str(r#"
//!     sed = 7
//!     [[phases]]
//!     name = "warm-up"
//!     duration = "2 parsecs"
//! "#).unwrap();
//! let mut v = Validator::new();
//! check_table(&tree, "", FILE, &mut v);
//! let problems: Vec<String> = v.finish(()).unwrap_err().problems().iter().map(|p| p.to_string()).collect();
//! assert_eq!(problems.len(), 2);
//! assert!(problems.contains(&"sed: unknown key; did you mean `seed`?".to_owned()));
//! assert!(problems.iter().any(|p| p.starts_with(
//!     "phases[0].duration: must be a duration such as \"250ms\" or \"30s\", got \"2 parsecs\""
//! )));
//! # }
//! ```

pub use super::node::Node;
use fusebox_classify::Validator;
use std::time::Duration;

/// The type of a key's value.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Kind {
    /// `true` or `false`.
    Bool,
    /// A whole number within `0..=max`.
    Uint(u64),
    /// A number (whole or not).
    Float,
    /// A number, or `"none"`.
    OptFloat,
    /// A duration with a unit, as a string (`"250ms"`, `"30s"`, `"1m 30s"`).
    Duration,
    /// A duration, or `"none"`.
    OptDuration,
    /// A string.
    Str,
    /// A list of strings.
    Strs,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A list of HTTP status codes.
    Statuses,
    /// A nested table.
    Table(&'static [Field]),
    /// A list of tables, each with these keys (TOML's `[[name]]`); a problem in the
    /// table at index `i` is reported under `key[i]`.
    List(&'static [Field]),
    /// Checked by the caller (`policies`, `routes`: tables of named tables).
    Named,
    /// Any value: the caller checks it (a value that may take more than one shape).
    Custom,
}

/// A known key and its type.
pub type Field = (&'static str, Kind);

/// Checks a table against its known keys, recursively: every unknown key and every value
/// of the wrong type is reported under its path.
pub fn check_table(node: &Node, path: &str, fields: &[Field], v: &mut Validator) {
    let Some(entries) = node.as_map() else {
        v.fail(path, format!("must be a table, got {}", node.kind()));
        return;
    };
    for (key, value) in entries {
        let here = join(path, key);
        match fields.iter().find(|(k, _)| k == key) {
            None => v.fail(here, unknown_key(key, fields)),
            Some((_, Kind::Table(inner))) => check_table(value, &here, inner, v),
            Some((_, Kind::List(inner))) => match value {
                Node::List(items) => {
                    for (i, item) in items.iter().enumerate() {
                        check_table(item, &format!("{here}[{i}]"), inner, v);
                    }
                }
                other => v.fail(
                    here,
                    format!("must be a list of tables, got {}", other.kind()),
                ),
            },
            Some((_, kind)) => {
                if let Err(rule) = check_value(value, *kind) {
                    v.fail(here, rule);
                }
            }
        }
    }
}

fn check_value(node: &Node, kind: Kind) -> Result<(), String> {
    match kind {
        Kind::Bool => boolean(node).map(drop),
        Kind::Uint(max) => uint(node, max).map(drop),
        Kind::Float => float(node).map(drop),
        Kind::OptFloat => opt_float(node).map(drop),
        Kind::Duration => duration(node).map(drop),
        Kind::OptDuration => opt_duration(node).map(drop),
        Kind::Str => string(node).map(drop),
        Kind::Strs => strings(node).map(drop),
        Kind::OneOf(options) => one_of(node, options).map(drop),
        Kind::Statuses => statuses(node).map(drop),
        // Tables and lists of them are checked by `check_table`, the rest by the caller.
        Kind::Table(_) | Kind::List(_) | Kind::Named | Kind::Custom => Ok(()),
    }
}

/// `path.key` (`key` alone at the top).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// "unknown key", with the nearest known key when one is close.
pub fn unknown_key(key: &str, fields: &[Field]) -> String {
    let known: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    unknown_key_among(key, &known)
}

/// "unknown key", with the nearest of `known` when one is close, else all of them.
pub fn unknown_key_among(key: &str, known: &[&str]) -> String {
    let nearest = known
        .iter()
        .map(|k| (distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min();
    match nearest {
        Some((_, k)) => format!("unknown key; did you mean `{k}`?"),
        None => format!("unknown key; expected one of: {}", known.join(", ")),
    }
}

/// Levenshtein distance, for suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

// === value readers: the rule broken, as a message, on error ===

/// A [`Kind::Bool`].
pub fn boolean(node: &Node) -> Result<bool, String> {
    match node {
        Node::Bool(b) => Ok(*b),
        other => Err(format!("must be true or false, got {}", other.show())),
    }
}

/// A [`Kind::Uint`] within `0..=max`.
pub fn uint(node: &Node, max: u64) -> Result<u64, String> {
    match node {
        Node::Int(i) if (0..=i128::from(max)).contains(i) => Ok(*i as u64),
        Node::Int(i) => Err(format!("must be a whole number within 0..={max}, got {i}")),
        other => Err(format!("must be a whole number, got {}", other.show())),
    }
}

/// A [`Kind::Float`]: a whole number reads as one too.
pub fn float(node: &Node) -> Result<f64, String> {
    match node {
        Node::Int(i) => Ok(*i as f64),
        Node::Float(f) => Ok(*f),
        other => Err(format!("must be a number, got {}", other.show())),
    }
}

/// A [`Kind::OptFloat`]: `None` for `"none"` (or no value).
pub fn opt_float(node: &Node) -> Result<Option<f64>, String> {
    match node {
        Node::Str(s) if s == "none" => Ok(None),
        Node::Null => Ok(None),
        other => float(other)
            .map(Some)
            .map_err(|_| format!("must be a number or \"none\", got {}", other.show())),
    }
}

/// A [`Kind::Duration`].
pub fn duration(node: &Node) -> Result<Duration, String> {
    match node {
        // The one duration format of every file (the layers' sections read theirs so too).
        Node::Str(s) => fusebox_classify::section::parse_duration(s),
        other => Err(format!(
            "must be a duration with a unit, such as \"250ms\" or \"30s\", got {}",
            other.show()
        )),
    }
}

/// A [`Kind::OptDuration`]: `None` for `"none"` (or no value).
pub fn opt_duration(node: &Node) -> Result<Option<Duration>, String> {
    match node {
        Node::Str(s) if s == "none" => Ok(None),
        Node::Null => Ok(None),
        other => duration(other)
            .map(Some)
            .map_err(|e| format!("{e}, or \"none\"")),
    }
}

/// A [`Kind::Str`].
pub fn string(node: &Node) -> Result<String, String> {
    match node {
        Node::Str(s) => Ok(s.clone()),
        other => Err(format!("must be a string, got {}", other.show())),
    }
}

/// A [`Kind::Strs`].
pub fn strings(node: &Node) -> Result<Vec<String>, String> {
    let Node::List(items) = node else {
        return Err(format!("must be a list of strings, got {}", node.show()));
    };
    items
        .iter()
        .map(|item| match item {
            Node::Str(s) => Ok(s.clone()),
            other => Err(format!("must be a list of strings, got {}", other.show())),
        })
        .collect()
}

/// A [`Kind::OneOf`] `options`.
pub fn one_of(node: &Node, options: &[&'static str]) -> Result<&'static str, String> {
    let quoted = || {
        options
            .iter()
            .map(|o| format!("\"{o}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match node {
        Node::Str(s) => options
            .iter()
            .find(|o| **o == s.as_str())
            .copied()
            .ok_or_else(|| format!("must be one of {}, got {s:?}", quoted())),
        other => Err(format!("must be one of {}, got {}", quoted(), other.show())),
    }
}

/// A [`Kind::Statuses`].
pub fn statuses(node: &Node) -> Result<Vec<u16>, String> {
    let Node::List(items) = node else {
        return Err(format!(
            "must be a list of HTTP status codes, got {}",
            node.show()
        ));
    };
    items
        .iter()
        .map(|item| match item {
            Node::Int(i) if (100..=999).contains(i) => Ok(*i as u16),
            other => Err(format!(
                "must be a list of HTTP status codes (100..=999), got {}",
                other.show()
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_of_tables_are_checked_item_by_item() {
        const ITEM: &[Field] = &[("name", Kind::Str)];
        const TOP: &[Field] = &[("items", Kind::List(ITEM)), ("any", Kind::Custom)];
        let tree = |items: Node| {
            Node::Map(vec![
                ("items".into(), items),
                ("any".into(), Node::List(vec![Node::Null])),
            ])
        };
        let problems = |node: &Node| -> Vec<String> {
            let mut v = Validator::new();
            check_table(node, "", TOP, &mut v);
            v.finish(()).err().map_or_else(Vec::new, |e| {
                e.problems().iter().map(ToString::to_string).collect()
            })
        };
        let good = Node::Map(vec![("name".into(), Node::Str("a".into()))]);
        assert!(problems(&tree(Node::List(vec![good.clone()]))).is_empty());
        assert_eq!(
            problems(&tree(Node::List(vec![
                good,
                Node::Int(3),
                Node::Map(vec![("nmae".into(), Node::Bool(true))]),
            ]))),
            [
                "items[1]: must be a table, got an integer",
                "items[2].nmae: unknown key; did you mean `name`?",
            ]
        );
        assert_eq!(
            problems(&tree(Node::Str("a".into()))),
            ["items: must be a list of tables, got a string"]
        );
    }

    #[test]
    fn value_rules() {
        assert_eq!(
            duration(&Node::Str("750ms".into())),
            Ok(Duration::from_millis(750))
        );
        assert!(
            duration(&Node::Int(750))
                .unwrap_err()
                .contains("with a unit")
        );
        assert_eq!(
            uint(&Node::Int(-1), 10).unwrap_err(),
            "must be a whole number within 0..=10, got -1"
        );
        assert_eq!(opt_duration(&Node::Str("none".into())), Ok(None));
        assert_eq!(
            one_of(&Node::Str("keep".into()), &["clear", "keep"]),
            Ok("keep")
        );
        assert!(statuses(&Node::List(vec![Node::Int(1000)])).is_err());
        assert_eq!(float(&Node::Int(2)), Ok(2.0));
    }
}
