//! A configuration file as a tree of plain values, whatever its format.
//!
//! TOML and YAML are both read into [`Node`]s (through serde's self-describing
//! `deserialize_any`), and everything after that — inheritance, type checks, unknown keys,
//! range checks — works on the tree. Reading the whole tree first, rather than deserializing
//! straight into typed structs, is what lets fusebox report *every* problem of a file at
//! once, each under its path: serde stops at the first.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One value of a configuration file, whatever its format: TOML and YAML both
/// deserialize into it (`toml::from_str::<Node>(text)`).
///
/// Closed: the values serde's self-describing data model gives a configuration file.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// No value (YAML's `null`, `~`, an empty value).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i128),
    /// A number with a fraction or an exponent.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Node>),
    /// A table: keys in file order.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// What kind of value this is, for messages (`"a string"`, `"a table"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Null => "nothing",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::List(_) => "a list",
            Node::Map(_) => "a table",
        }
    }

    /// The entries of a map.
    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match self {
            Node::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The value under `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Removes the value at `keys` (each a key of a table below the last); whether there
    /// was one.
    pub(crate) fn remove(&mut self, keys: &[String]) -> bool {
        let Some((last, parents)) = keys.split_last() else {
            return false;
        };
        let mut node = self;
        for key in parents {
            let Node::Map(entries) = node else {
                return false;
            };
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, child)) => node = child,
                None => return false,
            }
        }
        let Node::Map(entries) = node else {
            return false;
        };
        let before = entries.len();
        entries.retain(|(k, _)| k != last);
        entries.len() != before
    }

    /// The position of the value at `keys` in file order (the index of each key in its
    /// table), for reporting problems in the order they stand in the file.
    pub(crate) fn position(&self, keys: &[String]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut node = self;
        for key in keys {
            let Some(entries) = node.as_map() else {
                break;
            };
            match entries.iter().position(|(k, _)| k == key) {
                Some(i) => {
                    out.push(i);
                    node = &entries[i].1;
                }
                None => {
                    out.push(usize::MAX);
                    break;
                }
            }
        }
        out
    }

    /// Splits a table into the entries whose keys are in `keys` and the others.
    pub(crate) fn split(&self, keys: &[&str]) -> (Node, Node) {
        let entries = self.as_map().unwrap_or(&[]);
        let (a, b): (Vec<_>, Vec<_>) = entries
            .iter()
            .cloned()
            .partition(|(k, _)| keys.contains(&k.as_str()));
        (Node::Map(a), Node::Map(b))
    }

    /// The value, shown briefly in messages.
    pub fn show(&self) -> String {
        match self {
            Node::Null => "nothing".into(),
            Node::Bool(b) => b.to_string(),
            Node::Int(i) => i.to_string(),
            Node::Float(f) => f.to_string(),
            Node::Str(s) => format!("{s:?}"),
            Node::List(_) => "a list".into(),
            Node::Map(_) => "a table".into(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a configuration value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let key = match key {
                Node::Str(s) => s,
                Node::Int(i) => i.to_string(),
                Node::Bool(b) => b.to_string(),
                other => {
                    return Err(de::Error::custom(format!(
                        "a key must be a string, got {}",
                        other.kind()
                    )));
                }
            };
            let value: Node = map.next_value()?;
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}
