//! What the store says when PostgreSQL refuses a request or an object.

use serde_json::json;

use super::*;

#[tokio::test]
async fn a_query_postgres_refuses_is_a_bad_request_in_its_words() {
    let f = open("postgres").await;
    // a NUL byte in a names= value: PostgreSQL text cannot hold it (SQLSTATE 22021)
    let err = f
        .store
        .search(&deployments(), &query("names=a%00b"), &Scope::default())
        .await
        .unwrap_err();
    match err {
        StoreError::Query(QueryError(msg)) => assert!(
            msg.starts_with("PostgreSQL: invalid byte sequence for encoding \"UTF8\": 0x00")
                && msg.ends_with("(SQLSTATE 22021)"),
            "{msg}"
        ),
        other => panic!("expected a query error, got {other:?}"),
    }
}

both!(
    an_object_postgres_refuses_is_skipped_not_an_outage,
    |s: Store, spec: String| async move {
        // jsonb cannot hold \u0000 in a string (SQLSTATE 22P05); SQLite stores the text
        let mut bad = record("a", "ns", "bad", "1", json!({}));
        bad.object = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"namespace":"ns","name":"bad","annotations":{"note":"a\u0000b"}}}"#.into();
        let w = s
            .upsert(vec![
                record("a", "ns", "one", "1", json!({})),
                bad.clone(),
                record(
                    "a",
                    "ns",
                    "two",
                    "1",
                    json!({"metadata": {"labels": {"app": "two"}}}),
                ),
            ])
            .await
            .unwrap();
        let postgres = spec.starts_with("postgres");
        let stored = if postgres {
            vec!["a/ns/one", "a/ns/two"]
        } else {
            vec!["a/ns/bad", "a/ns/one", "a/ns/two"]
        };
        assert_eq!(
            w,
            Written {
                written: stored.len() as u64,
                unchanged: 0
            }
        );
        assert_eq!(all(&s, "").await, stored);
        // the labels of the records written one by one are stored too
        assert_eq!(all(&s, "labelSelector=app%3Dtwo").await, ["a/ns/two"]);
        // the bad object alone: nothing written, no error
        bad.resource_version = "2".into();
        let w = s.upsert(vec![bad]).await.unwrap();
        assert_eq!(w.written, if postgres { 0 } else { 1 });
        assert_eq!(w.unchanged, 0);
    }
);
