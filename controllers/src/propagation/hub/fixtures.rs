//! Test fixtures shared by the hub's modules.

use std::sync::Arc;

use causeway_crds::federation::cluster::Cluster;
use serde_json::json;

/// A Push cluster whose Ready condition is `ready` since `since`.
pub(super) fn cluster(name: &str, ready: &str, since: &str) -> Arc<Cluster> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "", "lastTransitionTime": since}]}}))
        .unwrap(),
    )
}
