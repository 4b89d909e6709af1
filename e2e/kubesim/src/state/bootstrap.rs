//! What a cluster holds before any client writes: the objects kube-apiserver and its
//! controllers create at start, or what a journal kept from an earlier run.

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::convert;
use crate::state::crd;
use crate::state::ipam::Cidr;
use crate::state::meta::{new_uid, now_rfc3339, stable_uid};
use crate::state::persist::Restored;
use crate::state::registry::gr;
use crate::state::sim::nodes::NodeSet;

/// Puts journaled objects back: CRDs first (so their types are served), then the rest;
/// Service addresses are re-reserved.
pub fn restore(state: &mut State, restored: Vec<Restored>, max_rv: u64) {
    let (crds, rest): (Vec<_>, Vec<_>) = restored.into_iter().partition(|r| {
        r.gr.group == "apiextensions.k8s.io" && r.gr.resource == "customresourcedefinitions"
    });
    for r in crds.into_iter().chain(rest) {
        if r.gr.group == "apiextensions.k8s.io" && r.gr.resource == "customresourcedefinitions" {
            match crd::types_of(&r.obj) {
                Ok(types) => types.into_iter().for_each(|t| state.registry.insert(t)),
                Err(e) => {
                    tracing::warn!(error = %e, "a journaled CRD no longer validates; not serving it")
                }
            }
        }
        if r.gr.group.is_empty() && r.gr.resource == "services" {
            for ip in r
                .obj
                .pointer("/spec/clusterIPs")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(ip) = ip.as_str().and_then(|s| s.parse().ok()) {
                    let _ = state.ipam.reserve(ip);
                }
            }
            for p in r
                .obj
                .pointer("/spec/ports")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(np) = p.get("nodePort").and_then(|v| v.as_u64()) {
                    let _ = state.ipam.node_port(Some(np as u16));
                }
            }
        }
        let rv = r
            .obj
            .pointer("/metadata/resourceVersion")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        // journals from before events.k8s.io Events were stored as core Events
        match state.registry.by_group_resource(&r.gr) {
            Some(rt) if rt.stored_as.is_some() => {
                let obj = convert::to_storage(&rt, r.obj);
                state.store.restore(&rt.group_resource(), obj, rv);
            }
            _ => state.store.restore(&r.gr, r.obj, rv),
        }
    }
    state.store.restore_rv(max_rv);
}

/// The built-in namespaces, the `kubernetes` Service, the Ready `nodes` and the
/// default ClusterRoles of a new cluster named `cluster`.
pub fn bootstrap(state: &mut State, cluster: &str, service_cidrs: &[Cidr], nodes: &NodeSet) {
    let now = now_rfc3339();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let uid = stable_uid(&format!("{}/{ns}", cluster));
        state.store.put(
            &gr("", "namespaces"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "uid": uid, "creationTimestamp": now, "labels": {"kubernetes.io/metadata.name": ns}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        );
    }
    let families: Vec<&str> = service_cidrs.iter().map(|c| c.family()).collect();
    let ips: Vec<String> = families
        .iter()
        .filter_map(|f| state.ipam.allocate(f).ok().map(|ip| ip.to_string()))
        .collect();
    state.store.put(
        &gr("", "services"),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default", "uid": new_uid(), "creationTimestamp": now, "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"type": "ClusterIP", "clusterIP": ips[0], "clusterIPs": ips, "ipFamilies": families, "ipFamilyPolicy": if families.len() > 1 { "PreferDualStack" } else { "SingleStack" }, "sessionAffinity": "None", "internalTrafficPolicy": "Cluster", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
               "status": {"loadBalancer": {}}}),
    );
    for i in 0..nodes.count {
        state.store.put(&gr("", "nodes"), nodes.node(i, &now));
    }
    for class in crate::state::priority::system_classes(&now) {
        state
            .store
            .put(&gr("scheduling.k8s.io", "priorityclasses"), class);
    }
    let rbac = "rbac.authorization.k8s.io";
    for role in default_cluster_roles() {
        let mut role = role;
        role["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        role["kind"] = json!("ClusterRole");
        role["metadata"]["uid"] = json!(new_uid());
        role["metadata"]["creationTimestamp"] = json!(now);
        role["metadata"]["labels"]["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
        state.store.put(&gr(rbac, "clusterroles"), role);
    }
    state.store.put(
        &gr(rbac, "clusterrolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "cluster-admin", "uid": new_uid(), "creationTimestamp": now, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}}),
    );
    // as kube-apiserver's bootstrap policy: every authenticated user may ask what it may do
    // and who it is (`kubectl auth can-i [--list]`, `kubectl auth whoami`)
    let labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    state.store.put(
        &gr(rbac, "clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:basic-user", "uid": new_uid(), "creationTimestamp": now, "labels": labels},
               "rules": [{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                         {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]}),
    );
    // what aggregated API servers and webhooks are bound to, to ask who a caller is and
    // what it may do
    state.store.put(
        &gr(rbac, "clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:auth-delegator", "uid": new_uid(), "creationTimestamp": now, "labels": labels},
               "rules": [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                         {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]}),
    );
    state.store.put(
        &gr(rbac, "clusterrolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "system:basic-user", "uid": new_uid(), "creationTimestamp": now, "labels": labels},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:basic-user"}}),
    );
    // what kube-controller-manager keeps in every namespace, there before the first
    // request (later namespaces get theirs from the controllers' next pass)
    crate::state::controllers::namespace_defaults(state);
}

/// kube-apiserver's bootstrap user-facing ClusterRoles: `cluster-admin`, and `admin`,
/// `edit` and `view` aggregated (by kube-controller-manager, here
/// [`crate::state::rbac::aggregate`]) from the `system:aggregate-to-*` roles and from any
/// ClusterRole labelled `rbac.authorization.k8s.io/aggregate-to-<role>: "true"`. `view`
/// reads no Secrets and no RBAC objects; `edit` writes workloads but not RBAC; `admin`
/// adds Roles and RoleBindings.
fn default_cluster_roles() -> Vec<Value> {
    let read = json!(["get", "list", "watch"]);
    let write = json!(["create", "delete", "deletecollection", "patch", "update"]);
    let agg = |to: &str| json!({"clusterRoleSelectors": [{"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"}}]});
    let label = |to: &str| json!({format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"});
    vec![
        json!({"metadata": {"name": "cluster-admin"}, "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        json!({"metadata": {"name": "admin"}, "aggregationRule": agg("admin"), "rules": []}),
        json!({"metadata": {"name": "edit", "labels": label("admin")}, "aggregationRule": agg("edit"), "rules": []}),
        json!({"metadata": {"name": "view", "labels": label("edit")}, "aggregationRule": agg("view"), "rules": []}),
        json!({"metadata": {"name": "system:aggregate-to-admin", "labels": label("admin")}, "rules": [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}]}),
        json!({"metadata": {"name": "system:aggregate-to-edit", "labels": label("edit")}, "rules": [
            {"apiGroups": [""], "resources": ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], "verbs": read},
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
            {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], "verbs": write},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], "verbs": write},
            {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"], "verbs": write},
            {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": write},
            {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": write},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": write},
            {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": write},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}]}),
        json!({"metadata": {"name": "system:aggregate-to-view", "labels": label("view")}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"], "verbs": read},
            {"apiGroups": [""], "resources": ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], "verbs": read},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"], "verbs": read},
            {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], "verbs": read},
            {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], "verbs": read},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": read},
            {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingresses/status", "networkpolicies"], "verbs": read}]}),
    ]
}
