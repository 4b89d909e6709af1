//! The member registry as the controller sees it: `Cluster` objects and their
//! credential Secrets on the hub, turned into one kube client per member. A change of
//! endpoint, CA or token gives the member a new fingerprint, so its workers restart
//! with the new credentials; a deleted Cluster stops them.

use std::collections::BTreeMap;

use base64::Engine;
use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::join::MemberAccess;

/// The hub's Clusters and member credential Secrets, cached and listed (waits up to
/// 30 s for both); `wake` is woken on every change. What the hub controller and the
/// search server follow the registry with.
pub async fn caches(
    hub: &kube::Client,
    wake: std::sync::Arc<causeway_runtime::reflect::Wake>,
    stop: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<(
    causeway_runtime::reflect::Cache<Cluster>,
    causeway_runtime::reflect::Cache<Secret>,
)> {
    use causeway_runtime::reflect::cache;
    use kube::runtime::watcher;
    let clusters = cache(
        kube::Api::<Cluster>::all(hub.clone()),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "hub clusters",
        None,
    );
    let secrets = cache(
        kube::Api::<Secret>::namespaced(hub.clone(), causeway_crds::well_known::SYSTEM_NAMESPACE),
        watcher::Config::default(),
        wake,
        stop.clone(),
        "hub member credentials",
        None,
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let _ = clusters.wait_until_ready().await;
        let _ = secrets.wait_until_ready().await;
    })
    .await
    .map_err(|_| anyhow::anyhow!("could not list Clusters and Secrets on the hub within 30 s (are the CRDs installed and the credentials right?)"))?;
    Ok((clusters, secrets))
}

/// One member the controller can reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    /// Cluster object name.
    pub name: String,
    /// Cluster id (source-cluster label value).
    pub id: String,
    /// How to reach it.
    pub access: MemberAccess,
    /// Changes whenever anything in `access` or `id` changes.
    pub fingerprint: String,
}

/// Why a Cluster cannot be used yet (reported, not fatal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// Cluster name.
    pub name: String,
    /// What is missing.
    pub reason: String,
}

/// What was last said about each unusable member, so each reason is said once.
#[derive(Debug, Default)]
pub struct Told(BTreeMap<String, String>);

impl Told {
    /// The members of `unusable` whose reason was not said yet (new, or changed); members
    /// no longer in `unusable` are forgotten, so a reason that comes back is said again.
    /// What is returned counts as said.
    pub fn news<'a>(&mut self, unusable: &'a [Unusable]) -> Vec<&'a Unusable> {
        self.0
            .retain(|name, _| unusable.iter().any(|u| &u.name == name));
        unusable
            .iter()
            .filter(|u| self.0.insert(u.name.clone(), u.reason.clone()).as_ref() != Some(&u.reason))
            .collect()
    }
}

fn secret_str(s: &Secret, key: &str) -> Option<String> {
    if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone()).ok();
    }
    s.string_data.as_ref().and_then(|d| d.get(key)).cloned()
}

/// The oldest Cluster (by creation, then name) registered before `c`, not being
/// deleted, of which `same` holds.
fn registered_before(
    clusters: &[Cluster],
    c: &Cluster,
    same: impl Fn(&Cluster) -> bool,
) -> Option<String> {
    let key = |x: &Cluster| {
        (
            x.metadata.creation_timestamp.clone().map(|t| t.0),
            x.name_any(),
        )
    };
    clusters
        .iter()
        .filter(|o| o.name_any() != c.name_any() && same(o))
        .filter(|o| o.metadata.deletion_timestamp.is_none() && key(o) < key(c))
        .min_by_key(|o| key(o))
        .map(|o| o.name_any())
}

/// The older Cluster (by creation, then name) with the same kube-system uid as `c`.
fn same_cluster_registered_before(clusters: &[Cluster], c: &Cluster) -> Option<String> {
    let uid = c.spec.kube_system_uid.as_deref()?;
    registered_before(clusters, c, |o| {
        o.spec.kube_system_uid.as_deref() == Some(uid)
    })
}

/// Pure (CID-5): the cluster id of `c` and the older Cluster (by creation, then name)
/// that already uses it, if any. Two members with one id would each take the other's
/// exports (labelled with that id) for its own and withdraw them, so only the older
/// one is a member. `causeway join` refuses such an id, but a Cluster written by hand
/// or by two joins at once is not checked there.
pub fn id_used_before(clusters: &[Cluster], c: &Cluster) -> Option<(String, String)> {
    let id = c.cluster_id()?;
    registered_before(clusters, c, |o| o.cluster_id() == Some(id))
        .map(|first| (id.to_string(), first))
}

