//! Cross-cluster watch positions (K.73).
//!
//! Every running synchro (one member's type) publishes here how to reach that type on
//! the member (client, resource, scope, whole or names only) and, once its objects are
//! in the store, the member resourceVersion the store holds them at. A list from the
//! store carries, as its resourceVersion, a [`Cursor`]: those resourceVersions of every
//! member, encoded. A watch from a cursor opens one watch per member, each from that
//! member's own resourceVersion, so resuming a watch resumes every cluster where it was.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kube::api::ApiResource;
use parking_lot::RwLock;

use crate::store::Gvr;

/// How to watch one member's type, and where the store is in it.
#[derive(Clone)]
pub struct Indexed {
    /// A client of the member.
    pub client: kube::Client,
    /// The type as the member serves it.
    pub resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Stored as metadata only: watch events are cut the same way.
    pub metadata_only: bool,
    /// The member resourceVersion the store holds this type at; None until the first
    /// list is stored.
    pub resource_version: Option<String>,
    /// Which synchro published this (a restarted one replaces it).
    id: u64,
}

/// The indexed types of every member (shared by the indexer and the API).
#[derive(Clone, Default)]
pub struct Positions(Arc<RwLock<Inner>>);

#[derive(Default)]
struct Inner {
    indexed: BTreeMap<(String, Gvr), Indexed>,
    /// Every registered member: the store may hold objects of each.
    registered: BTreeSet<String>,
}

/// A cursor's part for a member whose objects the store may hold at no known position
/// (its type not yet listed, or the member not Ready): a watch from it is 410.
pub const UNKNOWN: &str = "?";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A published type; withdrawn when dropped (its synchro stopped).
pub struct Publication {
    positions: Positions,
    key: (String, Gvr),
    id: u64,
}

impl Positions {
    /// Publishes a member's type (not yet stored: no resourceVersion).
    pub fn publish(
        &self,
        cluster: &str,
        gvr: &Gvr,
        client: kube::Client,
        resource: ApiResource,
        namespaced: bool,
        metadata_only: bool,
    ) -> Publication {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let key = (cluster.to_string(), gvr.clone());
        self.0.write().indexed.insert(
            key.clone(),
            Indexed {
                client,
                resource,
                namespaced,
                metadata_only,
                resource_version: None,
                id,
            },
        );
        Publication {
            positions: self.clone(),
            key,
            id,
        }
    }

    /// The registered members (the indexer's fleet): the store may hold their objects.
    pub fn set_registered(&self, registered: &BTreeSet<String>) {
        self.0.write().registered.clone_from(registered);
    }

    /// The indexed members of a type, by cluster.
    pub fn of(&self, gvr: &Gvr) -> BTreeMap<String, Indexed> {
        self.0
            .read()
            .indexed
            .iter()
            .filter(|((_, g), _)| g == gvr)
            .map(|((c, _), i)| (c.clone(), i.clone()))
            .collect()
    }

    /// How to watch a member's type, if it is indexed.
    pub fn get(&self, cluster: &str, gvr: &Gvr) -> Option<Indexed> {
        self.0
            .read()
            .indexed
            .get(&(cluster.to_string(), gvr.clone()))
            .cloned()
    }

    /// Whether a member's type is indexed.
    pub fn has(&self, cluster: &str, gvr: &Gvr) -> bool {
        self.0
            .read()
            .indexed
            .contains_key(&(cluster.to_string(), gvr.clone()))
    }

    /// The cursor of the store's copy of a type: each member's stored resourceVersion,
    /// [`UNKNOWN`] for a registered member whose position is not known.
    pub fn cursor(&self, gvr: &Gvr) -> Cursor {
        let inner = self.0.read();
        let mut c: BTreeMap<String, String> = inner
            .registered
            .iter()
            .map(|m| (m.clone(), UNKNOWN.to_string()))
            .collect();
        for ((cluster, g), i) in &inner.indexed {
            if g == gvr {
                let at = i.resource_version.as_deref().unwrap_or(UNKNOWN);
                c.insert(cluster.clone(), at.to_string());
            }
        }
        Cursor(c)
    }
}

impl Publication {
    /// The store now holds the type at `rv` (everything up to it is written); None:
    /// at no known position (a relist is under way).
    pub fn stored_at(&self, rv: Option<&str>) {
        if let Some(i) = self.positions.0.write().indexed.get_mut(&self.key)
            && i.id == self.id
        {
            i.resource_version = rv.map(str::to_string);
        }
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        let map = &mut self.positions.0.write().indexed;
        if map.get(&self.key).is_some_and(|i| i.id == self.id) {
            map.remove(&self.key);
        }
    }
}

