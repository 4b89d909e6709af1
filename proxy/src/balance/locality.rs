//! Envoy priority levels with overprovisioning, and health-scaled locality weights.
//!
//! A level whose healthy share times the overprovisioning factor (1.4) reaches 100%
//! keeps all the traffic it is offered; below that the rest spills to the next level
//! (P0 at 50% healthy keeps 70%). When the levels together cannot take 100%, the
//! loads are normalised so every request still goes somewhere healthy.

/// Envoy's default overprovisioning factor.
pub const OVERPROVISIONING: f64 = 1.4;

/// Share of traffic per level from each level's healthy fraction (0..=1). The result
/// sums to 1, or is all zeros when no level has a healthy endpoint.
pub fn priority_loads(health: &[f64], out: &mut [f64]) {
    let scaled = |h: f64| (h * OVERPROVISIONING).clamp(0.0, 1.0);
    let total: f64 = health.iter().map(|h| scaled(*h)).sum();
    if total <= 0.0 {
        out.iter_mut().for_each(|o| *o = 0.0);
        return;
    }
    if total < 1.0 {
        for (o, h) in out.iter_mut().zip(health) {
            *o = scaled(*h) / total;
        }
        return;
    }
    let mut remaining = 1.0;
    for (o, h) in out.iter_mut().zip(health) {
        let l = scaled(*h).min(remaining);
        *o = l;
        remaining -= l;
    }
}

/// A locality's effective weight: its configured weight scaled by its
/// overprovisioned health.
pub fn effective_weight(weight: u32, healthy: usize, total: usize) -> f64 {
    if total == 0 {
        return 0.0;
    }
    weight as f64 * (OVERPROVISIONING * healthy as f64 / total as f64).min(1.0)
}

/// Picks an index by weight with `r` uniform in [0, 1); None when all weights are 0.
pub fn pick_weighted(weights: &[f64], r: f64) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mut x = r * total;
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 {
            if x < *w {
                return Some(i);
            }
            x -= w;
        }
    }
    weights.iter().rposition(|w| *w > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn loads(h: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; h.len()];
        priority_loads(h, &mut out);
        out
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn envoy_examples() {
        assert!(close(&loads(&[1.0, 1.0]), &[1.0, 0.0]));
        assert!(close(&loads(&[0.72, 1.0]), &[1.0, 0.0]));
        assert!(close(&loads(&[0.5, 1.0]), &[0.7, 0.3]));
        assert!(close(&loads(&[0.0, 1.0]), &[0.0, 1.0]));
        // Both degraded: normalised (P0 0.35→0.49, P1 0.2→0.28 of 0.77).
        assert!(close(&loads(&[0.35, 0.2]), &[0.49 / 0.77, 0.28 / 0.77]));
        assert!(close(&loads(&[0.0, 0.0]), &[0.0, 0.0]));
    }

    #[test]
    fn weighted_pick() {
        assert_eq!(pick_weighted(&[3.0, 1.0], 0.0), Some(0));
        assert_eq!(pick_weighted(&[3.0, 1.0], 0.74), Some(0));
        assert_eq!(pick_weighted(&[3.0, 1.0], 0.76), Some(1));
        assert_eq!(pick_weighted(&[0.0, 1.0], 0.1), Some(1));
        assert_eq!(pick_weighted(&[0.0, 0.0], 0.1), None);
        assert_eq!(effective_weight(3, 1, 2), 3.0 * 0.7);
    }

    proptest! {
        #[test]
        fn loads_sum_to_one(h in proptest::collection::vec(0.0f64..=1.0, 1..4)) {
            let l = loads(&h);
            let s: f64 = l.iter().sum();
            let any = h.iter().any(|x| *x > 0.0);
            let ok = if any { (s - 1.0).abs() < 1e-9 } else { s == 0.0 };
            prop_assert!(ok, "{:?} -> {:?}", h, l);
            prop_assert!(l.iter().all(|x| *x >= 0.0));
        }
    }
}
