//! Well-known label keys, annotation keys, finalizers and names.
//!
//! These are the conventions of `DESIGN.md` ("Objects and names"). Tests and
//! users depend on the exact strings, so every component takes them from here.

/// API group of Causeway's own resources (`Cluster`, `Work`, policies, `ExportedService`).
pub const CAUSEWAY_GROUP: &str = "causeway.io";

/// API group of the Multi-Cluster Services API (KEP-1645, `kubernetes-sigs/mcs-api`).
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";

/// API group of Karmada's `MultiClusterIngress`.
pub const KARMADA_NETWORKING_GROUP: &str = "networking.karmada.io";

/// Field manager used for every server-side apply and update Causeway makes.
pub const FIELD_MANAGER: &str = "causeway";

/// Field manager of the mesh annotations the Gateway API controller merges into hub
/// ServiceImports (GW-4): not [`FIELD_MANAGER`], which the aggregator applies those
/// ServiceImports with, so that its apply never takes them over or drops them.
pub const MESH_FIELD_MANAGER: &str = "causeway-mesh";

/// Name of the `about.k8s.io` `ClusterProperty` that holds the cluster id (KEP-2149).
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";

/// Name of the `about.k8s.io` `ClusterProperty` that names the clusterset (KEP-2149).
pub const CLUSTERSET_PROPERTY: &str = "clusterset.k8s.io";

/// Legacy (pre KEP-2149 rename) name of the cluster-id `ClusterProperty`; accepted on read.
pub const LEGACY_CLUSTER_ID_PROPERTY: &str = "id.k8s.io";

/// `IngressClass.spec.controller` value that selects Causeway's MultiClusterIngress controller.
pub const INGRESS_CONTROLLER: &str = "causeway.io/ingress-controller";

/// Namespace of Causeway's own objects (member credentials on the hub, proxy Leases,
/// the member ServiceAccount the hub acts as).
pub const SYSTEM_NAMESPACE: &str = "causeway-system";

/// The prefix of Kubernetes' own namespaces (`kube-system`, `kube-public`,
/// `kube-node-lease`, and those add-ons install: `kube-flannel`...), where a cluster's
/// own components act on what is written: nothing is propagated or exported there.
pub const KUBERNETES_NAMESPACE_PREFIX: &str = "kube-";

/// Prefix of the hub namespace that holds a member cluster's `Work` objects
/// (`causeway-es-<cluster>`); see [`crate::names::execution_namespace`].
pub const EXECUTION_NAMESPACE_PREFIX: &str = "causeway-es-";

/// DNS zone served for multi-cluster services (KEP-1645 DNS specification).
pub const CLUSTERSET_DOMAIN: &str = "clusterset.local";

/// Version of the mcs-api CRD schema these types follow (CRD label
/// [`labels::MCS_RELEASE_VERSION`]).
pub const MCS_RELEASE_VERSION: &str = "v0.5.0";

/// Revision of the mcs-api CRD schema within [`MCS_RELEASE_VERSION`] (CRD label
/// [`labels::MCS_CRD_SCHEMA_REVISION`]).
pub const MCS_CRD_SCHEMA_REVISION: &str = "0";

/// Label keys (and their fixed values).
pub mod labels {
    /// MCS: the name of the multi-cluster service an EndpointSlice belongs to.
    pub const SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";

    /// MCS: the cluster id of the cluster an EndpointSlice's endpoints come from.
    pub const SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";

    /// Names the controller that manages an EndpointSlice.
    pub const ENDPOINTSLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

    /// Value of [`ENDPOINTSLICE_MANAGED_BY`] on every EndpointSlice Causeway writes.
    pub const ENDPOINTSLICE_MANAGED_BY_VALUE: &str = "causeway.io";

    /// Value of [`ENDPOINTSLICE_MANAGED_BY`] used by kube-controller-manager; MCS
    /// EndpointSlices must never carry it (KEP-1645 EPS-4).
    pub const ENDPOINTSLICE_MANAGED_BY_KUBE: &str = "endpointslice-controller.k8s.io";

    /// Links an EndpointSlice to the Service kube-proxy programs it for.
    pub const KUBERNETES_SERVICE_NAME: &str = "kubernetes.io/service-name";

