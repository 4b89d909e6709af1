//! Endpoint choice for one backend: cluster locality (priority levels with
//! overprovisioning, optional per-cluster weights), then the backend's policy —
//! P2C over peak-EWMA (default), round robin, least-request P2C, or Maglev
//! consistent hashing. Lock-free: endpoints are `Arc`s with atomic state.

pub mod locality;
pub mod maglev;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::annotations::LbPolicy;
use crate::clock::{rand_below, rand_u64};
use crate::endpoint::Endpoint;

use self::maglev::Maglev;

/// The endpoints one cluster contributes to a backend.
#[derive(Debug, Clone)]
pub struct Group {
    /// Cluster id.
    pub cluster: Arc<str>,
    /// Endpoints that may get traffic.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// Endpoints the cluster has but that are not ready: they get no traffic but count
    /// as unhealthy members for priority spill-over (as Envoy counts unhealthy hosts).
    pub unready: usize,
}

#[derive(Debug)]
struct Level {
    /// Groups of this priority, with their configured weight.
    groups: Vec<(usize, u32)>,
    /// All endpoints of the level.
    endpoints: Vec<Arc<Endpoint>>,
    /// Unready endpoints of the level.
    unready: usize,
}

/// A backend's balancer.
#[derive(Debug)]
pub struct Balancer {
    policy: LbPolicy,
    groups: Vec<Group>,
    /// Priority 0 (the proxy's own cluster, or all clusters) and 1 (the others).
    levels: Vec<Level>,
    weighted: bool,
    all: Vec<Arc<Endpoint>>,
    maglev: Option<Maglev>,
    rr: AtomicUsize,
}

/// Endpoints already tried by this request (retries go elsewhere).
pub type Tried<'a> = &'a [usize];

fn tried(t: Tried<'_>, e: &Arc<Endpoint>) -> bool {
    t.contains(&(Arc::as_ptr(e) as usize))
}

impl Balancer {
    /// Builds the balancer. `local` is the proxy's cluster (priority 0; others are
    /// priority 1); `weights` switches on per-cluster weighting (unlisted clusters weigh 1).
    pub fn new(
        policy: LbPolicy,
        mut groups: Vec<Group>,
        local: Option<&str>,
        weights: Option<&BTreeMap<String, u32>>,
    ) -> Self {
        groups.retain(|g| !g.endpoints.is_empty());
        groups.sort_by(|a, b| a.cluster.cmp(&b.cluster));
        let weight = |c: &str| weights.and_then(|w| w.get(c).copied()).unwrap_or(1);
        let has_local = local.is_some_and(|l| groups.iter().any(|g| &*g.cluster == l));
        let mut levels: Vec<Level> = Vec::new();
        for p in 0..2 {
            let members: Vec<usize> = (0..groups.len())
                .filter(|i| {
                    let is_local = local.is_some_and(|l| &*groups[*i].cluster == l);
                    if has_local {
                        (p == 0) == is_local
                    } else {
                        p == 0
                    }
                })
                .collect();
            if members.is_empty() {
                continue;
            }
            levels.push(Level {
                groups: members
                    .iter()
                    .map(|i| (*i, weight(&groups[*i].cluster)))
                    .collect(),
                endpoints: interleave(members.iter().map(|i| &groups[*i].endpoints[..])),
                unready: members.iter().map(|i| groups[*i].unready).sum(),
            });
        }
        let all: Vec<Arc<Endpoint>> = groups
            .iter()
            .flat_map(|g| g.endpoints.iter().cloned())
            .collect();
        let maglev = (policy == LbPolicy::ConsistentHash)
            .then(|| {
                let names: Vec<String> = all.iter().map(|e| e.addr.to_string()).collect();
                Maglev::new(&names)
            })
            .flatten();
        Balancer {
            policy,
            groups,
            levels,
            weighted: weights.is_some(),
            all,
            maglev,
            rr: AtomicUsize::new(0),
        }
    }

