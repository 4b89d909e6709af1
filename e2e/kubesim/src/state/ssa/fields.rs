//! Field sets as server-side apply counts them: paths into an object (list items by
//! merge key or value), the shape that says how lists merge, and set operations on
//! objects (value at a path, removal, merging an applied configuration).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::state::patch::{ListKind, builtin_list_kind, same_key};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pe {
    /// `f:<name>` a map field.
    Field(String),
    /// `k:<json>` a list item by key.
    Key(String),
    /// `v:<json>` a set member.
    Val(String),
}

impl Pe {
    /// The step as a FieldsV1 key (`f:`, `k:` or `v:` and the rest).
    pub fn encode(&self) -> String {
        match self {
            Pe::Field(s) => format!("f:{s}"),
            Pe::Key(s) => format!("k:{s}"),
            Pe::Val(s) => format!("v:{s}"),
        }
    }

    /// A FieldsV1 key as a step; None for an unknown prefix.
    pub fn decode(s: &str) -> Option<Pe> {
        let (p, rest) = s.split_at_checked(2)?;
        match p {
            "f:" => Some(Pe::Field(rest.into())),
            "k:" => Some(Pe::Key(rest.into())),
            "v:" => Some(Pe::Val(rest.into())),
            _ => None,
        }
    }
}

/// A path into an object.
pub type Path = Vec<Pe>;

/// A set of owned paths (leaves and list-item nodes).
pub type FieldSet = BTreeSet<Path>;

/// How list fields of an object merge: built-in merge keys, or a CRD's structural schema.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'a> {
    /// Built-in kinds: merge keys by field name.
    Builtin,
    /// A CRD schema node.
    Schema(&'a Value),
    /// Unknown (preserve-unknown-fields): lists are atomic.
    Opaque,
}

impl<'a> Shape<'a> {
    fn child(self, field: &str) -> Shape<'a> {
        match self {
            Shape::Schema(s) => {
                if let Some(p) = s.get("properties").and_then(|p| p.get(field)) {
                    Shape::Schema(p)
                } else if let Some(p) = s.get("additionalProperties").filter(|p| p.is_object()) {
                    Shape::Schema(p)
                } else {
                    Shape::Opaque
                }
            }
            other => other,
        }
    }

    fn items(self) -> Shape<'a> {
        match self {
            Shape::Schema(s) => s.get("items").map(Shape::Schema).unwrap_or(Shape::Opaque),
            other => other,
        }
    }

    fn list_kind(self, field: &str, items: &[Value]) -> ListKind {
        match self {
            Shape::Builtin => builtin_list_kind(field, items),
            Shape::Opaque => ListKind::Atomic,
            Shape::Schema(s) => match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => ListKind::Map(
                    s.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                Some("set") => ListKind::Set,
                _ => ListKind::Atomic,
            },
        }
    }
}

fn key_of(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    for k in sorted {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m).to_string()
}

/// Which part of an object a field set covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything but status (main resource of a kind with a status subresource).
    MainNoStatus,
    /// Everything (kinds without a status subresource).
    All,
    /// Only status (the `/status` subresource).
    StatusOnly,
}

/// The fields an object sets, as SSA counts them (server-managed metadata excluded).
pub fn fieldset_of(obj: &Value, shape: Shape, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Value::Object(m) = obj else { return out };
    for (k, v) in m {
        let included = match k.as_str() {
            "apiVersion" | "kind" => false,
            "status" => scope != Scope::MainNoStatus,
            _ => scope != Scope::StatusOnly,
        };
        if !included {
            continue;
        }
        if k == "metadata" {
            if let Value::Object(md) = v {
                for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(fv) = md.get(f) {
                        walk_field(
                            f,
                            fv,
                            Shape::Builtin,
                            vec![Pe::Field("metadata".into())],
                            &mut out,
                        );
                    }
                }
            }
            continue;
        }
        walk_field(k, v, shape.child(k), Vec::new(), &mut out);
    }
    out
}