    /// Marks objects Causeway created and owns (value [`MANAGED_VALUE`]).
    pub const MANAGED: &str = "causeway.io/managed";

    /// Value of [`MANAGED`].
    pub const MANAGED_VALUE: &str = "true";

    /// Selects the Services the MCS importer derived in a member: [`MANAGED`] and
    /// [`SERVICE_NAME`]. Services the work applier propagated are [`MANAGED`] too but
    /// carry no [`SERVICE_NAME`], so the importer never mistakes one for its own.
    pub const DERIVED_SERVICE_SELECTOR: &str =
        "causeway.io/managed=true,multicluster.kubernetes.io/service-name";

    /// Selects a member's Services the exporter may export: all but the Services the
    /// importer derived (which carry [`SERVICE_NAME`]); a propagated Service is exported
    /// like any other.
    pub const NOT_DERIVED_SELECTOR: &str = "!multicluster.kubernetes.io/service-name";

    /// On a `Work` and a template revision: the name of the ResourceBinding or
    /// ClusterResourceBinding it was rendered from, as [`crate::names::label_value`]
    /// (shortened past 63 characters; the full name is then in the annotation of the
    /// same key: read it with [`crate::names::named_by`]).
    pub const BINDING_NAME: &str = "causeway.io/binding-name";

    /// On a `Work`: the namespace of the ResourceBinding it was rendered from (absent
    /// for a ClusterResourceBinding).
    pub const BINDING_NAMESPACE: &str = "causeway.io/binding-namespace";

    /// On a resource template: [`DELETION_PROTECTED_ALWAYS`] makes the deletion webhook
    /// (`causeway webhook`) deny its deletion until the label is removed (G.50).
    pub const DELETION_PROTECTED: &str = "causeway.io/deletion-protected";

    /// Value of [`DELETION_PROTECTED`] that protects an object.
    pub const DELETION_PROTECTED_ALWAYS: &str = "Always";

    /// On a resource template: "true" keeps the member's `spec.replicas` (an HPA's, say)
    /// on updates; Causeway sets replicas only when it creates the object.
    pub const RETAIN_REPLICAS: &str = "causeway.io/retain-replicas";

    /// Whether `obj` (a template, or a manifest rendered from one) keeps the member's
    /// replica count ([`RETAIN_REPLICAS`] is "true").
    pub fn retains_replicas(obj: &serde_json::Value) -> bool {
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(RETAIN_REPLICAS))
            .and_then(serde_json::Value::as_str)
            == Some("true")
    }

    /// On a ResourceBinding or ClusterResourceBinding: the name of the PropagationPolicy
    /// or ClusterPropagationPolicy that claimed its resource template.
    pub const POLICY_NAME: &str = "causeway.io/policy-name";

    /// On a ResourceBinding: the namespace of the PropagationPolicy that claimed its
    /// resource template (absent when a ClusterPropagationPolicy claimed it).
    pub const POLICY_NAMESPACE: &str = "causeway.io/policy-namespace";

    /// On a causeway-proxy's hub Lease (value [`PROXY_COMPONENT`]): which component holds it.
    pub const COMPONENT: &str = "causeway.io/component";

    /// Value of [`COMPONENT`] on causeway-proxy Leases.
    pub const PROXY_COMPONENT: &str = "causeway-proxy";

    /// On `Work` objects and execution namespaces: the member cluster they target.
    pub const CLUSTER: &str = "causeway.io/cluster";

    /// On a Work the hub makes to create a template's namespace in a member, and on the
    /// Namespace it creates there: the namespace's name. Any Work may take over a
    /// member Namespace that carries it.
    pub const AUTO_NAMESPACE: &str = "causeway.io/auto-namespace";

    /// On a ControllerRevision the hub keeps for a ClusterResourceBinding (in
    /// `causeway-system`, with [`BINDING_NAME`]): "true".
    pub const CLUSTER_BINDING: &str = "causeway.io/cluster-binding";

    /// On a hub Namespace: "true" keeps the hub from creating it in the members that
    /// its templates are propagated to (create it there yourself, or propagate it).
    pub const SKIP_AUTO_PROPAGATION: &str = "causeway.io/skip-auto-propagation";

    /// On an object a Pull member's agent wrote into its outbox (its execution
    /// namespace on the hub) for the hub's relay to publish: the name of the member's
    /// hub Cluster. Hub caches of real MCS objects select `!causeway.io/outbox`.
    pub const OUTBOX: &str = "causeway.io/outbox";

    /// On an outbox object: the namespace the object belongs in on the hub (the
    /// namespace of the member's Service).
    pub const ORIGIN_NAMESPACE: &str = "causeway.io/origin-namespace";

    /// On a hub object the relay published from an outbox: the name of the Cluster
    /// whose outbox it came from.
    pub const RELAYED_FROM: &str = "causeway.io/relayed-from";

    /// CRD label: the Causeway release that generated the CRD; `causeway crds install`
    /// refuses to replace a CRD a newer Causeway installed (API-8).
    pub const RELEASE_VERSION: &str = "causeway.io/release-version";

    /// CRD label: the mcs-api release the CRD schema comes from (API-8).
    pub const MCS_RELEASE_VERSION: &str = "multicluster.x-k8s.io/release-version";

    /// CRD label: the schema revision within that release, to prevent downgrades (API-8).
    pub const MCS_CRD_SCHEMA_REVISION: &str = "multicluster.x-k8s.io/crd-schema-revision";
}