/// Pure: the reason `c`'s cluster id `id`, already used by Cluster `first`, keeps it
/// out of the members.
pub fn id_taken_reason(id: &str, first: &str) -> String {
    format!(
        "cluster id \"{id}\" is already used by Cluster \"{first}\" (each member's exports are told apart by its id): give this Cluster another spec.id, or delete one of the two"
    )
}

/// Who reads the members, which decides which Clusters count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The hub controller's per-member workers: Push members only (a Pull member's
    /// workers run in its agent).
    HubWorkers,
    /// The search server, which only lists and watches: every member whose Cluster
    /// gives an endpoint and credentials — Push members, and Pull members registered
    /// with `--search-access`.
    Search,
}

/// Pure: the members reachable in push mode from Clusters and Secrets.
pub fn members(
    clusters: &[Cluster],
    secrets: &[Secret],
) -> (BTreeMap<String, MemberSpec>, Vec<Unusable>) {
    members_for(Reader::HubWorkers, clusters, secrets)
}

/// Pure: the members `reader` reaches from Clusters and Secrets, and why the others
/// cannot be reached.
pub fn members_for(
    reader: Reader,
    clusters: &[Cluster],
    secrets: &[Secret],
) -> (BTreeMap<String, MemberSpec>, Vec<Unusable>) {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for c in clusters {
        let name = c.name_any();
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if c.spec.sync_mode == ClusterSyncMode::Pull {
            match reader {
                // a Pull member's workers run in its agent
                Reader::HubWorkers => continue,
                Reader::Search if c.spec.api_endpoint.is_none() => {
                    bad.push(Unusable {
                        name: name.clone(),
                        reason: format!(
                            "pull member registered without read access for search: re-run `causeway register {name} --search-access` (its API server must be reachable from the search server; --member-api-endpoint says where)"
                        ),
                    });
                    continue;
                }
                Reader::Search => {}
            }
        }
        if let Some(first) = same_cluster_registered_before(clusters, c) {
            bad.push(Unusable {
                name,
                reason: format!(
                    "it is the same cluster as \"{first}\" (same kube-system uid); a cluster can be a member only once: delete one of the two"
                ),
            });
            continue;
        }
        if let Some((id, first)) = id_used_before(clusters, c) {
            bad.push(Unusable {
                name,
                reason: id_taken_reason(&id, &first),
            });
            continue;
        }
        match member_spec(c, secrets) {
            Ok(m) => {
                out.insert(name, m);
            }
            Err(reason) => bad.push(Unusable { name, reason }),
        }
    }
    (out, bad)
}

