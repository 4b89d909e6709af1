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
