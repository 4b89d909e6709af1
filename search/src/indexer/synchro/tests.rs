//! The synchro's pure parts: batches coalesce per object and count their backlog.

use std::collections::BTreeMap;

use super::*;

fn key(name: &str) -> Key {
    Key {
        cluster: "a".into(),
        gvr: Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        },
        namespace: "default".into(),
        name: name.into(),
    }
}

fn record(name: &str, rv: &str) -> Record {
    let k = key(name);
    Record {
        cluster: k.cluster,
        gvr: k.gvr,
        namespace: k.namespace,
        name: k.name,
        uid: format!("uid-{name}"),
        resource_version: rv.into(),
        owner_uid: None,
        created_at: None,
        labels: BTreeMap::new(),
        object: "{}".into(),
    }
}

/// Changes in order: `(name, Some(rv))` upserts, `(name, None)` deletes.
type Changes<'a> = &'a [(&'a str, Option<&'a str>)];
/// What a batch writes: the upserted `(name, rv)`, the deleted names.
type Writes<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);

#[test]
fn a_batch_keeps_the_last_change_of_each_object() {
    // (changes, upserted (name, rv), deleted names)
    let cases: [(Changes, Writes); 5] = [
        (&[("a", Some("1"))], (&[("a", "1")], &[])),
        (&[("a", Some("1")), ("a", Some("2"))], (&[("a", "2")], &[])),
        (&[("a", Some("1")), ("a", None)], (&[], &["a"])),
        (&[("a", None), ("a", Some("3"))], (&[("a", "3")], &[])),
        (
            &[("b", None), ("a", Some("1")), ("c", Some("2"))],
            (&[("a", "1"), ("c", "2")], &["b"]),
        ),
    ];
    for (changes, (upserted, deleted)) in cases {
        let metrics = IndexerMetrics::default();
        let mut batch = Batch::new(&metrics);
        assert_eq!(batch.deadline(), None);
        for (name, rv) in changes {
            batch.set(key(name), rv.map(|rv| record(name, rv)));
        }
        assert!(batch.deadline().is_some());
        let distinct = upserted.len() + deleted.len();
        assert_eq!(batch.len(), distinct, "{changes:?}");
        assert_eq!(metrics.backlog.get(), distinct as i64, "{changes:?}");
        let (ups, dels) = batch.take();
        let ups: Vec<(&str, &str)> = ups
            .iter()
            .map(|r| (r.name.as_str(), r.resource_version.as_str()))
            .collect();
        let dels: Vec<&str> = dels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(ups, upserted, "{changes:?}");
        assert_eq!(dels, deleted, "{changes:?}");
        assert_eq!(metrics.backlog.get(), 0);
        assert_eq!(batch.deadline(), None);
    }
}

#[test]
fn a_dropped_batch_leaves_no_backlog() {
    let metrics = IndexerMetrics::default();
    {
        let mut batch = Batch::new(&metrics);
        batch.set(key("a"), None);
        batch.set(key("b"), Some(record("b", "1")));
        assert_eq!(metrics.backlog.get(), 2);
    }
    assert_eq!(metrics.backlog.get(), 0);
}
