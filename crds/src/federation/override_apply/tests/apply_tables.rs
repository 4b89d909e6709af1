//! D.26, D.27, D.30 and the command/args/labels/annotations overriders, with
//! exact outputs and messages.

use serde_json::{Value, json};

use super::{apply_one, deployment};
use crate::federation::override_apply::{OverriderKind, display_path};

/// Applies `o` to `manifest` and returns the value at `at` in the result.
pub(super) fn at(manifest: &Value, o: Value, at: &str) -> Value {
    let (out, _) = apply_one(manifest, o).unwrap_or_else(|e| panic!("{e}"));
    out.pointer(at).cloned().unwrap_or(Value::Null)
}

pub(super) fn err(manifest: &Value, o: Value) -> String {
    apply_one(manifest, o).expect_err("should fail").to_string()
}

#[test]
fn plaintext_json_patch_subset_d26() {
    let d = deployment();
    // (case, overriders, pointer, expected value there)
    let table = [
        (
            "replace a scalar",
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 5}]}),
            "/spec/replicas",
            json!(5),
        ),
        (
            "op defaults to replace",
            json!({"plaintext": [{"path": "/spec/replicas", "value": 7}]}),
            "/spec/replicas",
            json!(7),
        ),
        (
            "add a new field",
            json!({"plaintext": [{"path": "/spec/paused", "operator": "add", "value": true}]}),
            "/spec/paused",
            json!(true),
        ),
        (
            "add creates missing parents",
            json!({"plaintext": [{"path": "/metadata/annotations/a", "operator": "add", "value": "1"}]}),
            "/metadata/annotations",
            json!({"a": "1"}),
        ),
        (
            "remove a field",
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "remove"}]}),
            "/spec/replicas",
            Value::Null,
        ),
        (
            "append with -",
            json!({"plaintext": [{"path": "/spec/template/spec/containers/0/args/-", "operator": "add", "value": "-q"}]}),
            "/spec/template/spec/containers/0/args",
            json!(["-g", "daemon off;", "-q"]),
        ),
        (
            "append with - through a missing list makes the list",
            json!({"plaintext": [{"path": "/spec/template/spec/containers/0/env/-", "operator": "add", "value": {"name": "X", "value": "1"}}]}),
            "/spec/template/spec/containers/0/env",
            json!([{"name": "X", "value": "1"}]),
        ),
        (
            "index 0 through a missing list makes the list",
            json!({"plaintext": [{"path": "/spec/template/spec/tolerations/0", "operator": "add", "value": {"key": "k", "operator": "Exists"}}]}),
            "/spec/template/spec/tolerations",
            json!([{"key": "k", "operator": "Exists"}]),
        ),
        (
            "insert at an index",
            json!({"plaintext": [{"path": "/spec/template/spec/containers/0/args/0", "operator": "add", "value": "-q"}]}),
            "/spec/template/spec/containers/0/args",
            json!(["-q", "-g", "daemon off;"]),
        ),
        (
            "add of labels with an object merges keys",
            json!({"plaintext": [{"path": "/metadata/labels", "operator": "add", "value": {"tier": "fe"}}]}),
            "/metadata/labels",
            json!({"app": "web", "tier": "fe"}),
        ),
        (
            "replace of labels with an object replaces the map",
            json!({"plaintext": [{"path": "/metadata/labels", "operator": "replace", "value": {"tier": "fe"}}]}),
            "/metadata/labels",
            json!({"tier": "fe"}),
        ),
        (
            "escaped keys",
            json!({"plaintext": [{"path": "/metadata/labels/example.com~1x", "operator": "add", "value": "y"}]}),
            "/metadata/labels/example.com~1x",
            json!("y"),
        ),
        (
            "apiVersion may be overridden",
            json!({"plaintext": [{"path": "/apiVersion", "operator": "replace", "value": "apps/v2"}]}),
            "/apiVersion",
            json!("apps/v2"),
        ),
    ];
    for (case, o, p, want) in table {
        assert_eq!(at(&d, o, p), want, "{case}");
    }
    // a null on the way is as good as missing: the list or map is made
    let mut nulls = d.clone();
    nulls["spec"]["template"]["spec"]["tolerations"] = Value::Null;
    nulls["spec"]["template"]["spec"]["nodeSelector"] = Value::Null;
    let o = json!({"plaintext": [{"path": "/spec/template/spec/tolerations/0", "operator": "add", "value": {"key": "gpu"}}]});
    assert_eq!(
        at(&nulls, o, "/spec/template/spec/tolerations"),
        json!([{"key": "gpu"}])
    );
    let o = json!({"plaintext": [{"path": "/spec/template/spec/nodeSelector/disk", "operator": "add", "value": "ssd"}]});
    assert_eq!(
        at(&nulls, o, "/spec/template/spec/nodeSelector"),
        json!({"disk": "ssd"})
    );
    // add into /metadata/annotations with an object value adds keys to existing ones.
    let mut with = d.clone();
    with["metadata"]["annotations"] = json!({"keep": "me"});
    let o = json!({"plaintext": [{"path": "/metadata/annotations", "operator": "add", "value": {"new": "v"}}]});
    assert_eq!(
        at(&with, o, "/metadata/annotations"),
        json!({"keep": "me", "new": "v"})
    );
}

