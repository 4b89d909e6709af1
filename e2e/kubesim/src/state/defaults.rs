//! kube-apiserver's defaulting of workloads (pkg/apis/core/v1/defaults.go and
//! pkg/apis/apps/v1/defaults.go), applied on every write as kube-apiserver applies it when
//! it decodes a request: Pods and the Pod templates of Deployments, ReplicaSets,
//! StatefulSets, DaemonSets, Jobs and CronJobs, and those kinds' own specs, and HorizontalPodAutoscalers (min replicas 1, 80% CPU when no metric is given). What a client reads back is
//! then what a real cluster would show (`kubectl get -o yaml`, a controller comparing
//! what it wrote with what it reads).

use serde_json::{Value, json};

use crate::state::registry::ResourceType;

/// Sets `obj[key]` to `v` when it is absent or null.
fn or(obj: &mut Value, key: &str, v: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj[key] = v;
    }
}

/// Sets a string `obj[key]` to `v` when it is absent or empty.
fn or_str(obj: &mut Value, key: &str, v: &str) {
    if obj
        .get(key)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        obj[key] = json!(v);
    }
}

/// `SetDefaults_Container` and its ports': pull policy by tag, termination message,
/// protocol TCP.
fn container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    // the tag is what follows the last ':' after the last '/' (a registry port is not one)
    let last = image.rsplit('/').next().unwrap_or(image);
    let tag = last.split_once(':').map(|(_, t)| t);
    let latest = !image.contains('@') && tag.is_none_or(|t| t == "latest");
    or_str(
        c,
        "imagePullPolicy",
        if latest { "Always" } else { "IfNotPresent" },
    );
    or_str(c, "terminationMessagePath", "/dev/termination-log");
    or_str(c, "terminationMessagePolicy", "File");
    or(c, "resources", json!({}));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter(|p| p.is_object()) {
            or_str(p, "protocol", "TCP");
        }
    }
}

/// `SetDefaults_PodSpec`, and the containers'.
fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    or_str(spec, "dnsPolicy", "ClusterFirst");
    or_str(spec, "restartPolicy", "Always");
    or(spec, "securityContext", json!({}));
    or(spec, "terminationGracePeriodSeconds", json!(30));
    or_str(spec, "schedulerName", "default-scheduler");
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container);
        }
    }
}

/// `SetDefaults_Pod`: service links on, and a resource's request is its limit when only
/// the limit is given.
pub(crate) fn pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    pod_spec(spec);
    or(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(limits) = c
                .pointer("/resources/limits")
                .and_then(Value::as_object)
                .cloned()
            else {
                continue;
            };
            for (k, v) in limits {
                if c.pointer(&format!("/resources/requests/{k}")).is_none() {
                    c["resources"]["requests"][k] = v;
                }
            }
        }
    }
}

/// The template's Pod spec, when the spec has a template.
fn template(spec: &mut Value) {
    if let Some(t) = spec.pointer_mut("/template/spec") {
        pod_spec(t);
    }
}

/// An update strategy `spec[field]`: RollingUpdate unless set, and then its
/// `rollingUpdate` parameters' defaults.
fn rolling(spec: &mut Value, field: &str, defaults: &[(&str, Value)]) {
    or(spec, field, json!({}));
    let strategy = &mut spec[field];
    or_str(strategy, "type", "RollingUpdate");
    if strategy["type"] == "RollingUpdate" {
        or(strategy, "rollingUpdate", json!({}));
        for (k, v) in defaults {
            or(&mut strategy["rollingUpdate"], k, v.clone());
        }
    }
}

/// `SetDefaults_Job`, and its template's Pod spec (whose restart policy then defaults
/// to Always, which a Job's validation refuses, as kube-apiserver's does).
fn job_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    template(spec);
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    or(spec, "parallelism", json!(1));
    or(spec, "backoffLimit", json!(6));
    or_str(spec, "completionMode", "NonIndexed");
    or(spec, "suspend", json!(false));
    or_str(spec, "podReplacementPolicy", "TerminatingOrFailed");
}

