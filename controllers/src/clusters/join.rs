//! `causeway join` / `causeway unjoin`: register a member on the hub (push mode) from
//! its kubeconfig — a `Cluster` with the API endpoint and CA, and a Secret with the token.

use std::path::Path;

use anyhow::{Context, bail};
use base64::Engine;
use causeway_crds::federation::cluster::{Cluster, ClusterSecretRef, ClusterSpec, ClusterSyncMode};
use causeway_crds::well_known::{
    CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, FIELD_MANAGER, LEGACY_CLUSTER_ID_PROPERTY,
};
use causeway_crds::well_known::{SYSTEM_NAMESPACE, finalizers};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_validation::{is_dns1123_label, is_dns1123_subdomain};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// The credentials `join` takes from a member kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAccess {
    /// API server URL.
    pub server: String,
    /// CA bundle (PEM), if the kubeconfig has one.
    pub ca_pem: Option<String>,
    /// Bearer token.
    pub token: String,
}

/// A member reached with whatever credentials its kubeconfig holds (a token, a client
/// certificate, an exec plugin), with its API server URL and CA: for commands that act
/// on the member themselves and hand the hub none of these credentials (`causeway
/// register` and `unregister`, pull mode).
#[derive(Clone)]
pub struct Member {
    /// The client, as kubectl would reach the member with that kubeconfig.
    pub client: kube::Client,
    /// API server URL.
    pub server: String,
    /// CA bundle (PEM), if the kubeconfig has one.
    pub ca_pem: Option<String>,
}

impl Member {
    /// The member of a kubeconfig's context (the current one when `context` is None).
    pub async fn from_kubeconfig(
        kubeconfig: &Path,
        context: Option<&str>,
    ) -> anyhow::Result<Member> {
        let kc = read_kubeconfig(kubeconfig)?;
        let (_, _, server, ca_pem) = endpoint_of(&kc, kubeconfig, context)?;
        let cfg = causeway_runtime::client::Source {
            kubeconfig: Some(kubeconfig),
            context,
            kubeconfig_flag: "--kubeconfig",
            context_flag: "--context",
        }
        .config()
        .await?;
        let client = kube::Client::try_from(cfg).context("building the member's client")?;
        Ok(Member {
            client,
            server,
            ca_pem,
        })
    }

    /// The member that bearer-token credentials reach.
    pub async fn from_access(access: &MemberAccess) -> anyhow::Result<Member> {
        Ok(Member {
            client: client_for(access).await?,
            server: access.server.clone(),
            ca_pem: access.ca_pem.clone(),
        })
    }
}

fn read_kubeconfig(kubeconfig: &Path) -> anyhow::Result<Kubeconfig> {
    Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))
}

/// Reads server, CA and token of a context (the current one when `context` is None).
pub fn member_access(kubeconfig: &Path, context: Option<&str>) -> anyhow::Result<MemberAccess> {
    let kc = read_kubeconfig(kubeconfig)?;
    let (ctx_name, user, server, ca_pem) = endpoint_of(&kc, kubeconfig, context)?;
    let auth = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.clone())
        .with_context(|| format!("user {user} of context {ctx_name} not found"))?;
    let token = match (&auth.token, &auth.token_file) {
        (Some(t), _) => {
            use secrecy::ExposeSecret;
            t.expose_secret().to_string()
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading tokenFile {f}"))?
            .trim()
            .to_string(),
        _ => bail!(
            "user {user} of context {ctx_name} in the member kubeconfig {} has no bearer token (token or tokenFile): the hub keeps a push member's token to reach it, and client certificates and exec plugins cannot be handed over; give a kubeconfig with a ServiceAccount token for Causeway (`kubectl create token`), or register the member in pull mode (`causeway register`, which takes any credentials)",
            kubeconfig.display()
        ),
    };
    Ok(MemberAccess {
        server,
        ca_pem,
        token,
    })
}