/// Annotation keys.
pub mod annotations {
    /// On a ServiceImport: the name of the derived Service that backs it in a member
    /// (the mcs-api reference convention); see [`crate::names::derived_service_name`].
    pub const DERIVED_SERVICE: &str = "multicluster.kubernetes.io/derived-service";
    /// On hub and imported EndpointSlices: when the exporter wrote them (ms since the
    /// epoch), for the "endpoint change → imported slice written" latency.
    pub const EXPORTED_AT: &str = "causeway.io/exported-at-ms";

    /// On an ExportedService in a Pull member's outbox: what the hub answered when the
    /// relay published it (or its slices) and the hub refused, set by the relay and
    /// removed once a write succeeds; the member's agent puts it in the ServiceExport's
    /// `Ready=False/Failed` (EXP-6).
    pub const RELAY_REFUSED: &str = "causeway.io/relay-refused";

    /// On a Cluster being deleted: "true" leaves what Causeway wrote into the member in
    /// place (`causeway unjoin --preserve`).
    pub const PRESERVE_ON_UNJOIN: &str = "causeway.io/preserve-on-unjoin";

    /// On an outbox object: its name on the hub (outbox names are prefixed with the
    /// origin namespace, or hashed; see [`crate::names::outbox_name`]).
    pub const ORIGIN_NAME: &str = "causeway.io/origin-name";

    /// On a Service or MultiClusterIngress: which Causeway load balancer serves it.
    pub const LOAD_BALANCER: &str = "causeway.io/load-balancer";

    /// On a resource template or a Work manifest: `overwrite` or `abort`, overriding the
    /// policy's `conflictResolution` for that object.
    pub const CONFLICT_RESOLUTION: &str = "causeway.io/conflict-resolution";

    /// On a member object: the generation of the resource template it was rendered from.
    pub const TEMPLATE_GENERATION: &str = "causeway.io/template-generation";

    /// On a binding: the hash of its template's content when its policy's spec was last
    /// taken into it (`activationPreference: Lazy` keeps what the binding has until
    /// the template's content differs).
    pub const ACTIVATED_TEMPLATE: &str = "causeway.io/activated-template";

    /// On a binding a Lazy policy made for a template that existed before it: the hash
    /// of the template's content then; nothing is propagated until it differs.
    pub const ACTIVATION_PENDING: &str = "causeway.io/activation-pending";

    /// Marks the default IngressClass of a cluster.
    pub const INGRESS_CLASS_IS_DEFAULT: &str = "ingressclass.kubernetes.io/is-default-class";

    /// Deprecated Ingress class annotation, still honoured when `ingressClassName` is unset.
    pub const INGRESS_CLASS: &str = "kubernetes.io/ingress.class";

