//! Which members search reads, and with what rights (issue 15): a Push member through
//! the token of `deploy/rbac/member.yaml`'s `causeway-hub` account, a Pull member
//! registered with `--search-access` through its own read-only account; a Pull member
//! registered without it is not indexed, and its Cluster says why in a Warning Event.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use causeway_controllers::clusters::options::Timing;
use causeway_controllers::clusters::register::{
    RegisterOptions, SEARCH_ACCOUNT, SEARCH_READER_ROLE, register, search_reader_rules,
};
use causeway_e2e::{Options, access, hub_endpoint};

use crate::mcs_support::eventually;
use crate::propagation::get;
use crate::support::Env;

const WAIT: Duration = Duration::from_secs(45);

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
"#;

/// The NotIndexed Warning Events on the hub, as (Cluster name, note).
async fn not_indexed(env: &Env) -> Vec<(String, String)> {
    let Some(v) = get(env, "hub", &["events.events.k8s.io", "-n", "default"]).await else {
        return vec![];
    };
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "NotIndexed" && e["regarding"]["kind"] == "Cluster")
        .map(|e| {
            (
                e["regarding"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_reads_push_and_pull_members_with_least_privilege() {
    let mut env = Env::start_with(Options {
        members: vec!["east".into(), "west".into(), "north".into()],
        ..Options::default()
    })
    .await;
    env.cs.create_namespace_everywhere("demo").await.unwrap();
    let hub = env.hub_client().await;

    // east (Push) is joined with the token of deploy/rbac/member.yaml's account
    let member_yaml = crate::support::repo().join("deploy/rbac/member.yaml");
    env.ok_in("east", &["apply", "-f", member_yaml.to_str().unwrap()])
        .await;
    let east = env.cs.member("east").unwrap();
    east.add_token(
        "east-hub-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-hub".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let mut east_access = access(east);
    east_access.token = "east-hub-token".into();
    causeway_controllers::clusters::join::join(hub.clone(), "east", &east_access, None)
        .await
        .unwrap();
    // west (Pull) may be read by search; north (Pull) may not
    let _ctl = env.cs.start_controller().await.unwrap();
    let _west = env
        .cs
        .start_pull_member("west", Timing::fast(), true)
        .await
        .unwrap();
    let _north = env
        .cs
        .start_pull_member("north", Timing::fast(), false)
        .await
        .unwrap();
    eventually("every member Ready", WAIT, || async {
        let v = get(&env, "hub", &["clusters"]).await?;
        let ready = v["items"]
            .as_array()?
            .iter()
            .filter(|c| {
                c["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x["type"] == "Ready" && x["status"] == "True")
            })
            .count();
        (ready == 3).then_some(())
    })
    .await;
    let web = env.file("web.yaml", WEB);
    for m in ["east", "west", "north"] {
        env.ok_in(m, &["apply", "-f", &web]).await;
    }

    let (search, _) = crate::search::start_search(&mut env, false).await;

    // the Pods of east and west, none of north's
    let by_cluster = eventually("the web Pods of east and west", WAIT, || async {
        let v = get(&env, "search", &["pods", "-A", "-l", "app=web"]).await?;
        let mut n: BTreeMap<String, usize> = BTreeMap::new();
        for p in v["items"].as_array()? {
            let c = p["metadata"]["annotations"][causeway_search::CLUSTER_ANNOTATION]
                .as_str()?
                .to_string();
            *n.entry(c).or_default() += 1;
        }
        (n.get("east") == Some(&2) && n.get("west") == Some(&2)).then_some(n)
    })
    .await;
    assert_eq!(
        by_cluster.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from(["east".to_string(), "west".to_string()]),
        "north is not indexed"
    );
    // north's Cluster says why, and what to do
    let events = eventually("a NotIndexed Event on north", WAIT, || async {
        let e = not_indexed(&env).await;
        e.iter().any(|(c, _)| c == "north").then_some(e)
    })
    .await;
    let (_, note) = events.iter().find(|(c, _)| c == "north").unwrap();
    assert!(
        note.contains("causeway register north --search-access"),
        "{note}"
    );
    assert!(
        events.iter().all(|(c, _)| c == "north"),
        "only north is reported: {events:?}"
    );

    // the role deploy/rbac/member.yaml gives east is the one register gave west
    for m in ["east", "west"] {
        let role = get(&env, m, &["clusterrole", SEARCH_READER_ROLE])
            .await
            .unwrap_or_else(|| panic!("{m} has ClusterRole {SEARCH_READER_ROLE}"));
        assert_eq!(role["rules"], search_reader_rules(), "{m}");
    }
    // west's search token reads, and only reads
    let secret = get(
        &env,
        "hub",
        &["secret", "-n", "causeway-system", "west-credentials"],
    )
    .await
    .expect("west's credentials are on the hub");
    let token = secret["data"]["token"].as_str().unwrap();
    let token = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token).unwrap(),
    )
    .unwrap();
    let mut west_access = access(env.cs.member("west").unwrap());
    west_access.token = token;
    let reader = causeway_controllers::clusters::join::client_for(&west_access)
        .await
        .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(reader.clone(), "demo");
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 2);
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(reader.clone(), "causeway-system");
    let err = secrets.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    let err = pods.delete("x", &Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );

    // registering west again without --search-access takes the access back
    register(
        hub.clone(),
        hub_endpoint(&env.cs.hub),
        "west",
        &causeway_e2e::member(env.cs.member("west").unwrap()).await,
        &RegisterOptions {
            token_seconds: 3600,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        get(
            &env,
            "hub",
            &["secret", "-n", "causeway-system", "west-credentials"]
        )
        .await
        .is_none(),
        "the hub no longer holds west's credentials"
    );
    assert!(
        get(&env, "west", &["clusterrolebinding", SEARCH_ACCOUNT])
            .await
            .is_none(),
        "the read grant is gone from west"
    );
    let err = pods.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401 || s.code == 403),
        "{err}"
    );
    eventually("a NotIndexed Event on west", WAIT, || async {
        not_indexed(&env)
            .await
            .iter()
            .any(|(c, n)| c == "west" && n.contains("--search-access"))
            .then_some(())
    })
    .await;
    search.shutdown().await;
}
