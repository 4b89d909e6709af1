//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of prime size
//! filled from each endpoint's permutation, so removing one of N endpoints moves about
//! 1/N of the keys, and a lookup is one index operation.

/// Table size for up to a few hundred endpoints (Envoy's default is 65537).
const SIZES: [u32; 3] = [4093, 16381, 65537];

/// FNV-1a followed by a splitmix finaliser: stable across processes and rebuilds.
pub fn hash_bytes(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= *x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The lookup table: slot → endpoint index.
#[derive(Debug, Clone)]
pub struct Maglev {
    table: Vec<u32>,
}

impl Maglev {
    /// Builds the table for endpoints identified by `names` (e.g. `ip:port`); None when
    /// there are no endpoints.
    pub fn new<S: AsRef<[u8]>>(names: &[S]) -> Option<Maglev> {
        let n = names.len();
        if n == 0 {
            return None;
        }
        let m = SIZES
            .iter()
            .copied()
            .find(|m| *m as usize >= n * 100)
            .unwrap_or(SIZES[SIZES.len() - 1]) as u64;
        let perms: Vec<(u64, u64)> = names
            .iter()
            .map(|name| {
                let h = hash_bytes(name.as_ref());
                let offset = h % m;
                let skip = mix(h ^ 0x5bd1_e995) % (m - 1) + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0u64; n];
        let mut table = vec![u32::MAX; m as usize];
        let mut filled = 0u64;
        'outer: loop {
            for i in 0..n {
                let (offset, skip) = perms[i];
                let mut c = (offset + next[i] * skip) % m;
                while table[c as usize] != u32::MAX {
                    next[i] += 1;
                    c = (offset + next[i] * skip) % m;
                }
                table[c as usize] = i as u32;
                next[i] += 1;
                filled += 1;
                if filled == m {
                    break 'outer;
                }
            }
        }
        Some(Maglev { table })
    }

    /// Table size.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The endpoint index for a key hash.
    pub fn get(&self, hash: u64) -> usize {
        self.table[(hash % self.table.len() as u64) as usize] as usize
    }

    /// Slot `(hash + i) mod size`: for walking on when the owner is unavailable.
    pub fn probe(&self, hash: u64, i: usize) -> usize {
        let m = self.table.len() as u64;
        self.table[((hash % m + i as u64) % m) as usize] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:8080", i / 200, i % 200))
            .collect()
    }

    #[test]
    fn spreads_evenly() {
        let m = Maglev::new(&names(5)).unwrap();
        let mut counts = [0usize; 5];
        for k in 0..50_000u32 {
            counts[m.get(hash_bytes(&k.to_le_bytes()))] += 1;
        }
        for c in counts {
            assert!((8_000..12_000).contains(&c), "{counts:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Removing one of N endpoints moves its own keys plus only a few others.
        #[test]
        fn removing_one_moves_about_one_nth(n in 3usize..24, removed in 0usize..24) {
            let removed = removed % n;
            let all = names(n);
            let mut fewer = all.clone();
            fewer.remove(removed);
            let a = Maglev::new(&all).unwrap();
            let b = Maglev::new(&fewer).unwrap();
            let keys = 4000u32;
            let mut moved = 0;
            for k in 0..keys {
                let h = hash_bytes(&k.to_le_bytes());
                let before = &all[a.get(h)];
                let after = &fewer[b.get(h)];
                if before != after {
                    moved += 1;
                }
            }
            let frac = moved as f64 / keys as f64;
            prop_assert!(frac <= 1.0 / n as f64 + 0.08, "n={n} moved {frac}");
        }
    }
}
