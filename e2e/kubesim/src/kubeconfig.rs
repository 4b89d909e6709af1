//! kubeconfig files for kubesim servers (one cluster, or several as contexts).

use base64::Engine;
use serde_json::{Value, json};

/// One cluster's credentials for a kubeconfig.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Context, cluster and user name.
    pub name: String,
    /// Server URL.
    pub server: String,
    /// CA PEM (None: plain HTTP).
    pub ca_pem: Option<String>,
    /// Bearer token.
    pub token: String,
}

/// A kubeconfig with one context per entry; the first is current.
pub fn multi(entries: &[Entry]) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let clusters: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut c = json!({"server": e.server});
            if let Some(ca) = &e.ca_pem {
                c["certificate-authority-data"] = json!(b64(ca));
            }
            json!({"name": e.name, "cluster": c})
        })
        .collect();
    let users: Vec<Value> = entries
        .iter()
        .map(|e| json!({"name": e.name, "user": {"token": e.token}}))
        .collect();
    let contexts: Vec<Value> = entries
        .iter()
        .map(|e| json!({"name": e.name, "context": {"cluster": e.name, "user": e.name, "namespace": "default"}}))
        .collect();
    let cfg = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": entries.first().map(|e| e.name.clone()).unwrap_or_default(),
    });
    serde_saphyr::to_string(&cfg)
        .unwrap_or_else(|_| serde_json::to_string_pretty(&cfg).unwrap_or_default())
}

/// A kubeconfig for one server.
pub fn single(name: &str, server: &str, ca_pem: Option<&str>, token: &str) -> String {
    multi(&[Entry {
        name: name.to_string(),
        server: server.to_string(),
        ca_pem: ca_pem.map(String::from),
        token: token.to_string(),
    }])
}
