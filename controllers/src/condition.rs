//! Status conditions, shared by every controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// `lastTransitionTime` for a condition of `type_` now at `status`: kept from `prev` when
/// the status did not change, else `now`.
pub fn since(prev: &[Condition], type_: &str, status: &str, now: &Time) -> Time {
    prev.iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_only_while_the_status_stays() {
        let t = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
        let prev = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "r".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: t(1),
        }];
        assert_eq!(since(&prev, "Ready", "True", &t(9)), t(1));
        assert_eq!(since(&prev, "Ready", "False", &t(9)), t(9));
        assert_eq!(since(&prev, "Other", "True", &t(9)), t(9));
        assert_eq!(since(&[], "Ready", "True", &t(9)), t(9));
    }
}
