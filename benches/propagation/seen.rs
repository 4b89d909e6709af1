//! What the bench's watches saw, each sighting stamped when the event arrived: per
//! member, the first sighting of each Deployment and ConfigMap copy and of each image
//! of a Deployment; on the hub, when each ResourceBinding was first `FullyApplied=True`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::bail;
use causeway_crds::federation::binding::{ResourceBinding, conditions};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use crate::objects::{LABEL, NS, image_of};

/// One member's sightings.
#[derive(Default)]
struct Member {
    deployments: HashMap<String, Instant>,
    config_maps: HashMap<String, Instant>,
    /// (Deployment, image) → first seen.
    images: HashMap<(String, String), Instant>,
}

#[derive(Default)]
struct State {
    members: Vec<Member>,
    /// Binding → first seen FullyApplied=True (None: seen, not yet).
    bindings: HashMap<String, Option<Instant>>,
    /// Watches whose initial list is done.
    listed: usize,
}

/// The watches (running until `stop`) and what they saw.
#[derive(Clone)]
pub struct Seen {
    names: Arc<Vec<String>>,
    state: Arc<Mutex<State>>,
}

/// Every event of `events` (a watcher's) goes to `see` with the time it arrived; an
/// initial list's end counts in `State::listed`.
fn follow<K: Send + 'static>(
    state: Arc<Mutex<State>>,
    what: String,
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    see: impl Fn(&mut State, &K, Instant) + Send + 'static,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        loop {
            let ev = tokio::select! {
                ev = events.next() => ev,
                _ = stop.cancelled() => return,
            };
            let at = Instant::now();
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            match ev {
                Some(Ok(Event::Apply(o) | Event::InitApply(o))) => see(&mut s, &o, at),
                Some(Ok(Event::InitDone)) => s.listed += 1,
                Some(Ok(Event::Init | Event::Delete(_))) => {}
                Some(Err(e)) => tracing::warn!(watch = %what, error = %e, "watch failed; retrying"),
                None => return,
            }
        }
    });
}

