//! D.29: image references and the image overrider, with exact outputs.

use serde_json::json;

use super::apply_tables::{at, err};
use super::{apply_one, deployment};
use crate::federation::override_apply::ImageRef;

#[test]
fn image_references_parse_d29() {
    let digest = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
    // (image, registry, repository, tag, digest)
    let table = [
        ("nginx", None, "nginx", None, None),
        ("nginx:1.19", None, "nginx", Some("1.19"), None),
        ("library/nginx", None, "library/nginx", None, None),
        (
            "reg.io/nginx:1.19",
            Some("reg.io"),
            "nginx",
            Some("1.19"),
            None,
        ),
        ("localhost/app", Some("localhost"), "app", None, None),
        (
            "localhost:5000/app:v1",
            Some("localhost:5000"),
            "app",
            Some("v1"),
            None,
        ),
        (
            &format!("host:10443/a/b:1.2@{digest}"),
            Some("host:10443"),
            "a/b",
            Some("1.2"),
            Some(digest),
        ),
        (
            &format!("nginx@{digest}"),
            None,
            "nginx",
            None,
            Some(digest),
        ),
    ];
    for (image, registry, repository, tag, dg) in table {
        let r = ImageRef::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"));
        let want = ImageRef {
            registry: registry.map(Into::into),
            repository: repository.into(),
            tag: tag.map(Into::into),
            digest: dg.map(Into::into),
        };
        assert_eq!(r, want, "{image}");
        assert_eq!(r.to_string(), image, "round trip");
    }
    let bad = [
        (
            "",
            "an image reference must be non-empty and contain no spaces",
        ),
        (
            "reg.io/",
            "the repository (e.g. library/nginx) is missing or has an empty part",
        ),
        (
            "nginx@sha256:zz",
            "digest \"sha256:zz\" must look like algorithm:hex, e.g. sha256:2c26b4...",
        ),
        (
            "nginx:-x",
            "tag \"-x\" must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
        ),
    ];
    for (image, want) in bad {
        assert_eq!(ImageRef::parse(image).unwrap_err(), want, "{image:?}");
    }
}

#[test]
fn image_overrider_components_d29() {
    let digest = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
    let pod = |image: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                   "spec": {"containers": [{"name": "c", "image": image}]}})
    };
    let img = "/spec/containers/0/image";
    // (image, component, operator, value, result)
    let table = [
        (
            "nginx:1.19",
            "Registry",
            "replace",
            Some("reg.io"),
            "reg.io/nginx:1.19".to_string(),
        ),
        ("nginx:1.19", "Tag", "remove", None, "nginx".into()),
        (
            "nginx:1.19",
            "Tag",
            "replace",
            Some("v2"),
            "nginx:v2".into(),
        ),
        (
            "nginx:1.19",
            "Tag",
            "add",
            Some("-alpine"),
            "nginx:1.19-alpine".into(),
        ),
        (
            "nginx",
            "Registry",
            "add",
            Some("reg.io"),
            "reg.io/nginx".into(),
        ),
        (
            "reg.io/nginx",
            "Registry",
            "add",
            Some("-eu"),
            "reg.io-eu/nginx".into(),
        ),
        (
            "reg.io/nginx:1",
            "Registry",
            "remove",
            None,
            "nginx:1".into(),
        ),
        (
            "nginx:1",
            "Repository",
            "replace",
            Some("library/httpd"),
            "library/httpd:1".into(),
        ),
        (
            "nginx:1",
            "Repository",
            "add",
            Some("-slim"),
            "nginx-slim:1".into(),
        ),
        (
            &format!("host:10443/a/b:1.2@{digest}"),
            "Registry",
            "replace",
            Some("reg.io:5000"),
            format!("reg.io:5000/a/b:1.2@{digest}"),
        ),
        (
            &format!("host:10443/a/b:1.2@{digest}"),
            "Tag",
            "replace",
            Some("1.3"),
            "host:10443/a/b:1.3".into(),
        ),
        (
            &format!("host:10443/a/b:1.2@{digest}"),
            "Tag",
            "remove",
            None,
            "host:10443/a/b".into(),
        ),
        (
            "nginx:1.19",
            "Tag",
            "replace",
            Some(digest),
            format!("nginx@{digest}"),
        ),
    ];
    for (image, component, operator, value, want) in table {
        let o = json!({"imageOverrider": [{"component": component, "operator": operator, "value": value}]});
        assert_eq!(
            at(&pod(image), o, img),
            json!(want),
            "{component} {operator} on {image}"
        );
    }
    let p = "OverridePolicy prod/registry rule 0, imageOverrider[0]";
    let bad = [
        (
            "nginx",
            json!({"component": "Repository", "operator": "remove"}),
            format!(
                "{p}: image \"nginx\" at {img}: the Repository of an image cannot be removed; use replace"
            ),
        ),
        (
            "nginx",
            json!({"component": "Tag", "operator": "replace", "value": "bad tag"}),
            format!(
                "{p}: image \"nginx\" at {img}: the result nginx:bad tag is invalid: an image reference must be non-empty and contain no spaces"
            ),
        ),
        (
            "not an image!",
            json!({"component": "Tag", "operator": "remove"}),
            format!(
                "{p}: image \"not an image!\" at {img}: an image reference must be non-empty and contain no spaces"
            ),
        ),
    ];
    for (image, o, want) in bad {
        assert_eq!(err(&pod(image), json!({"imageOverrider": [o]})), want);
    }
}

#[test]
fn image_overrider_finds_every_workload_image() {
    let o = json!({"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "reg.io"}]});
    let (out, prov) = apply_one(&deployment(), o).unwrap();
    let spec = "/spec/template/spec";
    assert_eq!(
        out.pointer(&format!("{spec}/containers/0/image")),
        Some(&json!("reg.io/nginx:1.19"))
    );
    assert_eq!(
        out.pointer(&format!("{spec}/containers/1/image")),
        Some(&json!("reg.io/a/b:1.2"))
    );
    // init containers are left alone without a predicate, as Karmada does
    assert_eq!(
        out.pointer(&format!("{spec}/initContainers/0/image")),
        Some(&json!("busybox:1.36"))
    );
    assert_eq!(
        prov.to_string(),
        "spec.template.spec.containers[0].image ← OverridePolicy prod/registry rule 0 (image)\n\
         spec.template.spec.containers[1].image ← OverridePolicy prod/registry rule 0 (image)\n"
    );
    // a predicate reaches one
    let init = format!("{spec}/initContainers/0/image");
    let o = json!({"imageOverrider": [{"predicate": {"path": init}, "component": "Registry", "operator": "replace", "value": "reg.io"}]});
    let (out, _) = apply_one(&deployment(), o).unwrap();
    assert_eq!(out.pointer(&init), Some(&json!("reg.io/busybox:1.36")));
    // A CronJob's images are under its job template; a ConfigMap has none.
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "job:1"}]}}}}}});
    let o = json!({"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "reg.io"}]});
    assert_eq!(
        at(
            &cron,
            o.clone(),
            "/spec/jobTemplate/spec/template/spec/containers/0/image"
        ),
        json!("reg.io/job:1")
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"image": "x"}});
    assert_eq!(apply_one(&cm, o).unwrap().0, cm);
    // A predicate picks one field of any kind.
    let o = json!({"imageOverrider": [{"predicate": {"path": "/data/image"}, "component": "Tag", "operator": "replace", "value": "v2"}]});
    assert_eq!(at(&cm, o, "/data/image"), json!("x:v2"));
}
