//! Events whose note matters. kube-rs's `Recorder` folds the Events of one object with
//! the same type, reason and action into one series for six minutes, and the series
//! keeps the note of the first: a later, different note (the next rollout wave, another
//! set of failures) would never be seen. [`publish_note`] makes each call an Event of
//! its own; callers publish each distinct note once (they keep what they told).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Publishes `ev` about `reference` as a new Event (never folded into an earlier one).
pub async fn publish_note(
    client: &Client,
    reporter: &Reporter,
    ev: &Event,
    reference: &ObjectReference,
) -> Result<(), kube::Error> {
    Recorder::new(client.clone(), reporter.clone())
        .publish(ev, reference)
        .await
}
