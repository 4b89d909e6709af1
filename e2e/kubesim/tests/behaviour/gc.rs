//! Owner-reference garbage collection: background, foreground and orphan deletes.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::helpers::*;

struct Family {
    cms: Api<ConfigMap>,
    secrets: Api<Secret>,
    owner_uid: String,
}

fn owner_ref(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "blockOwnerDeletion": true})
}

/// An owner ConfigMap with a dependent ConfigMap and a dependent Secret.
async fn family(env: &Env, dep_finalizers: Value) -> Family {
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let owner = cms
        .create(&pp, &cm("owner", json!({}), json!({})))
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    let dep: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "dep", "ownerReferences": [owner_ref("owner", &uid)], "finalizers": dep_finalizers},
    }))
    .unwrap();
    cms.create(&pp, &dep).await.unwrap();
    let sec: Secret = serde_json::from_value(json!({
        "metadata": {"name": "dep-secret", "ownerReferences": [owner_ref("owner", &uid)]},
        "stringData": {"a": "b"},
    }))
    .unwrap();
    secrets.create(&pp, &sec).await.unwrap();
    Family {
        cms,
        secrets,
        owner_uid: uid,
    }
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let env = start().await;
    let f = family(&env, json!([])).await;
    f.cms
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        is_gone(&f.cms, "owner").await,
        "background: the owner goes at once"
    );
    eventually("dependents collected", || async {
        (is_gone(&f.cms, "dep").await && is_gone(&f.secrets, "dep-secret").await).then_some(())
    })
    .await;
}

#[tokio::test]
async fn dependents_of_a_missing_owner_are_collected_but_not_those_with_a_live_owner() {
    let env = start().await;
    let f = family(&env, json!([])).await;
    let pp = PostParams::default();
    let orphan: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "dangling", "ownerReferences": [owner_ref("ghost", "00000000-0000-0000-0000-000000000000")]},
    }))
    .unwrap();
    f.cms.create(&pp, &orphan).await.unwrap();
    let other = f
        .cms
        .create(&pp, &cm("other-owner", json!({}), json!({})))
        .await
        .unwrap();
    let two: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "two-owners", "ownerReferences": [
            owner_ref("owner", &f.owner_uid),
            owner_ref("other-owner", other.metadata.uid.as_deref().unwrap()),
        ]},
    }))
    .unwrap();
    f.cms.create(&pp, &two).await.unwrap();

    eventually("dangling dependent collected", || async {
        is_gone(&f.cms, "dangling").await.then_some(())
    })
    .await;
    f.cms
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    eventually("dep collected", || async {
        is_gone(&f.cms, "dep").await.then_some(())
    })
    .await;
    assert!(
        !is_gone(&f.cms, "two-owners").await,
        "a dependent with a remaining owner stays"
    );
}

#[tokio::test]
async fn foreground_deletion_waits_for_dependents() {
    let env = start().await;
    let f = family(&env, json!(["test.causeway.io/hold"])).await;
    let from = env.server.resource_version().to_string();
    let mut events = f
        .cms
        .watch(
            &WatchParams::default().disable_bookmarks().timeout(10),
            &from,
        )
        .await
        .unwrap()
        .boxed();

    let resp = f
        .cms
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = resp
        .left()
        .expect("foreground delete returns the object being deleted");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );

    eventually("the dependent is being deleted", || async {
        f.cms
            .get("dep")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    eventually("the secret dependent is deleted", || async {
        is_gone(&f.secrets, "dep-secret").await.then_some(())
    })
    .await;
    let o = f
        .cms
        .get("owner")
        .await
        .expect("the owner waits for its dependents");
    assert!(o.metadata.deletion_timestamp.is_some());

    f.cms
        .patch(
            "dep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("the owner goes after its dependents", || async {
        is_gone(&f.cms, "owner").await.then_some(())
    })
    .await;

    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        match within("DELETED events", events.next())
            .await
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(c) => deleted.push(c.metadata.name.unwrap()),
            WatchEvent::Added(_) | WatchEvent::Modified(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        deleted,
        vec!["dep", "owner"],
        "dependent deleted before the owner"
    );
}

