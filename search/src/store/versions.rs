//! The stored keys of one cluster and type with their resourceVersions, as a relist
//! compares them with what the member lists (K.71).
//!
//! A relist of a 100k-object type holds this for the whole list, and the indexer runs
//! [`LISTS`](crate::indexer) of them at once: it is one text buffer and one array of
//! offsets, not three small strings and a tree node per object (a third of the bytes,
//! two allocations instead of 300k, which the allocator hands back when it is dropped).

use std::ops::Range;

/// Where one entry's parts lie in the buffer.
#[derive(Clone, Copy, Debug)]
struct Span {
    namespace: usize,
    name: usize,
    version: usize,
    end: usize,
}

/// Keys (namespace, name) and resourceVersions, in key order; looked up and taken by
/// key. Built by [`Builder`].
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
    pub(crate) fn push(&mut self, namespace: &str, name: &str, version: &str) {
        let start = self.text.len();
        self.text.push_str(namespace);
        self.text.push_str(name);
        self.text.push_str(version);
        self.spans.push(Span {
            namespace: start,
            name: start + namespace.len(),
            version: start + namespace.len() + name.len(),
            end: self.text.len(),
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
        let i = self.find(namespace, name)?;
        self.taken[i] = true;
        self.left -= 1;
        Some(self.version(i))
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
        for (ns, name, rv) in [
            ("b", "web", "3"),
            ("a", "web", "1"),
            ("a", "db", "2"),
            // one key twice: the last is kept
            ("b", "web", "4"),
            // the parts' boundaries matter, not their concatenation
            ("", "aweb", "5"),
        ] {
            b.push(ns, name, rv);
        }
        let mut v = b.finish();
        assert_eq!(v.get("b", "web"), Some("4"));
        assert_eq!(v.len(), 4);
        assert_eq!(v.take("a", "web"), Some("1"));
        assert_eq!(v.take("a", "web"), None);
        assert_eq!(v.take("a", "we"), None);
        assert_eq!(v.get("a", "web"), None);
        assert_eq!(v.len(), 3);
        assert_eq!(
            v.iter().collect::<Vec<_>>(),
            [("", "aweb", "5"), ("a", "db", "2"), ("b", "web", "4")]
        );
        assert!(!v.is_empty());
        for (ns, name) in [("", "aweb"), ("a", "db"), ("b", "web")] {
            assert!(v.take(ns, name).is_some());
        }
        assert!(v.is_empty());
        assert_eq!(v.iter().count(), 0);
    }

    proptest! {
        /// Behaves as the map it replaces: the last version of each key, taken once.
        #[test]
        fn behaves_as_a_map(
            entries in prop::collection::vec(("[ab]{0,2}", "[ab]{0,3}", "[0-9]{1,2}"), 0..40),
            takes in prop::collection::vec(("[ab]{0,2}", "[ab]{0,3}"), 0..20),
        ) {
            let mut b = Builder::default();
            let mut map = BTreeMap::new();
            for (ns, name, rv) in &entries {
                b.push(ns, name, rv);
                map.insert((ns.clone(), name.clone()), rv.clone());
            }
            let mut v = b.finish();
            prop_assert_eq!(v.len(), map.len());
            for (ns, name) in &takes {
                let want = map.remove(&(ns.clone(), name.clone()));
                prop_assert_eq!(v.take(ns, name).map(str::to_string), want);
            }
            prop_assert_eq!(v.len(), map.len());
            let left: Vec<_> = v
                .iter()
                .map(|(a, b, c)| ((a.to_string(), b.to_string()), c.to_string()))
                .collect();
            prop_assert_eq!(left, map.into_iter().collect::<Vec<_>>());
        }
    }
}
