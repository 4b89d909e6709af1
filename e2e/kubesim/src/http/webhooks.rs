//! Validating admission webhooks (`admissionregistration.k8s.io/v1`
//! ValidatingWebhookConfiguration), the subset kube-apiserver's semantics need here:
//! rules (apiGroups, apiVersions, resources with `*`, operations, scope),
//! `objectSelector` (for DELETE, the old object's labels), `clientConfig.url` with
//! `caBundle` (TLS verified with it; `clientConfig.service` is not supported: kubesim
//! runs no Services, so a webhook naming one fails as unreachable), `failurePolicy`,
//! `timeoutSeconds`, and the AdmissionReview v1 request and response.
//! `namespaceSelector` is supported too. A PATCH is admitted as kube-apiserver's patch
//! handler does: an UPDATE of the stored object to the patched one (a CREATE when an
//! apply creates); the `status` subresource is matched as `<resource>/status` (rules
//! `*/*`, `<resource>/*`, `*/status`). `matchConditions` are evaluated
//! (`state/match_conditions.rs`). Not supported: `matchPolicy: Equivalent`, the `scale`
//! subresource and deletecollection (not sent to webhooks).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::User;
use crate::state::cluster::State;
use crate::state::match_conditions;
use crate::state::meta::new_uid;
use crate::state::registry::{GroupResource, ResourceType};
use crate::state::selectors::LabelSelector;

/// The request a webhook is asked about.
pub struct Request<'a> {
    /// CREATE, UPDATE or DELETE.
    pub operation: &'a str,
    /// The resource type.
    pub rt: &'a ResourceType,
    /// Namespace ("" for cluster-scoped).
    pub namespace: &'a str,
    /// Object name.
    pub name: &'a str,
    /// The subresource ("" or "status").
    pub subresource: &'a str,
    /// Who sent it.
    pub user: &'a User,
    /// The new object (CREATE, UPDATE).
    pub object: Option<Value>,
    /// The stored object (UPDATE, DELETE).
    pub old_object: Option<Value>,
    /// A dry run.
    pub dry_run: bool,
}

/// One webhook of a configuration.
struct Hook {
    name: String,
    hook: Value,
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn any_matches(list: &[&str], x: &str) -> bool {
    list.iter().any(|l| *l == "*" || *l == x)
}

/// Whether a rule's resource (`pods`, `pods/status`, `*`, `*/*`, `pods/*`, `*/status`)
/// covers `resource` with `subresource` ("" for none), as kube-apiserver's matcher
/// (`admission/plugin/webhook/predicates/rules`): `*` alone is every resource but none
/// of their subresources; a `/*` suffix is the resource and all its subresources.
fn resource_matches(rule: &str, resource: &str, subresource: &str) -> bool {
    let (res, sub) = rule.split_once('/').unwrap_or((rule, ""));
    (res == "*" || res == resource) && (sub == "*" || sub == subresource)
}

/// True when one of `rules` covers the operation on this type and subresource ("" for
/// the object itself).
pub fn rules_match(
    rules: Option<&Value>,
    operation: &str,
    rt: &ResourceType,
    subresource: &str,
) -> bool {
    rules
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|rule| {
            let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
            let scope_ok = match scope {
                "Namespaced" => rt.namespaced,
                "Cluster" => !rt.namespaced,
                _ => true,
            };
            scope_ok
                && any_matches(&strs(rule.get("operations")), operation)
                && any_matches(&strs(rule.get("apiGroups")), &rt.group)
                && any_matches(&strs(rule.get("apiVersions")), &rt.version)
                && strs(rule.get("resources"))
                    .iter()
                    .any(|r| resource_matches(r, &rt.plural, subresource))
        })
}

/// Whether any webhook's rules cover the operation (its selectors are not looked at):
/// a PATCH is previewed only then.
pub fn any_rule_matches(st: &State, operations: &[&str], rt: &ResourceType, sub: &str) -> bool {
    let gr = GroupResource {
        group: "admissionregistration.k8s.io".into(),
        resource: "validatingwebhookconfigurations".into(),
    };
    st.store.list(&gr, None).iter().any(|cfg| {
        cfg.value
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|h| {
                operations
                    .iter()
                    .any(|op| rules_match(h.get("rules"), op, rt, sub))
            })
    })
}

