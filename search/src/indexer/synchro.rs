//! One synchro: one resource type of one member, streamed into the store.
//!
//! The type is resolved by the member's discovery (kind, scope); a member that does not
//! serve it is retried with backoff. Then, in sessions: [`list_watch`] lists (paged)
//! and watches (with bookmarks, relisting on 410); every (re)list loads the store's
//! `(namespace, name) → (resourceVersion, uid)` of this member and type (K.71), skips
//! listed objects whose version and uid are the stored ones (a member re-created under
//! its name counts versions from 1 again: the uid tells its objects from the old
//! member's), writes the others and, when the list is complete, deletes the keys it did
//! not see.
//! Changes are written in batches (≈500 objects or ≈50 ms), coalesced per object; the
//! watch is not read while a batch is written, so memory stays bounded by one batch
//! per synchro and the stored keys of at most [`LISTS`] types at once: a list's
//! comparison takes one of the indexer's [`LISTS`] permits (a restart over a million
//! objects would otherwise hold every member's and type's keys together), and so does
//! forgetting a type the member no longer serves. A list that fails gives its permit
//! and stored versions back while it waits to list again from its start (one that
//! keeps failing, e.g. a CRD whose conversion webhook answers 500, would otherwise hold
//! a permit for good, and [`LISTS`] of them every other member's and type's lists).
//! Stored objects are deleted by batches, the keys of each built when it is reached.
//! A write that fails after its retries marks the store down
//! (K.72): the session ends, dropping its watch and batch, and the next session, after
//! the store answers again, relists — and the relist's diff deletes what went
//! meanwhile.
//!
//! Once everything it took is written, a synchro publishes where the store is in its
//! type ([`Publication::stored_at`]: the list's resourceVersion, then each event's or
//! bookmark's), which cross-cluster watches start from (K.73).

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::ApiResource;
use kube::core::GroupVersion;
use kube::discovery::{Scope, verbs};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ResourceSpec;
use super::health::Health;
use super::listwatch::{Step, list_watch, meta, refused};
use super::metrics::{IndexerMetrics, TypeLabels};
use super::spec::gvr_text;
use crate::positions::{Positions, Publication};
use crate::store::{Gvr, Key, Listed, Record, Store, StoreError, StoreResult, TypeInfo, Versions};

/// Objects per write.
pub(crate) const BATCH: usize = 500;
/// How long a change may wait for others to share its write.
const LINGER: Duration = Duration::from_millis(50);
/// Attempts of one write while the store is unavailable, before the outage is declared.
const WRITE_TRIES: u32 = 4;
/// The first wait between write attempts, doubled each time.
const WRITE_BACKOFF: Duration = Duration::from_millis(100);
/// Discovery calls give up after this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a type the member does not serve: first wait, doubled up to the max.
const RESOLVE_FIRST: Duration = Duration::from_secs(1);
const RESOLVE_MAX: Duration = Duration::from_secs(60);
/// A type is forgotten (its stored objects deleted) once the member's discovery has
/// said it does not serve it for this long: a restarting API server answers 404 for
/// CRD groups until it has loaded them, and a type wiped then is re-ingested whole.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(60);
/// The pause before a new session after an unexpected failure.
const RESTART: Duration = Duration::from_secs(2);
/// Lists compared with the store at once, in the whole indexer (each holds the stored
/// keys and versions of one member's type in memory).
pub(crate) const LISTS: usize = 4;

/// One member's type, to stream into the store.
pub(crate) struct Synchro {
    pub(crate) cluster: String,
    pub(crate) spec: ResourceSpec,
    pub(crate) client: kube::Client,
    pub(crate) store: Store,
    pub(crate) metrics: IndexerMetrics,
    pub(crate) health: Health,
    /// [`LISTS`] permits, shared by every synchro.
    pub(crate) lists: Arc<Semaphore>,
    /// Where the store is in this type of the member, for cross-cluster watches.
    pub(crate) positions: Positions,
    pub(crate) stop: CancellationToken,
}

/// Why a session ended.
enum End {
    Stopped,
    StoreDown,
    Restart,
    /// The member answered 404: it no longer serves the type (a CRD deleted, an API
    /// version removed by an upgrade); discovery is asked again.
    Unserved,
}

