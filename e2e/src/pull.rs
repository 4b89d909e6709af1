//! Pull members for the harness and `causeway-local`: register a member in pull mode,
//! run its agent in this process, and reach the hub through a [`Link`] that can be cut
//! (a network partition between the member and the hub), plus the fault switch
//! `causeway-local fault` drives from a second terminal.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use causeway_controllers::clusters::options::Timing;
use causeway_controllers::clusters::register::{RegisterOptions, Registered, register};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::{Clusterset, access, client, hub_endpoint};

/// A TCP forwarder on 127.0.0.1 that can be cut: while cut, open connections are closed
/// and new ones are dropped at once.
pub struct Link {
    /// Where it listens.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
    stop: CancellationToken,
}

impl Link {
    /// Forwards 127.0.0.1:<any port> to `target`.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let (tx, _) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(tx);
        let stop = CancellationToken::new();
        let (c, g, s) = (cut.clone(), generation.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let Some((mut inbound, _)) =
                    causeway_runtime::net::accept(&listener, &s, "link").await
                else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the peer sees a reset
                }
                let mut cut_now = g.subscribe();
                let s = s.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_now.changed() => {}
                        _ = s.cancelled() => {}
                    }
                });
            }
        });
        Ok(Link {
            addr,
            cut,
            generation,
            stop,
        })
    }

    /// Cuts (true) or restores (false) the link.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            self.generation.send_modify(|g| *g += 1);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A Pull member's agent running in this process.
pub struct Agent {
    /// The member's name.
    pub name: String,
    /// Its way to the hub.
    pub link: Link,
    /// Stops it.
    pub stop: CancellationToken,
}

impl Clusterset {
    /// Registers member `name` in pull mode and starts its agent in this process; the
    /// agent reaches the hub through a [`Link`]. With `search_access` the search server
    /// may read the member (`causeway register --search-access`).
    pub async fn start_pull_member(
        &self,
        name: &str,
        timing: Timing,
        search_access: bool,
    ) -> anyhow::Result<Agent> {
        let member = self
            .member(name)
            .with_context(|| format!("no member named {name}"))?;
        let as_admin = client(member).await?;
        self.start_pull_member_as(name, timing, search_access, as_admin)
            .await
    }

    /// [`Clusterset::start_pull_member`], with the agent reaching its member as
    /// `member_client` (the agent's own ServiceAccount, say) rather than as an admin.
    pub async fn start_pull_member_as(
        &self,
        name: &str,
        timing: Timing,
        search_access: bool,
        member_client: kube::Client,
    ) -> anyhow::Result<Agent> {
        let member = self
            .member(name)
            .with_context(|| format!("no member named {name}"))?;
        let hub_addr: SocketAddr = self.hub.addr();
        let link = Link::start(hub_addr).await?;
        let scheme = if self.hub.ca_pem().is_some() {
            "https"
        } else {
            "http"
        };
        let Registered {
            agent_kubeconfig, ..
        } = register(
            client(&self.hub).await?,
            hub_endpoint(&self.hub),
            name,
            &causeway_controllers::clusters::join::Member::from_access(&access(member)).await?,
            &RegisterOptions {
                hub_endpoint: Some(format!("{scheme}://{}", link.addr)),
                token_seconds: 365 * 24 * 3600,
                search_access,
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("registering {name} in pull mode"))?;
        let kc = kube::config::Kubeconfig::from_yaml(&agent_kubeconfig)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let hub = kube::Client::try_from(cfg)?;
        let member = member_client;
        let stop = CancellationToken::new();
        let metrics = Arc::new(causeway_controllers::metrics::Metrics::default());
        metrics.set_unelected();
        let (n, s) = (name.to_string(), stop.clone());
        tokio::spawn(async move {
            if let Err(e) =
                causeway_controllers::agent::run(hub, member, n.clone(), timing, metrics, s).await
            {
                tracing::error!(cluster = %n, error = %format!("{e:#}"), "agent stopped");
            }
        });
        Ok(Agent {
            name: name.to_string(),
            link,
            stop,
        })
    }
}

/// The faults `causeway-local fault` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Cut the member off: a Push member's API server drops every connection; a Pull
    /// member's agent loses its connection to the hub.
    Unreachable,
    /// The member's API server answers /readyz with 500.
    NotReady,
    /// No fault.
    Ok,
}

/// The file through which `causeway-local fault` tells a running `up` about `cluster`.
pub fn fault_file(dir: &Path, cluster: &str) -> PathBuf {
    dir.join("faults").join(cluster)
}

