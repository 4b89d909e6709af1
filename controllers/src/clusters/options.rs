//! The registry's timing knobs, shared by the hub controller (`causeway controller`) and
//! the pull-mode agent (`causeway agent`), as command-line flags and as plain settings.
//! Defaults are Karmada's (federation.md §1.1); tests pass seconds.

use std::time::Duration;

/// Parses a duration flag such as `500ms`, `10s`, `5m`: more than 0, at most 24h.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    causeway_crds::mci::tuning::parse_interval_or_why(s)
}

/// Parses a duration flag that may be zero (`0s` turns the damping off), at most 24h.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    causeway_crds::mci::tuning::parse_duration_or_why(s)
}

/// How member health is observed, damped and aged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How often a member's `/readyz` is probed and its Cluster status posted.
    pub status_interval: Duration,
    /// A Ready=True cluster turns False only after failures lasted this long.
    pub failure_threshold: Duration,
    /// A Ready=False cluster turns True only after successes lasted this long.
    pub success_threshold: Duration,
    /// A Pull cluster whose lease and Ready condition stayed unchanged this long goes
    /// Ready=Unknown.
    pub monitor_grace_period: Duration,
    /// The same before the agent ever posted a status.
    pub startup_grace_period: Duration,
    /// How often the hub checks Pull clusters' leases.
    pub monitor_interval: Duration,
    /// How long the last known endpoints of a member that is not Ready keep serving
    /// before they are withdrawn everywhere (EPS-7).
    pub stale_endpoints_ttl: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            status_interval: Duration::from_secs(10),
            failure_threshold: Duration::from_secs(30),
            success_threshold: Duration::from_secs(30),
            monitor_grace_period: Duration::from_secs(40),
            startup_grace_period: Duration::from_secs(60),
            monitor_interval: Duration::from_secs(5),
            stale_endpoints_ttl: Duration::from_secs(300),
        }
    }
}

impl Timing {
    /// Seconds instead of tens of seconds: what tests and `causeway-local` use.
    pub fn fast() -> Self {
        Timing {
            status_interval: Duration::from_secs(1),
            failure_threshold: Duration::from_secs(2),
            success_threshold: Duration::from_secs(2),
            monitor_grace_period: Duration::from_secs(4),
            startup_grace_period: Duration::from_secs(6),
            monitor_interval: Duration::from_millis(500),
            stale_endpoints_ttl: Duration::from_secs(300),
        }
    }

    /// How long a lease is valid after a renewal (the agent renews every quarter of it).
    pub fn lease_duration(&self) -> Duration {
        self.monitor_grace_period
    }
}

/// The flags behind [`Timing`].
#[derive(Debug, Clone, clap::Args)]
pub struct TimingArgs {
    /// How often each member's /readyz is probed and its Cluster status posted
    /// (e.g. 10s, 500ms). Alias: --cluster-probe-interval.
    #[arg(long, alias = "cluster-probe-interval", default_value = "10s", value_parser = parse_interval)]
    pub cluster_status_update_frequency: Duration,
    /// A Ready cluster is marked not ready only after its probes failed for this long
    /// (flap damping; 0s turns it off).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub cluster_failure_threshold: Duration,
    /// A not-ready cluster is marked Ready only after its probes succeeded for this long.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub cluster_success_threshold: Duration,
    /// A Pull cluster whose agent renewed neither its lease nor its status for this long
    /// goes Ready=Unknown (and gets the unreachable taint).
    #[arg(long, default_value = "40s", value_parser = parse_interval)]
    pub cluster_monitor_grace_period: Duration,
    /// The same, for a Pull cluster whose agent never posted a status.
    #[arg(long, default_value = "60s", value_parser = parse_interval)]
    pub cluster_startup_grace_period: Duration,
    /// How long the last known endpoints of a member that is not Ready keep being
    /// served (MCS imports, DNS, proxy) before they are withdrawn everywhere.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub stale_endpoints_ttl: Duration,
}

impl TimingArgs {
    /// The settings these flags give.
    pub fn timing(&self) -> Timing {
        Timing {
            status_interval: self.cluster_status_update_frequency,
            failure_threshold: self.cluster_failure_threshold,
            success_threshold: self.cluster_success_threshold,
            monitor_grace_period: self.cluster_monitor_grace_period,
            startup_grace_period: self.cluster_startup_grace_period,
            monitor_interval: (self.cluster_monitor_grace_period / 8)
                .clamp(Duration::from_millis(200), Duration::from_secs(5)),
            stale_endpoints_ttl: self.stale_endpoints_ttl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_flags_say_which_rule_a_value_breaks() {
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_interval("0s").unwrap_err(),
            "\"0s\" must be more than 0, e.g. 500ms, 10s or 1m"
        );
        for parse in [parse_interval, parse_duration] {
            assert_eq!(
                parse("48h").unwrap_err(),
                "\"48h\" is too long: at most 24h"
            );
            let e = parse("soon").unwrap_err();
            assert!(e.starts_with("\"soon\" is not a duration"), "{e}");
        }
    }
}
