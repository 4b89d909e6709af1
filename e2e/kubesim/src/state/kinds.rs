//! Per-kind behaviour kube-apiserver's registry strategies give built-in kinds:
//! Service IP/NodePort allocation, Namespace phase and finalizers, CRD serving,
//! Secret `stringData`, and the fields an update may not change ([`immutable`]).

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::error::Cause;
use crate::error::{ApiError, ApiResult, duplicate_field, invalid_field, required_field};
use crate::state::cluster::State;
use crate::state::crd;
use crate::state::defaults;
use crate::state::immutable;
use crate::state::ipam::Ipam;
use crate::state::meta::now_rfc3339;
use crate::state::priority;
use crate::state::registry::{GroupResource, Registry, ResourceType};
use crate::state::stored::str_list;

fn is(rt: &ResourceType, group: &str, plural: &str) -> bool {
    rt.group == group && rt.plural == plural
}

/// Defaulting and allocation before a create is stored.
pub fn on_create(state: &mut State, rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    defaults::apply(rt, obj);
    status_on_create(rt, obj);
    job_restart_policy(rt, obj)?;
    crate::state::rbac::defaults(rt, obj);
    crate::state::rbac::validate(rt, obj, None)?;
    crate::state::match_conditions::validate(rt, obj)?;
    if is(rt, "scheduling.k8s.io", "priorityclasses") {
        priority::class_defaults(obj);
        priority::validate_class(&state.store, obj, None)?;
    } else if is(rt, "", "resourcequotas") {
        quota_hard(obj)?;
    } else if is(rt, "", "limitranges") {
        limit_range(obj)?;
    }
    // before anything is allocated for the object (a refused Service holds no IP)
    admit(&state.store, rt, obj)?;
    if is(rt, "", "services") {
        service_create(&mut state.ipam, obj, None)?;
    } else if is(rt, "", "namespaces") {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        obj["spec"]["finalizers"] = json!(["kubernetes"]);
        obj["status"] = json!({"phase": "Active"});
    } else if is(rt, "apiextensions.k8s.io", "customresourcedefinitions") {
        crd_serve(&mut state.registry, obj)?;
    } else if is(rt, "", "secrets") {
        secret_defaults(obj);
    }
    Ok(())
}

/// The admission plugins a create passes through, in kube-apiserver's order, for the
/// API's creates and the simulated controllers' alike: LimitRanger, Priority and
/// DefaultTolerationSeconds (mutating, Pods), then ResourceQuota (last).
pub fn admit(
    store: &crate::state::store::Store,
    rt: &ResourceType,
    obj: &mut Value,
) -> ApiResult<()> {
    let refused = |why: String, obj: &Value| {
        ApiError::forbidden_because(
            &rt.group,
            &rt.plural,
            obj["metadata"]["name"].as_str().unwrap_or_default(),
            &why,
        )
    };
    if is(rt, "", "pods") {
        crate::state::limits::admit_pod(store, obj).map_err(|why| refused(why, obj))?;
        priority::admit_pod(store, obj).map_err(|why| refused(why, obj))?;
        crate::state::tolerations::admit_pod(obj);
    }
    if rt.namespaced {
        crate::state::quota::admit(store, rt, obj).map_err(|why| refused(why, obj))?;
    }
    Ok(())
}

/// The mutating admission plugins an update of an object itself (not of a subresource:
/// kube's plugins skip those) passes through: DefaultTolerationSeconds (Pods).
pub fn admit_update(rt: &ResourceType, obj: &mut Value) {
    if is(rt, "", "pods") {
        crate::state::tolerations::admit_pod(obj);
    }
}

/// A ResourceQuota's `hard` values are quantities (kube-apiserver's 422 otherwise),
/// stored as `resource.Quantity` writes them (`pods: 10` becomes `"10"`, `1000m` `"1"`).
fn quota_hard(obj: &mut Value) -> ApiResult<()> {
    let mut causes: Vec<Cause> = Vec::new();
    if let Some(hard) = obj.pointer_mut("/spec/hard").and_then(Value::as_object_mut) {
        for (k, v) in hard.iter_mut() {
            let text = v
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| v.to_string());
            match crate::state::quantity::parse_milli(&text) {
                Err(e) => causes.push(invalid_field(
                    &format!("spec.hard[{k}]"),
                    format!("Invalid value: \"{text}\": {e}"),
                )),
                Ok(m) if m < 0 => causes.push(invalid_field(
                    &format!("spec.hard[{k}]"),
                    format!("Invalid value: \"{text}\": must be greater than or equal to 0"),
                )),
                Ok(m) => *v = json!(crate::state::quota::canonical_text(m, &text)),
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        "ResourceQuota",
        "",
        obj["metadata"]["name"].as_str().unwrap_or_default(),
        causes,
    ))
}