/// The defaults of `rt`'s objects, applied to `obj`.
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => pod(obj),
        ("batch", "jobs") => {
            if let Some(spec) = obj.get_mut("spec") {
                job_spec(spec);
            }
        }
        ("batch", "cronjobs") => {
            let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
                return;
            };
            or_str(spec, "concurrencyPolicy", "Allow");
            or(spec, "suspend", json!(false));
            or(spec, "successfulJobsHistoryLimit", json!(3));
            or(spec, "failedJobsHistoryLimit", json!(1));
            if let Some(j) = spec.pointer_mut("/jobTemplate/spec") {
                job_spec(j);
            }
        }
        ("autoscaling", "horizontalpodautoscalers") => {
            let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
                return;
            };
            or(spec, "minReplicas", json!(1));
            if spec
                .get("metrics")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]);
            }
        }
        ("apps", kind @ ("deployments" | "replicasets" | "statefulsets" | "daemonsets")) => {
            let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
                return;
            };
            template(spec);
            if kind != "daemonsets" {
                or(spec, "replicas", json!(1));
            }
            match kind {
                "deployments" => {
                    rolling(
                        spec,
                        "strategy",
                        &[("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))],
                    );
                    or(spec, "revisionHistoryLimit", json!(10));
                    or(spec, "progressDeadlineSeconds", json!(600));
                }
                "statefulsets" => {
                    or_str(spec, "podManagementPolicy", "OrderedReady");
                    rolling(spec, "updateStrategy", &[("partition", json!(0))]);
                    or(spec, "revisionHistoryLimit", json!(10));
                    or(
                        spec,
                        "persistentVolumeClaimRetentionPolicy",
                        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                    );
                }
                "daemonsets" => {
                    rolling(
                        spec,
                        "updateStrategy",
                        &[("maxUnavailable", json!(1)), ("maxSurge", json!(0))],
                    );
                    or(spec, "revisionHistoryLimit", json!(10));
                }
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::registry::Registry;

    #[test]
    fn a_bare_deployment_reads_back_as_kube_apiserver_defaults_it() {
        let reg = Registry::builtin();
        let rt = reg.get("apps", "v1", "deployments").unwrap();
        let mut d = json!({"spec": {"selector": {"matchLabels": {"app": "w"}}, "template": {"metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{"name": "w", "image": "nginx", "ports": [{"containerPort": 80}]},
                {"name": "s", "image": "registry:5000/side:1.2"}, {"name": "d", "image": "x@sha256:abc"}]}}}});
        apply(&rt, &mut d);
        let s = &d["spec"];
        assert_eq!(s["replicas"], 1);
        assert_eq!(
            s["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(
            (&s["revisionHistoryLimit"], &s["progressDeadlineSeconds"]),
            (&json!(10), &json!(600))
        );
        let p = &s["template"]["spec"];
        assert_eq!(
            (
                &p["restartPolicy"],
                &p["dnsPolicy"],
                &p["schedulerName"],
                &p["terminationGracePeriodSeconds"]
            ),
            (
                &json!("Always"),
                &json!("ClusterFirst"),
                &json!("default-scheduler"),
                &json!(30)
            )
        );
        assert_eq!(p["securityContext"], json!({}));
        assert!(
            p.get("enableServiceLinks").is_none(),
            "a Pod's, not a template's"
        );
        let c = &p["containers"];
        assert_eq!(c[0]["imagePullPolicy"], "Always", "no tag");
        assert_eq!(
            c[1]["imagePullPolicy"], "IfNotPresent",
            "a tag, after a registry port"
        );
        assert_eq!(c[2]["imagePullPolicy"], "IfNotPresent", "a digest");
        assert_eq!(c[0]["ports"][0]["protocol"], "TCP");
        assert_eq!(c[0]["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c[0]["resources"], json!({}));
        // what is set stays
        let mut again = d.clone();
        again["spec"]["strategy"] = json!({"type": "Recreate"});
        apply(&rt, &mut again);
        assert_eq!(again["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn statefulsets_and_daemonsets_get_their_update_strategies() {
        let reg = Registry::builtin();
        let sts = reg.get("apps", "v1", "statefulsets").unwrap();
        let mut o = json!({"spec": {"template": {"spec": {"containers": []}}}});
        apply(&sts, &mut o);
        assert_eq!(
            o["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            (&o["spec"]["podManagementPolicy"], &o["spec"]["replicas"]),
            (&json!("OrderedReady"), &json!(1))
        );
        let ds = reg.get("apps", "v1", "daemonsets").unwrap();
        let mut o = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
        apply(&ds, &mut o);
        assert_eq!(o["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
        assert!(o["spec"].get("replicas").is_none());
        let mut o = json!({"spec": {}});
        apply(&ds, &mut o);
        assert_eq!(
            o["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"maxUnavailable": 1, "maxSurge": 0})
        );
    }

    #[test]
    fn a_job_gets_one_completion_and_its_template_the_pod_defaults() {
        let reg = Registry::builtin();
        let rt = reg.get("batch", "v1", "jobs").unwrap();
        let mut j = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
        apply(&rt, &mut j);
        let s = &j["spec"];
        assert_eq!(
            (
                &s["completions"],
                &s["parallelism"],
                &s["backoffLimit"],
                &s["completionMode"]
            ),
            (&json!(1), &json!(1), &json!(6), &json!("NonIndexed"))
        );
        assert_eq!(s["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(s["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        // parallelism alone: completions stays unset (a work queue)
        let mut q =
            json!({"spec": {"parallelism": 3, "template": {"spec": {"restartPolicy": "Never"}}}});
        apply(&rt, &mut q);
        assert!(q["spec"].get("completions").is_none());
        assert_eq!(q["spec"]["template"]["spec"]["restartPolicy"], "Never");
        let cj = reg.get("batch", "v1", "cronjobs").unwrap();
        let mut c = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}}});
        apply(&cj, &mut c);
        assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(c["spec"]["jobTemplate"]["spec"]["backoffLimit"], 6);
    }

    #[test]
    fn a_pods_requests_default_to_its_limits() {
        let reg = Registry::builtin();
        let rt = reg.get("", "v1", "pods").unwrap();
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "busybox:latest",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}});
        apply(&rt, &mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(p["spec"]["enableServiceLinks"], true);
    }
}
