//! Server-side apply: field sets, `managedFields` (FieldsV1), ownership conflicts,
//! and ownership transfer on ordinary updates.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::patch::{ListKind, builtin_list_kind, same_key};

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
    fn encode(&self) -> String {
        match self {
            Pe::Field(s) => format!("f:{s}"),
            Pe::Key(s) => format!("k:{s}"),
            Pe::Val(s) => format!("v:{s}"),
        }
    }

    fn decode(s: &str) -> Option<Pe> {
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

/// FieldsV1 JSON of a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for pe in path {
            node = node
                .entry(pe.encode())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
        node.insert(".".into(), json!({}));
    }
    fn tidy(m: &mut Map<String, Value>) {
        for (_, v) in m.iter_mut() {
            if let Value::Object(c) = v {
                tidy(c);
                if c.len() == 1 && c.contains_key(".") {
                    c.clear();
                }
            }
        }
    }
    tidy(&mut root);
    Value::Object(root)
}

/// Parses FieldsV1 JSON into a set (unknown keys ignored).
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(m: &Map<String, Value>, prefix: &Path, out: &mut FieldSet) {
        for (k, sub) in m {
            let Some(pe) = Pe::decode(k) else { continue };
            let mut p = prefix.clone();
            p.push(pe);
            if let Value::Object(sm) = sub {
                if sm.is_empty() || sm.contains_key(".") {
                    out.insert(p.clone());
                }
                walk(sm, &p, out);
            }
        }
    }
    let mut out = FieldSet::new();
    if let Value::Object(m) = v {
        walk(m, &Vec::new(), &mut out);
    }
    out
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Managed {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the manager used.
    pub api_version: String,
    /// Time of the last change.
    pub time: String,
    /// `status` or empty.
    pub subresource: String,
    /// Owned fields.
    pub fields: FieldSet,
}

/// Reads `metadata.managedFields`.
pub fn read_managed(obj: &Value) -> Vec<Managed> {
    let s = |e: &Value, k: &str| {
        e.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Managed {
                    manager: s(e, "manager"),
                    operation: s(e, "operation"),
                    api_version: s(e, "apiVersion"),
                    time: s(e, "time"),
                    subresource: s(e, "subresource"),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `metadata.managedFields` (entries with no fields are dropped).
pub fn write_managed(obj: &mut Value, entries: &[Managed]) {
    let arr: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut m = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                m["subresource"] = json!(e.subresource);
            }
            m
        })
        .collect();
    if arr.is_empty() {
        if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("managedFields");
        }
    } else if let Some(md) = obj
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        md.insert("managedFields".into(), Value::Array(arr));
    }
}

/// Inputs of one server-side apply.
pub struct ApplyRequest<'a> {
    /// The field manager applying.
    pub manager: &'a str,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// `force=true`.
    pub force: bool,
    /// Now, RFC 3339.
    pub now: &'a str,
    /// `status` for the status subresource, else empty.
    pub subresource: &'a str,
    /// Which part of the object this apply may touch.
    pub scope: Scope,
}

/// Applies `applied` onto `current` (an empty object for a create). Returns the new object
/// (managedFields updated) or the conflicting (manager, field) pairs.
pub fn apply(
    current: &Value,
    applied: &Value,
    shape: Shape,
    req: &ApplyRequest,
) -> Result<Value, Vec<(String, String)>> {
    let new_set = fieldset_of(applied, shape, req.scope);
    let mut managers = read_managed(current);
    let mine = |m: &Managed| {
        m.manager == req.manager && m.operation == "Apply" && m.subresource == req.subresource
    };
    let old_mine: FieldSet = managers
        .iter()
        .find(|m| mine(m))
        .map(|m| m.fields.clone())
        .unwrap_or_default();

    let mut conflicts = Vec::new();
    for m in managers.iter_mut().filter(|m| !mine(m)) {
        let overlap: Vec<Path> = m
            .fields
            .intersection(&new_set)
            .filter(|p| !values_equal(value_at(current, p), value_at(applied, p)))
            .filter(|p| !matches!(p.last(), Some(Pe::Key(_))))
            .cloned()
            .collect();
        for p in overlap {
            if req.force {
                m.fields.remove(&p);
            } else {
                conflicts.push((m.manager.clone(), path_string(&p)));
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }

    let mut out = current.clone();
    // Ancestors first: a list item goes as a whole (removing its key fields first would
    // leave an unaddressable husk behind); its fields are then already gone.
    let mut removed: Vec<&Path> = old_mine.difference(&new_set).collect();
    removed.sort_by_key(|p| p.len());
    for p in removed {
        let shared = managers
            .iter()
            .filter(|m| !mine(m))
            .any(|m| m.fields.iter().any(|q| q.starts_with(p)));
        if !shared {
            remove_path(&mut out, p);
        }
    }
    let mut body = applied.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        match req.scope {
            Scope::MainNoStatus => {
                m.remove("status");
            }
            Scope::StatusOnly => m.retain(|k, _| k == "status"),
            Scope::All => {}
        }
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "finalizers" | "ownerReferences"
                )
            });
        }
    }
    merge_applied(&mut out, &body, shape);

    managers.retain(|m| !mine(m));
    managers.push(Managed {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time: req.now.to_string(),
        subresource: req.subresource.to_string(),
        fields: new_set,
    });
    write_managed(&mut out, &managers);
    Ok(out)
}

