//! The stored keys of one cluster and type with their resourceVersions and uids, as a
//! relist compares them with what the member lists (K.71).
//!
//! An object is unchanged only if both are the stored ones: a member re-created under
//! its name counts resourceVersions from 1 again, so an object of the new member may
//! come at the resourceVersion stored for the old member's object of its name (a
//! namespace, the `kubernetes` Service, a `kube-root-ca.crt` ConfigMap); its uid tells
//! them apart. The uid is kept as a 64-bit hash ([`uid_hash`]): 8 bytes per key, not its
//! 36 (a collision of the old and new object's hashes at one key and version is a
//! 2^-64 chance).
//!
//! A relist of a 100k-object type holds this for the whole list, and the indexer runs
//! [`LISTS`](crate::indexer) of them at once: it is one text buffer and one array of
//! offsets, not three small strings and a tree node per object (a third of the bytes,
//! two allocations instead of 300k, which the allocator hands back when it is dropped).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;

/// The hash of a uid that [`Versions`] keeps (the same for one uid in one process).
pub fn uid_hash(uid: &str) -> u64 {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
}

/// Where one entry's parts lie in the buffer.
#[derive(Clone, Copy, Debug)]
struct Span {
    namespace: usize,
    name: usize,
    version: usize,
    end: usize,
    /// [`uid_hash`] of the uid.
    uid: u64,
}

/// Keys (namespace, name) with resourceVersions and uids (hashed), in key order; looked
/// up and taken by key. Built by [`Builder`].
#[derive(Clone, Debug, Default)]
pub struct Versions {
    text: String,
    spans: Vec<Span>,
    taken: Vec<bool>,
    left: usize,
}

/// Collects entries in any order; [`Builder::finish`] orders them.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    text: String,
    spans: Vec<Span>,
}

impl Builder {
    /// Adds an entry; of several with one key, the last is kept.
    pub(crate) fn push(&mut self, namespace: &str, name: &str, version: &str, uid: &str) {
        let start = self.text.len();
        self.text.push_str(namespace);
        self.text.push_str(name);
        self.text.push_str(version);
        self.spans.push(Span {
            namespace: start,
            name: start + namespace.len(),
            version: start + namespace.len() + name.len(),
            end: self.text.len(),
            uid: uid_hash(uid),
        });
    }

    /// The entries in key order (the store's rows come in its own order); of entries
    /// with one key, the last pushed.
    pub(crate) fn finish(self) -> Versions {
        let Builder { text, mut spans } = self;
        let key = |s: &Span| key(&text, s);
        // stable: entries with one key keep their push order, and the last is kept
        if !spans.is_sorted_by(|a, b| key(a) < key(b)) {
            spans.sort_by(|a, b| key(a).cmp(&key(b)));
            let mut kept: Vec<Span> = Vec::with_capacity(spans.len());
            for s in spans {
                match kept.last_mut() {
                    Some(last) if key(last) == key(&s) => *last = s,
                    _ => kept.push(s),
                }
            }
            spans = kept;
        }
        let n = spans.len();
        Versions {
            text,
            spans,
            taken: vec![false; n],
            left: n,
        }
    }
}

impl Versions {
    /// Entries not taken.
    pub fn len(&self) -> usize {
        self.left
    }

    /// Whether every entry is taken (or there were none).
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The resourceVersion stored for a key, unless taken.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&str> {
        self.find(namespace, name).map(|i| self.version(i))
    }

    /// Takes an entry out: its resourceVersion, or None if absent or already taken.
    pub fn take(&mut self, namespace: &str, name: &str) -> Option<&str> {
        self.take_stored(namespace, name).map(|s| s.version)
    }

    /// Takes an entry out: what is stored for the key, or None if absent or already
    /// taken.
    pub fn take_stored(&mut self, namespace: &str, name: &str) -> Option<Stored<'_>> {
        let i = self.find(namespace, name)?;
        self.taken[i] = true;
        self.left -= 1;
        Some(Stored {
            version: self.version(i),
            uid: self.spans[i].uid,
        })
    }

    /// The entries not taken, (namespace, name, resourceVersion), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        (0..self.spans.len()).filter(|i| !self.taken[*i]).map(|i| {
            let (namespace, name) = key(&self.text, &self.spans[i]);
            (namespace, name, self.version(i))
        })
    }

    fn find(&self, namespace: &str, name: &str) -> Option<usize> {
        let i = self
            .spans
            .binary_search_by(|s| key(&self.text, s).cmp(&(namespace, name)))
            .ok()?;
        (!self.taken[i]).then_some(i)
    }

    fn version(&self, i: usize) -> &str {
        let s = &self.spans[i];
        part(&self.text, s.version..s.end)
    }
}

