//! Clusterset membership in the member itself (KEP-2149, CID-4 and CID-5): for as long
//! as a cluster is a member, it carries the About API ClusterProperties
//! `clusterset.k8s.io` (the clusterset's name) and `cluster.clusterset.k8s.io` (its
//! cluster id), unchanged; when it leaves, `clusterset.k8s.io` goes (the id stays: the
//! KEP wants a cluster id for the cluster's whole life). A cluster whose
//! `clusterset.k8s.io` names another clusterset may not join.
//!
//! The clusterset's name is the hub's: key `name` of the ConfigMap
//! `causeway-system/clusterset`, made by the first controller or join with a name
//! unique to the hub (`causeway-` and the start of its kube-system uid) unless an
//! operator made it first (`kubectl -n causeway-system create configmap clusterset
//! --from-literal=name=prod`). It may not change while there are members.
//!
//! The worker ([`run`]) runs per member like the others (the hub controller for Push
//! members, the agent in a Pull member): watches the member's ClusterProperties → the
//! pure [`fixes`] → the shared applier; a property it had to put back, an About API
//! the member lacks, or an identity that may not read the properties is a Warning Event
//! on the member's Cluster (`kubectl describe cluster` for Push members; a Pull agent's
//! are in the member's execution namespace on the hub, the only one where it may write
//! Events: `kubectl -n causeway-es-<name> get events`). Join and register claim the
//! properties at once ([`claim`]), so two hubs cannot both take one cluster. The name
//! must not change while there are members: every member would be told its property
//! was put back.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::{Context, bail};
use causeway_crds::about::v1beta1::{ClusterProperty, ClusterPropertySpec};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::{
    CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, FIELD_MANAGER, SYSTEM_NAMESPACE,
};
use causeway_runtime::apply;
use causeway_runtime::reflect::{Reflector, Wake};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{CALL_TIMEOUT, CallError, call, within};

/// The API server's status code of a failed call, if it answered.
fn code(e: &CallError) -> Option<u16> {
    match e {
        CallError::Kube(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

/// `fut` within [`CALL_TIMEOUT`].
async fn timed<T>(
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    call(CALL_TIMEOUT, fut).await
}

/// The hub ConfigMap (in causeway-system) whose key [`NAME_KEY`] names the clusterset.
pub const CLUSTERSET_CONFIGMAP: &str = "clusterset";
/// The key of [`CLUSTERSET_CONFIGMAP`] holding the name.
pub const NAME_KEY: &str = "name";

/// The clusterset's name from the hub, if it has one yet.
pub async fn clusterset(hub: &kube::Client) -> anyhow::Result<Option<String>> {
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let cm = within(CALL_TIMEOUT, cms.get_opt(CLUSTERSET_CONFIGMAP))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "reading the clusterset's name (ConfigMap {SYSTEM_NAMESPACE}/{CLUSTERSET_CONFIGMAP}) on the hub: {e}"
            )
        })?;
    cm.map(|cm| name_of(&cm)).transpose()
}

/// Pure: the name a clusterset ConfigMap holds, or why it holds none.
pub fn name_of(cm: &ConfigMap) -> anyhow::Result<String> {
    let name = cm
        .data
        .as_ref()
        .and_then(|d| d.get(NAME_KEY))
        .map(|n| n.trim())
        .unwrap_or_default();
    if name.is_empty() || name.chars().count() > 128_000 {
        bail!(
            "ConfigMap {SYSTEM_NAMESPACE}/{CLUSTERSET_CONFIGMAP} on the hub must hold the clusterset's name (1 to 128,000 characters) under key {NAME_KEY:?}"
        );
    }
    Ok(name.to_string())
}

/// Pure: the name a hub gets when nobody chose one: `causeway-` and the first eight
/// characters of the hub's kube-system uid (unique to the hub, so a cluster still in
/// another hub's clusterset is told apart).
pub fn default_name(hub_kube_system_uid: &str) -> String {
    let short: String = hub_kube_system_uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("causeway-{short}")
}

