//! Real kubectl against kubesim: apply (client-side and server-side) of deploy/crds and
//! examples/, get as table and YAML, get -w, label, annotate, patch, wait, delete, explain.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::Env;

fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_crds_and_examples_client_side_then_get_and_delete() {
    let env = Env::start().await;
    let out = env.ok(&["apply", "-f", "deploy/crds/"]).await;
    assert!(
        out.contains("serviceimports.multicluster.x-k8s.io"),
        "{out}"
    );
    assert!(
        out.contains("unchanged") || out.contains("configured"),
        "CRDs were preinstalled by SSA; kubectl must see them: {out}"
    );

    let created = env.ok(&["apply", "-f", "examples/"]).await;
    let n = lines(&created).len();
    assert!(n >= 8, "every example object is created: {created}");
    assert!(
        created.lines().all(|l| l.ends_with(" created")),
        "{created}"
    );
    // Re-applying is idempotent.
    let again = env.ok(&["apply", "-f", "examples/"]).await;
    assert!(again.lines().all(|l| l.ends_with(" unchanged")), "{again}");
    // Every object is there, as kubectl sees it.
    let names = env.ok(&["get", "-f", "examples/", "-o", "name"]).await;
    assert_eq!(lines(&names).len(), n, "{names}");
    for kind in ["serviceexport", "serviceimport", "multiclusteringress"] {
        assert!(names.contains(kind), "{kind} missing from {names}");
    }
    // The namespace goes first and takes its content with it, so later deletes may find nothing.
    let deleted = env
        .ok(&[
            "delete",
            "-f",
            "examples/",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=20s",
        ])
        .await;
    assert!(deleted.contains("namespace \"demo\" deleted"), "{deleted}");
    let gone = env
        .ok(&["get", "-f", "examples/", "-o", "name", "--ignore-not-found"])
        .await;
    assert!(
        lines(&gone).is_empty(),
        "all example objects deleted: {gone}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_server_side_is_idempotent_and_reports_conflicts() {
    let env = Env::start().await;
    env.ok(&["apply", "--server-side", "-f", "deploy/crds/"])
        .await;
    let out = env.ok(&["apply", "--server-side", "-f", "examples/"]).await;
    assert!(
        out.lines().all(|l| l.ends_with(" serverside-applied")),
        "{out}"
    );
    let again = env.ok(&["apply", "--server-side", "-f", "examples/"]).await;
    assert!(
        again.lines().all(|l| l.ends_with(" serverside-applied")),
        "{again}"
    );

    // Another manager takes a field; kubectl's next apply conflicts, --force-conflicts wins.
    let cm = env.file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  namespace: default\ndata:\n  color: blue\n");
    env.ok(&["apply", "--server-side", "-f", &cm]).await;
    let api: Api<ConfigMap> = Api::namespaced(env.hub_client().await, "default");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"color": "red"}});
    api.patch(
        "owned",
        &PatchParams::apply("other-controller").force(),
        &Patch::Apply(&other),
    )
    .await
    .unwrap();
    let err = env.fails(&["apply", "--server-side", "-f", &cm]).await;
    assert!(
        err.contains("conflict") && err.contains("other-controller") && err.contains(".data.color"),
        "{err}"
    );
    env.ok(&["apply", "--server-side", "--force-conflicts", "-f", &cm])
        .await;
    let color = env
        .ok(&["get", "cm", "owned", "-o", "jsonpath={.data.color}"])
        .await;
    assert_eq!(color, "blue");
    let managers = env
        .ok(&[
            "get",
            "cm",
            "owned",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ])
        .await;
    assert!(managers.contains("kubectl"), "{managers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_as_table_yaml_json_and_explain() {
    let env = Env::start().await;
    env.ok(&["apply", "-f", "examples/"]).await;
    let table = env.ok(&["get", "serviceimports", "-A"]).await;
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAMESPACE", "NAME", "TYPE", "IP", "AGE"] {
        assert!(
            header.contains(col),
            "ServiceImport printer column {col} missing: {table}"
        );
    }
    assert!(lines(&table).len() >= 2, "{table}");
    let svc = env.ok(&["get", "svc", "-n", "demo"]).await;
    assert!(
        svc.lines()
            .next()
            .unwrap_or_default()
            .contains("CLUSTER-IP"),
        "{svc}"
    );
    let yaml = env.ok(&["get", "serviceexports", "-A", "-o", "yaml"]).await;
    assert!(
        yaml.contains("kind: ServiceExport")
            && yaml.contains("apiVersion: multicluster.x-k8s.io/v1beta1"),
        "{yaml}"
    );
    let json = env.ok(&["get", "ns", "kube-system", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["status"]["phase"], "Active");
    let wide = env.ok(&["get", "mci", "-A", "-o", "wide"]).await;
    assert!(lines(&wide).len() >= 2, "{wide}");
    let explain = env.ok(&["explain", "serviceimports.spec"]).await;
    assert!(
        explain.contains("ports") && explain.contains("type"),
        "{explain}"
    );
    let resources = env
        .ok(&["api-resources", "--api-group=multicluster.x-k8s.io"])
        .await;
    assert!(
        resources.contains("svcim") && resources.contains("svcex"),
        "{resources}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_sees_a_change() {
    let env = Env::start().await;
    env.ok(&["create", "-f", "examples/00-namespace.yaml"])
        .await;
    let cm = env.file("w.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n  namespace: demo\ndata:\n  v: \"1\"\n");
    env.ok(&["apply", "-f", &cm]).await;
    let mut child = Command::new(env.bin())
        .env("KUBECONFIG", &env.kubeconfig)
        .args([
            "--context",
            "hub",
            "get",
            "cm",
            "-n",
            "demo",
            "-w",
            "--output-watch-events",
            "-o",
            "custom-columns=EVENT:.type,NAME:.object.metadata.name,V:.object.data.v",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kubectl get -w starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                if l.contains(want) {
                    return;
                }
                seen.push(l);
            }
        }
        panic!("kubectl get -w never printed {want:?}; saw {seen:?}");
    };
    wait_for("ADDED");
    env.ok(&[
        "patch",
        "cm",
        "watched",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"data":{"v":"2"}}"#,
    ])
    .await;
    wait_for("MODIFIED");
    env.ok(&["delete", "cm", "watched", "-n", "demo"]).await;
    wait_for("DELETED");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_annotate_and_patch_every_type() {
    let env = Env::start().await;
    env.ok(&["apply", "-f", "examples/00-namespace.yaml"]).await;
    let svc = env.file("s.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: demo\nspec:\n  selector:\n    app: web\n  ports:\n  - name: http\n    port: 80\n  - name: https\n    port: 443\n");
    env.ok(&["apply", "-f", &svc]).await;
    env.ok(&["label", "svc", "web", "-n", "demo", "tier=front"])
        .await;
    env.ok(&["annotate", "svc", "web", "-n", "demo", "owner=team-a"])
        .await;
    let sel = env
        .ok(&["get", "svc", "-n", "demo", "-l", "tier=front", "-o", "name"])
        .await;
    assert_eq!(sel.trim(), "service/web");
    let none = env
        .ok(&[
            "get",
            "svc",
            "-n",
            "demo",
            "-l",
            "tier notin (front)",
            "-o",
            "name",
        ])
        .await;
    assert!(none.trim().is_empty(), "{none}");
    env.ok(&["label", "svc", "web", "-n", "demo", "tier-"])
        .await;
    let labels = env
        .ok(&[
            "get",
            "svc",
            "web",
            "-n",
            "demo",
            "-o",
            "jsonpath={.metadata.labels}",
        ])
        .await;
    assert!(!labels.contains("tier"), "{labels}");
    // strategic merge: the port list merges by port number
    env.ok(&[
        "patch",
        "svc",
        "web",
        "-n",
        "demo",
        "-p",
        r#"{"spec":{"ports":[{"name":"metrics","port":9090}]}}"#,
    ])
    .await;
    let ports = env
        .ok(&[
            "get",
            "svc",
            "web",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.ports[*].port}",
        ])
        .await;
    assert_eq!(ports, "80 443 9090");
    env.ok(&[
        "patch",
        "svc",
        "web",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
    ])
    .await;
    env.ok(&[
        "patch",
        "svc",
        "web",
        "-n",
        "demo",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/ports/2"}]"#,
    ])
    .await;
    let after = env
        .ok(&[
            "get",
            "svc",
            "web",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.sessionAffinity} {.spec.ports[*].port} {.metadata.annotations.owner}",
        ])
        .await;
    assert_eq!(after, "ClientIP 80 443 team-a");
    // clusterIP is immutable
    let err = env
        .fails(&[
            "patch",
            "svc",
            "web",
            "-n",
            "demo",
            "--type=merge",
            "-p",
            r#"{"spec":{"clusterIP":"10.96.200.200","clusterIPs":["10.96.200.200"]}}"#,
        ])
        .await;
    assert!(err.contains("Invalid") || err.contains("invalid"), "{err}");
    // custom resources take merge and json patches, not strategic
    env.ok(&["apply", "-f", "examples/"]).await;
    let ex = env
        .ok(&[
            "get",
            "svcex",
            "-A",
            "-o",
            "jsonpath={.items[0].metadata.namespace}/{.items[0].metadata.name}",
        ])
        .await;
    let (ns, name) = ex.split_once('/').unwrap();
    env.ok(&[
        "patch",
        "svcex",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"exportedLabels":{"team":"a"}}}"#,
    ])
    .await;
    let got = env
        .ok(&[
            "get",
            "svcex",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.exportedLabels.team}",
        ])
        .await;
    assert_eq!(got, "a");
    let err = env
        .fails(&[
            "patch",
            "svcex",
            name,
            "-n",
            ns,
            "--type=strategic",
            "-p",
            r#"{"spec":{}}"#,
        ])
        .await;
    assert!(
        err.contains("UnsupportedMediaType")
            || err.contains("unknown format")
            || err.contains("strategic merge patch"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_condition_set_by_a_controller() {
    let env = Env::start().await;
    env.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/serviceexports.multicluster.x-k8s.io",
        "--timeout=10s",
    ])
    .await;
    env.ok(&["apply", "-f", "examples/00-namespace.yaml"]).await;
    let ex = env.file("ex.yaml", "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata:\n  name: web\n  namespace: demo\n");
    env.ok(&["apply", "-f", &ex]).await;
    let client = env.hub_client().await;
    let setter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1beta1", "ServiceExport"),
            "serviceexports",
        );
        let api: Api<kube::core::DynamicObject> = Api::namespaced_with(client, "demo", &ar);
        let status = json!({"status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        api.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    });
    let started = Instant::now();
    env.ok(&[
        "wait",
        "--for=condition=Valid",
        "serviceexport/web",
        "-n",
        "demo",
        "--timeout=15s",
    ])
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "wait returned before the condition was set"
    );
    setter.await.unwrap();
    let err = env
        .fails(&[
            "wait",
            "--for=condition=Ready",
            "serviceexport/web",
            "-n",
            "demo",
            "--timeout=1s",
        ])
        .await;
    assert!(err.contains("timed out"), "{err}");
    env.ok(&["delete", "serviceexport/web", "-n", "demo"]).await;
    env.ok(&[
        "wait",
        "--for=delete",
        "serviceexport/web",
        "-n",
        "demo",
        "--timeout=5s",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf_and_work() {
    let env = Env::start().await;
    env.ok(&["create", "namespace", "gen"]).await;
    env.ok(&[
        "-n",
        "gen",
        "create",
        "configmap",
        "cfg",
        "--from-literal=color=blue",
        "--from-literal=size=2",
    ])
    .await;
    env.ok(&[
        "-n",
        "gen",
        "create",
        "secret",
        "generic",
        "pw",
        "--from-literal=password=s3cret",
    ])
    .await;
    env.ok(&["-n", "gen", "create", "serviceaccount", "bot"])
        .await;
    let data = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "cm",
            "cfg",
            "-o",
            "jsonpath={.data.color}/{.data.size}",
        ])
        .await;
    assert_eq!(data, "blue/2");
    let pw = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "secret",
            "pw",
            "-o",
            "jsonpath={.data.password}",
        ])
        .await;
    assert_eq!(pw, "czNjcmV0", "base64 of s3cret");
    let phase = env
        .ok(&["get", "ns", "gen", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(phase, "Active");
    // `kubectl create service` (protobuf too): ports with a numeric or named target,
    // the generator's selector, and each type
    env.ok(&[
        "-n",
        "gen",
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
        "--tcp=443:https",
    ])
    .await;
    let web = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "svc",
            "web",
            "-o",
            "jsonpath={.spec.type}|{.spec.selector.app}|{.spec.ports[0].port}->{.spec.ports[0].targetPort}|{.spec.ports[1].port}->{.spec.ports[1].targetPort}|{.spec.clusterIP}",
        ])
        .await;
    let parts: Vec<&str> = web.split('|').collect();
    assert_eq!(
        &parts[..4],
        ["ClusterIP", "web", "80->8080", "443->https"],
        "{web}"
    );
    assert!(
        parts[4].parse::<std::net::IpAddr>().is_ok(),
        "a ClusterIP was allocated: {web}"
    );
    env.ok(&[
        "-n",
        "gen",
        "create",
        "service",
        "nodeport",
        "np",
        "--tcp=80:80",
    ])
    .await;
    let np = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "svc",
            "np",
            "-o",
            "jsonpath={.spec.type}|{.spec.ports[0].nodePort}",
        ])
        .await;
    assert!(
        np.starts_with("NodePort|3"),
        "a NodePort was allocated: {np}"
    );
    env.ok(&[
        "-n",
        "gen",
        "create",
        "service",
        "externalname",
        "ext",
        "--external-name=example.com",
    ])
    .await;
    let ext = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "svc",
            "ext",
            "-o",
            "jsonpath={.spec.type}|{.spec.externalName}",
        ])
        .await;
    assert_eq!(ext, "ExternalName|example.com");
}

