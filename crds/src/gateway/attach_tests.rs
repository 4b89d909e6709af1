use super::*;
use serde_json::json;

fn route(v: serde_json::Value) -> HTTPRoute {
    let mut r: HTTPRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": "app"}, "spec": v,
    }))
    .unwrap();
    r.metadata.namespace = Some("app".into());
    r
}

fn gateway(ns: &str, class: &str, listeners: serde_json::Value) -> Arc<Gateway> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": ns},
            "spec": {"gatewayClassName": class, "listeners": listeners},
        }))
        .unwrap(),
    )
}

fn classes() -> Vec<Arc<GatewayClass>> {
    let c = |name: &str, ctl: &str| {
        Arc::new(
            serde_json::from_value::<GatewayClass>(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": name}, "spec": {"controllerName": ctl},
            }))
            .unwrap(),
        )
    };
    vec![
        c("causeway", CONTROLLER_NAME),
        c("other", "example.com/other"),
    ]
}

#[test]
fn hostname_intersection_table() {
    let s = |v: &[&str]| v.iter().map(|h| h.to_string()).collect::<Vec<_>>();
    type Case<'a> = (Option<&'a str>, &'a [&'a str], Option<&'a [&'a str]>);
    let cases: &[Case<'_>] = &[
        (None, &[], Some(&[])),
        (None, &["a.com"], Some(&["a.com"])),
        (Some("a.com"), &[], Some(&["a.com"])),
        (Some("a.com"), &["a.com", "b.com"], Some(&["a.com"])),
        (Some("a.com"), &["b.com"], None),
        (
            Some("*.example.com"),
            &["foo.example.com"],
            Some(&["foo.example.com"]),
        ),
        (
            Some("*.example.com"),
            &["a.b.example.com"],
            Some(&["a.b.example.com"]),
        ),
        (
            Some("foo.example.com"),
            &["*.example.com"],
            Some(&["foo.example.com"]),
        ),
        (
            Some("*.example.com"),
            &["*.example.com"],
            Some(&["*.example.com"]),
        ),
        (
            Some("*.example.com"),
            &["*.foo.example.com"],
            Some(&["*.foo.example.com"]),
        ),
        (Some("*.example.com"), &["example.com"], None),
        (Some("Foo.COM"), &["foo.com"], Some(&["foo.com"])),
    ];
    for (l, r, want) in cases {
        assert_eq!(intersect(*l, &s(r)), want.map(s), "{l:?} {r:?}");
    }
}

