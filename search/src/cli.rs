//! `causeway search <resource>`: one query across every member, printed like `kubectl
//! get` with a CLUSTER column. A client of the search API: it reads the server's
//! discovery to resolve the resource (plural, singular, kind or short name), asks for
//! Table output page by page (keyset continue tokens) and prints every row.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, bail};
use causeway_runtime::client::Source;
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::Value;

/// `causeway search` flags (besides `serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct QueryArgs {
    /// What to list: a resource as kubectl names it (pods, po, deployments, deploy,
    /// deployments.apps, Deployment, svc, cm, nodes...).
    pub resource: Option<String>,
    /// Only these member clusters (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub clusters: Vec<String>,
    /// Only this namespace (default: every namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Label selector, as kubectl's -l (`app=web,tier in (fe,be)`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Field selector: =, !=, in, notin, exists (`status.phase=Running`,
    /// `metadata.annotations[team]`).
    #[arg(long)]
    pub field_selector: Option<String>,
    /// Names containing this.
    #[arg(long)]
    pub name: Option<String>,
    /// Order: comma-separated fields of cluster, namespace, name, created_at,
    /// resource_version, each optionally followed by " desc" (`--sort "created_at desc"`).
    /// Default: cluster, namespace, name.
    #[arg(long)]
    pub sort: Option<String>,
    /// Owner search: the objects owned by KIND/NAME (`deployment/web`); needs exactly one
    /// --clusters.
    #[arg(long, value_name = "KIND/NAME")]
    pub owner: Option<String>,
    /// How many levels up the owner is: 0 its direct owner, 1 the owner's owner (Pods of
    /// a Deployment, through their ReplicaSet).
    #[arg(long, default_value_t = 0)]
    pub seniority: u32,
    /// Created at or after (RFC 3339, a date, or Unix seconds/milliseconds).
    #[arg(long)]
    pub since: Option<String>,
    /// Created before.
    #[arg(long)]
    pub before: Option<String>,
    /// After the list, print each change as it comes, as `kubectl get -w` does (a row for
    /// each object added, changed or deleted in any member), until interrupted. Takes
    /// --clusters, -n, -l and --field-selector only.
    #[arg(short = 'w', long, conflicts_with_all = ["name", "sort", "owner", "since", "before"])]
    pub watch: bool,
    /// Objects per request (pages are followed until the end).
    #[arg(long, default_value_t = 500)]
    pub chunk_size: u32,
    /// Kubeconfig holding the search server's context (default: $KUBECONFIG or
    /// ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context whose server is the search API (causeway-local writes one
    /// named `search`).
    #[arg(long, default_value = "search")]
    pub context: String,
}

/// Runs a query and prints the table; returns the number of rows.
pub async fn run(args: &QueryArgs) -> anyhow::Result<usize> {
    let Some(resource) = args.resource.as_deref() else {
        bail!(
            "name what to list, e.g. `causeway search pods -l app=web`, or run the server with `causeway search serve`"
        );
    };
    let client = Source {
        kubeconfig: args.kubeconfig.as_deref(),
        context: Some(&args.context),
        kubeconfig_flag: "--kubeconfig",
        context_flag: "--context",
    }
    .client()
    .await?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("reading the search server's discovery")?;
    let (ar, scope) = resolve(&discovery, resource)?;
    let owner_gr = match owner_of(args)? {
        Some((kind, _)) => {
            let (owner, _) = resolve(&discovery, kind).map_err(|e| {
                anyhow::anyhow!("--owner {kind}/…: owner search walks indexed owners only: {e}")
            })?;
            Some(group_resource(&owner))
        }
        None => None,
    };
    let params = params(args, owner_gr.as_deref())?;
    let namespaced = scope == Scope::Namespaced;
    let path = list_path(&ar, &scope, args.namespace.as_deref());
    let mut out = Vec::new();
    // the first page's: every page carries it, and a watch from it misses nothing
    let mut listed_at: Option<String> = None;
    let mut headers: Option<Vec<String>> = None;
    let mut cont: Option<String> = None;
    for _ in 0..100_000 {
        let mut p = params.clone();
        p.push(("limit".into(), args.chunk_size.to_string()));
        if let Some(c) = &cont {
            p.push(("continue".into(), c.clone()));
        }
        let req = table_request(&path, &p)?;
        let table: Value = tokio::time::timeout(Duration::from_secs(60), client.request(req))
            .await
            .context("the search server did not answer within 60 s")?
            .map_err(describe)?;
        if headers.is_none() {
            headers = Some(columns(&table, namespaced));
            listed_at = resource_version(&table);
        }
        out.extend(rows(&table, namespaced));
        cont = table
            .pointer("/metadata/continue")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if cont.is_none() {
            break;
        }
    }
    let headers = headers.unwrap_or_default();
    let widths = if out.is_empty() {
        eprintln!("No resources found.");
        headers.iter().map(|h| h.chars().count()).collect()
    } else {
        let widths = widths(&headers, &out);
        print!("{}", render(&widths, &headers, &out));
        widths
    };
    if args.watch {
        let Some(rv) = listed_at else {
            bail!(
                "nothing to watch from: no member's {resource} are indexed yet, or you may see no cluster; try again once the search server has indexed them"
            );
        };
        // an empty list printed no header: the first change's row brings it
        let header = out
            .is_empty()
            .then(|| render_rows(&widths, std::slice::from_ref(&headers)));
        watch(&client, &path, &params, rv, namespaced, &widths, header).await?;
    }
    Ok(out.len())
}

