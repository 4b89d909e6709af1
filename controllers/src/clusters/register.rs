//! `causeway register` / `causeway unregister`: pull mode. The member is registered with
//! an agent identity on the hub that may do only what its agent needs (★ least
//! privilege): read the clusterset's shared MCS data, write its own Cluster's status
//! and its own Lease, and write its exports into its own execution namespace
//! `causeway-es-<name>` (the hub's relay copies them out, forcing the cluster's
//! identity). The agent's hub credentials (a ServiceAccount token, and a kubeconfig that
//! reads it from the file `deploy/agent/` mounts it as) are stored in the member as
//! Secret `causeway-system/causeway-agent-hub`: registering again renews the token
//! under the running agent.

use anyhow::Context;
use causeway_crds::federation::cluster::{Cluster, ClusterSpec, ClusterSyncMode};
use causeway_crds::names::{cluster_lease_name, execution_namespace};
use causeway_crds::well_known::{FIELD_MANAGER, SYSTEM_NAMESPACE};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::join::{
    Identity, Member, MemberAccess, credentials_secret, identify, kubeconfig_for,
    store_credentials, write_cluster,
};
use super::membership::CLUSTERSET_CONFIGMAP;

/// The member Secret holding the agent's hub credentials: key `token` (the agent's
/// ServiceAccount token on the hub), key `kubeconfig` (the hub's endpoint, with the
/// token read from [`AGENT_TOKEN_FILE`]) and key `cluster` (the member's name).
pub const AGENT_SECRET: &str = "causeway-agent-hub";

/// Where `deploy/agent/` mounts key `token` of [`AGENT_SECRET`], which the agent's
/// kubeconfig names as its `tokenFile`: a registration that renews the token rewrites
/// the Secret, the kubelet the file, and the running agent's client reads the file
/// again (kube-rs, like client-go, at least once a minute): no restart.
pub const AGENT_TOKEN_FILE: &str = "/etc/causeway/hub/token";

/// Label on every hub object made for one Pull member.
pub const CLUSTER_LABEL: &str = "causeway.io/cluster";

/// The shortest lifetime the API server grants a TokenRequest (`expirationSeconds`).
pub const MIN_TOKEN_SECONDS: i64 = 600;

/// Where the agent reaches the hub: all `register` takes from the admin's hub
/// kubeconfig for the agent's own (whose credentials are the agent's token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubEndpoint {
    /// The hub API URL.
    pub server: String,
    /// The CA bundle (PEM) the hub's serving certificate is verified with, if any.
    pub ca_pem: Option<String>,
    /// The name the hub's serving certificate is verified against, when not the URL's
    /// host (kubeconfig `tls-server-name`).
    pub tls_server_name: Option<String>,
}

impl HubEndpoint {
    /// Pure: the endpoint of a client configuration kube-rs loaded (its credentials,
    /// whatever their kind, are not looked at). Refuses one that skips TLS
    /// verification: the agent always verifies the hub.
    pub fn from_config(cfg: &kube::Config) -> anyhow::Result<Self> {
        if cfg.accept_invalid_certs {
            anyhow::bail!(
                "the hub kubeconfig (--hub-kubeconfig) sets insecure-skip-tls-verify: true, which Causeway does not carry over into the agent's kubeconfig (the agent always verifies the hub): remove it and give the hub's CA instead (certificate-authority-data, or a certificate-authority file)"
            );
        }
        let mut server = cfg.cluster_url.to_string();
        // http::Uri shows "https://h:6443" as "https://h:6443/"
        if cfg.cluster_url.path_and_query().map(|p| p.as_str()) == Some("/") {
            server.pop();
        }
        let ca_pem = cfg
            .root_cert
            .as_ref()
            .filter(|c| !c.is_empty())
            .map(|certs| {
                let lf = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
                certs
                    .iter()
                    .map(|der| pem::encode_config(&pem::Pem::new("CERTIFICATE", der.to_vec()), lf))
                    .collect()
            });
        Ok(HubEndpoint {
            server,
            ca_pem,
            tls_server_name: cfg.tls_server_name.clone(),
        })
    }
}

/// The admin's hub client from `--hub-kubeconfig` (and `--hub-context`), with any
/// authentication kube-rs supports (token, client certificate, exec plugin...), and
/// the endpoint the agent's kubeconfig is given.
pub async fn hub_admin(
    kubeconfig: &std::path::Path,
    context: Option<&str>,
) -> anyhow::Result<(kube::Client, HubEndpoint)> {
    let source = causeway_runtime::client::Source {
        kubeconfig: Some(kubeconfig),
        context,
        kubeconfig_flag: "--hub-kubeconfig",
        context_flag: "--hub-context",
    };
    let cfg = source.config().await.map_err(|e| {
        let no_current = e.chain().any(|c| {
            matches!(
                c.downcast_ref::<kube::config::KubeconfigError>(),
                Some(kube::config::KubeconfigError::CurrentContextNotSet)
            )
        });
        if no_current && context.is_none() {
            e.context("the hub kubeconfig has no current-context: pass --hub-context")
        } else {
            e
        }
    })?;
    let endpoint = HubEndpoint::from_config(&cfg)?;
    let client = kube::Client::try_from(cfg).with_context(|| {
        format!(
            "building the hub client from --hub-kubeconfig {}",
            kubeconfig.display()
        )
    })?;
    Ok((client, endpoint))
}