/// The context's name, user, server URL and CA (PEM) in `kc` (read from `kubeconfig`),
/// refusing connection settings the hub would not carry over.
fn endpoint_of(
    kc: &Kubeconfig,
    kubeconfig: &Path,
    context: Option<&str>,
) -> anyhow::Result<(String, String, String, Option<String>)> {
    let ctx_name = match context {
        Some(c) => c.to_string(),
        None => kc
            .current_context
            .clone()
            .context("the kubeconfig has no current-context; pass --context")?,
    };
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.clone())
        .with_context(|| format!("context {ctx_name} not found in {}", kubeconfig.display()))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .with_context(|| format!("cluster {} of context {ctx_name} not found", ctx.cluster))?;
    let server = cluster
        .server
        .clone()
        .context("the kubeconfig cluster has no server URL")?;
    // the hub reaches members with the CA it is given and verifies them always (a
    // Cluster's insecureSkipTlsVerification is not acted on): said now, not as a TLS
    // failure blamed on the credentials
    if cluster.insecure_skip_tls_verify == Some(true) {
        bail!(
            "cluster {} of context {ctx_name} in {} sets insecure-skip-tls-verify: true, which Causeway does not carry over (it always verifies the member's API server): remove it and give the member's CA instead (certificate-authority-data, or a certificate-authority file)",
            ctx.cluster,
            kubeconfig.display()
        );
    }
    refuse_unsupported_connection(&cluster, &server, &ctx.cluster, &ctx_name, kubeconfig)?;
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .context("certificate-authority-data is not base64")?,
            )
            .context("certificate-authority-data is not PEM text")?,
        ),
        (None, Some(file)) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("reading certificate-authority {file}"))?,
        ),
        (None, None) => None,
    };
    let user = ctx.user.clone().unwrap_or_default();
    Ok((ctx_name, user, server, ca_pem))
}

/// Pure: refuses the connection settings of a member kubeconfig cluster (`cluster`,
/// named `name`, of context `ctx_name` in `kubeconfig`) that [`MemberAccess`] does not
/// carry over, so the hub would reach the member otherwise than the kubeconfig does:
/// said now, not as a TLS or connection failure blamed on the credentials. A
/// `tls-server-name` that is the host of `server` changes nothing and is taken.
fn refuse_unsupported_connection(
    cluster: &kube::config::Cluster,
    server: &str,
    name: &str,
    ctx_name: &str,
    kubeconfig: &Path,
) -> anyhow::Result<()> {
    let host = server
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_string()));
    if let Some(tls_name) = cluster
        .tls_server_name
        .as_deref()
        .filter(|n| !n.is_empty() && host.as_deref() != Some(*n))
    {
        bail!(
            "cluster {name} of context {ctx_name} in {} sets tls-server-name: {tls_name}, which Causeway does not carry over (the hub verifies the member's API server certificate against the host of the server URL, {server}): remove tls-server-name and give a server URL whose host the certificate names (e.g. https://{tls_name}:<port>, with {tls_name} resolving to the API server), or add that host to the API server's certificate",
            kubeconfig.display()
        );
    }
    if let Some(proxy) = cluster.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        bail!(
            "cluster {name} of context {ctx_name} in {} sets proxy-url: {proxy}, which Causeway does not carry over (it connects to the member's API server directly): remove proxy-url and give a server URL the hub reaches without a proxy",
            kubeconfig.display()
        );
    }
    Ok(())
}

/// A kubeconfig (as JSON, which kubectl and kube-rs read like YAML) with one context
/// `name` for `access`.
pub fn kubeconfig_for(access: &MemberAccess, name: &str) -> serde_json::Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut cluster = json!({"server": access.server});
    if let Some(ca) = &access.ca_pem {
        cluster["certificate-authority-data"] = json!(b64(ca));
    }
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": access.token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    })
}

/// A kube client for a member from its access data.
pub async fn client_for(access: &MemberAccess) -> anyhow::Result<kube::Client> {
    let kc: Kubeconfig = serde_json::from_value(kubeconfig_for(access, "m"))
        .context("building a kubeconfig for the member")?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// What registration learns of a member before it writes anything.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The cluster id (ClusterProperty, else `--id`, else the name).
    pub id: String,
    /// The kube-system namespace uid.
    pub uid: String,
    /// The member's Kubernetes version.
    pub version: String,
}

