//! Who may write the MCS API (API-9, API-10), end to end: `causeway webhook` on
//! 127.0.0.1 and deploy/webhook/mcs-admission.yaml on the hub and both members (pointed
//! at it by URL), deploy/'s RBAC and service-account tokens. The controller, running as
//! those service accounts, still imports; a user whose roles allow ServiceImport writes
//! is refused with what to do instead, whether by create, apply, a merge patch or a
//! status patch; a ServiceExport in `default` needs the protected exporters' group.

use causeway_controllers::webhook;

use crate::mcs_members::least_privileged;
use crate::mcs_support::{PRESENT, eventually};
use crate::support::Webhook;

async fn kubectl(kc: &std::path::Path, ctx: &str, args: &[&str]) -> std::process::Output {
    crate::support::kubectl_in(kc, ctx, args).await
}

async fn ok(kc: &std::path::Path, ctx: &str, args: &[&str]) -> String {
    let o = kubectl(kc, ctx, args).await;
    assert!(
        o.status.success(),
        "kubectl --context {ctx} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn fails(kc: &std::path::Path, ctx: &str, args: &[&str]) -> String {
    let o = kubectl(kc, ctx, args).await;
    assert!(
        !o.status.success(),
        "kubectl --context {ctx} {args:?} should fail"
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_causeway_writes_serviceimports_and_default_exports_need_the_group() {
    let (owned, restricted, dir, kc) = least_privileged().await;
    let m = &owned;
    let hook = Webhook::start().await.unwrap();
    let cfg = dir.path().join("mcs-admission.json");
    let manifest = hook
        .configuration(causeway_e2e::webhook::MCS, webhook::mcs::PATH)
        .unwrap();
    std::fs::write(&cfg, manifest.to_string()).unwrap();
    let cfg = cfg.to_str().unwrap();
    for ctx in ["hub", "c0", "c1"] {
        ok(&kc, ctx, &["apply", "-f", cfg]).await;
    }

    // Causeway's own service accounts are let through: an export is imported
    let ctl = m.cs.start_controller_as(restricted).unwrap();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("imported under the webhook", PRESENT, || async {
        m.si(1, "hello").await.filter(|s| !s.spec.ips.is_empty())
    })
    .await;
    let counted = hook.counted();
    assert!(
        counted.contains("causeway_webhook_reviews_total{webhook=\"mcs\",decision=\"allowed\"}"),
        "the controller's writes were reviewed: {counted}"
    );

    // alice edits the namespace and a role of her own even grants ServiceImport
    // writes: the webhook still refuses them
    let ns = m.ns.as_str();
    ok(
        &kc,
        "c1",
        &[
            "-n",
            ns,
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
        ],
    )
    .await;
    ok(&kc, "c1", &["-n", ns, "create", "role", "si-writer", "--verb=get,create,update,patch,delete", "--resource=serviceimports.multicluster.x-k8s.io,serviceimports.multicluster.x-k8s.io/status"]).await;
    ok(
        &kc,
        "c1",
        &[
            "-n",
            ns,
            "create",
            "rolebinding",
            "alice-si",
            "--role=si-writer",
            "--user=alice",
        ],
    )
    .await;
    let si = dir.path().join("si.yaml");
    std::fs::write(
        &si,
        format!("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {{name: fake, namespace: {ns}}}\nspec: {{type: ClusterSetIP, ports: [{{port: 80, protocol: TCP}}]}}\n"),
    )
    .unwrap();
    let si = si.to_str().unwrap();
    let err = fails(&kc, "c1", &["create", "-f", si, "--as", "alice"]).await;
    assert!(
        err.contains("admission webhook \"serviceimports.mcs.causeway.io\" denied the request: alice may not create ServiceImport")
            && err.contains("Export the Service with a ServiceExport"),
        "{err}"
    );
    let err = fails(
        &kc,
        "c1",
        &["apply", "--server-side", "-f", si, "--as", "alice"],
    )
    .await;
    assert!(
        err.contains("alice may not create ServiceImport"),
        "an apply that creates: {err}"
    );
    let err = fails(
        &kc,
        "c1",
        &[
            "-n",
            ns,
            "annotate",
            "serviceimports.multicluster.x-k8s.io",
            "hello",
            "x=y",
            "--as",
            "alice",
        ],
    )
    .await;
    assert!(
        err.contains(&format!("alice may not change ServiceImport {ns}/hello")),
        "a merge patch: {err}"
    );
    let err = fails(
        &kc,
        "c1",
        &[
            "-n",
            ns,
            "patch",
            "serviceimports.multicluster.x-k8s.io",
            "hello",
            "--subresource=status",
            "--type=merge",
            "-p",
            "{\"status\":{\"clusters\":[]}}",
            "--as",
            "alice",
        ],
    )
    .await;
    assert!(
        err.contains(&format!(
            "alice may not change the status of ServiceImport {ns}/hello"
        )),
        "{err}"
    );
    let err = fails(
        &kc,
        "c1",
        &[
            "-n",
            ns,
            "delete",
            "serviceimports.multicluster.x-k8s.io",
            "hello",
            "--as",
            "alice",
        ],
    )
    .await;
    assert!(err.contains("alice may not delete ServiceImport"), "{err}");
    assert!(
        m.si(1, "hello")
            .await
            .is_some_and(|s| !s.spec.ips.is_empty()),
        "untouched"
    );
    // a cluster admin may
    ok(&kc, "c1", &["create", "-f", si]).await;

    // ServiceExports: anywhere RBAC allows, but in `default` only with the group
    ok(
        &kc,
        "c0",
        &[
            "-n",
            "default",
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
        ],
    )
    .await;
    let export = |ns: &str| {
        let f = dir.path().join(format!("export-{ns}.yaml"));
        std::fs::write(&f, format!("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: kubernetes, namespace: {ns}}}\n")).unwrap();
        f.to_str().unwrap().to_string()
    };
    let in_default = export("default");
    let err = fails(&kc, "c0", &["create", "-f", &in_default, "--as", "alice"]).await;
    assert!(
        err.contains("alice may not create ServiceExport default/kubernetes: exporting from namespace default")
            && err.contains("members of group causeway:protected-exporters"),
        "{err}"
    );
    ok(
        &kc,
        "c0",
        &[
            "create",
            "-f",
            &in_default,
            "--as",
            "alice",
            "--as-group",
            "causeway:protected-exporters",
            "--as-group",
            "system:authenticated",
        ],
    )
    .await;
    ok(
        &kc,
        "c0",
        &[
            "-n",
            ns,
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
        ],
    )
    .await;
    ok(&kc, "c0", &["create", "-f", &export(ns), "--as", "alice"]).await;
    let counted = hook.counted();
    assert!(
        counted.contains("causeway_webhook_reviews_total{webhook=\"mcs\",decision=\"denied\"} 6"),
        "{counted}"
    );
    ctl.stop().await;
    hook.stop().await;
}