/// Pure: the agent's hub kubeconfig: `hub` (at `endpoint` when given) with the agent's
/// `token`.
pub fn agent_kubeconfig(hub: &HubEndpoint, endpoint: Option<&str>, token: String) -> Value {
    let access = MemberAccess {
        server: endpoint.unwrap_or(&hub.server).to_string(),
        ca_pem: hub.ca_pem.clone(),
        token,
    };
    let mut kc = kubeconfig_for(&access, "hub");
    if let Some(name) = &hub.tls_server_name {
        kc["clusters"][0]["cluster"]["tls-server-name"] = json!(name);
    }
    kc
}

/// Pure: the agent's hub kubeconfig as its Secret keeps it: [`agent_kubeconfig`] with
/// the token read from the file `token_file` rather than written in.
pub fn agent_kubeconfig_with_token_file(
    hub: &HubEndpoint,
    endpoint: Option<&str>,
    token_file: &str,
) -> Value {
    let mut kc = agent_kubeconfig(hub, endpoint, String::new());
    kc["users"][0]["user"] = json!({ "tokenFile": token_file });
    kc
}

/// Pure: the `causeway agent` command line that runs the agent of `name` by hand: its
/// hub kubeconfig from `hub_kubeconfig` (the file `--agent-kubeconfig-out` wrote), the
/// member from `member_kubeconfig` (and `member_context`). What is not known is a
/// placeholder.
pub fn agent_command(
    name: &str,
    hub_kubeconfig: Option<&std::path::Path>,
    member_kubeconfig: Option<&std::path::Path>,
    member_context: Option<&str>,
) -> String {
    let hub = hub_kubeconfig.map_or_else(
        || "<agent-hub.kubeconfig>".to_string(),
        |p| p.display().to_string(),
    );
    let member = member_kubeconfig.map_or_else(
        || "<member.kubeconfig>".to_string(),
        |p| p.display().to_string(),
    );
    let mut cmd =
        format!("causeway agent --cluster {name} --hub-kubeconfig {hub} --kubeconfig {member}");
    if let Some(c) = member_context {
        cmd.push_str(&format!(" --context {c}"));
    }
    cmd
}

/// What `register` is told besides the two clusters.
#[derive(Debug, Clone, Default)]
pub struct RegisterOptions {
    /// Cluster id (default: ClusterProperty, else the name).
    pub id: Option<String>,
    /// spec.region.
    pub region: Option<String>,
    /// spec.zones.
    pub zones: Vec<String>,
    /// spec.provider.
    pub provider: Option<String>,
    /// The hub API URL as the member reaches it (default: the hub kubeconfig's).
    pub hub_endpoint: Option<String>,
    /// Lifetime of the agent's token (and of the search server's, with `search_access`).
    pub token_seconds: i64,
    /// Let the hub's search server read the member: a read-only ServiceAccount in the
    /// member ([`search_access_objects`]) whose token, with the member's endpoint, goes
    /// into the Cluster like a Push member's credentials. Without it, a registration
    /// takes such access back.
    pub search_access: bool,
    /// The member API URL as the search server reaches it (default: the member
    /// kubeconfig's).
    pub member_endpoint: Option<String>,
    /// For the closing message's `causeway agent` command only: the file the agent's
    /// hub kubeconfig is written to (`--agent-kubeconfig-out`), the member's kubeconfig
    /// file and its context.
    pub agent_kubeconfig_out: Option<std::path::PathBuf>,
    /// See `agent_kubeconfig_out`.
    pub member_kubeconfig: Option<std::path::PathBuf>,
    /// See `agent_kubeconfig_out`.
    pub member_context: Option<String>,
}

/// The member ServiceAccount a Pull member registered with search access is read as.
pub const SEARCH_ACCOUNT: &str = "causeway-search";

/// The member ClusterRole that lets the search server list and watch the types it
/// indexes by default; `deploy/rbac/member.yaml` binds the same role to `causeway-hub`
/// for Push members.
pub const SEARCH_READER_ROLE: &str = "causeway:search-reader";

/// Pure: the rules of [`SEARCH_READER_ROLE`]: get, list and watch on every type the
/// search server indexes by default, one rule per API group. Nothing else: no writes,
/// no other types (give extra `--resource` types a role of your own).
pub fn search_reader_rules() -> Value {
    let mut by_group: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for r in causeway_search::indexer::default_resources() {
        by_group
            .entry(r.gvr.group.clone())
            .or_default()
            .push(r.gvr.resource.clone());
    }
    Value::Array(
        by_group
            .into_iter()
            .map(|(group, resources)| {
                json!({"apiGroups": [group], "resources": resources, "verbs": ["get", "list", "watch"]})
            })
            .collect(),
    )
}

