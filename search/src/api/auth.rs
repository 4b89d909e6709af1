//! Who is asking and what they may see, decided by the hub (★ K.72: results filtered by
//! the caller's hub RBAC, not served with the server's own rights): a TokenReview of
//! the bearer token, then SubjectAccessReviews (list of the type, cluster-wide or per
//! namespace the store holds; get of each member's Cluster object). Answers are cached
//! for [`TTL`] per token hash, so a kubectl paging through a list costs the hub a few
//! reviews, not a few per page.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_validation::impersonation::Impersonation;
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::api::status::{Reply, failure};
use crate::store::{Gvr, Scope, Store, StoreError};

/// How long a review's answer is reused.
pub const TTL: Duration = Duration::from_secs(30);

/// Cached answers beyond this are dropped, oldest first (expired ones are the oldest).
const MAX_CACHED: usize = 50_000;

/// Reviews run at once for one request.
const PARALLEL_REVIEWS: usize = 16;

/// The group and resource of the hub's member registry (`Cluster`, causeway-crds).
pub const CLUSTERS: (&str, &str) = ("causeway.io", "clusters");

/// Why a request is refused or cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum Denied {
    /// No or a bad token: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// The hub or the store cannot answer: 503.
    #[error("{0}")]
    Unavailable(String),
    /// The caller may not impersonate whom the request names: 403.
    #[error("{0}")]
    Forbidden(String),
    /// Impersonation headers that do not make a request: 400.
    #[error("{0}")]
    BadRequest(String),
}

impl Denied {
    /// The Status response: 401, 503, 403 or 400.
    pub fn reply(self) -> Reply {
        match self {
            Denied::Unauthenticated(m) => failure(StatusCode::UNAUTHORIZED, m),
            Denied::Unavailable(m) => failure(StatusCode::SERVICE_UNAVAILABLE, m),
            Denied::Forbidden(m) => failure(StatusCode::FORBIDDEN, m),
            Denied::BadRequest(m) => failure(StatusCode::BAD_REQUEST, m),
        }
    }
}

impl From<StoreError> for Denied {
    /// The client is told the store is not answering; why (hosts, databases) goes to the
    /// log only.
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "search store unavailable while reviewing a request; answered 503");
        Denied::Unavailable(crate::api::status::STORE_UNAVAILABLE.into())
    }
}

/// What a request reads.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    /// The type.
    pub gvr: &'a Gvr,
    /// Whether it is namespaced.
    pub namespaced: bool,
    /// `list`, or `get` of `name`.
    pub verb: &'static str,
    /// The name got, `""` for a list.
    pub name: &'a str,
    /// The namespaces the request is limited to (path or `namespaces=`); empty: every
    /// namespace the store holds the type in.
    pub namespaces: &'a [String],
}

/// An authenticated caller: the token's hash (the cache key) and who the hub says it is.
#[derive(Clone, Debug)]
pub struct Caller {
    key: [u8; 32],
    /// Who the hub says the token belongs to.
    pub user: UserInfo,
}

/// What one access review asks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Ask {
    verb: &'static str,
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    /// A non-resource URL (`/metrics`): then only `verb` counts.
    path: String,
}

/// Answers kept for a while ([`TTL`]), at most so many ([`MAX_CACHED`]). A full cache
/// drops its oldest answer for a new one, one at a time: one caller asking many new
/// questions (a `namespaces=` of new names after another) only ages the cache, it never
/// empties everyone's answers at once (every caller's next request would be reviewed
/// again, all at the same moment).
struct Cache<K, V> {
    max: usize,
    ttl: Duration,
    entries: Mutex<Entries<K, V>>,
}

/// A cache's answers, and the order they were put in.
struct Entries<K, V> {
    /// Each key's answer, when it was put and its place in `order`.
    map: HashMap<K, (u64, Instant, V)>,
    /// Keys by when they were put, oldest first.
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K: Eq + std::hash::Hash + Clone, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Self::with_limits(MAX_CACHED, TTL)
    }

    fn with_limits(max: usize, ttl: Duration) -> Self {
        Cache {
            max: max.max(1),
            ttl,
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                order: BTreeMap::new(),
                next: 0,
            }),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        self.entries
            .lock()
            .map
            .get(k)
            .filter(|(_, at, _)| at.elapsed() < self.ttl)
            .map(|(_, _, v)| v.clone())
    }

    fn put(&self, k: K, v: V) {
        let mut guard = self.entries.lock();
        let e = &mut *guard;
        if let Some((seq, _, _)) = e.map.remove(&k) {
            e.order.remove(&seq);
        }
        // the oldest first: the expired ones, then, while full, the oldest of the others
        while let Some(entry) = e.order.first_entry() {
            let expired = e
                .map
                .get(entry.get())
                .is_none_or(|(_, at, _)| at.elapsed() >= self.ttl);
            if !expired && e.map.len() < self.max {
                break;
            }
            let oldest = entry.remove();
            e.map.remove(&oldest);
        }
        let seq = e.next;
        e.next += 1;
        e.order.insert(seq, k.clone());
        e.map.insert(k, (seq, Instant::now(), v));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().map.len()
    }
}

