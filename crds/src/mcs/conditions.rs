//! Condition types and reasons of ServiceExport and ServiceImport, as defined by
//! mcs-api (`serviceexport.go`, `serviceimport.go`) and KEP-1645.

/// ServiceExport conditions.
pub mod service_export {
    /// `Valid`: true when the export is valid. This does not say whether the
    /// configuration has been exported yet.
    pub const VALID: &str = "Valid";
    /// `Ready`: true when the service is exported to the control or data plane,
    /// or ready to be pulled.
    pub const READY: &str = "Ready";
    /// `Conflict`: some property of the exported service has conflicting values
    /// across the constituent ServiceExports. Set on all of them.
    pub const CONFLICT: &str = "Conflict";

    /// Reasons of the `Valid`, `Ready` and `Conflict` conditions.
    pub mod reason {
        /// `Valid=True`.
        pub const VALID: &str = "Valid";
        /// `Valid=False`: there is no Service with the export's namespace and name.
        pub const NO_SERVICE: &str = "NoService";
        /// `Valid=False`: the Service's type cannot be exported (`ExternalName`).
        pub const INVALID_SERVICE_TYPE: &str = "InvalidServiceType";
        /// `Valid=False` (Causeway): an `exportedLabels` or `exportedAnnotations` key or
        /// value that no API server accepts; the service is exported without it.
        pub const INVALID_EXPORTED_METADATA: &str = "InvalidExportedMetadata";

        /// `Ready=True`: exported to a control plane (push model).
        pub const EXPORTED: &str = "Exported";
        /// `Ready=True`: ready to be pulled (pull model).
        pub const READY: &str = "Ready";
        /// `Ready=False|Unknown`: the export is in progress.
        pub const PENDING: &str = "Pending";
        /// `Ready=False`: the export failed; the message says why.
        pub const FAILED: &str = "Failed";

        /// `Conflict=True`: the ports are not identical in all constituent Services.
        pub const PORT_CONFLICT: &str = "PortConflict";
        /// `Conflict=True`: headless vs. non-headless.
        pub const TYPE_CONFLICT: &str = "TypeConflict";
        /// `Conflict=True`: session affinity differs.
        pub const SESSION_AFFINITY_CONFLICT: &str = "SessionAffinityConflict";
        /// `Conflict=True`: session affinity config differs.
        pub const SESSION_AFFINITY_CONFIG_CONFLICT: &str = "SessionAffinityConfigConflict";
        /// `Conflict=True`: exported labels differ.
        pub const LABELS_CONFLICT: &str = "LabelsConflict";
        /// `Conflict=True`: exported annotations differ.
        pub const ANNOTATIONS_CONFLICT: &str = "AnnotationsConflict";
        /// `Conflict=True`: internal traffic policy differs.
        pub const INTERNAL_TRAFFIC_POLICY_CONFLICT: &str = "InternalTrafficPolicyConflict";
        /// `Conflict=True`: traffic distribution differs.
        pub const TRAFFIC_DISTRIBUTION_CONFLICT: &str = "TrafficDistributionConflict";
        /// `Conflict=True`: IP families differ so that some backends would be unreachable.
        pub const IP_FAMILY_CONFLICT: &str = "IPFamilyConflict";
        /// `Conflict=False`.
        pub const NO_CONFLICTS: &str = "NoConflicts";

        /// Every `Conflict=True` reason, in the stable order in which several reasons
        /// are joined with commas.
        pub const CONFLICT_REASONS: [&str; 9] = [
            PORT_CONFLICT,
            TYPE_CONFLICT,
            SESSION_AFFINITY_CONFLICT,
            SESSION_AFFINITY_CONFIG_CONFLICT,
            LABELS_CONFLICT,
            ANNOTATIONS_CONFLICT,
            INTERNAL_TRAFFIC_POLICY_CONFLICT,
            TRAFFIC_DISTRIBUTION_CONFLICT,
            IP_FAMILY_CONFLICT,
        ];
    }
}

/// ServiceImport conditions.
pub mod service_import {
    /// `Ready`: true when the ServiceImport is ready.
    pub const READY: &str = "Ready";
    /// `EndpointsStale` (Causeway, EPS-7; also on MultiClusterIngress): true while a
    /// cluster serving the service is not Ready: its last known endpoints are kept for
    /// `--stale-endpoints-ttl` (reason `ClusterNotReady`), then withdrawn until it is
    /// Ready again (reason `EndpointsWithdrawn`). The message names the clusters, since
    /// when they are not Ready and when their endpoints are (or were) withdrawn.
    pub const ENDPOINTS_STALE: &str = "EndpointsStale";

    /// Reasons of the `Ready` condition.
    pub mod reason {
        /// `Ready=True`.
        pub const READY: &str = "Ready";
        /// `Ready=False|Unknown`: being created or updated.
        pub const PENDING: &str = "Pending";
        /// `Ready=False`: the service cannot be imported because of its IP families.
        pub const IP_FAMILY_NOT_SUPPORTED: &str = "IPFamilyNotSupported";

        /// `EndpointsStale=True`: a serving cluster is not Ready; its last known
        /// endpoints are still served until the TTL runs out.
        pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
        /// `EndpointsStale=True`: a serving cluster stayed not Ready past the TTL; its
        /// endpoints are withdrawn until it is Ready again.
        pub const ENDPOINTS_WITHDRAWN: &str = "EndpointsWithdrawn";
        /// `EndpointsStale=False`: every serving cluster is Ready (again).
        pub const CLUSTERS_READY: &str = "ClustersReady";
    }
}
