//! The search API's query, parsed from a list request's parameters (federation.md §8
//! K.65–70; Clusterpedia's parameters, §4.4), with Causeway's fixes (★):
//!
//! - `orderby` takes fields from an allowlist ([`SortField`]); anything else is a 400
//!   that lists the allowed fields (Clusterpedia passes the raw name into SQL);
//! - the order is always total: the requested keys, then (cluster, namespace, name) as
//!   tie-breakers, so pages never repeat or skip an object that stays as it is; with no
//!   `orderby` the order is (cluster, namespace, name). Every allowed key but
//!   `resource_version` is fixed for an object's life: ordered by `resource_version`, an
//!   object that changes between pages moves (seen twice ascending, missed descending),
//!   since the store keeps no earlier versions to page through;
//! - `continue` is an opaque **keyset** token ([`ContinueToken`]): the sort key of the
//!   last object returned and a fingerprint of the query it belongs to (its resource
//!   included), never an offset, so deep pages cost what the first does and a token
//!   cannot be replayed on another query;
//! - selectors of more than [`MAX_REQUIREMENTS`] requirements, and a `fuzzy-name` no
//!   name can hold, are a 400 before the store is asked.
//!
//! Pure: no store, no clock.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[cfg(test)]
mod tests;

/// A field results can be ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SortField {
    /// The member cluster's name.
    Cluster,
    /// `metadata.namespace` ("" for cluster-scoped objects).
    Namespace,
    /// `metadata.name`.
    Name,
    /// `metadata.creationTimestamp`.
    CreatedAt,
    /// `metadata.resourceVersion`, compared as a number.
    ResourceVersion,
}

impl SortField {
    /// Every allowed field, as `orderby` spells it.
    pub const ALLOWED: [(&'static str, SortField); 5] = [
        ("cluster", SortField::Cluster),
        ("namespace", SortField::Namespace),
        ("name", SortField::Name),
        ("created_at", SortField::CreatedAt),
        ("resource_version", SortField::ResourceVersion),
    ];

    fn parse(s: &str) -> Option<SortField> {
        let s = match s {
            "creationTimestamp" | "metadata.creationTimestamp" => "created_at",
            "resourceVersion" | "metadata.resourceVersion" => "resource_version",
            "metadata.namespace" => "namespace",
            "metadata.name" => "name",
            other => other,
        };
        Self::ALLOWED
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, f)| *f)
    }
}

/// One key of the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SortKey {
    /// The field.
    pub field: SortField,
    /// Descending.
    pub desc: bool,
}

/// The most namespaces one request may name (`namespaces=`, after duplicates are
/// dropped): each namespace a caller may not list cluster-wide is one
/// SubjectAccessReview on the hub, so more is a 400 before anything is reviewed.
pub const MAX_NAMESPACES: usize = 100;

/// The 400 of a request naming more than [`MAX_NAMESPACES`] namespaces.
pub fn too_many_namespaces(n: usize) -> Option<QueryError> {
    (n > MAX_NAMESPACES).then(|| {
        bad(format!(
            "namespaces= names {n} namespaces; at most {MAX_NAMESPACES} are taken (each one may cost a review of your rights on the hub): name fewer, split the request, or leave namespaces= out to see every namespace you may list"
        ))
    })
}

/// The most requirements a `labelSelector`, and the most terms a `fieldSelector`, may
/// have: each is a condition the store evaluates, and SQLite refuses an expression
/// deeper than 1000 (a 503 when it is asked); more is a 400 before the store is asked.
pub const MAX_REQUIREMENTS: usize = 100;

/// The longest Kubernetes name (a DNS subdomain): a `fuzzy-name` longer than this is in
/// no name.
pub const MAX_NAME_LEN: usize = 253;

/// The 400 of a selector (`param`) with more than [`MAX_REQUIREMENTS`] requirements.
fn too_many_requirements(param: &str, n: usize, what: &str) -> Option<QueryError> {
    (n > MAX_REQUIREMENTS).then(|| {
        bad(format!(
            "{param} has {n} requirements; at most {MAX_REQUIREMENTS} are taken (each one is a condition the store evaluates): drop repeated ones, write the values one {what} may take as one `{what} in (a,b)`, or split the request"
        ))
    })
}

/// The deepest owner search: `ownerSeniority` above this is a bad request.
pub const MAX_SENIORITY: u32 = 8;

/// Owner search (K.70): the objects whose owner `seniority` levels up (0: the direct
/// owner, 1: the owner's owner...) is the given one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct OwnerQuery {
    /// The owner, by uid (then name and group-resource are ignored) or by name and
    /// group-resource (`deployments.apps`).
    pub owner: Owner,
    /// How many levels up the owner is.
    pub seniority: u32,
}

