//! A member leaving the clusterset (G.48–49, ★ `unjoin --preserve`): the copies its
//! Works put there are deleted (Background) or, with `--preserve`, orphaned (no longer
//! labelled or annotated as Causeway's), and the Works' finalizers are released so the
//! execution namespace can go. Run by the hub for a Push member (after its workers
//! stopped) and by a Pull member's agent; [`release`] alone when the member cannot be
//! reached (its copies then stay, as Karmada leaves them).

use std::time::Duration;

use causeway_crds::federation::work::{Work, conditions};
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::finalizers;
use causeway_runtime::apply;
use kube::api::{Api, ListParams};

use super::plan::{ObjRef, belongs_to, work_ref};
use super::write::{delete, get, orphan};
use crate::propagation::kinds::resolve_served;

/// Deletes (or, with `preserve` or a Work's own preserveResourcesOnDeletion, orphans)
/// in `member` every object the Works of `cluster` put there, then releases the Works.
/// Every manifest is tried (a kind the member does not serve is skipped); returns how
/// many objects it handled, or every failure at once.
pub async fn leave(
    cluster: &str,
    hub: &kube::Client,
    member: &kube::Client,
    preserve: bool,
    limit: Duration,
) -> anyhow::Result<usize> {
    let works = list(hub, cluster, limit).await?;
    let mut n = 0;
    let mut failed = Vec::new();
    for w in &works {
        let wref = work_ref(w);
        let keep = preserve || w.spec.preserve_resources_on_deletion == Some(true);
        for m in &w.spec.workload.manifests {
            let obj = ObjRef::of(&m.0);
            match withdraw_one(cluster, member, &obj, &wref, keep, limit).await {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => failed.push(format!("{obj}: {e}")),
            }
        }
    }
    release_all(hub, &works).await?;
    if !failed.is_empty() {
        anyhow::bail!(
            "{} object(s) left in place: {}",
            failed.len(),
            failed.join("; ")
        );
    }
    Ok(n)
}

/// Deletes or orphans one object if it is this Work's; false when there was nothing
/// of Causeway's to handle (gone, another's, or a kind the member does not serve).
async fn withdraw_one(
    cluster: &str,
    member: &kube::Client,
    obj: &ObjRef,
    wref: &str,
    keep: bool,
    limit: Duration,
) -> Result<bool, String> {
    // a kind the member does not serve has nothing there; a member that did not
    // answer has, and that is a failure, not nothing
    let Some((resource, namespaced)) =
        resolve_served(member, &obj.api_version, &obj.kind, limit).await?
    else {
        return Ok(false);
    };
    let api = if namespaced {
        Api::namespaced_with(member.clone(), &obj.namespace, &resource)
    } else {
        Api::all_with(member.clone(), &resource)
    };
    let timed_out = conditions::REASON_DELETION_TIMED_OUT;
    let found = get(&api, obj, cluster, limit, timed_out)
        .await
        .map_err(|e| e.message)?;
    // objects Causeway never managed (or another Work's) are never touched
    if !found.as_ref().is_some_and(|o| belongs_to(o, wref)) {
        return Ok(false);
    }
    let done = if keep {
        orphan(&api, obj, cluster, limit).await
    } else {
        delete(&api, obj, cluster, limit).await
    };
    done.map(|_| true).map_err(|e| e.message)
}

/// Releases the Works of `cluster` without touching the member (it cannot be reached,
/// or its agent is gone): their copies stay there.
pub async fn release(cluster: &str, hub: &kube::Client, limit: Duration) -> anyhow::Result<usize> {
    let works = list(hub, cluster, limit).await?;
    release_all(hub, &works).await?;
    Ok(works.len())
}

async fn list(hub: &kube::Client, cluster: &str, limit: Duration) -> anyhow::Result<Vec<Work>> {
    let api: Api<Work> = Api::namespaced(hub.clone(), &execution_namespace(cluster));
    let listed = crate::clusters::within(limit, api.list(&ListParams::default()))
        .await
        .map_err(|e| anyhow::anyhow!("listing the Works of {cluster}: {e}"))?;
    Ok(listed.items)
}

async fn release_all(hub: &kube::Client, works: &[Work]) -> anyhow::Result<()> {
    for w in works {
        let api: Api<Work> = Api::namespaced(
            hub.clone(),
            w.metadata.namespace.as_deref().unwrap_or_default(),
        );
        apply::remove_finalizer(&api, w, finalizers::WORK).await?;
    }
    Ok(())
}