#[test]
fn parent_verdicts_carry_the_spec_reasons() {
    let gws = vec![
        gateway(
            "infra",
            "causeway",
            json!([
                {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "same", "port": 8080, "protocol": "HTTP"},
                {"name": "tls", "port": 443, "protocol": "HTTPS"},
            ]),
        ),
        gateway(
            "app",
            "other",
            json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
        ),
    ];
    let ns = BTreeMap::new();
    let verdict = |spec: serde_json::Value| {
        let v = parents(&route(spec), &gws, &classes(), &ns);
        v.into_iter()
            .map(|p| {
                p.attached
                    .map(|ls| {
                        ls.into_iter()
                            .map(|l| (l.name, l.hostnames))
                            .collect::<Vec<_>>()
                    })
                    .map_err(|r| r.reason)
            })
            .collect::<Vec<_>>()
    };
    let infra = |extra: serde_json::Value| {
        let mut p = json!({"name": "gw", "namespace": "infra"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    // Attached to the listener allowing all namespaces, with the listener's hostname.
    assert_eq!(
        verdict(json!({"parentRefs": [infra(json!({}))]})),
        vec![Ok(vec![(
            "http".to_string(),
            vec!["*.example.com".to_string()]
        )])]
    );
    assert_eq!(
        verdict(json!({"parentRefs": [infra(json!({"sectionName": "nope"}))]})),
        vec![Err(NO_MATCHING_PARENT)]
    );
    assert_eq!(
        verdict(json!({"parentRefs": [infra(json!({"port": 81}))]})),
        vec![Err(NO_MATCHING_PARENT)]
    );
    assert_eq!(
        verdict(json!({"parentRefs": [infra(json!({"sectionName": "same"}))]})),
        vec![Err(NOT_ALLOWED_BY_LISTENERS)]
    );
    assert_eq!(
        verdict(
            json!({"parentRefs": [infra(json!({"sectionName": "http"}))], "hostnames": ["other.org"]})
        ),
        vec![Err(NO_MATCHING_LISTENER_HOSTNAME)]
    );
    assert_eq!(
        verdict(json!({"parentRefs": [infra(json!({}))],
            "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "/a.*"}}]}]})),
        vec![Err(UNSUPPORTED_VALUE)]
    );
    // Another controller's Gateway, and a missing one: no verdict of ours.
    assert_eq!(
        verdict(json!({"parentRefs": [{"name": "gw"}, {"name": "missing"}]})),
        vec![]
    );
}

#[test]
fn listeners_selecting_namespaces() {
    let gws = vec![gateway(
        "infra",
        "causeway",
        json!([{"name": "http", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "Selector",
                    "selector": {"matchLabels": {"gateway": "shared"}}}}}]),
    )];
    let r = route(json!({"parentRefs": [{"name": "gw", "namespace": "infra"}]}));
    let mut ns = BTreeMap::new();
    let v = parents(&r, &gws, &classes(), &ns);
    assert_eq!(
        v[0].attached.as_ref().unwrap_err().reason,
        NOT_ALLOWED_BY_LISTENERS
    );
    ns.insert(
        "app".to_string(),
        BTreeMap::from([("gateway".to_string(), "shared".to_string())]),
    );
    assert!(parents(&r, &gws, &classes(), &ns)[0].attached.is_ok());
}

#[test]
fn backend_kinds_and_reference_grants() {
    let grant = |ns: &str, from_ns: &str, kind: &str, name: Option<&str>| {
        let group = if kind == "ServiceImport" {
            MCS_GROUP
        } else {
            ""
        };
        Arc::new(
            serde_json::from_value::<ReferenceGrant>(json!({
                "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
                "metadata": {"name": "g", "namespace": ns},
                "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": from_ns}],
                         "to": [{"group": group, "kind": kind, "name": name}]},
            }))
            .unwrap(),
        )
    };
    let b = |v: serde_json::Value| serde_json::from_value::<HTTPBackendRef>(v).unwrap();
    let check = |r: &HTTPBackendRef, grants: &[Arc<ReferenceGrant>]| {
        backend("app", r, grants).map_err(|e| e.reason)
    };
    let svc = b(json!({"name": "web", "port": 80}));
    assert_eq!(check(&svc, &[]), Ok((BackendKind::Service, "app".into())));
    let si = b(json!({"group": MCS_GROUP, "kind": "ServiceImport", "name": "web", "port": 80}));
    assert_eq!(
        check(&si, &[]),
        Ok((BackendKind::ServiceImport, "app".into()))
    );
    assert_eq!(
        check(&b(json!({"kind": "ConfigMap", "name": "x"})), &[]),
        Err(INVALID_KIND)
    );
    let other = b(json!({"name": "web", "namespace": "backends", "port": 80}));
    assert_eq!(check(&other, &[]), Err(REF_NOT_PERMITTED));
    assert_eq!(
        check(&other, &[grant("backends", "app", "Service", None)]),
        Ok((BackendKind::Service, "backends".into()))
    );
    assert_eq!(
        check(&other, &[grant("backends", "app", "Service", Some("web"))]),
        Ok((BackendKind::Service, "backends".into()))
    );
    // The grant must be in the target namespace, from this namespace, to this kind and name.
    for g in [
        grant("app", "app", "Service", None),
        grant("backends", "elsewhere", "Service", None),
        grant("backends", "app", "ServiceImport", None),
        grant("backends", "app", "Service", Some("api")),
    ] {
        assert_eq!(check(&other, &[g]), Err(REF_NOT_PERMITTED));
    }
}

/// Values the proxy cannot apply as written refuse the route, each said, instead of
/// loosening a match (an invalid header name dropped, an invalid method taken as any)
/// or filtering otherwise than asked (308 sent as 302, an unknown path type skipped).
#[test]
fn values_the_proxy_cannot_apply_refuse_the_route() {
    let rows: [(serde_json::Value, Option<&str>); 9] = [
        (
            json!({"matches": [{"method": "GET", "headers": [{"name": "x-canary", "value": "1"}]}],
                   "filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 301, "scheme": "https",
                                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}]}),
            None,
        ),
        (
            json!({"matches": [{"headers": [{"name": "x canary", "value": "1"}]}]}),
            Some("rules[0]: header match name \"x canary\" is not a header name"),
        ),
        (
            json!({"matches": [{"method": "GET "}]}),
            Some(
                "rules[0]: method \"GET \" is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH",
            ),
        ),
        (
            json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 308}}]}),
            Some("rules[0]: RequestRedirect statusCode 308 is not supported (use 301 or 302)"),
        ),
        (
            json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "ftp"}}]}),
            Some("rules[0]: RequestRedirect scheme \"ftp\" is not http or https"),
        ),
        (
            json!({"filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplaceRegex"}}}]}),
            Some(
                "rules[0]: URLRewrite path type \"ReplaceRegex\" is not supported (use ReplaceFullPath or ReplacePrefixMatch)",
            ),
        ),
        (
            json!({"filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplaceFullPath"}}}]}),
            Some("rules[0]: URLRewrite path type ReplaceFullPath needs replaceFullPath"),
        ),
        (
            json!({"filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "ok", "value": "1"}, {"name": "bad:name", "value": "2"}], "remove": ["not a header"]}}]}),
            Some("rules[0]: RequestHeaderModifier header name \"bad:name\" is not a header name"),
        ),
        (
            json!({"filters": [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "", "value": "1"}]}}]}),
            Some("rules[0]: ResponseHeaderModifier header name \"\" is not a header name"),
        ),
    ];
    for (rule, want) in rows {
        let r = route(json!({"rules": [rule]}));
        assert_eq!(unsupported(&r).as_deref(), want, "{rule}");
    }
}

