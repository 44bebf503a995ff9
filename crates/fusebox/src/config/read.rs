//! Reading a part of a file's tree into a layer's [`Section`](fusebox_classify::section::Section)
//! type, reporting every problem at once.
//!
//! serde stops at the first problem; a file should be told all of its problems. So the tree
//! is read by a deserializer of its own ([`NodeDeserializer`]) that
//!
//! - checks every table against the keys its type declares (the `fields` serde hands to
//!   `deserialize_struct`: the type's own list, not a copy) and reports each unknown key
//!   with the nearest known one, reading on without it;
//! - says what a value of the wrong type should have been in the words of the rule
//!   (`must be a whole number within 0..=100, got 150`, `must be one of "clear", "keep"`);
//! - marks each problem with the path of its key.
//!
//! A value of the wrong type still stops the read, so [`load`] reads again without that key
//! until the read succeeds: one read per bad value, every problem reported.

use super::check::unknown_key_among;
use super::node::Node;
use fusebox_classify::{ConfigError, Problem};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use std::cell::RefCell;
use std::fmt;

/// A problem met while reading: its rule and the keys leading to it (from the read's root).
#[derive(Debug)]
pub(crate) struct ReadError {
    keys: Option<Vec<String>>,
    rule: String,
}

impl ReadError {
    fn at(mut self, keys: &[String]) -> Self {
        if self.keys.is_none() {
            self.keys = Some(keys.to_vec());
        }
        self
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rule)
    }
}

impl std::error::Error for ReadError {}

/// What serde's own visitors expect, in the words of a rule.
fn expected(exp: &dyn de::Expected) -> String {
    let words = exp.to_string();
    match words.as_str() {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128"
        | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a borrowed string" | "a string" | "a character" => "a string".into(),
        _ => words,
    }
}

fn shown(u: &de::Unexpected<'_>) -> String {
    fusebox_classify::section::unexpected(*u)
}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ReadError {
            keys: None,
            rule: msg.to_string(),
        }
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format!("must be {}, got {}", expected(exp), shown(&unexp)))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format!("must be {}, got {}", expected(exp), shown(&unexp)))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::custom(one_of(expected, &format!("{variant:?}")))
    }

    fn missing_field(field: &'static str) -> Self {
        Self::custom(format!("`{field}` is required"))
    }
}

fn one_of(options: &[&str], got: &str) -> String {
    let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
    format!("must be one of {}, got {got}", quoted.join(", "))
}

/// Deserializes a [`Node`], recording unknown keys in `unknown` and naming the key of every
/// other problem.
pub(crate) struct NodeDeserializer<'a> {
    node: &'a Node,
    keys: Vec<String>,
    unknown: &'a RefCell<Vec<(Vec<String>, String)>>,
    /// Keys of the root table that the caller reads itself: not unknown, and offered as
    /// suggestions for a misspelt key.
    extra: &'a [&'a str],
}

impl<'a> NodeDeserializer<'a> {
    fn child(&self, node: &'a Node, key: &str) -> NodeDeserializer<'a> {
        let mut keys = self.keys.clone();
        keys.push(key.to_owned());
        NodeDeserializer {
            node,
            keys,
            unknown: self.unknown,
            extra: &[],
        }
    }

    fn wrong(&self, rule: &str) -> ReadError {
        <ReadError as de::Error>::custom(format!("{rule}, got {}", self.node.show()))
    }

    fn int<V: Visitor<'a>>(self, min: i128, max: i128, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Int(i) if (min..=max).contains(i) => {
                if *i < 0 {
                    visitor.visit_i64(*i as i64)
                } else {
                    visitor.visit_u64(*i as u64)
                }
            }
            Node::Int(i) if min == 0 => Err(<ReadError as de::Error>::custom(format!(
                "must be a whole number within 0..={max}, got {i}"
            ))),
            Node::Int(i) => Err(<ReadError as de::Error>::custom(format!(
                "must be a whole number within {min}..={max}, got {i}"
            ))),
            _ => Err(self.wrong("must be a whole number")),
        }
    }
}

/// Reads `node` as a `T`, every problem at once: each unknown key, and each value of the
/// wrong type (read again without it). `extra` are keys of the root table the caller reads
/// itself. The problems' paths are `path` and the keys below it.
pub(crate) fn load<T: DeserializeOwned + Default>(
    node: &Node,
    path: &str,
    extra: &[&str],
) -> (T, Vec<Problem>) {
    let node_before = node;
    let mut node = node.clone();
    let unknown = RefCell::new(Vec::new());
    let mut problems: Vec<(Vec<String>, String)> = Vec::new();
    let value = loop {
        unknown.borrow_mut().clear();
        let de = NodeDeserializer {
            node: &node,
            keys: Vec::new(),
            unknown: &unknown,
            extra,
        };
        match T::deserialize(de) {
            Ok(value) => break value,
            Err(e) => {
                let keys = e.keys.unwrap_or_default();
                problems.push((keys.clone(), e.rule));
                if keys.is_empty() || !node.remove(&keys) {
                    break T::default();
                }
            }
        }
    };
    problems.extend(unknown.take());
    // In the order they stand in the file.
    let original = node_before;
    problems.sort_by_key(|(keys, _)| original.position(keys));
    let mut out: Vec<Problem> = Vec::new();
    for (keys, rule) in problems {
        let mut full = path.to_owned();
        for k in keys {
            full = super::check::join(&full, &k);
        }
        let p = ConfigError::new(full, rule);
        let p = p.problems()[0].clone();
        if !out.contains(&p) {
            out.push(p);
        }
    }
    (value, out)
}

