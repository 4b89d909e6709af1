//! Lists and gets by name across clusters: the request's parameters become a
//! [`Query`], the caller's hub RBAC a [`Scope`] (computed before the store is asked),
//! and the page a `<Kind>List` or a `Table` with the Cluster column before Name.

use std::sync::Arc;
use std::time::Instant;

use causeway_runtime::table::{Column, IncludeObject, columns, table};
use http::StatusCode;
use serde_json::{Value, json};

use crate::CLUSTER_ANNOTATION;
use crate::api::Shared;
use crate::api::auth::{Access, Caller};
use crate::api::route::Target;
use crate::api::status::{Reply, failure, json_ok, store_unavailable};
use crate::query::Query;
use crate::store::{Gvr, Page, StoreError, TypeInfo};

/// The Table column showing each row's member cluster.
pub(crate) fn cluster_column() -> Column {
    let path = format!(
        ".metadata.annotations.{}",
        CLUSTER_ANNOTATION.replace('.', "\\.")
    );
    let mut c = Column::new("Cluster", "string", &path, 0);
    c.description = "The member cluster the object is in.".into();
    c
}

/// `deployments.apps` / `pods`, as kube-apiserver names a resource in messages.
fn group_resource(gvr: &Gvr) -> String {
    if gvr.group.is_empty() {
        gvr.resource.clone()
    } else {
        format!("{}.{}", gvr.resource, gvr.group)
    }
}

/// The parameters a list, get or watch runs with: the path's namespace replaces any
/// `namespaces=`; a get drops `names=` and paging (its name is its own filter, taken
/// whole: [`Query::names`] splits on commas).
pub(crate) fn params_for(t: &Target, mut params: Vec<(String, String)>) -> Vec<(String, String)> {
    if let Some(ns) = &t.namespace {
        params.retain(|(k, _)| k != "namespaces");
        params.push(("namespaces".into(), ns.clone()));
    }
    if t.name.is_some() {
        params.retain(|(k, _)| k != "names" && k != "limit" && k != "continue");
    }
    params
}

/// Answers a list or get.
pub async fn objects(
    shared: &Arc<Shared>,
    caller: &Caller,
    t: &Target,
    params: Vec<(String, String)>,
    as_table: Option<IncludeObject>,
) -> Reply {
    let types = match shared.store.types().await {
        Ok(t) => t,
        Err(e) => return store_unavailable(&e),
    };
    let Some(ty) = types.into_iter().find(|ty| {
        ty.gvr.group == t.group && ty.gvr.version == t.version && ty.gvr.resource == t.resource
    }) else {
        return failure(
            StatusCode::NOT_FOUND,
            format!(
                "the server could not find the requested resource: {} is not indexed (the search server's --resource flags say what is)",
                group_resource(&Gvr {
                    group: t.group.clone(),
                    version: t.version.clone(),
                    resource: t.resource.clone(),
                })
            ),
        );
    };
    if t.namespace.is_some() && !ty.namespaced {
        return failure(
            StatusCode::NOT_FOUND,
            format!("{} is not namespaced", group_resource(&ty.gvr)),
        );
    }
    if params
        .iter()
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    {
        return crate::api::watch::objects(shared, caller, t, &ty, &params, as_table).await;
    }
    if let Err(reply) = versions(&params) {
        return reply;
    }
    let params = params_for(t, params);
    let resource = format!("{}/{}", ty.gvr.api_version(), ty.gvr.resource);
    let mut q = match Query::parse_for(&params, t.cluster.as_deref(), &resource) {
        Ok(q) => q,
        Err(e) => return failure(StatusCode::BAD_REQUEST, e.0),
    };
    match &t.name {
        // the path's name, whole (a comma in it is no list of names)
        Some(name) => q.names = vec![name.clone()],
        None => cap_page(&mut q, shared.max_page),
    }
    let access = Access {
        gvr: &ty.gvr,
        namespaced: ty.namespaced,
        verb: if t.name.is_some() { "get" } else { "list" },
        name: t.name.as_deref().unwrap_or(""),
        namespaces: &q.namespaces,
    };
    let scope = match shared.auth.scope(caller, &shared.store, &access).await {
        Ok(s) => s,
        Err(e) => return e.reply(),
    };
    // where the store is in every member before it is read: a watch from here may see
    // an event again, never miss one (K.73); later pages repeat the first page's. It
    // names only the clusters the caller may see.
    let cursor = match &q.snapshot {
        Some(c) => c.clone(),
        None => {
            let mut c = shared.positions.cursor(&ty.gvr);
            c.0.retain(|cluster, _| {
                scope
                    .as_ref()
                    .is_some_and(|s| s.clusters.as_ref().is_none_or(|cs| cs.contains(cluster)))
            });
            c.encode()
        }
    };
    q.snapshot = Some(cursor.clone());
    let page = match scope {
        None => Page::default(),
        Some(scope) => {
            let started = Instant::now();
            let r = shared.store.search(&ty.gvr, &q, &scope).await;
            let took = started.elapsed();
            shared.metrics.observe_query(took);
            if took >= SLOW {
                tracing::warn!(resource = %group_resource(&ty.gvr), ?params, ?took, "slow search");
            }
            match r {
                Ok(p) => p,
                Err(StoreError::Query(e)) => return failure(StatusCode::BAD_REQUEST, e.0),
                Err(e) => return store_unavailable(&e),
            }
        }
    };
    match &t.name {
        Some(name) => got(&ty, name, page, as_table),
        None => listed(&ty, page, &cursor, as_table),
    }
}

