//! Who may write the MCS API (KEP-1645, API-9 and API-10), for `causeway webhook`'s
//! `POST /validate-mcs` (deploy/webhook/mcs-admission.yaml sends it the writes):
//!
//! - **ServiceImports** are the MCS controller's: a create, update (of the object or its
//!   status) or delete is allowed only for cluster admins (`--mcs-admin-group`, default
//!   `system:masters`) and the identities Causeway's controllers run as
//!   (`--mcs-writer`). kube-controller-manager's namespace controller and garbage
//!   collector (`system:kube-controller-manager`, or their own service accounts) may
//!   delete them and change only their finalizers and owner references, so namespace
//!   deletion and foreground or orphan deletes finish. Users export with ServiceExports
//!   instead.
//! - **ServiceExports** in the protected namespaces (`--protected-export-namespaces`,
//!   default `kube-system,default`) may be created or updated only by cluster admins,
//!   the `--mcs-writer` identities (a propagated ServiceExport is written by Causeway)
//!   and the members of `--protected-exporters-group`; the garbage collector may drop
//!   their finalizers and owner references, as for ServiceImports.
//!
//! RBAC still decides first (deploy/rbac/member.yaml gives namespace editors read-only
//! ServiceImports); this check holds even when a role grants more.

use serde_json::{Value, json};

/// The path kube-apiserver POSTs the MCS API's AdmissionReviews to.
pub const PATH: &str = "/validate-mcs";

/// The identities of kube-controller-manager's namespace controller and garbage
/// collector: one identity for all its controllers, or (with
/// `--use-service-account-credentials`) a service account each.
const CORE_CONTROLLERS: [&str; 3] = [
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
];

/// Whether an UPDATE changes nothing but the object's finalizers and owner references
/// (and what the API server keeps: resourceVersion, managedFields, generation).
fn only_finalizers_or_owners(req: &Value) -> bool {
    let strip = |o: &Value| {
        let mut o = o.clone();
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "finalizers",
                "ownerReferences",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(k);
            }
        }
        o
    };
    req["object"].is_object() && strip(&req["object"]) == strip(&req["oldObject"])
}

/// The flags of the MCS check.
#[derive(Clone, Debug, clap::Args)]
pub struct McsPolicy {
    /// A user besides cluster admins (`system:masters`) who may write ServiceImports and
    /// ServiceExports in protected namespaces: the identities Causeway's controllers
    /// run as (repeat the flag for each). Giving the flag replaces the defaults, deploy/'s
    /// service accounts system:serviceaccount:causeway-system:causeway-controller (the
    /// hub controller), system:serviceaccount:causeway-system:causeway-hub (the hub's
    /// access to a push-mode member) and
    /// system:serviceaccount:causeway-system:causeway-agent (a pull-mode agent): list
    /// those Causeway still runs as too, or its own writes are refused.
    #[arg(
        long = "mcs-writer",
        value_name = "USER",
        default_values = [
            "system:serviceaccount:causeway-system:causeway-controller",
            "system:serviceaccount:causeway-system:causeway-hub",
            "system:serviceaccount:causeway-system:causeway-agent",
        ]
    )]
    pub writers: Vec<String>,
    /// A group of cluster admins, who may write the MCS API freely (repeat the flag for
    /// each; give the group your cluster-admin binding names, e.g. on a managed
    /// Kubernetes whose admins are not in `system:masters`). Giving the flag replaces
    /// the default `system:masters`.
    #[arg(
        long = "mcs-admin-group",
        value_name = "GROUP",
        default_values = ["system:masters"]
    )]
    pub admin_groups: Vec<String>,
    /// Namespaces whose ServiceExports only cluster admins, `--mcs-writer` users and
    /// `--protected-exporters-group` members may create or change (comma-separated;
    /// "" for none).
    #[arg(
        long,
        value_name = "NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system,default"
    )]
    pub protected_export_namespaces: Vec<String>,
    /// The group whose members may export from the protected namespaces.
    #[arg(
        long,
        value_name = "GROUP",
        default_value = "causeway:protected-exporters"
    )]
    pub protected_exporters_group: String,
}