/// The clusterset's name, made on the hub ([`default_name`]) when it has none yet.
pub async fn ensure_clusterset(hub: &kube::Client) -> anyhow::Result<String> {
    if let Some(name) = clusterset(hub).await? {
        return Ok(name);
    }
    let uid = super::join::kube_system_uid(hub).await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": CLUSTERSET_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
        "data": {NAME_KEY: default_name(&uid)},
    }))?;
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let mut made = timed(cms.create(&PostParams::default(), &cm)).await;
    if made.as_ref().err().and_then(code) == Some(404) {
        // a fresh hub: no causeway-system yet
        let ns: Api<Namespace> = Api::all(hub.clone());
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}});
        timed(ns.patch(
            SYSTEM_NAMESPACE,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&body),
        ))
        .await
        .map_err(|e| anyhow::anyhow!("creating namespace {SYSTEM_NAMESPACE} on the hub: {e}"))?;
        made = timed(cms.create(&PostParams::default(), &cm)).await;
    }
    match made {
        Ok(made) => name_of(&made),
        // another controller or join made it first: theirs holds
        Err(e) if code(&e) == Some(409) => clusterset(hub)
            .await?
            .context("the clusterset ConfigMap vanished right after it was made"),
        Err(e) => Err(anyhow::anyhow!(
            "making the clusterset's name (ConfigMap {SYSTEM_NAMESPACE}/{CLUSTERSET_CONFIGMAP}) on the hub: {e}"
        )),
    }
}

/// The hub controller's part: makes sure the clusterset has a name (retrying until it
/// can, or `stop`), so members' workers find one.
pub async fn name_the_clusterset(hub: kube::Client, stop: CancellationToken) {
    let mut delay = Duration::from_millis(500);
    loop {
        match ensure_clusterset(&hub).await {
            Ok(name) => {
                tracing::info!(clusterset = %name, "clusterset name");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot name the clusterset yet; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => return,
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Pure (CID-5): refuses a cluster whose `clusterset.k8s.io` names another clusterset.
pub fn refuse_other_clusterset(
    name: &str,
    member_has: Option<&str>,
    ours: &str,
) -> anyhow::Result<()> {
    match member_has {
        Some(theirs) if theirs != ours => bail!(
            "cluster \"{name}\" belongs to clusterset \"{theirs}\" (its ClusterProperty {CLUSTERSET_PROPERTY}), not this hub's \"{ours}\": a cluster is a member of one clusterset at a time; remove it from \"{theirs}\" first (or, if that clusterset is gone, `kubectl delete clusterproperty {CLUSTERSET_PROPERTY}` in the cluster)"
        ),
        _ => Ok(()),
    }
}

/// Joining: claims the member's membership properties at once (server-side apply
/// without force, so a value another manager set is a conflict, not overwritten), so
/// two hubs joining one cluster at the same moment cannot both take it (CID-5). A
/// member without the About API is let in; its worker says `AboutAPIMissing`.
pub async fn claim(
    member: &kube::Client,
    name: &str,
    clusterset: &str,
    id: &str,
) -> anyhow::Result<()> {
    let api: Api<ClusterProperty> = Api::all(member.clone());
    for fix in fixes(&BTreeMap::new(), clusterset, id) {
        let mut body = serde_json::to_value(property(&fix))?;
        body["apiVersion"] = json!("about.k8s.io/v1beta1");
        body["kind"] = json!("ClusterProperty");
        match timed(api.patch(
            fix.name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&body),
        ))
        .await
        {
            Ok(_) => {}
            Err(e) if code(&e) == Some(404) => return Ok(()),
            Err(e) if code(&e) == Some(409) => bail!(
                "cluster \"{name}\" has a ClusterProperty {} that another tool set to another value than {:?} ({e}): it belongs to another clusterset, or is being joined to one; remove it from there first",
                fix.name,
                fix.value
            ),
            Err(e) => bail!("writing the member's ClusterProperty {}: {e}", fix.name),
        }
    }
    Ok(())
}

/// The value of the member's ClusterProperty `name` (v1beta1, else v1alpha1), if it
/// has the About API and that property.
pub async fn member_property(member: &kube::Client, name: &str) -> anyhow::Result<Option<String>> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    for version in ["v1beta1", "v1alpha1"] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("about.k8s.io", version, "ClusterProperty"),
            "clusterproperties",
        );
        let api: Api<DynamicObject> = Api::all_with(member.clone(), &ar);
        match within(CALL_TIMEOUT, api.get_opt(name)).await {
            Ok(Some(p)) => {
                return Ok(p
                    .data
                    .pointer("/spec/value")
                    .and_then(|v| v.as_str())
                    .map(String::from));
            }
            Ok(None) => {}
            Err(e) => bail!("reading the member's ClusterProperty {name}: {e}"),
        }
    }
    Ok(None)
}

