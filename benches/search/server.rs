//! The search server as an operator runs it: the real `causeway search serve` binary in
//! a child process (its own CPU time and peak RSS from /proc), and a keep-alive HTTPS
//! client of its API with the hub admin's bearer token, as kubectl would be.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use causeway_benches::process::Process;
use serde_json::{Value, json};

/// The types the bench indexes (and only these, so "every object stored" is exact).
pub const RESOURCES: [&str; 3] = ["apps/v1/deployments", "apps/v1/replicasets", "v1/pods"];

/// A running `causeway search serve`.
pub struct Serve {
    /// The process.
    pub process: Process,
    /// Where its API listens.
    pub addr: SocketAddr,
}

/// A free port on 127.0.0.1 (bound, then released for the server to take).
fn free_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?)
}

impl Serve {
    /// Starts `bin search serve` on the hub of `kubeconfig`, storing into `storage` (a
    /// path or a postgres:// URL), its state in `data_dir`, its log (info) to `log`.
    pub fn start(
        bin: &Path,
        kubeconfig: &Path,
        storage: &str,
        data_dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Serve> {
        let addr = free_addr()?;
        let mut cmd = Command::new(bin);
        cmd.args(["search", "serve", "--log", "warn"])
            .arg("--hub-kubeconfig")
            .arg(kubeconfig)
            .args(["--storage", storage])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", &addr.to_string()]);
        for r in RESOURCES {
            cmd.args(["--resource", r]);
        }
        Ok(Serve {
            process: Process::start(cmd, "the search server", log)?,
            addr,
        })
    }
}

/// A keep-alive HTTPS client of the search API (TLS not verified: the server's own
/// certificate; the bearer token is verified by the server against the hub).
#[derive(Clone)]
pub struct Api {
    client: kube::Client,
}

impl Api {
    /// A client of `https://addr` with `token`.
    pub async fn new(addr: SocketAddr, token: &str) -> anyhow::Result<Api> {
        let kc: kube::config::Kubeconfig = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "search", "cluster": {"server": format!("https://{addr}"), "insecure-skip-tls-verify": true}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "search", "context": {"cluster": "search", "user": "admin"}}],
            "current-context": "search",
        }))
        .context("building the search client's kubeconfig")?;
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .context("building the search client's config")?;
        cfg.read_timeout = Some(Duration::from_secs(60));
        let client = kube::Client::try_from(cfg).context("building the search client")?;
        Ok(Api { client })
    }

    /// GET `path_and_query` as text.
    pub async fn text(&self, path_and_query: &str) -> anyhow::Result<String> {
        let req = http::Request::get(path_and_query).body(Vec::new())?;
        self.client
            .request_text(req)
            .await
            .with_context(|| format!("GET {path_and_query}"))
    }

    /// GET `path_and_query` as JSON.
    pub async fn json(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let req = http::Request::get(path_and_query).body(Vec::new())?;
        self.client
            .request::<Value>(req)
            .await
            .with_context(|| format!("GET {path_and_query}"))
    }

    /// The value of counter or gauge `name` (summed over its label sets) in /metrics.
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = self.text("/metrics").await?;
        Ok(metric(&text, name))
    }
}

/// The sum of the samples of `name` in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn metrics_are_summed_over_label_sets() {
        let text = "# HELP x_total help\n# TYPE x_total counter\nx_total 3\ny{a=\"1\"} 2\ny{a=\"2\"} 5\nyy 9\n# EOF\n";
        for (name, want) in [("x_total", 3.0), ("y", 7.0), ("z", 0.0)] {
            assert_eq!(super::metric(text, name), want, "{name}");
        }
    }
}