/// Pure: how the hub reaches member `c` (a Push member, or a Pull member registered
/// with `--search-access`), or what is missing.
pub fn member_spec(c: &Cluster, secrets: &[Secret]) -> Result<MemberSpec, String> {
    let name = c.name_any();
    let Some(server) = c.spec.api_endpoint.clone() else {
        return Err("spec.apiEndpoint is not set".into());
    };
    let Some(sref) = &c.spec.secret_ref else {
        return Err("spec.secretRef is not set".into());
    };
    if sref.namespace != causeway_crds::well_known::SYSTEM_NAMESPACE {
        return Err(format!(
            "spec.secretRef names namespace {}: the hub reads member credentials from {} only; put the Secret there (`causeway join` does)",
            sref.namespace,
            causeway_crds::well_known::SYSTEM_NAMESPACE
        ));
    }
    let Some(secret) = secrets.iter().find(|s| {
        s.namespace().as_deref() == Some(sref.namespace.as_str()) && s.name_any() == sref.name
    }) else {
        return Err(format!("Secret {}/{} not found", sref.namespace, sref.name));
    };
    let Some(token) = secret_str(secret, "token") else {
        return Err(format!(
            "Secret {}/{} has no key token",
            sref.namespace, sref.name
        ));
    };
    let ca_pem = c
        .spec
        .ca_bundle
        .as_ref()
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|b| String::from_utf8(b).ok())
        .or_else(|| secret_str(secret, "caBundle"));
    let id = c.cluster_id().unwrap_or(&name).to_string();
    let access = MemberAccess {
        server,
        ca_pem,
        token,
    };
    let mut h = Sha256::new();
    for part in [
        id.as_str(),
        access.server.as_str(),
        access.ca_pem.as_deref().unwrap_or(""),
        access.token.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let fingerprint = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(MemberSpec {
        name,
        id,
        access,
        fingerprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_crds::federation::cluster::{ClusterSecretRef, ClusterSpec};
    use serde_json::json;

    fn cluster(name: &str, endpoint: Option<&str>) -> Cluster {
        Cluster::new(
            name,
            ClusterSpec {
                api_endpoint: endpoint.map(String::from),
                secret_ref: Some(ClusterSecretRef {
                    namespace: causeway_crds::well_known::SYSTEM_NAMESPACE.into(),
                    name: format!("{name}-credentials"),
                }),
                ..Default::default()
            },
        )
    }

    fn secret(name: &str, token: &str) -> Secret {
        serde_json::from_value(json!({"metadata": {"name": format!("{name}-credentials"), "namespace": causeway_crds::well_known::SYSTEM_NAMESPACE}, "stringData": {"token": token}})).unwrap()
    }

    #[test]
    fn pull_members_and_second_registrations_get_no_hub_workers() {
        let mut pull = cluster("west", None);
        pull.spec.sync_mode = ClusterSyncMode::Pull;
        let mut first = cluster("east", Some("https://e"));
        first.spec.kube_system_uid = Some("u-1".into());
        first.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1).unwrap(),
            ));
        let mut again = cluster("east-again", Some("https://e"));
        again.spec.kube_system_uid = Some("u-1".into());
        again.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(2).unwrap(),
            ));
        let (m, bad) = members(
            &[pull, first, again],
            &[
                secret("east", "t"),
                secret("east-again", "t"),
                secret("west", "t"),
            ],
        );
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["east"]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].name, "east-again");
        assert!(
            bad[0].reason.contains("same cluster as \"east\""),
            "{}",
            bad[0].reason
        );
    }

    #[test]
    fn a_cluster_id_used_by_an_older_cluster_keeps_the_newer_one_out() {
        let at = |c: &mut Cluster, second: i64| {
            c.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::from_second(second).unwrap(),
                ));
        };
        // west: no spec.id, so its id is its name; east: made by hand with spec.id west
        let mut west = cluster("west", Some("https://w"));
        at(&mut west, 1);
        let mut east = cluster("east", Some("https://e"));
        east.spec.id = Some("west".into());
        at(&mut east, 2);
        // north came last with west's id too: named after the oldest, not east
        let mut north = cluster("north", Some("https://n"));
        north.spec.id = Some("west".into());
        at(&mut north, 3);
        let mut south = cluster("south", Some("https://s"));
        south.spec.id = Some("south.fleet".into());
        at(&mut south, 4);
        let secrets = ["west", "east", "north", "south"].map(|n| secret(n, "t"));
        let reason = |bad: &[Unusable], name: &str| {
            bad.iter()
                .find(|b| b.name == name)
                .map(|b| b.reason.clone())
        };
        for reader in [Reader::HubWorkers, Reader::Search] {
            // whatever order the cache lists them in
            for clusters in [
                vec![west.clone(), east.clone(), north.clone(), south.clone()],
                vec![south.clone(), north.clone(), east.clone(), west.clone()],
            ] {
                let (m, bad) = members_for(reader, &clusters, &secrets);
                assert_eq!(
                    m.keys().map(String::as_str).collect::<Vec<_>>(),
                    ["south", "west"],
                    "{reader:?}"
                );
                assert_eq!(m["west"].id, "west");
                assert_eq!(bad.len(), 2, "{reader:?}: {bad:?}");
                for name in ["east", "north"] {
                    assert_eq!(
                        reason(&bad, name).as_deref(),
                        Some(
                            "cluster id \"west\" is already used by Cluster \"west\" (each member's exports are told apart by its id): give this Cluster another spec.id, or delete one of the two"
                        ),
                        "{reader:?} {name}"
                    );
                }
            }
        }
        // the older one being deleted: the newer one takes over its id
        let mut leaving = west.clone();
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let (m, bad) = members(&[leaving, east.clone()], &secrets);
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["east"], "{bad:?}");
        assert_eq!(m["east"].id, "west");
        // the same physical cluster is said first: it is the more useful reason
        let mut again = east.clone();
        again.spec.kube_system_uid = Some("u-1".into());
        let mut first = west.clone();
        first.spec.kube_system_uid = Some("u-1".into());
        let (_, bad) = members(&[first, again], &secrets);
        assert!(
            reason(&bad, "east").is_some_and(|r| r.contains("same cluster as \"west\"")),
            "{bad:?}"
        );
    }

    #[test]
    fn members_need_endpoint_and_token_and_fingerprint_tracks_rotation() {
        let (m, bad) = members(
            &[
                cluster("east", Some("https://e")),
                cluster("west", None),
                cluster("north", Some("https://n")),
            ],
            &[secret("east", "t1")],
        );
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["east"]);
        assert_eq!(m["east"].id, "east");
        assert_eq!(bad.len(), 2);
        assert!(
            bad.iter()
                .any(|b| b.name == "west" && b.reason.contains("apiEndpoint"))
        );
        assert!(
            bad.iter()
                .any(|b| b.name == "north" && b.reason.contains("not found"))
        );
        let (m2, _) = members(
            &[cluster("east", Some("https://e"))],
            &[secret("east", "t2")],
        );
        assert_ne!(
            m["east"].fingerprint, m2["east"].fingerprint,
            "a rotated token restarts the member's workers"
        );
    }

    #[test]
    fn search_reads_pull_members_registered_with_search_access_and_says_why_not_others() {
        let pull = |name: &str, endpoint: Option<&str>| {
            let mut c = cluster(name, endpoint);
            c.spec.sync_mode = ClusterSyncMode::Pull;
            c
        };
        let mut elsewhere = cluster("up", Some("https://u"));
        elsewhere.spec.secret_ref.as_mut().unwrap().namespace = "default".into();
        let mut up_secret = secret("up", "t");
        up_secret.metadata.namespace = Some("default".into());
        let clusters = [
            cluster("east", Some("https://e")),
            pull("west", Some("https://w")),
            pull("north", None),
            pull("south", Some("https://s")),
            elsewhere,
        ];
        let secrets = [
            secret("east", "t"),
            secret("west", "t"),
            secret("north", "t"),
            up_secret,
        ];
        // (reader, indexed, unusable with what the reason must say)
        type Case<'a> = (Reader, &'a [&'a str], &'a [(&'a str, &'a str)]);
        let cases: [Case; 2] = [
            (
                Reader::HubWorkers,
                &["east"],
                &[(
                    "up",
                    "spec.secretRef names namespace default: the hub reads member credentials from causeway-system only",
                )],
            ),
            (
                Reader::Search,
                &["east", "west"],
                &[
                    ("north", "causeway register north --search-access"),
                    (
                        "south",
                        "Secret causeway-system/south-credentials not found",
                    ),
                    ("up", "causeway-system only"),
                ],
            ),
        ];
        for (reader, want, unusable) in cases {
            let (m, bad) = members_for(reader, &clusters, &secrets);
            assert_eq!(
                m.keys().map(String::as_str).collect::<Vec<_>>(),
                want,
                "{reader:?}"
            );
            assert_eq!(bad.len(), unusable.len(), "{reader:?}: {bad:?}");
            for (name, says) in unusable {
                let b = bad.iter().find(|b| b.name == *name).unwrap();
                assert!(b.reason.contains(says), "{reader:?} {name}: {}", b.reason);
            }
        }
        assert_eq!(
            members_for(Reader::Search, &clusters, &secrets).0["west"]
                .access
                .server,
            "https://w"
        );
    }

    #[test]
    fn each_reason_is_told_once_and_again_after_it_went_away() {
        let u = |name: &str, reason: &str| Unusable {
            name: name.into(),
            reason: reason.into(),
        };
        let mut told = Told::default();
        let names = |v: Vec<&Unusable>| v.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
        // (unusable this round, what is told)
        let rounds: [(Vec<Unusable>, &[&str]); 5] = [
            (vec![u("a", "no token"), u("b", "no endpoint")], &["a", "b"]),
            (vec![u("a", "no token"), u("b", "no endpoint")], &[]),
            (vec![u("a", "bad CA"), u("b", "no endpoint")], &["a"]),
            (vec![u("a", "bad CA")], &[]),
            (vec![u("a", "bad CA"), u("b", "no endpoint")], &["b"]),
        ];
        for (i, (unusable, want)) in rounds.iter().enumerate() {
            assert_eq!(names(told.news(unusable)), *want, "round {i}");
        }
    }
}
