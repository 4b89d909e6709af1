//! Events whose note matters. kube-rs's `Recorder` folds the Events of one object with
//! the same type, reason and action into one series for six minutes, and the series
//! keeps the note of the first: a later, different note (the next rollout wave, another
//! set of failures, another reason a cluster is not indexed) would never be seen.
//! [`Notes`] publishes each Event as one of its own. It is for callers that publish
//! each distinct note once (they keep what they told); a caller that repeats the same
//! Event wants `Recorder`'s series instead.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Publishes Events that are never folded into an earlier one.
#[derive(Clone)]
pub struct Notes {
    client: Client,
    reporter: Reporter,
}

impl Notes {
    /// Events from `reporter`, written with `client`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Notes { client, reporter }
    }

    /// Publishes `ev` about `reference` as a new Event.
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        Recorder::new(self.client.clone(), self.reporter.clone())
            .publish(ev, reference)
            .await
    }
}
