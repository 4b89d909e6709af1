//! `Table` responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`) with the
//! printer columns of built-in kinds ([`columns`]) and of CRDs, and the JSONPath subset
//! they use. kubesim and the search API render with the same code, so `kubectl get`
//! prints the same columns from either.

pub mod columns;

use serde_json::{Value, json};

pub use columns::Column;

/// Cells kubectl's built-in printers compute rather than read (`@name` columns).
fn computed(obj: &Value, which: &str) -> Value {
    // a field, or kubectl's placeholder when it is absent
    for (prefix, placeholder) in [
        ("@or-na:", "N/A"),
        ("@or-unset:", "<unset>"),
        ("@or-none:", "<none>"),
    ] {
        if let Some(pointer) = which.strip_prefix(prefix) {
            return match obj.pointer(pointer) {
                Some(Value::Number(n)) => json!(n.to_string()),
                Some(Value::String(s)) => json!(s),
                _ => json!(placeholder),
            };
        }
    }
    match which {
        "@service-ports" => {
            let ports = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if ports.is_empty() {
                return json!("<none>");
            }
            json!(
                ports
                    .iter()
                    .map(|p| {
                        let port = p.get("port").map(|v| v.to_string()).unwrap_or_default();
                        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                        match p.get("nodePort") {
                            Some(np) => format!("{port}:{np}/{proto}"),
                            None => format!("{port}/{proto}"),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
        "@external-ip" => {
            let ingress = load_balancer(obj);
            match (
                obj.pointer("/spec/type").and_then(Value::as_str),
                ingress.is_empty(),
            ) {
                (Some("LoadBalancer"), true) => json!("<pending>"),
                (_, false) => json!(ingress.join(",")),
                (Some("ExternalName"), _) => json!(
                    obj.pointer("/spec/externalName")
                        .cloned()
                        .unwrap_or(json!("<none>"))
                ),
                _ => json!("<none>"),
            }
        }
        "@selector" => match obj.pointer("/spec/selector").and_then(Value::as_object) {
            Some(m) if !m.is_empty() => json!(
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => json!("<none>"),
        },
        "@pod-ready" => {
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses(obj)
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            json!(format!("{ready}/{total}"))
        }
        "@pod-status" => json!(pod_status(obj)),
        "@pod-restarts" => json!(
            statuses(obj)
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum::<i64>()
        ),
        "@ready-of-replicas" => json!(format!(
            "{}/{}",
            int(obj, "/status/readyReplicas"),
            int(obj, "/spec/replicas")
        )),
        "@node-status" => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                .and_then(|c| c.get("status").and_then(Value::as_str));
            let mut s = match ready {
                Some("True") => "Ready".to_string(),
                Some("False") => "NotReady".to_string(),
                _ => "Unknown".to_string(),
            };
            if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                s.push_str(",SchedulingDisabled");
            }
            json!(s)
        }
        "@node-roles" => {
            let roles: Vec<&str> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .collect();
            json!(if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            })
        }
        "@node-selector" => match obj
            .pointer("/spec/template/spec/nodeSelector")
            .and_then(Value::as_object)
        {
            Some(m) if !m.is_empty() => json!(
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => json!("<none>"),
        },
        which if which.starts_with("@int:") => json!(int(obj, &which["@int:".len()..])),
        // kubectl's ResourceQuota columns: `name: used/hard`, sorted, the `limits.*`
        // resources in Limit and the others in Request
        which if which.starts_with("@quota:") => {
            let limits = &which["@quota:".len()..] == "limits";
            let map = |k: &str| {
                obj.pointer(&format!("/status/{k}"))
                    .and_then(Value::as_object)
            };
            let (Some(hard), used) = (map("hard"), map("used")) else {
                return json!("");
            };
            let mut names: Vec<&String> = hard
                .keys()
                .filter(|k| k.starts_with("limits.") == limits)
                .collect();
            names.sort();
            let cell = |m: Option<&serde_json::Map<String, Value>>, k: &str| {
                m.and_then(|m| m.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("0")
                    .to_string()
            };
            json!(
                names
                    .iter()
                    .map(|k| format!("{k}: {}/{}", cell(used, k), cell(Some(hard), k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        // a boolean Go shows false when unset
        which if which.starts_with("@bool:") => json!(
            obj.pointer(&which["@bool:".len()..])
                .and_then(Value::as_bool)
                .unwrap_or(false)
        ),
        "@event-object" => {
            let r = |k: &str| {
                obj.pointer(&format!("/involvedObject/{k}"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            };
            json!(format!("{}/{}", r("kind").to_lowercase(), r("name")))
        }
        "@created-at" => obj
            .pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null),
        // `Kind/name` of the reference at a pointer (a binding's roleRef, an HPA's target)
        which if which.starts_with("@ref:") => {
            let at = &which["@ref:".len()..];
            json!(format!(
                "{}/{}",
                text(obj, &format!("{at}/kind")),
                text(obj, &format!("{at}/name"))
            ))
        }
        which if which.starts_with("@subjects:") => {
            let kind = &which["@subjects:".len()..];
            let names: Vec<String> = obj
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|s| text(s, "/kind") == kind)
                .map(|s| match kind {
                    "ServiceAccount" => format!("{}/{}", text(s, "/namespace"), text(s, "/name")),
                    _ => text(s, "/name").to_string(),
                })
                .collect();
            json!(names.join(", "))
        }

        "@hpa-targets" => json!(hpa_targets(obj)),
        "@ingress-address" => json!(load_balancer(obj).join(",")),
        "@ingress-ports" => {
            let tls = obj
                .pointer("/spec/tls")
                .and_then(Value::as_array)
                .is_some_and(|t| !t.is_empty());
            json!(if tls { "80, 443" } else { "80" })
        }
        _ => Value::Null,
    }
}

/// The ip (else hostname) of each of a Service's or Ingress's load-balancer ingress points.
fn load_balancer(obj: &Value) -> Vec<&str> {
    obj.pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i.get("ip")
                .or_else(|| i.get("hostname"))
                .and_then(Value::as_str)
        })
        .collect()
}

/// A string field, "" when absent.
fn text<'v>(obj: &'v Value, pointer: &str) -> &'v str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// kubectl's TARGETS of a HorizontalPodAutoscaler: each metric's current value (from
/// status, `<unknown>` before the autoscaler reports) over its target, e.g.
/// `cpu: <unknown>/80%`, `memory: 120Mi/500Mi`.
fn hpa_targets(obj: &Value) -> String {
    let specs = obj
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if specs.is_empty() {
        return "<none>".into();
    }
    let current = obj
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let parts: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let kind = text(m, "/type");
            let key = match kind {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                "External" => "external",
                _ => return "<unknown type>".to_string(),
            };
            let src = &m[key];
            let target = &src["target"];
            let now = current.get(i).map(|c| &c[key]["current"]);
            let (want, have) = if let Some(u) = target.get("averageUtilization") {
                let have = now
                    .and_then(|c| c.get("averageUtilization"))
                    .map_or("<unknown>".to_string(), |v| format!("{v}%"));
                (format!("{u}%"), have)
            } else {
                let field = if target.get("averageValue").is_some() {
                    "averageValue"
                } else {
                    "value"
                };
                let have = now
                    .and_then(|c| c.get(field))
                    .and_then(Value::as_str)
                    .unwrap_or("<unknown>")
                    .to_string();
                (text(target, &format!("/{field}")).to_string(), have)
            };
            match kind {
                "Resource" | "ContainerResource" => {
                    format!("{}: {have}/{want}", text(src, "/name"))
                }
                _ => format!("{have}/{want}"),
            }
        })
        .collect();
    parts.join(", ")
}

/// An integer field as kubectl's built-in printers show it: 0 when absent.
fn int(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The container statuses of a Pod.
fn statuses(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// kubectl's STATUS of a Pod: Terminating, the Pod's reason, a container's waiting or
/// terminated reason, else the phase.
fn pod_status(obj: &Value) -> String {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    if let Some(r) = obj.pointer("/status/reason").and_then(Value::as_str) {
        return r.into();
    }
    for c in statuses(obj) {
        for state in ["waiting", "terminated"] {
            if let Some(r) = c
                .pointer(&format!("/state/{state}/reason"))
                .and_then(Value::as_str)
            {
                return r.into();
            }
        }
    }
    obj.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .into()
}

/// Evaluates a kubectl-style JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.k=="v")]`) to values.
pub fn eval_path<'v>(obj: &'v Value, path: &str) -> Vec<&'v Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur: Vec<&Value> = vec![obj];
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            // a field ends at an unescaped '.' or '['; `\.` is a dot inside the name, as
            // in `.metadata.labels.causeway\.io/policy-name`
            let mut field = String::new();
            let mut end = r.len();
            let mut chars = r.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => field.extend(chars.next().map(|(_, n)| n)),
                    '.' | '[' => {
                        end = i;
                        break;
                    }
                    _ => field.push(c),
                }
            }
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            cur = cur
                .into_iter()
                .filter_map(|v| v.get(field.as_str()))
                .collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect();
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let Some((k, v)) = filter.split_once("==") else {
                    return vec![];
                };
                let want = v.trim().trim_matches('"').trim_matches('\'');
                let keypath: Vec<&str> = k.trim().split('.').collect();
                cur = cur
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        let mut x = Some(*item);
                        for s in &keypath {
                            x = x.and_then(|x| x.get(*s));
                        }
                        match x {
                            Some(Value::String(s)) => s == want,
                            Some(other) => serde_json::to_string(other).is_ok_and(|o| o == want),
                            None => false,
                        }
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.into_iter().filter_map(|v| v.get(i)).collect();
            } else {
                let key = inner.trim_matches('\'').trim_matches('"');
                cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
            }
        } else {
            return vec![];
        }
    }
    cur
}

