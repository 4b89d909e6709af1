//! The members' objects: per member, Deployments → ReplicaSets → Pods (about
//! [`PODS_PER_RS`] Pods each, one ReplicaSet per Deployment) spread over up to
//! [`NAMESPACES`] namespaces, labelled as real workloads are (app, team, tier,
//! pod-template-hash, version) and owned as the Deployment controller owns them.
//! Deterministic: the same shape gives the same names, so the query driver knows what
//! exists without listing.

use serde_json::{Value, json};

/// Pods per ReplicaSet (and so per Deployment).
pub const PODS_PER_RS: u64 = 10;
/// Namespaces per member (fewer for small runs: at least 100 Pods each).
pub const NAMESPACES: u64 = 50;
/// The tier label's values.
pub const TIERS: [&str; 5] = ["frontend", "backend", "cache", "db", "worker"];
/// Teams (`team-0` … `team-11`).
pub const TEAMS: u64 = 12;
const WORDS: [&str; 16] = [
    "payments",
    "checkout",
    "catalog",
    "search",
    "orders",
    "billing",
    "auth",
    "profile",
    "inventory",
    "shipping",
    "ledger",
    "notify",
    "ratings",
    "pricing",
    "media",
    "gateway",
];
const ROLES: [&str; 4] = ["api", "worker", "web", "sync"];

/// What each member holds.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Pods per member.
    pub pods: u64,
}

impl Shape {
    /// Deployments (= ReplicaSets) per member.
    pub fn deployments(&self) -> u64 {
        self.pods.div_ceil(PODS_PER_RS)
    }

    /// Namespaces per member.
    pub fn namespaces(&self) -> u64 {
        (self.pods / 100).clamp(1, NAMESPACES)
    }

    /// Objects per member: Pods, ReplicaSets, Deployments (namespaces not counted).
    pub fn objects(&self) -> u64 {
        self.pods + 2 * self.deployments()
    }

    /// Namespace `i`.
    pub fn namespace(i: u64) -> String {
        format!("ns-{i:02}")
    }

    /// The namespace of Deployment `d`.
    pub fn namespace_of(&self, d: u64) -> String {
        Self::namespace(d % self.namespaces())
    }

    /// The version label of Deployment `d`: `v1` … `v4`.
    pub fn version_of(d: u64) -> String {
        format!("v{}", 1 + (d / 3) % 4)
    }

    /// Pods of Deployment `d`.
    pub fn pods_of(&self, d: u64) -> u64 {
        PODS_PER_RS.min(self.pods - d * PODS_PER_RS)
    }

    /// Pods (in one member) of the Deployments `select` picks.
    pub fn pods_where(&self, select: impl Fn(u64) -> bool) -> u64 {
        (0..self.deployments())
            .filter(|d| select(*d))
            .map(|d| self.pods_of(d))
            .sum()
    }

    /// The tier of Deployment `d` (independent of its namespace).
    pub fn tier_of(&self, d: u64) -> &'static str {
        TIERS[((d / self.namespaces()) % TIERS.len() as u64) as usize]
    }
}

/// The name of Deployment `d`: `payments-api-17`.
pub fn deployment_name(d: u64) -> String {
    let w = WORDS[(d % WORDS.len() as u64) as usize];
    let r = ROLES[((d / WORDS.len() as u64) % ROLES.len() as u64) as usize];
    format!("{w}-{r}-{d}")
}