    /// All endpoints.
    pub fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.all
    }

    /// The per-cluster groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Picks an endpoint not in `tried`, preferring available ones; `key` is the
    /// request's hash key for consistent hashing. None only without endpoints.
    pub fn pick(&self, now: u64, key: Option<u64>, tried: Tried<'_>) -> Option<Arc<Endpoint>> {
        if self.all.is_empty() {
            return None;
        }
        if let (Some(m), Some(h)) = (&self.maglev, key) {
            return self.pick_hashed(m, h, now, tried);
        }
        let candidates = self.candidates(now);
        if let Some(e) = self.pick_in(candidates, now, tried) {
            return Some(e);
        }
        // The chosen level had nothing left: anything available, then anything untried
        // (panic mode: no endpoint is healthy, so ignore health), then anything.
        self.pick_in(&self.all, now, tried)
            .or_else(|| first(&self.all, |e| !tried_or_empty(tried, e)))
            .or_else(|| self.all.get(rand_below(self.all.len())).cloned())
    }

    fn pick_hashed(&self, m: &Maglev, h: u64, now: u64, tried: Tried<'_>) -> Option<Arc<Endpoint>> {
        let limit = m.len().min(self.all.len() * 8 + 64);
        let mut fallback = None;
        for i in 0..limit {
            let e = &self.all[m.probe(h, i)];
            if tried_or_empty(tried, e) {
                continue;
            }
            if e.available(now) {
                return Some(e.clone());
            }
            fallback.get_or_insert_with(|| e.clone());
        }
        self.pick_in(&self.all, now, tried)
            .or(fallback)
            .or_else(|| Some(self.all[m.get(h)].clone()))
    }

    /// The endpoints of the level (and, when weighted, the cluster) this request goes to.
    fn candidates(&self, now: u64) -> &[Arc<Endpoint>] {
        if self.levels.len() == 1 && (!self.weighted || self.levels[0].groups.len() < 2) {
            // One level, nothing to weigh: no health scan needed.
            return &self.levels[0].endpoints;
        }
        let mut health = [0.0f64; 2];
        let mut per_group: [(usize, usize); 16] = [(0, 0); 16];
        for (li, level) in self.levels.iter().enumerate() {
            let mut healthy = 0usize;
            for (gi, _) in &level.groups {
                let g = &self.groups[*gi];
                let h = g.endpoints.iter().filter(|e| e.available(now)).count();
                if *gi < per_group.len() {
                    per_group[*gi] = (h, g.endpoints.len() + g.unready);
                }
                healthy += h;
            }
            health[li] = healthy as f64 / (level.endpoints.len() + level.unready).max(1) as f64;
        }
        let n = self.levels.len();
        let mut loads = [0.0f64; 2];
        locality::priority_loads(&health[..n], &mut loads[..n]);
        let r = (rand_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let li = locality::pick_weighted(&loads[..n], r).unwrap_or(0);
        let level = &self.levels[li];
        if !self.weighted || level.groups.len() < 2 || self.groups.len() > per_group.len() {
            return &level.endpoints;
        }
        let mut w = [0.0f64; 16];
        for (k, (gi, weight)) in level.groups.iter().enumerate() {
            let (h, t) = per_group[*gi];
            w[k] = locality::effective_weight(*weight, h, t);
        }
        let r = (rand_u64() >> 11) as f64 / (1u64 << 53) as f64;
        match locality::pick_weighted(&w[..level.groups.len()], r) {
            Some(k) => &self.groups[level.groups[k].0].endpoints,
            None => &level.endpoints,
        }
    }

    /// The policy's pick among available, untried endpoints of `c`.
    fn pick_in(&self, c: &[Arc<Endpoint>], now: u64, tried: Tried<'_>) -> Option<Arc<Endpoint>> {
        if c.is_empty() {
            return None;
        }
        let ok = |e: &Arc<Endpoint>| e.available(now) && !tried_or_empty(tried, e);
        match self.policy {
            LbPolicy::RoundRobin | LbPolicy::ConsistentHash => {
                let start = self.rr.fetch_add(1, Ordering::Relaxed);
                scan_from(c, start % c.len(), ok)
            }
            LbPolicy::PeakEwma => p2c(c, ok, |e| e.load(now)),
            LbPolicy::LeastRequest => p2c(c, ok, |e| e.pending() as f64),
        }
    }
}

/// The clusters' endpoints taken in turn (a1 b1 c1 a2 b2 ...), so that round robin
/// moves from cluster to cluster instead of draining one cluster's list first.
fn interleave<'a>(lists: impl Iterator<Item = &'a [Arc<Endpoint>]>) -> Vec<Arc<Endpoint>> {
    let lists: Vec<&[Arc<Endpoint>]> = lists.collect();
    let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| lists.iter().filter_map(move |l| l.get(i).cloned()))
        .collect()
}

fn tried_or_empty(t: Tried<'_>, e: &Arc<Endpoint>) -> bool {
    !t.is_empty() && tried(t, e)
}

fn first(c: &[Arc<Endpoint>], ok: impl Fn(&Arc<Endpoint>) -> bool) -> Option<Arc<Endpoint>> {
    c.iter().find(|e| ok(e)).cloned()
}