/// Pure: what `--search-access` creates in the member: the ServiceAccount
/// [`SEARCH_ACCOUNT`] in causeway-system, the read-only [`SEARCH_READER_ROLE`] and the
/// binding between them (named like the account). A registration without search
/// access, or an unregistration, removes the account and the binding (the role may
/// also be bound by `deploy/rbac/member.yaml`, so it stays).
pub fn search_access_objects() -> Vec<Value> {
    let rbac = "rbac.authorization.k8s.io/v1";
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SEARCH_ACCOUNT, "namespace": SYSTEM_NAMESPACE}}),
        json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": SEARCH_READER_ROLE}, "rules": search_reader_rules()}),
        json!({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": SEARCH_ACCOUNT},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SEARCH_READER_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": SEARCH_ACCOUNT, "namespace": SYSTEM_NAMESPACE}]}),
    ]
}

/// The search-access objects a registration without it, or an unregistration,
/// removes from the member: the account and its binding.
fn search_access_grant() -> Vec<Value> {
    search_access_objects()
        .into_iter()
        .filter(|o| o["kind"] != "ClusterRole")
        .collect()
}

/// A token of ServiceAccount `account` in causeway-system, valid `seconds`.
async fn token_for(
    client: &kube::Client,
    account: &str,
    seconds: i64,
    what: &str,
) -> anyhow::Result<String> {
    Api::<ServiceAccount>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .create_token_request(
            account,
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: vec![],
                    expiration_seconds: Some(seconds),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("requesting a token for {what}"))?
        .status
        .map(|s| s.token)
        .with_context(|| format!("no token was returned for {what}"))
}

/// The agent's ServiceAccount on the hub.
pub fn agent_account(name: &str) -> String {
    format!("causeway-agent-{name}")
}

/// Pure: the hub RBAC of the agent of `name` (ClusterRole, Role in causeway-system,
/// Role in its execution namespace, and their bindings).
pub fn agent_rbac(name: &str) -> Vec<Value> {
    let sa = agent_account(name);
    let rbac = "rbac.authorization.k8s.io/v1";
    let role_name = format!("causeway-agent:{name}");
    let labels = json!({ CLUSTER_LABEL: name });
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": SYSTEM_NAMESPACE}]);
    let read = json!(["get", "list", "watch"]);
    let es = execution_namespace(name);
    let binding = |kind: &str, ns: Option<&str>, role_kind: &str| {
        let mut meta = json!({"name": role_name, "labels": labels});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": rbac, "kind": kind, "metadata": meta, "subjects": subject,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}})
    };
    vec![
        json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": role_name, "labels": labels}, "rules": [
            // the clusterset's shared data, read-only
            {"apiGroups": ["causeway.io"], "resources": ["clusters", "exportedservices"], "verbs": read},
            {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"], "verbs": read},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
            // its own Cluster's status only
            {"apiGroups": ["causeway.io"], "resources": ["clusters/status"], "resourceNames": [name], "verbs": ["get", "patch", "update"]},
        ]}),
        binding("ClusterRoleBinding", None, "ClusterRole"),
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": role_name, "namespace": SYSTEM_NAMESPACE, "labels": labels}, "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [cluster_lease_name(name)], "verbs": ["get", "patch", "update"]},
            // the clusterset's name, for the member's clusterset.k8s.io (KEP-2149)
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CLUSTERSET_CONFIGMAP], "verbs": ["get"]},
        ]}),
        binding("RoleBinding", Some(SYSTEM_NAMESPACE), "Role"),
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": role_name, "namespace": es, "labels": labels}, "rules": [
            {"apiGroups": ["causeway.io"], "resources": ["exportedservices"], "verbs": ["*"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["*"]},
            // its Works: read them, release their finalizer, report their status; never
            // create or delete one (the hub renders them)
            {"apiGroups": ["causeway.io"], "resources": ["works"], "verbs": ["get", "list", "watch", "patch", "update"]},
            {"apiGroups": ["causeway.io"], "resources": ["works/status"], "verbs": ["get", "patch", "update"]},
            // Events only here: never about another cluster's objects
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ]}),
        binding("RoleBinding", Some(&es), "Role"),
    ]
}

fn api_for(client: &kube::Client, obj: &Value) -> anyhow::Result<Api<DynamicObject>> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "Secret" => "secrets",
        "Lease" => "leases",
        other => anyhow::bail!("no plural known for {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Ok(
        match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        },
    )
}

async fn apply_all(client: &kube::Client, objs: &[Value], what: &str) -> anyhow::Result<()> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for o in objs {
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        api_for(client, o)?
            .patch(name, &pp, &Patch::Apply(o))
            .await
            .with_context(|| {
                format!(
                    "writing {} {name} in the {what}",
                    o["kind"].as_str().unwrap_or("object")
                )
            })?;
    }
    Ok(())
}

async fn delete_all(client: &kube::Client, objs: &[Value]) -> anyhow::Result<()> {
    for o in objs {
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match api_for(client, o)?
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            // (the agent's Namespace may be Terminating already: 409, under way)
            Err(kube::Error::Api(s)) if causeway_runtime::apply::gone_or_going(&s) => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("deleting {} {name}", o["kind"].as_str().unwrap_or("object"))
                });
            }
        }
    }
    Ok(())
}