/// Reaches the member, reads its identity and refuses duplicates on the hub and a
/// cluster still in another clusterset (CID-5, A.7).
pub async fn identify(
    hub: &kube::Client,
    member: &kube::Client,
    server: &str,
    name: &str,
    id: Option<&str>,
    mode: ClusterSyncMode,
) -> anyhow::Result<Identity> {
    if !is_dns1123_label(name) {
        bail!(
            "cluster name \"{name}\" must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters), e.g. east-1"
        );
    }
    let version = member.apiserver_version().await.with_context(|| {
        format!("cannot reach the member API server at {server} with the given credentials")
    })?;
    // the same physical cluster under another name first: the most useful thing to say
    let uid = kube_system_uid(member).await?;
    // (a hub whose kube-system this identity may not read is not checked)
    refuse_the_hub(&uid, kube_system_uid(hub).await.ok().as_deref())?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let existing = clusters
        .list(&Default::default())
        .await
        .context("listing Clusters on the hub (are the CRDs installed?)")?;
    refuse_duplicates(&existing.items, name, "", &uid, mode)?;
    let property = cluster_property_id(member).await?;
    let id = match (id, &property) {
        (Some(given), Some(p)) if given != p => bail!(
            "--id {given} disagrees with the member's ClusterProperty {CLUSTER_ID_PROPERTY} = {p}; drop --id or fix the ClusterProperty"
        ),
        (_, Some(p)) => p.clone(),
        (Some(given), None) => given.to_string(),
        (None, None) => name.to_string(),
    };
    check_cluster_id(&id)?;
    let clusterset = super::membership::ensure_clusterset(hub).await?;
    super::membership::refuse_other_clusterset(
        name,
        super::membership::member_property(member, CLUSTERSET_PROPERTY)
            .await?
            .as_deref(),
        &clusterset,
    )?;
    refuse_duplicates(&existing.items, name, &id, &uid, mode)?;
    Ok(Identity {
        id,
        uid,
        version: version.git_version,
    })
}

/// Pure (CID-3, CID-5, CID-6): refuses a cluster id that cannot be used. A
/// ClusterProperty id may be a DNS-1123 subdomain of up to 128 characters (CID-3),
/// but Causeway writes it as a label value (`multicluster.kubernetes.io/source-cluster`
/// on every exported EndpointSlice, CID-6), which holds at most 63: a longer id would
/// make every export of the member fail, so it is refused at join.
pub fn check_cluster_id(id: &str) -> anyhow::Result<()> {
    if !is_dns1123_subdomain(id) {
        bail!(
            "cluster id \"{id}\" must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.'); set another with --id or the member's ClusterProperty {CLUSTER_ID_PROPERTY}"
        );
    }
    if id.len() > MAX_CLUSTER_ID {
        bail!(
            "cluster id \"{id}\" is {} characters: it is the value of the label {} on the member's exported EndpointSlices, and a label value holds at most {MAX_CLUSTER_ID} characters; choose a shorter id with --id or in the member's ClusterProperty {CLUSTER_ID_PROPERTY}",
            id.len(),
            causeway_crds::well_known::labels::SOURCE_CLUSTER,
        );
    }
    Ok(())
}

/// The longest cluster id: the longest label value.
pub const MAX_CLUSTER_ID: usize = 63;

/// The member's cluster id from its `about.k8s.io` ClusterProperty `cluster.clusterset.k8s.io`
/// (or the legacy `id.k8s.io`), when the member has the About API (CID-3, CID-7).
pub async fn cluster_property_id(member: &kube::Client) -> anyhow::Result<Option<String>> {
    for name in [CLUSTER_ID_PROPERTY, LEGACY_CLUSTER_ID_PROPERTY] {
        match super::membership::member_property(member, name).await? {
            Some(value) if value.is_empty() => {
                bail!("the member's ClusterProperty {name} has an empty spec.value")
            }
            Some(value) => return Ok(Some(value)),
            None => {}
        }
    }
    Ok(None)
}

/// The uid of the member's `kube-system` namespace: the physical cluster's identity (A.7).
pub async fn kube_system_uid(member: &kube::Client) -> anyhow::Result<String> {
    let ns: Api<Namespace> = Api::all(member.clone());
    ns.get("kube-system")
        .await
        .context("reading the member's kube-system namespace (its uid identifies the cluster)")?
        .metadata
        .uid
        .context("the member's kube-system namespace has no uid")
}

/// Pure: refuses a member that is the hub itself (the same kube-system uid `hub`): the
/// hub's MCS loops and the member's would take each other's ServiceImports and
/// EndpointSlices for their own (same names, same managed labels) and rewrite or delete
/// them every round.
pub fn refuse_the_hub(member: &str, hub: Option<&str>) -> anyhow::Result<()> {
    if hub == Some(member) {
        bail!(
            "this cluster is the hub itself (same kube-system namespace uid {member}): the hub cannot be its own member; run workloads in another cluster and join that one"
        );
    }
    Ok(())
}