/// A LimitRange as the API keeps it: its quantities valid (422 otherwise) and written
/// as Quantities, its items defaulted.
fn limit_range(obj: &mut Value) -> ApiResult<()> {
    if let Err(errs) = crate::state::limits::validate(obj) {
        let causes: Vec<Cause> = errs
            .iter()
            .map(|(field, message)| invalid_field(field, message.clone()))
            .collect();
        return Err(ApiError::invalid(
            "LimitRange",
            "",
            obj["metadata"]["name"].as_str().unwrap_or_default(),
            causes,
        ));
    }
    crate::state::limits::item_defaults(obj);
    Ok(())
}

/// kube-apiserver's `PrepareForCreate`: a new object's status is not the client's to
/// set (only a later write to its status subresource is), so a built-in kind starts
/// from its empty status, as Go's JSON shows it. Nodes keep theirs (a kubelet registers
/// with its status); namespaces get theirs below; CRDs are cleared in the create verb.
fn status_on_create(rt: &ResourceType, obj: &mut Value) {
    let zero =
        |keys: &[&str]| Value::Object(keys.iter().map(|k| (k.to_string(), json!(0))).collect());
    let status = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "services") | ("networking.k8s.io", "ingresses") => json!({"loadBalancer": {}}),
        ("", "pods") => {
            json!({"phase": "Pending", "qosClass": crate::state::sim::pods::qos_class(obj)})
        }
        ("apps", "deployments") | ("batch", "jobs" | "cronjobs") => json!({}),
        ("apps", "replicasets") => zero(&["replicas"]),
        ("apps", "statefulsets") => zero(&["replicas", "availableReplicas"]),
        ("apps", "daemonsets") => zero(&[
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
        ]),
        ("policy", "poddisruptionbudgets") => zero(&[
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
        ]),
        ("autoscaling", "horizontalpodautoscalers") => zero(&["desiredReplicas"]),
        ("", "resourcequotas") => json!({}),
        _ => return,
    };
    obj["status"] = status;
}

/// A Job's Pods restart OnFailure or Never (its template's, or a CronJob's job
/// template's); kube-apiserver's 422 otherwise.
fn job_restart_policy(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    let (kind, at) = match (rt.group.as_str(), rt.plural.as_str()) {
        ("batch", "jobs") => ("Job", "spec.template.spec.restartPolicy"),
        ("batch", "cronjobs") => (
            "CronJob",
            "spec.jobTemplate.spec.template.spec.restartPolicy",
        ),
        _ => return Ok(()),
    };
    let policy = obj
        .pointer(&crate::state::stored::json_pointer(at))
        .and_then(Value::as_str)
        .unwrap_or("");
    if matches!(policy, "OnFailure" | "Never") {
        return Ok(());
    }
    Err(ApiError::invalid(
        kind,
        "batch",
        obj["metadata"]["name"].as_str().unwrap_or_default(),
        vec![invalid_field(
            at,
            format!("Unsupported value: \"{policy}\": supported values: \"OnFailure\", \"Never\""),
        )],
    ))
}