/// One property to write: its name, the value it must hold, and what it held (None:
/// it was missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    /// The property's name.
    pub name: &'static str,
    /// Its value as a member.
    pub value: String,
    /// What it held before, when it held something else.
    pub was: Option<String>,
}

/// Pure: the properties a member of `clusterset` with cluster id `id` lacks or holds
/// wrongly, given the values it has (`observed`: name → value).
pub fn fixes(observed: &BTreeMap<String, String>, clusterset: &str, id: &str) -> Vec<Fix> {
    [(CLUSTERSET_PROPERTY, clusterset), (CLUSTER_ID_PROPERTY, id)]
        .into_iter()
        .filter_map(|(name, want)| match observed.get(name) {
            Some(v) if v == want => None,
            was => Some(Fix {
                name,
                value: want.to_string(),
                was: was.cloned(),
            }),
        })
        .collect()
}

/// The object the applier writes for `fix`.
fn property(fix: &Fix) -> ClusterProperty {
    ClusterProperty::new(
        fix.name,
        ClusterPropertySpec {
            value: fix.value.clone(),
        },
    )
}

/// Pure: the Warning Event for a property that held `was` and was put back.
pub fn restored_event(fix: &Fix) -> Option<Event> {
    let was = fix.was.as_ref()?;
    Some(Event {
        type_: EventType::Warning,
        reason: "ClusterPropertyRestored".into(),
        note: Some(
            format!(
                "the member's ClusterProperty {} was {was:?} and is {:?} again: it may not change while the cluster is a member (KEP-2149); to change it, remove the cluster from the clusterset first",
                fix.name, fix.value
            )
            .chars()
            .take(1000)
            .collect(),
        ),
        action: "Restore".into(),
        secondary: None,
    })
}

/// The Event when the member does not serve the About API's v1beta1.
fn about_api_missing() -> Event {
    Event {
        type_: EventType::Warning,
        reason: "AboutAPIMissing".into(),
        note: Some(format!(
            "the member does not serve about.k8s.io/v1beta1 ClusterProperties, so it cannot carry {CLUSTERSET_PROPERTY} and {CLUSTER_ID_PROPERTY}: run `causeway crds install` against the member (add --force if it has an older About API that serves v1alpha1 only)"
        )),
        action: "Record".into(),
        secondary: None,
    }
}

/// The Event when the member's credentials may not read ClusterProperties.
fn no_access(e: &CallError, pull: bool) -> Event {
    let rbac = if pull {
        "deploy/agent/rbac.yaml"
    } else {
        "deploy/rbac/member.yaml"
    };
    Event {
        type_: EventType::Warning,
        reason: "ClusterPropertiesForbidden".into(),
        note: Some(
            format!(
                "Causeway's identity in the member may not list ClusterProperties ({e}), so the member cannot carry {CLUSTERSET_PROPERTY} and {CLUSTER_ID_PROPERTY}: apply this release's {rbac} in the member"
            )
            .chars()
            .take(1000)
            .collect(),
        ),
        action: "Record".into(),
        secondary: None,
    }
}

/// The Cluster `name` as an Event's object: as it is (the Event lands where `kubectl
/// describe cluster` finds it) for the hub controller, in the member's execution
/// namespace for a Pull member's agent (the only namespace it may write Events in).
fn cluster_ref(name: &str, pull: bool) -> ObjectReference {
    ObjectReference {
        api_version: Some("causeway.io/v1alpha1".into()),
        kind: Some("Cluster".into()),
        name: Some(name.into()),
        namespace: pull.then(|| execution_namespace(name)),
        ..Default::default()
    }
}

async fn tell(hub: &kube::Client, recorder: &Recorder, cluster: &str, pull: bool, ev: &Event) {
    tracing::warn!(cluster, reason = %ev.reason, note = ev.note.as_deref().unwrap_or_default(), "clusterset membership");
    // the Cluster's uid ties the Event to it; without it, by name
    let mut reference = cluster_ref(cluster, pull);
    let clusters: Api<Cluster> = Api::all(hub.clone());
    if let Ok(Some(c)) = within(CALL_TIMEOUT, clusters.get_opt(cluster)).await {
        reference.uid = c.metadata.uid;
    }
    if let Err(e) = call(CALL_TIMEOUT, recorder.publish(ev, &reference)).await {
        tracing::debug!(cluster, error = %e, "could not publish an Event");
    }
}