/// The file in which a running `causeway-local up` lists its members (one a line), so
/// `causeway-local fault` takes only those (a dot name: never a cluster's).
fn members_file(dir: &Path) -> PathBuf {
    fault_file(dir, ".members")
}

/// Lists `members` as the ones `causeway-local fault` may name.
pub fn write_members(dir: &Path, members: &[String]) -> anyhow::Result<()> {
    let path = members_file(dir);
    std::fs::create_dir_all(path.parent().context("fault dir")?)?;
    std::fs::write(&path, members.join("\n") + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes a fault request for a running `causeway-local up` using `dir`; refuses a
/// cluster that is not one of its members (the hub, the search server).
pub fn request_fault(dir: &Path, cluster: &str, fault: Fault) -> anyhow::Result<()> {
    let Ok(listed) = std::fs::read_to_string(members_file(dir)) else {
        bail!(
            "no running `causeway-local up` uses {} (it lists its members there): start one, or pass its --dir",
            dir.display()
        );
    };
    let members: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
    if !members.contains(&cluster) {
        bail!(
            "no cluster \"{cluster}\" to fault in the `causeway-local up` using {}: faults apply to its members only, one of {}",
            dir.display(),
            members.join(", ")
        );
    }
    let path = fault_file(dir, cluster);
    std::fs::create_dir_all(path.parent().context("fault dir")?)?;
    // written whole, then renamed: `up` never reads a half-written request
    let tmp = path.with_file_name(format!(".{cluster}.tmp"));
    std::fs::write(&tmp, fault.word()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

impl Fault {
    /// The word `causeway-local fault` takes for it.
    pub fn word(self) -> &'static str {
        match self {
            Fault::Unreachable => "unreachable",
            Fault::NotReady => "not-ready",
            Fault::Ok => "ok",
        }
    }
}

/// Removes what `up` wrote for `causeway-local fault` (at its stop: a later `fault`
/// says no `up` runs, not that it asked one).
pub fn forget_faults(dir: &Path) {
    if let Some(d) = fault_file(dir, "x").parent() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Applies the fault requests found under `dir` every half second, until `stop`.
pub async fn follow_faults(
    cs: Arc<Clusterset>,
    agents: Arc<Vec<Agent>>,
    dir: PathBuf,
    stop: CancellationToken,
) {
    let names: Vec<String> = cs.members.iter().map(|m| m.name().to_string()).collect();
    if let Err(e) = write_members(&dir, &names) {
        tracing::error!(error = %format!("{e:#}"), "`causeway-local fault` will not find the members");
    }
    let mut applied: std::collections::HashMap<String, String> = Default::default();
    loop {
        for m in &cs.members {
            let name = m.name().to_string();
            let Ok(word) = std::fs::read_to_string(fault_file(&dir, &name)) else {
                continue;
            };
            let word = word.trim().to_string();
            if applied.get(&name) == Some(&word) {
                continue;
            }
            let agent = agents.iter().find(|a| a.name == name);
            // each word is the member's whole state: it replaces the one before
            let unreachable = word == "unreachable";
            match agent {
                Some(a) => a.link.set_cut(unreachable),
                None => m.faults().set_drop_connections(unreachable),
            }
            m.faults().set_not_ready(word == "not-ready");
            // stdout may be gone (a closed pipe): the fault still applies
            let _ = writeln!(std::io::stdout(), "fault: {name} is now {word}");
            applied.insert(name, word);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_go_to_members_only() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        // the kubeconfigs `up` writes: the hub's and the search server's too
        for c in ["hub", "search", "east", "west"] {
            std::fs::write(dir.join(format!("{c}.kubeconfig")), "").unwrap();
        }
        let e = request_fault(dir, "east", Fault::NotReady)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("no running `causeway-local up` uses"), "{e}");
        write_members(dir, &["east".into(), "west".into()]).unwrap();
        for not_a_member in ["hub", "search", "north", ".members"] {
            let e = request_fault(dir, not_a_member, Fault::Unreachable)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("no cluster \"{not_a_member}\" to fault"))
                    && e.ends_with("faults apply to its members only, one of east, west"),
                "{e}"
            );
        }
        assert!(!fault_file(dir, "hub").exists());
        request_fault(dir, "west", Fault::Unreachable).unwrap();
        assert_eq!(
            std::fs::read_to_string(fault_file(dir, "west")).unwrap(),
            "unreachable"
        );
    }
}