/// Who the owner is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Owner {
    /// By uid.
    Uid(String),
    /// By name and group-resource (`deployments.apps`, `replicasets.apps`; core
    /// resources without a group, e.g. `nodes`).
    Name {
        /// Name.
        name: String,
        /// Group-resource.
        group_resource: String,
    },
}

/// A parsed search request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    /// Only these clusters (empty: all).
    pub clusters: Vec<String>,
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Only these exact names (empty: all).
    pub names: Vec<String>,
    /// Names containing this (K.69).
    pub fuzzy_name: Option<String>,
    /// A Kubernetes label selector, as given (the store evaluates it).
    pub label_selector: Option<String>,
    /// A field selector, as given.
    pub field_selector: Option<String>,
    /// Created at or after (K.68, half-open window).
    pub since: Option<Timestamp>,
    /// Created before.
    pub before: Option<Timestamp>,
    /// Owner search.
    pub owner: Option<OwnerQuery>,
    /// The total order: the requested keys then the tie-breakers.
    pub order: Vec<SortKey>,
    /// Page size; `None` for everything.
    pub limit: Option<u32>,
    /// Count what is left after this page.
    pub with_remaining_count: bool,
    /// Return a continue token when the page is full (`withContinue`, default true).
    pub with_continue: bool,
    /// The resource listed (`apps/v1/deployments`; `""` when not said): part of the
    /// fingerprint, so a continue token is good on its own resource only.
    pub resource: String,
    /// Where the previous page ended (not part of the fingerprint).
    pub after: Option<Vec<String>>,
    /// The resourceVersion of the list's first page, which every later page repeats
    /// (carried in the continue token, as kube-apiserver's pages share one snapshot's):
    /// a watch from the last page's starts where the first page was read (K.73).
    pub snapshot: Option<String>,
}

/// A request the API refuses (HTTP 400), saying what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

fn bad(msg: impl Into<String>) -> QueryError {
    QueryError(msg.into())
}

/// Splits a comma-separated list, dropping empty items.
pub(crate) fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Parses a creation-time bound: Unix seconds (10 digits), Unix milliseconds (13
/// digits), RFC 3339, or a UTC date (`2024-01-02`) or date-time (`2024-01-02 15:04:05`).
pub fn parse_time(param: &str, v: &str) -> Result<Timestamp, QueryError> {
    let v = v.trim();
    let wrong = || {
        bad(format!(
            "{param}={v:?} is not a time: give Unix seconds (10 digits) or milliseconds (13 digits), RFC 3339 (2024-01-02T15:04:05Z), or a UTC date (2024-01-02) or date-time (2024-01-02 15:04:05)"
        ))
    };
    if v.chars().all(|c| c.is_ascii_digit()) {
        let n: i64 = v.parse().map_err(|_| wrong())?;
        return match v.len() {
            10 => Timestamp::from_second(n).map_err(|_| wrong()),
            13 => Timestamp::from_millisecond(n).map_err(|_| wrong()),
            _ => Err(wrong()),
        };
    }
    if let Ok(t) = v.parse::<Timestamp>() {
        return Ok(t);
    }
    let civil = v
        .parse::<jiff::civil::DateTime>()
        .or_else(|_| {
            v.parse::<jiff::civil::Date>()
                .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
        })
        .map_err(|_| wrong())?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp())
        .map_err(|_| wrong())
}

/// Parameters that take one value: the first of several counts (kube-apiserver's
/// conversion of a repeated query parameter into a string field does the same).
const SINGLE_VALUED: &[&str] = &[
    "fuzzy-name",
    "fuzzyName",
    "labelSelector",
    "fieldSelector",
    "since",
    "before",
    "ownerUID",
    "ownerName",
    "ownerGR",
    "ownerSeniority",
    "limit",
    "continue",
    "withContinue",
    "withRemainingCount",
];

fn parse_order(v: &str) -> Result<Vec<SortKey>, QueryError> {
    let mut keys: Vec<SortKey> = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut words = item.split_whitespace();
        let field = words.next().unwrap_or_default();
        let (field, desc) = match (field.strip_suffix("_desc"), words.next()) {
            (Some(f), None) => (f, true),
            (None, None) => (field, false),
            (None, Some(d)) if d.eq_ignore_ascii_case("desc") => (field, true),
            (None, Some(d)) if d.eq_ignore_ascii_case("asc") => (field, false),
            _ => {
                return Err(bad(format!(
                    "orderby {item:?}: write `field`, `field desc` or `field_desc`"
                )));
            }
        };
        if words.next().is_some() {
            return Err(bad(format!(
                "orderby {item:?}: write `field`, `field desc` or `field_desc`"
            )));
        }
        let Some(field) = SortField::parse(field) else {
            let allowed: Vec<&str> = SortField::ALLOWED.iter().map(|(n, _)| *n).collect();
            return Err(bad(format!(
                "orderby {field:?} is not a field results can be ordered by; use one of {}",
                allowed.join(", ")
            )));
        };
        if keys.iter().any(|k| k.field == field) {
            return Err(bad(format!("orderby names {field:?} twice")));
        }
        keys.push(SortKey { field, desc });
    }
    Ok(keys)
}