impl Synchro {
    /// Runs until `stop`.
    pub(crate) async fn run(self) {
        let labels = TypeLabels {
            cluster: self.cluster.clone(),
            resource: gvr_text(&self.spec.gvr),
        };
        // again from discovery each time the member stops serving the type
        while self.serve(&labels).await {}
        self.metrics.refused.remove(&labels);
    }

    /// Indexes the type while the member serves it: false once stopped, true when the
    /// member stopped serving it.
    async fn serve(&self, labels: &TypeLabels) -> bool {
        let resolved = self.resolve(labels).await;
        self.metrics.unserved.remove(labels);
        let Some((resource, namespaced)) = resolved else {
            return false;
        };
        let info = TypeInfo {
            gvr: self.spec.gvr.clone(),
            kind: resource.kind.clone(),
            namespaced,
        };
        // withdrawn when this synchro stops
        let published = self.positions.publish(
            &self.cluster,
            &self.spec.gvr,
            self.client.clone(),
            resource.clone(),
            namespaced,
            self.spec.metadata_only,
        );
        loop {
            if !self.health.wait_up(&self.stop).await {
                return false;
            }
            let end = match self.prepare(&info).await {
                Ok(()) => break,
                Err(e) => self.failed(e),
            };
            if !self.after(end).await {
                return false;
            }
        }
        loop {
            if !self.health.wait_up(&self.stop).await {
                return false;
            }
            let end = self.session(labels, &resource, &published).await;
            if matches!(end, End::Unserved) {
                // (after a pause: discovery may still say it is served)
                return self.after(end).await;
            }
            if !self.after(end).await {
                return false;
            }
        }
    }

    /// Whether to go on after `end` (after a pause if it was a failure).
    async fn after(&self, end: End) -> bool {
        match end {
            End::Stopped => false,
            End::StoreDown => true,
            End::Restart | End::Unserved => tokio::select! {
                _ = tokio::time::sleep(RESTART) => true,
                _ = self.stop.cancelled() => false,
            },
        }
    }

    /// Before the first list: records the type for discovery (unless the store has it
    /// as it is: no write). A type that switched between whole objects and names only
    /// needs nothing here: the stored versions carry the form
    /// ([`crate::store::stored_version`]), so the relist rewrites every copy.
    async fn prepare(&self, info: &TypeInfo) -> StoreResult<()> {
        let known = self.retry(|| self.store.types()).await?;
        if !known.contains(info) {
            self.retry(|| self.store.set_type(info)).await?;
        }
        Ok(())
    }

