//! The leader-election flags, with kube-controller-manager's names and defaults.

use std::time::Duration;

use causeway_crds::well_known::SYSTEM_NAMESPACE;

use super::{Elector, Timings, default_identity};

fn interval(s: &str) -> Result<Duration, String> {
    causeway_crds::mci::tuning::parse_interval_or_why(s)
}

/// `--leader-elect` and its settings, for a binary that runs as several replicas.
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderArgs {
    /// Elect a leader among the replicas through a coordination.k8s.io/v1 Lease: only
    /// the leader works, the others stand by (/readyz not ready, /healthz ok).
    /// --leader-elect=false runs without election (one replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub leader_elect: bool,
    /// How long a standby waits after the Lease last changed before it takes over.
    #[arg(long, default_value = "15s", value_parser = interval)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down and exits.
    #[arg(long, default_value = "10s", value_parser = interval)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to take the Lease and the leader renews it.
    #[arg(long, default_value = "2s", value_parser = interval)]
    pub leader_elect_retry_period: Duration,
    /// Namespace of the Lease (created if missing).
    #[arg(long, default_value = SYSTEM_NAMESPACE)]
    pub leader_elect_resource_namespace: String,
    /// Name of the Lease (default: the component's, e.g. causeway-controller).
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
    /// This replica's holderIdentity (default: <hostname>_<random>).
    #[arg(long)]
    pub leader_elect_identity: Option<String>,
}

impl LeaderArgs {
    /// The three durations.
    pub fn timings(&self) -> Timings {
        Timings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// The candidate these flags describe (`None` with `--leader-elect=false`), for the
    /// Lease `default_name` unless `--leader-elect-resource-name` names another.
    pub fn elector(
        &self,
        client: kube::Client,
        default_name: &str,
    ) -> anyhow::Result<Option<Elector>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let name = self
            .leader_elect_resource_name
            .as_deref()
            .unwrap_or(default_name);
        let identity = self
            .leader_elect_identity
            .clone()
            .unwrap_or_else(default_identity);
        Elector::new(
            client,
            &self.leader_elect_resource_namespace,
            name,
            &identity,
            self.timings(),
        )
        .map(Some)
    }
}
