//! API errors rendered as `metav1.Status`, exactly as kube-apiserver words them.

use serde_json::{Value, json};

/// One field cause of a 422 `Invalid` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: String,
    /// What is wrong.
    pub message: String,
    /// The JSON path of the field, e.g. `metadata.name`.
    pub field: String,
}

/// An error answered to an API client as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `details` of the Status: name, group, kind (boxed: errors travel in every `Result`).
    pub details: Option<Box<Details>>,
    /// Field causes (422).
    pub causes: Vec<Cause>,
    /// Warnings recorded before the request failed (admission webhooks'), answered as
    /// `Warning` headers with the error.
    pub warnings: Vec<String>,
}

/// `Status.details`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    /// Object name.
    pub name: String,
    /// API group.
    pub group: String,
    /// Resource (plural) or kind.
    pub kind: String,
}

/// `Result` with [`ApiError`].
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
        }));
        self
    }

    /// `<resource>.<group> "<name>"` as kube-apiserver prints a qualified resource.
    fn qualified(group: &str, resource: &str) -> String {
        if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden for an RBAC denial, worded as kube-apiserver's authorization filter
    /// words it: the object's name when the request names one, `resource/subresource`,
    /// or the non-resource path.
    pub fn forbidden(user: &str, a: &crate::http::auth::Attributes) -> Self {
        let message = if !a.path.is_empty() {
            format!(
                "forbidden: User \"{user}\" cannot {} path \"{}\"",
                a.verb, a.path
            )
        } else {
            k8s_validation::impersonation::forbidden_message(
                user,
                a.verb,
                a.group,
                a.resource,
                a.subresource,
                a.namespace,
                a.name,
            )
        };
        Self::new(403, "Forbidden", message).with_details(a.group, a.resource, a.name)
    }

    /// 403 Forbidden for a reason of the server's own (kube's `NewForbidden`):
    /// `<resource>.<group> "<name>" is forbidden: <why>`.
    pub fn forbidden_because(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                Self::qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 403 Forbidden with a free message.
    pub fn forbidden_msg(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 404 NotFound for an object.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", Self::qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 404 for a path that serves nothing.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (path {path})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({method} {what})"
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (asked for {accept})"
            ),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                Self::qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// A create that carries a resourceVersion: kube-apiserver's storage refuses it with
    /// an error that is no API status, which the handler answers as 500 with no reason.
    pub fn resource_version_on_create() -> Self {
        Self::new(
            500,
            "",
            "resourceVersion should not be set on objects to be created",
        )
    }

    /// 409 Conflict: the write named a resourceVersion the object is no longer at
    /// (kube-apiserver's `OptimisticLockErrorMsg`).
    pub fn modified(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict (optimistic concurrency or precondition).
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                Self::qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict: a write's `metadata.uid` (a precondition) is not the stored
    /// object's; worded as kube-apiserver words the storage error it interprets.
    pub fn uid_precondition(
        rt: &crate::state::registry::ResourceType,
        ns: &str,
        name: &str,
        wanted: &str,
        actual: &str,
    ) -> Self {
        Self::conflict(
            &rt.group,
            &rt.plural,
            name,
            &format!(
                "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}",
                storage_key(rt, ns, name)
            ),
        )
    }

    /// 422 for a PUT without `metadata.resourceVersion` to a kind whose strategy does not
    /// allow unconditional updates (kube-apiserver's store names the resource, not the
    /// kind, and prints the version as a Go uint64).
    pub fn resource_version_required(
        rt: &crate::state::registry::ResourceType,
        name: &str,
    ) -> Self {
        Self::invalid(
            &rt.plural,
            &rt.group,
            name,
            vec![invalid_field(
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            )],
        )
    }

    /// 409 Conflict from server-side apply field ownership.
    pub fn apply_conflict(
        group: &str,
        resource: &str,
        name: &str,
        conflicts: &[(String, String)],
    ) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                conflicts
                    .iter()
                    .map(|(mgr, field)| format!("conflict with \"{mgr}\": {field}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        )
        .with_details(group, resource, name);
        e.causes = conflicts
            .iter()
            .map(|(mgr, field)| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with \"{mgr}\""),
                field: field.clone(),
            })
            .collect();
        e
    }

    /// 410 Gone / Expired for a too-old resourceVersion.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(ct: &str, allowed: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                if allowed.is_empty() {
                    ct.to_string()
                } else {
                    allowed.join(", ")
                }
            ),
        )
    }

    /// 422 Invalid with field causes.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        // apimachinery's aggregate: distinct messages, bracketed when more than one
        let mut msgs: Vec<String> = Vec::new();
        for c in &causes {
            let m = format!("{}: {}", c.field, c.message);
            if !msgs.contains(&m) {
                msgs.push(m);
            }
        }
        let msg = if msgs.len() > 1 {
            format!("[{}]", msgs.join(", "))
        } else {
            msgs.join("")
        };
        // `<Kind>.<group>`, as apimachinery prints the GroupKind
        let qualified = Self::qualified(group, kind);
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {msg}"),
        )
        .with_details(group, kind, name);
        e.causes = causes;
        e
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `metav1.Status` JSON object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), json!(d.name));
            }
            if !d.group.is_empty() {
                details.insert("group".into(), json!(d.group));
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), json!(d.kind));
            }
            if !self.causes.is_empty() {
                details.insert(
                    "causes".into(),
                    Value::Array(
                        self.causes
                            .iter()
                            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                            .collect(),
                    ),
                );
            }
            s["details"] = Value::Object(details);
        }
        s
    }
}

/// The etcd key kube-apiserver stores an object under (`/registry/<prefix>/...`), as
/// its storage errors quote it.
fn storage_key(rt: &crate::state::registry::ResourceType, ns: &str, name: &str) -> String {
    let prefix = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") => "services/specs".to_string(),
        ("", "endpoints") => "services/endpoints".to_string(),
        ("", "nodes") => "minions".to_string(),
        ("networking.k8s.io", "ingresses") => "ingress".to_string(),
        (_, plural) if rt.crd.is_some() => format!("{}/{plural}", rt.group),
        (_, plural) => plural.to_string(),
    };
    if rt.namespaced {
        format!("/registry/{prefix}/{ns}/{name}")
    } else {
        format!("/registry/{prefix}/{name}")
    }
}

/// A 422 cause: `FieldValueInvalid`.
pub fn invalid_field(field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: message.into(),
        field: field.into(),
    }
}

/// A 422 cause: `FieldValueForbidden` (`Forbidden: <detail>`).
pub fn forbidden_field(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {detail}"),
        field: field.into(),
    }
}

/// A 422 cause: `FieldValueNotSupported` (`Unsupported value: "<v>": supported values:
/// "<a>", "<b>"`).
pub fn not_supported_field(field: &str, value: &str, supported: &[&str]) -> Cause {
    let listed: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            listed.join(", ")
        ),
        field: field.into(),
    }
}

/// A 422 cause: `FieldValueDuplicate`.
pub fn duplicate_field(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {value:?}"),
        field: field.into(),
    }
}

/// A 422 cause: `FieldValueRequired`.
pub fn required_field(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}
