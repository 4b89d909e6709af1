//! IngressClass selection (MCI-3): which MultiClusterIngresses Causeway serves.
//!
//! An MCI names its class in `spec.ingressClassName` (or, deprecated, the
//! `kubernetes.io/ingress.class` annotation); without one it belongs to the single
//! IngressClass annotated `ingressclass.kubernetes.io/is-default-class: "true"`.
//! Causeway serves it only when that class's `spec.controller` is
//! [`INGRESS_CONTROLLER`](crate::well_known::INGRESS_CONTROLLER). Several default
//! classes are ambiguous: the MCI is left alone and the controller says so in an Event.

use k8s_openapi::api::networking::v1::IngressClass;
use kube::ResourceExt;

use super::MultiClusterIngress;
use crate::well_known::INGRESS_CONTROLLER;
use crate::well_known::annotations::{INGRESS_CLASS, INGRESS_CLASS_IS_DEFAULT};

/// Whose MCI this is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Ours, through this IngressClass.
    Ours { class: String },
    /// The class belongs to another controller.
    OtherController { class: String, controller: String },
    /// The named IngressClass does not exist (yet).
    ClassNotFound { class: String },
    /// No class named and no default IngressClass.
    NoClass,
    /// No class named and several default IngressClasses: ambiguous.
    AmbiguousDefault { classes: Vec<String> },
}

impl Decision {
    /// Whether Causeway serves the MCI.
    pub fn is_ours(&self) -> bool {
        matches!(self, Decision::Ours { .. })
    }

    /// Why Causeway does not serve it (None when it does).
    pub fn reason(&self) -> Option<String> {
        match self {
            Decision::Ours { .. } => None,
            Decision::OtherController { class, controller } => Some(format!(
                "IngressClass {class:?} belongs to controller {controller:?}, not {INGRESS_CONTROLLER:?}"
            )),
            Decision::ClassNotFound { class } => Some(format!(
                "IngressClass {class:?} does not exist; create it with spec.controller: {INGRESS_CONTROLLER}"
            )),
            Decision::NoClass => Some(
                "no ingressClassName and no default IngressClass; set spec.ingressClassName".into(),
            ),
            Decision::AmbiguousDefault { classes } => Some(format!(
                "several IngressClasses are marked default ({}); set spec.ingressClassName or keep one default",
                classes.join(", ")
            )),
        }
    }
}

/// The class an MCI asks for: `spec.ingressClassName`, else the deprecated annotation.
pub fn requested_class(mci: &MultiClusterIngress) -> Option<&str> {
    mci.spec
        .ingress_class_name
        .as_deref()
        .or_else(|| mci.annotations().get(INGRESS_CLASS).map(String::as_str))
        .filter(|c| !c.is_empty())
}

/// Whether `class` is marked as the cluster's default IngressClass.
pub fn is_default(class: &IngressClass) -> bool {
    class
        .annotations()
        .get(INGRESS_CLASS_IS_DEFAULT)
        .is_some_and(|v| v == "true")
}

/// Decide whether Causeway serves `mci`, given every IngressClass of its cluster.
pub fn select(mci: &MultiClusterIngress, classes: &[IngressClass]) -> Decision {
    let verdict = |class: &IngressClass| {
        let controller = class
            .spec
            .as_ref()
            .and_then(|s| s.controller.clone())
            .unwrap_or_default();
        if controller == INGRESS_CONTROLLER {
            Decision::Ours {
                class: class.name_any(),
            }
        } else {
            Decision::OtherController {
                class: class.name_any(),
                controller,
            }
        }
    };
    if let Some(name) = requested_class(mci) {
        return match classes.iter().find(|c| c.name_any() == name) {
            Some(c) => verdict(c),
            None => Decision::ClassNotFound {
                class: name.to_string(),
            },
        };
    }
    let defaults: Vec<&IngressClass> = classes.iter().filter(|c| is_default(c)).collect();
    match defaults.as_slice() {
        [] => Decision::NoClass,
        [one] => verdict(one),
        many => {
            let mut classes: Vec<String> = many.iter().map(|c| c.name_any()).collect();
            classes.sort();
            Decision::AmbiguousDefault { classes }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::networking::v1::IngressClassSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::mci::MultiClusterIngressSpec;

    fn class(name: &str, controller: &str, default: bool) -> IngressClass {
        IngressClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: default.then(|| {
                    BTreeMap::from([(INGRESS_CLASS_IS_DEFAULT.to_string(), "true".to_string())])
                }),
                ..Default::default()
            },
            spec: Some(IngressClassSpec {
                controller: Some(controller.into()),
                parameters: None,
            }),
        }
    }

    fn mci(class: Option<&str>, annotation: Option<&str>) -> MultiClusterIngress {
        let mut m = MultiClusterIngress::new("m", MultiClusterIngressSpec::default());
        m.spec.ingress_class_name = class.map(Into::into);
        if let Some(a) = annotation {
            m.metadata.annotations = Some(BTreeMap::from([(INGRESS_CLASS.into(), a.into())]));
        }
        m
    }

    #[test]
    fn table() {
        let ours = class("causeway", INGRESS_CONTROLLER, false);
        let ours_default = class("causeway", INGRESS_CONTROLLER, true);
        let nginx = class("nginx", "k8s.io/ingress-nginx", false);
        let nginx_default = class("nginx", "k8s.io/ingress-nginx", true);
        let cases = [
            (
                mci(Some("causeway"), None),
                vec![ours.clone(), nginx.clone()],
                "ours",
            ),
            (
                mci(Some("nginx"), None),
                vec![ours.clone(), nginx.clone()],
                "other",
            ),
            (mci(Some("gone"), None), vec![ours.clone()], "notfound"),
            (
                mci(None, None),
                vec![ours.clone(), nginx.clone()],
                "noclass",
            ),
            (
                mci(None, None),
                vec![ours_default.clone(), nginx.clone()],
                "ours",
            ),
            (
                mci(None, None),
                vec![ours.clone(), nginx_default.clone()],
                "other",
            ),
            (
                mci(None, None),
                vec![ours_default.clone(), nginx_default.clone()],
                "ambiguous",
            ),
            // The named class wins over defaults, even when defaults are ambiguous.
            (
                mci(Some("causeway"), None),
                vec![ours_default.clone(), nginx_default.clone()],
                "ours",
            ),
            // The deprecated annotation counts when ingressClassName is unset...
            (mci(None, Some("causeway")), vec![ours.clone()], "ours"),
            // ...and ingressClassName wins over it.
            (
                mci(Some("nginx"), Some("causeway")),
                vec![ours, nginx],
                "other",
            ),
        ];
        for (i, (m, classes, want)) in cases.into_iter().enumerate() {
            let d = select(&m, &classes);
            let got = match d {
                Decision::Ours { .. } => "ours",
                Decision::OtherController { .. } => "other",
                Decision::ClassNotFound { .. } => "notfound",
                Decision::NoClass => "noclass",
                Decision::AmbiguousDefault { .. } => "ambiguous",
            };
            assert_eq!(got, want, "case {i}");
            assert_eq!(d.reason().is_none(), want == "ours", "case {i}");
        }
    }
}
