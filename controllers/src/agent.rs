//! `causeway agent`: runs inside a Pull member and makes only outbound connections to
//! the hub. It runs the member's workers ([`crate::member::spawn_workers`]: cluster
//! status, MCS exporter into its execution namespace, MCS importer) and renews the
//! cluster's Lease, which the hub's monitor watches. It stops when its Cluster is
//! removed from the hub: at once when the Cluster is being deleted (it cleans up the
//! member first, and says so on its Lease), and when the Cluster has been missing, or
//! the hub has refused its identity, for a whole lease duration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode, conditions};
use causeway_crds::names::cluster_lease_name;
use causeway_crds::well_known::{SYSTEM_NAMESPACE, finalizers, labels};
use causeway_runtime::admin::Endpoints;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use crate::clusters::lease::Renewals;
use crate::clusters::options::Timing;
use crate::metrics::Metrics;

/// What the hub says of this agent's Cluster when the agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// A member: the agent runs, under this cluster id.
    Member(String),
    /// Being removed, and the hub waits for this agent to clean up the member (an agent
    /// that restarted during `causeway unregister`): it leaves, keeping what it
    /// imported and propagated when `preserve`.
    Leaving {
        /// `causeway unregister --preserve`.
        preserve: bool,
    },
}

/// Checks that `name` is a Pull Cluster on the hub describing this very member, and
/// returns its cluster id, or that it is being removed and still waits for this agent's
/// cleanup. Errors that may pass (the hub or the member not answering) are retried
/// until `stop`; what needs a person (no such Cluster, a Push Cluster, one whose
/// removal needs nothing more of the agent, another cluster's identity) is an error at
/// once.
pub async fn check_registration(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
    stop: &CancellationToken,
) -> anyhow::Result<Registration> {
    let mut delay = Duration::from_millis(500);
    loop {
        match try_registration(hub, member, name).await {
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(fatal)) => return Err(fatal),
            Err(passing) => {
                tracing::warn!(cluster = %name, error = %format!("{passing:#}"), "cannot check the registration yet; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => bail!("stopped before the registration could be checked"),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Pure: whether a Cluster being deleted still waits for its agent's cleanup: the hub
/// controller's finalizer holds it and the agent has not said (on `lease`) it left.
pub fn awaits_agent_cleanup(cluster: &Cluster, lease: Option<&Lease>) -> bool {
    cluster.metadata.deletion_timestamp.is_some()
        && cluster
            .finalizers()
            .iter()
            .any(|f| f == finalizers::CLUSTER)
        && !lease.is_some_and(|l| {
            l.annotations()
                .contains_key(crate::clusters::finalize::AGENT_LEFT)
        })
}

/// One try: `Err` for what may pass, `Ok(Err)` for what needs a person.
async fn try_registration(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
) -> anyhow::Result<anyhow::Result<Registration>> {
    let cluster = crate::clusters::within(
        crate::clusters::CALL_TIMEOUT,
        Api::<Cluster>::all(hub.clone()).get_opt(name),
    )
    .await
    .map_err(|e| anyhow::anyhow!("reading Cluster {name} from the hub: {e}"))?;
    let Some(cluster) = cluster else {
        return Ok(Err(anyhow::anyhow!(
            "no Cluster \"{name}\" on the hub: register the member first with `causeway register {name}`"
        )));
    };
    if cluster.spec.sync_mode != ClusterSyncMode::Pull {
        return Ok(Err(anyhow::anyhow!(
            "Cluster \"{name}\" is a Push member: the hub controller runs its workers, no agent is needed (re-register it with `causeway register` for pull mode)"
        )));
    }
    // never clean up (nor run in) a cluster this Cluster does not describe
    if let Some(want) = &cluster.spec.kube_system_uid {
        let have = crate::clusters::join::kube_system_uid(member).await?;
        if &have != want {
            return Ok(Err(anyhow::anyhow!(
                "this agent runs in another cluster than the one registered as \"{name}\" (kube-system uid {have}, registered {want}); check --kubeconfig/--cluster"
            )));
        }
    }
    if cluster.metadata.deletion_timestamp.is_some() {
        let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
        let lease = crate::clusters::within(
            crate::clusters::CALL_TIMEOUT,
            leases.get_opt(&cluster_lease_name(name)),
        )
        .await
        .map_err(|e| anyhow::anyhow!("reading the Lease of Cluster {name} from the hub: {e}"))?;
        if awaits_agent_cleanup(&cluster, lease.as_ref()) {
            return Ok(Ok(Registration::Leaving {
                preserve: crate::clusters::finalize::preserves(&cluster),
            }));
        }
        return Ok(Err(anyhow::anyhow!(
            "Cluster \"{name}\" is being removed from the hub and its member was already cleaned up: this agent has nothing to do (remove its Deployment)"
        )));
    }
    Ok(Ok(Registration::Member(
        cluster
            .cluster_id()
            .map(String::from)
            .unwrap_or_else(|| name.to_string()),
    )))
}

/// The agent's admin answers: the controller metrics and readiness of `metrics`, plus
/// its lease renewals (their metrics, and not ready once none has succeeded for a
/// lease duration).
pub fn endpoints(metrics: &Arc<Metrics>, renewals: &Arc<Renewals>) -> Endpoints {
    let base = metrics.endpoints();
    let (encode, ready) = (base.metrics.clone(), base.ready.clone());
    let (r1, r2) = (renewals.clone(), renewals.clone());
    Endpoints {
        metrics: Arc::new(move || {
            // one exposition: a single `# EOF`, at the end
            let mut text = encode();
            if let Some(head) = text.strip_suffix("# EOF\n") {
                text.truncate(head.len());
            }
            text.push_str(&r1.encode());
            text
        }),
        ready: Arc::new(move || {
            ready()?;
            r2.ready()
        }),
    }
}

/// Runs the agent of Pull member `name` until `stop` or until its Cluster is removed.
pub async fn run(
    hub: kube::Client,
    member: kube::Client,
    name: String,
    timing: Timing,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    run_with(
        hub,
        member,
        name,
        timing,
        metrics,
        Arc::new(Renewals::default()),
        stop,
    )
    .await
}

/// Runs the agent under leader election among its replicas (`elector`, on a Lease in
/// the member; `None`: no election, this replica works), as `causeway agent` does.
/// When this replica loses the leader Lease because the member's API server stopped
/// answering, it says so on the hub at once ([`report_member_unreachable`]) before it
/// returns the error that makes it exit: nobody else can say it then (no replica can
/// take the leader Lease), and the hub would otherwise only see the lease go silent.
#[allow(clippy::too_many_arguments)]
pub async fn run_elected(
    elector: Option<causeway_runtime::leader::Elector>,
    hub: kube::Client,
    member: kube::Client,
    name: String,
    timing: Timing,
    metrics: Arc<Metrics>,
    renewals: Arc<Renewals>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let (h, mb, n, m) = (hub.clone(), member.clone(), name.clone(), metrics.clone());
    let ended = crate::controller::run_elected(elector, &metrics, &stop, |lead| {
        run_with(h, mb, n, timing, m, renewals, lead)
    })
    .await;
    if let Err(lost) = &ended
        && !stop.is_cancelled()
    {
        report_member_unreachable(&hub, &member, &name, &format!("{lost:#}")).await;
    }
    ended
}

/// After this agent lost its leader Lease in the member (`why`): when the member's API
/// server does not answer (or answers not ready), posts `Ready=False` with the probe's
/// reason (`ClusterNotReachable` for no answer) on the hub at once, without the flap
/// damping of the status loop (the agent is about to exit: it will not probe again).
/// Nothing is posted when the member answers (another replica took the Lease, and
/// posts its own status). Best effort.
pub async fn report_member_unreachable(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
    why: &str,
) {
    let verdict = crate::clusters::health::probe(member).await;
    let Some((status, reason, message)) = lost_lead_verdict(verdict, why) else {
        return;
    };
    let api: Api<Cluster> = Api::all(hub.clone());
    let current = match crate::clusters::within(crate::clusters::CALL_TIMEOUT, api.get_opt(name))
        .await
    {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster to say the member's API server is unreachable");
            return;
        }
    };
    let ready = crate::clusters::health::ready_condition(
        (status, reason, message),
        Some(&current),
        &Time(jiff::Timestamp::now()),
    );
    let body = crate::clusters::status::status_body(&ready, None, None, None, Some(&current));
    let posted = crate::clusters::status::post_status(
        &api,
        crate::clusters::status::MANAGER,
        &current,
        &body,
        &[],
    )
    .await;
    match posted {
        Ok(_) => {
            tracing::warn!(cluster = %name, reason = %ready.reason, message = %ready.message, "posted Ready=False on the hub before stepping down")
        }
        Err(e) => {
            tracing::warn!(cluster = %name, error = %e, "cannot post Ready=False on the hub before stepping down")
        }
    }
}

/// Pure: what a replica that lost its leader Lease (`why`) posts for the probe of its
/// member's API server (`verdict`): `Ready=False` with the probe's reason when the
/// member failed it, nothing when it answered ready.
pub fn lost_lead_verdict(
    verdict: crate::clusters::health::Probe,
    why: &str,
) -> Option<crate::clusters::health::Probe> {
    let (status, reason, message) = verdict;
    if status == "True" {
        return None;
    }
    let reason = if reason == conditions::REASON_CLUSTER_NOT_READY {
        conditions::REASON_CLUSTER_NOT_READY
    } else {
        conditions::REASON_CLUSTER_NOT_REACHABLE
    };
    Some((
        "False",
        reason,
        format!(
            "{message}; the causeway agent lost its leader Lease in the member ({why}) and stepped down: no agent reports this cluster until its API server answers again"
        ),
    ))
}

/// [`run`] with the lease renewals reported into `renewals` (which [`endpoints`]
/// serves).
pub async fn run_with(
    hub: kube::Client,
    member: kube::Client,
    name: String,
    timing: Timing,
    metrics: Arc<Metrics>,
    renewals: Arc<Renewals>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let id = match check_registration(&hub, &member, &name, &stop).await? {
        Registration::Member(id) => id,
        Registration::Leaving { preserve } => {
            // restarted during its Cluster's removal: finish what the agent before it
            // may not have (every step is idempotent)
            tracing::info!(cluster = %name, preserve, "the Cluster is being removed and waits for its agent: leaving the clusterset");
            leave(&hub, &member, &name, Some(preserve)).await;
            return Ok(());
        }
    };
    let identity = causeway_runtime::leader::default_identity();
    let work = stop.child_token();
    tokio::spawn(crate::clusters::lease::run(
        hub.clone(),
        name.clone(),
        identity,
        timing.lease_duration(),
        renewals,
        work.clone(),
    ));
    let caches = Arc::new(crate::mcs::HubCaches::start(&hub, &work));
    let workers = crate::member::spawn_workers(
        crate::member::Member {
            name: name.clone(),
            id: id.clone(),
            client: member.clone(),
            pull: true,
        },
        hub.clone(),
        caches,
        metrics.clone(),
        &crate::member::WorkerOptions {
            timing: timing.clone(),
        },
        work.clone(),
    );
    metrics.set_members(1);
    metrics.set_ready(true);
    tracing::info!(cluster = %name, id = %id, "agent running");
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let mut gone = Gone::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(timing.status_interval.max(Duration::from_secs(1))) => {}
            _ = stop.cancelled() => return Ok(()),
        }
        let seen =
            tokio::time::timeout(crate::clusters::CALL_TIMEOUT, clusters.get_opt(&name)).await;
        let answer = match &seen {
            Ok(Ok(Some(c))) if c.metadata.deletion_timestamp.is_none() => Answer::Member,
            Ok(Ok(Some(c))) => Answer::Leaving(crate::clusters::finalize::preserves(c)),
            Ok(Ok(None)) => Answer::NotFound,
            Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403 => {
                Answer::Refused(s.code, s.message.clone())
            }
            Ok(Err(e)) => {
                tracing::debug!(cluster = %name, error = %e, "cannot read the Cluster from the hub");
                Answer::Unknown
            }
            Err(_) => {
                tracing::debug!(cluster = %name, "the hub did not answer in time");
                Answer::Unknown
            }
        };
        let leaving = match gone.see(&answer, std::time::Instant::now(), timing.lease_duration()) {
            Verdict::Stay => continue,
            Verdict::Wait(why) => {
                tracing::warn!(cluster = %name, "{why}");
                continue;
            }
            Verdict::Leave(preserve) => preserve,
        };
        // stop every worker first, so none writes after the withdrawal
        work.cancel();
        for w in workers {
            let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
        }
        leave(&hub, &member, &name, leaving).await;
        return Ok(());
    }
}

/// One read of the agent's Cluster on the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// There, not being deleted.
    Member,
    /// Being deleted; whether the member keeps its imports (`--preserve`).
    Leaving(bool),
    /// Not found (404, or a get that found nothing).
    NotFound,
    /// The hub refused this agent's identity (401 or 403) with this message.
    Refused(u16, String),
    /// No answer, or another error: says nothing either way.
    Unknown,
}