/// `kubectl create role|clusterrole|rolebinding|clusterrolebinding|poddisruptionbudget|
/// ingress` (protobuf bodies): stored as kube-apiserver stores them, and the RBAC objects
/// take effect (`kubectl auth can-i`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_rbac_pdb_and_ingress_send_protobuf_and_work() {
    let env = Env::start().await;
    env.ok(&["create", "namespace", "gen"]).await;
    let json = async |args: &[&str]| {
        let mut a = vec!["-n", "gen", "get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str::<serde_json::Value>(&env.ok(&a).await).unwrap()
    };
    let gen_ok = async |args: &[&str]| {
        let mut a = vec!["-n", "gen"];
        a.extend_from_slice(args);
        env.ok(&a).await
    };
    gen_ok(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods,deployments.apps",
    ])
    .await;
    assert_eq!(
        json(&["role", "reader"]).await["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]}
        ])
    );
    gen_ok(&[
        "create",
        "rolebinding",
        "alice-reads",
        "--role=reader",
        "--user=alice",
        "--serviceaccount=gen:robot",
    ])
    .await;
    let rb = json(&["rolebinding", "alice-reads"]).await;
    assert_eq!(
        rb["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
    assert_eq!(
        rb["subjects"],
        serde_json::json!([
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
            {"kind": "ServiceAccount", "name": "robot", "namespace": "gen"}
        ])
    );
    env.ok(&[
        "create",
        "clusterrole",
        "node-reader",
        "--verb=get,list",
        "--resource=nodes",
    ])
    .await;
    env.ok(&[
        "create",
        "clusterrole",
        "logs",
        "--verb=get",
        "--non-resource-url=/logs/*",
    ])
    .await;
    let logs: serde_json::Value =
        serde_json::from_str(&env.ok(&["get", "clusterrole", "logs", "-o", "json"]).await).unwrap();
    assert_eq!(
        logs["rules"],
        serde_json::json!([{"nonResourceURLs": ["/logs/*"], "verbs": ["get"]}])
    );
    env.ok(&[
        "create",
        "clusterrolebinding",
        "bob-reads-nodes",
        "--clusterrole=node-reader",
        "--group=ops",
    ])
    .await;
    // the bindings take effect: what kube-apiserver's RBAC answers for each user
    let can = async |args: &[&str]| {
        let mut a = vec!["auth", "can-i"];
        a.extend_from_slice(args);
        let out = env.run("hub", &a).await;
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        can(&["list", "pods", "-n", "gen", "--as", "alice"]).await,
        "yes"
    );
    assert_eq!(
        can(&["delete", "pods", "-n", "gen", "--as", "alice"]).await,
        "no"
    );
    assert_eq!(
        can(&["list", "pods", "-n", "default", "--as", "alice"]).await,
        "no"
    );
    assert_eq!(
        can(&[
            "get",
            "deployments.apps",
            "-n",
            "gen",
            "--as",
            "system:serviceaccount:gen:robot"
        ])
        .await,
        "yes"
    );
    assert_eq!(
        can(&["list", "nodes", "--as", "carol", "--as-group", "ops"]).await,
        "yes"
    );
    assert_eq!(can(&["list", "nodes", "--as", "carol"]).await, "no");
    // who an impersonated user is, and everything it may do
    let who = env
        .ok(&[
            "auth",
            "whoami",
            "--as",
            "carol",
            "--as-group",
            "ops",
            "-o",
            "json",
        ])
        .await;
    let who: serde_json::Value = serde_json::from_str(&who).unwrap();
    assert_eq!(
        who["status"]["userInfo"],
        serde_json::json!({"username": "carol", "groups": ["ops", "system:authenticated"]})
    );
    let list = env
        .ok(&["auth", "can-i", "--list", "-n", "gen", "--as", "alice"])
        .await;
    let pods = list.lines().find(|l| l.starts_with("pods ")).expect(&list);
    assert!(pods.ends_with("[get list]"), "{list}");
    assert!(
        list.lines().any(|l| l.starts_with("deployments.apps ")),
        "{list}"
    );
    assert!(!list.contains("nodes"), "{list}");
    // impersonation is a request as that user: RBAC answers for alice, in her words
    let err = env.fails(&["get", "nodes", "--as", "alice"]).await;
    assert!(
        err.contains(r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#),
        "{err}"
    );
    let err = env
        .fails(&["-n", "gen", "delete", "pod", "x", "--as", "alice"])
        .await;
    assert!(
        err.contains(r#"pods "x" is forbidden: User "alice" cannot delete resource "pods" in API group "" in the namespace "gen""#),
        "{err}"
    );

    gen_ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=50%",
    ])
    .await;
    let pdb = json(&["pdb", "web"]).await;
    assert_eq!(
        pdb["spec"],
        serde_json::json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}})
    );
    gen_ok(&[
        "create",
        "ingress",
        "web",
        "--class=causeway",
        "--rule=foo.example/api*=api:8080,tls=foo-cert",
        "--rule=bar.example/=site:http",
        "--default-backend=fallback:80",
    ])
    .await;
    let ing = json(&["ingress", "web"]).await;
    assert_eq!(
        ing["spec"],
        serde_json::json!({
            "ingressClassName": "causeway",
            "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
            "rules": [
                {"host": "foo.example", "http": {"paths": [{"path": "/api", "pathType": "Prefix",
                    "backend": {"service": {"name": "api", "port": {"number": 8080}}}}]}},
                {"host": "bar.example", "http": {"paths": [{"path": "/", "pathType": "Exact",
                    "backend": {"service": {"name": "site", "port": {"name": "http"}}}}]}}
            ],
            "tls": [{"hosts": ["foo.example"], "secretName": "foo-cert"}]
        })
    );
    // `kubectl autoscale` (an autoscaling/v2 body): kube's defaults fill what it leaves out
    gen_ok(&["create", "deployment", "web", "--image=nginx:1.27"]).await;
    gen_ok(&[
        "autoscale",
        "deployment",
        "web",
        "--min=2",
        "--max=5",
        "--cpu=80%",
    ])
    .await;
    gen_ok(&[
        "autoscale",
        "deployment",
        "web",
        "--name=web-mem",
        "--max=3",
        "--memory=500Mi",
    ])
    .await;
    let hpa = json(&["hpa", "web-mem"]).await;
    assert_eq!(
        hpa["spec"],
        serde_json::json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "memory",
                "target": {"type": "AverageValue", "averageValue": "500Mi"}}}]})
    );
    // and `kubectl get` prints each kind's columns as kube-apiserver's Tables do
    let rows = |out: String| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    let hpas = rows(gen_ok(&["get", "hpa"]).await);
    assert_eq!(
        hpas[0],
        "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE"
    );
    assert!(
        hpas[1].starts_with("web Deployment/web cpu: <unknown>/80% 2 5 0 "),
        "{hpas:?}"
    );
    assert!(
        hpas[2].starts_with("web-mem Deployment/web memory: <unknown>/500Mi 1 3 0 "),
        "{hpas:?}"
    );
    let pdbs = rows(gen_ok(&["get", "pdb"]).await);
    assert_eq!(
        pdbs[0],
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE"
    );
    assert!(pdbs[1].starts_with("web 50% N/A 0 "), "{pdbs:?}");
    let ings = rows(gen_ok(&["get", "ingress"]).await);
    assert_eq!(ings[0], "NAME CLASS HOSTS ADDRESS PORTS AGE");
    assert!(
        ings[1].starts_with("web causeway foo.example,bar.example 80, 443 "),
        "{ings:?}"
    );
    let rbs = rows(gen_ok(&["get", "rolebinding", "alice-reads", "-o", "wide"]).await);
    assert_eq!(rbs[0], "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS");
    assert!(rbs[1].starts_with("alice-reads Role/reader "), "{rbs:?}");
    assert!(rbs[1].ends_with(" alice gen/robot"), "{rbs:?}");
    let roles = rows(gen_ok(&["get", "role"]).await);
    assert_eq!(roles[0], "NAME CREATED AT");
    assert!(roles[1].starts_with("reader 20"), "{roles:?}");
}

