//! The hasher of the zone's name maps.
//!
//! Every query hashes its name twice (the service key, then the full name); with std's
//! SipHash-1-3 that was a sixth of the user-space instructions per query (callgrind,
//! benches/results/dns.md). This one folds eight bytes at a time with a 64×64→128-bit
//! multiply (the folded multiply of foldhash and ahash's fallback), keyed by a random
//! seed per map, so colliding names cannot be chosen without knowing the seed.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A hash map keyed by lowercase wire names.
pub type NameMap<V> = HashMap<Box<[u8]>, V, NameState>;

/// Builds [`NameHasher`]s with a seed drawn once per map.
#[derive(Clone, Debug)]
pub struct NameState {
    seed: [u64; 2],
}

impl Default for NameState {
    fn default() -> Self {
        let s = std::collections::hash_map::RandomState::new();
        NameState {
            seed: [s.hash_one(0x243f_6a88_85a3_08d3_u64), s.hash_one(1u64) | 1],
        }
    }
}

impl BuildHasher for NameState {
    type Hasher = NameHasher;

    fn build_hasher(&self) -> NameHasher {
        NameHasher {
            acc: self.seed[1],
            seed: self.seed,
        }
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct NameHasher {
    acc: u64,
    seed: [u64; 2],
}

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl NameHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.acc = fold(word ^ self.seed[0], self.acc ^ self.seed[1]);
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length byte keeps "a" and "a\0" apart.
            w[7] ^= rest.len() as u8;
            self.mix(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold(self.acc, self.seed[0] ^ 0x1319_8a2e_0370_7344).rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