/// What the agent does after an [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Carries on.
    Stay,
    /// Carries on, and warns with this: the Cluster looks gone, but not for a lease yet.
    Wait(String),
    /// Leaves the clusterset: `Some(preserve)` when the Cluster is being deleted (the
    /// hub waits for the cleanup), `None` when it is gone or this agent's identity is
    /// revoked (no cleanup of imports; the membership property goes).
    Leave(Option<bool>),
}

/// Since when the hub has said the Cluster is gone (not found, or this identity
/// refused) without saying otherwise. A moment of either is no reason to leave: a
/// Cluster deleted and made again (GitOps), a binding deleted and applied again, a
/// token rotated, an API server behind a load balancer answering from a stale cache.
/// Leaving on it would drop the member's membership, so it takes a whole lease of
/// answers saying so (no answer says nothing either way).
#[derive(Debug, Default)]
pub struct Gone {
    since: Option<std::time::Instant>,
}

impl Gone {
    /// Pure but for the memory of since when: what to do after `answer` at `now`, with
    /// leases of `lease`.
    pub fn see(&mut self, answer: &Answer, now: std::time::Instant, lease: Duration) -> Verdict {
        let what = match answer {
            Answer::Member => {
                self.since = None;
                return Verdict::Stay;
            }
            Answer::Leaving(preserve) => return Verdict::Leave(Some(*preserve)),
            Answer::Unknown => return Verdict::Stay,
            Answer::NotFound => "the Cluster is not found on the hub: if the cluster was unregistered, the agent stops once this has lasted a lease; otherwise register it again".to_string(),
            Answer::Refused(code, message) => format!(
                "the hub refuses this agent's identity ({code}: {message}): if the cluster was unregistered, the agent stops once this has lasted a lease; otherwise restore the agent's ServiceAccount, token or RBAC on the hub"
            ),
        };
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) < lease {
            Verdict::Wait(what)
        } else {
            Verdict::Leave(None)
        }
    }
}

