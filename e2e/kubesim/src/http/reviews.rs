//! TokenReview and SelfSubjectReview (`authentication.k8s.io/v1`), SubjectAccessReview,
//! SelfSubjectAccessReview and SelfSubjectRulesReview (`authorization.k8s.io/v1`):
//! create-only, answered from the
//! server's own authentication ([`crate::http::api::token_user`]) and RBAC
//! ([`crate::http::auth::decide`]) and never stored, as in kube-apiserver.

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Attributes, User, decide};
use crate::http::context::Inner;
use crate::state::registry::ResourceType;
use crate::state::stored::str_list;
use crate::verbs::request::Req;

/// POST of a review: 201 with the request's spec and the answered status.
pub fn create(
    inner: &Inner,
    rt: &ResourceType,
    method: &Method,
    caller: &User,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(method.as_str(), &rt.plural));
    }
    let mut body = r.decode()?;
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the body of {} must be a {}, not {kind}",
            rt.plural, rt.kind
        )));
    }
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let status = match rt.plural.as_str() {
        "tokenreviews" => token_review(inner, &spec)?,
        "selfsubjectaccessreviews" => access_review(inner, caller, &spec)?,
        "selfsubjectreviews" => json!({"userInfo": caller.info()}),
        "selfsubjectrulesreviews" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            crate::http::auth::rules_review(&inner.state.lock().store, caller, ns)
        }
        _ => {
            let user = User {
                name: spec
                    .get("user")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                groups: str_list(spec.get("groups")),
                uid: spec
                    .get("uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                extra: spec
                    .get("extra")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), str_list(Some(v))))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            if user.name.is_empty() && user.groups.is_empty() {
                return Err(ApiError::bad_request(
                    "SubjectAccessReview spec.user or spec.groups is required: name who is asking",
                ));
            }
            access_review(inner, &user, &spec)?
        }
    };
    body["apiVersion"] = json!(format!("{}/{}", rt.group, rt.version));
    body["kind"] = json!(rt.kind);
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    body["status"] = status;
    Ok((
        201,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    ))
}

fn token_review(inner: &Inner, spec: &Value) -> ApiResult<Value> {
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "TokenReview spec.token is required: put the bearer token to check there",
        ));
    }
    Ok(match crate::http::api::token_user(inner, token) {
        Some(u) => json!({
            "authenticated": true,
            "user": u.info(),
            "audiences": [crate::http::tokens::API_AUDIENCE],
        }),
        None => json!({
            "authenticated": false,
            "user": {},
            "error": "invalid bearer token, token lookup failed (unknown, revoked or expired)",
        }),
    })
}

fn access_review(inner: &Inner, user: &User, spec: &Value) -> ApiResult<Value> {
    let (ra, nra) = (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    );
    let Some(at) = ra.or(nra) else {
        return Err(ApiError::bad_request(
            "spec.resourceAttributes or spec.nonResourceAttributes is required: say what is asked about",
        ));
    };
    let f = |k: &str| at.get(k).and_then(Value::as_str).unwrap_or("");
    let attrs = Attributes {
        verb: f("verb"),
        group: f("group"),
        resource: f("resource"),
        subresource: f("subresource"),
        namespace: f("namespace"),
        name: f("name"),
        path: if ra.is_some() { "" } else { f("path") },
    };
    let st = inner.state.lock();
    Ok(match decide(&st.store, user, &attrs) {
        Some(reason) => json!({"allowed": true, "denied": false, "reason": reason}),
        None => json!({"allowed": false, "denied": false}),
    })
}
