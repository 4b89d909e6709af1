//! OpenAPI v2 and v3 documents: CRD schemas in full (for `kubectl explain` and
//! validation), and for every resource the PATCH operations that tell kubectl the
//! server validates fields itself (`fieldValidation`).

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::state::registry::{Registry, ResourceType, api_version};

fn schema_name(t: &ResourceType) -> String {
    if t.group.is_empty() {
        format!("io.k8s.api.core.{}.{}", t.version, t.kind)
    } else if t.crd.is_none() {
        let short = t.group.split('.').next().unwrap_or(&t.group);
        format!("io.k8s.api.{short}.{}.{}", t.version, t.kind)
    } else {
        let rev: Vec<&str> = t.group.split('.').rev().collect();
        format!("{}.{}.{}", rev.join("."), t.version, t.kind)
    }
}

fn gvk(t: &ResourceType) -> Value {
    json!({"group": t.group, "version": t.version, "kind": t.kind})
}

fn crd_schema(t: &ResourceType) -> Option<Value> {
    let mut s = t.schema.as_deref()?.clone();
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        props.insert(
            "metadata".into(),
            json!({"type": "object", "description": "Standard object's metadata."}),
        );
    }
    s["x-kubernetes-group-version-kind"] = json!([gvk(t)]);
    Some(s)
}

fn paths_for(t: &ResourceType) -> Map<String, Value> {
    let prefix = if t.group.is_empty() {
        format!("/api/{}", t.version)
    } else {
        format!("/apis/{}/{}", t.group, t.version)
    };
    let item = if t.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
    } else {
        format!("{prefix}/{}/{{name}}", t.plural)
    };
    let q = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    let op = |action: &str| {
        json!({
            "operationId": format!("{action}{}", t.kind),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(t),
            "parameters": [q("dryRun"), q("fieldManager"), q("fieldValidation")],
            "responses": {"200": {"description": "OK"}},
        })
    };
    let mut m = Map::new();
    m.insert(
        item,
        json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
    );
    m
}

/// The v3 discovery root: one entry per group-version.
pub fn v3_root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for g in reg.groups() {
        for v in reg.versions(&g) {
            let key = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            let h = hash(reg, &g, &v);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={h}")}),
            );
        }
    }
    json!({"paths": paths})
}

fn hash(reg: &Registry, g: &str, v: &str) -> String {
    let mut h = Sha256::new();
    for t in reg.resources(g, v) {
        h.update(t.plural.as_bytes());
        if let Some(s) = &t.schema {
            h.update(s.to_string().as_bytes());
        }
    }
    let d = h.finalize();
    d[..16].iter().map(|b| format!("{b:02X}")).collect()
}

/// The v3 document of one group-version (`api/v1`, `apis/g/v`).
pub fn v3_doc(reg: &Registry, gv: &str, version: &str) -> Option<Value> {
    let parts: Vec<&str> = gv.split('/').collect();
    let (g, v) = match parts.as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let types = reg.resources(&g, &v);
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for t in &types {
        paths.extend(paths_for(t));
        if let Some(s) = crd_schema(t) {
            schemas.insert(schema_name(t), s);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The v2 (swagger) document: CRD definitions.
pub fn v2(reg: &Registry, version: &str) -> Value {
    let mut defs = Map::new();
    for t in reg.all() {
        if let Some(s) = crd_schema(t) {
            defs.insert(schema_name(t), s);
        }
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": version}, "paths": {}, "definitions": defs, "x-api-version": api_version("", "v1")})
}