    /// The type's resource and scope on the member, retried while it is not served.
    /// Once discovery has said for [`FORGET_AFTER`] that the member does not serve it,
    /// what the store holds of it for this member goes (as a list with nothing in it
    /// would delete it): objects of a CRD deleted, or of an API version an upgrade
    /// removed, sent no DELETE events.
    async fn resolve(&self, labels: &TypeLabels) -> Option<(ApiResource, bool)> {
        let mut wait = RESOLVE_FIRST;
        let mut forgotten = false;
        // "not served" for FORGET_AFTER (answers in between that are no answer, a
        // discovery call failing, do not count against it) before anything is
        // forgotten: a restarting API server answers 404 for CRD groups until it has
        // loaded them
        let mut not_served_since: Option<Instant> = None;
        loop {
            let answer = resolve(&self.client, &self.spec.gvr).await;
            match answer {
                Ok(found) => return Some(found),
                Err(Unresolved { why, served: false }) => {
                    let since = *not_served_since.get_or_insert_with(Instant::now);
                    if !forgotten && since.elapsed() >= FORGET_AFTER {
                        let forget = async {
                            // the type's stored versions are held as a list's are:
                            // under one of the LISTS permits
                            let _permit = self.list_permit().await?;
                            let stored = self
                                .retry(|| self.store.versions(&self.cluster, &self.spec.gvr))
                                .await?;
                            self.delete_unlisted(stored).await
                        };
                        match forget.await {
                            Ok(()) => forgotten = true,
                            Err(_) if self.stop.is_cancelled() => return None,
                            Err(e) => {
                                tracing::warn!(cluster = %self.cluster, resource = %labels.resource, error = %e, "cannot remove the objects of a type the member no longer serves; retrying")
                            }
                        }
                    }
                    tracing::warn!(
                        cluster = %self.cluster,
                        resource = %labels.resource,
                        error = %why,
                        "not indexed: the member does not serve this resource; retrying in {wait:?}"
                    );
                    self.metrics.unserved.get_or_create(labels).set(1);
                }
                Err(Unresolved { why: e, .. }) => {
                    tracing::warn!(
                        cluster = %self.cluster,
                        resource = %labels.resource,
                        error = %e,
                        "not indexed: the member does not serve this resource; retrying in {wait:?}"
                    );
                    self.metrics.unserved.get_or_create(labels).set(1);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => return None,
            }
            wait = (wait * 2).min(RESOLVE_MAX);
        }
    }

    /// One list+watch, until stopped, the store goes down or a write fails.
    async fn session(
        &self,
        labels: &TypeLabels,
        resource: &ApiResource,
        published: &Publication,
    ) -> End {
        let mut events = pin!(list_watch(self.client.clone(), resource));
        let mut up = self.health.subscribe();
        let mut st = Session {
            running: Running::start(&self.metrics),
            batch: Batch::new(&self.metrics),
            listing: None,
            permit: None,
            listed: false,
            position: None,
            unpublished: false,
        };
        loop {
            let deadline = st.batch.deadline();
            let event = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return End::Stopped,
                down = up.wait_for(|up| !*up).map(|r| r.is_ok()) => {
                    if down {
                        return End::StoreDown;
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => None,
                event = events.next() => Some(event),
            };
            let step = match event {
                // the batch waited long enough
                None => self.flush(&mut st.batch).await,
                Some(Some(Ok(event))) => {
                    if matches!(event, Step::Init) {
                        // until the relist is written the store's position is not known
                        // (a watch from the last one would meet the member's 410)
                        published.stored_at(None);
                        // the member answered the list
                        self.metrics.refused.remove(labels);
                    }
                    self.handle(&mut st, resource, event).await
                }
                Some(Some(Err(f))) if matches!(&f.error, kube::Error::Api(e) if e.code == 404) => {
                    tracing::warn!(cluster = %self.cluster, resource = %resource.plural, error = %f, "the member no longer serves this resource; asking its discovery again");
                    return End::Unserved;
                }
                // a failed list gives its permit back, with the stored versions, while
                // the stream waits out its backoff (the member refusing the list, 401
                // or 403, a growing one), then lists again from the start (a new Init
                // takes them again): while the other synchros' lists go on
                Some(Some(Err(f))) if f.listing => {
                    if refused(&f.error) {
                        self.metrics.refused.get_or_create(labels).set(1);
                        tracing::warn!(cluster = %self.cluster, resource = %resource.plural, error = %f, "the member refuses to list this resource; listing again after a growing backoff");
                    } else {
                        tracing::warn!(cluster = %self.cluster, resource = %resource.plural, error = %f, "member list failed; listing again");
                    }
                    st.list_failed(f.at_once);
                    Ok(())
                }
                // a failed watch is opened again (or, failing for long, relisted): the
                // store is not current meanwhile
                Some(Some(Err(f))) => {
                    tracing::warn!(cluster = %self.cluster, resource = %resource.plural, error = %f, "member watch failed; retrying");
                    st.running.synced(false);
                    Ok(())
                }
                Some(None) => return End::Restart,
            };
            if let Err(e) = step {
                return self.failed(e);
            }
            // everything up to the position is written: watches may start from it
            if st.unpublished && st.listing.is_none() && st.batch.len() == 0 {
                published.stored_at(st.position.as_deref());
                st.unpublished = false;
            }
        }
    }

    /// Takes one watch event into the session's batch (or list diff).
    async fn handle(
        &self,
        st: &mut Session<'_>,
        resource: &ApiResource,
        event: Step,
    ) -> StoreResult<()> {
        match event {
            Step::Init => {
                self.flush(&mut st.batch).await?;
                st.relisting();
                if st.permit.is_none() {
                    st.permit = Some(self.list_permit().await?);
                }
                let stored = self
                    .retry(|| self.store.versions(&self.cluster, &self.spec.gvr))
                    .await?;
                st.running.synced(false);
                st.listing = Some(stored);
                Ok(())
            }
            Step::InitApply(obj) => {
                // metadata of other types than the API's: read whole, as the record is
                let item = Listed::read(obj.get()).unwrap_or_else(|| {
                    let v = serde_json::from_str(obj.get()).unwrap_or_default();
                    Listed::of_value(&v)
                });
                let listed = item
                    .resource_version()
                    .map(|rv| crate::store::stored_version(rv, self.spec.metadata_only));
                let stored = st
                    .listing
                    .as_mut()
                    .and_then(|l| l.take_stored(item.namespace(), item.name()));
                // the same object (uid) at the same version: a member re-created under
                // its name counts resourceVersions from 1 again, and its objects may come
                // at the versions stored for the old member's
                let unchanged = stored
                    .zip(listed.as_deref())
                    .is_some_and(|(stored, listed)| stored.is(listed, item.uid()));
                if unchanged {
                    self.metrics.unchanged.inc();
                    return Ok(());
                }
                self.put(&mut st.batch, resource, obj.get()).await
            }
            Step::InitDone(rv) => {
                self.flush(&mut st.batch).await?;
                self.delete_unlisted(st.listing.take().unwrap_or_default())
                    .await?;
                st.permit = None;
                st.listed = true;
                st.running.synced(true);
                st.moved_to(Some(&rv));
                Ok(())
            }
            // a watch answered again after a failure: the store is current again
            Step::Watching => {
                if st.listed {
                    st.running.synced(true);
                }
                Ok(())
            }
            Step::Progress(rv) => {
                // nothing changed up to rv; during a list the list's version decides
                if st.listing.is_none() {
                    st.moved_to(Some(&rv));
                }
                Ok(())
            }
            Step::Apply(obj) => {
                st.moved_to(meta(&obj, "resourceVersion"));
                self.put(&mut st.batch, resource, &obj.to_string()).await
            }
            Step::Delete(obj) => {
                st.moved_to(meta(&obj, "resourceVersion"));
                let key = self.key(
                    meta(&obj, "namespace").unwrap_or_default().to_string(),
                    meta(&obj, "name").unwrap_or_default().to_string(),
                );
                st.batch.set(key, None);
                self.flush_if_full(&mut st.batch).await
            }
        }
    }

    /// One of the [`LISTS`] permits to compare a list with the store; counted in the
    /// `listing` gauge while held.
    async fn list_permit(&self) -> StoreResult<ListPermit> {
        // a synchro stopped while it waits for one stops at once (the fleet loop awaits
        // it before it goes on)
        let stopping = || StoreError::Unavailable("the indexer is stopping".into());
        let permit = tokio::select! {
            p = self.lists.clone().acquire_owned() => p.map_err(|_| stopping())?,
            _ = self.stop.cancelled() => return Err(stopping()),
        };
        self.metrics.listing.inc();
        Ok(ListPermit {
            _permit: permit,
            listing: self.metrics.listing.clone(),
        })
    }

    /// Queues the record of an object, given as JSON text (apiVersion and kind set: list
    /// items lack them).
    async fn put(
        &self,
        batch: &mut Batch<'_>,
        resource: &ApiResource,
        obj: &str,
    ) -> StoreResult<()> {
        let Some(record) = Record::from_json(
            &self.cluster,
            &self.spec.gvr,
            (&resource.api_version, &resource.kind),
            obj,
            self.spec.metadata_only,
        ) else {
            tracing::warn!(cluster = %self.cluster, "object not indexed: not a JSON object with a name");
            return Ok(());
        };
        let key = self.key(record.namespace.clone(), record.name.clone());
        batch.set(key, Some(record));
        self.flush_if_full(batch).await
    }

    async fn flush_if_full(&self, batch: &mut Batch<'_>) -> StoreResult<()> {
        if batch.len() >= BATCH {
            self.flush(batch).await
        } else {
            Ok(())
        }
    }

    /// Writes the batch: upserts, then deletes, each retried while unavailable.
    async fn flush(&self, batch: &mut Batch<'_>) -> StoreResult<()> {
        let (upserts, deletes) = batch.take();
        // one copy of the batch; each try (retries while the store is unavailable) gets
        // a clone of the Arc
        let (upserts, deletes): (Arc<[Record]>, Arc<[Key]>) = (upserts.into(), deletes.into());
        if !upserts.is_empty() {
            let w = self.retry(|| self.store.upsert(upserts.clone())).await?;
            self.metrics.written.inc_by(w.written);
            self.metrics.unchanged.inc_by(w.unchanged);
        }
        if !deletes.is_empty() {
            let n = self.retry(|| self.store.delete(deletes.clone())).await?;
            self.metrics.deleted.inc_by(n);
        }
        Ok(())
    }

    /// Deletes the stored objects a complete list did not return (K.71), by batches
    /// whose keys are built one batch at a time.
    /// A synchro stopped meanwhile stops between two batches (its stop is awaited
    /// before another synchro of the type starts, or its member is purged).
    async fn delete_unlisted(&self, gone: Versions) -> StoreResult<()> {
        for chunk in key_chunks(&self.cluster, &self.spec.gvr, &gone) {
            if self.stop.is_cancelled() {
                return Err(StoreError::Unavailable("the indexer is stopping".into()));
            }
            let n = self.retry(|| self.store.delete(chunk.as_slice())).await?;
            self.metrics.deleted.inc_by(n);
        }
        Ok(())
    }

    /// Runs a store call, retrying it with backoff while the store is unavailable.
    async fn retry<T, F, Fut>(&self, mut call: F) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        let mut wait = WRITE_BACKOFF;
        for _ in 1..WRITE_TRIES {
            match call().await {
                Err(StoreError::Unavailable(e)) if !self.stop.is_cancelled() => {
                    tracing::debug!(cluster = %self.cluster, error = %e, "store call failed; retrying in {wait:?}");
                }
                done => return done,
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => {}
            }
            wait *= 2;
        }
        call().await
    }

    /// The end of a session after a store call failed for good.
    fn failed(&self, e: StoreError) -> End {
        if self.stop.is_cancelled() {
            return End::Stopped;
        }
        match e {
            StoreError::Unavailable(why) => {
                self.health.down(&why);
                End::StoreDown
            }
            other => {
                tracing::error!(cluster = %self.cluster, resource = %gvr_text(&self.spec.gvr), error = %other, "store refused the indexer's write; relisting");
                End::Restart
            }
        }
    }

    fn key(&self, namespace: String, name: String) -> Key {
        Key {
            cluster: self.cluster.clone(),
            gvr: self.spec.gvr.clone(),
            namespace,
            name,
        }
    }
}

/// The keys of `versions` (stored objects of `cluster`'s type `gvr`) by chunks of at
/// most [`BATCH`], each built when it is reached: deleting a million stored objects
/// holds the keys of one chunk, not a million keys next to their versions.
pub(crate) fn key_chunks<'a>(
    cluster: &'a str,
    gvr: &'a Gvr,
    versions: &'a Versions,
) -> impl Iterator<Item = Vec<Key>> + Send + 'a {
    let mut keys = versions.iter().map(move |(namespace, name, _)| Key {
        cluster: cluster.to_string(),
        gvr: gvr.clone(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    });
    std::iter::from_fn(move || {
        let chunk: Vec<Key> = keys.by_ref().take(BATCH).collect();
        (!chunk.is_empty()).then_some(chunk)
    })
}