fn scan_from(
    c: &[Arc<Endpoint>],
    start: usize,
    ok: impl Fn(&Arc<Endpoint>) -> bool,
) -> Option<Arc<Endpoint>> {
    (0..c.len())
        .map(|i| &c[(start + i) % c.len()])
        .find(|e| ok(e))
        .cloned()
}

/// Power of two choices: two random eligible endpoints, the cheaper wins.
fn p2c(
    c: &[Arc<Endpoint>],
    ok: impl Fn(&Arc<Endpoint>) -> bool,
    cost: impl Fn(&Endpoint) -> f64,
) -> Option<Arc<Endpoint>> {
    let n = c.len();
    let start = rand_below(n);
    let a = (0..n).map(|i| (start + i) % n).find(|i| ok(&c[*i]))?;
    if n == 1 {
        return Some(c[a].clone());
    }
    let off = 1 + rand_below(n - 1);
    let b = (0..n)
        .map(|i| (a + off + i) % n)
        .find(|i| *i != a && ok(&c[*i]));
    match b {
        Some(b) if cost(&c[b]) < cost(&c[a]) => Some(c[b].clone()),
        _ => Some(c[a].clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::now_nanos;
    use std::collections::HashMap;
    use std::time::Duration;

    fn group(cluster: &str, n: u8) -> Group {
        Group {
            cluster: cluster.into(),
            endpoints: (0..n)
                .map(|i| {
                    Arc::new(Endpoint::new(
                        format!("10.{}.0.{i}:80", cluster.len()).parse().unwrap(),
                        cluster.into(),
                    ))
                })
                .collect(),
            unready: 0,
        }
    }

    #[test]
    fn round_robin_moves_from_cluster_to_cluster() {
        let b = Balancer::new(
            LbPolicy::RoundRobin,
            vec![group("e", 2), group("ww", 2), group("nnn", 1)],
            None,
            None,
        );
        let now = now_nanos();
        let order: Vec<String> = (0..10)
            .map(|_| {
                b.pick_in(b.candidates(now), now, &[])
                    .unwrap()
                    .cluster
                    .to_string()
            })
            .collect();
        // Clusters in name order, one endpoint each turn: e nnn ww e ww, e nnn ww e ww.
        assert!(order.windows(2).all(|w| w[0] != w[1]), "{order:?}");
        assert_eq!(order[..5], ["e", "nnn", "ww", "e", "ww"], "{order:?}");
    }

    fn shares(b: &Balancer, n: usize) -> HashMap<String, f64> {
        let now = now_nanos();
        let mut m: HashMap<String, f64> = HashMap::new();
        for _ in 0..n {
            let e = b.pick(now, None, &[]).unwrap();
            *m.entry(e.cluster.to_string()).or_default() += 1.0 / n as f64;
        }
        m
    }

    #[test]
    fn without_locality_all_clusters_share() {
        // (Peak-EWMA prefers endpoints whose idle estimate decayed most: not uniform
        // without traffic, by design.)
        for p in [LbPolicy::RoundRobin, LbPolicy::LeastRequest] {
            let b = Balancer::new(
                p,
                vec![group("e", 2), group("ww", 2), group("nnn", 2)],
                None,
                None,
            );
            let s = shares(&b, 6000);
            for c in ["e", "ww", "nnn"] {
                assert!((s[c] - 1.0 / 3.0).abs() < 0.06, "{p:?} {s:?}");
            }
        }
    }

    #[test]
    fn locality_keeps_local_then_spills() {
        let east = group("east", 2);
        let b = Balancer::new(
            LbPolicy::RoundRobin,
            vec![east.clone(), group("west", 2)],
            Some("east"),
            None,
        );
        let s = shares(&b, 2000);
        assert_eq!(s.get("west"), None, "{s:?}");
        // Half of east ejected: 70/30.
        east.endpoints[0].eject(
            now_nanos(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        );
        let s = shares(&b, 10_000);
        assert!((s["east"] - 0.7).abs() < 0.05, "{s:?}");
        east.endpoints[1].eject(
            now_nanos(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        );
        let s = shares(&b, 1000);
        assert_eq!(s.get("east"), None, "{s:?}");
    }

    #[test]
    fn unready_endpoints_count_as_unhealthy_for_spill_over() {
        let mut east = group("east", 1);
        east.unready = 1;
        let b = Balancer::new(
            LbPolicy::PeakEwma,
            vec![east, group("west", 2)],
            Some("east"),
            None,
        );
        let s = shares(&b, 10_000);
        assert!((s["east"] - 0.7).abs() < 0.05, "{s:?}");
    }

    #[test]
    fn cluster_weights() {
        let mut w = BTreeMap::new();
        w.insert("east".to_string(), 3);
        let b = Balancer::new(
            LbPolicy::PeakEwma,
            vec![group("east", 1), group("west", 3)],
            None,
            Some(&w),
        );
        let s = shares(&b, 8000);
        assert!((s["east"] - 0.75).abs() < 0.05, "{s:?}");
    }

    #[test]
    fn p2c_avoids_the_slow_and_the_busy() {
        let g = group("e", 2);
        let now = now_nanos();
        g.endpoints[0].observe_rtt(500_000_000, now);
        let b = Balancer::new(LbPolicy::PeakEwma, vec![g.clone()], None, None);
        let s = (0..1000)
            .filter(|_| Arc::ptr_eq(&b.pick(now, None, &[]).unwrap(), &g.endpoints[1]))
            .count();
        assert_eq!(s, 1000);
        let b = Balancer::new(LbPolicy::LeastRequest, vec![g.clone()], None, None);
        let _busy = g.endpoints[1].start();
        let s = (0..1000)
            .filter(|_| Arc::ptr_eq(&b.pick(now, None, &[]).unwrap(), &g.endpoints[0]))
            .count();
        assert_eq!(s, 1000);
    }

    #[test]
    fn retries_skip_tried_endpoints_and_panic_mode_still_answers() {
        let g = group("e", 3);
        let b = Balancer::new(LbPolicy::PeakEwma, vec![g.clone()], None, None);
        let now = now_nanos();
        let t = [
            Arc::as_ptr(&g.endpoints[0]) as usize,
            Arc::as_ptr(&g.endpoints[1]) as usize,
        ];
        for _ in 0..100 {
            assert!(Arc::ptr_eq(
                &b.pick(now, None, &t).unwrap(),
                &g.endpoints[2]
            ));
        }
        for e in &g.endpoints {
            e.eject(now, Duration::from_secs(60), Duration::from_secs(60));
        }
        assert!(b.pick(now, None, &[]).is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever the policy, locality and health: an available, untried endpoint is
        /// chosen whenever one exists.
        #[test]
        fn picks_available_untried_when_possible(
            sizes in proptest::collection::vec(1u8..4, 1..4),
            ejected in proptest::collection::vec(proptest::bool::ANY, 12),
            tried in proptest::collection::vec(proptest::bool::ANY, 12),
            policy in 0usize..4,
            local in proptest::bool::ANY,
            weighted in proptest::bool::ANY,
        ) {
            let names = ["a", "bb", "ccc"];
            let groups: Vec<Group> = sizes.iter().enumerate().map(|(i, n)| group(names[i], *n)).collect();
            let all: Vec<Arc<Endpoint>> = groups.iter().flat_map(|g| g.endpoints.clone()).collect();
            let now = now_nanos();
            for (e, x) in all.iter().zip(&ejected) {
                if *x {
                    e.eject(now, Duration::from_secs(60), Duration::from_secs(60));
                }
            }
            let t: Vec<usize> = all.iter().zip(&tried).filter(|(_, x)| **x).map(|(e, _)| Arc::as_ptr(e) as usize).collect();
            let mut w = BTreeMap::new();
            w.insert("a".to_string(), 5);
            let policy = [LbPolicy::PeakEwma, LbPolicy::RoundRobin, LbPolicy::LeastRequest, LbPolicy::ConsistentHash][policy];
            let b = Balancer::new(policy, groups, local.then_some("a"), weighted.then_some(&w));
            let good = all.iter().any(|e| e.available(now) && !t.contains(&(Arc::as_ptr(e) as usize)));
            for k in 0..20u64 {
                let e = b.pick(now, Some(k), &t).unwrap();
                if good {
                    proptest::prop_assert!(e.available(now));
                    proptest::prop_assert!(!t.contains(&(Arc::as_ptr(&e) as usize)));
                }
            }
        }
    }

    #[test]
    fn consistent_hash_is_sticky_and_fails_over() {
        let g = group("e", 5);
        let b = Balancer::new(LbPolicy::ConsistentHash, vec![g.clone()], None, None);
        let now = now_nanos();
        for k in 0..50u64 {
            let h = maglev::hash_bytes(&k.to_le_bytes());
            let first = b.pick(now, Some(h), &[]).unwrap();
            for _ in 0..5 {
                assert!(Arc::ptr_eq(&first, &b.pick(now, Some(h), &[]).unwrap()));
            }
            let t = [Arc::as_ptr(&first) as usize];
            assert!(!Arc::ptr_eq(&first, &b.pick(now, Some(h), &t).unwrap()));
        }
    }
}
