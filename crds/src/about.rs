//! The About API (`about.k8s.io`, KEP-2149): the cluster-scoped `ClusterProperty`,
//! field for field as `kubernetes-sigs/about-api`. Causeway reads a member's cluster id
//! from `cluster.clusterset.k8s.io` (CID-3) and keeps `clusterset.k8s.io` there for
//! exactly as long as the cluster is a member (CID-4).
//!
//! Both upstream versions are served with one schema: [`v1beta1`] (storage) and
//! [`v1alpha1`]. Upstream's v1beta1 also declares an empty `status` subresource that
//! nothing writes; it is left out so both versions are identical and need no
//! conversion.

macro_rules! about_version {
    ($version:literal) => {
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        /// ClusterPropertySpec: the property's value.
        #[derive(
            CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
        )]
        #[kube(
            group = "about.k8s.io",
            version = $version,
            kind = "ClusterProperty",
            plural = "clusterproperties",
            printcolumn = r#"{"name":"value","type":"string","jsonPath":".spec.value"}"#,
            printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
        )]
        pub struct ClusterPropertySpec {
            /// The property-dependent value (1 to 128,000 characters).
            #[schemars(length(min = 1, max = 128000))]
            pub value: String,
        }
    };
}

/// `about.k8s.io/v1beta1`, the storage version.
pub mod v1beta1 {
    about_version!("v1beta1");
}

/// `about.k8s.io/v1alpha1`: served for older clients; same schema as [`v1beta1`].
pub mod v1alpha1 {
    about_version!("v1alpha1");
}
