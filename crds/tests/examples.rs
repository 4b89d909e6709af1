//! Every document in `examples/*.yaml` must
//! - decode into its Rust type and encode back to the same JSON (nothing lost),
//! - for custom resources, validate against the generated CRD schema of its
//!   version (types, required fields, enums, limits, and no field the API
//!   server would prune),
//! - use only namespaces that exist on a fresh cluster or that the examples create.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use causeway_crds::crdgen::{all_crds, version_schema};
use causeway_crds::exported_service::ExportedService;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use causeway_crds::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use causeway_crds::federation::work::Work;
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mcs::{v1alpha1, v1beta1};
use causeway_crds::names::derived_service_name;
use causeway_crds::well_known::{INGRESS_CONTROLLER, labels};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressClass;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One YAML document of one example file.
struct Doc {
    file: String,
    value: Value,
}

impl Doc {
    fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    fn at(&self) -> String {
        let name = self
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        format!("{} ({} {name})", self.file, self.kind())
    }
}

fn load_examples() -> Vec<Doc> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no examples in {}", dir.display());
    let mut docs = Vec::new();
    for path in paths {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(&path).expect("read example");
        let values: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{file}: invalid YAML: {e}"));
        assert!(!values.is_empty(), "{file}: no documents");
        docs.extend(
            values
                .into_iter()
                .filter(|v| !v.is_null())
                .map(|value| Doc {
                    file: file.clone(),
                    value,
                }),
        );
    }
    docs
}

/// Decodes `doc` as `T` and encodes it again; the result must equal the input.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Doc) -> Result<(), String> {
    let typed: T =
        serde_json::from_value(doc.value.clone()).map_err(|e| format!("does not decode: {e}"))?;
    let mut back = serde_json::to_value(&typed).map_err(|e| format!("does not encode: {e}"))?;
    // A missing optional spec decodes as an empty one.
    if doc.value.get("spec").is_none() && back.get("spec") == Some(&serde_json::json!({})) {
        back.as_object_mut().unwrap().remove("spec");
    }
    if back != doc.value {
        return Err(format!(
            "changes in a decode/encode round trip:\n  input:  {}\n  output: {back}",
            doc.value
        ));
    }
    Ok(())
}

fn round_trip_by_kind(doc: &Doc) -> Result<(), String> {
    match (doc.api_version(), doc.kind()) {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "Service") => round_trip::<Service>(doc),
        ("discovery.k8s.io/v1", "EndpointSlice") => round_trip::<EndpointSlice>(doc),
        ("networking.k8s.io/v1", "IngressClass") => round_trip::<IngressClass>(doc),
        ("multicluster.x-k8s.io/v1beta1", "ServiceExport") => {
            round_trip::<v1beta1::ServiceExport>(doc)
        }
        ("multicluster.x-k8s.io/v1alpha1", "ServiceExport") => {
            round_trip::<v1alpha1::ServiceExport>(doc)
        }
        ("multicluster.x-k8s.io/v1beta1", "ServiceImport") => {
            round_trip::<v1beta1::ServiceImport>(doc)
        }
        ("multicluster.x-k8s.io/v1alpha1", "ServiceImport") => {
            round_trip::<v1alpha1::ServiceImport>(doc)
        }
        ("networking.karmada.io/v1alpha1", "MultiClusterIngress") => {
            round_trip::<MultiClusterIngress>(doc)
        }
        ("causeway.io/v1alpha1", "Cluster") => round_trip::<Cluster>(doc),
        ("causeway.io/v1alpha1", "ExportedService") => round_trip::<ExportedService>(doc),
        ("causeway.io/v1alpha1", "PropagationPolicy") => round_trip::<PropagationPolicy>(doc),
        ("causeway.io/v1alpha1", "ClusterPropagationPolicy") => {
            round_trip::<ClusterPropagationPolicy>(doc)
        }
        ("causeway.io/v1alpha1", "OverridePolicy") => round_trip::<OverridePolicy>(doc),
        ("causeway.io/v1alpha1", "ClusterOverridePolicy") => {
            round_trip::<ClusterOverridePolicy>(doc)
        }
        ("causeway.io/v1alpha1", "Work") => round_trip::<Work>(doc),
        (api_version, kind) => Err(format!(
            "no Rust type for {api_version} {kind}; add it to this test"
        )),
    }
}