fn matching_hooks(st: &State, req: &Request<'_>) -> Vec<Hook> {
    let gr = GroupResource {
        group: "admissionregistration.k8s.io".into(),
        resource: "validatingwebhookconfigurations".into(),
    };
    let labels_of = req.object.as_ref().or(req.old_object.as_ref());
    let labels = labels_of.and_then(|o| o.pointer("/metadata/labels"));
    let mut out = Vec::new();
    for cfg in st.store.list(&gr, None) {
        for hook in cfg
            .value
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !rules_match(hook.get("rules"), req.operation, req.rt, req.subresource) {
                continue;
            }
            // an unparsable selector matches nothing, as kube-apiserver's webhook
            // matcher errors out for it
            let selected = LabelSelector::from_json(hook.get("objectSelector"))
                .is_ok_and(|s| s.matches(labels));
            if !selected || !namespace_selected(st, hook, req, labels) {
                continue;
            }
            out.push(Hook {
                name: hook
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                hook: hook.clone(),
            });
        }
    }
    out
}

/// `namespaceSelector` as kube-apiserver applies it: to the labels of a namespaced
/// object's Namespace, to a Namespace's own labels, and not at all to other
/// cluster-scoped objects.
fn namespace_selected(
    st: &State,
    hook: &Value,
    req: &Request<'_>,
    own_labels: Option<&Value>,
) -> bool {
    let Ok(sel) = LabelSelector::from_json(hook.get("namespaceSelector")) else {
        return false;
    };
    if sel.is_empty() {
        return true;
    }
    if req.rt.group.is_empty() && req.rt.plural == "namespaces" {
        return sel.matches(own_labels);
    }
    if !req.rt.namespaced {
        return true;
    }
    let gr = GroupResource {
        group: String::new(),
        resource: "namespaces".into(),
    };
    let ns = st.store.get(&gr, "", req.namespace);
    sel.matches(
        ns.as_ref()
            .and_then(|n| n.value.pointer("/metadata/labels")),
    )
}

fn review(req: &Request<'_>) -> Value {
    let rt = req.rt;
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let gvr = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": new_uid(),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": req.name,
            "namespace": req.namespace,
            "subResource": (!req.subresource.is_empty()).then_some(req.subresource),
            "operation": req.operation,
            "userInfo": req.user.info(),
            "object": req.object,
            "oldObject": req.old_object,
            "dryRun": req.dry_run,
        }
    })
}

/// Calls every matching webhook in turn; the first denial (or failure under
/// `failurePolicy: Fail`) is the request's error. Otherwise the warnings the webhooks
/// that allowed it gave, which kube-apiserver answers with as `Warning` headers.
pub async fn admit(state: &parking_lot::Mutex<State>, req: Request<'_>) -> ApiResult<Vec<String>> {
    let hooks = matching_hooks(&state.lock(), &req);
    let mut warnings = Vec::new();
    if hooks.is_empty() {
        return Ok(warnings);
    }
    let body = review(&req);
    // matchConditions first, for every webhook: false skips it; an error skips it
    // under failurePolicy Ignore and fails the request, before any call, otherwise
    let mut called = Vec::new();
    for h in hooks {
        match match_conditions::matches(&h.hook, &body["request"]) {
            Ok(true) => called.push(h),
            Ok(false) => {}
            Err(e) if ignores_failures(&h.hook) => {
                tracing::warn!(webhook = %h.name, error = %e, "skipping admission webhook");
            }
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "Internal error occurred: admission webhook \"{}\": {e}",
                    h.name
                )));
            }
        }
    }
    for h in called {
        let timeout = h
            .hook
            .get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10);
        let answer = tokio::time::timeout(Duration::from_secs(timeout), call(&h.hook, &body))
            .await
            .unwrap_or_else(|_| Err(format!("context deadline exceeded after {timeout}s")));
        match answer {
            Ok(resp) => {
                // kube-apiserver records a webhook's warnings whether it allows or not
                let said = resp.pointer("/response/warnings").and_then(Value::as_array);
                warnings.extend(
                    said.into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(String::from),
                );
                let allowed = resp.pointer("/response/allowed").and_then(Value::as_bool);
                if allowed == Some(true) {
                    continue;
                }
                let message = resp
                    .pointer("/response/status/message")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let code = resp
                    .pointer("/response/status/code")
                    .and_then(Value::as_u64)
                    .and_then(|c| u16::try_from(c).ok())
                    .filter(|c| (400..600).contains(c))
                    .unwrap_or(400);
                tracing::debug!(webhook = %h.name, code, message, "admission webhook denied");
                let mut e = ApiError::bad_request(if message.is_empty() {
                    format!(
                        "admission webhook \"{}\" denied the request without explanation",
                        h.name
                    )
                } else {
                    format!(
                        "admission webhook \"{}\" denied the request: {message}",
                        h.name
                    )
                });
                e.code = code;
                e.reason = reason_for(code);
                e.warnings = warnings;
                return Err(e);
            }
            Err(why) => {
                let ignore = ignores_failures(&h.hook);
                tracing::warn!(webhook = %h.name, %why, ignore, "calling admission webhook failed");
                if !ignore {
                    let mut e = ApiError::internal(format!(
                        "Internal error occurred: failed calling webhook \"{}\": {why}",
                        h.name
                    ));
                    e.warnings = warnings;
                    return Err(e);
                }
            }
        }
    }
    Ok(warnings)
}

