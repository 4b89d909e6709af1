//! Property tests: the claim does not depend on the order of the policies, and
//! is a fixed point.

use super::*;
use proptest::prelude::*;

/// Policies with unique identities, drawn from small pools so that ties, both
/// scopes, preemption and every specificity occur often.
fn arb_policies() -> impl Strategy<Value = Vec<P>> {
    let selector = prop_oneof![
        Just(kind_only()),
        Just(by_name("web")),
        Just(by_name("db")),
        Just(by_label("app", "web")),
        Just(by_label("app", "db")),
        Just(vec![]),
    ];
    let preemption = prop_oneof![Just(None), Just(Some(Always)), Just(Some(Never))];
    let one = (any::<bool>(), 0..4u8, -1..3i32, preemption, selector).prop_map(
        |(cluster, n, priority, preemption, sels)| {
            let name = format!("p{n}");
            if cluster {
                cpp(&name, priority, preemption, sels)
            } else {
                pp(&name, priority, preemption, sels)
            }
        },
    );
    proptest::collection::vec(one, 0..8).prop_map(|mut ps| {
        let mut seen = BTreeSet::new();
        ps.retain(|p| seen.insert(p.as_ref().id()));
        ps
    })
}

/// No claim, or a claim by one of the policies [`arb_policies`] draws from (or one
/// that is not among them).
fn arb_current() -> impl Strategy<Value = Option<PolicyId>> {
    proptest::option::of((any::<bool>(), 0..5u8)).prop_map(|c| {
        c.map(|(cluster, n)| {
            let name = format!("p{n}");
            if cluster { cl(&name) } else { ns(&name) }
        })
    })
}

proptest! {
    #[test]
    fn winner_does_not_depend_on_policy_order(
        (policies, shuffled) in arb_policies().prop_flat_map(|ps| (Just(ps.clone()), Just(ps).prop_shuffle())),
        current in arb_current(),
    ) {
        let t = web();
        prop_assert_eq!(run(&t, &policies, current.as_ref()), run(&t, &shuffled, current.as_ref()));
    }

    #[test]
    fn a_claim_is_a_fixed_point(policies in arb_policies(), current in arb_current()) {
        let t = web();
        if let Some((winner, _)) = run(&t, &policies, current.as_ref()) {
            prop_assert_eq!(run(&t, &policies, Some(&winner)), Some((winner, None)));
        }
    }
}
