//! The query driver: the searches a user makes, timed one request at a time through one
//! keep-alive client (or, with `--direct`, straight against the store, to tell the
//! API's share apart). Every answer is checked against what the members hold, so a
//! fast wrong answer is reported, not timed as a success.

use std::time::{Duration, Instant};

use anyhow::Context;
use causeway_search::api::route::PREFIX;
use causeway_search::query::Query;
use causeway_search::store::{Gvr, Scope, Store};
use serde_json::Value;

use crate::objects::{Shape, TIERS, deployment_name, mix};
use crate::server::Api;

/// Pages walked per label + namespace search.
const LABEL_PAGES: usize = 5;
/// The page the deep walks reach.
pub const DEEP_PAGE: usize = 50;
/// Objects per page.
const LIMIT: usize = 100;

/// Where queries go.
pub enum Target {
    /// The search API over HTTPS.
    Http(Api),
    /// The store itself (no HTTP, no RBAC, no encoding).
    Direct(Store),
}

/// One list request: core Pods, optionally in one namespace, with these parameters.
struct Req {
    namespace: Option<String>,
    params: Vec<(String, String)>,
}

/// One page: its items and the continue token.
struct PageOut {
    items: Vec<Value>,
    next: Option<String>,
}

impl Target {
    /// Lists one page (after `cont`), returning it and the request's time.
    async fn list(&self, req: &Req, cont: Option<&str>) -> anyhow::Result<(PageOut, Duration)> {
        let mut params = req.params.clone();
        if let Some(c) = cont {
            params.push(("continue".into(), c.into()));
        }
        let t = Instant::now();
        let page = match self {
            Target::Http(api) => {
                let path = match &req.namespace {
                    Some(ns) => format!("{PREFIX}/api/v1/namespaces/{ns}/pods"),
                    None => format!("{PREFIX}/api/v1/pods"),
                };
                let query: String = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(&params)
                    .finish();
                let v = api.json(&format!("{path}?{query}")).await?;
                let next = v
                    .pointer("/metadata/continue")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(String::from);
                let items = match v.get("items") {
                    Some(Value::Array(a)) => a.clone(),
                    _ => anyhow::bail!("the answer to {path}?{query} has no items: {v}"),
                };
                PageOut { items, next }
            }
            Target::Direct(store) => {
                if let Some(ns) = &req.namespace {
                    params.push(("namespaces".into(), ns.clone()));
                }
                let q = Query::parse(&params, None).context("parsing the query")?;
                let gvr = Gvr {
                    group: String::new(),
                    version: "v1".into(),
                    resource: "pods".into(),
                };
                let page = store.search(&gvr, &q, &Scope::default()).await?;
                PageOut {
                    items: page.items,
                    next: page.continue_token,
                }
            }
        };
        Ok((page, t.elapsed()))
    }
}

/// The timings of every kind of search, and what came back wrong.
#[derive(Debug, Default)]
pub struct Timings {
    /// Label + namespace search, each page of each walk.
    pub label_pages: Vec<Duration>,
    /// Owner search (a Deployment's Pods in one cluster).
    pub owner: Vec<Duration>,
    /// Fuzzy name search.
    pub fuzzy: Vec<Duration>,
    /// The deep walks: time of page `i` (0-based) of each walk.
    pub deep: Vec<Vec<Duration>>,
    /// Answers that were not what the members hold.
    pub wrong: Vec<String>,
}