/// A Secret's `type` defaults to Opaque and `stringData` is written into `data`
/// (base64), winning over a `data` key of the same name; `stringData` is never stored.
fn secret_defaults(obj: &mut Value) {
    use base64::Engine;
    if obj
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        obj["type"] = json!("Opaque");
    }
    let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
    else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in string_data {
        let text = v.as_str().unwrap_or_default();
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

/// Rules and allocation carry-over before an update is stored.
pub fn on_update(
    state: &mut State,
    rt: &ResourceType,
    old: &Value,
    new: &mut Value,
    sub: &str,
) -> ApiResult<()> {
    defaults::apply(rt, new);
    job_restart_policy(rt, new)?;
    crate::state::rbac::defaults(rt, new);
    crate::state::rbac::validate(rt, new, Some(old))?;
    crate::state::match_conditions::validate(rt, new)?;
    if is(rt, "", "secrets") {
        secret_defaults(new);
    } else if is(rt, "", "pods") {
        priority::keep_on_update(old, new);
    } else if is(rt, "", "limitranges") {
        limit_range(new)?;
    } else if is(rt, "", "resourcequotas") {
        quota_hard(new)?;
    } else if is(rt, "scheduling.k8s.io", "priorityclasses") {
        priority::class_defaults(new);
        priority::validate_class(&state.store, new, Some(old))?;
    }
    // a Pod's node is set through its binding subresource, the one write that may
    if sub != "binding" {
        immutable::check(rt, old, new)?;
    }
    if is(rt, "", "services") {
        service_create(&mut state.ipam, new, Some(old))?;
    } else if is(rt, "", "namespaces") {
        if new.pointer("/spec/finalizers").is_none() {
            new["spec"]["finalizers"] = old
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
        }
        if new.pointer("/status/phase").is_none() {
            new["status"] = old
                .get("status")
                .cloned()
                .unwrap_or(json!({"phase": "Active"}));
        }
        let name = new["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    } else if is(rt, "apiextensions.k8s.io", "customresourcedefinitions") {
        let old_group = old.pointer("/spec/group");
        let old_plural = old.pointer("/spec/names/plural");
        if new.pointer("/spec/group") != old_group
            || new.pointer("/spec/names/plural") != old_plural
        {
            return Err(ApiError::invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                new["metadata"]["name"].as_str().unwrap_or_default(),
                vec![invalid_field(
                    "spec.group",
                    "Invalid value: field is immutable",
                )],
            ));
        }
        crd_serve(&mut state.registry, new)?;
    }
    Ok(())
}

/// Releases what an object held once it is gone for good.
pub fn on_removed(state: &mut State, rt: &ResourceType, obj: &Value) {
    if is(rt, "", "services") {
        for ip in obj
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ip) = ip.as_str().and_then(|s| s.parse::<IpAddr>().ok()) {
                state.ipam.release(ip);
            }
        }
        for p in obj
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(np) = p.get("nodePort").and_then(Value::as_u64) {
                state.ipam.release_node_port(np as u16);
            }
        }
    } else if is(rt, "apiextensions.k8s.io", "customresourcedefinitions") {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let gr = GroupResource {
            group: obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            resource: obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
        };
        // its objects go first (their watches see them deleted), then the type
        for o in state.store.list(&gr, None) {
            let (ns, n) = (o.namespace().to_string(), o.name().to_string());
            state.store.delete(&gr, &ns, &n);
        }
        state.registry.delete_crd(&name);
    }
}

fn crd_serve(registry: &mut Registry, crd: &mut Value) -> ApiResult<()> {
    let types = crd::types_of(crd)?;
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Names must not collide with a resource another CRD or a built-in already serves.
    for t in &types {
        if let Some(existing) = registry.get(&t.group, &t.version, &t.plural)
            && existing.crd.as_deref() != Some(name.as_str())
        {
            return Err(ApiError::invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                &name,
                vec![invalid_field(
                    "spec.names.plural",
                    format!("Invalid value: \"{}\": is already in use", t.plural),
                )],
            ));
        }
    }
    // a version that stays keeps its watches; one the update drops ends them
    let before = registry.crd_types(&name);
    registry.remove_crd(&name);
    let storage = types
        .first()
        .map(|t| t.storage_version.clone())
        .unwrap_or_default();
    let kept = |b: &ResourceType, t: &ResourceType| {
        (&b.group, &b.version, &b.plural) == (&t.group, &t.version, &t.plural)
    };
    for old in &before {
        if !types.iter().any(|t| kept(old, t)) {
            old.removed.cancel();
        }
    }
    for mut t in types {
        if let Some(old) = before.iter().find(|b| kept(b, &t)) {
            t.removed = old.removed.clone();
        }
        registry.insert(t);
    }
    let now = now_rfc3339();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !stored.contains(&json!(storage)) {
        stored.push(json!(storage));
    }
    crd["status"] = json!({
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": stored,
    });
    Ok(())
}

fn svc_invalid(obj: &Value, field: &str, msg: String) -> ApiError {
    ApiError::invalid(
        "Service",
        "",
        obj["metadata"]["name"].as_str().unwrap_or_default(),
        vec![invalid_field(field, msg)],
    )
}

fn family_of(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => Some("IPv4"),
        Ok(IpAddr::V6(_)) => Some("IPv6"),
        Err(_) => None,
    }
}

