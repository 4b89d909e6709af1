//! Helpers for tests of anything built on the store (not only this crate's).

use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable naming the test PostgreSQL server.
pub const POSTGRES_ENV: &str = "CAUSEWAY_TEST_POSTGRES";

/// Creates a uniquely named, empty database on the server in `CAUSEWAY_TEST_POSTGRES`
/// and returns its URL. Panics, saying how to start one, when the variable is unset or
/// the server cannot be reached: store tests never skip silently.
pub async fn postgres_db() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let base = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_ENV} is not set: the store tests need PostgreSQL; run `export {POSTGRES_ENV}=\"$(scripts/postgres start)\"` first"
        )
    });
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot connect to {POSTGRES_ENV}={base}: {e}; is `scripts/postgres start` running?"
            )
        });
    tokio::spawn(conn);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let db = format!(
        "causeway_test_{}_{}_{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap_or_else(|e| panic!("cannot create database {db} on {base}: {e}"));
    with_database(&base, &db)
}

/// Drops a database [`postgres_db`] made (closing its connections), for tests that
/// fill one with much data.
pub async fn drop_postgres_db(url: &str) {
    let base = std::env::var(POSTGRES_ENV).unwrap_or_default();
    let db = url.rsplit('/').next().unwrap_or_default();
    let db = db.split('?').next().unwrap_or_default();
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {POSTGRES_ENV}={base}: {e}"));
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await
        .unwrap_or_else(|e| panic!("cannot drop database {db}: {e}"));
}

/// `base` (a PostgreSQL URL) with its database replaced by `db`.
fn with_database(base: &str, db: &str) -> String {
    let (url, query) = base
        .split_once('?')
        .map_or((base, None), |(u, q)| (u, Some(q)));
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let host_end = url[authority_start..]
        .find('/')
        .map_or(url.len(), |i| authority_start + i);
    let mut out = format!("{}/{db}", &url[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Polls `check` until it returns true, every 20 ms, for at most `deadline`; panics
/// saying `what` was not seen in time.
pub async fn eventually<F, Fut>(what: &str, deadline: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while start.elapsed() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("not within {deadline:?}: {what}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn with_database_replaces_the_path() {
        let cases = [
            ("postgres://u@h:1/postgres", "postgres://u@h:1/x"),
            ("postgres://u@h:1", "postgres://u@h:1/x"),
            (
                "postgresql://u@h/postgres?sslmode=disable",
                "postgresql://u@h/x?sslmode=disable",
            ),
        ];
        for (base, want) in cases {
            assert_eq!(super::with_database(base, "x"), want, "{base}");
        }
    }
}