/// A cheap, well-mixed hash (splitmix64).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `n` characters of Kubernetes' name-suffix alphabet (no vowels) from `seed`.
fn suffix(seed: u64, n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = mix(seed);
    (0..n)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// A UUID-shaped uid, unique per (member, kind, index).
fn uid(member: u64, kind: u64, i: u64) -> String {
    format!("{member:08x}-{kind:04x}-4000-8000-{i:012x}")
}

/// An RFC 3339 time `secs` after 2026-10-01T00:00:00Z.
fn time(secs: u64) -> String {
    let base = jiff::Timestamp::from_second(1_790_812_800).expect("a valid time");
    (base + jiff::SignedDuration::from_secs(secs as i64)).to_string()
}

/// One object and the resource it is stored as: (group, resource, object).
pub type Stored = (&'static str, &'static str, Value);

/// Every object of member `member` (0-based index; `cluster` its name), Namespaces
/// first, handed to `out` one at a time (a million need not be held at once).
pub fn each(shape: Shape, member: u64, cluster: &str, mut out: impl FnMut(Stored)) {
    for n in 0..shape.namespaces() {
        let name = Shape::namespace(n);
        out((
            "",
            "namespaces",
            json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "uid": uid(member, 0, n), "creationTimestamp": time(0),
                             "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}
            }),
        ));
    }
    for d in 0..shape.deployments() {
        let pods = shape.pods_of(d);
        let (name, ns) = (deployment_name(d), shape.namespace_of(d));
        let hash = suffix(d, 10);
        let team = format!("team-{}", (d / 7) % TEAMS);
        let version = Shape::version_of(d);
        let created = d * 13;
        let labels =
            json!({"app": name, "team": team, "tier": shape.tier_of(d), "version": version});
        let mut pod_labels = labels.clone();
        pod_labels["pod-template-hash"] = json!(hash);
        let image = format!("registry.example.com/{team}/{name}:{version}");
        let container = json!({"name": "app", "image": image,
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}});
        let template =
            json!({"metadata": {"labels": pod_labels}, "spec": {"containers": [container]}});
        let (dep_uid, rs_uid) = (uid(member, 1, d), uid(member, 2, d));
        let rs_name = format!("{name}-{hash}");
        out((
            "apps",
            "deployments",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns, "uid": dep_uid, "creationTimestamp": time(created),
                             "generation": 1, "labels": labels,
                             "annotations": {"deployment.kubernetes.io/revision": "1"}},
                "spec": {"replicas": pods, "selector": {"matchLabels": {"app": name}}, "template": template},
                "status": {"observedGeneration": 1, "replicas": pods, "readyReplicas": pods,
                           "availableReplicas": pods, "updatedReplicas": pods}
            }),
        ));
        out((
            "apps",
            "replicasets",
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs_name, "namespace": ns, "uid": rs_uid, "creationTimestamp": time(created),
                             "generation": 1, "labels": pod_labels,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                                  "uid": dep_uid, "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"replicas": pods, "selector": {"matchLabels": {"app": name, "pod-template-hash": hash}},
                         "template": template},
                "status": {"observedGeneration": 1, "replicas": pods, "readyReplicas": pods, "availableReplicas": pods}
            }),
        ));
        for k in 0..pods {
            let p = d * PODS_PER_RS + k;
            out((
                "",
                "pods",
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("{rs_name}-{}", suffix(p ^ 0x5eed, 5)), "namespace": ns,
                                 "uid": uid(member, 3, p), "creationTimestamp": time(created + 2),
                                 "labels": pod_labels,
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                                                      "uid": rs_uid, "controller": true, "blockOwnerDeletion": true}]},
                    "spec": {"containers": [container], "nodeName": format!("{cluster}-node-{}", p % 20),
                             "restartPolicy": "Always", "serviceAccountName": "default"},
                    "status": {"phase": "Running", "podIP": format!("10.{}.{}.{}", 100 + member, (p >> 8) & 255, p & 255),
                               "startTime": time(created + 3),
                               "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": time(created + 5)}]}
                }),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts, owners and label spread of a small member.
    #[test]
    fn a_member_has_owned_labelled_objects_in_every_namespace() {
        let shape = Shape { pods: 5_005 };
        let mut seen: std::collections::BTreeMap<&str, u64> = Default::default();
        let mut names = std::collections::BTreeSet::new();
        let mut tiers_in_ns0 = std::collections::BTreeSet::new();
        let mut rs_uids = std::collections::BTreeSet::new();
        each(shape, 3, "member-4", |(_, resource, obj)| {
            *seen.entry(resource).or_default() += 1;
            let m = &obj["metadata"];
            let key = (
                resource,
                m["namespace"].to_string(),
                m["name"].as_str().unwrap().to_string(),
            );
            assert!(names.insert(key.clone()), "duplicate {key:?}");
            match resource {
                "replicasets" => {
                    rs_uids.insert(m["uid"].as_str().unwrap().to_string());
                    assert_eq!(m["ownerReferences"][0]["kind"], "Deployment");
                }
                "pods" => {
                    let owner = m["ownerReferences"][0]["uid"].as_str().unwrap();
                    assert!(rs_uids.contains(owner), "a Pod's ReplicaSet comes first");
                    assert_eq!(m["labels"].as_object().unwrap().len(), 5);
                    if m["namespace"] == "ns-00" {
                        tiers_in_ns0.insert(m["labels"]["tier"].as_str().unwrap().to_string());
                    }
                }
                _ => {}
            }
        });
        assert_eq!(seen["namespaces"], 50);
        assert_eq!(seen["deployments"], 501);
        assert_eq!(seen["replicasets"], 501);
        assert_eq!(seen["pods"], 5_005);
        assert_eq!(shape.objects(), 5_005 + 2 * 501);
        assert_eq!(
            tiers_in_ns0.len(),
            TIERS.len(),
            "a namespace holds every tier"
        );
    }
}
