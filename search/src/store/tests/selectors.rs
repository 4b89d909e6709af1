//! Label and field selectors and owner search, on both backends.

use serde_json::json;

use super::*;

fn pods() -> Gvr {
    Gvr {
        group: "".into(),
        version: "v1".into(),
        resource: "pods".into(),
    }
}

async fn query_error(s: &Store, qs: &str) -> String {
    match s
        .search(&deployments(), &query(qs), &Scope::default())
        .await
    {
        Err(StoreError::Query(e)) => e.0,
        other => panic!("{qs}: expected a query error, got {other:?}"),
    }
}

/// Four objects: `web` (app=web, tier=front), `db` (app=db), `bare` (no labels), `blank`
/// (app="").
async fn labelled(s: &Store) {
    s.upsert(vec![
        record(
            "a",
            "ns",
            "web",
            "1",
            json!({"metadata": {"labels": {"app": "web", "tier": "front"}}}),
        ),
        record(
            "a",
            "ns",
            "db",
            "1",
            json!({"metadata": {"labels": {"app": "db"}}}),
        ),
        record("a", "ns", "bare", "1", json!({})),
        record(
            "a",
            "ns",
            "blank",
            "1",
            json!({"metadata": {"labels": {"app": ""}}}),
        ),
    ])
    .await
    .unwrap();
}

both!(label_selector_operators, |s: Store, _spec| async move {
    labelled(&s).await;
    let cases: [(&str, &[&str]); 13] = [
        ("app=web", &["web"]),
        ("app==db", &["db"]),
        // != and notin match objects without the key, as Kubernetes does
        ("app!=web", &["bare", "blank", "db"]),
        ("app in (web,db)", &["db", "web"]),
        ("app notin (web)", &["bare", "blank", "db"]),
        ("tier", &["web"]),
        ("!tier", &["bare", "blank", "db"]),
        ("app,!tier", &["blank", "db"]),
        ("app in (web,db),tier!=front", &["db"]),
        // the empty value, as kube's parser reads `()` and a trailing comma
        ("app in (web,)", &["blank", "web"]),
        ("app in ()", &["blank"]),
        ("app notin ()", &["bare", "db", "web"]),
        ("app=", &["blank"]),
    ];
    for (sel, want) in cases {
        let qs: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("labelSelector", sel)
            .finish();
        let want: Vec<String> = want.iter().map(|n| format!("a/ns/{n}")).collect();
        assert_eq!(all(&s, &qs).await, want, "{sel}");
    }
    let e = query_error(&s, "labelSelector=n%3E1").await;
    assert!(
        e.contains("the numeric operators > and < are not supported"),
        "{e}"
    );
    let e = query_error(&s, "labelSelector=a%20b%3Dc").await;
    assert_eq!(
        e,
        "labelSelector \"a b=c\": unable to parse requirement: invalid label key \"a b\""
    );
});

both!(field_selector_operators, |s: Store, _spec| async move {
    s.upsert(vec![
        record(
            "a",
            "ns",
            "run",
            "1",
            json!({"status": {"phase": "Running"}, "spec": {"replicas": 3, "paused": true},
            "metadata": {"annotations": {"example.com/team": "blue"}}}),
        ),
        record(
            "a",
            "ns",
            "pend",
            "1",
            json!({"status": {"phase": "Pending"}}),
        ),
        record("a", "other", "none", "1", json!({})),
    ])
    .await
    .unwrap();
    let cases: [(&str, &[&str]); 15] = [
        ("status.phase=Running", &["ns/run"]),
        ("status.phase==Pending", &["ns/pend"]),
        ("status.phase!=Running", &["ns/pend", "other/none"]),
        ("status.phase in (Running,Pending)", &["ns/pend", "ns/run"]),
        ("status.phase notin (Running)", &["ns/pend", "other/none"]),
        ("status.phase", &["ns/pend", "ns/run"]),
        ("!status.phase", &["other/none"]),
        // an absent field is the empty string, as kube-apiserver (and so a watch's
        // members) compare it: `spec.nodeName=` selects the unscheduled Pods
        ("status.phase=", &["other/none"]),
        ("status.phase!=", &["ns/pend", "ns/run"]),
        ("metadata.annotations['example.com/team']=blue", &["ns/run"]),
        ("metadata.annotations[\"example.com/team\"]", &["ns/run"]),
        ("spec.replicas=3,spec.paused=true", &["ns/run"]),
        ("metadata.name=pend", &["ns/pend"]),
        ("metadata.namespace!=ns", &["other/none"]),
        (
            "metadata.name in (run,none),status.phase!=Pending",
            &["ns/run", "other/none"],
        ),
    ];
    for (sel, want) in cases {
        let qs: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("fieldSelector", sel)
            .finish();
        let want: Vec<String> = want.iter().map(|n| format!("a/{n}")).collect();
        assert_eq!(all(&s, &qs).await, want, "{sel}");
    }
    let e = query_error(&s, "fieldSelector=status.phase%20in%20Running").await;
    assert!(
        e.starts_with("fieldSelector \"status.phase in Running\": \"Running\" is not a set"),
        "{e}"
    );
});