/// Leaves the clusterset, the workers stopped: `Some(preserve)` when the Cluster is
/// being deleted (the propagated objects and the imports are withdrawn, or kept with
/// `preserve`, and the hub is told on the Lease), `None` when the Cluster is gone or
/// this identity revoked (what was imported stays, and is named). Either way the
/// member's `clusterset.k8s.io` ClusterProperty goes. Every step is idempotent.
async fn leave(hub: &kube::Client, member: &kube::Client, name: &str, leaving: Option<bool>) {
    if let Some(preserve) = leaving {
        let left = crate::propagation::applier::leave::leave(
            name,
            hub,
            member,
            preserve,
            crate::clusters::CALL_TIMEOUT,
        )
        .await;
        match left {
            Ok(n) => {
                tracing::info!(cluster = %name, objects = n, preserve, "left the clusterset: propagated objects deleted (or, preserved, no longer managed)")
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not remove the propagated objects; delete objects labelled causeway.io/managed=true by hand")
            }
        }
    }
    match leaving {
        Some(false) => match crate::mcs::leave(member).await {
            Ok(n) => {
                tracing::info!(cluster = %name, objects = n, "left the clusterset: imports withdrawn, exports no longer Ready")
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not finish with Multi-Cluster Services: delete objects labelled causeway.io/managed=true by hand, and the Ready condition of ServiceExports")
            }
        },
        Some(true) => {
            tracing::info!(cluster = %name, "left the clusterset with --preserve: imports stay in place")
        }
        None => {
            let left_behind = imports_left(member).await;
            tracing::warn!(
                cluster = %name,
                imports = %left_behind,
                "the Cluster has been gone from the hub, or the hub has refused this agent's identity, for a lease: agent stopping without withdrawing what it imported (delete objects labelled causeway.io/managed=true by hand if the member is not coming back)"
            );
        }
    }
    // gone from the hub one way or another (removed, or the Cluster or this agent's
    // identity deleted): the member is in the clusterset no more
    match crate::clusters::membership::leave(member).await {
        Ok(true) => {
            tracing::info!(cluster = %name, "left the clusterset: clusterset.k8s.io ClusterProperty deleted")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not delete the clusterset.k8s.io ClusterProperty; delete it by hand")
        }
    }
    if leaving.is_some() {
        // tell the hub, which holds the Cluster's finalizer until then
        let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
        let patch = serde_json::json!({"metadata": {"annotations": {crate::clusters::finalize::AGENT_LEFT: "true"}}});
        let (lease, pp, merge) = (
            cluster_lease_name(name),
            PatchParams::default(),
            Patch::Merge(&patch),
        );
        if let Err(e) = crate::clusters::within(
            crate::clusters::CALL_TIMEOUT,
            leases.patch(&lease, &pp, &merge),
        )
        .await
        {
            tracing::warn!(cluster = %name, error = %e, "cannot tell the hub the agent is done");
        }
    }
}