/// Pure (CID-5, A.7 ★): refuses to register `name` when another Cluster already uses
/// cluster id `id` (an empty `id` checks nothing of ids), or already is the same
/// physical cluster (same kube-system uid) under another name.
pub fn refuse_duplicates(
    existing: &[Cluster],
    name: &str,
    id: &str,
    uid: &str,
    mode: ClusterSyncMode,
) -> anyhow::Result<()> {
    for c in existing {
        let other = c.metadata.name.clone().unwrap_or_default();
        if other == name {
            if c.metadata.deletion_timestamp.is_some() {
                bail!(
                    "cluster \"{name}\" is still being removed from the hub; join it again once `kubectl get clusters.causeway.io {name}` finds nothing"
                );
            }
            // joining again under its own name renews its credentials; it must be the
            // same physical cluster, in the same mode
            if let Some(theirs) = c.spec.kube_system_uid.as_deref().filter(|u| *u != uid) {
                bail!(
                    "cluster \"{name}\" is another physical cluster (kube-system namespace uid {theirs}, this one's is {uid}): give this one another name, or remove \"{name}\" first"
                );
            }
            if c.spec.sync_mode != mode {
                let (is, remove) = match c.spec.sync_mode {
                    ClusterSyncMode::Pull => (
                        "Pull (its agent connects to the hub)",
                        "causeway unregister",
                    ),
                    ClusterSyncMode::Push => ("Push (the hub connects to it)", "causeway unjoin"),
                };
                bail!(
                    "cluster \"{name}\" is registered in {is} mode; a cluster has one mode: `{remove} {name}` first to change it"
                );
            }
            continue;
        }
        if c.cluster_id() == Some(id) {
            bail!(
                "cluster id \"{id}\" is already used by member \"{other}\": give this cluster another name or --id, or unjoin \"{other}\" first"
            );
        }
        if c.spec.kube_system_uid.as_deref() == Some(uid) {
            bail!(
                "this cluster is already registered as \"{other}\" (same kube-system namespace uid {uid}); a cluster can be a member only once: unjoin \"{other}\" first, or use that name"
            );
        }
    }
    Ok(())
}

/// The hub Secret holding member `name`'s credentials.
pub fn credentials_secret(name: &str) -> String {
    format!("{name}-credentials")
}

/// Writes how the hub reaches member `name` (`access`): its token (and CA) into the
/// hub Secret [`credentials_secret`] in causeway-system, and the endpoint, CA and
/// Secret reference into `spec`. Push joins and Pull registrations with search access
/// share it.
pub async fn store_credentials(
    hub: &kube::Client,
    name: &str,
    access: &MemberAccess,
    spec: &mut ClusterSpec,
) -> anyhow::Result<()> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let secret_name = credentials_secret(name);
    let mut data = json!({"token": access.token});
    if let Some(ca) = &access.ca_pem {
        data["caBundle"] = json!(ca);
    }
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    secrets
        .patch(&secret_name, &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret_name, "labels": {"causeway.io/cluster": name}}, "type": "Opaque", "stringData": data})))
        .await
        .context("writing the member's credentials Secret on the hub")?;
    spec.api_endpoint = Some(access.server.clone());
    spec.ca_bundle = access
        .ca_pem
        .as_ref()
        .map(|c| base64::engine::general_purpose::STANDARD.encode(c.as_bytes()));
    spec.secret_ref = Some(ClusterSecretRef {
        namespace: SYSTEM_NAMESPACE.into(),
        name: secret_name,
    });
    Ok(())
}

/// Pure: a Cluster already being removed is cleaned up as its annotation said when the
/// cleanup started, so a second `unjoin`/`unregister` asking the other way is refused
/// (it would say what does not happen), naming the value in effect.
pub fn same_preserve_as_the_removal_under_way(c: &Cluster, preserve: bool) -> anyhow::Result<()> {
    let in_effect = super::finalize::preserves(c);
    if c.metadata.deletion_timestamp.is_some() && in_effect != preserve {
        let name = c.name_any();
        let (said, flag) = if in_effect {
            ("left in place (--preserve)", " --preserve")
        } else {
            ("withdrawn", "")
        };
        let command = match c.spec.sync_mode {
            ClusterSyncMode::Push => "unjoin",
            ClusterSyncMode::Pull => "unregister",
        };
        bail!(
            "cluster \"{name}\" is already being removed, and its cleanup goes as it was first asked: what Causeway imported into it is {said}; that can no longer be changed. Run the command as first given (with{} --preserve) to wait for it, e.g. `causeway {command} {name}{flag}`",
            if in_effect { "" } else { "out" }
        );
    }
    Ok(())
}

