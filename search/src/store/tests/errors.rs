//! What the store says when PostgreSQL refuses a request or an object, or stops
//! answering.

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

/// A TCP relay on 127.0.0.1 to `target` that can be cut silently: after `cut`, every
/// relayed connection stops forwarding but stays open (no FIN, no RST), as when a
/// network path dies. Connections made after `heal` relay again.
struct Relay {
    addr: std::net::SocketAddr,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, flag.clone()));
                tokio::spawn(pump(sr, cw, flag.clone()));
            }
        });
        Relay { addr, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            return;
        }
        if cut.load(Ordering::SeqCst) {
            // hold both sockets open and forward nothing, ever
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_silently_cut_network_is_unavailable_not_a_hang() {
    let url = testing::postgres_db().await;
    // postgres://user@HOST:PORT/db → the relay's address in its place
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap();
    let (user, target) = authority.rsplit_once('@').unwrap();
    let relay = Relay::start(target.to_string()).await;
    let relayed = format!("{scheme}://{user}@{}/{path}", relay.addr);
    let limit = std::time::Duration::from_secs(2);
    let pg = postgres::Postgres::open_with(&relayed, limit)
        .await
        .unwrap();
    pg.upsert(Arc::from(vec![record("a", "ns", "web", "1", json!({}))]))
        .await
        .unwrap();
    relay.set_cut(true);
    for call in ["write", "read"] {
        let started = std::time::Instant::now();
        let err = tokio::time::timeout(limit * 5, async {
            match call {
                "write" => pg
                    .upsert(Arc::from(vec![record("a", "ns", "web", "2", json!({}))]))
                    .await
                    .map(drop),
                _ => pg
                    .rows(sql::versions(Dialect::Postgres, "a", &deployments()))
                    .await
                    .map(drop),
            }
        })
        .await
        .expect("a call over a cut network ends")
        .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{call}: {err}");
        assert!(
            err.to_string().contains("did not answer within 2s"),
            "{call}: {err}"
        );
        assert!(
            started.elapsed() >= limit,
            "{call}: {:?}",
            started.elapsed()
        );
    }
    // the cut connection was dropped: the next write connects anew and succeeds
    relay.set_cut(false);
    let (written, skipped) = pg
        .upsert(Arc::from(vec![record("a", "ns", "web", "3", json!({}))]))
        .await
        .unwrap();
    assert_eq!((written, skipped), (1, 0));
}

both!(
    a_query_with_more_values_than_the_database_takes_is_a_bad_request,
    |s: Store, _spec| async move {
        // past SQLite's 32766 and PostgreSQL's 65535 statement parameters
        let names: Vec<String> = (0..70_000).map(|i| format!("n{i}")).collect();
        let qs = format!("names={}", names.join(","));
        match s
            .search(&deployments(), &query(&qs), &Scope::default())
            .await
        {
            Err(StoreError::Query(QueryError(msg))) => assert!(
                msg.starts_with("the query needs 7000") && msg.contains("give fewer"),
                "{msg}"
            ),
            other => panic!("expected a query error, got {other:?}"),
        }
        // the store still answers
        assert!(all(&s, "").await.is_empty());
    }
);