    /// MultiClusterIngress tuning read by causeway-proxy. Each value is documented where
    /// the proxy parses it; a value that does not parse is reported on the MCI and the
    /// default is used.
    pub mod mci {
        /// Balancer: `peak-ewma` (default: P2C over peak-EWMA latency), `round-robin`,
        /// `least-request` or `consistent-hash`.
        pub const LOAD_BALANCER: &str = "causeway.io/load-balancer";
        /// Key for `consistent-hash`: `header:<name>` or `cookie:<name>`.
        pub const HASH_ON: &str = "causeway.io/hash-on";
        /// Per-cluster weights, `east=3,west=1` (clusters not listed weigh 1).
        pub const CLUSTER_WEIGHTS: &str = "causeway.io/cluster-weights";
        /// Upstream connect timeout, e.g. `2s`, `500ms`.
        pub const CONNECT_TIMEOUT: &str = "causeway.io/connect-timeout";
        /// Whole-request timeout (until the response head), e.g. `30s`.
        pub const REQUEST_TIMEOUT: &str = "causeway.io/request-timeout";
        /// Idle timeout of pooled upstream connections, e.g. `90s`.
        pub const IDLE_TIMEOUT: &str = "causeway.io/idle-timeout";
        /// Retries on another endpoint (connect failures; idempotent requests), e.g. `2`.
        pub const RETRIES: &str = "causeway.io/retries";
        /// `"true"`: plain-HTTP requests for hosts in `tls[]` get a 308 to https.
        pub const SSL_REDIRECT: &str = "causeway.io/ssl-redirect";
        /// Active HTTP health check path (off when unset), e.g. `/healthz`.
        pub const HEALTH_CHECK_PATH: &str = "causeway.io/health-check-path";
        /// Active health check interval, e.g. `5s`.
        pub const HEALTH_CHECK_INTERVAL: &str = "causeway.io/health-check-interval";
        /// Circuit breaker: max upstream connections per backend.
        pub const MAX_CONNECTIONS: &str = "causeway.io/max-connections";
        /// Circuit breaker: max requests waiting for a connection per backend.
        pub const MAX_PENDING_REQUESTS: &str = "causeway.io/max-pending-requests";
        /// Circuit breaker: max concurrent requests per backend.
        pub const MAX_REQUESTS: &str = "causeway.io/max-requests";
        /// `"true"`: request header names with `_` are forwarded (default `"false"`:
        /// dropped, as nginx's `underscores_in_headers off`).
        pub const UNDERSCORES_IN_HEADERS: &str = "causeway.io/underscores-in-headers";
        /// Protocols a request may `Upgrade` to, comma-separated, e.g. `websocket,h2c`
        /// (default `websocket`); an upgrade to another is ignored (forwarded without it).
        pub const ALLOWED_UPGRADES: &str = "causeway.io/allowed-upgrades";
        /// How the proxy speaks to the backends: `h2` (HTTP/2 over TLS, ALPN `h2`),
        /// `h2c` (HTTP/2 in cleartext) or `http1`; unset: HTTP/2 in cleartext for a
        /// port whose `appProtocol` is `kubernetes.io/h2c` or `grpc`, else HTTP/1.1.
        pub const BACKEND_PROTOCOL: &str = "causeway.io/backend-protocol";
        /// Which endpoints serve the MCI's backends (MCI-4): `clusterset` (default:
        /// every exporting cluster's) or `cluster-local` (only those of the proxy's own
        /// cluster, `causeway-proxy --cluster`; a proxy that does not know its cluster
        /// answers 503 saying so).
        pub const BACKEND_SCOPE: &str = "causeway.io/backend-scope";
        /// gRPC status codes after which a gRPC call is retried on another endpoint,
        /// comma-separated names, e.g. `unavailable,resource-exhausted` (default: none).
        pub const GRPC_RETRY_ON: &str = "causeway.io/grpc-retry-on";
    }

    /// On a causeway-proxy's hub Lease: the addresses (IPs or hostnames, comma-separated)
    /// it publishes for MultiClusterIngress `status.loadBalancer`.
    pub const PROXY_ADDRESSES: &str = "causeway.io/proxy-addresses";