/// Why a type cannot be watched: what to say, and whether discovery answered that the
/// member does not serve it (false when discovery itself failed).
pub(crate) struct Unresolved {
    pub(crate) why: String,
    pub(crate) served: bool,
}

/// Resolves a type through the member's discovery: its resource and whether it is
/// namespaced; an error says why it cannot be watched.
pub(crate) async fn resolve(
    client: &kube::Client,
    gvr: &Gvr,
) -> Result<(ApiResource, bool), Unresolved> {
    let gv = GroupVersion::gv(&gvr.group, &gvr.version);
    let not_served = |why: String| Unresolved { why, served: false };
    let group = match tokio::time::timeout(CALL_TIMEOUT, kube::discovery::pinned_group(client, &gv))
        .await
    {
        Ok(Ok(g)) => g,
        Ok(Err(kube::Error::Api(e))) if e.code == 404 => {
            return Err(not_served(format!(
                "discovery of {}: not served ({})",
                gv.api_version(),
                e.message
            )));
        }
        Ok(Err(e)) => {
            return Err(Unresolved {
                why: format!("discovery of {}: {e}", gv.api_version()),
                served: true,
            });
        }
        Err(_) => {
            return Err(Unresolved {
                why: format!(
                    "discovery of {} timed out after {CALL_TIMEOUT:?}",
                    gv.api_version()
                ),
                served: true,
            });
        }
    };
    let found = group
        .versioned_resources(&gvr.version)
        .into_iter()
        .find(|(r, _)| r.plural == gvr.resource);
    match found {
        Some((r, caps))
            if caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH) =>
        {
            Ok((r, caps.scope == Scope::Namespaced))
        }
        Some(_) => Err(not_served(format!(
            "{} cannot be listed and watched",
            gvr_text(gvr)
        ))),
        None => Err(not_served(format!(
            "{} serves no resource {:?}",
            gv.api_version(),
            gvr.resource
        ))),
    }
}