/// Pure: the server-side apply body of Cluster `name` with `spec`, created with the
/// hub controller's cleanup finalizer [`finalizers::CLUSTER`] already on it: deleting
/// the Cluster (`causeway unjoin`, `causeway unregister`, kubectl) then always waits
/// for the cleanup (its imports, execution namespace, credentials Secret and the
/// member's clusterset.k8s.io), even before a controller ever ran.
pub fn cluster_body(name: &str, spec: ClusterSpec) -> anyhow::Result<serde_json::Value> {
    let mut body = serde_json::to_value(Cluster::new(name, spec))?;
    body["apiVersion"] = json!("causeway.io/v1alpha1");
    body["kind"] = json!("Cluster");
    body["metadata"]["finalizers"] = json!([finalizers::CLUSTER]);
    Ok(body)
}

/// Server-side applies Cluster `name` with `spec` (and the cleanup finalizer, see
/// [`cluster_body`]) on the hub (fields this manager set before and `spec` no longer
/// has are removed).
pub async fn write_cluster(
    hub: &kube::Client,
    name: &str,
    spec: ClusterSpec,
) -> anyhow::Result<()> {
    let body = cluster_body(name, spec)?;
    Api::<Cluster>::all(hub.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .context("writing the Cluster on the hub")?;
    Ok(())
}

/// Reads the Clusters again once Cluster `name` is written: another one that took the
/// same cluster id between [`identify`]'s check and the write (a join of another
/// cluster at the same time) keeps the newer of the two out of the members (see
/// [`super::registry::id_used_before`]); if that is `name`, it is said now, with how to
/// undo the registration (`remove`: `causeway unjoin` or `causeway unregister`).
pub async fn refuse_id_taken_meanwhile(
    hub: &kube::Client,
    name: &str,
    remove: &str,
) -> anyhow::Result<()> {
    let all = Api::<Cluster>::all(hub.clone())
        .list(&Default::default())
        .await
        .context("listing Clusters on the hub to check the cluster id once more")?;
    let Some(this) = all
        .items
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        return Ok(());
    };
    if let Some((id, first)) = super::registry::id_used_before(&all.items, this) {
        bail!(
            "cluster \"{name}\" was written, but Cluster \"{first}\" took cluster id \"{id}\" first (registered at the same time), so the hub does not use \"{name}\": `{remove} {name}`, then register it again with another --id"
        );
    }
    Ok(())
}

/// Registers `name` on the hub. Refuses a duplicate cluster id (CID-5).
pub async fn join(
    hub: kube::Client,
    name: &str,
    access: &MemberAccess,
    id: Option<&str>,
) -> anyhow::Result<String> {
    let member = client_for(access).await?;
    let Identity { id, uid, version } = identify(
        &hub,
        &member,
        &access.server,
        name,
        id,
        ClusterSyncMode::Push,
    )
    .await?;
    let clusterset = super::membership::ensure_clusterset(&hub).await?;
    super::membership::claim(&member, name, &clusterset, &id).await?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let ns: Api<Namespace> = Api::all(hub.clone());
    ns.patch(SYSTEM_NAMESPACE, &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})))
        .await
        .context("creating the causeway-system namespace on the hub")?;
    let mut spec = ClusterSpec {
        id: Some(id.clone()),
        kube_system_uid: Some(uid),
        sync_mode: ClusterSyncMode::Push,
        ..Default::default()
    };
    store_credentials(&hub, name, access, &mut spec).await?;
    write_cluster(&hub, name, spec).await?;
    refuse_id_taken_meanwhile(&hub, name, "causeway unjoin").await?;
    Ok(format!(
        "cluster \"{name}\" (id {id}, Kubernetes {version}) joined: {}",
        access.server
    ))
}