/// `kubectl create deployment|job|cronjob` (protobuf bodies: Pod templates, containers,
/// ports): what they create is what kube-apiserver stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_workloads_send_protobuf_and_work() {
    let env = Env::start().await;
    env.ok(&["create", "namespace", "gen"]).await;
    let out = env
        .ok(&[
            "-n",
            "gen",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=8080",
        ])
        .await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let d = env
        .ok(&["-n", "gen", "get", "deployment", "web", "-o", "json"])
        .await;
    let d: serde_json::Value = serde_json::from_str(&d).unwrap();
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web"})
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (&c["name"], &c["image"]),
        (&json!("nginx"), &json!("nginx:1.27"))
    );
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    // zero values kubectl sends on the wire are not stored where JSON omits them
    assert!(c.get("stdin").is_none() && c.get("tty").is_none(), "{c}");
    // replicas 0 is a value, not "unset"
    env.ok(&[
        "-n",
        "gen",
        "create",
        "deployment",
        "idle",
        "--image=nginx",
        "--replicas=0",
    ])
    .await;
    let idle = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "deployment",
            "idle",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(idle, "0");

    // Jobs and CronJobs (batch/v1): their Pods restart Never by kubectl's choice
    let out = env
        .ok(&[
            "-n",
            "gen",
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "true",
        ])
        .await;
    assert!(out.contains("job.batch/once created"), "{out}");
    let job = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "job",
            "once",
            "-o",
            "jsonpath={.spec.completions} {.spec.backoffLimit} {.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].command}",
        ])
        .await;
    assert_eq!(job, "1 6 Never [\"true\"]");
    let out = env
        .ok(&[
            "-n",
            "gen",
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/5 * * * *",
        ])
        .await;
    assert!(out.contains("cronjob.batch/tick created"), "{out}");
    let cj = env
        .ok(&[
            "-n",
            "gen",
            "get",
            "cronjob",
            "tick",
            "-o",
            "jsonpath={.spec.schedule} {.spec.concurrencyPolicy} {.spec.jobTemplate.spec.template.spec.restartPolicy}",
        ])
        .await;
    assert_eq!(cj, "*/5 * * * * Allow OnFailure");
    // a Job whose Pods would restart Always is refused, as kube-apiserver refuses it
    let bad = env.file(
        "bad-job.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad, namespace: gen}\nspec:\n  template:\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    let err = env.fails(&["apply", "-f", &bad]).await;
    assert!(
        err.contains(r#"spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#),
        "{err}"
    );
}

/// Deployment `web` (label `app: web`, container `web`) in `default`, as YAML.
fn web_deployment(replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: web, image: '{image}'}}]}}\n"
    )
}