#[test]
fn plaintext_errors_say_what_and_how_to_fix() {
    let d = deployment();
    let p = "OverridePolicy prod/registry rule 0, plaintext[0]";
    let table = [
        (
            json!({"plaintext": [{"path": "/spec/nope", "operator": "remove"}]}),
            format!(
                "{p}: cannot remove /spec/nope: it does not exist in the manifest; fix the path, or use add to create it"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/spec/nope/x", "operator": "replace", "value": 1}]}),
            format!(
                "{p}: cannot replace /spec/nope/x: it does not exist in the manifest; fix the path, or use add to create it"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/metadata/name", "operator": "replace", "value": "x"}]}),
            format!(
                "{p}: /metadata/name may not be overridden because it changes /metadata/name, which Causeway takes from the template; override another field"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/metadata", "operator": "remove"}]}),
            format!(
                "{p}: /metadata may not be overridden because it changes /metadata/name, which Causeway takes from the template; override another field"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/kind", "operator": "replace", "value": "Pod"}]}),
            format!(
                "{p}: /kind may not be overridden because it changes /kind, which Causeway takes from the template; override another field"
            ),
        ),
        (
            json!({"plaintext": [{"path": "spec/replicas", "operator": "replace", "value": 1}]}),
            format!(
                "{p}: path \"spec/replicas\" is not a JSON pointer: it does not start with '/'; write it like /spec/replicas (RFC 6901)"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace"}]}),
            format!("{p}: replace needs a value; set value, or use remove"),
        ),
        (
            json!({"plaintext": [{"path": "/spec/replicas/x", "operator": "add", "value": 1}]}),
            format!(
                "{p}: cannot add under /spec/replicas: it is a number, not an object or an array"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/spec/template/spec/containers/9", "operator": "remove"}]}),
            format!(
                "{p}: the index in /spec/template/spec/containers/9 is past the end of the array (length 2)"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/spec/template/spec/containers/x/image", "operator": "replace", "value": "a"}]}),
            format!(
                "{p}: \"x\" in /spec/template/spec/containers/x is not an array index: use 0 to 2 or - (append)"
            ),
        ),
        (
            json!({"plaintext": [{"path": "/spec/template/spec/containers/0/args/5", "operator": "add", "value": "a"}]}),
            format!(
                "{p}: the index in /spec/template/spec/containers/0/args/5 is past the end of the array (length 2)"
            ),
        ),
    ];
    for (o, want) in table {
        assert_eq!(err(&d, o), want);
    }
}

/// D.26 for every overrider with a path: an image overrider's predicate may not point
/// at what Causeway takes from the template either (a stored policy the webhook never
/// saw would otherwise move the copy to another namespace or rename it).
#[test]
fn an_image_predicate_may_not_point_at_the_objects_identity() {
    let d = deployment();
    for path in ["/metadata/namespace", "/metadata/name", "/kind"] {
        let o = json!({"imageOverrider": [{"predicate": {"path": path},
            "component": "Repository", "operator": "replace", "value": "kube-system"}]});
        let e = err(&d, o);
        assert!(
            e.contains(&format!(
                "{path} may not be overridden because it changes {path}"
            )),
            "{path}: {e}"
        );
    }
}

#[test]
fn order_within_a_rule_d27() {
    // Image Tag=v2 runs first; the plaintext replace of the same image runs last and wins.
    let img = "/spec/template/spec/containers/0/image";
    let o = json!({
        "plaintext": [{"path": img, "operator": "replace", "value": "mine:final"}],
        "imageOverrider": [{"component": "Tag", "operator": "replace", "value": "v2"}],
    });
    let (out, prov) = apply_one(&deployment(), o).unwrap();
    assert_eq!(out.pointer(img), Some(&json!("mine:final")));
    assert_eq!(prov.get(img).unwrap().overrider, OverriderKind::Plaintext);
    // The other containers keep the image overrider as their origin.
    let other = "/spec/template/spec/containers/1/image";
    assert_eq!(out.pointer(other), Some(&json!("host:10443/a/b:v2")));
    assert_eq!(prov.get(other).unwrap().overrider, OverriderKind::Image);
    // Labels run before annotations and both before plaintext: plaintext sees the label.
    let o = json!({
        "plaintext": [{"path": "/metadata/labels/tier", "operator": "replace", "value": "be"}],
        "labelsOverrider": [{"operator": "add", "value": {"tier": "fe"}}],
    });
    assert_eq!(at(&deployment(), o, "/metadata/labels/tier"), json!("be"));
}

#[test]
fn command_and_args_overriders() {
    let d = deployment();
    let c0 = "/spec/template/spec/containers/0";
    // (overriders, pointer, expected)
    let table = [
        (
            json!({"commandOverrider": [{"containerName": "app", "operator": "add", "value": ["-c", "/etc/n.conf"]}]}),
            format!("{c0}/command"),
            json!(["nginx", "-c", "/etc/n.conf"]),
        ),
        (
            json!({"commandOverrider": [{"containerName": "app", "operator": "remove", "value": ["nginx"]}]}),
            format!("{c0}/command"),
            Value::Null,
        ),
        (
            json!({"argsOverrider": [{"containerName": "app", "operator": "remove", "value": ["-g"]}]}),
            format!("{c0}/args"),
            json!(["daemon off;"]),
        ),
        (
            json!({"argsOverrider": [{"containerName": "sidecar", "operator": "add", "value": ["--v=2"]}]}),
            "/spec/template/spec/containers/1/args".into(),
            json!(["--v=2"]),
        ),
        (
            // init containers are not the overrider's, as in Karmada
            json!({"argsOverrider": [{"containerName": "init", "operator": "add", "value": ["x"]}]}),
            "/spec/template/spec/initContainers/0/args".into(),
            Value::Null,
        ),
        (
            json!({"argsOverrider": [{"containerName": "absent", "operator": "add", "value": ["x"]}]}),
            format!("{c0}/args"),
            json!(["-g", "daemon off;"]),
        ),
    ];
    for (o, p, want) in table {
        assert_eq!(at(&d, o.clone(), &p), want, "{o}");
    }
    assert_eq!(
        err(
            &d,
            json!({"argsOverrider": [{"containerName": "app", "operator": "replace", "value": ["x"]}]})
        ),
        "OverridePolicy prod/registry rule 0, argsOverrider[0]: operator replace on args is not supported; use add or remove"
    );
}

#[test]
fn labels_and_annotations_overriders() {
    let mut d = deployment();
    d["metadata"]["annotations"] = json!({"a": "1", "b": "2"});
    // (overriders, pointer, expected)
    let table = [
        (
            json!({"labelsOverrider": [{"operator": "add", "value": {"tier": "fe", "app": "web2"}}]}),
            "/metadata/labels",
            json!({"app": "web2", "tier": "fe"}),
        ),
        (
            json!({"labelsOverrider": [{"operator": "replace", "value": {"app": "x", "missing": "y"}}]}),
            "/metadata/labels",
            json!({"app": "x"}),
        ),
        (
            json!({"labelsOverrider": [{"operator": "remove", "value": {"app": "", "missing": ""}}]}),
            "/metadata/labels",
            json!({}),
        ),
        (
            json!({"annotationsOverrider": [{"operator": "remove", "value": {"a": ""}}]}),
            "/metadata/annotations",
            json!({"b": "2"}),
        ),
        (
            json!({"annotationsOverrider": [{"operator": "add", "value": {"c": "3"}}]}),
            "/metadata/annotations",
            json!({"a": "1", "b": "2", "c": "3"}),
        ),
    ];
    for (o, p, want) in table {
        assert_eq!(at(&d, o.clone(), p), want, "{o}");
    }
    // add creates the map; replace and remove on a missing map do nothing.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert_eq!(
        at(
            &bare,
            json!({"annotationsOverrider": [{"operator": "add", "value": {"k": "v"}}]}),
            "/metadata/annotations"
        ),
        json!({"k": "v"})
    );
    let o = json!({"annotationsOverrider": [{"operator": "replace", "value": {"k": "v"}}]});
    assert_eq!(apply_one(&bare, o).unwrap().0, bare);
}

#[test]
fn field_overrider_d30() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
    "data": {
        "app.yaml": "server:\n  port: 8080\n  host: 0.0.0.0\nlog:\n  level: info\n",
        "app.json": "{\"server\":{\"port\":8080,\"host\":\"0.0.0.0\"},\"log\":\"info\"}",
        "other": "untouched"
    }});
    let yaml = json!({"fieldOverrider": [{"fieldPath": "/data/app.yaml",
        "yaml": [{"subPath": "/server/port", "operator": "replace", "value": 9090}]}]});
    let (out, prov) = apply_one(&cm, yaml).unwrap();
    assert_eq!(
        out.pointer("/data/app.yaml"),
        Some(&json!(
            "server:\n  port: 9090\n  host: \"0.0.0.0\"\nlog:\n  level: info\n"
        ))
    );
    assert_eq!(out["data"]["app.json"], cm["data"]["app.json"]);
    assert_eq!(out["data"]["other"], json!("untouched"));
    // keys the override does not name keep their YAML 1.2 values: a country code NO,
    // a y flag and 1_000 stay strings (YAML 1.1 would make them false, true and 1000)
    let mut words = cm.clone();
    words["data"]["app.yaml"] = json!(
        "server:
  port: 8080
country: NO
verbose: y
limit: 1_000
"
    );
    let yaml = json!({"fieldOverrider": [{"fieldPath": "/data/app.yaml",
        "yaml": [{"subPath": "/server/port", "operator": "replace", "value": 9090}]}]});
    let text = at(&words, yaml, "/data/app.yaml");
    let reread: Value = serde_saphyr::from_str(text.as_str().unwrap()).unwrap();
    assert_eq!(
        (
            &reread["country"],
            &reread["verbose"],
            &reread["limit"],
            &reread["server"]["port"]
        ),
        (&json!("NO"), &json!("y"), &json!("1_000"), &json!(9090)),
        "{text}"
    );
    assert_eq!(
        display_path(prov.iter().next().unwrap().0),
        "data[\"app.yaml\"]"
    );
    let js = json!({"fieldOverrider": [{"fieldPath": "/data/app.json", "json": [
        {"subPath": "/server/port", "operator": "replace", "value": 9090},
        {"subPath": "/server/tls", "operator": "add", "value": true},
        {"subPath": "/log", "operator": "remove"}]}]});
    assert_eq!(
        at(&cm, js, "/data/app.json"),
        json!("{\"server\":{\"port\":9090,\"host\":\"0.0.0.0\",\"tls\":true}}")
    );
    let p = "OverridePolicy prod/registry rule 0, fieldOverrider[0]";
    let mut broken = cm.clone();
    broken["data"]["app.yaml"] = json!("server: [unclosed\n");
    let yaml = json!({"fieldOverrider": [{"fieldPath": "/data/app.yaml",
        "yaml": [{"subPath": "/server/port", "operator": "replace", "value": 9090}]}]});
    let e = err(&broken, yaml.clone());
    assert!(
        e.starts_with(&format!("{p}: /data/app.yaml does not hold valid YAML (")),
        "{e}"
    );
    assert!(e.ends_with("); fix the template or the fieldPath"), "{e}");
    let missing = json!({"fieldOverrider": [{"fieldPath": "/data/app.yaml",
        "yaml": [{"subPath": "/server/nope", "operator": "remove"}]}]});
    assert_eq!(
        err(&cm, missing),
        format!(
            "{p}: in the YAML document in /data/app.yaml: cannot remove /server/nope: it does not exist in the manifest; fix the path, or use add to create it"
        )
    );
    let not_string = json!({"fieldOverrider": [{"fieldPath": "/metadata",
        "json": [{"subPath": "/a", "operator": "remove"}]}]});
    assert_eq!(
        err(&cm, not_string),
        format!(
            "{p}: /metadata may not be overridden because it changes /metadata/name, which Causeway takes from the template; override another field"
        )
    );
    let not_string = json!({"fieldOverrider": [{"fieldPath": "/data",
        "json": [{"subPath": "/a", "operator": "remove"}]}]});
    assert_eq!(
        err(&cm, not_string),
        format!("{p}: /data is an object, not a string")
    );
}

#[test]
fn provenance_last_writer_wins_and_prints_for_people() {
    use super::rule;
    use crate::federation::override_apply::apply;
    let a = super::overriders(
        json!({"labelsOverrider": [{"operator": "add", "value": {"example.com/team": "a"}}],
                                      "plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 3}]}),
    );
    let b = super::overriders(
        json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 4}]}),
    );
    // c sets replicas back to the template's value: no longer a change, so not named.
    let c = super::overriders(
        json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 2}]}),
    );
    let (_, prov) = apply(
        &deployment(),
        &[(rule("prod", "a", 0), &a), (rule("prod", "b", 1), &b)],
    )
    .unwrap();
    assert_eq!(
        prov.to_string(),
        "metadata.labels[\"example.com/team\"] ← OverridePolicy prod/a rule 0 (labels)\n\
         spec.replicas ← OverridePolicy prod/b rule 1 (plaintext)\n"
    );
    let rules = [(rule("prod", "a", 0), &a), (rule("prod", "c", 0), &c)];
    let (_, prov) = apply(&deployment(), &rules).unwrap();
    assert!(prov.get("/spec/replicas").is_none(), "{prov}");
}