/// The hub Lease the agent of Pull member `name` renews (created empty: the agent may
/// only update it).
pub fn lease_object(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": cluster_lease_name(name), "namespace": SYSTEM_NAMESPACE,
                        "labels": { CLUSTER_LABEL: name }},
           "spec": {}})
}

/// The hub objects a Pull member `name` owns, besides its Cluster.
fn hub_objects(name: &str) -> Vec<Value> {
    let labels = json!({ CLUSTER_LABEL: name });
    let mut objs = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": execution_namespace(name), "labels": labels}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": agent_account(name), "namespace": SYSTEM_NAMESPACE, "labels": labels}}),
        lease_object(name),
    ];
    objs.extend(agent_rbac(name));
    objs
}

/// What `register` made: its summary line and the agent's hub kubeconfig.
#[derive(Debug, Clone)]
pub struct Registered {
    /// One line for the user.
    pub message: String,
    /// The agent's hub kubeconfig, with its token written in (to run the agent by
    /// hand; the member's Secret keeps the same with the token in a file of its own).
    pub agent_kubeconfig: String,
}

/// Pure: refuses a token lifetime the API server would refuse (checked before
/// anything is written).
pub fn check_token_seconds(seconds: i64) -> anyhow::Result<()> {
    if seconds < MIN_TOKEN_SECONDS {
        anyhow::bail!(
            "--token-expiration-seconds {seconds} is too short: the API server issues tokens for at least {MIN_TOKEN_SECONDS} seconds"
        );
    }
    Ok(())
}

/// Registers `name` in pull mode: `hub` is the admin's hub client and `hub_endpoint`
/// where the agent reaches the hub, `member` the member (reached with the admin's own
/// credentials, which the hub is not given).
pub async fn register(
    hub: kube::Client,
    hub_endpoint: HubEndpoint,
    name: &str,
    member_at: &Member,
    opts: &RegisterOptions,
) -> anyhow::Result<Registered> {
    check_token_seconds(opts.token_seconds)?;
    let member = member_at.client.clone();
    let Identity { id, uid, version } = identify(
        &hub,
        &member,
        &member_at.server,
        name,
        opts.id.as_deref(),
        ClusterSyncMode::Pull,
    )
    .await?;
    let clusterset = super::membership::ensure_clusterset(&hub).await?;
    super::membership::claim(&member, name, &clusterset, &id).await?;
    apply_all(&hub, &hub_objects(name), "hub").await?;
    let token = token_for(
        &hub,
        &agent_account(name),
        opts.token_seconds,
        "the agent's ServiceAccount on the hub",
    )
    .await?;
    let kubeconfig = serde_json::to_string_pretty(&agent_kubeconfig(
        &hub_endpoint,
        opts.hub_endpoint.as_deref(),
        token.clone(),
    ))?;
    // the Secret's kubeconfig reads the token from its own key, mounted as a file: a
    // registration again renews it under a running agent
    let mounted = serde_json::to_string_pretty(&agent_kubeconfig_with_token_file(
        &hub_endpoint,
        opts.hub_endpoint.as_deref(),
        AGENT_TOKEN_FILE,
    ))?;
    apply_all(
        &member,
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": AGENT_SECRET, "namespace": SYSTEM_NAMESPACE},
                   "type": "Opaque", "stringData": {"kubeconfig": mounted, "token": token, "cluster": name}}),
        ],
        "member",
    )
    .await?;
    let mut spec = ClusterSpec {
        id: Some(id.clone()),
        kube_system_uid: Some(uid),
        sync_mode: ClusterSyncMode::Pull,
        region: opts.region.clone(),
        zones: opts.zones.clone(),
        provider: opts.provider.clone(),
        ..Default::default()
    };
    let search = if opts.search_access {
        apply_all(&member, &search_access_objects(), "member").await?;
        let token = token_for(
            &member,
            SEARCH_ACCOUNT,
            opts.token_seconds,
            "the search server's ServiceAccount in the member",
        )
        .await?;
        let access = MemberAccess {
            server: opts
                .member_endpoint
                .clone()
                .unwrap_or_else(|| member_at.server.clone()),
            ca_pem: member_at.ca_pem.clone(),
            token,
        };
        store_credentials(&hub, name, &access, &mut spec).await?;
        format!(
            "; the search server reads it at {} as {SYSTEM_NAMESPACE}/{SEARCH_ACCOUNT} (read-only)",
            access.server
        )
    } else {
        // registered again without search access: the Cluster stops naming the member's
        // credentials first (a merge patch: a server-side apply that drops secretRef would
        // leave `secretRef: {}` behind on API servers that keep emptied maps, which the
        // schema rejects), so the search server never sees them missing
        let gone = json!({"spec": {"apiEndpoint": null, "caBundle": null, "secretRef": null}});
        match Api::<Cluster>::all(hub.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&gone))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(e).context("removing the search server's access from the Cluster");
            }
        }
        "; the search server cannot read it (add --search-access to let it)".to_string()
    };
    write_cluster(&hub, name, spec.clone()).await?;
    super::join::refuse_id_taken_meanwhile(&hub, name, "causeway unregister").await?;
    if spec.secret_ref.is_none() {
        // the access itself goes too
        delete_all(&member, &search_access_grant()).await?;
        delete_all(
            &hub,
            &[json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": credentials_secret(name), "namespace": SYSTEM_NAMESPACE}})],
        )
        .await?;
    }
    let by_hand = agent_command(
        name,
        opts.agent_kubeconfig_out.as_deref(),
        opts.member_kubeconfig.as_deref(),
        opts.member_context.as_deref(),
    );
    let hub_file = if opts.agent_kubeconfig_out.is_some() {
        String::new()
    } else {
        " (with the hub kubeconfig --agent-kubeconfig-out writes; the Secret's key kubeconfig reads the token from the file /etc/causeway/hub/token, where deploy/agent/ mounts its key token)"
            .to_string()
    };
    Ok(Registered {
        message: format!(
            "cluster \"{name}\" (id {id}, Kubernetes {version}) registered in pull mode{search}; its agent's hub credentials are in Secret {SYSTEM_NAMESPACE}/{AGENT_SECRET} of the member: start the agent there (kubectl apply -f deploy/agent/) or run `{by_hand}`{hub_file}"
        ),
        agent_kubeconfig: kubeconfig,
    })
}

