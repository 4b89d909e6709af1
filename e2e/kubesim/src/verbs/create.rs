//! POST: create, with generated names, server-set metadata and per-kind defaulting.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, required_field};
use crate::state::cluster::State;
use crate::state::meta::{name_suffix, new_uid, now_rfc3339, validate_metadata};
use crate::state::registry::ResourceType;
use crate::state::stored::meta_str;
use crate::state::{convert, kinds, ssa};
use crate::verbs::admit::{
    admit_schema, check_namespace, check_type, dry_run, namespace_active, shape,
    storage_api_version, update_req,
};
use crate::verbs::output::output;
use crate::verbs::request::Req;

/// POST: create.
pub fn create(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let mut obj = r.decode()?;
    check_type(rt, &obj)?;
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    check_namespace(rt, &mut obj, ns)?;
    let mut st = state.lock();
    create_locked(&mut st, rt, obj, r, None)
}

/// Creates `obj` (from POST, or from an apply of an object that does not exist yet:
/// `applied` keeps the managedFields the apply computed) under the state lock.
pub fn create_locked(
    st: &mut State,
    rt: &ResourceType,
    mut obj: Value,
    r: &mut Req,
    applied: Option<()>,
) -> ApiResult<(u16, Bytes)> {
    // a POST that carries a resourceVersion passes validation and admission, and is
    // refused where kube-apiserver's storage refuses it (not in a dry run, which does
    // not reach it; an apply that creates ignores it)
    let posted_rv = applied.is_none() && !meta_str(&obj, "resourceVersion").is_empty();
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let gen_name = meta_str(&obj, "generateName").to_string();
        if gen_name.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                "",
                vec![required_field("metadata.name")],
            ));
        }
        name = format!("{gen_name}{}", name_suffix());
        obj["metadata"]["name"] = json!(name);
    }
    let causes = validate_metadata(rt.name_rule, &obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&rt.kind, &rt.group, &name, causes));
    }
    let ns = meta_str(&obj, "namespace").to_string();
    if rt.namespaced {
        namespace_active(st, rt, &name, &ns)?;
    }
    let gr = rt.group_resource();
    if st.store.get(&gr, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
    }
    let now = now_rfc3339();
    {
        let md = obj["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        md.insert("uid".into(), json!(new_uid()));
        md.insert("creationTimestamp".into(), json!(now));
        md.remove("resourceVersion");
        md.remove("deletionTimestamp");
        md.remove("deletionGracePeriodSeconds");
        md.remove("selfLink");
        if applied.is_none() {
            md.remove("managedFields");
        }
        if rt.generation {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
    }
    obj["apiVersion"] = json!(storage_api_version(rt));
    if rt.status_subresource
        && rt.crd.is_some()
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    admit_schema(rt, &mut obj, r)?;
    kinds::on_create(st, rt, &mut obj)?;
    crate::state::rbac::no_escalation(&st.store, rt, &obj, None, &r.user)?;
    if applied.is_none() {
        let manager = r.manager();
        let av = rt.api_version();
        let req = update_req(rt, &manager, &now, &av, "");
        ssa::record_update(&json!({}), &mut obj, shape(rt), &req);
    }
    let obj = convert::to_storage(rt, obj);
    if dry_run(r) {
        kinds::on_removed(st, rt, &obj);
        return Ok((201, output(rt, &obj, r)));
    }
    if posted_rv {
        kinds::on_removed(st, rt, &obj);
        return Err(ApiError::resource_version_on_create());
    }
    let e = st.store.put(&gr, obj);
    Ok((201, output(rt, &e.obj.value, r)))
}