fn ignores_failures(hook: &Value) -> bool {
    hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore")
}

fn reason_for(code: u16) -> &'static str {
    match code {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        500.. => "InternalError",
        _ => "BadRequest",
    }
}

/// POSTs the review to the webhook's URL over TLS verified with its `caBundle`.
async fn call(hook: &Value, body: &Value) -> Result<Value, String> {
    let url = hook
        .pointer("/clientConfig/url")
        .and_then(Value::as_str)
        .ok_or("clientConfig.url is not set (kubesim does not support clientConfig.service)")?;
    let uri: http::Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!("webhook URL {url} must be https"));
    }
    let host = uri.host().ok_or("webhook URL has no host")?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    if let Some(b64) = hook
        .pointer("/clientConfig/caBundle")
        .and_then(Value::as_str)
    {
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("caBundle is not base64: {e}"))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("caBundle is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("caBundle certificate: {e}"))?;
        }
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
    let name = ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = http::Request::post(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("the webhook answered {status}"));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("the response is not an AdmissionReview: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::registry::Registry;

    #[test]
    fn rules_match_groups_versions_resources_operations_and_scope() {
        let reg = Registry::builtin();
        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let ns = reg.get("", "v1", "namespaces").unwrap();
        let rule = |g: &str, v: &str, r: &str, op: &str, scope: Option<&str>| {
            let mut x =
                json!({"apiGroups": [g], "apiVersions": [v], "resources": [r], "operations": [op]});
            if let Some(s) = scope {
                x["scope"] = json!(s);
            }
            json!([x])
        };
        let cases = [
            (rule("*", "*", "*", "*", None), "DELETE", &deploy, true),
            (
                rule("apps", "v1", "deployments", "DELETE", None),
                "DELETE",
                &deploy,
                true,
            ),
            (
                rule("apps", "v1", "deployments", "DELETE", None),
                "CREATE",
                &deploy,
                false,
            ),
            (
                rule("", "v1", "deployments", "DELETE", None),
                "DELETE",
                &deploy,
                false,
            ),
            (
                rule("apps", "v2", "deployments", "*", None),
                "DELETE",
                &deploy,
                false,
            ),
            (
                rule("apps", "v1", "statefulsets", "*", None),
                "DELETE",
                &deploy,
                false,
            ),
            (
                rule("*", "*", "*", "*", Some("Namespaced")),
                "DELETE",
                &deploy,
                true,
            ),
            (
                rule("*", "*", "*", "*", Some("Namespaced")),
                "DELETE",
                &ns,
                false,
            ),
            (
                rule("*", "*", "*", "*", Some("Cluster")),
                "DELETE",
                &ns,
                true,
            ),
            (
                rule("*", "*", "*", "*", Some("Cluster")),
                "DELETE",
                &deploy,
                false,
            ),
            (json!([]), "DELETE", &deploy, false),
            (Value::Null, "DELETE", &deploy, false),
            (rule("*", "*", "*/*", "*", None), "DELETE", &deploy, true),
            // `<resource>/*` is the resource itself too (kube's matcher)
            (
                rule("*", "*", "deployments/*", "*", None),
                "DELETE",
                &deploy,
                true,
            ),
        ];
        for (rules, op, rt, want) in cases {
            assert_eq!(
                rules_match(Some(&rules), op, rt, ""),
                want,
                "{rules} {op} {}",
                rt.plural
            );
        }
        // subresources: `*` is no subresource, `*/*`, `<resource>/*`, `*/<sub>` and
        // `<resource>/<sub>` are
        let r = |res: &str| json!([{"apiGroups": ["*"], "apiVersions": ["*"], "resources": [res], "operations": ["UPDATE"]}]);
        for (res, want) in [
            ("*", false),
            ("deployments", false),
            ("*/*", true),
            ("deployments/*", true),
            ("*/status", true),
            ("deployments/status", true),
            ("deployments/scale", false),
            ("statefulsets/status", false),
        ] {
            assert_eq!(
                rules_match(Some(&r(res)), "UPDATE", &deploy, "status"),
                want,
                "{res}"
            );
        }
    }
}