impl Default for McsPolicy {
    fn default() -> Self {
        <McsPolicy as clap::FromArgMatches>::from_arg_matches(
            &<McsPolicy as clap::Args>::augment_args(clap::Command::new("x"))
                .get_matches_from(["x"]),
        )
        .expect("the defaults parse")
    }
}

/// The AdmissionReview answering `review` under `policy`.
pub fn review_response(review: &Value, policy: &McsPolicy) -> Value {
    let req = &review["request"];
    let response = match denial(req, policy) {
        None => json!({"uid": req["uid"], "allowed": true}),
        Some(message) => json!({
            "uid": req["uid"],
            "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Why the request is denied, or `None`.
fn denial(req: &Value, policy: &McsPolicy) -> Option<String> {
    let user = req["userInfo"]["username"].as_str().unwrap_or("");
    let groups: Vec<&str> = req["userInfo"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if policy
        .admin_groups
        .iter()
        .any(|g| groups.contains(&g.as_str()))
        || policy.writers.iter().any(|w| w == user)
    {
        return None;
    }
    if req["resource"]["group"] != "multicluster.x-k8s.io" {
        return None;
    }
    let op = req["operation"].as_str().unwrap_or("");
    let ns = req["namespace"].as_str().unwrap_or("");
    let name = req["name"].as_str().unwrap_or("");
    let verb = match op {
        "CREATE" => "create",
        "UPDATE" => "change",
        "DELETE" => "delete",
        _ => return None,
    };
    let user_shown = if user.is_empty() { "anonymous" } else { user };
    // namespace deletion and foreground or orphan deletes must finish, for protected
    // ServiceExports as for ServiceImports
    if CORE_CONTROLLERS.contains(&user)
        && (op == "DELETE" || (op == "UPDATE" && only_finalizers_or_owners(req)))
    {
        return None;
    }
    match req["resource"]["resource"].as_str().unwrap_or("") {
        "serviceimports" => {
            let what = match req["subResource"].as_str() {
                Some("status") => "the status of ServiceImport",
                _ => "ServiceImport",
            };
            Some(format!(
                "{user_shown} may not {verb} {what} {ns}/{name}: ServiceImports are written only by \
                 the MCS controller (KEP-1645), which derives them from the ServiceExports of every \
                 cluster. Export the Service with a ServiceExport in each cluster that serves it \
                 instead (kubectl create -f serviceexport.yaml -n {ns}); cluster admins \
                 (`causeway webhook --mcs-admin-group`) and the `--mcs-writer` identities may \
                 write ServiceImports"
            ))
        }
        "serviceexports"
            if op != "DELETE"
                && policy
                    .protected_export_namespaces
                    .iter()
                    .any(|p| !p.is_empty() && p == ns)
                && !groups.contains(&policy.protected_exporters_group.as_str()) =>
        {
            Some(format!(
                "{user_shown} may not {verb} ServiceExport {ns}/{name}: exporting from namespace \
                 {ns} makes its Services reachable from every cluster of the clusterset, so only \
                 cluster admins and members of group {} may do it (KEP-1645; \
                 `causeway webhook --protected-export-namespaces`)",
                policy.protected_exporters_group
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(
        op: &str,
        resource: &str,
        sub: Option<&str>,
        ns: &str,
        user: &str,
        groups: &[&str],
    ) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": op, "name": "web", "namespace": ns,
            "resource": {"group": "multicluster.x-k8s.io", "version": "v1alpha1", "resource": resource},
            "subResource": sub,
            "userInfo": {"username": user, "groups": groups},
        }})
    }

    const EDITOR: &str = "alice";
    const CONTROLLER: &str = "system:serviceaccount:causeway-system:causeway-controller";
    const AGENT: &str = "system:serviceaccount:causeway-system:causeway-agent";
    const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
    const KCM: &str = "system:kube-controller-manager";
    const ADDON: &str = "system:serviceaccount:kube-system:some-addon";

    #[test]
    fn who_may_write_serviceimports_and_protected_serviceexports() {
        let p = McsPolicy::default();
        let authn = &["system:authenticated"][..];
        // (operation, resource, subresource, namespace, user, groups, allowed)
        type Case<'a> = (
            &'a str,
            &'a str,
            Option<&'a str>,
            &'a str,
            &'a str,
            &'a [&'a str],
            bool,
        );
        let cases: &[Case] = &[
            // ServiceImports: the controllers and admins only, whatever the namespace
            (
                "CREATE",
                "serviceimports",
                None,
                "shop",
                EDITOR,
                authn,
                false,
            ),
            (
                "UPDATE",
                "serviceimports",
                None,
                "shop",
                EDITOR,
                authn,
                false,
            ),
            (
                "UPDATE",
                "serviceimports",
                Some("status"),
                "shop",
                EDITOR,
                authn,
                false,
            ),
            (
                "DELETE",
                "serviceimports",
                None,
                "shop",
                EDITOR,
                authn,
                false,
            ),
            (
                "CREATE",
                "serviceimports",
                None,
                "shop",
                CONTROLLER,
                authn,
                true,
            ),
            (
                "UPDATE",
                "serviceimports",
                Some("status"),
                "shop",
                AGENT,
                authn,
                true,
            ),
            (
                "CREATE",
                "serviceimports",
                None,
                "shop",
                "root",
                &["system:masters"],
                true,
            ),
            ("DELETE", "serviceimports", None, "shop", GC, authn, true),
            ("DELETE", "serviceimports", None, "shop", KCM, authn, true),
            (
                "DELETE",
                "serviceimports",
                None,
                "shop",
                ADDON,
                authn,
                false,
            ),
            ("CREATE", "serviceimports", None, "shop", GC, authn, false),
            ("CREATE", "serviceimports", None, "shop", KCM, authn, false),
            // ServiceExports: anyone RBAC lets, except in the protected namespaces
            (
                "CREATE",
                "serviceexports",
                None,
                "shop",
                EDITOR,
                authn,
                true,
            ),
            (
                "CREATE",
                "serviceexports",
                None,
                "default",
                EDITOR,
                authn,
                false,
            ),
            (
                "UPDATE",
                "serviceexports",
                None,
                "kube-system",
                EDITOR,
                authn,
                false,
            ),
            (
                "DELETE",
                "serviceexports",
                None,
                "kube-system",
                EDITOR,
                authn,
                true,
            ),
            (
                "CREATE",
                "serviceexports",
                None,
                "default",
                EDITOR,
                &["causeway:protected-exporters"],
                true,
            ),
            (
                "CREATE",
                "serviceexports",
                None,
                "default",
                "root",
                &["system:masters"],
                true,
            ),
            (
                "CREATE",
                "serviceexports",
                None,
                "default",
                AGENT,
                authn,
                true,
            ),
        ];
        for (op, res, sub, ns, user, groups, allowed) in cases {
            let r = review_response(&review(op, res, *sub, ns, user, groups), &p);
            assert_eq!(r["response"]["uid"], "u-1");
            assert_eq!(
                r["response"]["allowed"], *allowed,
                "{op} {res}/{sub:?} in {ns} by {user} {groups:?}: {r}"
            );
        }
        // other groups' resources are not this check's business
        let mut other = review("CREATE", "serviceimports", None, "shop", EDITOR, authn);
        other["request"]["resource"]["group"] = json!("example.com");
        assert_eq!(review_response(&other, &p)["response"]["allowed"], true);
    }

    #[test]
    fn the_garbage_collector_may_drop_finalizers_and_owners_only() {
        let p = McsPolicy::default();
        let old = json!({"metadata": {"name": "web", "resourceVersion": "7",
            "finalizers": ["foregroundDeletion"], "ownerReferences": [{"uid": "u"}]},
            "spec": {"type": "ClusterSetIP"}});
        let update_in = |resource: &str, ns: &str, user: &str, new: &Value| {
            let mut r = review("UPDATE", resource, None, ns, user, &[]);
            r["request"]["oldObject"] = old.clone();
            r["request"]["object"] = new.clone();
            review_response(&r, &p)["response"]["allowed"].clone()
        };
        let update = |user: &str, new: Value| update_in("serviceimports", "shop", user, &new);
        // a ServiceExport in a protected namespace, deleted in the foreground or
        // orphaned: the collector finishes it, and still may not change its spec
        let released = json!({"metadata": {"name": "web", "resourceVersion": "8"},
            "spec": {"type": "ClusterSetIP"}});
        let changed = json!({"metadata": {"name": "web", "resourceVersion": "8"},
            "spec": {"type": "Headless"}});
        for ns in ["default", "kube-system"] {
            assert_eq!(update_in("serviceexports", ns, GC, &released), true);
            assert_eq!(update_in("serviceexports", ns, KCM, &released), true);
            assert_eq!(update_in("serviceexports", ns, EDITOR, &released), false);
            assert_eq!(update_in("serviceexports", ns, GC, &changed), false);
        }
        let released = json!({"metadata": {"name": "web", "resourceVersion": "8"},
            "spec": {"type": "ClusterSetIP"}});
        assert_eq!(update(GC, released.clone()), true);
        assert_eq!(update(KCM, released.clone()), true);
        assert_eq!(update(EDITOR, released), false, "others may not, even that");
        let changed = json!({"metadata": {"name": "web", "resourceVersion": "8"},
            "spec": {"type": "Headless"}});
        assert_eq!(
            update(GC, changed),
            false,
            "the spec is not the collector's"
        );
        // an admin group given by flag
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            p: McsPolicy,
        }
        let c = Cli::parse_from(["x", "--mcs-admin-group", "platform-admins"]);
        let r = review(
            "CREATE",
            "serviceimports",
            None,
            "shop",
            "bob",
            &["platform-admins"],
        );
        assert_eq!(review_response(&r, &c.p)["response"]["allowed"], true);
        let r = review(
            "CREATE",
            "serviceimports",
            None,
            "shop",
            "root",
            &["system:masters"],
        );
        assert_eq!(
            review_response(&r, &c.p)["response"]["allowed"],
            false,
            "the flag replaces the default group"
        );
    }

    #[test]
    fn denials_say_what_to_do_instead() {
        let p = McsPolicy::default();
        let r = review_response(
            &review("CREATE", "serviceimports", None, "shop", EDITOR, &[]),
            &p,
        );
        assert_eq!(r["response"]["status"]["code"], 403);
        let m = r["response"]["status"]["message"].as_str().unwrap();
        for part in [
            "alice may not create ServiceImport shop/web",
            "written only by the MCS controller",
            "Export the Service with a ServiceExport",
            "--mcs-writer",
        ] {
            assert!(m.contains(part), "{part:?} in {m}");
        }
        let r = review_response(
            &review("UPDATE", "serviceimports", Some("status"), "shop", "", &[]),
            &p,
        );
        let m = r["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.starts_with("anonymous may not change the status of ServiceImport shop/web"),
            "{m}"
        );
        let r = review_response(
            &review("CREATE", "serviceexports", None, "kube-system", EDITOR, &[]),
            &p,
        );
        let m = r["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("alice may not create ServiceExport kube-system/web")
                && m.contains("members of group causeway:protected-exporters"),
            "{m}"
        );
    }

    #[test]
    fn the_protected_namespaces_and_group_are_flags() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            p: McsPolicy,
        }
        let c = Cli::parse_from([
            "x",
            "--protected-export-namespaces",
            "payments",
            "--protected-exporters-group",
            "exporters",
            "--mcs-writer",
            "me",
        ]);
        let r = |ns: &str, user: &str, groups: &[&str]| {
            review_response(
                &review("CREATE", "serviceexports", None, ns, user, groups),
                &c.p,
            )["response"]["allowed"]
                .clone()
        };
        assert_eq!(r("default", EDITOR, &[]), true);
        assert_eq!(r("payments", EDITOR, &[]), false);
        assert_eq!(r("payments", EDITOR, &["exporters"]), true);
        assert_eq!(r("payments", "me", &[]), true);
        assert_eq!(
            r("payments", AGENT, &[]),
            false,
            "the defaults are replaced"
        );
        // the help says the flag replaces its defaults, and names them
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let writer = help
            .split("--mcs-writer <USER>")
            .nth(1)
            .and_then(|h| h.split("--mcs-admin-group").next())
            .unwrap();
        assert!(
            writer.contains("Giving the flag replaces the defaults"),
            "{writer}"
        );
        for default in McsPolicy::default().writers {
            assert!(
                writer.contains(&format!("{default} (")),
                "{default}: {writer}"
            );
        }
        let none = Cli::parse_from(["x", "--protected-export-namespaces", ""]);
        assert!(
            none.p
                .protected_export_namespaces
                .iter()
                .all(|n| n.is_empty())
        );
    }
}