#[tokio::test]
async fn orphan_deletion_leaves_dependents_without_the_owner_reference() {
    let env = start().await;
    let f = family(&env, json!([])).await;
    f.cms
        .delete("owner", &DeleteParams::orphan())
        .await
        .unwrap();
    eventually("owner deleted", || async {
        is_gone(&f.cms, "owner").await.then_some(())
    })
    .await;
    let dep = f.cms.get("dep").await.expect("orphaned dependent stays");
    assert!(
        dep.metadata.owner_references.unwrap_or_default().is_empty(),
        "the owner reference is removed"
    );
    let sec = f
        .secrets
        .get("dep-secret")
        .await
        .expect("orphaned secret stays");
    assert!(sec.metadata.owner_references.unwrap_or_default().is_empty());
    // and nothing collects them later
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!is_gone(&f.cms, "dep").await);
    assert!(!is_gone(&f.secrets, "dep-secret").await);
}

/// kube-apiserver's Job storage: a batch/v1 Job deleted with no propagationPolicy (and
/// no orphanDependents) orphans its dependents (the v1 default, kept for backwards
/// compatibility) and says so in a Warning header; an explicit policy is obeyed and
/// not warned about. Deleting a collection warns the same way.
#[tokio::test]
async fn a_job_deleted_without_a_policy_orphans_its_dependents_and_warns() {
    use http_body_util::BodyExt;
    use k8s_openapi::api::batch::v1::Job;
    const WARNING: &str = "299 - \"child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning\"";
    let env = start().await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    // a Job and a dependent of it
    let job_with_dependent = |name: &'static str| {
        let (jobs, cms) = (jobs.clone(), cms.clone());
        async move {
            let pp = PostParams::default();
            let j: Job = serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}}}))
            .unwrap();
            let uid = jobs.create(&pp, &j).await.unwrap().metadata.uid.unwrap();
            let dep: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("{name}-dep"),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}]}}))
            .unwrap();
            cms.create(&pp, &dep).await.unwrap();
        }
    };
    let delete = |path: String, body: Value| {
        let client = env.client.clone();
        async move {
            let req = http::Request::builder()
                .method("DELETE")
                .uri(path)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            let resp = client.send(req).await.unwrap();
            let code = resp.status().as_u16();
            let warnings: Vec<String> = resp
                .headers()
                .get_all(http::header::WARNING)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            (code, warnings, body)
        }
    };
    let jobs_path = "/apis/batch/v1/namespaces/default/jobs";

    job_with_dependent("kept").await;
    let (code, warnings, body) = delete(format!("{jobs_path}/kept"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(warnings, [WARNING]);
    assert_eq!(body["metadata"]["finalizers"], json!(["orphan"]), "{body}");
    eventually("the Job gone once orphaning is done", || async {
        is_gone(&jobs, "kept").await.then_some(())
    })
    .await;
    let dep = cms
        .get("kept-dep")
        .await
        .expect("the dependent is orphaned");
    assert!(
        dep.metadata.owner_references.unwrap_or_default().is_empty(),
        "its owner reference removed"
    );

    job_with_dependent("collected").await;
    let (code, warnings, body) = delete(
        format!("{jobs_path}/collected"),
        json!({"propagationPolicy": "Background"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");
    eventually("a Background delete collects the dependent", || async {
        (is_gone(&jobs, "collected").await && is_gone(&cms, "collected-dep").await).then_some(())
    })
    .await;
    // orphanDependents is a policy too: no warning
    job_with_dependent("old-style").await;
    let (_, warnings, _) = delete(
        format!("{jobs_path}/old-style"),
        json!({"orphanDependents": true}),
    )
    .await;
    assert!(warnings.is_empty(), "{warnings:?}");

    job_with_dependent("many").await;
    let (code, warnings, body) = delete(jobs_path.to_string(), json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(warnings, [WARNING]);
    eventually("the collection's Job gone", || async {
        is_gone(&jobs, "many").await.then_some(())
    })
    .await;
    assert!(!is_gone(&cms, "many-dep").await, "orphaned, not collected");
}