#[test]
fn every_example_round_trips_through_its_rust_type() {
    let problems: Vec<String> = load_examples()
        .iter()
        .filter_map(|doc| {
            round_trip_by_kind(doc)
                .err()
                .map(|e| format!("{}: {e}", doc.at()))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn custom_resource_examples_validate_against_the_crds() {
    let crds = all_crds();
    let mut problems = Vec::new();
    for doc in load_examples() {
        let (group, version) = doc
            .api_version()
            .split_once('/')
            .unwrap_or(("", doc.api_version()));
        let Some(crd) = crds
            .iter()
            .find(|c| c.spec.group == group && c.spec.names.kind == doc.kind())
        else {
            continue; // a built-in kind
        };
        if doc.value.pointer("/metadata/namespace").is_some() != (crd.spec.scope == "Namespaced") {
            problems.push(format!(
                "{}: metadata.namespace does not fit scope {}",
                doc.at(),
                crd.spec.scope
            ));
        }
        if !crd
            .spec
            .versions
            .iter()
            .any(|v| v.name == version && v.served)
        {
            problems.push(format!("{}: version {version} is not served", doc.at()));
            continue;
        }
        let schema = serde_json::to_value(version_schema(crd, version).expect("schema")).unwrap();
        let mut errors = Vec::new();
        validate_root(&doc.value, &schema, &mut errors);
        problems.extend(errors.into_iter().map(|e| format!("{}: {e}", doc.at())));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn examples_cover_the_required_kinds_and_namespaces() {
    let docs = load_examples();
    let present: BTreeSet<(String, String)> = docs
        .iter()
        .map(|d| (d.api_version().to_owned(), d.kind().to_owned()))
        .collect();
    for (api_version, kind) in [
        ("v1", "Namespace"),
        ("v1", "Service"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("networking.k8s.io/v1", "IngressClass"),
        ("multicluster.x-k8s.io/v1beta1", "ServiceExport"),
        ("multicluster.x-k8s.io/v1alpha1", "ServiceExport"),
        ("multicluster.x-k8s.io/v1beta1", "ServiceImport"),
        ("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
        ("networking.karmada.io/v1alpha1", "MultiClusterIngress"),
        ("causeway.io/v1alpha1", "Cluster"),
        ("causeway.io/v1alpha1", "PropagationPolicy"),
        ("causeway.io/v1alpha1", "OverridePolicy"),
    ] {
        assert!(
            present.contains(&(api_version.into(), kind.into())),
            "no example of {api_version} {kind}"
        );
    }

    let created: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d.kind() == "Namespace")
        .filter_map(|d| d.value.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    for doc in &docs {
        if let Some(ns) = doc
            .value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            assert!(
                ns == "default" || created.contains(ns),
                "{}: namespace {ns} is neither `default` nor created by an example",
                doc.at()
            );
        }
    }
    let first = docs.first().expect("examples");
    assert!(
        first.file.starts_with("00-") && first.kind() == "Namespace",
        "00-namespace.yaml must come first"
    );
}

#[test]
fn examples_use_the_well_known_names() {
    for doc in load_examples() {
        match doc.kind() {
            "IngressClass" => {
                assert_eq!(
                    doc.value
                        .pointer("/spec/controller")
                        .and_then(Value::as_str),
                    Some(INGRESS_CONTROLLER)
                );
            }
            "EndpointSlice" => {
                let l = &doc.value["metadata"]["labels"];
                if let Some(service) = l[labels::SERVICE_NAME].as_str() {
                    let ns = doc.value["metadata"]["namespace"].as_str().unwrap();
                    assert_eq!(
                        l[labels::ENDPOINTSLICE_MANAGED_BY],
                        labels::ENDPOINTSLICE_MANAGED_BY_VALUE
                    );
                    assert!(l[labels::SOURCE_CLUSTER].is_string(), "{}", doc.at());
                    assert_eq!(
                        l[labels::KUBERNETES_SERVICE_NAME],
                        derived_service_name(ns, service).as_str()
                    );
                }
            }
            _ => {}
        }
    }
}

// === a small structural-schema validator (what kube-apiserver checks) ===

fn validate_root(value: &Value, schema: &Value, errors: &mut Vec<String>) {
    let Some(obj) = value.as_object() else {
        errors.push("document is not an object".into());
        return;
    };
    let mut rest = obj.clone();
    for meta in ["apiVersion", "kind", "metadata"] {
        rest.remove(meta);
    }
    validate(&Value::Object(rest), schema, "", errors);
}

fn validate(value: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if value.is_null() {
        if !flag("nullable") {
            errors.push(format!("{at}: null is not allowed"));
        }
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if flag("x-kubernetes-int-or-string") {
        if !(value.is_i64() || value.is_string()) {
            errors.push(format!("{at}: {value} is neither an integer nor a string"));
        }
        return;
    }
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => validate_object(value, schema, path, preserve, errors),
        Some("array") => validate_array(value, schema, path, errors),
        Some("string") => {
            if !value.is_string() {
                errors.push(format!("{at}: {value} is not a string"));
            }
        }
        Some("integer") => match value.as_i64() {
            None => errors.push(format!("{at}: {value} is not an integer")),
            Some(n) => {
                if schema.get("format").and_then(Value::as_str) == Some("int32")
                    && i32::try_from(n).is_err()
                {
                    errors.push(format!("{at}: {n} does not fit int32"));
                }
                if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                    && (n as f64) < min
                {
                    errors.push(format!("{at}: {n} is below the minimum {min}"));
                }
            }
        },
        Some("number") => {
            if !value.is_number() {
                errors.push(format!("{at}: {value} is not a number"));
            }
        }
        Some("boolean") => {
            if !value.is_boolean() {
                errors.push(format!("{at}: {value} is not a boolean"));
            }
        }
        None if preserve => {}
        other => errors.push(format!("{at}: unexpected schema type {other:?}")),
    }
}

fn validate_object(
    value: &Value,
    schema: &Value,
    path: &str,
    preserve: bool,
    errors: &mut Vec<String>,
) {
    let at = if path.is_empty() { "<root>" } else { path };
    let Some(obj) = value.as_object() else {
        errors.push(format!("{at}: {value} is not an object"));
        return;
    };
    if schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true)
    {
        for key in ["apiVersion", "kind", "metadata"] {
            if !obj.contains_key(key) {
                errors.push(format!("{at}: embedded resource without {key}"));
            }
        }
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = required.as_str().unwrap_or_default();
        if !obj.contains_key(key) {
            errors.push(format!("{at}: required field {key} is missing"));
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (key, child) in obj {
        let child_path = format!("{path}.{key}");
        if let Some(child_schema) = props.and_then(|p| p.get(key)) {
            validate(child, child_schema, &child_path, errors);
        } else if let Some(child_schema) = additional {
            validate(child, child_schema, &child_path, errors);
        } else if !preserve {
            errors.push(format!(
                "{child_path}: unknown field (the API server would prune it)"
            ));
        }
    }
}

fn validate_array(value: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(items) = value.as_array() else {
        errors.push(format!("{path}: {value} is not an array"));
        return;
    };
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errors.push(format!(
            "{path}: {} items, at most {max} allowed",
            items.len()
        ));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        errors.push(format!(
            "{path}: {} items, at least {min} required",
            items.len()
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate(item, item_schema, &format!("{path}[{i}]"), errors);
        }
    }
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    if list_type == Some("map") {
        let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut seen = BTreeSet::new();
        for item in items {
            let key: Vec<String> = keys.iter().map(|k| item[*k].to_string()).collect();
            if !seen.insert(key.clone()) {
                errors.push(format!("{path}: duplicate list-map key {key:?}"));
            }
        }
    }
    if list_type == Some("set") {
        let mut seen = BTreeSet::new();
        for item in items {
            if !seen.insert(item.to_string()) {
                errors.push(format!("{path}: duplicate set item {item}"));
            }
        }
    }
}