impl fmt::Display for SortField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = SortField::ALLOWED
            .iter()
            .find(|(_, s)| s == self)
            .map(|(n, _)| *n)
            .unwrap_or("?");
        f.write_str(name)
    }
}

impl Query {
    /// The cluster an owner search resolves its owner in: the first one asked for
    /// (`""`, which holds nothing, without one).
    pub fn owner_cluster(&self) -> &str {
        self.clusters
            .first()
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Parses a list request's query parameters (repeated lists are joined, as for
    /// `clusters=a&clusters=b`, and so are `orderby` keys; of another parameter given
    /// twice, the first counts); `path_cluster` is the cluster named in the path
    /// (`…/resources/clusters/<c>/…`), if any.
    pub fn parse(
        params: &[(String, String)],
        path_cluster: Option<&str>,
    ) -> Result<Query, QueryError> {
        Query::parse_for(params, path_cluster, "")
    }

    /// [`Query::parse`] for a list of `resource` (`apps/v1/deployments`, `/v1/pods`):
    /// a continue token given out for another resource is refused, as kube-apiserver
    /// refuses one of another resource's key.
    pub fn parse_for(
        params: &[(String, String)],
        path_cluster: Option<&str>,
        resource: &str,
    ) -> Result<Query, QueryError> {
        let mut q = Query {
            with_continue: true,
            resource: resource.to_string(),
            ..Query::default()
        };
        let mut owner_uid = None;
        let mut owner_name = None;
        let mut owner_gr = None;
        let mut seniority = 0;
        let mut token = None;
        // a single-valued parameter given twice: the first counts, as in kube-apiserver
        let mut seen = std::collections::HashSet::new();
        for (k, v) in params {
            if SINGLE_VALUED.contains(&k.as_str()) && !seen.insert(k.as_str()) {
                continue;
            }
            match k.as_str() {
                "clusters" => q.clusters.extend(list(v)),
                "namespaces" => q.namespaces.extend(list(v)),
                "names" => q.names.extend(list(v)),
                "fuzzy-name" | "fuzzyName" => {
                    q.fuzzy_name = Some(v.trim().to_string()).filter(|s| !s.is_empty())
                }
                "labelSelector" => q.label_selector = Some(v.clone()).filter(|s| !s.is_empty()),
                "fieldSelector" => q.field_selector = Some(v.clone()).filter(|s| !s.is_empty()),
                "since" => q.since = Some(parse_time("since", v)?),
                "before" => q.before = Some(parse_time("before", v)?),
                "ownerUID" => owner_uid = Some(v.trim().to_string()).filter(|s| !s.is_empty()),
                "ownerName" => owner_name = Some(v.trim().to_string()).filter(|s| !s.is_empty()),
                "ownerGR" => owner_gr = Some(v.trim().to_string()).filter(|s| !s.is_empty()),
                "ownerSeniority" => {
                    seniority = v.trim().parse().map_err(|_| {
                        bad(format!(
                            "ownerSeniority={v:?}: give 0 (the direct owner), 1 (its owner), ..."
                        ))
                    })?;
                    if seniority > MAX_SENIORITY {
                        return Err(bad(format!(
                            "ownerSeniority={seniority}: at most {MAX_SENIORITY} levels"
                        )));
                    }
                }
                // repeated, its keys add up (`orderby=namespace&orderby=name desc`)
                "orderby" => {
                    for key in parse_order(v)? {
                        if q.order.iter().any(|k| k.field == key.field) {
                            return Err(bad(format!("orderby names {:?} twice", key.field)));
                        }
                        q.order.push(key);
                    }
                }
                "limit" => {
                    let n: u32 = v.trim().parse().map_err(|_| {
                        bad(format!(
                            "limit={v:?}: give a whole number of objects per page"
                        ))
                    })?;
                    q.limit = (n > 0).then_some(n);
                }
                "continue" => token = Some(v.clone()).filter(|s| !s.is_empty()),
                "withContinue" => q.with_continue = v != "false",
                "withRemainingCount" => q.with_remaining_count = v == "true" || v.is_empty(),
                // kubectl's own parameters, and watch parameters the list ignores
                _ => {}
            }
        }
        if let Some(c) = path_cluster {
            if !q.clusters.is_empty() && q.clusters.iter().any(|x| x != c) {
                return Err(bad(format!(
                    "the path names cluster {c:?} and clusters= names {:?}: give one or the other",
                    q.clusters
                )));
            }
            q.clusters = vec![c.to_string()];
        }
        q.clusters.sort();
        q.clusters.dedup();
        q.namespaces.sort();
        q.namespaces.dedup();
        q.names.sort();
        q.names.dedup();
        if let Some(e) = too_many_namespaces(q.namespaces.len()) {
            return Err(e);
        }
        // a selector that does not parse is left to the store, which says what is wrong
        if let Some(Ok(reqs)) = q
            .label_selector
            .as_deref()
            .map(k8s_validation::selector::parse)
            && let Some(e) = too_many_requirements("labelSelector", reqs.len(), "key")
        {
            return Err(e);
        }
        if let Some(Ok(terms)) = q.field_selector.as_deref().map(crate::store::fields::parse)
            && let Some(e) = too_many_requirements("fieldSelector", terms.len(), "field")
        {
            return Err(e);
        }
        if let Some(f) = &q.fuzzy_name {
            let n = f.chars().count();
            if n > MAX_NAME_LEN {
                return Err(bad(format!(
                    "fuzzy-name is {n} characters long; a Kubernetes name is at most {MAX_NAME_LEN}, so none holds it: give a part of the name"
                )));
            }
        }
        if let (Some(s), Some(b)) = (q.since, q.before)
            && s >= b
        {
            return Err(bad(format!(
                "since ({s}) is not before before ({b}): the window [since, before) is empty"
            )));
        }
        let owner = match (owner_uid, owner_name, owner_gr) {
            (Some(uid), _, _) => Some(Owner::Uid(uid)),
            (None, Some(name), Some(group_resource)) => Some(Owner::Name {
                name,
                group_resource,
            }),
            (None, Some(_), None) => {
                return Err(bad(
                    "ownerName needs ownerGR (e.g. ownerGR=deployments.apps), or give ownerUID",
                ));
            }
            (None, None, Some(_)) => {
                return Err(bad("ownerGR needs ownerName, or give ownerUID"));
            }
            (None, None, None) => None,
        };
        if let Some(owner) = owner {
            if q.clusters.len() != 1 {
                return Err(bad(
                    "owner search needs exactly one cluster: name it in the path (…/resources/clusters/<cluster>/…) or in clusters=",
                ));
            }
            q.owner = Some(OwnerQuery { owner, seniority });
        }
        // a total order: the requested keys, then the tie-breakers
        for field in [SortField::Cluster, SortField::Namespace, SortField::Name] {
            if !q.order.iter().any(|k| k.field == field) {
                q.order.push(SortKey { field, desc: false });
            }
        }
        if let Some(t) = token {
            let t = ContinueToken::decode(&t)?;
            if t.query != q.fingerprint() {
                return Err(bad(
                    "the continue token belongs to another query (another resource or cluster, or the filters or order changed): list again without continue",
                ));
            }
            if t.after.len() != q.order.len() {
                return Err(bad(
                    "the continue token is damaged: list again without continue",
                ));
            }
            q.after = Some(t.after);
            q.snapshot = t.rv;
        }
        Ok(q)
    }

    /// A fingerprint of what the query selects (the resource, the path's cluster and
    /// the filters) and how it orders (not the page size nor where the page starts): a
    /// continue token is only good for the same query.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_vec(&(
            &self.resource,
            &self.clusters,
            &self.namespaces,
            &self.names,
            &self.fuzzy_name,
            &self.label_selector,
            &self.field_selector,
            self.since.map(|t| t.as_millisecond()),
            self.before.map(|t| t.as_millisecond()),
            &self.owner,
            &self.order,
        ))
        .unwrap_or_default();
        Sha256::digest(&json)[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The continue token for a page that ended with an object whose sort key (one
    /// value per [`Query::order`] key, as the store renders it) is `last`.
    pub fn continue_after(&self, last: Vec<String>) -> String {
        ContinueToken {
            query: self.fingerprint(),
            after: last,
            rv: self.snapshot.clone(),
        }
        .encode()
    }
}

/// An opaque keyset continue token: the query's fingerprint and the sort key of the
/// last object of the page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    /// [`Query::fingerprint`].
    pub query: String,
    /// The sort key of the last object returned.
    pub after: Vec<String>,
    /// [`Query::snapshot`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rv: Option<String>,
}

impl ContinueToken {
    /// Base64url (no padding) of the JSON.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The token a previous page returned; anything else is a clear error.
    pub fn decode(s: &str) -> Result<ContinueToken, QueryError> {
        let damaged = || {
            bad("the continue token is not one this server gave out: list again without continue")
        };
        let bytes = URL_SAFE_NO_PAD.decode(s.trim()).map_err(|_| damaged())?;
        serde_json::from_slice(&bytes).map_err(|_| damaged())
    }
}