/// A page of at most `max` objects (the server's page size, [`super::MAX_PAGE`]): a
/// list that pages (a `limit`) but asks for more gets `max` and a continue token for
/// the rest, as kube-apiserver answers when it pages, even with `withContinue=false`
/// (the rest would otherwise be silently missing). A list without a `limit` (or with
/// `limit=0`) gets everything, as from kube-apiserver: clients that do not page (a
/// kube-rs `Api::list` with default parameters, `kubectl get --raw`, scripts) do not
/// follow a continue token, and would silently see the first page only.
fn cap_page(q: &mut Query, max: u32) {
    if q.limit.is_some_and(|l| l > max) {
        q.limit = Some(max);
        q.with_continue = true;
    }
}

/// kube-apiserver's checks of a list's `resourceVersion` and `resourceVersionMatch`
/// (`ValidateListOptions`: 422; with `continue`, the storage's 400). The search server
/// keeps no earlier state of the members, so an `Exact` version is 410 (list without
/// it); `NotOlderThan` or none is served from the current state, which is never older.
#[allow(clippy::result_large_err)]
fn versions(params: &[(String, String)]) -> Result<(), Reply> {
    let get = |k: &str| {
        params
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let (rv, exact, continued) = (
        get("resourceVersion"),
        get("resourceVersionMatch"),
        get("continue"),
    );
    let invalid = |why: &str| {
        Err(failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: {why}"),
        ))
    };
    if let Some(m) = exact {
        if rv.is_none() {
            return invalid(
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            );
        }
        if continued.is_some() {
            return invalid(
                "Forbidden: resourceVersionMatch is forbidden when continue is provided",
            );
        }
        match m {
            "NotOlderThan" => {}
            "Exact" if rv == Some("0") => {
                return invalid(
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                );
            }
            "Exact" => {
                return Err(failure(
                    StatusCode::GONE,
                    "resourceVersionMatch=Exact: the search server keeps no earlier state of the members, only the current one: list without resourceVersionMatch (or with NotOlderThan)",
                ));
            }
            other => {
                return invalid(&format!(
                    "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                ));
            }
        }
    }
    if continued.is_some() && rv.is_some_and(|v| v != "0") {
        return Err(failure(
            StatusCode::BAD_REQUEST,
            "specifying resource version is not allowed when using continue",
        ));
    }
    Ok(())
}

/// A search taking this long is logged (with its parameters) as slow.
const SLOW: std::time::Duration = std::time::Duration::from_secs(1);

/// Every item with its apiVersion and kind (list items from some servers lack them).
fn typed(ty: &TypeInfo, mut items: Vec<Value>) -> Vec<Value> {
    for o in &mut items {
        set_type(ty, o);
    }
    items
}

/// Sets an object's apiVersion and kind (list items and watch events from some servers
/// lack them).
pub(crate) fn set_type(ty: &TypeInfo, o: &mut Value) {
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(ty.gvr.api_version()));
        m.insert("kind".into(), json!(ty.kind));
    }
}

fn list_metadata(page: &Page, cursor: &str) -> Value {
    let mut md = json!({});
    if !cursor.is_empty() {
        md["resourceVersion"] = json!(cursor);
    }
    if let Some(c) = &page.continue_token {
        md["continue"] = json!(c);
    }
    if let Some(n) = page.remaining {
        md["remainingItemCount"] = json!(n);
    }
    md
}

fn as_table(
    ty: &TypeInfo,
    items: &[Value],
    page: &Page,
    cursor: &str,
    include: IncludeObject,
) -> Value {
    let refs: Vec<&Value> = items.iter().collect();
    let mut t = table(
        &[cluster_column()],
        &columns::builtin(&ty.gvr.group, &ty.gvr.resource),
        &refs,
        "",
        page.continue_token.as_deref(),
        include,
    );
    t["metadata"] = list_metadata(page, cursor);
    t
}

fn listed(ty: &TypeInfo, mut page: Page, cursor: &str, table: Option<IncludeObject>) -> Reply {
    // moved, not copied: a list without a limit holds the whole type
    let items = typed(ty, std::mem::take(&mut page.items));
    if let Some(include) = table {
        return json_ok(&as_table(ty, &items, &page, cursor, include));
    }
    json_ok(&json!({
        "kind": format!("{}List", ty.kind),
        "apiVersion": ty.gvr.api_version(),
        "metadata": list_metadata(&page, cursor),
        "items": items,
    }))
}