#[test]
fn two_policies_writing_one_path_are_found() {
    use super::rule;
    use crate::federation::override_apply::apply;
    let registry = super::overriders(
        json!({"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "mirror.example.com"}]}),
    );
    let pin = super::overriders(json!({"plaintext": [
        {"path": "/spec/template/spec/containers/0/image", "operator": "replace", "value": "nginx:1.27"}
    ]}));
    let template = super::overriders(json!({"plaintext": [
        {"path": "/spec/template/spec", "operator": "replace", "value": {"containers": [{"name": "app", "image": "x"}]}}
    ]}));
    let replicas = |n: i64| {
        super::overriders(
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": n}]}),
        )
    };
    let (three, four) = (replicas(3), replicas(4));
    use crate::federation::override_apply::RuleId;
    use crate::federation::overrides::Overriders;
    let said = |rules: &[(RuleId, &Overriders)]| -> Vec<String> {
        let (_, prov) = apply(&deployment(), rules).unwrap();
        prov.overlaps().iter().map(ToString::to_string).collect()
    };
    // one path, two policies: the later wins, and it is said
    assert_eq!(
        said(&[
            (rule("prod", "registry", 0), &registry),
            (rule("prod", "pin", 0), &pin)
        ]),
        [
            "spec.template.spec.containers[0].image: OverridePolicy prod/pin rule 0 (plaintext) \
             overrides OverridePolicy prod/registry rule 0 (image)"
        ]
    );
    // a path around another policy's: it too
    assert_eq!(
        said(&[
            (rule("prod", "pin", 0), &pin),
            (rule("prod", "tpl", 0), &template)
        ]),
        [
            "spec.template.spec: OverridePolicy prod/tpl rule 0 (plaintext) overrides \
             OverridePolicy prod/pin rule 0 (plaintext)"
        ]
    );
    // and a path inside another policy's
    assert_eq!(
        said(&[
            (rule("prod", "tpl", 0), &template),
            (rule("prod", "pin", 0), &pin)
        ]),
        [
            "spec.template.spec.containers[0].image: OverridePolicy prod/pin rule 0 \
             (plaintext) overrides OverridePolicy prod/tpl rule 0 (plaintext)"
        ]
    );
    // one policy's rules layering on each other are its own business
    assert!(
        said(&[
            (rule("prod", "a", 0), &three),
            (rule("prod", "a", 1), &four)
        ])
        .is_empty()
    );
    // different paths: nothing to say
    assert!(
        said(&[
            (rule("prod", "a", 0), &three),
            (rule("prod", "pin", 0), &pin)
        ])
        .is_empty()
    );
    // inserting into a list overrides nothing (the items keep their values), before or
    // after another policy's write inside it
    let sidecar = super::overriders(json!({"plaintext": [
        {"path": "/spec/template/spec/containers/0", "operator": "add", "value": {"name": "proxy", "image": "envoy:1"}}
    ]}));
    assert!(
        said(&[
            (rule("prod", "registry", 0), &registry),
            (rule("prod", "mesh", 0), &sidecar)
        ])
        .is_empty()
    );
    assert!(
        said(&[
            (rule("prod", "mesh", 0), &sidecar),
            (rule("prod", "registry", 0), &registry)
        ])
        .is_empty()
    );
    // replacing a whole list (of another length) is a write over it
    let one = super::overriders(json!({"plaintext": [
        {"path": "/spec/template/spec/containers", "operator": "replace", "value": [{"name": "app", "image": "x"}]}
    ]}));
    assert_eq!(
        said(&[
            (rule("prod", "registry", 0), &registry),
            (rule("prod", "one", 0), &one)
        ]),
        [
            "spec.template.spec.containers: OverridePolicy prod/one rule 0 (plaintext) \
             overrides OverridePolicy prod/registry rule 0 (image)"
        ]
    );
}