impl Seen {
    /// Starts the watches: every member's labelled Deployments and ConfigMaps in
    /// [`NS`], and the hub's ResourceBindings there.
    pub fn watch(
        hub: &kube::Client,
        members: &[(String, kube::Client)],
        stop: &CancellationToken,
    ) -> Seen {
        let state = Arc::new(Mutex::new(State {
            members: members.iter().map(|_| Member::default()).collect(),
            ..State::default()
        }));
        let cfg = watcher::Config::default().labels(&format!("{}={}", LABEL.0, LABEL.1));
        for (i, (name, client)) in members.iter().enumerate() {
            let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
            follow(
                state.clone(),
                format!("{name} Deployments"),
                watcher::watcher(api, cfg.clone()).default_backoff(),
                move |s, d: &Deployment, at| {
                    let m = &mut s.members[i];
                    m.deployments.entry(d.name_any()).or_insert(at);
                    if let Some(image) = image_of(d) {
                        m.images
                            .entry((d.name_any(), image.to_string()))
                            .or_insert(at);
                    }
                },
                stop.clone(),
            );
            // metadata only: the bench needs the names
            let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), NS);
            follow(
                state.clone(),
                format!("{name} ConfigMaps"),
                watcher::watcher(api, cfg.clone()).default_backoff(),
                move |s, c, at| {
                    s.members[i].config_maps.entry(c.name_any()).or_insert(at);
                },
                stop.clone(),
            );
        }
        let api: Api<ResourceBinding> = Api::namespaced(hub.clone(), NS);
        follow(
            state.clone(),
            "hub ResourceBindings".into(),
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
            |s, b: &ResourceBinding, at| {
                let applied = b.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == conditions::FULLY_APPLIED && c.status == "True")
                });
                let e = s.bindings.entry(b.name_any()).or_default();
                if applied {
                    e.get_or_insert(at);
                }
            },
            stop.clone(),
        );
        Seen {
            names: Arc::new(members.iter().map(|(n, _)| n.clone()).collect()),
            state,
        }
    }

    /// Polls `check` (Ok: done, Err: what is still missing) until it is done; fails
    /// after `limit` saying what `what` still misses.
    async fn until<T>(
        &self,
        what: &str,
        limit: Duration,
        check: impl Fn(&State, &[String]) -> Result<T, String>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + limit;
        loop {
            let got = check(
                &self.state.lock().unwrap_or_else(PoisonError::into_inner),
                &self.names,
            );
            match got {
                Ok(t) => return Ok(t),
                Err(missing) if Instant::now() > deadline => {
                    bail!("{what}: not within {:.1} s: {missing}", limit.as_secs_f64())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Waits until every watch has its initial list (the bench's writes come after).
    pub async fn listed(&self, limit: Duration) -> anyhow::Result<()> {
        let want = 2 * self.names.len() + 1;
        self.until("the watches' initial lists", limit, |s, _| {
            (s.listed >= want)
                .then_some(())
                .ok_or(format!("{} of {want} listed", s.listed))
        })
        .await
    }

    /// Waits until every member has `deployments` Deployments and `config_maps`
    /// ConfigMaps; returns when the last one arrived.
    pub async fn all_copies(
        &self,
        deployments: usize,
        config_maps: usize,
        limit: Duration,
    ) -> anyhow::Result<Instant> {
        self.until("every copy in every member", limit, |s, names| {
            let short: Vec<String> = s
                .members
                .iter()
                .zip(names)
                .filter(|(m, _)| {
                    m.deployments.len() < deployments || m.config_maps.len() < config_maps
                })
                .map(|(m, n)| {
                    format!(
                        "{n} has {}/{deployments} Deployments and {}/{config_maps} ConfigMaps",
                        m.deployments.len(),
                        m.config_maps.len()
                    )
                })
                .collect();
            if !short.is_empty() {
                return Err(short.join("; "));
            }
            let last = s
                .members
                .iter()
                .flat_map(|m| m.deployments.values().chain(m.config_maps.values()))
                .max();
            Ok(*last.expect("at least one member with a copy"))
        })
        .await
    }

    /// Waits until `count` bindings are `FullyApplied=True`; returns when the last
    /// one was first seen so.
    pub async fn all_fully_applied(
        &self,
        count: usize,
        limit: Duration,
    ) -> anyhow::Result<Instant> {
        self.until("every binding FullyApplied=True", limit, |s, _| {
            let applied: Vec<Instant> = s.bindings.values().flatten().copied().collect();
            if applied.len() < count {
                return Err(format!(
                    "{} bindings seen, {}/{count} FullyApplied",
                    s.bindings.len(),
                    applied.len()
                ));
            }
            Ok(applied.into_iter().max().expect("count > 0"))
        })
        .await
    }

    /// Waits until every member has Deployment `name` with `image`; returns when each
    /// member first had it, in member order.
    pub async fn image_everywhere(
        &self,
        name: &str,
        image: &str,
        limit: Duration,
    ) -> anyhow::Result<Vec<Instant>> {
        let key = (name.to_string(), image.to_string());
        self.until(
            &format!("{name} with {image} in every member"),
            limit,
            |s, names| {
                let got: Vec<Option<Instant>> = s
                    .members
                    .iter()
                    .map(|m| m.images.get(&key).copied())
                    .collect();
                if got.iter().all(Option::is_some) {
                    return Ok(got.into_iter().flatten().collect());
                }
                Err(format!(
                    "missing in {}",
                    names
                        .iter()
                        .zip(&got)
                        .filter(|(_, g)| g.is_none())
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;
    use crate::objects::{deployment, image, image_patch, name, test_cluster};

    /// The watches against real API servers: copies, images and bindings are seen
    /// when they arrive, and a wait that runs out names what is missing.
    #[tokio::test]
    async fn sightings_follow_the_servers_and_timeouts_name_what_is_missing() {
        let (hub_server, hub) = test_cluster("hub").await;
        causeway_e2e::install_crds(&hub).await.unwrap();
        let mut servers = vec![hub_server];
        let mut members = Vec::new();
        for n in ["m1", "m2"] {
            let (s, c) = test_cluster(n).await;
            servers.push(s);
            members.push((n.to_string(), c));
        }
        let stop = CancellationToken::new();
        let _guard = stop.clone().drop_guard();
        let seen = Seen::watch(&hub, &members, &stop);
        seen.listed(Duration::from_secs(10)).await.unwrap();
        let short = Duration::from_millis(300);

        let d = |c: &kube::Client| Api::<Deployment>::namespaced(c.clone(), NS);
        d(&members[0].1)
            .create(&PostParams::default(), &deployment(1))
            .await
            .unwrap();
        let err = seen.all_copies(1, 0, short).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "every copy in every member: not within 0.3 s: m2 has 0/1 Deployments and 0/0 ConfigMaps"
        );
        let before = Instant::now();
        d(&members[1].1)
            .create(&PostParams::default(), &deployment(1))
            .await
            .unwrap();
        let last = seen
            .all_copies(1, 0, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            last > before,
            "the last copy is the one made after the timeout"
        );

        // an image change is seen per member, once each member has it
        let change = |c: &kube::Client| {
            let api = d(c);
            async move {
                let p = Patch::Merge(image_patch(4));
                api.patch(&name(1), &PatchParams::default(), &p)
                    .await
                    .unwrap();
            }
        };
        change(&members[0].1).await;
        let err = seen
            .image_everywhere(&name(1), &image(4), short)
            .await
            .unwrap_err();
        assert!(err.to_string().ends_with("missing in m2"), "{err}");
        change(&members[1].1).await;
        let at = seen
            .image_everywhere(&name(1), &image(4), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(at.len(), 2);
        assert!(at[0] < at[1], "m1 had it first: {at:?}");

        // bindings count once FullyApplied=True
        let rbs = Api::<ResourceBinding>::namespaced(hub.clone(), NS);
        let rb: ResourceBinding = serde_json::from_value(json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": "app-deployment", "namespace": NS},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": name(1)}}
        }))
        .unwrap();
        rbs.create(&PostParams::default(), &rb).await.unwrap();
        let err = seen.all_fully_applied(1, short).await.unwrap_err();
        assert!(
            err.to_string()
                .ends_with("1 bindings seen, 0/1 FullyApplied"),
            "{err}"
        );
        let status = json!({"status": {"conditions": [{
            "type": conditions::FULLY_APPLIED, "status": "True", "reason": "FullyAppliedSuccess",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
        }]}});
        rbs.patch_status(
            "app-deployment",
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .unwrap();
        seen.all_fully_applied(1, Duration::from_secs(10))
            .await
            .unwrap();
        for s in &servers {
            s.shutdown();
        }
    }
}