macro_rules! forward_to_any {
    ($($m:ident),*) => {
        $(fn $m<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
            self.deserialize_any(visitor)
        })*
    };
}

impl<'a> de::Deserializer<'a> for NodeDeserializer<'a> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Null => visitor.visit_unit(),
            Node::Bool(b) => visitor.visit_bool(*b),
            Node::Int(i) => match (i64::try_from(*i), u64::try_from(*i)) {
                (Ok(n), _) => visitor.visit_i64(n),
                (_, Ok(n)) => visitor.visit_u64(n),
                _ => visitor.visit_i128(*i),
            },
            Node::Float(f) => visitor.visit_f64(*f),
            Node::Str(s) => visitor.visit_str(s),
            Node::List(items) => visitor.visit_seq(Seq {
                de: &self,
                items: items.iter(),
            }),
            Node::Map(entries) => visitor.visit_map(Map {
                de: &self,
                entries: entries.iter(),
                value: None,
                fields: None,
            }),
        }
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Bool(b) => visitor.visit_bool(*b),
            _ => Err(self.wrong("must be true or false")),
        }
    }

    fn deserialize_u8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(0, u8::MAX.into(), visitor)
    }

    fn deserialize_u16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(0, u16::MAX.into(), visitor)
    }

    fn deserialize_u32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(0, u32::MAX.into(), visitor)
    }

    fn deserialize_u64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(0, u64::MAX.into(), visitor)
    }

    fn deserialize_i8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(i8::MIN.into(), i8::MAX.into(), visitor)
    }

    fn deserialize_i16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(i16::MIN.into(), i16::MAX.into(), visitor)
    }

    fn deserialize_i32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(i32::MIN.into(), i32::MAX.into(), visitor)
    }

    fn deserialize_i64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.int(i64::MIN.into(), i64::MAX.into(), visitor)
    }

    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Float(f) => visitor.visit_f64(*f),
            Node::Int(i) => visitor.visit_f64(*i as f64),
            _ => Err(self.wrong("must be a number")),
        }
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Map(_) => self.deserialize_any(visitor),
            _ => Err(self.wrong("must be a table")),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        let Node::Map(entries) = self.node else {
            return Err(self.wrong("must be a table"));
        };
        let known: Vec<&str> = fields
            .iter()
            .copied()
            .chain(self.extra.iter().copied())
            .collect();
        for (key, _) in entries {
            if !known.contains(&key.as_str()) {
                let mut keys = self.keys.clone();
                keys.push(key.clone());
                self.unknown
                    .borrow_mut()
                    .push((keys, unknown_key_among(key, &known)));
            }
        }
        visitor.visit_map(Map {
            de: &self,
            entries: entries.iter(),
            value: None,
            fields: Some(fields),
        })
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        match self.node {
            Node::Str(s) if variants.contains(&s.as_str()) => {
                visitor.visit_enum(s.as_str().into_deserializer())
            }
            other => Err(<ReadError as de::Error>::custom(one_of(
                variants,
                &other.show(),
            ))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_unit()
    }

    forward_to_any!(
        deserialize_i128,
        deserialize_u128,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_seq,
        deserialize_identifier
    );

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        self.deserialize_any(visitor)
    }
}

struct Seq<'a, 'b> {
    de: &'b NodeDeserializer<'a>,
    items: std::slice::Iter<'a, Node>,
}

impl<'a> de::SeqAccess<'a> for Seq<'a, '_> {
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ReadError> {
        match self.items.next() {
            // An element's problem is the list's: reported at the list's key.
            Some(item) => seed
                .deserialize(NodeDeserializer {
                    node: item,
                    keys: self.de.keys.clone(),
                    unknown: self.de.unknown,
                    extra: &[],
                })
                .map(Some),
            None => Ok(None),
        }
    }
}

struct Map<'a, 'b> {
    de: &'b NodeDeserializer<'a>,
    entries: std::slice::Iter<'a, (String, Node)>,
    value: Option<(&'a str, &'a Node)>,
    /// For a struct: the keys it reads (others were reported as unknown, and are skipped).
    fields: Option<&'static [&'static str]>,
}

impl<'a> de::MapAccess<'a> for Map<'a, '_> {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ReadError> {
        for (key, value) in self.entries.by_ref() {
            if self.fields.is_some_and(|f| !f.contains(&key.as_str())) {
                continue;
            }
            self.value = Some((key, value));
            let de: de::value::StrDeserializer<'_, ReadError> = key.as_str().into_deserializer();
            return seed.deserialize(de).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, ReadError> {
        let Some((key, value)) = self.value.take() else {
            return Err(<ReadError as de::Error>::custom("a value without its key"));
        };
        let child = self.de.child(value, key);
        let keys = child.keys.clone();
        seed.deserialize(child).map_err(|e| e.at(&keys))
    }
}