/// Removes Push member `name` from the hub: deletes its Cluster and waits (up to
/// `wait`) for the hub controller to finish the cleanup its finalizer holds —
/// withdrawing what Causeway imported into the member unless `preserve`, and deleting
/// its credentials.
pub async fn unjoin(
    hub: kube::Client,
    name: &str,
    preserve: bool,
    wait: std::time::Duration,
) -> anyhow::Result<String> {
    remove_cluster(&hub, name, ClusterSyncMode::Push, preserve, wait).await?;
    // the Cluster is gone: its finalizer let it go, so the hub controller's cleanup ran
    // (it is best effort in a member it cannot reach, and says so in its log)
    Ok(if preserve {
        format!(
            "cluster \"{name}\" unjoined; what Causeway imported into it is left in place (--preserve), and the hub controller deleted its credentials (see its log for what it could not do)"
        )
    } else {
        format!(
            "cluster \"{name}\" unjoined; the hub controller withdrew its imports and deleted its credentials (see its log for what it could not do: a member it could not reach keeps what was imported)"
        )
    })
}

/// A Cluster still there when [`remove_cluster`] stopped waiting for the controller.
#[derive(Debug)]
pub struct StillThere {
    name: String,
    waited: std::time::Duration,
    mode: ClusterSyncMode,
    preserve: bool,
}

impl std::fmt::Display for StillThere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = match (self.mode, self.preserve) {
            (ClusterSyncMode::Push, false) => {
                "its imports are not withdrawn and its credentials not deleted yet"
            }
            (ClusterSyncMode::Push, true) => "its credentials are not deleted yet",
            (ClusterSyncMode::Pull, _) => "its agent's leaving is not confirmed yet",
        };
        write!(
            f,
            "cluster \"{}\" is marked for removal but still there after {} s: the hub controller has not finished its cleanup ({pending}); it does once `causeway controller` runs (is it running?), and the Cluster goes when it is done",
            self.name,
            self.waited.as_secs()
        )
    }
}

impl std::error::Error for StillThere {}