/// The ServiceImports Causeway imported into `member`, as `ns/name` (comma-separated;
/// "none", or why they could not be listed).
async fn imports_left(member: &kube::Client) -> String {
    let managed =
        ListParams::default().labels(&format!("{}={}", labels::MANAGED, labels::MANAGED_VALUE));
    let api: Api<causeway_crds::mcs::v1beta1::ServiceImport> = Api::all(member.clone());
    match crate::clusters::within(crate::clusters::CALL_TIMEOUT, api.list(&managed)).await {
        Ok(list) if list.items.is_empty() => "none".into(),
        Ok(list) => list
            .items
            .iter()
            .map(|si| format!("{}/{}", si.namespace().unwrap_or_default(), si.name_any()))
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("unknown (cannot list the ServiceImports: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Not found and refused alike must last a whole lease of answers before the agent
    /// leaves; an answer that finds the Cluster starts over, no answer changes nothing;
    /// a Cluster being deleted is left at once.
    #[test]
    fn the_agent_leaves_only_when_the_cluster_is_gone_for_a_lease() {
        let lease = Duration::from_secs(40);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut gone = Gone::default();
        assert_eq!(gone.see(&Answer::Member, at(0), lease), Verdict::Stay);
        assert!(matches!(
            gone.see(&Answer::NotFound, at(1), lease),
            Verdict::Wait(w) if w.contains("not found")
        ));
        assert!(matches!(
            gone.see(&Answer::Unknown, at(20), lease),
            Verdict::Stay
        ));
        assert!(matches!(
            gone.see(&Answer::NotFound, at(40), lease),
            Verdict::Wait(_)
        ));
        // found again: the clock starts over
        assert_eq!(gone.see(&Answer::Member, at(41), lease), Verdict::Stay);
        assert!(matches!(
            gone.see(&Answer::NotFound, at(42), lease),
            Verdict::Wait(_)
        ));
        assert!(matches!(
            gone.see(&Answer::Refused(403, "forbidden".into()), at(60), lease),
            Verdict::Wait(w) if w.contains("403: forbidden")
        ));
        assert_eq!(
            gone.see(&Answer::NotFound, at(82), lease),
            Verdict::Leave(None)
        );
        let mut gone = Gone::default();
        assert_eq!(
            gone.see(&Answer::Leaving(true), at(0), lease),
            Verdict::Leave(Some(true))
        );
    }

    #[test]
    fn a_replica_that_lost_its_lead_reports_a_member_that_does_not_answer() {
        let ready = ("True", conditions::REASON_CLUSTER_READY, "ok".to_string());
        assert_eq!(lost_lead_verdict(ready, "lost"), None);
        let down = (
            "False",
            conditions::REASON_CLUSTER_NOT_REACHABLE,
            "cluster is not reachable: connection refused".to_string(),
        );
        let (status, reason, message) = lost_lead_verdict(down, "not renewed").unwrap();
        assert_eq!((status, reason), ("False", "ClusterNotReachable"));
        assert!(
            message.starts_with("cluster is not reachable: connection refused; the causeway agent lost its leader Lease in the member (not renewed)"),
            "{message}"
        );
        let not_ready = (
            "False",
            conditions::REASON_CLUSTER_NOT_READY,
            "cluster is not ready: /readyz answered 500".to_string(),
        );
        assert_eq!(
            lost_lead_verdict(not_ready, "x").unwrap().1,
            "ClusterNotReady"
        );
    }

    #[test]
    fn a_cluster_being_deleted_waits_for_its_agent_until_it_said_it_left() {
        let mut c = Cluster::new("west", Default::default());
        assert!(!awaits_agent_cleanup(&c, None), "not being deleted");
        c.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(
            !awaits_agent_cleanup(&c, None),
            "no finalizer: nobody waits"
        );
        c.metadata.finalizers = Some(vec![finalizers::CLUSTER.to_string()]);
        assert!(awaits_agent_cleanup(&c, None));
        let mut lease = Lease::default();
        assert!(awaits_agent_cleanup(&c, Some(&lease)));
        lease.metadata.annotations = Some(
            [(
                crate::clusters::finalize::AGENT_LEFT.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert!(!awaits_agent_cleanup(&c, Some(&lease)), "it said it left");
    }
}