/// Service defaulting and ClusterIP/NodePort allocation (create, or update when `old`).
fn service_create(ipam: &mut Ipam, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let type_ = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if !matches!(
        type_.as_str(),
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
    ) {
        return Err(svc_invalid(
            obj,
            "spec.type",
            format!(
                "Unsupported value: \"{type_}\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ),
        ));
    }
    obj["spec"]["type"] = json!(type_);
    if spec.get("sessionAffinity").is_none() {
        obj["spec"]["sessionAffinity"] = json!("None");
    }
    // ports: protocol and targetPort defaults; names required when more than one
    let mut ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if type_ != "ExternalName"
        && ports.is_empty()
        && spec.get("clusterIP").and_then(Value::as_str) != Some("None")
    {
        return Err(svc_invalid(obj, "spec.ports", "Required value".into()));
    }
    let causes = service_ports(&mut ports);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "Service",
            "",
            obj["metadata"]["name"].as_str().unwrap_or_default(),
            causes,
        ));
    }
    if type_ == "ExternalName" {
        obj["spec"]["ports"] = json!(ports);
        if let Some(m) = obj["spec"].as_object_mut() {
            m.remove("clusterIP");
            m.remove("clusterIPs");
        }
        return Ok(());
    }
    // carry allocations over on update (kube-apiserver's patchAllocatedValues)
    let old_spec = old.and_then(|o| o.get("spec"));
    let mut cluster_ips = str_list(spec.get("clusterIPs"));
    let requested_ip = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if cluster_ips.is_empty() && !requested_ip.is_empty() {
        cluster_ips.push(requested_ip.clone());
    }
    if let Some(os) = old_spec {
        let old_ips = str_list(os.get("clusterIPs"));
        // NormalizeClusterIPs: a changed clusterIP with clusterIPs untouched is the
        // primary being changed (refused below like a changed clusterIPs[0])
        let old_ip = os.get("clusterIP").and_then(Value::as_str).unwrap_or("");
        if !requested_ip.is_empty() && requested_ip != old_ip && cluster_ips == old_ips {
            cluster_ips = vec![requested_ip.clone()];
        }
        if cluster_ips.is_empty() {
            cluster_ips = old_ips.clone();
        } else if !old_ips.is_empty() && cluster_ips.first() != old_ips.first() {
            return Err(svc_invalid(
                obj,
                "spec.clusterIPs[0]",
                format!(
                    "Invalid value: {}: may not change once set",
                    json!(cluster_ips)
                ),
            ));
        }
        if !old_ips.is_empty() && cluster_ips == old_ips {
            for k in ["ipFamilies", "ipFamilyPolicy"] {
                if obj["spec"].get(k).is_none()
                    && let Some(v) = os.get(k)
                {
                    obj["spec"][k] = v.clone();
                }
            }
            carry_node_ports(ipam, &mut ports, os, &type_)
                .map_err(|m| svc_invalid(obj, "spec.ports", m))?;
            obj["spec"]["ports"] = json!(ports);
            obj["spec"]["clusterIP"] = json!(cluster_ips[0]);
            obj["spec"]["clusterIPs"] = json!(cluster_ips);
            return Ok(());
        }
    }
    let headless = cluster_ips.first().map(String::as_str) == Some("None");
    let policy = obj["spec"]
        .get("ipFamilyPolicy")
        .and_then(Value::as_str)
        .unwrap_or("SingleStack")
        .to_string();
    if !matches!(
        policy.as_str(),
        "SingleStack" | "PreferDualStack" | "RequireDualStack"
    ) {
        return Err(svc_invalid(
            obj,
            "spec.ipFamilyPolicy",
            format!(
                "Unsupported value: \"{policy}\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
            ),
        ));
    }
    let cluster_families: Vec<&'static str> = ipam.cidrs.iter().map(|c| c.family()).collect();
    let mut families = str_list(obj["spec"].get("ipFamilies"));
    if families.is_empty() {
        families = cluster_ips
            .iter()
            .filter_map(|ip| family_of(ip))
            .map(String::from)
            .collect();
    }
    if families.is_empty() {
        families.push(cluster_families[0].to_string());
    }
    if policy != "SingleStack" {
        for f in &cluster_families {
            if !families.iter().any(|x| x == f) {
                families.push(f.to_string());
            }
        }
        if policy == "RequireDualStack" && cluster_families.len() < 2 {
            return Err(svc_invalid(obj, "spec.ipFamilyPolicy", "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services".into()));
        }
    } else {
        families.truncate(1);
    }
    for f in &families {
        if !cluster_families.contains(&f.as_str()) {
            return Err(svc_invalid(
                obj,
                "spec.ipFamilies",
                format!("Invalid value: \"{f}\": not configured on this cluster"),
            ));
        }
    }
    let ips = if headless {
        vec!["None".to_string()]
    } else {
        let mut allocated: Vec<IpAddr> = Vec::new();
        let mut out = Vec::new();
        let mut fail = None;
        for (i, f) in families.iter().enumerate() {
            let r = match cluster_ips.get(i) {
                Some(ip) => ip
                    .parse::<IpAddr>()
                    .map_err(|e| format!("{ip}: {e}"))
                    .and_then(|ip| ipam.reserve(ip).map(|_| ip)),
                None => ipam.allocate(f),
            };
            match r {
                Ok(ip) => {
                    allocated.push(ip);
                    out.push(ip.to_string());
                }
                Err(e) => {
                    fail = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = fail {
            for ip in allocated {
                ipam.release(ip);
            }
            return Err(svc_invalid(obj, "spec.clusterIPs", e));
        }
        out
    };
    if let Err(m) = carry_node_ports(ipam, &mut ports, &json!({}), &type_) {
        for ip in &ips {
            if let Ok(ip) = ip.parse() {
                ipam.release(ip);
            }
        }
        return Err(svc_invalid(obj, "spec.ports", m));
    }
    obj["spec"]["ports"] = json!(ports);
    obj["spec"]["clusterIP"] = json!(ips[0]);
    obj["spec"]["clusterIPs"] = json!(ips);
    obj["spec"]["ipFamilies"] = json!(families);
    obj["spec"]["ipFamilyPolicy"] = json!(policy);
    if obj["spec"].get("internalTrafficPolicy").is_none() {
        obj["spec"]["internalTrafficPolicy"] = json!("Cluster");
    }
    Ok(())
}

/// kube-apiserver's `validateServicePort` for every port (names: DNS labels, unique,
/// required when there are several; numbers in range), and the protocol and targetPort
/// defaults. Returns every field error.
fn service_ports(ports: &mut [Value]) -> Vec<Cause> {
    let several = ports.len() > 1;
    let mut names = std::collections::HashSet::new();
    let mut causes = Vec::new();
    for (i, p) in ports.iter_mut().enumerate() {
        let field = format!("spec.ports[{i}].name");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            if several {
                causes.push(required_field(&field));
            }
        } else {
            causes.extend(
                k8s_validation::dns1123_label(name)
                    .into_iter()
                    .map(|m| invalid_field(&field, format!("Invalid value: {name:?}: {m}"))),
            );
            if !names.insert(name.to_string()) {
                causes.push(duplicate_field(&field, name));
            }
        }
        let field = format!("spec.ports[{i}].port");
        let Some(port) = p.get("port").and_then(Value::as_i64) else {
            causes.push(required_field(&field));
            continue;
        };
        if !(1..=65535).contains(&port) {
            causes.push(invalid_field(
                &field,
                format!("Invalid value: {port}: must be between 1 and 65535, inclusive"),
            ));
        }
        if p.get("protocol").is_none() {
            p["protocol"] = json!("TCP");
        }
        if p.get("targetPort").is_none() {
            p["targetPort"] = json!(port);
        }
    }
    causes
}

fn carry_node_ports(
    ipam: &mut Ipam,
    ports: &mut [Value],
    old_spec: &Value,
    type_: &str,
) -> Result<(), String> {
    if type_ != "NodePort" && type_ != "LoadBalancer" {
        for p in ports.iter_mut() {
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
        }
        return Ok(());
    }
    let old_ports = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for p in ports.iter_mut() {
        let want = p.get("nodePort").and_then(Value::as_u64).map(|n| n as u16);
        let prev = old_ports
            .iter()
            .find(|o| o.get("port") == p.get("port"))
            .and_then(|o| o.get("nodePort").and_then(Value::as_u64))
            .map(|n| n as u16);
        let np = match (want, prev) {
            (None, Some(prev)) => prev,
            (Some(w), Some(prev)) if w == prev => prev,
            (w, _) => ipam.node_port(w)?,
        };
        p["nodePort"] = json!(np);
    }
    Ok(())
}
