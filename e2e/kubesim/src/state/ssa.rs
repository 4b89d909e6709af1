//! Server-side apply: ownership conflicts, and ownership transfer on ordinary updates,
//! over field sets ([`fields`]) kept in `managedFields` ([`managed`]).

use serde_json::Value;

use fields::{
    FieldSet, Path, Pe, Scope, Shape, fieldset_of, merge_applied, path_string, remove_path,
    value_at, values_equal,
};
use managed::{Managed, read_managed, write_managed};

pub mod fields;
pub mod managed;

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
    let others_own = |p: &[Pe]| {
        managers
            .iter()
            .filter(|m| !mine(m))
            .any(|m| m.fields.iter().any(|q| q.starts_with(p)))
    };
    for p in removed {
        if !others_own(p) {
            remove_path(&mut out, p);
            // as structured-merge-diff does: a map or list the removal left empty is
            // null, which the API server drops (the field goes, not `[]` or `{}`);
            // a built-in kind's Go struct comes back as `{}`, so there only lists and
            // the metadata's maps go
            for depth in (1..p.len()).rev() {
                let ancestor = &p[..depth];
                let empty = match value_at(&out, ancestor) {
                    Some(Value::Object(m)) => {
                        m.is_empty()
                            && (!matches!(shape, Shape::Builtin)
                                || (depth == 2 && ancestor[0] == Pe::Field("metadata".into())))
                    }
                    Some(Value::Array(a)) => a.is_empty(),
                    _ => false,
                };
                if !empty || others_own(ancestor) || ancestor == [Pe::Field("metadata".into())] {
                    break;
                }
                remove_path(&mut out, ancestor);
            }
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

/// An apply onto an object that exists. As kube-apiserver's field manager does, an
/// apply that changes nothing in the object keeps the stored object as it is: the
/// manager's entry keeps its place and its `time` (structured-merge-diff's `Apply`
/// returns no object, so `managedFieldsUpdater` stamps no time); only the field sets
/// the apply changed are recorded. When they did not change either, the result is the
/// stored object itself, which the update then does not write.
pub fn apply_to_existing(
    current: &Value,
    applied: &Value,
    shape: Shape,
    req: &ApplyRequest,
) -> Result<Value, Vec<(String, String)>> {
    let out = apply(current, applied, shape, req)?;
    if without_managed(&out) != without_managed(current) {
        return Ok(out);
    }
    let same = |a: &Managed, b: &Managed| {
        a.manager == b.manager && a.operation == b.operation && a.subresource == b.subresource
    };
    let now = read_managed(&out);
    let before = read_managed(current);
    // the stored entries in their order, with the sets the apply left them; then the
    // applier's new entry (no time: nothing changed)
    let mut managers: Vec<Managed> = before
        .iter()
        .filter_map(|old| {
            let new = now.iter().find(|n| same(n, old))?;
            Some(Managed {
                fields: new.fields.clone(),
                api_version: new.api_version.clone(),
                ..old.clone()
            })
        })
        .collect();
    for new in now.iter().filter(|n| !before.iter().any(|o| same(n, o))) {
        managers.push(Managed {
            time: String::new(),
            ..new.clone()
        });
    }
    let mut kept = current.clone();
    write_managed(&mut kept, &managers);
    Ok(kept)
}

/// An object without `metadata.managedFields`.
fn without_managed(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(md) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("managedFields");
    }
    o
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
    // the main resource's write starts from the managed fields it carries (the stored
    // ones, or those the client gave: see `merge_for_update`); a subresource's from the
    // stored ones
    let mut managers = read_managed(if req.subresource.is_empty() { new } else { old });
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
    use managed::{from_fields_v1, to_fields_v1};
    use serde_json::json;

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

    /// A list or map whose last applied items the manager stopped setting goes, as a
    /// field, rather than staying as `[]` or `{}`; one that keeps another manager's
    /// items, or that another manager set empty, stays.
    #[test]
    fn a_list_emptied_by_apply_goes() {
        let a1 = json!({"metadata": {"labels": {"x": "1"}}, "spec": {"replicas": 1,
            "containers": [{"name": "a", "image": "a"}]}});
        let o1 = apply(&json!({}), &a1, Shape::Builtin, &req("m", false)).unwrap();
        let o2 = apply(
            &o1,
            &json!({"spec": {"replicas": 1}}),
            Shape::Builtin,
            &req("m", false),
        )
        .unwrap();
        assert_eq!(o2["spec"], json!({"replicas": 1}));
        assert!(o2["metadata"].get("labels").is_none(), "{o2}");
        // everything under spec gone: a built-in kind's spec stays as `{}` (a Go
        // struct), a custom resource's goes
        let o3 = apply(&o1, &json!({}), Shape::Builtin, &req("m", false)).unwrap();
        assert_eq!(o3["spec"], json!({}), "{o3}");
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"items": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}}});
        let cr = json!({"spec": {"items": [{"name": "a"}]}});
        let c1 = apply(&json!({}), &cr, Shape::Schema(&schema), &req("m", false)).unwrap();
        let c2 = apply(&c1, &json!({}), Shape::Schema(&schema), &req("m", false)).unwrap();
        assert!(c2.get("spec").is_none(), "{c2}");
        let c3 = apply(
            &c1,
            &json!({"spec": {"items": []}}),
            Shape::Schema(&schema),
            &req("m", false),
        )
        .unwrap();
        assert_eq!(
            c3["spec"]["items"],
            json!([]),
            "applied empty, kept empty: {c3}"
        );
        // another manager's item keeps the list
        let b = json!({"spec": {"containers": [{"name": "b", "image": "b"}]}});
        let both = apply(&o1, &b, Shape::Builtin, &req("other", false)).unwrap();
        let o4 = apply(
            &both,
            &json!({"spec": {"replicas": 1}}),
            Shape::Builtin,
            &req("m", false),
        )
        .unwrap();
        assert_eq!(
            o4["spec"]["containers"],
            json!([{"name": "b", "image": "b"}])
        );
        // another manager applied the list empty: it stays
        let empty = apply(
            &o1,
            &json!({"spec": {"containers": []}}),
            Shape::Builtin,
            &req("other", false),
        )
        .unwrap();
        let o5 = apply(
            &empty,
            &json!({"spec": {"replicas": 1}}),
            Shape::Builtin,
            &req("m", false),
        )
        .unwrap();
        assert_eq!(o5["spec"]["containers"], json!([]), "{o5}");
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
