//! Watches ServiceImports and MCS EndpointSlices, keeps their DNS-relevant parts, and
//! publishes a freshly built [`Zone`] after each burst of changes (debounced).
//!
//! The zone is only marked ready once both watches have listed everything; until
//! then queries in the zone get SERVFAIL.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use causeway_crds::mcs::v1beta1::{ServiceImport, ServiceImportType};
use causeway_crds::well_known::labels::{SERVICE_NAME, SOURCE_CLUSTER};
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::index::{
    EndpointInput, ImportInput, PortInput, ServiceKind, SliceInput, Zone, ZoneConfig, ZoneState,
};
use crate::server::ServerState;

type Key = (String, String);

/// The DNS-relevant part of a ServiceImport (`None` without a namespace).
pub fn import_input(si: &ServiceImport) -> Option<ImportInput> {
    let namespace = si.namespace()?;
    let name = si.name_any();
    let ips = si
        .spec
        .ips
        .iter()
        .filter_map(|ip| match ip.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                tracing::warn!(%namespace, %name, ip = %ip, "ServiceImport spec.ips holds a value that is not an IP; ignored");
                None
            }
        })
        .collect();
    let ports = si
        .spec
        .ports
        .iter()
        .filter_map(|p| {
            Some(PortInput {
                name: p.name.clone(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: u16::try_from(p.port).ok().filter(|p| *p != 0)?,
            })
        })
        .collect();
    let kind = match si.spec.type_ {
        ServiceImportType::ClusterSetIP => ServiceKind::ClusterSetIp,
        ServiceImportType::Headless => ServiceKind::Headless,
    };
    Some(ImportInput {
        namespace,
        name,
        kind,
        ips,
        ports,
    })
}

/// The DNS-relevant part of an MCS EndpointSlice (`None` without the MCS labels).
pub fn slice_input(es: &EndpointSlice) -> Option<SliceInput> {
    let namespace = es.namespace()?;
    let labels = es.labels();
    let service = labels.get(SERVICE_NAME)?.clone();
    let cluster = labels.get(SOURCE_CLUSTER)?.clone();
    let endpoints = es
        .endpoints
        .iter()
        .map(|ep| EndpointInput {
            addresses: ep.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
            hostname: ep.hostname.clone(),
            // The EndpointSlice API: an unset `ready` means ready.
            ready: ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
        })
        .collect();
    let ports = es
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(PortInput {
                name: p.name.clone(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: u16::try_from(p.port?).ok().filter(|p| *p != 0)?,
            })
        })
        .collect();
    Some(SliceInput {
        namespace,
        service,
        cluster,
        endpoints,
        ports,
    })
}

/// The service an object contributes to.
trait ServiceKey {
    fn service_key(&self) -> Key;
}

impl ServiceKey for ImportInput {
    fn service_key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }
}

impl ServiceKey for SliceInput {
    fn service_key(&self) -> Key {
        (self.namespace.clone(), self.service.clone())
    }
}

/// Which services a watch event touched.
enum Touched {
    Services(Vec<Key>),
    All,
}

/// A tiny reflector over converted objects, with the list/relist buffer.
struct Mirror<T> {
    items: HashMap<Key, Arc<T>>,
    relist: Option<HashMap<Key, Arc<T>>>,
    listed: bool,
}

impl<T: ServiceKey> Mirror<T> {
    fn new() -> Self {
        Mirror {
            items: HashMap::new(),
            relist: None,
            listed: false,
        }
    }

    /// Applies one watch event; returns the services whose answers may change.
    fn apply<K: kube::Resource>(
        &mut self,
        ev: Event<K>,
        convert: impl Fn(&K) -> Option<T>,
    ) -> Touched {
        let key = |o: &K| {
            (
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default(),
            )
        };
        let mut touched = Vec::new();
        match ev {
            Event::Apply(o) => {
                let old = match convert(&o) {
                    Some(t) => {
                        touched.push(t.service_key());
                        self.items.insert(key(&o), Arc::new(t))
                    }
                    None => self.items.remove(&key(&o)),
                };
                touched.extend(old.map(|t| t.service_key()));
            }
            Event::Delete(o) => {
                touched.extend(self.items.remove(&key(&o)).map(|t| t.service_key()))
            }
            Event::Init => self.relist = Some(HashMap::new()),
            Event::InitApply(o) => {
                if let (Some(buf), Some(t)) = (self.relist.as_mut(), convert(&o)) {
                    buf.insert(key(&o), Arc::new(t));
                }
            }
            Event::InitDone => {
                if let Some(buf) = self.relist.take() {
                    self.items = buf;
                }
                self.listed = true;
                return Touched::All;
            }
        }
        Touched::Services(touched)
    }
}

enum Change {
    Import(Result<Event<ServiceImport>, watcher::Error>),
    Slice(Result<Event<EndpointSlice>, watcher::Error>),
}

/// One service's inputs for a rebuild.
type Work = Vec<(Key, Option<Arc<ImportInput>>, Vec<Arc<SliceInput>>)>;