/// What a session holds: at most one batch and, during a list, the stored versions of
/// one member's type not seen yet.
struct Session<'a> {
    running: Running<'a>,
    batch: Batch<'a>,
    listing: Option<Versions>,
    /// Held from a list's start to its end (or its failure).
    permit: Option<ListPermit>,
    /// The last list is complete in the store (the watch goes on from it).
    listed: bool,
    /// The member resourceVersion of the latest event taken.
    position: Option<String>,
    /// The position moved since it was last published.
    unpublished: bool,
}

impl Session<'_> {
    /// The member's type is at `rv`: a list read there, or a watch event or bookmark
    /// (they come in resourceVersion order).
    fn moved_to(&mut self, rv: Option<&str>) {
        self.position = rv.map(str::to_string);
        self.unpublished = true;
    }

    /// A list call failed: the stream lists again from the start, and its
    /// [`Step::Init`] takes a permit and loads the stored versions again. The permit goes
    /// back while the stream waits out its backoff, so a member that keeps failing does
    /// not hold one of the [`LISTS`] for good; only when the stream lists again `at_once`
    /// (a first 410 Gone in a row) is it kept. The stored versions go in every case: the
    /// next list loads them afresh, and the two are never held together.
    /// Nothing is published until a list completes: a position taken before it (a
    /// watch event still in the batch when a 410 forced the relist) is forgotten.
    fn list_failed(&mut self, at_once: bool) {
        self.listing = None;
        self.relisting();
        if !at_once {
            self.permit = None;
        }
    }

    /// A (re)list starts or starts again: the store is complete at no known position
    /// until it ends, so a position taken before it is not published.
    fn relisting(&mut self) {
        self.listed = false;
        self.position = None;
        self.unpublished = false;
    }
}

