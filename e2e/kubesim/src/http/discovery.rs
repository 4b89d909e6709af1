//! Discovery (legacy and aggregated v2), `/version`, health endpoints and OpenAPI.

use std::sync::Arc;

use http::{Response, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult};
use crate::http::context::Inner;
use crate::http::response::{Body, full, json_response};
use crate::state::registry::{Registry, ResourceType, api_version};

/// `/healthz`, `/livez`, `/readyz` (and their `/…/<check>` forms), `/version`.
pub fn health(inner: &Inner, path: &str) -> Response<Body> {
    if path.starts_with("/version") {
        let v = &inner.cfg.kubernetes_version;
        let parts: Vec<&str> = v.trim_start_matches('v').split('.').collect();
        let body = json!({
            "major": parts.first().copied().unwrap_or("1"),
            "minor": parts.get(1).copied().unwrap_or("33"),
            "gitVersion": v,
            "gitCommit": "kubesim",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": "linux/amd64",
        });
        return json_response(200, serde_json::to_vec(&body).unwrap_or_default());
    }
    if path.starts_with("/readyz") && inner.faults.not_ready() {
        return Response::builder()
            .status(500)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(full(
                "[-]kubesim-ready failed: readiness switched off by a test\nreadyz check failed\n",
            ))
            .expect("valid response");
    }
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full("ok"))
        .expect("valid response")
}

fn resource_entry(t: &ResourceType) -> Value {
    json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": t.verbs(),
        "shortNames": t.short_names,
        "categories": t.categories,
        "storageVersionHash": hash(&format!("{}/{}/{}", t.group, t.storage_version, t.kind)),
    })
}

/// Core ServiceAccounts, which serve the `token` subresource (TokenRequest).
fn is_service_accounts(t: &ResourceType) -> bool {
    t.group.is_empty() && t.plural == "serviceaccounts"
}

fn hash(s: &str) -> String {
    let h = Sha256::digest(s.as_bytes());
    h[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn resource_list(reg: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for t in reg.resources(group, version) {
        resources.push(resource_entry(&t));
        if t.status_subresource {
            resources.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
        }
        if t.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
        if t.group.is_empty() && t.plural == "pods" {
            resources.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
        }
        if is_service_accounts(&t) {
            resources.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true, "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version(group, version), "resources": resources})
}

fn group_entry(reg: &Registry, g: &str) -> Value {
    let versions: Vec<Value> = reg
        .versions(g)
        .iter()
        .map(|v| json!({"groupVersion": api_version(g, v), "version": v}))
        .collect();
    json!({"name": g, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or(json!({}))})
}

fn aggregated(reg: &Registry, core: bool) -> Value {
    let groups: Vec<String> = if core {
        vec![String::new()]
    } else {
        reg.groups().into_iter().filter(|g| !g.is_empty()).collect()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = reg
                .versions(g)
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .resources(g, v)
                        .iter()
                        .map(|t| {
                            let rk = json!({"group": t.group, "version": t.version, "kind": t.kind});
                            let mut r = json!({
                                "resource": t.plural,
                                "responseKind": rk,
                                "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": t.singular,
                                "verbs": t.verbs(),
                                "shortNames": t.short_names,
                                "categories": t.categories,
                            });
                            let mut subs = Vec::new();
                            if t.status_subresource {
                                subs.push(json!({"subresource": "status", "responseKind": rk, "verbs": ["get", "patch", "update"]}));
                            }
                            if t.scale.is_some() {
                                subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}));
                            }
                            if t.group.is_empty() && t.plural == "pods" {
                                subs.push(json!({"subresource": "binding", "responseKind": {"group": "", "version": "v1", "kind": "Binding"}, "verbs": ["create"]}));
                            }
                            if is_service_accounts(t) {
                                subs.push(json!({"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}, "verbs": ["create"]}));
                            }
                            if !subs.is_empty() {
                                r["subresources"] = json!(subs);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

fn typed_json(ct: &str, v: &Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, ct)
        .body(full(serde_json::to_vec(v).unwrap_or_default()))
        .expect("valid response")
}

/// Discovery and OpenAPI GETs.
pub fn serve(inner: &Arc<Inner>, path: &str, accept: &str) -> ApiResult<Response<Body>> {
    let reg = inner.state.lock().registry.clone();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let wants_aggregated = accept.contains("as=APIGroupDiscoveryList") && accept.contains("v=v2");
    let ok = |v: Value| {
        Ok(json_response(
            200,
            serde_json::to_vec(&v).unwrap_or_default(),
        ))
    };
    match segs.as_slice() {
        ["api"] if wants_aggregated => Ok(typed_json(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            &aggregated(&reg, true),
        )),
        ["apis"] if wants_aggregated => Ok(typed_json(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            &aggregated(&reg, false),
        )),
        ["api"] => ok(
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": inner.cfg.bind.to_string()}]}),
        ),
        ["api", v] if !reg.resources("", v).is_empty() => ok(resource_list(&reg, "", v)),
        ["apis"] => {
            let groups: Vec<Value> = reg
                .groups()
                .iter()
                .filter(|g| !g.is_empty())
                .map(|g| group_entry(&reg, g))
                .collect();
            ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        ["apis", g] if !reg.versions(g).is_empty() => {
            let mut e = group_entry(&reg, g);
            e["kind"] = json!("APIGroup");
            e["apiVersion"] = json!("v1");
            ok(e)
        }
        ["apis", g, v] if !reg.resources(g, v).is_empty() => ok(resource_list(&reg, g, v)),
        ["openapi", "v2"] => {
            if accept.contains("protobuf") && !accept.contains("json") {
                return Err(ApiError::not_acceptable(accept));
            }
            ok(crate::http::openapi::v2(
                &reg,
                &inner.cfg.kubernetes_version,
            ))
        }
        ["openapi", "v3"] => ok(crate::http::openapi::v3_root(&reg)),
        ["openapi", "v3", rest @ ..] => {
            let gv = rest.join("/");
            crate::http::openapi::v3_doc(&reg, &gv, &inner.cfg.kubernetes_version)
                .map(|d| typed_json("application/json", &d))
                .ok_or_else(|| ApiError::no_route(path))
        }
        _ => Err(ApiError::no_route(path)),
    }
}