/// What is stored for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored<'a> {
    /// The stored version ([`crate::store::stored_version`]).
    pub version: &'a str,
    /// [`uid_hash`] of the stored uid.
    pub uid: u64,
}

impl Stored<'_> {
    /// Whether a listed object at stored version `version`, of uid `uid`, is this one
    /// as stored: the same object (uid) at the same version.
    pub fn is(&self, version: &str, uid: &str) -> bool {
        self.version == version && self.uid == uid_hash(uid)
    }
}

fn key<'a>(text: &'a str, s: &Span) -> (&'a str, &'a str) {
    (
        part(text, s.namespace..s.name),
        part(text, s.name..s.version),
    )
}

fn part(text: &str, r: Range<usize>) -> &str {
    // every span was cut at the boundaries of the strings pushed
    text.get(r).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn takes_each_key_once_and_leaves_the_rest_in_key_order() {
        let mut b = Builder::default();
        for (ns, name, rv, uid) in [
            ("b", "web", "3", "u-b-web"),
            ("a", "web", "1", "u-a-web"),
            ("a", "db", "2", "u-a-db"),
            // one key twice: the last is kept
            ("b", "web", "4", "u-b-web-2"),
            // the parts' boundaries matter, not their concatenation
            ("", "aweb", "5", ""),
        ] {
            b.push(ns, name, rv, uid);
        }
        let mut v = b.finish();
        assert_eq!(v.get("b", "web"), Some("4"));
        assert_eq!(v.len(), 4);
        let stored = v.take_stored("b", "web").unwrap();
        assert_eq!(stored.version, "4");
        // the same object only at the same version and with the same uid
        assert!(stored.is("4", "u-b-web-2"));
        assert!(!stored.is("4", "u-b-web"));
        assert!(!stored.is("3", "u-b-web-2"));
        assert_eq!(v.take_stored("b", "web"), None);
        assert!(v.take_stored("", "aweb").unwrap().is("5", ""));
        assert_eq!(v.len(), 2);
        assert_eq!(v.take("a", "web"), Some("1"));
        assert_eq!(v.take("a", "web"), None);
        assert_eq!(v.take("a", "we"), None);
        assert_eq!(v.get("a", "web"), None);
        assert_eq!(v.len(), 1);
        assert_eq!(v.iter().collect::<Vec<_>>(), [("a", "db", "2")]);
        assert!(!v.is_empty());
        assert!(v.take("a", "db").is_some());
        assert!(v.is_empty());
        assert_eq!(v.iter().count(), 0);
    }

    proptest! {
        /// Behaves as the map it replaces: the last version and uid of each key, taken
        /// once.
        #[test]
        fn behaves_as_a_map(
            entries in prop::collection::vec(("[ab]{0,2}", "[ab]{0,3}", "[0-9]{1,2}", "[uv]{0,2}"), 0..40),
            takes in prop::collection::vec(("[ab]{0,2}", "[ab]{0,3}"), 0..20),
        ) {
            let mut b = Builder::default();
            let mut map = BTreeMap::new();
            for (ns, name, rv, uid) in &entries {
                b.push(ns, name, rv, uid);
                map.insert((ns.clone(), name.clone()), (rv.clone(), uid.clone()));
            }
            let mut v = b.finish();
            prop_assert_eq!(v.len(), map.len());
            for (ns, name) in &takes {
                let want = map.remove(&(ns.clone(), name.clone()));
                let got = v.take_stored(ns, name);
                prop_assert_eq!(got.map(|s| s.version.to_string()), want.as_ref().map(|w| w.0.clone()));
                if let (Some(got), Some((rv, uid))) = (got, &want) {
                    prop_assert!(got.is(rv, uid));
                    let other = format!("{uid}x");
                    prop_assert!(!got.is(rv, &other));
                }
            }
            prop_assert_eq!(v.len(), map.len());
            let left: Vec<_> = v
                .iter()
                .map(|(a, b, c)| ((a.to_string(), b.to_string()), c.to_string()))
                .collect();
            let want: Vec<_> = map.into_iter().map(|(k, (rv, _))| (k, rv)).collect();
            prop_assert_eq!(left, want);
        }
    }
}