fn walk_field(name: &str, v: &Value, shape: Shape, prefix: Path, out: &mut FieldSet) {
    let mut p = prefix;
    p.push(Pe::Field(name.to_string()));
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                walk_field(k, c, shape.child(k), p.clone(), out);
            }
        }
        Value::Array(items) => match shape.list_kind(name, items) {
            ListKind::Atomic => {
                out.insert(p);
            }
            ListKind::Set => {
                if items.is_empty() {
                    out.insert(p.clone());
                }
                for i in items {
                    let mut ip = p.clone();
                    ip.push(Pe::Val(i.to_string()));
                    out.insert(ip);
                }
            }
            ListKind::Map(keys) => {
                if items.is_empty() {
                    out.insert(p.clone());
                }
                let item_shape = shape.items();
                for i in items {
                    let mut ip = p.clone();
                    ip.push(Pe::Key(key_of(i, &keys)));
                    out.insert(ip.clone());
                    if let Value::Object(im) = i {
                        for (k, c) in im {
                            walk_field(k, c, item_shape.child(k), ip.clone(), out);
                        }
                    }
                }
            }
        },
        _ => {
            out.insert(p);
        }
    }
}

/// Equality as typed values compare: numbers by value (`2` equals `2.0`).
pub fn values_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => json_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The value at a path, if present.
pub fn value_at<'v>(obj: &'v Value, path: &[Pe]) -> Option<&'v Value> {
    let mut cur = obj;
    for pe in path {
        cur = match pe {
            Pe::Field(f) => cur.get(f)?,
            Pe::Key(k) => {
                let key: Value = serde_json::from_str(k).ok()?;
                let keys: Vec<String> = key.as_object()?.keys().cloned().collect();
                cur.as_array()?.iter().find(|i| same_key(i, &key, &keys))?
            }
            Pe::Val(v) => {
                let val: Value = serde_json::from_str(v).ok()?;
                cur.as_array()?.iter().find(|i| **i == val)?
            }
        };
    }
    Some(cur)
}

/// Removes the value at a path (no-op when absent).
pub fn remove_path(obj: &mut Value, path: &[Pe]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for pe in parent_path {
        let next = match pe {
            Pe::Field(f) => cur.get_mut(f),
            Pe::Key(k) => {
                let Ok(key) = serde_json::from_str::<Value>(k) else {
                    return;
                };
                let keys: Vec<String> = key
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|i| same_key(i, &key, &keys)))
            }
            Pe::Val(_) => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Pe::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Pe::Key(k) => {
            if let (Ok(key), Some(a)) = (serde_json::from_str::<Value>(k), cur.as_array_mut()) {
                let keys: Vec<String> = key
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                a.retain(|i| !same_key(i, &key, &keys));
            }
        }
        Pe::Val(v) => {
            if let (Ok(val), Some(a)) = (serde_json::from_str::<Value>(v), cur.as_array_mut()) {
                a.retain(|i| *i != val);
            }
        }
    }
}

/// Merges an applied configuration into an object (maps recursively, keyed lists by key,
/// sets by union, everything else replaced).
pub fn merge_applied(target: &mut Value, applied: &Value, shape: Shape) {
    let (Value::Object(t), Value::Object(a)) = (&mut *target, applied) else {
        *target = applied.clone();
        return;
    };
    for (k, av) in a {
        let child = if k == "metadata" {
            Shape::Builtin
        } else {
            shape.child(k)
        };
        match (t.get_mut(k), av) {
            (Some(tv @ Value::Object(_)), Value::Object(_)) => merge_applied(tv, av, child),
            (Some(Value::Array(tl)), Value::Array(al)) => match child.list_kind(k, al) {
                ListKind::Map(keys) => {
                    let item_shape = child.items();
                    for ai in al {
                        match tl.iter_mut().find(|ti| same_key(ti, ai, &keys)) {
                            Some(ti) => merge_applied(ti, ai, item_shape),
                            None => tl.push(ai.clone()),
                        }
                    }
                }
                ListKind::Set => {
                    for ai in al {
                        if !tl.contains(ai) {
                            tl.push(ai.clone());
                        }
                    }
                }
                ListKind::Atomic => *tl = al.clone(),
            },
            _ => {
                t.insert(k.clone(), av.clone());
            }
        }
    }
}

/// A human path for conflict messages: `.spec.containers[name="a"].image`.
pub fn path_string(p: &[Pe]) -> String {
    let mut s = String::new();
    for pe in p {
        match pe {
            Pe::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Pe::Key(k) => {
                let kv: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let inner = kv
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                s.push_str(&format!("[{inner}]"));
            }
            Pe::Val(v) => s.push_str(&format!("[{v}]")),
        }
    }
    s
}