/// Records an ordinary update by `manager`: it takes ownership of what it changed.
pub fn record_update(old: &Value, new: &mut Value, shape: Shape, req: &ApplyRequest) {
    let old_set = fieldset_of(old, shape, req.scope);
    let new_set = fieldset_of(new, shape, req.scope);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            !old_set.contains(*p)
                || (!matches!(p.last(), Some(Pe::Key(_)))
                    && !values_equal(value_at(old, p), value_at(new, p)))
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let mut managers = read_managed(old);
    if changed.is_empty() && removed.is_empty() && !managers.is_empty() {
        write_managed(new, &managers);
        return;
    }
    let is_mine = |m: &Managed| {
        m.manager == req.manager && m.operation == "Update" && m.subresource == req.subresource
    };
    for m in managers.iter_mut() {
        if is_mine(m) {
            continue;
        }
        m.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let idx = match managers.iter().position(is_mine) {
        Some(i) => i,
        None => {
            managers.push(Managed {
                manager: req.manager.to_string(),
                operation: "Update".into(),
                api_version: req.api_version.to_string(),
                time: String::new(),
                subresource: req.subresource.to_string(),
                fields: FieldSet::new(),
            });
            managers.len() - 1
        }
    };
    let m = &mut managers[idx];
    m.fields.extend(changed);
    m.fields.retain(|p| !removed.contains(p));
    m.time = req.now.to_string();
    m.api_version = req.api_version.to_string();
    write_managed(new, &managers);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            manager,
            api_version: "apps/v1",
            force,
            now: "2026-01-01T00:00:00Z",
            subresource: "",
            scope: Scope::MainNoStatus,
        }
    }

    #[test]
    fn fields_v1_round_trips() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let set = fieldset_of(&obj, Shape::Builtin, Scope::MainNoStatus);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["."],
            json!({})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn apply_conflicts_then_force_transfers_ownership() {
        let a1 = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}});
        let obj = apply(
            &json!({"metadata": {"name": "d"}}),
            &a1,
            Shape::Builtin,
            &req("alice", false),
        )
        .unwrap();
        let a2 = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 3}});
        let err = apply(&obj, &a2, Shape::Builtin, &req("bob", false)).unwrap_err();
        assert_eq!(
            err,
            vec![("alice".to_string(), ".spec.replicas".to_string())]
        );
        // same value: shared ownership, no conflict
        assert!(apply(&obj, &a1, Shape::Builtin, &req("bob", false)).is_ok());
        let forced = apply(&obj, &a2, Shape::Builtin, &req("bob", true)).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let m = read_managed(&forced);
        assert_eq!(m.len(), 1, "alice lost her only field: {m:?}");
        assert_eq!(m[0].manager, "bob");
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_setting() {
        let a1 = json!({"metadata": {"labels": {"x": "1", "y": "2"}}, "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}});
        let o1 = apply(&json!({}), &a1, Shape::Builtin, &req("m", false)).unwrap();
        let a2 = json!({"metadata": {"labels": {"x": "1"}}, "spec": {"containers": [{"name": "a", "image": "a"}]}});
        let o2 = apply(&o1, &a2, Shape::Builtin, &req("m", false)).unwrap();
        assert_eq!(o2["metadata"]["labels"], json!({"x": "1"}));
        assert_eq!(
            o2["spec"]["containers"],
            json!([{"name": "a", "image": "a"}])
        );
    }

    #[test]
    fn update_takes_ownership_from_appliers() {
        let a1 = json!({"spec": {"replicas": 1, "paused": false}});
        let o1 = apply(&json!({}), &a1, Shape::Builtin, &req("alice", false)).unwrap();
        let mut o2 = o1.clone();
        o2["spec"]["replicas"] = json!(5);
        record_update(&o1, &mut o2, Shape::Builtin, &req("kubectl-edit", false));
        let m = read_managed(&o2);
        let alice = m.iter().find(|e| e.manager == "alice").unwrap();
        let edit = m.iter().find(|e| e.manager == "kubectl-edit").unwrap();
        assert!(!alice.fields.contains(&vec![
            Pe::Field("spec".into()),
            Pe::Field("replicas".into())
        ]));
        assert!(edit.fields.contains(&vec![
            Pe::Field("spec".into()),
            Pe::Field("replicas".into())
        ]));
        assert_eq!(edit.operation, "Update");
    }

    #[test]
    fn schema_list_map_keys_are_honoured() {
        let schema = json!({"properties": {"status": {"properties": {"conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}}}}});
        let cur = json!({"status": {"conditions": [{"type": "A", "status": "True"}]}});
        let applied = json!({"status": {"conditions": [{"type": "B", "status": "False"}]}});
        let r = ApplyRequest {
            scope: Scope::StatusOnly,
            subresource: "status",
            ..req("ctl", false)
        };
        let out = apply(&cur, &applied, Shape::Schema(&schema), &r).unwrap();
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
    }
}