/// Removes Pull member `name`: deletes its Cluster and waits (up to `wait`) while its
/// agent withdraws what it imported (unless `preserve`) and the hub cleans up, then
/// removes its agent identity from the hub and its Secret from the member (given its
/// kubeconfig, which also withdraws the imports if the agent could not).
pub async fn unregister(
    hub: kube::Client,
    name: &str,
    member: Option<&Member>,
    preserve: bool,
    wait: std::time::Duration,
) -> anyhow::Result<String> {
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let exists = clusters
        .get_opt(name)
        .await
        .context("reading the Cluster")?
        .is_some();
    let leftover = !exists
        && accounts
            .get_opt(&agent_account(name))
            .await
            .context("reading the agent's ServiceAccount")?
            .is_some();
    // an earlier unregister gave up waiting, and the Cluster went after it: what it did
    // not get to (here and, given the member's kubeconfig, there) is done now
    // whether the agent cleaned up the member: it says so on its Lease, which the hub
    // deletes right after (so it is followed, not read once)
    let mut confirmed = None;
    let head = if leftover {
        format!(
            "cluster \"{name}\" was already removed; its leftover agent identity (ServiceAccount, roles, Lease, execution namespace) removed from the hub"
        )
    } else {
        let follow = AgentLeft::follow(&hub, name).await;
        let removed =
            super::join::remove_cluster(&hub, name, ClusterSyncMode::Pull, preserve, wait).await;
        confirmed = Some(follow.confirmed());
        removed.map_err(|e| match e.downcast_ref::<super::join::StillThere>() {
            Some(_) if exists => e.context(format!(
                "the agent's hub identity stays until the Cluster is gone: run `causeway unregister {name}` again to finish"
            )),
            _ => e,
        })?;
        format!("cluster \"{name}\" unregistered")
    };
    // everything but the shared causeway-system namespace
    delete_all(&hub, &hub_objects(name)[1..]).await?;
    let unconfirmed = if confirmed == Some(false) {
        Some(unconfirmed_note(name, preserve, member.is_some()))
    } else {
        None
    };
    let note = if let Some(member) = member {
        let member = member.client.clone();
        delete_all(
            &member,
            &[json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": AGENT_SECRET, "namespace": SYSTEM_NAMESPACE}})],
        )
        .await?;
        delete_all(&member, &search_access_grant()).await?;
        // the agent deletes it as it leaves; not if it could not
        super::membership::leave(&member).await?;
        if preserve {
            "; what Causeway imported into the member is left in place (--preserve)".to_string()
        } else {
            let n = crate::mcs::leave(&member).await?;
            format!("; {n} imported objects removed from the member")
        }
    } else {
        "; pass --kubeconfig <member> to also remove the agent's Secret and the imports from the member".to_string()
    };
    Ok(match unconfirmed {
        Some(warning) => format!("{head}{note}\n{warning}"),
        None => format!("{head}{note}"),
    })
}

/// Pure: what `unregister` says when the agent of `name` never confirmed it cleaned up
/// the member (it was not running, could not reach the hub, or the hub stopped waiting
/// for it), given `preserve` and whether the member's kubeconfig was given (with
/// which `unregister` withdrew the imports and the membership itself).
pub fn unconfirmed_note(name: &str, preserve: bool, with_member: bool) -> String {
    let mut left = vec![if preserve {
        "the objects the hub propagated there, kept by --preserve but still labelled causeway.io/managed=true (remove that label from those you keep)"
    } else {
        "the objects the hub propagated there (labelled causeway.io/managed=true: `kubectl get all,configmaps,secrets -A -l causeway.io/managed=true`)"
    }];
    if !with_member {
        if !preserve {
            left.push("its Multi-Cluster Services imports (ServiceImports, derived Services and EndpointSlices labelled causeway.io/managed=true)");
        }
        left.push(
            "its ClusterProperty clusterset.k8s.io (`kubectl delete clusterproperty clusterset.k8s.io`)",
        );
        left.push("the agent's Secret causeway-system/causeway-agent-hub");
    }
    format!(
        "warning: the agent of \"{name}\" never confirmed that it cleaned up the member (it was not running, could not reach the hub, or the hub stopped waiting for it after 60 s), so the member may still hold {}; delete them there by hand{}; its agent stops on its own once it sees the Cluster gone (then delete its Deployment, deploy/agent/)",
        left.join(", "),
        match (with_member, preserve) {
            (true, false) => {
                " (its imports, clusterset.k8s.io and the agent's Secret were removed with --kubeconfig)"
            }
            (true, true) => {
                " (its clusterset.k8s.io and the agent's Secret were removed with --kubeconfig)"
            }
            (false, _) => "",
        }
    )
}

/// Follows the Lease of a Pull member while its Cluster is removed, for the
/// annotation with which its agent says it cleaned up the member
/// ([`super::finalize::AGENT_LEFT`]): the hub deletes the Lease right after it saw
/// it, so a read at the end would not find it.
struct AgentLeft {
    seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl AgentLeft {
    /// Starts following the Lease of `name`; returns once the watch listed it (or
    /// after a few seconds, if it cannot). A list or watch that fails (a user who may
    /// not read Leases, a hub that went away) is tried again with kube's default
    /// backoff (800 ms doubling to 30 s), not at once for the whole removal wait.
    async fn follow(hub: &kube::Client, name: &str) -> AgentLeft {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let api: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
        let cfg = watcher::Config::default()
            .fields(&format!("metadata.name={}", cluster_lease_name(name)));
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (listed, is_listed) = tokio::sync::oneshot::channel();
        let s = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = std::pin::pin!(watcher(api, cfg).default_backoff());
            while let Some(event) = events.next().await {
                let lease = match event {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))
                    | Ok(watcher::Event::Delete(l)) => l,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Init) | Err(_) => continue,
                };
                if kube::ResourceExt::annotations(&lease).contains_key(super::finalize::AGENT_LEFT)
                {
                    s.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), is_listed).await;
        AgentLeft { seen, task }
    }

    /// Whether the agent said it left; stops following.
    fn confirmed(self) -> bool {
        self.task.abort();
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::clusters::testing::kubeconfig as hub_kubeconfig;

    #[tokio::test]
    async fn the_hub_is_read_with_any_credentials_and_gives_the_agent_only_its_endpoint() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        // a hub whose admin authenticates with a client certificate, no token
        let server = kubesim::Server::start(kubesim::Config::new("hub"))
            .await
            .unwrap();
        let cert = server
            .issue_client_cert(&kubesim::User::admin("cert-admin"))
            .unwrap();
        // an authenticated request (anyone may read /version)
        async fn lists(client: &kube::Client) {
            Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                .list(&Default::default())
                .await
                .unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let ca = server.ca_pem().unwrap();
        let path = hub_kubeconfig(
            dir.path(),
            &format!(
                "{{server: '{}', certificate-authority-data: {}}}",
                server.url(),
                b64(ca)
            ),
            &format!(
                "{{client-certificate-data: {}, client-key-data: {}}}",
                b64(&cert.cert_pem),
                b64(&cert.key_pem)
            ),
            true,
        );
        let (admin, hub) = hub_admin(&path, None).await.unwrap();
        lists(&admin).await;
        assert_eq!(hub.server, server.url());
        assert_eq!(hub.tls_server_name, None);
        // the agent's kubeconfig: the hub's endpoint and CA with the agent's token (the
        // admin's here), nothing of the admin's certificate
        let kc = agent_kubeconfig(&hub, None, server.admin_token().into());
        assert_eq!(
            kc["users"][0]["user"],
            json!({"token": server.admin_token()})
        );
        let kc: kube::config::Kubeconfig = serde_json::from_value(kc).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        lists(&kube::Client::try_from(cfg).unwrap()).await;

        // an exec plugin, a TLS server name and another endpoint for the agent
        let exec = |token: &str| {
            r#"{exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: sh,
              args: ['-c', 'echo ''{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "TOKEN"}}''']}}"#
                .replace("TOKEN", token)
        };
        let path = hub_kubeconfig(
            dir.path(),
            &format!(
                "{{server: '{}', certificate-authority-data: {}}}",
                server.url(),
                b64(ca)
            ),
            &exec(server.admin_token()),
            true,
        );
        let (admin, _) = hub_admin(&path, None).await.unwrap();
        lists(&admin).await;
        let path = hub_kubeconfig(
            dir.path(),
            "{server: 'https://hub.example:6443/', tls-server-name: api.hub}",
            &exec("t"),
            true,
        );
        let (_, hub) = hub_admin(&path, None).await.unwrap();
        assert_eq!(
            hub,
            HubEndpoint {
                server: "https://hub.example:6443".into(),
                ca_pem: None,
                tls_server_name: Some("api.hub".into()),
            }
        );
        let kc = agent_kubeconfig(&hub, Some("https://10.0.0.9"), "t".into());
        assert_eq!(
            kc["clusters"][0]["cluster"],
            json!({"server": "https://10.0.0.9", "tls-server-name": "api.hub"})
        );
    }

    #[tokio::test]
    async fn hub_kubeconfig_errors_name_the_hub_flags() {
        let err = |r: anyhow::Result<(kube::Client, HubEndpoint)>| match r {
            Ok(_) => panic!("accepted"),
            Err(e) => format!("{e:#}"),
        };
        let dir = tempfile::tempdir().unwrap();
        let user = "{token: t}";
        let path = hub_kubeconfig(
            dir.path(),
            "{server: 'https://hub.example:6443'}",
            user,
            false,
        );
        let e = err(hub_admin(&path, None).await);
        assert!(
            e.starts_with("the hub kubeconfig has no current-context: pass --hub-context: using --hub-kubeconfig"),
            "{e}"
        );
        assert!(!e.contains("join") && !e.contains("member"), "{e}");
        let (_, hub) = hub_admin(&path, Some("ctx")).await.unwrap();
        assert_eq!(hub.server, "https://hub.example:6443");
        let e = err(hub_admin(&path, Some("other")).await);
        assert!(
            e.contains("context \"other\" (--hub-context) of --hub-kubeconfig"),
            "{e}"
        );
        let path = hub_kubeconfig(
            dir.path(),
            "{server: 'https://hub.example:6443', insecure-skip-tls-verify: true}",
            user,
            true,
        );
        let e = err(hub_admin(&path, None).await);
        assert!(
            e.contains("--hub-kubeconfig") && e.contains("insecure-skip-tls-verify"),
            "{e}"
        );
    }

    #[test]
    fn the_agent_command_names_both_kubeconfigs() {
        use std::path::Path;
        assert_eq!(
            agent_command(
                "west",
                Some(Path::new("agent.conf")),
                Some(Path::new("west.conf")),
                Some("w")
            ),
            "causeway agent --cluster west --hub-kubeconfig agent.conf --kubeconfig west.conf --context w"
        );
        assert_eq!(
            agent_command("west", None, None, None),
            "causeway agent --cluster west --hub-kubeconfig <agent-hub.kubeconfig> --kubeconfig <member.kubeconfig>"
        );
    }

    /// The Secret's kubeconfig reads the token from AGENT_TOKEN_FILE, which must be
    /// where deploy/agent/ mounts the Secret's key `token` (the whole Secret, no
    /// subPath: the kubelet then updates the file when the Secret changes), next to the
    /// kubeconfig the Deployment passes.
    #[test]
    fn the_agent_deployment_mounts_the_token_where_its_kubeconfig_reads_it() {
        let hub = HubEndpoint {
            server: "https://hub.example:6443".into(),
            ca_pem: None,
            tls_server_name: None,
        };
        let kc = agent_kubeconfig_with_token_file(&hub, None, AGENT_TOKEN_FILE);
        assert_eq!(
            kc["users"][0]["user"],
            json!({"tokenFile": "/etc/causeway/hub/token"})
        );
        let parsed: kube::config::Kubeconfig = serde_json::from_value(kc).unwrap();
        assert_eq!(
            parsed.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .token_file
                .as_deref(),
            Some(AGENT_TOKEN_FILE)
        );
        let yaml = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/agent/deployment.yaml"
        ))
        .unwrap();
        let d: Value = serde_saphyr::from_str(&yaml).unwrap();
        let pod = &d["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["secret"]["secretName"] == AGENT_SECRET)
            .expect("the Secret is a volume");
        let items = volume["secret"]["items"].as_array();
        assert!(
            items.is_none_or(|i| i
                .iter()
                .any(|it| it["key"] == "token" && it["path"] == "token")),
            "key token is mounted as file token: {volume}"
        );
        let container = &pod["containers"][0];
        let mount = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume["name"])
            .expect("the Secret is mounted");
        assert!(mount.get("subPath").is_none(), "a subPath is never updated");
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(format!("{dir}/token"), AGENT_TOKEN_FILE);
        assert!(
            container["args"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a.as_str() == Some(&format!("--hub-kubeconfig={dir}/kubeconfig"))),
            "{container}"
        );
    }

    #[test]
    fn an_unconfirmed_cleanup_names_what_may_be_left_in_the_member() {
        let n = unconfirmed_note("west", false, false);
        assert!(
            n.starts_with(
                "warning: the agent of \"west\" never confirmed that it cleaned up the member"
            ),
            "{n}"
        );
        for what in [
            "propagated there (labelled causeway.io/managed=true",
            "Multi-Cluster Services imports",
            "clusterset.k8s.io",
            "causeway-system/causeway-agent-hub",
            "delete them there by hand",
        ] {
            assert!(n.contains(what), "{what}: {n}");
        }
        // with the member's kubeconfig, unregister removed the imports itself
        let n = unconfirmed_note("west", false, true);
        assert!(!n.contains("Multi-Cluster Services imports"), "{n}");
        assert!(n.contains("its imports, clusterset.k8s.io and the agent's Secret were removed with --kubeconfig"), "{n}");
        let n = unconfirmed_note("west", true, true);
        assert!(n.contains("kept by --preserve but still labelled"), "{n}");
        assert!(!n.contains("its imports, clusterset"), "{n}");
    }

    #[test]
    fn a_token_shorter_than_the_api_server_grants_is_refused() {
        assert!(check_token_seconds(600).is_ok());
        let e = check_token_seconds(60).unwrap_err().to_string();
        assert!(
            e.contains("--token-expiration-seconds 60 is too short") && e.contains("600"),
            "{e}"
        );
    }

    #[test]
    fn the_agent_may_write_only_its_own_cluster_lease_outbox_and_works() {
        let rbac = agent_rbac("west");
        let writes: Vec<(String, Option<String>, Value)> = rbac
            .iter()
            .filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole" | "Role")))
            .flat_map(|o| {
                let ns = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(String::from);
                o["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| {
                        r["verbs"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|v| !matches!(v.as_str(), Some("get" | "list" | "watch")))
                    })
                    .map(move |r| (r["resources"].to_string(), ns.clone(), r.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (resources, ns, rule) in writes {
            let names = rule.get("resourceNames");
            match resources.as_str() {
                r if r.contains("clusters/status") => assert_eq!(names, Some(&json!(["west"]))),
                r if r.contains("leases") => assert_eq!(names, Some(&json!(["cluster-west"]))),
                _ => assert_eq!(ns.as_deref(), Some("causeway-es-west"), "{rule}"),
            }
        }
        // the work applier in the agent: its Works and their status, no create/delete
        let es_role = rbac
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == "causeway-es-west")
            .unwrap();
        let verbs = |resource: &str| -> Vec<String> {
            es_role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r["apiGroups"] == json!(["causeway.io"]) && r["resources"] == json!([resource])
                })
                .flat_map(|r| {
                    r["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_string())
                })
                .collect()
        };
        assert_eq!(verbs("works"), ["get", "list", "watch", "patch", "update"]);
        assert_eq!(verbs("works/status"), ["get", "patch", "update"]);
    }

    #[test]
    fn search_access_reads_only_the_default_types_and_its_grant_leaves_the_role() {
        let objs = search_access_objects();
        let role = objs.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
        assert_eq!(role["metadata"]["name"], SEARCH_READER_ROLE);
        let mut covered = std::collections::BTreeSet::new();
        for rule in role["rules"].as_array().unwrap() {
            assert_eq!(rule["verbs"], json!(["get", "list", "watch"]), "{rule}");
            for r in rule["resources"].as_array().unwrap() {
                covered.insert((
                    rule["apiGroups"][0].as_str().unwrap().to_string(),
                    r.as_str().unwrap().to_string(),
                ));
            }
        }
        let defaults: std::collections::BTreeSet<(String, String)> =
            causeway_search::indexer::default_resources()
                .into_iter()
                .map(|r| (r.gvr.group, r.gvr.resource))
                .collect();
        assert_eq!(covered, defaults);
        let binding = objs
            .iter()
            .find(|o| o["kind"] == "ClusterRoleBinding")
            .unwrap();
        assert_eq!(binding["roleRef"]["name"], SEARCH_READER_ROLE);
        assert_eq!(binding["subjects"][0]["name"], SEARCH_ACCOUNT);
        // taking access back removes the account and its binding, not the shared role
        let kinds: Vec<String> = search_access_grant()
            .into_iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["ServiceAccount", "ClusterRoleBinding"]);
    }

    /// A user who may not read Leases: following the agent's Lease tries the refused
    /// list again with a backoff, not in a tight loop for the whole removal wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn following_a_lease_the_user_may_not_read_backs_off() {
        let server = kubesim::Server::start(kubesim::Config::new("hub"))
            .await
            .unwrap();
        server.add_token(
            "nobody-token",
            kubesim::User {
                name: "nobody".into(),
                groups: vec!["system:authenticated".into()],
                ..Default::default()
            },
        );
        let cfg = server.client_config().await;
        let admin = kube::Client::try_from(cfg.clone()).unwrap();
        let mut nobody = cfg;
        nobody.auth_info.token = Some("nobody-token".to_string().into());
        let nobody = kube::Client::try_from(nobody).unwrap();
        // the refused lists of Leases so far, from the server's request counts
        let refused = || async {
            let text = admin
                .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
                .await
                .unwrap();
            text.lines()
                .filter(|l| {
                    l.starts_with("apiserver_request_total{")
                        && l.contains("verb=\"list\"")
                        && l.contains("resource=\"coordination.k8s.io/leases\"")
                        && l.contains("code=\"403\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        // it waits a few seconds for a list that never comes
        let follow = AgentLeft::follow(&nobody, "west").await;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let lists = refused().await;
        assert!(!follow.confirmed());
        assert!(lists >= 1.0, "the Lease was never listed: {lists}");
        // 800 ms doubling: a handful in 6 s (a tight loop makes thousands)
        assert!(lists <= 8.0, "{lists} refused lists of Leases in 6 s");
    }
}