fn pair(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

/// Runs `samples` of each search against `target` over `members` (each of `shape`).
pub async fn run(
    target: &Target,
    shape: Shape,
    members: &[String],
    samples: usize,
) -> anyhow::Result<Timings> {
    let mut t = Timings::default();
    // a first request opens the connection (TLS) outside the samples
    let warm = Req {
        namespace: None,
        params: vec![pair("limit", "1")],
    };
    target.list(&warm, None).await?;

    // label + namespace, walking pages
    let mut i = 0u64;
    while t.label_pages.len() < samples {
        let ns = Shape::namespace((i * 7) % shape.namespaces());
        let tier = TIERS[(i % TIERS.len() as u64) as usize];
        let req = Req {
            namespace: Some(ns.clone()),
            params: vec![
                pair(
                    "labelSelector",
                    format!("tier={tier},version in (v1,v2,v3)"),
                ),
                pair("limit", LIMIT.to_string()),
            ],
        };
        let want = members.len() as u64
            * shape.pods_where(|d| {
                shape.namespace_of(d) == ns
                    && shape.tier_of(d) == tier
                    && Shape::version_of(d) != "v4"
            });
        let want = want.min((LABEL_PAGES * LIMIT) as u64) as usize;
        let mut got = 0;
        let mut cont: Option<String> = None;
        for _ in 0..LABEL_PAGES {
            let (out, took) = target.list(&req, cont.as_deref()).await?;
            tracing::info!(%ns, tier, ms = took.as_millis() as u64, items = out.items.len(), "label + namespace page");
            t.label_pages.push(took);
            got += out.items.len();
            if let Some(bad) = out.items.iter().find(|p| {
                p.pointer("/metadata/namespace") != Some(&Value::from(ns.clone()))
                    || p.pointer("/metadata/labels/tier") != Some(&Value::from(tier))
            }) {
                t.wrong.push(format!(
                    "tier={tier} in {ns} returned {}",
                    bad.pointer("/metadata/name").unwrap_or(&Value::Null)
                ));
            }
            cont = out.next;
            if cont.is_none() {
                break;
            }
        }
        if got != want {
            t.wrong.push(format!(
                "tier={tier} in {ns}: {got} Pods in up to {LABEL_PAGES} pages, not {want}"
            ));
        }
        i += 1;
    }

    // owner search: one Deployment's Pods in one cluster, through its ReplicaSet
    for i in 0..samples as u64 {
        let cluster = &members[(i % members.len() as u64) as usize];
        let d = mix(i) % shape.deployments();
        let want = shape.pods_of(d) as usize;
        let req = Req {
            namespace: None,
            params: vec![
                pair("ownerName", deployment_name(d)),
                pair("ownerGR", "deployments.apps"),
                pair("ownerSeniority", "1"),
                pair("clusters", cluster.clone()),
            ],
        };
        let (out, took) = target.list(&req, None).await?;
        tracing::info!(%cluster, deployment = deployment_name(d), ms = took.as_millis() as u64, items = out.items.len(), "owner search sample");
        t.owner.push(took);
        if out.items.len() != want {
            t.wrong.push(format!(
                "owner {} in {cluster}: {} Pods, not {want}",
                deployment_name(d),
                out.items.len()
            ));
        }
    }

    // fuzzy name: a Deployment's name, so its Pods (in every member) match
    for i in 0..samples as u64 {
        let d = mix(i ^ 0xf022) % shape.deployments();
        let name = deployment_name(d);
        let req = Req {
            namespace: None,
            params: vec![
                pair("fuzzyName", name.clone()),
                pair("limit", LIMIT.to_string()),
            ],
        };
        let (out, took) = target.list(&req, None).await?;
        tracing::info!(%name, ms = took.as_millis() as u64, items = out.items.len(), "fuzzy name sample");
        t.fuzzy.push(took);
        // its own Pods in every member, and maybe others whose name contains it
        let min = (members.len() as u64 * shape.pods_of(d)).min(LIMIT as u64) as usize;
        if out.items.len() < min {
            t.wrong.push(format!(
                "fuzzy {name}: {} Pods, not at least {min}",
                out.items.len()
            ));
        }
    }

    // deep walks: every Pod of a tier in every member, page after page
    for tier in TIERS {
        let req = Req {
            namespace: None,
            params: vec![
                pair("labelSelector", format!("tier={tier}")),
                pair("limit", LIMIT.to_string()),
            ],
        };
        let mut walk = Vec::new();
        let mut cont: Option<String> = None;
        for _ in 0..DEEP_PAGE {
            let (out, took) = target.list(&req, cont.as_deref()).await?;
            walk.push(took);
            cont = out.next;
            if cont.is_none() {
                break;
            }
        }
        t.deep.push(walk);
    }
    Ok(t)
}

/// How many objects of `resource` (e.g. `/api/v1/pods`) the API holds.
pub async fn count(api: &Api, path: &str) -> anyhow::Result<u64> {
    let v = api
        .json(&format!("{PREFIX}{path}?limit=1&withRemainingCount=true"))
        .await?;
    let first = v["items"].as_array().map_or(0, Vec::len) as u64;
    let rest = v
        .pointer("/metadata/remainingItemCount")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok(first + rest)
}

/// Objects a member of `shape` holds of the bench's types (for `count`'s paths).
pub fn expected(shape: Shape) -> [(&'static str, u64); 3] {
    let d = shape.deployments();
    [
        ("/apis/apps/v1/deployments", d),
        ("/apis/apps/v1/replicasets", d),
        ("/api/v1/pods", shape.pods),
    ]
}