/// A GET of `path` with `params`, asking for Table output.
fn table_request(
    path: &str,
    params: &[(String, String)],
) -> anyhow::Result<http::Request<Vec<u8>>> {
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    Ok(http::Request::get(format!("{path}?{query}"))
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(Vec::new())?)
}

fn resource_version(table: &Value) -> Option<String> {
    table
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        .map(str::to_string)
}

/// Prints the rows of every change from `rv` on, in `widths` (after `header`, if any);
/// watches again from the last change when the server ends the watch (its timeout),
/// until an error.
async fn watch(
    client: &kube::Client,
    path: &str,
    params: &[(String, String)],
    mut rv: String,
    namespaced: bool,
    widths: &[usize],
    mut header: Option<String>,
) -> anyhow::Result<()> {
    use futures::TryStreamExt;
    use kube::api::WatchEvent;
    use std::io::Write;
    loop {
        let opened = std::time::Instant::now();
        let mut p = params.to_vec();
        p.push(("watch".into(), "true".into()));
        p.push(("resourceVersion".into(), rv.clone()));
        // a quiet watch's resourceVersion moves on with the members': watching again
        // after the server's timeout is not from a version they no longer have
        p.push(("allowWatchBookmarks".into(), "true".into()));
        let events = client
            .request_events::<Value>(table_request(path, &p)?)
            .await
            .map_err(|e| match e {
                // the members filter a watch themselves: they take fewer field selectors
                // than a search does
                kube::Error::Api(s) if s.code == 400 && params.iter().any(|(k, _)| k == "fieldSelector") => anyhow::anyhow!(
                    "the search server refused the watch: {} (a watch's --field-selector goes to every member, which takes only = and != on its type's field labels: metadata.name and metadata.namespace on every type, a few more on some, e.g. status.phase on Pods; list without -w to filter on any field)",
                    s.message
                ),
                e => describe(e),
            })?;
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.try_next().await.map_err(describe)? {
            let table = match event {
                WatchEvent::Added(t) | WatchEvent::Modified(t) | WatchEvent::Deleted(t) => t,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) if e.code == 410 => bail!(
                    "the changes can no longer be followed: {}; run the command again",
                    e.message
                ),
                WatchEvent::Error(e) => bail!("the search server ended the watch: {}", e.message),
            };
            if let Some(next) = resource_version(&table) {
                rv = next;
            }
            let mut stdout = std::io::stdout().lock();
            if let Some(h) = header.take() {
                stdout.write_all(h.as_bytes())?;
            }
            stdout.write_all(render_rows(widths, &rows(&table, namespaced)).as_bytes())?;
            stdout.flush()?;
        }
        // a watch that ended at once is not opened again at once
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(opened.elapsed())).await;
    }
}

fn describe(e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => anyhow::anyhow!("the search server refused: {}", s.message),
        other => anyhow::anyhow!("cannot reach the search server: {other}"),
    }
}