fn got(ty: &TypeInfo, name: &str, page: Page, table: Option<IncludeObject>) -> Reply {
    let gr = group_resource(&ty.gvr);
    let items = typed(ty, page.items);
    if let (Some(include), false) = (table, items.is_empty()) {
        return json_ok(&as_table(ty, &items, &Page::default(), "", include));
    }
    match items.as_slice() {
        [] => failure(StatusCode::NOT_FOUND, format!("{gr} \"{name}\" not found")),
        [one] => json_ok(one),
        many => {
            let clusters: Vec<&str> = many
                .iter()
                .filter_map(|o| {
                    o.pointer("/metadata/annotations")
                        .and_then(|a| a.get(CLUSTER_ANNOTATION))
                })
                .filter_map(Value::as_str)
                .collect();
            failure(
                StatusCode::CONFLICT,
                format!(
                    "{gr} \"{name}\" exists in {} clusters ({}): get it from one at …/resources/clusters/<cluster>/…, or list with -o json for every copy",
                    many.len(),
                    clusters.join(", ")
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_decides_namespace_and_name() {
        let p = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let t = Target {
            namespace: Some("shop".into()),
            name: Some("web".into()),
            ..Target::default()
        };
        assert_eq!(
            params_for(
                &t,
                p(&[
                    ("namespaces", "other"),
                    ("limit", "5"),
                    ("labelSelector", "a=b")
                ])
            ),
            p(&[("labelSelector", "a=b"), ("namespaces", "shop")])
        );
        // a get's names= does not widen it; its name is set apart, whole
        let t = Target {
            name: Some("a,b".into()),
            ..Target::default()
        };
        assert_eq!(params_for(&t, p(&[("names", "c"), ("continue", "x")])), []);
        let all = Target::default();
        let given = p(&[("namespaces", "a,b"), ("limit", "5")]);
        assert_eq!(params_for(&all, given.clone()), given);
    }

    /// kube-apiserver's checks of a list's resourceVersion parameters.
    #[test]
    fn resource_version_parameters_are_checked_as_kube_apiserver_does() {
        let check = |kv: &[(&str, &str)]| {
            let params: Vec<(String, String)> = kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            versions(&params).err().map(|r| r.status().as_u16())
        };
        assert_eq!(check(&[]), None);
        assert_eq!(check(&[("resourceVersion", "0")]), None);
        assert_eq!(
            check(&[
                ("resourceVersion", "c1.x"),
                ("resourceVersionMatch", "NotOlderThan")
            ]),
            None
        );
        assert_eq!(
            check(&[("resourceVersionMatch", "NotOlderThan")]),
            Some(422)
        );
        assert_eq!(
            check(&[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")]),
            Some(422)
        );
        assert_eq!(
            check(&[("resourceVersion", "5"), ("resourceVersionMatch", "exact")]),
            Some(422)
        );
        assert_eq!(
            check(&[
                ("resourceVersion", "c1.x"),
                ("resourceVersionMatch", "Exact")
            ]),
            Some(410),
            "no earlier state to serve"
        );
        assert_eq!(
            check(&[("continue", "tok"), ("resourceVersion", "c1.x")]),
            Some(400)
        );
        assert_eq!(
            check(&[("continue", "tok"), ("resourceVersion", "0")]),
            None
        );
    }

    #[test]
    fn a_page_holds_at_most_the_servers_maximum() {
        let parsed = |kv: &[(&str, &str)]| {
            let params: Vec<(String, String)> = kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let mut q = Query::parse(&params, None).unwrap();
            cap_page(&mut q, 100);
            (q.limit, q.with_continue)
        };
        // no paging asked for: everything, as kube-apiserver answers
        assert_eq!(parsed(&[]).0, None);
        assert_eq!(parsed(&[("limit", "0")]).0, None);
        assert_eq!(parsed(&[("limit", "5000")]), (Some(100), true));
        assert_eq!(parsed(&[("limit", "7")]), (Some(7), true));
        assert_eq!(parsed(&[("limit", "100")]), (Some(100), true));
        // a client's own page may go without a token; the server's never does
        assert_eq!(
            parsed(&[("limit", "7"), ("withContinue", "false")]),
            (Some(7), false)
        );
        assert_eq!(parsed(&[("withContinue", "false")]), (None, false));
    }

    #[test]
    fn the_cluster_column_reads_the_annotation() {
        let o = json!({"metadata": {"name": "web", "annotations": {CLUSTER_ANNOTATION: "east"}}});
        let t = table(
            &[cluster_column()],
            &[],
            &[&o],
            "",
            None,
            IncludeObject::default(),
        );
        assert_eq!(t["rows"][0]["cells"][0], "east");
        assert_eq!(t["columnDefinitions"][0]["name"], "Cluster");
    }
}
