//! What API discovery says of Kubernetes' built-in kinds and versions, shared by every
//! server that serves discovery (kubesim, the search server).

/// Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): GA before
/// beta before alpha, higher numbers first; a version not of that form after them all.
/// Sort by `Reverse` of it for discovery's order (the first is the preferred version).
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (stage, n) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match n.parse() {
        Ok(n) => (stage, major, n),
        Err(_) => (0, 0, 0),
    }
}

/// The categories kube-apiserver puts a built-in resource in: `all` (what `kubectl get
/// all` lists) for the workloads and their services.
pub fn categories(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods" | "services" | "replicationcontrollers")
        | ("apps", "deployments" | "statefulsets" | "daemonsets" | "replicasets")
        | ("batch", "jobs" | "cronjobs")
        | ("autoscaling", "horizontalpodautoscalers") => &["all"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_like_kubernetes() {
        let mut v = vec![
            "v1alpha1", "foo", "v1beta1", "v1", "v2beta2", "v2", "v1beta2", "v10", "v3gamma1",
        ];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(
            v,
            vec![
                "v10", "v2", "v1", "v2beta2", "v1beta2", "v1beta1", "v1alpha1", "foo", "v3gamma1"
            ]
        );
    }

    #[test]
    fn the_workloads_are_in_all() {
        assert_eq!(categories("", "pods"), ["all"]);
        assert_eq!(categories("apps", "deployments"), ["all"]);
        assert!(categories("", "configmaps").is_empty());
        assert!(categories("example.com", "pods").is_empty());
    }
}
