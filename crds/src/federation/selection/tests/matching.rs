//! Which templates a resource selector matches, and how specifically.

use super::*;

#[test]
fn resource_selector_matching_table() {
    let sel = |f: fn(&mut ResourceSelector)| {
        let mut s = kind_only().remove(0);
        f(&mut s);
        s
    };
    let t = web();
    // (case, selector, template, matches)
    let table: Vec<(&str, ResourceSelector, TemplateMeta, Option<Specificity>)> = vec![
        (
            "kind only",
            sel(|_| {}),
            t.clone(),
            Some(Specificity::KindOnly),
        ),
        (
            "apiVersion differs",
            sel(|s| s.api_version = "apps/v1beta1".into()),
            t.clone(),
            None,
        ),
        (
            "kind differs",
            sel(|s| s.kind = "StatefulSet".into()),
            t.clone(),
            None,
        ),
        (
            "kind is case-sensitive",
            sel(|s| s.kind = "deployment".into()),
            t.clone(),
            None,
        ),
        (
            "namespace equal",
            sel(|s| s.namespace = Some("demo".into())),
            t.clone(),
            Some(Specificity::KindOnly),
        ),
        (
            "namespace differs",
            sel(|s| s.namespace = Some("other".into())),
            t.clone(),
            None,
        ),
        (
            "empty namespace is unset",
            sel(|s| s.namespace = Some(String::new())),
            t.clone(),
            Some(Specificity::KindOnly),
        ),
        (
            "namespace set, cluster-scoped template",
            sel(|s| s.namespace = Some("demo".into())),
            template(None, "web"),
            None,
        ),
        (
            "name equal",
            sel(|s| s.name = Some("web".into())),
            t.clone(),
            Some(Specificity::Name),
        ),
        (
            "name differs",
            sel(|s| s.name = Some("db".into())),
            t.clone(),
            None,
        ),
        (
            "empty name is unset",
            sel(|s| s.name = Some(String::new())),
            t.clone(),
            Some(Specificity::KindOnly),
        ),
        (
            "labelSelector matches",
            sel(|s| s.label_selector = Some(label_selector("app", "web"))),
            t.clone(),
            Some(Specificity::LabelSelector),
        ),
        (
            "labelSelector does not match",
            sel(|s| s.label_selector = Some(label_selector("app", "db"))),
            t.clone(),
            None,
        ),
        (
            "empty labelSelector matches all",
            sel(|s| s.label_selector = Some(LabelSelector::default())),
            t.clone(),
            Some(Specificity::LabelSelector),
        ),
        (
            "name wins over a matching labelSelector",
            sel(|s| {
                s.name = Some("db".into());
                s.label_selector = Some(label_selector("app", "web"));
            }),
            t.clone(),
            None,
        ),
        (
            "name wins over a failing labelSelector",
            sel(|s| {
                s.name = Some("web".into());
                s.label_selector = Some(label_selector("app", "db"));
            }),
            t.clone(),
            Some(Specificity::Name),
        ),
    ];
    for (case, s, t, want) in table {
        assert_eq!(selector_specificity(&s, &t), want, "{case}");
        assert_eq!(resource_selector_matches(&s, &t), want.is_some(), "{case}");
    }
}
