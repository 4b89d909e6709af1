//! The hasher of the zone's name maps.
//!
//! Every query hashes its name twice (the service key, then the full name); with std's
//! SipHash-1-3 that was a sixth of the user-space instructions per query (callgrind,
//! benches/results/dns.md). foldhash's fast hasher folds eight bytes at a time with a
//! 64×64→128-bit multiply, keyed by a random seed per map, so colliding names cannot be
//! chosen without knowing the seed.

use std::collections::HashMap;

/// Builds the name maps' hashers, with a seed drawn once per map.
pub type NameState = foldhash::fast::RandomState;

/// A hash map keyed by lowercase wire names.
pub type NameMap<V> = HashMap<Box<[u8]>, V, NameState>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(state: &NameState, key: &[u8]) -> u64 {
        state.hash_one(Box::<[u8]>::from(key))
    }

    #[test]
    fn equal_names_hash_equal_and_near_names_apart() {
        let s = NameState::default();
        let base = b"\x04svc7\x03ns1\x03svc\x0aclusterset\x05local\x00";
        // A boxed key and the borrowed name a lookup passes hash alike (and again so).
        assert_eq!(hash(&s, base), s.hash_one(&base[..]));
        assert_eq!(hash(&s, base), hash(&s, base));
        // Every one-byte change, and every truncation, gives another hash.
        let mut seen = std::collections::HashSet::new();
        seen.insert(hash(&s, base));
        for i in 0..base.len() {
            let mut k = base.to_vec();
            k[i] ^= 0x20;
            assert!(seen.insert(hash(&s, &k)), "flip at {i}");
            assert!(seen.insert(hash(&s, &base[..i])), "prefix of {i}");
        }
        assert_ne!(hash(&s, b"a"), hash(&s, b"a\0"));
    }

    #[test]
    fn seeds_differ_per_map() {
        let (a, b) = (NameState::default(), NameState::default());
        assert_ne!(hash(&a, b"\x01x\x00"), hash(&b, b"\x01x\x00"));
    }

    #[test]
    fn spreads_service_names_over_buckets() {
        // 10,000 service keys into 16,384 buckets by the low bits (hashbrown's
        // index) and the top 7 bits (its tag): no pile-ups.
        let s = NameState::default();
        let mut buckets = vec![0u32; 1 << 14];
        let mut tags = [0u32; 128];
        for i in 0..10_000 {
            let name = crate::name::to_wire(&format!("svc{i}.ns{}.svc.clusterset.local", i % 10))
                .unwrap_or_default();
            let h = hash(&s, &name);
            buckets[(h as usize) & ((1 << 14) - 1)] += 1;
            tags[(h >> 57) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| n <= 8),
            "max bucket {:?}",
            buckets.iter().max()
        );
        // Expected 78 per tag.
        assert!(
            tags.iter().all(|&n| (30..=140).contains(&n)),
            "tags {tags:?}"
        );
    }
}