fn cell(values: &[&Value], type_: &str) -> Value {
    if values.is_empty() {
        return Value::Null;
    }
    if values.len() == 1 {
        let v = values[0];
        return match (type_, v) {
            ("integer", Value::Number(_))
            | ("number", Value::Number(_))
            | ("boolean", Value::Bool(_)) => v.clone(),
            (_, Value::String(s)) => json!(s),
            (_, other) => json!(other.to_string()),
        };
    }
    json!(
        values
            .iter()
            .map(|v| v
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| v.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// What each row of a Table carries (the request's `includeObject`, as kube-apiserver
/// reads it): nothing, the object's metadata (PartialObjectMetadata, the default) or the
/// whole object (`kubectl get --sort-by` asks for it, to sort by any field).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// `None`: rows carry no object.
    None,
    /// `Metadata` (or absent): rows carry the object's metadata.
    #[default]
    Metadata,
    /// `Object`: rows carry the whole object.
    Object,
}

impl IncludeObject {
    /// From a request's `includeObject` parameter; anything else is the message of a
    /// 400, as kube-apiserver's.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!(
                "unrecognized includeObject value: {other:?} (give None, Metadata or Object)"
            )),
        }
    }

    /// What a row carries for `o` (`None` for none), managedFields left out.
    fn row_object(self, o: &Value) -> Option<Value> {
        let mut o = match self {
            IncludeObject::None => return None,
            IncludeObject::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
            }),
            IncludeObject::Object => o.clone(),
        };
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        Some(o)
    }
}