/// The cache key of a user whose identity the server did not review itself (a front
/// proxy's, an impersonated one): every part of it, each tagged and length-prefixed, so
/// two different users never share one (`origin`: how it came; `from`: the caller's
/// key for an impersonated user).
fn user_key(origin: &[u8], from: &[u8], user: &UserInfo) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut part = |tag: u8, bytes: &[u8]| {
        h.update([tag]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(b'o', origin);
    part(b'f', from);
    part(
        b'n',
        user.username.as_deref().unwrap_or_default().as_bytes(),
    );
    part(b'u', user.uid.as_deref().unwrap_or_default().as_bytes());
    for g in user.groups.iter().flatten() {
        part(b'g', g.as_bytes());
    }
    for (k, vs) in user.extra.iter().flatten() {
        part(b'k', k.as_bytes());
        for v in vs {
            part(b'v', v.as_bytes());
        }
    }
    h.finalize().into()
}

/// The hub's answers, cached.
pub struct Auth {
    hub: kube::Client,
    tokens: Cache<[u8; 32], Result<UserInfo, String>>,
    reviews: Cache<([u8; 32], Ask), bool>,
}

impl Auth {
    /// Reviews against `hub` (its identity needs create on tokenreviews and
    /// subjectaccessreviews: the `system:auth-delegator` ClusterRole).
    pub fn new(hub: kube::Client) -> Auth {
        Auth {
            hub,
            tokens: Cache::new(),
            reviews: Cache::new(),
        }
    }

    /// The caller of an `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, Denied> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Denied::Unauthenticated(
                    "Unauthorized: send a hub bearer token (Authorization: Bearer <token>) in the kubeconfig's user"
                        .into(),
                )
            })?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let answer = match self.tokens.get(&key) {
            Some(a) => a,
            None => {
                let a = self.review_token(token).await?;
                self.tokens.put(key, a.clone());
                a
            }
        };
        match answer {
            Ok(user) => Ok(Caller { key, user }),
            Err(why) => Err(Denied::Unauthenticated(format!(
                "Unauthorized: the hub does not accept this token ({why})"
            ))),
        }
    }

    /// The caller a verified front proxy names (see [`super::front_proxy`]); its
    /// reviews are cached per user, uid, groups and extras.
    pub fn front_proxy_caller(&self, user: UserInfo) -> Caller {
        Caller {
            key: user_key(b"front-proxy", &[], &user),
            user,
        }
    }

    /// The caller a request acts as: `caller`, or whom its `Impersonate-*` headers name
    /// (`kubectl --as`), once the hub says `caller` may impersonate each of them, as
    /// kube-apiserver's impersonation filter asks it. The impersonated user's reviews
    /// are cached apart from the caller's.
    pub async fn impersonate(
        &self,
        caller: Caller,
        headers: &http::HeaderMap,
    ) -> Result<Caller, Denied> {
        let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
        let Some(imp) = Impersonation::from_headers(pairs).map_err(Denied::BadRequest)? else {
            return Ok(caller);
        };
        let who = caller.user.username.clone().unwrap_or_default();
        for a in imp.asks() {
            let ask = Ask {
                verb: "impersonate",
                group: a.group.into(),
                resource: a.resource.into(),
                subresource: a.subresource.clone(),
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                path: String::new(),
            };
            if !self.allowed(&caller, ask).await? {
                return Err(Denied::Forbidden(a.forbidden(&who)));
            }
        }
        let u = imp.user();
        let user = UserInfo {
            username: Some(u.name),
            uid: Some(u.uid).filter(|s| !s.is_empty()),
            groups: Some(u.groups),
            extra: Some(u.extra).filter(|e| !e.is_empty()),
        };
        Ok(Caller {
            key: user_key(b"impersonated", &caller.key, &user),
            user,
        })
    }

    async fn review_token(&self, token: &str) -> Result<Result<UserInfo, String>, Denied> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let out = Api::<TokenReview>::all(self.hub.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "TokenReview on the hub failed; answered 503");
                Denied::Unavailable(
                    "cannot check the token with the hub (TokenReview): try again later (the search server's log says why)"
                        .into(),
                )
            })?;
        let status = out.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(user),
            _ => Err(status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "not authenticated".into())),
        })
    }

    /// Whether `caller` may `verb` objects of `gvr` in `namespace` (cached).
    pub async fn allowed_in(
        &self,
        caller: &Caller,
        verb: &'static str,
        gvr: &Gvr,
        namespace: &str,
    ) -> Result<bool, Denied> {
        let ask = Ask {
            verb,
            group: gvr.group.clone(),
            resource: gvr.resource.clone(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: String::new(),
            path: String::new(),
        };
        self.allowed(caller, ask).await
    }

    /// Whether `caller` may `verb` the non-resource URL `path` (`get` `/metrics`, as
    /// kube-apiserver asks for its own; cached).
    pub async fn allowed_path(
        &self,
        caller: &Caller,
        verb: &'static str,
        path: &str,
    ) -> Result<bool, Denied> {
        let ask = Ask {
            verb,
            group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.into(),
        };
        self.allowed(caller, ask).await
    }

    async fn allowed(&self, caller: &Caller, ask: Ask) -> Result<bool, Denied> {
        let k = (caller.key, ask);
        if let Some(a) = self.reviews.get(&k) {
            return Ok(a);
        }
        let ask = &k.1;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: caller.user.username.clone(),
                uid: caller.user.uid.clone(),
                groups: caller.user.groups.clone(),
                extra: caller.user.extra.clone(),
                non_resource_attributes: (!ask.path.is_empty()).then(|| NonResourceAttributes {
                    path: Some(ask.path.clone()),
                    verb: Some(ask.verb.into()),
                }),
                resource_attributes: ask.path.is_empty().then(|| ResourceAttributes {
                    verb: Some(ask.verb.into()),
                    group: Some(ask.group.clone()),
                    resource: Some(ask.resource.clone()),
                    subresource: Some(ask.subresource.clone()).filter(|s| !s.is_empty()),
                    namespace: Some(ask.namespace.clone()).filter(|s| !s.is_empty()),
                    name: Some(ask.name.clone()).filter(|s| !s.is_empty()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        };
        let out = Api::<SubjectAccessReview>::all(self.hub.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "SubjectAccessReview on the hub failed; answered 503");
                Denied::Unavailable(
                    "cannot check access with the hub (SubjectAccessReview): try again later (the search server's log says why)"
                        .into(),
                )
            })?;
        let allowed = out.status.is_some_and(|s| s.allowed);
        self.reviews.put(k, allowed);
        Ok(allowed)
    }

    /// Runs `asks` (at most [`PARALLEL_REVIEWS`] at once); the allowed ones' `pick`.
    async fn allowed_of(
        &self,
        caller: &Caller,
        asks: Vec<(String, Ask)>,
    ) -> Result<BTreeSet<String>, Denied> {
        let answers: Vec<Result<(String, bool), Denied>> = futures::stream::iter(asks)
            .map(|(item, ask)| async move { Ok((item, self.allowed(caller, ask).await?)) })
            .buffer_unordered(PARALLEL_REVIEWS)
            .collect()
            .await;
        let mut out = BTreeSet::new();
        for a in answers {
            let (item, ok) = a?;
            if ok {
                out.insert(item);
            }
        }
        Ok(out)
    }

    /// What `caller` may see of `want`: the clusters whose Cluster object they may get,
    /// and the namespaces they may list (or get the name) in. `None` when nothing at all.
    pub async fn scope(
        &self,
        caller: &Caller,
        store: &Store,
        want: &Access<'_>,
    ) -> Result<Option<Scope>, Denied> {
        let Access {
            gvr,
            namespaced,
            verb,
            name,
            namespaces: asked,
        } = *want;
        let ask = |verb, group: &str, resource: &str, namespace: &str, name: &str| Ask {
            verb,
            group: group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        };
        let clusters = if self
            .allowed(caller, ask("get", CLUSTERS.0, CLUSTERS.1, "", ""))
            .await?
        {
            None
        } else {
            let asks = store
                .clusters()
                .await?
                .into_iter()
                .map(|c| {
                    let a = ask("get", CLUSTERS.0, CLUSTERS.1, "", &c);
                    (c, a)
                })
                .collect();
            let allowed = self.allowed_of(caller, asks).await?;
            if allowed.is_empty() {
                return Ok(None);
            }
            Some(allowed)
        };
        let everywhere = ask(verb, &gvr.group, &gvr.resource, "", name);
        // kube-apiserver reviews a get of namespaces/<ns> in namespace <ns> (the request's
        // namespace is the name): a user bound in <ns> only may get it
        let namespaces = if self.allowed(caller, everywhere).await?
            || (is_own_namespace(gvr, verb, name)
                && self
                    .allowed(caller, ask(verb, &gvr.group, &gvr.resource, name, name))
                    .await?)
        {
            None
        } else if !namespaced {
            return Ok(None);
        } else {
            let candidates = if asked.is_empty() {
                let in_clusters: Vec<String> = clusters.iter().flatten().cloned().collect();
                store.namespaces(gvr, &in_clusters).await?
            } else {
                asked.to_vec()
            };
            let asks = candidates
                .into_iter()
                .map(|ns| {
                    let a = ask(verb, &gvr.group, &gvr.resource, &ns, name);
                    (ns, a)
                })
                .collect();
            let allowed = self.allowed_of(caller, asks).await?;
            if allowed.is_empty() {
                return Ok(None);
            }
            Some(allowed)
        };
        Ok(Some(Scope {
            clusters,
            namespaces,
        }))
    }
}