/// The right to compare a list with the store (one of [`LISTS`]).
struct ListPermit {
    _permit: OwnedSemaphorePermit,
    listing: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for ListPermit {
    fn drop(&mut self) {
        self.listing.dec();
    }
}

/// Changes not written yet, the last one per object; counted in the backlog gauge.
struct Batch<'a> {
    changes: BTreeMap<Key, Option<Record>>,
    since: Option<Instant>,
    metrics: &'a IndexerMetrics,
}

impl<'a> Batch<'a> {
    fn new(metrics: &'a IndexerMetrics) -> Batch<'a> {
        Batch {
            changes: BTreeMap::new(),
            since: None,
            metrics,
        }
    }

    fn len(&self) -> usize {
        self.changes.len()
    }

    /// When the batch must be written, if it holds anything.
    fn deadline(&self) -> Option<Instant> {
        self.since.map(|t| t + LINGER)
    }

    /// Queues an upsert (`Some`) or a delete (`None`), replacing the object's earlier
    /// change.
    fn set(&mut self, key: Key, change: Option<Record>) {
        if self.changes.insert(key, change).is_none() {
            self.metrics.backlog.inc();
        }
        self.since.get_or_insert_with(Instant::now);
    }

    /// Empties the batch: the records to upsert and the keys to delete.
    fn take(&mut self) -> (Vec<Record>, Vec<Key>) {
        self.since = None;
        let changes = std::mem::take(&mut self.changes);
        self.metrics.backlog.dec_by(changes.len() as i64);
        let mut upserts = Vec::new();
        let mut deletes = Vec::new();
        for (key, change) in changes {
            match change {
                Some(r) => upserts.push(r),
                None => deletes.push(key),
            }
        }
        (upserts, deletes)
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.metrics.backlog.dec_by(self.changes.len() as i64);
    }
}

/// Counts a streaming session in the synchros gauge while it lives, and in the synced
/// gauge while its last list is complete.
struct Running<'a> {
    metrics: &'a IndexerMetrics,
    synced: bool,
}

impl<'a> Running<'a> {
    fn start(metrics: &'a IndexerMetrics) -> Running<'a> {
        metrics.synchros.inc();
        Running {
            metrics,
            synced: false,
        }
    }

    /// Records whether the store holds the member's current list.
    fn synced(&mut self, synced: bool) {
        if synced != self.synced {
            self.metrics.synced.inc_by(if synced { 1 } else { -1 });
            self.synced = synced;
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.synced(false);
        self.metrics.synchros.dec();
    }
}

#[cfg(test)]
mod tests;