/// What upstream's CRD validation (CEL) refuses is refused here too (Causeway's CRD
/// carries no such rule), each said with what to change: a ReplacePrefixMatch beside a
/// match that is not a PathPrefix, a redirect with a rewrite or with backendRefs, a core
/// filter twice in one list, a header value that is no HTTP field value.
#[test]
fn what_upstream_validation_refuses_is_refused_with_what_to_fix() {
    let redirect_prefix = json!({"type": "RequestRedirect", "requestRedirect": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}});
    let rewrite_prefix = json!({"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}});
    let set = |value: &str| json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-a", "value": value}]}});
    let backend = json!({"name": "web", "port": 80});
    let rows: Vec<(serde_json::Value, Option<&str>)> = vec![
        // accepted: PathPrefix matches only (none given: PathPrefix /), one of each
        // filter, an obs-text value (RFC 9110 allows it)
        (
            json!({"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}, {"path": {"value": "/b"}}, {"method": "GET"}],
                   "filters": [rewrite_prefix.clone(), set("caf\u{e9}"),
                               {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-b", "value": "\t1 2"}]}}],
                   "backendRefs": [backend.clone()]}),
            None,
        ),
        (json!({"filters": [redirect_prefix.clone()]}), None),
        (
            json!({"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}, {"path": {"type": "Exact", "value": "/b"}}],
                   "filters": [rewrite_prefix.clone()], "backendRefs": [backend.clone()]}),
            Some(
                "rules[0]: URLRewrite path type ReplacePrefixMatch replaces the prefix a PathPrefix match matched, and matches[1] is Exact: use ReplaceFullPath, or PathPrefix matches only",
            ),
        ),
        (
            json!({"matches": [{"path": {"type": "Exact", "value": "/a"}}], "filters": [redirect_prefix.clone()]}),
            Some(
                "rules[0]: RequestRedirect path type ReplacePrefixMatch replaces the prefix a PathPrefix match matched, and matches[0] is Exact: use ReplaceFullPath, or PathPrefix matches only",
            ),
        ),
        (
            json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}, rewrite_prefix.clone()]}),
            Some(
                "rules[0]: RequestRedirect and URLRewrite cannot be used together (a redirect answers the request, a rewrite forwards it): keep one of them",
            ),
        ),
        (
            json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}], "backendRefs": [backend.clone()]}),
            Some(
                "rules[0]: RequestRedirect answers every request itself, so backendRefs cannot be used with it: remove the backendRefs or the filter",
            ),
        ),
        (
            json!({"filters": [set("1"), set("2")], "backendRefs": [backend.clone()]}),
            Some(
                "rules[0]: filter RequestHeaderModifier is given 2 times: put all its edits in one",
            ),
        ),
        (
            json!({"filters": [set("a\nb")], "backendRefs": [backend.clone()]}),
            Some(
                "rules[0]: RequestHeaderModifier header x-a: value \"a\\nb\" is not an HTTP header value (control characters other than tab are not allowed): remove them",
            ),
        ),
        (
            json!({"filters": [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-b", "value": "a\u{7f}"}]}}]}),
            Some(
                "rules[0]: ResponseHeaderModifier header x-b: value \"a\\u{7f}\" is not an HTTP header value (control characters other than tab are not allowed): remove them",
            ),
        ),
    ];
    for (rule, want) in rows {
        let r = route(json!({"rules": [rule]}));
        assert_eq!(unsupported(&r).as_deref(), want, "{rule}");
    }
}

fn ingress_classes() -> Vec<k8s_openapi::api::networking::v1::IngressClass> {
    vec![
        serde_json::from_value(json!({
            "metadata": {"name": "causeway", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": crate::well_known::INGRESS_CONTROLLER},
        }))
        .unwrap(),
    ]
}

fn mci(
    ns: &str,
    name: &str,
    created: &str,
    spec: serde_json::Value,
) -> Arc<crate::mci::MultiClusterIngress> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": spec,
        }))
        .unwrap(),
    )
}