    /// On objects a work applier wrote into a member: the `Work` that carries them
    /// (`<namespace>/<name>`, the namespace being `causeway-es-<cluster>`).
    pub const WORK: &str = "causeway.io/work";

    /// On objects a work applier wrote into a member: a hash of the manifest last
    /// applied, so an unchanged manifest is never applied again (zero writes) and a
    /// changed one always is (fields dropped from the template are then released).
    pub const APPLIED_HASH: &str = "causeway.io/applied-hash";

    /// On a resource template: "true" lets the work applier delete and recreate a
    /// member object when a change touches an immutable field (e.g. a Job's
    /// `spec.completions`); without it the change is reported and not applied.
    pub const RECREATE_ON_IMMUTABLE: &str = "causeway.io/recreate-on-immutable";

    /// On a resource template or a (Cluster)PropagationPolicy: the clusters
    /// (comma-separated names) whose copies are kept when the template is deleted or
    /// the cluster leaves the placement, on top of `preserveResourcesOnDeletion`
    /// (which keeps every cluster's copy).
    pub const PRESERVE_ON_CLUSTERS: &str = "causeway.io/preserve-resources-on-clusters";

    /// On a `Work`: which override policy set which path of each manifest (JSON:
    /// manifest ordinal → path → "Kind ns/name rule N overrider").
    pub const PROVENANCE: &str = "causeway.io/override-provenance";

    /// On a `Work`: where two override policies write the same path of its manifest
    /// (JSON list of "path: later overrides earlier"; `[]` when none do).
    pub const OVERRIDE_OVERLAPS: &str = "causeway.io/override-overlaps";

    /// The annotations of a `Work` that describe how its manifests were made: a Work
    /// that keeps its manifests (held by a rollout) keeps these with them.
    pub const OF_MANIFESTS: [&str; 2] = [PROVENANCE, OVERRIDE_OVERLAPS];

    /// On a causeway-proxy's hub Lease: the ports it serves, `80/http,443/https`.
    pub const PROXY_PORTS: &str = "causeway.io/proxy-ports";

    /// On a causeway-proxy's hub Lease: the MCI TLS Secrets it serves the default
    /// certificate for instead, and why (JSON, `crate::mci::lease`); absent when none.
    pub const PROXY_TLS_PROBLEMS: &str = "causeway.io/proxy-tls-problems";
}

/// Finalizers: always `causeway.io/<controller>`.
pub mod finalizers {
    /// Prefix of every Causeway finalizer.
    pub const PREFIX: &str = "causeway.io/";

    /// Held on `Cluster` objects until the execution namespace and its Works are gone.
    pub const CLUSTER: &str = "causeway.io/cluster-controller";

    /// Held on `Work` objects until their manifests are removed from the member.
    pub const WORK: &str = "causeway.io/work-applier";

    /// Held on ServiceExports until the export is withdrawn from the hub.
    pub const EXPORTER: &str = "causeway.io/exporter";

    /// Held on MultiClusterIngresses until load-balancer state is cleaned up.
    pub const MCI: &str = "causeway.io/mci-controller";

    /// Held on resource templates until their Works are removed.
    pub const PROPAGATION: &str = "causeway.io/propagation";

    /// The finalizer for a controller: `causeway.io/<controller>`.
    pub fn for_controller(controller: &str) -> String {
        format!("{PREFIX}{controller}")
    }
}

#[cfg(test)]
mod selector_tests {
    use super::labels::*;

    #[test]
    fn mcs_selectors_are_spelled_from_the_label_keys() {
        assert_eq!(
            DERIVED_SERVICE_SELECTOR,
            format!("{MANAGED}={MANAGED_VALUE},{SERVICE_NAME}")
        );
        assert_eq!(NOT_DERIVED_SELECTOR, format!("!{SERVICE_NAME}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_carry_the_prefix() {
        for f in [
            finalizers::CLUSTER,
            finalizers::WORK,
            finalizers::EXPORTER,
            finalizers::MCI,
            finalizers::PROPAGATION,
        ] {
            assert!(f.starts_with(finalizers::PREFIX), "{f}");
        }
        assert_eq!(finalizers::for_controller("x"), "causeway.io/x");
    }
}