/// Whether a request is a get of one Namespace, which kube-apiserver reviews in that
/// namespace (its RequestInfo names the namespace for the namespaces resource).
fn is_own_namespace(gvr: &Gvr, verb: &str, name: &str) -> bool {
    gvr.group.is_empty() && gvr.resource == "namespaces" && verb == "get" && !name.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str], extra: &[(&str, &[&str])]) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            extra: Some(
                extra
                    .iter()
                    .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
                    .collect(),
            ),
            uid: None,
        }
    }

    /// A full cache drops its oldest answer for each new one (expired answers first),
    /// never every answer at once.
    #[test]
    fn a_full_cache_evicts_its_oldest_answers_one_at_a_time() {
        let c: Cache<u32, bool> = Cache::with_limits(3, Duration::from_secs(60));
        for k in 1..=3 {
            c.put(k, true);
        }
        c.put(4, true);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&1), None, "the oldest went");
        assert_eq!(
            (c.get(&2), c.get(&3), c.get(&4)),
            (Some(true), Some(true), Some(true))
        );
        // an answer put again is new again: 3 is now the oldest
        c.put(2, false);
        c.put(5, true);
        assert_eq!(c.get(&3), None);
        assert_eq!(
            (c.get(&2), c.get(&4), c.get(&5)),
            (Some(false), Some(true), Some(true))
        );
        // ten thousand new questions leave the cache full, never empty
        for k in 100..10_100 {
            c.put(k, true);
            assert_eq!(c.len(), 3);
        }
        assert_eq!(c.get(&10_099), Some(true));

        // expired answers go first, and are not answered
        let c: Cache<u32, bool> = Cache::with_limits(10, Duration::from_millis(50));
        c.put(1, true);
        c.put(2, true);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(c.get(&1), None);
        c.put(3, true);
        assert_eq!(c.len(), 1, "both expired answers went");
        assert_eq!(c.get(&3), Some(true));
    }

    /// Different identities never share cached answers: a group that reads like an
    /// extra, an extra key holding "=", another origin or caller.
    #[test]
    fn user_keys_tell_every_identity_apart() {
        let keys = [
            user_key(
                b"i",
                b"c",
                &user("a", &["system:authenticated", "k=v"], &[]),
            ),
            user_key(
                b"i",
                b"c",
                &user("a", &["system:authenticated"], &[("k", &["v"])]),
            ),
            user_key(b"i", b"c", &user("a", &[], &[("a", &["b=c"])])),
            user_key(b"i", b"c", &user("a", &[], &[("a=b", &["c"])])),
            user_key(b"i", b"c", &user("ab", &[], &[])),
            user_key(b"i", b"c", &user("a", &["b"], &[])),
            user_key(b"i", b"other", &user("a", &["b"], &[])),
            user_key(b"front-proxy", b"", &user("a", &["b"], &[])),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        // and the same identity always gets the same key
        assert_eq!(
            keys[0],
            user_key(
                b"i",
                b"c",
                &user("a", &["system:authenticated", "k=v"], &[])
            )
        );
    }
}