/// Runs until `stop`: keeps the member's membership properties (see the module docs).
/// `cluster` is the member's Cluster name on the hub, `id` its cluster id, `pull` true in
/// a Pull member's agent.
pub async fn run(
    cluster: String,
    id: String,
    member: kube::Client,
    hub: kube::Client,
    pull: bool,
    stop: CancellationToken,
) {
    let recorder = Recorder::new(
        hub.clone(),
        Reporter {
            controller: "causeway-membership".into(),
            instance: Some(cluster.clone()),
        },
    );
    let api: Api<ClusterProperty> = Api::all(member);
    // the member must serve the About API first, to this identity
    let mut told = None;
    let mut delay = Duration::from_millis(500);
    let one = ListParams::default().limit(1);
    loop {
        let listed = tokio::select! {
            r = timed(api.list(&one)) => r,
            _ = stop.cancelled() => return,
        };
        let ev = match &listed {
            Ok(_) => break,
            Err(e) if code(e) == Some(404) => Some(about_api_missing()),
            Err(e) if matches!(code(e), Some(401 | 403)) => Some(no_access(e, pull)),
            Err(e) => {
                tracing::warn!(cluster, error = %e, "cannot list the member's ClusterProperties yet; retrying");
                None
            }
        };
        if let Some(ev) = ev {
            if told.as_ref() != Some(&ev.reason) {
                tokio::select! {
                    _ = tell(&hub, &recorder, &cluster, pull, &ev) => {}
                    _ = stop.cancelled() => return,
                }
                told = Some(ev.reason.clone());
            }
            delay = Duration::from_secs(30);
        } else {
            delay = (delay * 2).min(Duration::from_secs(30));
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => return,
        }
    }
    let wake = Wake::new();
    let cache = Reflector::start(
        api.clone(),
        watcher::Config::default(),
        stop.clone(),
        "clusterproperties",
        None,
    )
    .subscribe(wake.clone());
    if cache.wait_until_ready().await.is_err() {
        tracing::warn!(
            cluster,
            "stopped before the member's ClusterProperties were listed"
        );
        return;
    }
    let mut dirty = causeway_runtime::reflect::Dirty::full();
    loop {
        let mut failed = HashSet::new();
        match clusterset(&hub).await {
            Ok(Some(name)) => {
                let state = cache.state();
                let observed: BTreeMap<String, String> = state
                    .iter()
                    .map(|p| {
                        (
                            p.metadata.name.clone().unwrap_or_default(),
                            p.spec.value.clone(),
                        )
                    })
                    .collect();
                for fix in fixes(&observed, &name, &id) {
                    let actual = state
                        .iter()
                        .find(|p| p.metadata.name.as_deref() == Some(fix.name));
                    // bounded, and dropped at once when the member leaves: the leave path
                    // deletes clusterset.k8s.io once this worker has stopped
                    let desired = property(&fix);
                    let written = tokio::select! {
                        r = tokio::time::timeout(
                            CALL_TIMEOUT,
                            apply::ensure(&api, &desired, actual.map(|a| a.as_ref())),
                        ) => r
                            .map_err(|_| format!("no answer within {} ms", CALL_TIMEOUT.as_millis()))
                            .and_then(|r| r.map_err(|e| e.to_string())),
                        _ = stop.cancelled() => return,
                    };
                    match written {
                        Ok(_) => {
                            tracing::info!(cluster, property = fix.name, value = %fix.value, "membership property written");
                            if let Some(ev) = restored_event(&fix) {
                                tokio::select! {
                                    _ = tell(&hub, &recorder, &cluster, pull, &ev) => {}
                                    _ = stop.cancelled() => return,
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(cluster, property = fix.name, error = %e, "cannot write the membership property; retrying");
                            failed.insert((String::new(), fix.name.to_string()));
                        }
                    }
                }
            }
            Ok(None) => {
                tracing::warn!(
                    cluster,
                    "the hub has no clusterset name yet (ConfigMap {SYSTEM_NAMESPACE}/{CLUSTERSET_CONFIGMAP}); retrying"
                );
                failed.insert((String::new(), CLUSTERSET_PROPERTY.to_string()));
            }
            Err(e) => {
                tracing::warn!(cluster, error = %format!("{e:#}"), "cannot read the clusterset's name; retrying");
                failed.insert((String::new(), CLUSTERSET_PROPERTY.to_string()));
            }
        }
        dirty = match wake.after_round(&dirty, &failed, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// The member leaves: its `clusterset.k8s.io` goes (CID-4); its cluster id stays.
/// True when the property was there.
pub async fn leave(member: &kube::Client) -> anyhow::Result<bool> {
    let api: Api<ClusterProperty> = Api::all(member.clone());
    match timed(api.delete(CLUSTERSET_PROPERTY, &Default::default())).await {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(false),
        Err(e) => bail!("deleting the member's ClusterProperty {CLUSTERSET_PROPERTY}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_member_gets_exactly_the_properties_it_lacks_or_holds_wrongly() {
        let set = CLUSTERSET_PROPERTY;
        let id = CLUSTER_ID_PROPERTY;
        let fix = |name: &'static str, value: &str, was: Option<&str>| Fix {
            name,
            value: value.into(),
            was: was.map(String::from),
        };
        let cases: Vec<(&str, BTreeMap<String, String>, Vec<Fix>)> = vec![
            (
                "a new member",
                observed(&[]),
                vec![fix(set, "prod", None), fix(id, "east", None)],
            ),
            (
                "its id came from its own property",
                observed(&[(id, "east")]),
                vec![fix(set, "prod", None)],
            ),
            (
                "as it should be",
                observed(&[(set, "prod"), (id, "east")]),
                vec![],
            ),
            (
                "changed by hand",
                observed(&[(set, "other"), (id, "east")]),
                vec![fix(set, "prod", Some("other"))],
            ),
            (
                "its id changed while a member",
                observed(&[(set, "prod"), (id, "west")]),
                vec![fix(id, "east", Some("west"))],
            ),
            (
                "other properties are none of its business",
                observed(&[
                    (set, "prod"),
                    (id, "east"),
                    ("fingerprint.example.com", "x"),
                ]),
                vec![],
            ),
        ];
        for (what, have, want) in cases {
            assert_eq!(fixes(&have, "prod", "east"), want, "{what}");
        }
    }

    #[test]
    fn only_a_changed_property_is_an_event() {
        let new = Fix {
            name: CLUSTERSET_PROPERTY,
            value: "prod".into(),
            was: None,
        };
        assert!(restored_event(&new).is_none());
        let changed = Fix {
            was: Some("other".into()),
            ..new
        };
        let ev = restored_event(&changed).unwrap();
        assert_eq!(ev.reason, "ClusterPropertyRestored");
        assert!(matches!(ev.type_, EventType::Warning));
        let note = ev.note.unwrap();
        assert!(
            note.contains("\"other\"") && note.contains("\"prod\"") && note.contains("KEP-2149"),
            "{note}"
        );
    }

    #[test]
    fn joining_from_another_clusterset_is_refused_with_what_to_do() {
        assert!(refuse_other_clusterset("east", None, "prod").is_ok());
        assert!(refuse_other_clusterset("east", Some("prod"), "prod").is_ok());
        let e = refuse_other_clusterset("east", Some("staging"), "prod")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("belongs to clusterset \"staging\"")
                && e.contains("not this hub's \"prod\"")
                && e.contains("kubectl delete clusterproperty clusterset.k8s.io"),
            "{e}"
        );
    }

    #[test]
    fn the_clusterset_name_is_the_configmaps_or_a_clear_error() {
        let cm = |data: serde_json::Value| -> ConfigMap {
            serde_json::from_value(json!({"metadata": {"name": "clusterset"}, "data": data}))
                .unwrap()
        };
        assert_eq!(name_of(&cm(json!({"name": " prod\n"}))).unwrap(), "prod");
        for bad in [json!({}), json!({"name": " "}), json!({"other": "prod"})] {
            let e = name_of(&cm(bad.clone())).unwrap_err().to_string();
            assert!(e.contains("under key \"name\""), "{bad}: {e}");
        }
        assert_eq!(
            default_name("1A2b3c4d-5e6f-7a8b-9c0d-ef1234567890"),
            "causeway-1a2b3c4d"
        );
    }
}