/// Deletes Cluster `name` of sync mode `mode`, marked with whether the member keeps
/// its imports, and waits (up to `wait`) until the hub controller let it go.
pub async fn remove_cluster(
    hub: &kube::Client,
    name: &str,
    mode: ClusterSyncMode,
    preserve: bool,
    wait: std::time::Duration,
) -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::PRESERVE_ON_UNJOIN;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let Some(c) = clusters
        .get_opt(name)
        .await
        .context("reading the Cluster")?
    else {
        bail!(
            "no cluster \"{name}\" is registered on this hub (see `kubectl get clusters.causeway.io`)"
        );
    };
    match (c.spec.sync_mode, mode) {
        (ClusterSyncMode::Pull, ClusterSyncMode::Push) => {
            bail!(
                "cluster \"{name}\" is a Pull member: remove it with `causeway unregister {name}`"
            )
        }
        (ClusterSyncMode::Push, ClusterSyncMode::Pull) => {
            bail!("cluster \"{name}\" is a Push member: remove it with `causeway unjoin {name}`")
        }
        _ => {}
    }
    same_preserve_as_the_removal_under_way(&c, preserve)?;
    let value = if preserve { "true" } else { "false" };
    let marked = clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {PRESERVE_ON_UNJOIN: value}}})),
        )
        .await
        .context("marking the Cluster for removal")?;
    // a Cluster made by hand, or by an older `causeway join`, that no controller has
    // seen yet: without the finalizer it would go at once and nothing be cleaned up (a
    // Cluster already being deleted takes no new finalizer: its deletion goes on)
    if marked.metadata.deletion_timestamp.is_none()
        && let Err(e) =
        causeway_runtime::apply::add_finalizer(&clusters, &marked, finalizers::CLUSTER).await
        // the controller may have put it on meanwhile
        && !clusters
            .get_opt(name)
            .await
            .context("reading the Cluster")?
            .is_some_and(|c| c.finalizers().iter().any(|f| f == finalizers::CLUSTER))
    {
        bail!(
            "cannot put the cleanup finalizer {} on Cluster \"{name}\" ({e}), so deleting it now would skip the cleanup; nothing was deleted: run this again",
            finalizers::CLUSTER
        );
    }
    match clusters.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e).context("deleting the Cluster"),
    }
    let deadline = tokio::time::Instant::now() + wait;
    while clusters
        .get_opt(name)
        .await
        .context("reading the Cluster")?
        .is_some()
    {
        if tokio::time::Instant::now() >= deadline {
            return Err(StillThere {
                name: name.to_string(),
                waited: wait,
                mode,
                preserve,
            }
            .into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, id: &str, uid: &str, leaving: bool) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                id: Some(id.into()),
                kube_system_uid: Some(uid.into()),
                ..Default::default()
            },
        );
        if leaving {
            c.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        c
    }

    #[test]
    fn a_member_kubeconfig_that_skips_tls_verification_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let write = |cluster: &str| {
            crate::clusters::testing::kubeconfig(dir.path(), cluster, "{token: t}", true)
        };
        let path = write("{server: 'https://10.0.0.1:6443', insecure-skip-tls-verify: true}");
        let e = member_access(&path, None).unwrap_err().to_string();
        assert!(
            e.contains("cluster cl of context ctx")
                && e.contains("sets insecure-skip-tls-verify: true")
                && e.contains("certificate-authority-data"),
            "{e}"
        );
        // the same with a CA and verification on is taken
        let ca = base64::engine::general_purpose::STANDARD.encode("PEM");
        let path = write(&format!(
            "{{server: 'https://10.0.0.1:6443', certificate-authority-data: {ca}}}"
        ));
        assert_eq!(
            member_access(&path, None).unwrap(),
            MemberAccess {
                server: "https://10.0.0.1:6443".into(),
                ca_pem: Some("PEM".into()),
                token: "t".into(),
            }
        );
    }

    #[test]
    fn a_member_kubeconfig_reached_by_another_tls_name_or_a_proxy_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode("PEM");
        let write = |extra: &str| {
            crate::clusters::testing::kubeconfig(
                dir.path(),
                &format!(
                    "{{server: 'https://10.0.0.5:6443', certificate-authority-data: {ca}{extra}}}"
                ),
                "{token: t}",
                true,
            )
        };
        // (what the cluster adds, refused with these fragments)
        let table: [(&str, &[&str]); 5] = [
            (
                ", tls-server-name: kubernetes",
                &[
                    "cluster cl of context ctx",
                    "sets tls-server-name: kubernetes, which Causeway does not carry over",
                    "against the host of the server URL, https://10.0.0.5:6443",
                    "remove tls-server-name",
                    "https://kubernetes:<port>",
                ],
            ),
            (
                ", proxy-url: 'http://proxy:3128'",
                &[
                    "cluster cl of context ctx",
                    "sets proxy-url: http://proxy:3128, which Causeway does not carry over",
                    "remove proxy-url",
                ],
            ),
            // the URL's own host as the TLS name changes nothing
            (", tls-server-name: 10.0.0.5", &[]),
            (", tls-server-name: ''", &[]),
            ("", &[]),
        ];
        for (extra, fragments) in table {
            match member_access(&write(extra), None) {
                Ok(a) => {
                    assert!(fragments.is_empty(), "{extra} taken");
                    assert_eq!(a.server, "https://10.0.0.5:6443");
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(!fragments.is_empty(), "{extra} refused: {e}");
                    for f in fragments {
                        assert!(e.contains(f), "{extra}: {e:?} lacks {f:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_removal_under_way_keeps_the_preserve_it_started_with() {
        let mut c = Cluster::new("east", ClusterSpec::default());
        // not being removed yet: either way
        assert!(same_preserve_as_the_removal_under_way(&c, true).is_ok());
        assert!(same_preserve_as_the_removal_under_way(&c, false).is_ok());
        c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        c.annotations_mut().insert(
            causeway_crds::well_known::annotations::PRESERVE_ON_UNJOIN.into(),
            "false".into(),
        );
        assert!(same_preserve_as_the_removal_under_way(&c, false).is_ok());
        let e = same_preserve_as_the_removal_under_way(&c, true)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cluster \"east\" is already being removed, and its cleanup goes as it was first asked: what Causeway imported into it is withdrawn; that can no longer be changed. Run the command as first given (without --preserve) to wait for it, e.g. `causeway unjoin east`"
        );
        c.annotations_mut().insert(
            causeway_crds::well_known::annotations::PRESERVE_ON_UNJOIN.into(),
            "true".into(),
        );
        let e = same_preserve_as_the_removal_under_way(&c, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("left in place (--preserve)")
                && e.contains("`causeway unjoin east --preserve`"),
            "{e}"
        );
        // a Pull member is removed with unregister
        c.spec.sync_mode = ClusterSyncMode::Pull;
        let e = same_preserve_as_the_removal_under_way(&c, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`causeway unregister east --preserve`"), "{e}");
    }

    #[test]
    fn a_cluster_is_written_with_the_cleanup_finalizer() {
        let body = cluster_body("east", ClusterSpec::default()).unwrap();
        assert_eq!(
            body["metadata"]["finalizers"],
            json!(["causeway.io/cluster-controller"])
        );
        assert_eq!(body["metadata"]["name"], "east");
        assert_eq!(body["kind"], "Cluster");
    }

    #[test]
    fn a_removal_that_gave_up_waiting_says_what_is_not_cleaned_up() {
        let said = |mode, preserve| {
            StillThere {
                name: "east".into(),
                waited: std::time::Duration::from_secs(30),
                mode,
                preserve,
            }
            .to_string()
        };
        let e = said(ClusterSyncMode::Push, false);
        assert!(
            e.starts_with("cluster \"east\" is marked for removal but still there after 30 s")
                && e.contains("its imports are not withdrawn and its credentials not deleted yet")
                && e.contains("`causeway controller`"),
            "{e}"
        );
        let e = said(ClusterSyncMode::Push, true);
        assert!(e.contains("(its credentials are not deleted yet)"), "{e}");
        let e = said(ClusterSyncMode::Pull, false);
        assert!(
            e.contains("its agent's leaving is not confirmed yet"),
            "{e}"
        );
    }

    #[test]
    fn a_cluster_id_must_fit_a_label_value() {
        // (id, refused with these fragments)
        let long = |n: usize| "a".repeat(n);
        let table: Vec<(String, &[&str])> = vec![
            ("east".into(), &[]),
            ("east.fleet".into(), &[]),
            (long(63), &[]),
            (
                long(64),
                &[
                    "64 characters",
                    "multicluster.kubernetes.io/source-cluster",
                    "at most 63 characters",
                    "--id",
                ],
            ),
            (long(128), &["128 characters", "at most 63 characters"]),
            (long(129), &["at most 63 characters"]),
            ("East".into(), &["DNS-1123 subdomain"]),
            ("a..b".into(), &["DNS-1123 subdomain"]),
        ];
        for (id, fragments) in table {
            match check_cluster_id(&id) {
                Ok(()) => assert!(fragments.is_empty(), "{id} taken"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(!fragments.is_empty(), "{id} refused: {e}");
                    for f in fragments {
                        assert!(e.contains(f), "{id}: {e:?} lacks {f:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_hub_is_refused_as_its_own_member() {
        assert!(refuse_the_hub("uid-east", Some("uid-hub")).is_ok());
        assert!(
            refuse_the_hub("uid-east", None).is_ok(),
            "not read: not checked"
        );
        let e = refuse_the_hub("uid-hub", Some("uid-hub"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the hub itself") && e.contains("uid-hub"), "{e}");
    }

    #[test]
    fn a_cluster_joins_once_under_one_name_and_one_id() {
        let existing = vec![
            cluster("east", "east", "uid-east", false),
            cluster("west", "west.fleet", "uid-west", false),
            cluster("gone", "gone", "uid-gone", true),
        ];
        let refused = |name: &str, id: &str, uid: &str| {
            refuse_duplicates(&existing, name, id, uid, ClusterSyncMode::Push)
                .err()
                .map(|e| e.to_string())
        };
        // new cluster, new id; rejoining under its own name
        assert_eq!(refused("north", "north", "uid-north"), None);
        assert_eq!(refused("east", "east", "uid-east"), None);
        // the same physical cluster under another name, whatever its id (an empty id
        // checks the physical cluster alone)
        for id in ["", "other"] {
            let e = refused("east-again", id, "uid-east").unwrap();
            assert!(e.contains("already registered as \"east\""), "{e}");
        }
        // another cluster with a taken id
        let e = refused("south", "west.fleet", "uid-south").unwrap();
        assert!(
            e.contains("cluster id \"west.fleet\" is already used by member \"west\""),
            "{e}"
        );
        // a name still being removed
        let e = refused("gone", "gone", "uid-gone").unwrap();
        assert!(e.contains("still being removed"), "{e}");
        // its own name, another physical cluster: not re-pointed silently
        let e = refused("east", "east", "uid-other").unwrap();
        assert!(
            e.contains("cluster \"east\" is another physical cluster (kube-system namespace uid uid-east, this one's is uid-other)"),
            "{e}"
        );
        // its own name, the other mode: not turned from Pull into Push
        let mut pull = existing.clone();
        pull[0].spec.sync_mode = ClusterSyncMode::Pull;
        let e = refuse_duplicates(&pull, "east", "east", "uid-east", ClusterSyncMode::Push)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("registered in Pull (its agent connects to the hub) mode")
                && e.contains("`causeway unregister east` first"),
            "{e}"
        );
    }
}
