//! LimitRanges (core/v1): the API's defaults for their items, and the LimitRanger
//! admission plugin for a Pod's create. Containers without requests or limits get the
//! namespace's `Container` defaults. Then every `Container` and `Pod` item's `min`,
//! `max` and `maxLimitRequestRatio` is checked, and the violations are reported with
//! kube-apiserver's wording (403 Forbidden).

use serde_json::{Map, Value, json};

use crate::state::quantity::parse_milli;
use crate::state::registry::gr;
use crate::state::store::Store;

/// The quantity maps of an item.
const BOUNDS: [&str; 5] = [
    "max",
    "min",
    "default",
    "defaultRequest",
    "maxLimitRequestRatio",
];

/// The API's validation of a LimitRange's quantities (kube's 422 field errors: field,
/// message), written back as `resource.Quantity` writes them (`1000m` becomes `"1"`).
pub fn validate(obj: &mut Value) -> Result<(), Vec<(String, String)>> {
    let mut errs = Vec::new();
    let items = obj
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut);
    for (i, item) in items.into_iter().flatten().enumerate() {
        for bound in BOUNDS {
            let Some(map) = item.get_mut(bound).and_then(Value::as_object_mut) else {
                continue;
            };
            for (res, v) in map.iter_mut() {
                let field = format!("spec.limits[{i}].{bound}[{res}]");
                match amount(v) {
                    None => errs.push((
                        field,
                        format!("Invalid value: {v}: must be a quantity such as 500m or 1Gi"),
                    )),
                    Some((text, m)) if m < 0 => errs.push((
                        field,
                        format!("Invalid value: \"{text}\": must be greater than or equal to 0"),
                    )),
                    Some((text, m)) => *v = json!(crate::state::quota::canonical_text(m, &text)),
                }
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// `SetDefaults_LimitRangeItem`: for a `Container` item, `default` from `max`, then
/// `defaultRequest` from `default`, then from `min`.
pub fn item_defaults(obj: &mut Value) {
    let Some(items) = obj
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for item in items {
        if item["type"] != "Container" {
            continue;
        }
        let from = |item: &Value, k: &str| item[k].as_object().cloned().unwrap_or_default();
        let (max, min) = (from(item, "max"), from(item, "min"));
        let mut default = from(item, "default");
        for (k, v) in max {
            default.entry(k).or_insert(v);
        }
        let mut request = from(item, "defaultRequest");
        for (k, v) in default.iter().chain(min.iter()) {
            request.entry(k.clone()).or_insert_with(|| v.clone());
        }
        if !default.is_empty() {
            item["default"] = Value::Object(default);
        }
        if !request.is_empty() {
            item["defaultRequest"] = Value::Object(request);
        }
    }
}

/// A quantity's text and millis.
fn amount(v: &Value) -> Option<(String, i128)> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    parse_milli(&text).ok().map(|m| (text, m))
}

/// The min/max/ratio violations of one (summed) set of requests and limits.
fn check(
    kind: &str,
    item: &Value,
    requests: &Map<String, Value>,
    limits: &Map<String, Value>,
    errs: &mut Vec<String>,
) {
    let each = |k: &str| item[k].as_object().cloned().unwrap_or_default();
    for (res, bound) in each("min") {
        let Some((b, bm)) = amount(&bound) else {
            continue;
        };
        match requests.get(&res).and_then(amount) {
            None => errs.push(format!(
                "minimum {res} usage per {kind} is {b}.  No request is specified"
            )),
            Some((r, rm)) if rm < bm => errs.push(format!(
                "minimum {res} usage per {kind} is {b}, but request is {r}"
            )),
            _ => match limits.get(&res).and_then(amount) {
                Some((l, lm)) if lm < bm => errs.push(format!(
                    "minimum {res} usage per {kind} is {b}, but limit is {l}"
                )),
                _ => {}
            },
        }
    }
    for (res, bound) in each("max") {
        let Some((b, bm)) = amount(&bound) else {
            continue;
        };
        match limits.get(&res).and_then(amount) {
            None => errs.push(format!(
                "maximum {res} usage per {kind} is {b}.  No limit is specified"
            )),
            Some((l, lm)) if lm > bm => errs.push(format!(
                "maximum {res} usage per {kind} is {b}, but limit is {l}"
            )),
            _ => match requests.get(&res).and_then(amount) {
                Some((r, rm)) if rm > bm => errs.push(format!(
                    "maximum {res} usage per {kind} is {b}, but request is {r}"
                )),
                _ => {}
            },
        }
    }
    for (res, bound) in each("maxLimitRequestRatio") {
        let Some((b, bm)) = amount(&bound) else {
            continue;
        };
        let r = requests.get(&res).and_then(amount).filter(|(_, m)| *m != 0);
        let l = limits.get(&res).and_then(amount).filter(|(_, m)| *m != 0);
        match (r, l) {
            (None, _) => errs.push(format!(
                "{res} max limit to request ratio per {kind} is {b}, but no request is specified or request is 0"
            )),
            (_, None) => errs.push(format!(
                "{res} max limit to request ratio per {kind} is {b}, but no limit is specified or limit is 0"
            )),
            (Some((_, rm)), Some((_, lm))) => {
                let ratio = lm as f64 / rm as f64;
                if ratio * 1000.0 > bm as f64 {
                    errs.push(format!(
                        "{res} max limit to request ratio per {kind} is {b}, but provided ratio is {ratio:.6}"
                    ));
                }
            }
        }
    }
}

/// A Pod's requests or limits for the resources an item bounds: its containers' sum, or
/// its largest init container's when that is more (kube's pod resource rule), written as
/// a Quantity is.
fn pod_resources(pod: &Value, item: &Value, kind: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for bound in ["min", "max", "maxLimitRequestRatio"] {
        for res in item[bound]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            let (m, text) = crate::state::sim::pods::pod_amount(pod, kind, res);
            if let Some(t) = text {
                out.insert(
                    res.clone(),
                    json!(crate::state::quota::canonical_text(m, &t)),
                );
            }
        }
    }
    out
}

/// LimitRanger on a Pod's create: defaults, then the constraints; `Err` names every
/// violation (kube's aggregate: one, or `[a, b]`).
pub fn admit_pod(store: &Store, pod: &mut Value) -> Result<(), String> {
    let ns = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ranges = store.list(&gr("", "limitranges"), Some(&ns));
    if ranges.is_empty() {
        return Ok(());
    }
    let items: Vec<Value> = ranges
        .iter()
        .flat_map(|r| {
            r.value
                .pointer("/spec/limits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    // defaults: each Container item in turn, a later one's value over an earlier one's
    // (kube merges every item's defaults before applying them)
    let (mut limit_defaults, mut request_defaults) = (Map::new(), Map::new());
    for item in items.iter().filter(|i| i["type"] == "Container") {
        for (to, from) in [
            (&mut limit_defaults, "default"),
            (&mut request_defaults, "defaultRequest"),
        ] {
            for (res, v) in item[from].as_object().into_iter().flatten() {
                to.insert(res.clone(), v.clone());
            }
        }
    }
    for list in ["containers", "initContainers"] {
        let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in cs {
            for (kind, defaults) in [("limits", &limit_defaults), ("requests", &request_defaults)] {
                for (res, v) in defaults {
                    if c.pointer(&format!("/resources/{kind}/{res}")).is_none() {
                        if !c["resources"].is_object() {
                            c["resources"] = json!({});
                        }
                        if !c["resources"][kind].is_object() {
                            c["resources"][kind] = json!({});
                        }
                        c["resources"][kind][res] = v.clone();
                    }
                }
            }
        }
    }
    let mut errs = Vec::new();
    let of = |c: &Value, k: &str| {
        c.pointer(&format!("/resources/{k}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let containers: Vec<Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| {
            pod.pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    for item in &items {
        match item["type"].as_str() {
            Some("Container") => {
                for c in &containers {
                    check(
                        "Container",
                        item,
                        &of(c, "requests"),
                        &of(c, "limits"),
                        &mut errs,
                    );
                }
            }
            Some("Pod") => {
                let req = pod_resources(pod, item, "requests");
                let lim = pod_resources(pod, item, "limits");
                check("Pod", item, &req, &lim, &mut errs);
            }
            _ => {}
        }
    }
    // kube's aggregate error: each distinct message once, brackets for more than one
    let mut seen = std::collections::HashSet::new();
    errs.retain(|e| seen.insert(e.clone()));
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(limits: Value) -> Store {
        let mut st = Store::new(100);
        let mut lr = json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "limits", "namespace": "shop"}, "spec": {"limits": limits}});
        item_defaults(&mut lr);
        st.put(&gr("", "limitranges"), lr);
        st
    }

    fn pod(resources: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}})
    }

    #[test]
    fn item_defaults_follow_the_api() {
        let mut lr = json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "2", "memory": "1Gi"}, "min": {"cpu": "100m"}, "default": {"memory": "512Mi"}},
            {"type": "Pod", "max": {"cpu": "4"}}]}});
        item_defaults(&mut lr);
        let c = &lr["spec"]["limits"][0];
        assert_eq!(
            c["default"],
            json!({"cpu": "2", "memory": "512Mi"}),
            "from max where unset"
        );
        assert_eq!(
            c["defaultRequest"],
            json!({"cpu": "2", "memory": "512Mi"}),
            "from default first"
        );
        assert!(
            lr["spec"]["limits"][1].get("default").is_none(),
            "Pod items get none"
        );
        let mut only_min =
            json!({"spec": {"limits": [{"type": "Container", "min": {"cpu": "100m"}}]}});
        item_defaults(&mut only_min);
        assert_eq!(
            only_min["spec"]["limits"][0]["defaultRequest"],
            json!({"cpu": "100m"})
        );
    }

    #[test]
    fn containers_get_defaults_and_violations_are_named() {
        let st = store_with(
            json!([{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "200m"}, "min": {"cpu": "100m"}, "max": {"cpu": "1", "memory": "1Gi"},
            "maxLimitRequestRatio": {"cpu": "4"}}]),
        );
        let mut p = pod(json!({}));
        admit_pod(&st, &mut p).unwrap();
        assert_eq!(
            p["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "200m", "memory": "256Mi"}})
        );
        // what the container says is kept
        let mut p = pod(json!({"requests": {"cpu": "300m"}, "limits": {"cpu": "600m"}}));
        admit_pod(&st, &mut p).unwrap();
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "300m"
        );
        let cases = [
            (
                json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "100m"}}),
                "minimum cpu usage per Container is 100m, but request is 50m",
            ),
            (
                json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}),
                "maximum cpu usage per Container is 1, but limit is 2",
            ),
            (
                json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "800m"}}),
                "cpu max limit to request ratio per Container is 4, but provided ratio is 8.000000",
            ),
        ];
        for (res, want) in cases {
            assert_eq!(
                admit_pod(&st, &mut pod(res.clone())).unwrap_err(),
                want,
                "{res}"
            );
        }
        let both = admit_pod(
            &st,
            &mut pod(json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "2", "memory": "2Gi"}})),
        )
        .unwrap_err();
        assert!(
            both.starts_with('[')
                && both.contains("minimum cpu")
                && both.contains("maximum memory"),
            "{both}"
        );
    }

    #[test]
    fn bad_quantities_are_422_and_good_ones_are_written_as_quantities() {
        let mut lr = json!({"spec": {"limits": [{"type": "Container",
            "max": {"cpu": "1000m", "memory": "abc"}, "min": {"cpu": "-1"}}]}});
        let errs = validate(&mut lr).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.limits[0].max[memory]", "spec.limits[0].min[cpu]"]
        );
        let mut ok = json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1000m"}}]}});
        validate(&mut ok).unwrap();
        assert_eq!(ok["spec"]["limits"][0]["max"]["cpu"], "1");
    }

    #[test]
    fn the_same_violation_of_two_containers_is_said_once() {
        let st = store_with(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let mut p = json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2"}}},
            {"name": "b", "resources": {"limits": {"cpu": "2"}}}]}});
        assert_eq!(
            admit_pod(&st, &mut p).unwrap_err(),
            "maximum cpu usage per Container is 1, but limit is 2"
        );
    }

    #[test]
    fn pod_items_check_the_sum_and_other_namespaces_are_free() {
        let st = store_with(json!([{"type": "Pod", "max": {"cpu": "1"}}]));
        let mut p = json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "600m"}}},
            {"name": "b", "resources": {"limits": {"cpu": "600m"}}}]}});
        assert_eq!(
            admit_pod(&st, &mut p).unwrap_err(),
            "maximum cpu usage per Pod is 1, but limit is 1200m"
        );
        // the largest init container counts when it is more than the containers' sum
        let mut init = json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "2"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "100m"}}}]}});
        assert_eq!(
            admit_pod(&st, &mut init).unwrap_err(),
            "maximum cpu usage per Pod is 1, but limit is 2"
        );
        p["metadata"]["namespace"] = json!("other");
        assert!(admit_pod(&st, &mut p).is_ok());
    }
}
