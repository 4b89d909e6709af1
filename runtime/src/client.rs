//! The Kubernetes client of a binary, with one behaviour everywhere:
//!
//! 1. a kubeconfig file given by flag: that file, its `--context` or current context;
//! 2. no file but a context: that context of `$KUBECONFIG` / `~/.kube/config`;
//! 3. neither: kube-rs inference (`$KUBECONFIG` / `~/.kube/config`, else the pod's
//!    in-cluster service account).
//!
//! Errors name the flag to fix.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where a client's configuration comes from, and the flags that said so (for errors).
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// The kubeconfig file, if one was given.
    pub kubeconfig: Option<&'a Path>,
    /// The context, if one was given.
    pub context: Option<&'a str>,
    /// The flag naming the file, e.g. `--kubeconfig` or `--hub-kubeconfig`.
    pub kubeconfig_flag: &'static str,
    /// The flag naming the context, e.g. `--context` or `--hub-context`.
    pub context_flag: &'static str,
}

impl Source<'_> {
    /// The client configuration (see the module docs for the order).
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        let opts = KubeConfigOptions {
            context: self.context.map(str::to_string),
            ..Default::default()
        };
        match (self.kubeconfig, self.context) {
            (Some(path), _) => {
                let kc = Kubeconfig::read_from(path).with_context(|| {
                    format!("reading {} {}", self.kubeconfig_flag, path.display())
                })?;
                kube::Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .with_context(|| match self.context {
                        Some(c) => format!(
                            "using context {c:?} ({}) of {} {}",
                            self.context_flag,
                            self.kubeconfig_flag,
                            path.display()
                        ),
                        None => format!("using {} {}", self.kubeconfig_flag, path.display()),
                    })
            }
            (None, Some(c)) => kube::Config::from_kubeconfig(&opts).await.with_context(|| {
                format!(
                    "using context {c:?} ({}) of $KUBECONFIG or ~/.kube/config (no {} given)",
                    self.context_flag, self.kubeconfig_flag
                )
            }),
            (None, None) => kube::Config::infer().await.with_context(|| {
                format!(
                    "no {} given, and neither $KUBECONFIG, ~/.kube/config nor an in-cluster service account gives a configuration",
                    self.kubeconfig_flag
                )
            }),
        }
    }

    /// The client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let cfg = self.config().await?;
        kube::Client::try_from(cfg).context("building the Kubernetes client")
    }
}

/// The flags of a binary that talks to the hub: `--hub-kubeconfig`, `--hub-context`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct HubArgs {
    /// Kubeconfig of the hub cluster (default: $KUBECONFIG or ~/.kube/config, else the
    /// in-cluster service account).
    #[arg(long, env = "CAUSEWAY_HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// Context in the hub kubeconfig (default: its current context); without
    /// --hub-kubeconfig, a context of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub hub_context: Option<String>,
}

impl HubArgs {
    /// Where the hub client comes from.
    pub fn source(&self) -> Source<'_> {
        Source {
            kubeconfig: self.hub_kubeconfig.as_deref(),
            context: self.hub_context.as_deref(),
            kubeconfig_flag: "--hub-kubeconfig",
            context_flag: "--hub-context",
        }
    }

    /// The hub client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.source().client().await
    }
}

/// The flags of a binary that talks to the cluster it serves: `--kubeconfig`, `--context`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config, else the
    /// in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig (default: its current context); without --kubeconfig,
    /// a context of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// Where the client comes from.
    pub fn source(&self) -> Source<'_> {
        Source {
            kubeconfig: self.kubeconfig.as_deref(),
            context: self.context.as_deref(),
            kubeconfig_flag: "--kubeconfig",
            context_flag: "--context",
        }
    }

    /// The client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.source().client().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CONTEXTS: &str = "apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: 'https://127.0.0.1:1111'}
- name: b
  cluster: {server: 'https://127.0.0.1:2222'}
users:
- name: u
  user: {token: t}
contexts:
- name: first
  context: {cluster: a, user: u}
- name: second
  context: {cluster: b, user: u}
current-context: first
";

    fn source<'a>(kubeconfig: Option<&'a Path>, context: Option<&'a str>) -> Source<'a> {
        Source {
            kubeconfig,
            context,
            kubeconfig_flag: "--hub-kubeconfig",
            context_flag: "--hub-context",
        }
    }

    #[tokio::test]
    async fn a_file_and_a_context_pick_that_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kc");
        std::fs::write(&path, TWO_CONTEXTS).unwrap();
        let current = source(Some(&path), None).config().await.unwrap();
        assert_eq!(current.cluster_url.port_u16(), Some(1111));
        let second = source(Some(&path), Some("second")).config().await.unwrap();
        assert_eq!(second.cluster_url.port_u16(), Some(2222));
        let err = source(Some(&path), Some("third"))
            .config()
            .await
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("context \"third\" (--hub-context) of --hub-kubeconfig"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn a_missing_file_names_the_flag() {
        let err = source(Some(Path::new("/nonexistent/kc")), None)
            .config()
            .await
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.starts_with("reading --hub-kubeconfig /nonexistent/kc"),
            "{msg}"
        );
    }
}
