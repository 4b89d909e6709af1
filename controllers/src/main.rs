//! `causeway`: the Causeway control-plane binary.
//!
//! Subcommands so far: `causeway crds print` and `causeway crds write`, which
//! generate the CustomResourceDefinitions from the Rust types in `causeway-crds`.

use clap::{Parser, Subcommand};

mod crds_cmd;

/// Causeway: multi-cluster services, multi-cluster ingress and federation for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "causeway", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate the CustomResourceDefinitions Causeway needs (MCS, MultiClusterIngress, causeway.io).
    Crds(crds_cmd::CrdsArgs),
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Crds(args) => crds_cmd::run(args),
    }
}
