//! What every scenario of this binary shares: both stores, the macro that runs a
//! scenario on each, and kubesim clusters with an admin client.

use causeway_search::store::testing;

/// Which store a scenario runs on.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// A file in a temp dir.
    Sqlite,
    /// A fresh database on the test server (`CAUSEWAY_TEST_POSTGRES`).
    Postgres,
}

/// Runs a scenario (`async fn name(backend: Backend)`) on both stores.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    };
}

/// A fresh database: its store spec (and the temp dir holding an SQLite file).
pub async fn database(backend: Backend) -> (String, Option<tempfile::TempDir>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("sqlite:{}", dir.path().join("search.db").display());
            (spec, Some(dir))
        }
        Backend::Postgres => (testing::postgres_db().await, None),
    }
}

/// A kubesim cluster and an admin client of it.
pub struct Cluster {
    pub server: kubesim::Server,
    pub client: kube::Client,
}

/// A kubesim cluster named `name`.
pub async fn cluster(name: &str) -> Cluster {
    cluster_with(kubesim::Config::new(name)).await
}

/// A kubesim cluster started with `cfg`.
pub async fn cluster_with(cfg: kubesim::Config) -> Cluster {
    let server = kubesim::Server::start(cfg).await.expect("kubesim starts");
    let client = server.client().await;
    Cluster { server, client }
}