/// Where a member watch resumes after an event at `rv`, having been at `current`: the
/// later of the two. Kubernetes resourceVersions are opaque, but every kube-apiserver's
/// (and kubesim's) are etcd revisions, decimal numbers, and the events of a watch
/// started without one (the member's current objects, as ADDED) come in no order, so
/// the position never moves back; of anything else nothing is known and `rv` is taken.
pub fn advance(current: &str, rv: &str) -> String {
    match (current.parse::<u64>(), rv.parse::<u64>()) {
        (Ok(c), Ok(r)) if c > r => current.to_string(),
        _ => rv.to_string(),
    }
}

/// A cross-cluster resourceVersion: each member's own, by cluster. Opaque to clients
/// (`c1.` and base64url of JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor(pub BTreeMap<String, String>);

const CURSOR_PREFIX: &str = "c1.";

impl Cursor {
    /// The text a client gets.
    pub fn encode(&self) -> String {
        format!(
            "{CURSOR_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&self.0).unwrap_or_default())
        )
    }

    /// A client's resourceVersion: `""` and `"0"` are the empty cursor (every member
    /// from its current state, as kube-apiserver's "any" version); anything else must
    /// be a cursor this server made.
    pub fn decode(text: &str) -> Result<Cursor, String> {
        if text.is_empty() || text == "0" {
            return Ok(Cursor::default());
        }
        let bad = || {
            format!(
                "resourceVersion \"{text}\" is not one of this search server's: watch from the metadata.resourceVersion of a list or of a watch event it sent"
            )
        };
        let body = text.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
        let bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| bad())?;
        serde_json::from_slice(&bytes)
            .map(Cursor)
            .map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_position_never_moves_back() {
        let cases = [
            ("", "5", "5"),
            ("5", "12", "12"),
            ("12", "5", "12"),
            ("7", "7", "7"),
            ("x", "7", "7"),
            ("7", "y", "y"),
        ];
        for (current, rv, want) in cases {
            assert_eq!(advance(current, rv), want, "{current} {rv}");
        }
    }

    #[test]
    fn cursors_round_trip_and_foreign_versions_are_refused() {
        let c = Cursor(BTreeMap::from([
            ("east".to_string(), "120".to_string()),
            ("west".to_string(), "7".to_string()),
        ]));
        let text = c.encode();
        assert!(text.starts_with("c1."));
        assert_eq!(Cursor::decode(&text), Ok(c));
        assert_eq!(Cursor::decode(""), Ok(Cursor::default()));
        assert_eq!(Cursor::decode("0"), Ok(Cursor::default()));
        for bad in ["123", "c1.", "c1.!!", "c1.bm90IGpzb24"] {
            let e = Cursor::decode(bad).unwrap_err();
            assert!(e.contains("not one of this search server's"), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn a_cursor_names_every_registered_member_and_only_known_positions() {
        let p = Positions::default();
        let gvr = Gvr {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
        };
        let other = Gvr {
            resource: "replicasets".into(),
            ..gvr.clone()
        };
        p.set_registered(&BTreeSet::from([
            "east".into(),
            "west".into(),
            "north".into(),
        ]));
        let client = || {
            kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap()))
                .unwrap()
        };
        let ar = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let east = p.publish("east", &gvr, client(), ar.clone(), true, false);
        let west = p.publish("west", &gvr, client(), ar.clone(), true, false);
        let _east_rs = p.publish("east", &other, client(), ar.clone(), true, false);
        east.stored_at(Some("12"));
        let c = p.cursor(&gvr).0;
        // west is listing, north is not Ready: the store may hold their objects at no
        // known position
        assert_eq!(c["east"], "12");
        assert_eq!(c["west"], UNKNOWN);
        assert_eq!(c["north"], UNKNOWN);
        west.stored_at(Some("30"));
        assert_eq!(p.cursor(&gvr).0["west"], "30");
        // a relist makes the position unknown again
        west.stored_at(None);
        assert_eq!(p.cursor(&gvr).0["west"], UNKNOWN);
        // a synchro that stops withdraws its type; a restarted one is not withdrawn by
        // the old one's drop
        let again = p.publish("east", &gvr, client(), ar, true, false);
        drop(east);
        assert!(p.of(&gvr).contains_key("east"));
        drop(again);
        assert!(!p.of(&gvr).contains_key("east"));
        assert_eq!(p.of(&other).len(), 1);
    }

    proptest! {
        #[test]
        fn any_cursor_round_trips(m in prop::collection::btree_map("[a-z0-9-]{1,12}", "[0-9]{1,12}", 0..8)) {
            let c = Cursor(m);
            prop_assert_eq!(Cursor::decode(&c.encode()), Ok(c));
        }

        #[test]
        fn decoding_never_panics(s in ".{0,80}") {
            let _ = Cursor::decode(&s);
        }
    }
}