/// `kubectl scale` (the scale subresource, as a merge patch; with `--current-replicas`
/// and `--resource-version`, a GET and a PUT), and `kubectl get --subresource scale`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_a_deployment() {
    let env = Env::start().await;
    let web = env.file("web.yaml", &web_deployment(1, "nginx"));
    env.ok(&["apply", "-f", &web]).await;
    let out = env
        .ok(&["scale", "deployment", "web", "--replicas=3"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let replicas = env
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas} {.metadata.generation}",
        ])
        .await;
    assert_eq!(replicas, "3 2", "replicas set, the generation moved on");
    let scale = env
        .ok(&[
            "get",
            "deployment",
            "web",
            "--subresource",
            "scale",
            "-o",
            "json",
        ])
        .await;
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    // a precondition that does not hold: kubectl says so, nothing changes
    let err = env
        .fails(&[
            "scale",
            "deployment",
            "web",
            "--current-replicas=5",
            "--replicas=1",
        ])
        .await;
    assert!(err.contains("Expected replicas to be 5, was 3"), "{err}");
    let out = env
        .ok(&[
            "scale",
            "deployment",
            "web",
            "--current-replicas=3",
            "--replicas=0",
        ])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let stale = env
        .fails(&[
            "scale",
            "deployment",
            "web",
            "--resource-version=1",
            "--replicas=2",
        ])
        .await;
    assert!(
        stale.contains("Expected resource version to be 1"),
        "{stale}"
    );
    let replicas = env
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(replicas, "0");
    // a kind without the subresource
    let err = env
        .fails(&["scale", "configmap", "x", "--replicas=2"])
        .await;
    assert!(!err.is_empty());
}