/// The query parameters of the flags.
fn params(args: &QueryArgs, owner_gr: Option<&str>) -> anyhow::Result<Vec<(String, String)>> {
    let mut p: Vec<(String, String)> = Vec::new();
    if !args.clusters.is_empty() {
        p.push(("clusters".into(), args.clusters.join(",")));
    }
    let mut push = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            p.push((k.into(), v.clone()));
        }
    };
    push("labelSelector", &args.selector);
    push("fieldSelector", &args.field_selector);
    push("fuzzy-name", &args.name);
    push("orderby", &args.sort);
    push("since", &args.since);
    push("before", &args.before);
    if let Some((_, name)) = owner_of(args)? {
        let Some(gr) = owner_gr else {
            bail!("--owner: the owner's type is not known to the search server");
        };
        p.push(("ownerName".into(), name.into()));
        p.push(("ownerGR".into(), gr.into()));
        p.push(("ownerSeniority".into(), args.seniority.to_string()));
    } else if args.seniority != 0 {
        bail!("--seniority needs --owner KIND/NAME");
    }
    Ok(p)
}

/// `--owner KIND/NAME`, checked: one cluster named (owner search runs in one).
fn owner_of(args: &QueryArgs) -> anyhow::Result<Option<(&str, &str)>> {
    let Some(owner) = &args.owner else {
        return Ok(None);
    };
    let Some((kind, name)) = owner
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
    else {
        bail!("--owner {owner:?}: give KIND/NAME, e.g. --owner deployment/web");
    };
    let mut clusters = args.clusters.clone();
    clusters.sort();
    clusters.dedup();
    if clusters.len() != 1 {
        bail!("--owner needs exactly one --clusters (owner search runs in one cluster)");
    }
    Ok(Some((kind, name)))
}

/// `deployments.apps`, `nodes`: how ownerGR names a type.
fn group_resource(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// The type the server indexes under that name (plural, kind, `plural.group` or a
/// kubectl short name).
fn resolve(discovery: &Discovery, name: &str) -> anyhow::Result<(ApiResource, Scope)> {
    let want = name.to_ascii_lowercase();
    let mut known = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            let dotted = group_resource(&ar);
            let hit = ar.plural == want
                || ar.kind.to_ascii_lowercase() == want
                || dotted == want
                || causeway_runtime::table::columns::short_names(&ar.group, &ar.plural)
                    .contains(&want.as_str());
            if hit {
                return Ok((ar, caps.scope));
            }
            known.push(dotted);
        }
    }
    known.sort();
    bail!(
        "the search server indexes no resource named {name:?}; it indexes: {}",
        known.join(", ")
    )
}

fn list_path(ar: &ApiResource, scope: &Scope, ns: Option<&str>) -> String {
    let base = if ar.group.is_empty() {
        format!("/api/{}", ar.version)
    } else {
        format!("/apis/{}/{}", ar.group, ar.version)
    };
    match (scope, ns) {
        (Scope::Namespaced, Some(ns)) => format!(
            "{base}/namespaces/{}/{}",
            form_urlencoded::byte_serialize(ns.as_bytes()).collect::<String>(),
            ar.plural
        ),
        _ => format!("{base}/{}", ar.plural),
    }
}

/// Headers: the server's columns (CLUSTER, NAME, ...), with NAMESPACE after CLUSTER for
/// namespaced types; wide-only columns (priority > 0) left out.
fn columns(table: &Value, namespaced: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in defs(table).enumerate() {
        if i == 1 && namespaced {
            out.push("NAMESPACE".into());
        }
        out.push(
            c.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_uppercase(),
        );
    }
    out
}