/// A Table of `objects` (rows carry what `include` says): the `leading` columns, Name,
/// the type's printer `columns`, and Age unless a column already shows the creation
/// time. `leading` is for callers that put something before Name (the search API's
/// Cluster); kubesim passes none.
pub fn table(
    leading: &[Column],
    columns: &[Column],
    objects: &[&Value],
    rv: &str,
    continue_: Option<&str>,
    include: IncludeObject,
) -> Value {
    let def = |c: &Column| json!({"name": c.name, "type": c.type_, "format": "", "description": c.description, "priority": c.priority});
    let mut defs: Vec<Value> = leading.iter().map(def).collect();
    defs.push(json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}));
    let has_age = columns.iter().any(|c| {
        matches!(
            c.json_path.as_str(),
            ".metadata.creationTimestamp" | "@created-at"
        )
    });
    defs.extend(columns.iter().map(def));
    if !has_age {
        defs.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells: Vec<Value> = leading.iter().map(|c| column_cell(o, c)).collect();
            cells.push(json!(
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ));
            cells.extend(columns.iter().map(|c| column_cell(o, c)));
            if !has_age {
                let ts = o
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                cells.push(json!(age(ts)));
            }
            let mut row = json!({"cells": cells});
            if let Some(object) = include.row_object(o) {
                row["object"] = object;
            }
            row
        })
        .collect();
    let mut md = json!({"resourceVersion": rv});
    if let Some(c) = continue_ {
        md["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": defs, "rows": rows})
}

/// One column's cell of one object.
fn column_cell(o: &Value, c: &Column) -> Value {
    if c.json_path.starts_with('@') {
        return computed(o, &c.json_path);
    }
    let v = cell(&eval_path(o, &c.json_path), &c.type_);
    if c.type_ == "date" {
        return json!(age(v.as_str().unwrap_or("")));
    }
    v
}

