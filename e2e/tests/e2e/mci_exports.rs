//! MCI-11, `causeway controller --export-mci-backends` (Karmada's
//! serviceexportpropagation): the backend Services of a MultiClusterIngress are exported
//! where the hub propagates them, with nothing written by hand, and withdrawn when no
//! MCI names them; a user's own export template is left alone.

use causeway_controllers::clusters::options::Timing;
use causeway_controllers::controller::Options as ControllerOptions;
use causeway_e2e::Options;
use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, get};
use crate::support::Env;

const HUB_OBJECTS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: causeway}
spec: {controller: causeway.io/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web-service, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Service, name: web}, {apiVersion: v1, kind: Service, name: taken}]
  placement: {clusterAffinity: {clusterNames: [east, west]}}
---
apiVersion: v1
kind: Service
metadata: {name: taken, namespace: demo}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: propagate-service-taken, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: unrelated}]
  placement: {clusterAffinity: {clusterNames: [east]}}
---
apiVersion: v1
kind: Service
metadata: {name: own, namespace: demo}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: own, namespace: demo}
---
apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {name: shop, namespace: demo}
spec:
  ingressClassName: causeway
  rules:
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /own, pathType: Prefix, backend: {service: {name: own, port: {number: 80}}}}
      - {path: /taken, pathType: Prefix, backend: {service: {name: taken, port: {number: 80}}}}
"#;

fn labels(v: &Value) -> String {
    v.pointer("/metadata/labels/causeway.io~1mci-backend")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcis_backends_are_exported_where_the_hub_places_them_and_withdrawn_after() {
    let env = Env::start_with(Options {
        members: vec!["east".into(), "west".into()],
        ..Options::default()
    })
    .await;
    env.cs.create_namespace_everywhere("demo").await.unwrap();
    env.cs.join_all().await.unwrap();
    let hub = causeway_e2e::client(&env.cs.hub).await.unwrap();
    let ctl = env
        .cs
        .start_controller_with(
            hub,
            ControllerOptions {
                timing: Timing::fast(),
                export_mci_backends: true,
            },
        )
        .unwrap();
    let file = env.file("hub.yaml", HUB_OBJECTS);
    env.ok(&["apply", "-f", &file]).await;

    // the hub: an export template of web next to it, owned by it, and its policy
    let export = eventually("hub ServiceExport demo/web", WAIT, || async {
        get(&env, "hub", &["-n", "demo", "serviceexport", "web"]).await
    })
    .await;
    assert_eq!(labels(&export), "true");
    assert_eq!(
        export.pointer("/metadata/ownerReferences/0/kind"),
        Some(&Value::from("Service"))
    );
    let policy = eventually("policy propagate-service-web", WAIT, || async {
        get(
            &env,
            "hub",
            &["-n", "demo", "propagationpolicy", "propagate-service-web"],
        )
        .await
    })
    .await;
    assert_eq!(
        policy.pointer("/spec/placement/clusterAffinity/clusterNames"),
        Some(&serde_json::json!(["east", "west"]))
    );
    // the members export web, so the hub imports it from both and the MCI routes there
    for member in ["east", "west"] {
        eventually(&format!("{member} exports web"), WAIT, || async {
            get(&env, member, &["-n", "demo", "serviceexport", "web"]).await
        })
        .await;
    }
    eventually("the MCI's service locations", WAIT, || async {
        let mci = get(&env, "hub", &["-n", "demo", "mci", "shop"]).await?;
        let loc = mci.pointer("/status/serviceLocations")?.as_array()?.clone();
        loc.iter()
            .any(|l| l["name"] == "web" && l["clusters"] == serde_json::json!(["east", "west"]))
            .then_some(())
    })
    .await;

    // the user's own export template of `own` is left alone: no label, no second policy
    let own = get(&env, "hub", &["-n", "demo", "serviceexport", "own"])
        .await
        .unwrap();
    assert_eq!(labels(&own), "");
    assert!(
        get(
            &env,
            "hub",
            &["-n", "demo", "propagationpolicy", "propagate-service-own"]
        )
        .await
        .is_none()
    );

    // a policy named as Causeway would name taken's is someone else's: left as it is,
    // and the MCI gets a Warning Event saying so
    let events = eventually("a BackendNotExported Event on the MCI", WAIT, || async {
        let list = get(&env, "hub", &["-n", "demo", "events"]).await?;
        let found: Vec<Value> = list["items"]
            .as_array()?
            .iter()
            .filter(|e| {
                e["reason"] == "BackendNotExported" && e["involvedObject"]["name"] == "shop"
            })
            .cloned()
            .collect();
        (!found.is_empty()).then_some(found)
    })
    .await;
    let note = events[0]["message"].as_str().unwrap_or_default();
    assert!(
        note.contains(
            "PropagationPolicy demo/propagate-service-taken exists and is not Causeway's"
        ) && note.contains("backend Service taken"),
        "{note}"
    );
    assert_eq!(events[0]["type"], "Warning");
    let foreign = get(
        &env,
        "hub",
        &["-n", "demo", "propagationpolicy", "propagate-service-taken"],
    )
    .await
    .unwrap();
    assert_eq!(
        foreign.pointer("/spec/resourceSelectors/0/kind"),
        Some(&Value::from("ConfigMap")),
        "untouched"
    );
    assert_eq!(labels(&foreign), "");

    // no MCI names web any more: its export and policy go, and the members' exports
    env.ok(&["-n", "demo", "delete", "mci", "shop"]).await;
    eventually("hub export and policy of web gone", WAIT, || async {
        (get(&env, "hub", &["-n", "demo", "serviceexport", "web"])
            .await
            .is_none()
            && get(
                &env,
                "hub",
                &["-n", "demo", "propagationpolicy", "propagate-service-web"],
            )
            .await
            .is_none())
        .then_some(())
    })
    .await;
    for member in ["east", "west"] {
        eventually(&format!("{member} no longer exports web"), WAIT, || async {
            get(&env, member, &["-n", "demo", "serviceexport", "web"])
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    assert!(
        get(&env, "hub", &["-n", "demo", "serviceexport", "own"])
            .await
            .is_some(),
        "the user's own export template stays"
    );
    ctl.stop().await;
}