/// `kubectl rollout status|history|undo`: each Pod template is a revision of its
/// ReplicaSet and of the Deployment; a rollback makes the old ReplicaSet the newest
/// revision, and a change-cause set during a rollout reaches its ReplicaSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_history_and_undo() {
    let env = Env::start().await;
    // east simulates the Deployment controller and kubelets (the hub holds templates)
    let web = env.file("web.yaml", &web_deployment(2, "nginx:1.27"));
    env.ok_in("east", &["apply", "-f", &web]).await;
    let status = ["rollout", "status", "deployment", "web", "--timeout=60s"];
    env.ok_in("east", &status).await;
    env.ok_in(
        "east",
        &["set", "image", "deployment/web", "web=nginx:1.28"],
    )
    .await;
    env.ok_in(
        "east",
        &[
            "annotate",
            "deployment",
            "web",
            "kubernetes.io/change-cause=to 1.28",
        ],
    )
    .await;
    env.ok_in("east", &status).await;
    let history = crate::mcs_support::eventually(
        "revision 2 with its change-cause",
        crate::propagation::WAIT,
        || async {
            let h = env
                .ok_in("east", &["rollout", "history", "deployment", "web"])
                .await;
            (h.contains("1         <none>") && h.contains("2         to 1.28")).then_some(h)
        },
    )
    .await;
    assert!(!history.contains("\n3 "), "{history}");
    let out = env
        .ok_in("east", &["rollout", "undo", "deployment", "web"])
        .await;
    assert!(out.contains("rolled back"), "{out}");
    env.ok_in("east", &status).await;
    let now = env
        .ok_in("east", &[
            "get",
            "deployment",
            "web",
            "-o",
            r"jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\.kubernetes\.io/revision}",
        ])
        .await;
    assert_eq!(now, "nginx:1.27 3");
    let history = env
        .ok_in("east", &["rollout", "history", "deployment", "web"])
        .await;
    assert!(
        history.contains("2         to 1.28")
            && history.contains("\n3 ")
            && !history.contains("\n1 "),
        "revision 1 became 3: {history}"
    );
}
