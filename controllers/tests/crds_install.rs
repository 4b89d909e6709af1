//! `causeway crds install` against a kubesim cluster: creates every CRD, replaces its
//! own, never downgrades a newer Causeway's (nothing written when it refuses), keeps
//! another installer's Gateway API CRD, and `--force` replaces anyway (API-8).

use std::process::{Command, Output};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

mod support;

fn install(kubeconfig: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["crds", "install", "--timeout", "10s", "--kubeconfig"])
        .arg(kubeconfig)
        .args(extra)
        .output()
        .expect("causeway runs")
}

fn lines(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn crds_install_never_downgrades_and_keeps_another_installers_superset() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(kubesim::Server::start(kubesim::Config::new("hub")))
        .expect("kubesim starts");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let client = rt.block_on(support::client(&server));
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let total = causeway_crds::crdgen::all_crds().len();
    let release = causeway_crds::crdgen::install::RELEASE;
    let label = |name: &str| {
        rt.block_on(crds.get(name))
            .unwrap()
            .metadata
            .labels
            .unwrap_or_default()
            .get("causeway.io/release-version")
            .cloned()
    };

    // a fresh cluster: every CRD created and Established (the command waits)
    let out = install(&kubeconfig, &[]);
    let (stdout, stderr) = lines(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches(" created").count(), total, "{stdout}");
    assert!(stdout.contains("clusterproperties.about.k8s.io created"));
    assert_eq!(label("clusters.causeway.io").as_deref(), Some(release));

    // again: its own CRDs are replaced
    let out = install(&kubeconfig, &[]);
    let (stdout, _) = lines(&out);
    assert!(out.status.success());
    assert_eq!(stdout.matches(" configured").count(), total, "{stdout}");

    // a newer Causeway installed clusters.causeway.io; works.causeway.io is gone
    let merge = |name: &str, patch: serde_json::Value| {
        rt.block_on(crds.patch(name, &PatchParams::default(), &Patch::Merge(patch)))
            .unwrap();
    };
    merge(
        "clusters.causeway.io",
        json!({"metadata": {"labels": {"causeway.io/release-version": "9.1.0"}}}),
    );
    rt.block_on(crds.delete("works.causeway.io", &DeleteParams::default()))
        .unwrap();
    let out = install(&kubeconfig, &[]);
    let (stdout, stderr) = lines(&out);
    assert!(!out.status.success(), "a downgrade went through:\n{stdout}");
    assert!(
        stderr.contains("nothing was installed")
            && stderr.contains("CRD clusters.causeway.io was installed by Causeway 9.1.0")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(
        rt.block_on(crds.get_opt("works.causeway.io"))
            .unwrap()
            .is_none(),
        "a refused install wrote another CRD"
    );
    assert_eq!(label("clusters.causeway.io").as_deref(), Some("9.1.0"));

    // another installer's Gateway API HTTPRoute CRD (no Causeway label) is kept
    merge(
        "httproutes.gateway.networking.k8s.io",
        json!({"metadata": {
            "labels": {"causeway.io/release-version": null},
            "annotations": {"gateway.networking.k8s.io/bundle-version": "v1.2.1"},
        }}),
    );
    merge(
        "clusters.causeway.io",
        json!({"metadata": {"labels": {"causeway.io/release-version": release}}}),
    );
    let out = install(&kubeconfig, &[]);
    let (stdout, stderr) = lines(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("httproutes.gateway.networking.k8s.io kept: installed by another installer (Gateway API v1.2.1)"),
        "{stdout}"
    );
    assert!(stdout.contains("works.causeway.io created"), "{stdout}");
    assert_eq!(label("httproutes.gateway.networking.k8s.io"), None);

    // --force replaces both the newer one and the other installer's
    merge(
        "clusters.causeway.io",
        json!({"metadata": {"labels": {"causeway.io/release-version": "9.1.0"}}}),
    );
    let out = install(&kubeconfig, &["--force"]);
    let (stdout, stderr) = lines(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.matches(" configured").count(), total, "{stdout}");
    assert_eq!(label("clusters.causeway.io").as_deref(), Some(release));
    assert_eq!(
        label("httproutes.gateway.networking.k8s.io").as_deref(),
        Some(release)
    );
}
