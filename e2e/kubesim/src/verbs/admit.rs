//! What every write checks before it changes anything: the body's type and namespace
//! against the URL, the target namespace, CRD schemas, dry runs, field ownership scope.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::crd;
use crate::state::registry::{ResourceType, api_version};
use crate::state::ssa::ApplyRequest;
use crate::state::ssa::fields::{Scope, Shape};
use crate::state::stored::meta_str;
use crate::verbs::request::Req;

/// How SSA merges lists of this type: its CRD schema, or the built-in merge keys.
pub fn shape(rt: &ResourceType) -> Shape<'_> {
    match &rt.schema {
        Some(s) => Shape::Schema(s),
        None => Shape::Builtin,
    }
}

/// Which part of an object a write to subresource `sub` owns.
pub fn scope(rt: &ResourceType, sub: &str) -> Scope {
    if sub == "status" {
        Scope::StatusOnly
    } else if rt.status_subresource {
        Scope::MainNoStatus
    } else {
        Scope::All
    }
}

/// The apiVersion objects of this type are stored at.
pub fn storage_api_version(rt: &ResourceType) -> String {
    api_version(&rt.group, &rt.storage_version)
}

/// Checks apiVersion and kind of a body against the URL.
pub fn check_type(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    }
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in the request body; expected kind {}",
            rt.kind
        )));
    }
    if !av.is_empty() && av != rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({}) for {}",
            rt.kind, rt.plural
        )));
    }
    Ok(())
}

/// Puts the URL's namespace in the body (or rejects a different one); drops it for
/// cluster-scoped types.
pub fn check_namespace(rt: &ResourceType, obj: &mut Value, ns: &str) -> ApiResult<()> {
    let body_ns = meta_str(obj, "namespace").to_string();
    if rt.namespaced {
        if body_ns.is_empty() {
            obj["metadata"]["namespace"] = json!(ns);
        } else if body_ns != ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("namespace");
    }
    Ok(())
}

/// New objects may go only into a namespace that exists and is not terminating: the
/// NamespaceLifecycle admission's 403 (`<resource> "<name>" is forbidden: …`, with
/// details and a `NamespaceTerminating` cause on `metadata.namespace`).
pub fn namespace_active(st: &State, rt: &ResourceType, name: &str, ns: &str) -> ApiResult<()> {
    let nsobj = st
        .store
        .get(&crate::state::registry::gr("", "namespaces"), "", ns)
        .ok_or_else(|| ApiError::not_found("", "namespaces", ns))?;
    if nsobj.value.pointer("/metadata/deletionTimestamp").is_some() {
        let mut e = ApiError::forbidden_because(
            &rt.group,
            &rt.plural,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        e.causes.push(crate::error::Cause {
            reason: "NamespaceTerminating".into(),
            message: format!("namespace {ns} is being terminated"),
            field: "metadata.namespace".into(),
        });
        return Err(e);
    }
    Ok(())
}

/// Schema pruning, defaulting, field validation and validation for CRD objects.
pub fn admit_schema(rt: &ResourceType, obj: &mut Value, r: &mut Req) -> ApiResult<()> {
    let warnings = checked_by_schema(rt, obj, r.q("fieldValidation"))?;
    r.warnings.extend(warnings);
    Ok(())
}

/// What [`admit_schema`] does to a CRD object, with `fieldValidation` given: the
/// object pruned and defaulted in place, or its validation error; the warnings of
/// unknown fields. kube-apiserver does this before validating admission webhooks see
/// the object.
pub fn checked_by_schema(
    rt: &ResourceType,
    obj: &mut Value,
    field_validation: Option<&str>,
) -> ApiResult<Vec<String>> {
    let Some(schema) = &rt.schema else {
        return Ok(Vec::new());
    };
    let unknown = crd::prune_and_default(obj, schema);
    let warnings = unknown_fields(&unknown, field_validation)?;
    let causes = crd::validate(obj, schema);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &rt.kind,
            &rt.group,
            meta_str(obj, "name"),
            causes,
        ));
    }
    Ok(warnings)
}

/// What `fieldValidation` makes of the unknown fields a write's body had: a 400 with
/// `Strict`, nothing with `Ignore`, else (`Warn`, the default) a warning each.
fn unknown_fields(unknown: &[String], field_validation: Option<&str>) -> ApiResult<Vec<String>> {
    let each = || unknown.iter().map(|u| format!("unknown field \"{u}\""));
    match field_validation.unwrap_or("Warn") {
        _ if unknown.is_empty() => Ok(Vec::new()),
        "Strict" => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            each().collect::<Vec<_>>().join(", ")
        ))),
        "Ignore" => Ok(Vec::new()),
        _ => Ok(each().collect()),
    }
}

/// Schema pruning, defaulting and validation for a write of a CRD object's `/status`,
/// as kube-apiserver's status strategy does: the status is pruned and defaulted (the
/// rest of the object is the stored one, which a status write cannot change: it is
/// left as it is, so a CRD's new default does not change the spec and its generation),
/// unknown status fields go by `fieldValidation`, and a status the schema refuses is a
/// 422 (a status field of the wrong type, say). Only the status is judged: the spec is
/// not refused again (kube-apiserver's validation ratcheting leaves unchanged fields
/// alone).
pub fn admit_status_schema(rt: &ResourceType, obj: &mut Value, r: &mut Req) -> ApiResult<()> {
    let Some(schema) = &rt.schema else {
        return Ok(());
    };
    if let Some(status) = obj.get("status").cloned() {
        let mut only = json!({ "status": status });
        let unknown = crd::prune_and_default(&mut only, schema);
        let warnings = unknown_fields(&unknown, r.q("fieldValidation"))?;
        r.warnings.extend(warnings);
        match only.get("status") {
            Some(s) => obj["status"] = s.clone(),
            None => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    let causes: Vec<_> = crd::validate(obj, schema)
        .into_iter()
        .filter(|c| c.field == "status" || c.field.starts_with("status."))
        .collect();
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        &rt.kind,
        &rt.group,
        meta_str(obj, "name"),
        causes,
    ))
}

/// `dryRun=All`.
pub fn dry_run(r: &Req) -> bool {
    r.q("dryRun") == Some("All")
}

/// The field-ownership facts of an ordinary (non-apply) write.
pub fn update_req<'a>(
    rt: &'a ResourceType,
    manager: &'a str,
    now: &'a str,
    av: &'a str,
    sub: &'a str,
) -> ApplyRequest<'a> {
    ApplyRequest {
        manager,
        api_version: av,
        force: false,
        now,
        subresource: if sub == "status" { "status" } else { "" },
        scope: scope(rt, sub),
    }
}
