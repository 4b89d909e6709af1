//! `causeway crds print|write|install`: render the CRDs from the Rust types, or install
//! them into a cluster without downgrading what is there (API-8).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use causeway_crds::crdgen::install::Action;
use causeway_crds::crdgen::{GENERATED_HEADER, render_all, render_all_multi_doc, try_all_crds};
use causeway_crds::well_known::FIELD_MANAGER;
use causeway_runtime::client::ClusterArgs;
use clap::{Args, Subcommand};

/// Arguments of `causeway crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    #[command(subcommand)]
    command: CrdsCommand,
}

#[derive(Debug, Subcommand)]
enum CrdsCommand {
    /// Print every CRD to stdout as one multi-document YAML stream
    /// (e.g. `causeway crds print | kubectl apply --server-side -f -`).
    Print,
    /// Write one file per CRD, named `<plural>.<group>.yaml`, into a directory.
    ///
    /// Files in the directory that an earlier run generated (they start with the
    /// generated-file header) but that no longer correspond to a CRD are removed;
    /// other files are left alone.
    Write {
        /// Directory to write into; created if missing.
        #[arg(long, value_name = "DIR", default_value = "deploy/crds")]
        dir: PathBuf,
    },
    /// Install every CRD into a cluster (the hub and each member) and wait until they
    /// are Established.
    ///
    /// A CRD already there is replaced only when that is safe: one a newer Causeway
    /// installed is refused (a downgrade could prune fields it stores); a newer mcs-api
    /// release (its release-version and crd-schema-revision labels) is kept; another
    /// installer's Gateway API, About API or MultiClusterIngress CRD is kept when it
    /// serves the versions Causeway uses, refused otherwise. When one is refused,
    /// nothing is written.
    Install {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Replace every CRD with this Causeway's, whatever is installed (a downgrade,
        /// or another installer's CRD).
        #[arg(long)]
        force: bool,
        /// How long to wait for each CRD to become Established.
        #[arg(long, default_value = "60s", value_parser = causeway_controllers::clusters::options::parse_interval)]
        timeout: std::time::Duration,
    },
}

/// Runs `causeway crds ...`.
pub async fn run(args: CrdsArgs) -> anyhow::Result<()> {
    match args.command {
        CrdsCommand::Print => {
            let yaml = render_all_multi_doc().context("rendering the CRDs")?;
            std::io::stdout()
                .lock()
                .write_all(yaml.as_bytes())
                .context("writing the CRDs to stdout")?;
            Ok(())
        }
        CrdsCommand::Write { dir } => write_dir(&dir),
        CrdsCommand::Install {
            cluster,
            force,
            timeout,
        } => {
            let client = cluster.client().await?;
            let crds = try_all_crds().context("rendering the CRDs")?;
            let done = causeway_runtime::crds::install_report(
                &client,
                &crds,
                FIELD_MANAGER,
                timeout,
                force,
            )
            .await?;
            for (name, action) in done {
                match action {
                    Action::Create => println!("{name} created"),
                    Action::Update => println!("{name} configured"),
                    Action::Keep(why) => println!("{name} kept: {why}"),
                }
            }
            Ok(())
        }
    }
}

fn write_dir(dir: &Path) -> anyhow::Result<()> {
    let rendered = render_all().context("rendering the CRDs")?;
    fs::create_dir_all(dir).with_context(|| format!("creating directory {}", dir.display()))?;
    for crd in &rendered {
        let path = dir.join(&crd.file_name);
        let unchanged = fs::read_to_string(&path).is_ok_and(|old| old == crd.yaml);
        if !unchanged {
            fs::write(&path, &crd.yaml).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let generated_by_us =
            fs::read_to_string(&path).is_ok_and(|c| c.starts_with(GENERATED_HEADER));
        if generated_by_us && !rendered.iter().any(|r| r.file_name == name) {
            fs::remove_file(&path).with_context(|| format!("removing stale {}", path.display()))?;
            eprintln!("removed stale {}", path.display());
        }
    }
    Ok(())
}