// a cluster-scoped object has no namespace field (its column holds ''): `!metadata.namespace`
// selects it and `metadata.namespace` does not (before, the reverse: the column is never
// NULL)
both!(
    a_cluster_scoped_object_has_no_namespace_field,
    |s: Store, _spec| async move {
        s.upsert(vec![
            record("a", "ns", "inside", "1", json!({})),
            record("a", "", "outside", "1", json!({})),
        ])
        .await
        .unwrap();
        assert_eq!(
            all(&s, "fieldSelector=%21metadata.namespace").await,
            ["a//outside"]
        );
        assert_eq!(
            all(&s, "fieldSelector=metadata.namespace").await,
            ["a/ns/inside"]
        );
        assert_eq!(
            all(&s, "fieldSelector=metadata.namespace%3D").await,
            ["a//outside"]
        );
    }
);

fn owned(kind_uid: &str, owner: Option<&str>) -> serde_json::Value {
    let refs = owner
        .map(|o| json!([{"uid": o, "controller": true}]))
        .unwrap_or(json!([]));
    json!({"metadata": {"uid": kind_uid, "ownerReferences": refs}})
}

both!(
    owner_search_walks_seniority_levels,
    |s: Store, _spec| async move {
        // K.70: Deployment web → ReplicaSet web-1 → Pods; another Deployment's pods too
        let rs = Gvr {
            group: "apps".into(),
            version: "v1".into(),
            resource: "replicasets".into(),
        };
        let rec = |gvr: &Gvr, cluster: &str, name: &str, uid: &str, owner: Option<&str>| {
            let obj = object("ns", name, "1", owned(uid, owner));
            Record::from_object(cluster, gvr, &obj, false).unwrap()
        };
        s.upsert(vec![
            rec(&deployments(), "a", "web", "d-web", None),
            rec(&deployments(), "a", "api", "d-api", None),
            rec(&rs, "a", "web-1", "rs-web-1", Some("d-web")),
            rec(&rs, "a", "web-2", "rs-web-2", Some("d-web")),
            rec(&rs, "a", "api-1", "rs-api-1", Some("d-api")),
            rec(&pods(), "a", "web-1-x", "p1", Some("rs-web-1")),
            rec(&pods(), "a", "web-2-y", "p2", Some("rs-web-2")),
            rec(&pods(), "a", "api-1-z", "p3", Some("rs-api-1")),
            // the same names in another cluster are not found
            rec(&deployments(), "b", "web", "b-d-web", None),
            rec(&rs, "b", "web-1", "b-rs", Some("b-d-web")),
            rec(&pods(), "b", "web-1-x", "b-p", Some("b-rs")),
        ])
        .await
        .unwrap();
        let search = |gvr: Gvr, qs: &'static str| {
            let s = s.clone();
            async move { names(&s.search(&gvr, &query(qs), &Scope::default()).await.unwrap()) }
        };
        assert_eq!(
            search(
                pods(),
                "clusters=a&ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await,
            ["a/ns/web-1-x", "a/ns/web-2-y"]
        );
        assert_eq!(
            search(
                rs.clone(),
                "clusters=a&ownerName=web&ownerGR=deployments.apps"
            )
            .await,
            ["a/ns/web-1", "a/ns/web-2"]
        );
        assert_eq!(
            search(pods(), "clusters=a&ownerUID=rs-api-1").await,
            ["a/ns/api-1-z"]
        );
        // the uid wins over name and group-resource
        assert_eq!(
            search(
                pods(),
                "clusters=a&ownerUID=d-api&ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await,
            ["a/ns/api-1-z"]
        );
        assert_eq!(
            search(
                pods(),
                "clusters=b&ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await,
            ["b/ns/web-1-x"]
        );
        // an owner in another namespace, or none at all: nothing
        assert!(
            search(
                pods(),
                "clusters=a&namespaces=x&ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await
            .is_empty()
        );
        assert!(
            search(
                pods(),
                "clusters=a&ownerName=nope&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await
            .is_empty()
        );
        assert!(
            search(
                pods(),
                "clusters=a&ownerName=web&ownerGR=deployments.apps&ownerSeniority=3"
            )
            .await
            .is_empty()
        );
        // with the types recorded, the owner is looked up through its versions
        for version in ["v1", "v1beta1"] {
            let mut t = TypeInfo {
                gvr: deployments(),
                kind: "Deployment".into(),
                namespaced: true,
            };
            t.gvr.version = version.into();
            s.set_type(&t).await.unwrap();
        }
        assert_eq!(
            search(
                pods(),
                "clusters=a&ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"
            )
            .await,
            ["a/ns/web-1-x", "a/ns/web-2-y"]
        );
    }
);

both!(an_owner_cycle_ends_the_walk, |s: Store, _spec| async move {
    // A owns B owns A (a broken cluster can hold this); C is owned by B
    let rec = |name: &str, uid: &str, owner: &str| {
        let obj = object("ns", name, "1", owned(uid, Some(owner)));
        Record::from_object("a", &pods(), &obj, false).unwrap()
    };
    s.upsert(vec![
        rec("a", "A", "B"),
        rec("b", "B", "A"),
        rec("c", "C", "B"),
    ])
    .await
    .unwrap();
    let search = |qs: &'static str| {
        let s = s.clone();
        async move {
            names(
                &s.search(&pods(), &query(qs), &Scope::default())
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(search("clusters=a&ownerUID=A").await, ["a/ns/b"]);
    assert_eq!(
        search("clusters=a&ownerUID=A&ownerSeniority=1").await,
        ["a/ns/a", "a/ns/c"]
    );
    // two levels down from A is back at A: the walk stops, nothing is found
    for n in 2..=8 {
        let qs = format!("clusters=a&ownerUID=A&ownerSeniority={n}");
        let p = s.search(&pods(), &query(&qs), &Scope::default()).await;
        assert!(names(&p.unwrap()).is_empty(), "{qs}");
    }
});

both!(
    a_cluster_scoped_owner_ignores_the_namespaces_filter,
    |s: Store, _spec| async move {
        let nodes = Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "nodes".into(),
        };
        s.set_type(&TypeInfo {
            gvr: nodes.clone(),
            kind: "Node".into(),
            namespaced: false,
        })
        .await
        .unwrap();
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "node-n1", "resourceVersion": "1"}});
        let pod = |ns: &str, name: &str| {
            let obj = object(
                ns,
                name,
                "1",
                owned(&format!("p-{ns}-{name}"), Some("node-n1")),
            );
            Record::from_object("a", &pods(), &obj, false).unwrap()
        };
        s.upsert(vec![
            Record::from_object("a", &nodes, &node, false).unwrap(),
            pod("x", "static-1"),
            pod("y", "static-2"),
        ])
        .await
        .unwrap();
        let p = s
            .search(
                &pods(),
                &query("clusters=a&ownerName=n1&ownerGR=nodes&namespaces=x"),
                &Scope::default(),
            )
            .await
            .unwrap();
        assert_eq!(names(&p), ["a/x/static-1"]);
    }
);
