//! Filling the members fast: a million objects through the API would take minutes of
//! requests, so the bench writes them straight into each member's kubesim journal
//! (`Config::data_dir`, the file kubesim replays at start) and restarts the clusterset
//! on it. The first start writes the bootstrap objects (namespaces, nodes, roles) that
//! a journal with objects in it would otherwise lack.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use causeway_e2e::{Clusterset, Options};
use serde_json::{Value, json};

use crate::objects::{self, Shape};

/// Appends every object of member `member` (named `cluster`) to `<dir>/journal.jsonl`,
/// with resourceVersions after the journal's last; returns how many were written.
pub fn append(dir: &Path, shape: Shape, member: u64, cluster: &str) -> anyhow::Result<u64> {
    let path = dir.join("journal.jsonl");
    let file = std::fs::File::open(&path)
        .with_context(|| format!("reading {} (written by the first start)", path.display()))?;
    let mut rv = 0;
    for line in BufReader::new(file).lines() {
        let rec: Value = serde_json::from_str(&line?).context("a journal line")?;
        rv = rv.max(rec["rv"].as_u64().unwrap_or(0));
    }
    let out = OpenOptions::new()
        .append(true)
        .open(&path)
        .with_context(|| format!("appending to {}", path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut n = 0;
    let mut failed = None;
    objects::each(shape, member, cluster, |(group, resource, mut obj)| {
        if failed.is_some() {
            return;
        }
        rv += 1;
        n += 1;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let m = &obj["metadata"];
        let rec = json!({"op": "put", "rv": rv, "group": group, "resource": resource,
                         "namespace": m.get("namespace").cloned().unwrap_or(json!("")),
                         "name": m["name"].clone(), "object": obj});
        if let Err(e) = writeln!(out, "{rec}") {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(n)
}

/// Starts the clusterset of `opts` (which must have a `data_dir`) once to write the
/// bootstrap objects, stops it, appends every member's objects to its journal, and
/// starts it again on them.
pub async fn start(opts: &Options, shape: Shape) -> anyhow::Result<Clusterset> {
    let dir = opts
        .data_dir
        .clone()
        .context("populating needs a data directory")?;
    let first = Clusterset::start(opts, |_| {}).await?;
    first.shutdown();
    drop(first);
    let members = opts.members.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for (i, m) in members.iter().enumerate() {
            let n = append(&dir.join(m), shape, i as u64, m)?;
            tracing::info!(member = %m, objects = n, "journal written");
        }
        Ok(())
    })
    .await??;
    Clusterset::start(opts, |_| {}).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};

    /// The members serve what the journal holds, next to their bootstrap objects.
    #[tokio::test]
    async fn a_restarted_member_serves_the_journaled_objects() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            members: vec!["member-1".into()],
            simulate_workloads: false,
            data_dir: Some(dir.path().to_path_buf()),
            ..Options::default()
        };
        let shape = Shape { pods: 250 };
        let cs = start(&opts, shape).await.unwrap();
        let client = causeway_e2e::client(&cs.members[0]).await.unwrap();
        let pods: Api<Pod> = Api::all(client.clone());
        let list = pods.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 250);
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
        let names: Vec<String> = ns
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        assert!(names.contains(&"default".to_string()), "{names:?}");
        assert!(names.contains(&"ns-01".to_string()), "{names:?}");
        cs.shutdown();
    }
}