fn defs(table: &Value) -> impl Iterator<Item = &Value> {
    table
        .get("columnDefinitions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("priority").and_then(Value::as_i64).unwrap_or(0) == 0)
}

fn rows(table: &Value, namespaced: bool) -> Vec<Vec<String>> {
    let shown: Vec<usize> = table
        .get("columnDefinitions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.get("priority").and_then(Value::as_i64).unwrap_or(0) == 0)
        .map(|(i, _)| i)
        .collect();
    table
        .get("rows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let cells = r.get("cells").and_then(Value::as_array);
            let mut out = Vec::new();
            for (n, i) in shown.iter().enumerate() {
                if n == 1 && namespaced {
                    out.push(
                        r.pointer("/object/metadata/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    );
                }
                let cell = cells.and_then(|c| c.get(*i)).unwrap_or(&Value::Null);
                out.push(match cell {
                    Value::String(s) => s.clone(),
                    Value::Null => "<none>".into(),
                    other => other.to_string(),
                });
            }
            out
        })
        .collect()
}

/// `headers` and `rows` as kubectl prints a table (three spaces between columns), for
/// every command-line table of the project.
pub fn table(headers: &[String], rows: &[Vec<String>]) -> String {
    render(&widths(headers, rows), headers, rows)
}

/// The width of each column: its widest cell or header.
fn widths(headers: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < width.len() {
                width[i] = width[i].max(c.chars().count());
            }
        }
    }
    width
}

/// The header and rows padded to `widths` as kubectl pads them (three spaces between
/// columns).
fn render(widths: &[usize], headers: &[String], rows: &[Vec<String>]) -> String {
    let mut out = render_rows(widths, &[headers.to_vec()]);
    out.push_str(&render_rows(widths, rows));
    out
}

/// Rows padded to `widths` (a wider cell pushes the rest of its row along).
fn render_rows(widths: &[usize], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for line in rows {
        let mut s = String::new();
        for (i, c) in line.iter().enumerate() {
            if i + 1 == line.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}   ", w = widths.get(i).copied().unwrap_or(0));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_rows_get_a_namespace_column_after_cluster() {
        let t = json!({
            "columnDefinitions": [
                {"name": "Cluster", "priority": 0}, {"name": "Name", "priority": 0},
                {"name": "Ready", "priority": 0}, {"name": "Node", "priority": 1}],
            "rows": [
                {"cells": ["east", "web-1", "1/1", "n1"], "object": {"metadata": {"namespace": "shop"}}},
                {"cells": ["west-long", "web-2", null, "n2"], "object": {"metadata": {"namespace": "demo"}}}]
        });
        let h = columns(&t, true);
        assert_eq!(h, ["CLUSTER", "NAMESPACE", "NAME", "READY"]);
        let r = rows(&t, true);
        assert_eq!(r[1], ["west-long", "demo", "web-2", "<none>"]);
        assert_eq!(
            render(&widths(&h, &r), &h, &r),
            "CLUSTER     NAMESPACE   NAME    READY\neast        shop        web-1   1/1\nwest-long   demo        web-2   <none>\n"
        );
        assert_eq!(columns(&t, false), ["CLUSTER", "NAME", "READY"]);
    }

    #[test]
    fn flags_become_search_parameters() {
        let mut a = QueryArgs {
            resource: Some("pods".into()),
            clusters: vec!["east".into()],
            namespace: None,
            selector: Some("app=web".into()),
            field_selector: None,
            name: Some("web".into()),
            sort: Some("created_at desc".into()),
            owner: Some("deployment/web".into()),
            seniority: 1,
            since: None,
            before: None,
            watch: false,
            chunk_size: 500,
            kubeconfig: None,
            context: "search".into(),
        };
        let p = params(&a, Some("deployments.apps")).unwrap();
        let get = |k: &str| p.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        assert_eq!(get("clusters"), Some("east"));
        assert_eq!(get("labelSelector"), Some("app=web"));
        assert_eq!(get("fuzzy-name"), Some("web"));
        assert_eq!(get("orderby"), Some("created_at desc"));
        assert_eq!(get("ownerGR"), Some("deployments.apps"));
        assert_eq!(get("ownerSeniority"), Some("1"));
        a.clusters.push("east".into());
        assert!(
            owner_of(&a).is_ok(),
            "the same cluster twice is one cluster"
        );
        a.clusters.push("west".into());
        let e = owner_of(&a).unwrap_err().to_string();
        assert!(e.contains("exactly one --clusters"), "{e}");
        a.clusters.truncate(1);
        a.owner = Some("web".into());
        assert!(owner_of(&a).unwrap_err().to_string().contains("KIND/NAME"));
        a.owner = None;
        let e = params(&a, None).unwrap_err().to_string();
        assert!(e.contains("--seniority needs --owner"), "{e}");
        a.seniority = 0;
        assert!(params(&a, None).is_ok());
    }
}