/// Objects of one age go in the alphabetical order of `namespace/name` (the Gateway
/// API's tie-break): `team-b/api` before `team/web`, as '-' sorts before '/'.
#[test]
fn mcis_of_one_age_go_by_namespace_slash_name() {
    let t = "2026-01-01T00:00:00Z";
    let spec = json!({
        "rules": [{"host": "a.ex", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}],
        "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
    });
    let rule_less = json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}});
    let mcis = vec![
        mci("team", "web", t, spec.clone()),
        mci("team-b", "api", t, spec),
        mci("team", "z", t, rule_less.clone()),
        mci("team-b", "z", t, rule_less),
    ];
    let hosts = mci_hosts(&mcis, &ingress_classes());
    let a = &hosts.hosts[&Some("a.ex".to_string())];
    assert_eq!(a.paths[0].mci, "team-b/api");
    assert_eq!(a.default.as_deref(), Some("team-b/api"));
    assert_eq!(hosts.catch_all.as_deref(), Some("team-b/z"));
}

/// What each served MCI loses to an older one (or to an earlier rule of its own), as
/// causeway-proxy serves them: identical path rules (a prefix's trailing `/` aside), the
/// default of a host an older MCI names first, the catch-all an older MCI provides.
#[test]
fn mci_claims_say_what_each_mci_loses_and_to_whom() {
    let b = json!({"service": {"name": "web", "port": {"number": 80}}});
    let path = |p: &str, t: &str| json!({"path": p, "pathType": t, "backend": b.clone()});
    let mcis = vec![
        mci(
            "ns",
            "young",
            "2026-01-02T00:00:00Z",
            json!({"rules": [{"host": "a.ex", "http": {"paths": [path("/api/", "Prefix"), path("/web", "Prefix"), path("/api", "Exact"), path("/web", "ImplementationSpecific")]}}],
                   "defaultBackend": b.clone()}),
        ),
        mci(
            "ns",
            "old",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "a.ex", "http": {"paths": [path("/api", "Prefix")]}}]}),
        ),
        mci(
            "ns",
            "copy",
            "2026-01-03T00:00:00Z",
            json!({"rules": [{"host": "a.ex", "http": {"paths": [path("/web", "Prefix")]}}]}),
        ),
        mci(
            "ns",
            "catch",
            "2026-01-01T00:00:00Z",
            json!({"defaultBackend": b.clone()}),
        ),
        mci(
            "ns",
            "catch2",
            "2026-01-04T00:00:00Z",
            json!({"defaultBackend": b.clone()}),
        ),
    ];
    let claims = mci_claims(&mcis, &ingress_classes());
    assert_eq!(claims.hosts, mci_hosts(&mcis, &ingress_classes()));
    let said = |id: &str| -> Vec<String> {
        claims.conflicts[id]
            .shadowed
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert!(!claims.conflicts.contains_key("ns/old"));
    assert!(!claims.conflicts.contains_key("ns/catch"));
    assert_eq!(
        said("ns/young"),
        [
            "path /api/ (Prefix) of host a.ex is served by the older MultiClusterIngress ns/old",
            "path /web (ImplementationSpecific) of host a.ex repeats an earlier rule of its own, which is the one served",
            "defaultBackend does not serve host a.ex: the older MultiClusterIngress ns/old names it first and decides its default",
        ]
    );
    // young keeps /web and the Exact /api: still served in part
    assert_eq!(claims.conflicts["ns/young"].claims, 5);
    assert!(!claims.conflicts["ns/young"].all_shadowed());
    assert_eq!(
        said("ns/copy"),
        ["path /web (Prefix) of host a.ex is served by the older MultiClusterIngress ns/young"]
    );
    assert!(claims.conflicts["ns/copy"].all_shadowed());
    assert_eq!(
        said("ns/catch2"),
        [
            "defaultBackend is not the catch-all for hosts no rule names: the older MultiClusterIngress ns/catch provides it"
        ]
    );
    assert!(claims.conflicts["ns/catch2"].all_shadowed());
}