/// Watches and rebuilds until the task is aborted. Only the services touched since
/// the last swap are rebuilt (all of them after a (re)list).
pub async fn run(
    client: kube::Client,
    shared: Arc<ServerState>,
    cfg: ZoneConfig,
    debounce: Duration,
) {
    let imports = watcher::watcher(
        Api::<ServiceImport>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(Change::Import);
    let slices = watcher::watcher(
        Api::<EndpointSlice>::all(client),
        watcher::Config::default().labels(SERVICE_NAME),
    )
    .default_backoff()
    .map(Change::Slice);
    let mut changes = std::pin::pin!(futures::stream::select(imports, slices));
    let mut imps: Mirror<ImportInput> = Mirror::new();
    let mut sls: Mirror<SliceInput> = Mirror::new();
    let mut state = match ZoneState::new(cfg.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "invalid zone; not watching");
            return;
        }
    };
    let mut dirty: HashSet<Key> = HashSet::new();
    let mut all_dirty = false;
    let mut due: Option<tokio::time::Instant> = None;
    let mut serial = 0u32;
    loop {
        let wait = async {
            match due {
                Some(d) if imps.listed && sls.listed => tokio::time::sleep_until(d).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            change = changes.next() => {
                let touched = match change {
                    None => return,
                    Some(Change::Import(Ok(ev))) => imps.apply(ev, import_input),
                    Some(Change::Slice(Ok(ev))) => sls.apply(ev, slice_input),
                    Some(Change::Import(Err(e))) => { tracing::warn!(error = %e, "ServiceImport watch failed; retrying (are the MCS CRDs installed?)"); Touched::Services(vec![]) }
                    Some(Change::Slice(Err(e))) => { tracing::warn!(error = %e, "EndpointSlice watch failed; retrying"); Touched::Services(vec![]) }
                };
                let changed = match touched {
                    Touched::All => { all_dirty = true; true }
                    Touched::Services(keys) => { let any = !keys.is_empty(); dirty.extend(keys); any }
                };
                if changed && due.is_none() {
                    due = Some(tokio::time::Instant::now() + debounce);
                }
            }
            () = wait => {
                due = None;
                serial = next_serial(serial);
                let full = std::mem::take(&mut all_dirty);
                let keys: Vec<Key> = if full { imps.items.keys().cloned().collect() } else { dirty.drain().collect() };
                dirty.clear();
                let wanted: HashSet<&Key> = keys.iter().collect();
                let mut by_service: HashMap<Key, Vec<Arc<SliceInput>>> = HashMap::new();
                for s in sls.items.values() {
                    let k = s.service_key();
                    if wanted.contains(&k) {
                        by_service.entry(k).or_default().push(s.clone());
                    }
                }
                let work: Work = keys.iter().map(|k| (k.clone(), imps.items.get(k).cloned(), by_service.remove(k).unwrap_or_default())).collect();
                let Some(mut st) = state.take() else { return };
                let cfg = cfg.clone();
                let started = Instant::now();
                let built = tokio::task::spawn_blocking(move || {
                    if full && let Ok(fresh) = ZoneState::new(cfg) {
                        st = fresh;
                    }
                    for (k, imp, slices) in &work {
                        let slices: Vec<&SliceInput> = slices.iter().map(|a| &**a).collect();
                        st.set_service(&k.0, &k.1, imp.as_deref(), &slices);
                    }
                    let zone = st.snapshot(serial);
                    (st, zone)
                }).await;
                match built {
                    Ok((st, Ok(zone))) => {
                        state = Some(st);
                        publish(&shared, zone, started.elapsed());
                    }
                    Ok((st, Err(e))) => {
                        state = Some(st);
                        tracing::error!(error = %e, "building the zone failed");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the zone build task failed; watching stops");
                        return;
                    }
                }
            }
        }
    }
}

fn publish(shared: &ServerState, zone: Zone, took: Duration) {
    let m = &shared.metrics;
    m.build_seconds.observe(took.as_secs_f64());
    m.records.set(zone.records() as i64);
    m.names.set(zone.names() as i64);
    m.swaps.inc();
    tracing::debug!(
        serial = zone.serial(),
        records = zone.records(),
        took_ms = took.as_millis() as u64,
        "zone index swapped"
    );
    shared.zone.store(Arc::new(zone));
}

/// SOA serial: seconds since the epoch, always increasing across swaps.
fn next_serial(prev: u32) -> u32 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0);
    now.max(prev.wrapping_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_slices_ready_unset_is_ready() {
        let es: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "ns", "labels": {SERVICE_NAME: "web", SOURCE_CLUSTER: "c1"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": true}, "hostname": "web-0"},
                {"addresses": ["not-an-ip"]}
            ],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 70000}]
        }))
        .unwrap();
        let s = slice_input(&es).unwrap();
        assert_eq!(s.cluster, "c1");
        assert_eq!(s.service, "web");
        let ready: Vec<bool> = s.endpoints.iter().map(|e| e.ready).collect();
        assert_eq!(ready, [true, false, true, true]);
        assert!(s.endpoints[3].addresses.is_empty());
        assert_eq!(s.ports.len(), 1, "an out-of-range port is ignored");
    }

    #[test]
    fn slices_without_mcs_labels_are_ignored() {
        let es: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "ns", "labels": {SERVICE_NAME: "web"}},
            "addressType": "IPv4", "endpoints": []
        }))
        .unwrap();
        assert!(slice_input(&es).is_none());
    }

    #[test]
    fn serial_increases() {
        let a = next_serial(0);
        assert!(next_serial(a) > a);
        assert_eq!(next_serial(u32::MAX - 1), u32::MAX);
    }
}