/// `5m`, `3h`, `2d` as kubectl prints ages.
pub fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_cells_match_kubectl() {
        let svc = json!({"spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(
            computed(&svc, "@service-ports"),
            json!("80:30001/TCP,53/UDP")
        );
        assert_eq!(computed(&svc, "@external-ip"), json!("<none>"));
        assert_eq!(computed(&svc, "@selector"), json!("app=web"));
        let lb = json!({"spec": {"type": "LoadBalancer"}});
        assert_eq!(computed(&lb, "@external-ip"), json!("<pending>"));
    }

    /// The cells of one row, as strings, by header.
    fn row(group: &str, plural: &str, obj: &Value) -> Vec<(String, String)> {
        let t = table(
            &[],
            &columns::builtin(group, plural),
            &[obj],
            "1",
            None,
            IncludeObject::default(),
        );
        let heads: Vec<String> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        let cells = t["rows"][0]["cells"].as_array().unwrap();
        heads
            .into_iter()
            .zip(cells)
            .map(|(h, c)| (h, c.as_str().map_or(c.to_string(), String::from)))
            .filter(|(h, _)| h != "Age")
            .collect()
    }

    #[test]
    fn builtin_workload_pod_and_node_columns_match_kubectl() {
        let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let pod = json!({"metadata": {"name": "web-1"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(
            row("", "pods", &pod),
            s(&[
                ("Name", "web-1"),
                ("Ready", "1/2"),
                ("Status", "CrashLoopBackOff"),
                ("Restarts", "3")
            ])
        );
        let pending = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}});
        assert_eq!(row("", "pods", &pending)[2].1, "Pending");
        let deploy = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3},
            "status": {"readyReplicas": 2, "updatedReplicas": 3}});
        assert_eq!(
            row("apps", "deployments", &deploy),
            s(&[
                ("Name", "web"),
                ("Ready", "2/3"),
                ("Up-to-date", "3"),
                ("Available", "0")
            ])
        );
        let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        assert_eq!(
            row("", "nodes", &node),
            s(&[
                ("Name", "n1"),
                ("Status", "Ready,SchedulingDisabled"),
                ("Roles", "control-plane"),
                ("Version", "v1.33.0")
            ])
        );
        let rs = json!({"metadata": {"name": "web-abc"}, "spec": {"replicas": 3}, "status": {"replicas": 3}});
        assert_eq!(
            row("apps", "replicasets", &rs),
            s(&[
                ("Name", "web-abc"),
                ("Desired", "3"),
                ("Current", "3"),
                ("Ready", "0")
            ])
        );
    }

    /// kubectl's cells for RBAC bindings, PodDisruptionBudgets, HorizontalPodAutoscalers
    /// (before and after the autoscaler reports) and Ingresses.
    #[test]
    fn rbac_pdb_hpa_and_ingress_cells_match_kubectl() {
        let cells = |group: &str, plural: &str, o: &Value| -> Vec<Value> {
            columns::builtin(group, plural)
                .iter()
                .map(|c| column_cell(o, c))
                .collect()
        };
        let rb = json!({"roleRef": {"kind": "ClusterRole", "name": "view"}, "metadata": {},
            "subjects": [{"kind": "User", "name": "a"}, {"kind": "User", "name": "b"},
                         {"kind": "ServiceAccount", "name": "r", "namespace": "n"}]});
        let c = cells("rbac.authorization.k8s.io", "rolebindings", &rb);
        assert_eq!(c[0], "ClusterRole/view");
        assert_eq!(&c[2..], &[json!("a, b"), json!(""), json!("n/r")]);
        let pdb = json!({"spec": {"maxUnavailable": 1}, "status": {"disruptionsAllowed": 2}});
        assert_eq!(
            cells("policy", "poddisruptionbudgets", &pdb),
            vec![json!("N/A"), json!("1"), json!(2)]
        );
        let mut hpa = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]}});
        assert_eq!(
            cells("autoscaling", "horizontalpodautoscalers", &hpa),
            vec![
                json!("Deployment/web"),
                json!("cpu: <unknown>/80%, <unknown>/10"),
                json!("<unset>"),
                json!(5),
                json!(0)
            ]
        );
        hpa["spec"]["minReplicas"] = json!(2);
        hpa["status"] = json!({"currentReplicas": 3, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 41}}},
            {"type": "Pods", "pods": {"current": {"averageValue": "7"}}}]});
        assert_eq!(
            cells("autoscaling", "horizontalpodautoscalers", &hpa),
            vec![
                json!("Deployment/web"),
                json!("cpu: 41%/80%, 7/10"),
                json!("2"),
                json!(5),
                json!(3)
            ]
        );
        let ing = json!({"spec": {"rules": [{"host": "a.example"}], "tls": [{"hosts": ["a.example"]}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"hostname": "lb.example"}]}}});
        assert_eq!(
            cells("networking.k8s.io", "ingresses", &ing),
            vec![
                json!("<none>"),
                json!("a.example"),
                json!("10.0.0.1,lb.example"),
                json!("80, 443")
            ]
        );
    }

    #[test]
    fn jsonpath_subset() {
        let o = json!({"spec": {"ips": ["10.0.0.1", "fd00::1"], "type": "ClusterSetIP"}, "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Valid", "status": "False"}]}});
        assert_eq!(eval_path(&o, ".spec.type"), vec![&json!("ClusterSetIP")]);
        assert_eq!(eval_path(&o, ".spec.ips").len(), 1);
        assert_eq!(eval_path(&o, ".spec.ips[*]").len(), 2);
        assert_eq!(eval_path(&o, ".spec.ips[1]"), vec![&json!("fd00::1")]);
        assert_eq!(
            eval_path(&o, ".status.conditions[?(@.type==\"Valid\")].status"),
            vec![&json!("False")]
        );
        assert!(eval_path(&o, ".nope.x").is_empty());
        // kubectl's escaped dots in label keys (CRD printer columns use them)
        let labelled =
            json!({"metadata": {"labels": {"causeway.io/policy-name": "web", "a.b": "c"}}});
        assert_eq!(
            eval_path(&labelled, ".metadata.labels.causeway\\.io/policy-name"),
            vec![&json!("web")]
        );
        assert_eq!(
            eval_path(&labelled, ".metadata.labels.a\\.b"),
            vec![&json!("c")]
        );
        assert!(eval_path(&labelled, ".metadata.labels.causeway").is_empty());
        assert_eq!(
            cell(&eval_path(&o, ".spec.ips[*]"), "string"),
            json!("10.0.0.1,fd00::1")
        );
    }

    #[test]
    fn leading_columns_come_before_name() {
        let cluster = Column::new("Cluster", "string", ".metadata.annotations.x\\.io/c", 0);
        let ready = Column::new("Ready", "integer", ".status.readyReplicas", 0);
        let o = json!({"metadata": {"name": "web", "annotations": {"x.io/c": "east"}, "managedFields": [{}]}, "status": {"readyReplicas": 2}});
        let t = table(
            &[cluster],
            std::slice::from_ref(&ready),
            &[&o],
            "7",
            Some("tok"),
            IncludeObject::Metadata,
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Cluster", "Name", "Ready", "Age"]);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["east", "web", 2, "<unknown>"])
        );
        assert_eq!(
            t["rows"][0]["object"]["metadata"].get("managedFields"),
            None
        );
        assert_eq!(
            t["metadata"],
            json!({"resourceVersion": "7", "continue": "tok"})
        );
        // kubesim's shape: no leading columns
        let plain = table(&[], &[ready], &[&o], "7", None, IncludeObject::default());
        assert_eq!(plain["columnDefinitions"][0]["name"], "Name");
        assert_eq!(plain["metadata"], json!({"resourceVersion": "7"}));
    }

    /// `includeObject`: `kubectl get --sort-by` asks for the whole object in each row,
    /// to sort by a field no column shows; `None` leaves it out; anything else is a 400.
    #[test]
    fn rows_carry_what_include_object_asks() {
        let o = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "web", "managedFields": [{}]}, "spec": {"nodeName": "n1"}});
        let row = |include| table(&[], &[], &[&o], "1", None, include)["rows"][0].clone();
        assert_eq!(
            row(IncludeObject::Metadata)["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "web"}})
        );
        assert_eq!(
            row(IncludeObject::Object)["object"],
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web"}, "spec": {"nodeName": "n1"}})
        );
        assert_eq!(row(IncludeObject::None).get("object"), None);
        assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Ok(IncludeObject::Object)
        );
        assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
        assert_eq!(
            IncludeObject::parse(Some("object")).unwrap_err(),
            "unrecognized includeObject value: \"object\" (give None, Metadata or Object)"
        );
    }
}
