//! What installing a CRD into a cluster should do when one of that name is already
//! there (API-8): pure, so every installer (`causeway crds install`, causeway-local,
//! the tests) decides alike.
//!
//! - **Ours** (labelled `causeway.io/release-version`): replaced, unless a newer
//!   Causeway installed it: a downgrade could prune fields the newer release stores.
//! - **mcs-api's** (labelled `multicluster.x-k8s.io/release-version` and
//!   `crd-schema-revision`, no Causeway label): the newer schema wins, as mcs-api's
//!   labels are meant for; a newer one is kept, an older or equal one upgraded.
//! - **Another installer's** of a group Causeway does not own (Gateway API, the About
//!   API, Karmada's MultiClusterIngress): kept when it serves every version Causeway
//!   talks, since upstream schemas are supersets of Causeway's subset (replacing them
//!   would prune what other implementations store); refused with what to do otherwise.
//!   One exception the controllers handle: Karmada's MultiClusterIngress status has no
//!   `conditions`, so the MCI controller writes its status without them (and says
//!   Accepted as an Event).
//!   A Gateway API CRD that carries its `bundle-version` annotation is upstream's even
//!   when an upgrade kept an older Causeway's label.
//! - A `causeway.io` CRD without the label, or another group's that Causeway's field
//!   manager applied, comes from a Causeway before the label and is replaced.
//!
//! `force` replaces every CRD whatever is installed.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use semver::Version;

use crate::well_known::labels;

/// The Causeway release whose CRDs this build generates (the `causeway.io/release-version`
/// label).
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// What to do with one CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// None is installed: create it.
    Create,
    /// Replace the installed one with Causeway's.
    Update,
    /// Leave the installed one; the text says why.
    Keep(String),
}

/// Decides what to do with `ours` given what is `installed`; `Err` says why it may not
/// be installed and what to do.
pub fn plan(
    installed: Option<&CustomResourceDefinition>,
    ours: &CustomResourceDefinition,
    force: bool,
) -> Result<Action, String> {
    let Some(installed) = installed else {
        return Ok(Action::Create);
    };
    if force {
        return Ok(Action::Update);
    }
    let name = ours.metadata.name.as_deref().unwrap_or_default();
    let label = |crd: &CustomResourceDefinition, key: &str| {
        crd.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
    };
    // Gateway API's own CRDs carry their bundle version: an upstream upgrade that kept
    // an older Causeway label is upstream's now
    let upstream_bundle = installed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GATEWAY_BUNDLE_VERSION))
        .cloned();
    let causeways_group = ours.spec.group == "causeway.io" || mcs_release(ours).is_some();
    let labelled = label(installed, labels::RELEASE_VERSION)
        .filter(|_| causeways_group || upstream_bundle.is_none());
    if let Some(theirs) = labelled {
        let mine = label(ours, labels::RELEASE_VERSION).unwrap_or_else(|| RELEASE.into());
        return match (version(&theirs), version(&mine)) {
            (Some(t), Some(m)) if t > m => Err(format!(
                "CRD {name} was installed by Causeway {theirs}, newer than this Causeway ({mine}); installing it would downgrade the schema and could prune fields {theirs} stores: use Causeway {theirs} or newer, or pass --force to downgrade anyway"
            )),
            (Some(_), Some(_)) => Ok(Action::Update),
            (None, _) => Err(format!(
                "CRD {name} carries {}={theirs:?}, which is not a release version; fix or remove the label, or pass --force to replace the CRD",
                labels::RELEASE_VERSION
            )),
            (_, None) => Err(format!(
                "this Causeway's CRD {name} carries {}={mine:?}, which is not a release version",
                labels::RELEASE_VERSION
            )),
        };
    }
    if let Some(theirs) = mcs_release(installed) {
        let mine = mcs_release(ours);
        return Ok(match mine {
            Some(mine) if (&theirs.0, theirs.1) > (&mine.0, mine.1) => Action::Keep(format!(
                "mcs-api {} (schema revision {}) is installed, newer than Causeway's {} (revision {}); the newer schema is kept",
                theirs.2, theirs.1, mine.2, mine.1
            )),
            _ => Action::Update,
        });
    }
    if causeways_group {
        // Causeway's own group, or an mcs-api CRD without its release labels: ours
        return Ok(Action::Update);
    }
    if upstream_bundle.is_none() && applied_by_causeway(installed) {
        // another group's CRD a Causeway from before the label installed
        return Ok(Action::Update);
    }
    let served = |crd: &CustomResourceDefinition| -> Vec<String> {
        crd.spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect()
    };
    let theirs = served(installed);
    let missing: Vec<String> = served(ours)
        .into_iter()
        .filter(|v| !theirs.contains(v))
        .collect();
    if missing.is_empty() {
        let bundle = upstream_bundle
            .map(|v| format!(" (Gateway API {v})"))
            .unwrap_or_default();
        Ok(Action::Keep(format!(
            "installed by another installer{bundle}, serving {}; kept",
            theirs.join(", ")
        )))
    } else {
        Err(format!(
            "CRD {name} was installed by another installer and does not serve {} (it serves {}), which Causeway uses: upgrade it, or pass --force to replace it with Causeway's",
            missing.join(", "),
            if theirs.is_empty() {
                "nothing".to_string()
            } else {
                theirs.join(", ")
            }
        ))
    }
}

/// The annotation Gateway API's own CRDs carry.
const GATEWAY_BUNDLE_VERSION: &str = "gateway.networking.k8s.io/bundle-version";

/// Whether Causeway's field manager applied the CRD (installs from before the label).
fn applied_by_causeway(crd: &CustomResourceDefinition) -> bool {
    crd.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(crate::well_known::FIELD_MANAGER))
}

/// `v1.2.3` or `1.2.3` as a semantic version.
fn version(s: &str) -> Option<Version> {
    Version::parse(s.strip_prefix('v').unwrap_or(s)).ok()
}

/// The mcs-api release and schema revision of an MCS CRD, from its labels (API-8), and
/// the release as written.
fn mcs_release(crd: &CustomResourceDefinition) -> Option<(Version, u64, String)> {
    let labels = crd.metadata.labels.as_ref()?;
    let written = labels.get(labels::MCS_RELEASE_VERSION)?;
    let release = version(written)?;
    let revision = labels
        .get(labels::MCS_CRD_SCHEMA_REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    Some((release, revision, written.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdgen::all_crds;

    fn ours(name: &str) -> CustomResourceDefinition {
        all_crds()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no CRD {name}"))
    }

    /// `crd` with `labels` set (an empty value removes the label) and only `served`
    /// versions served, when given.
    fn installed(
        crd: &CustomResourceDefinition,
        labels: &[(&str, &str)],
        served: Option<&[&str]>,
    ) -> CustomResourceDefinition {
        let mut crd = crd.clone();
        let map = crd.metadata.labels.get_or_insert_with(Default::default);
        for (k, v) in labels {
            if v.is_empty() {
                map.remove(*k);
            } else {
                map.insert(k.to_string(), v.to_string());
            }
        }
        if let Some(served) = served {
            for v in &mut crd.spec.versions {
                v.served = served.contains(&v.name.as_str());
            }
        }
        crd
    }

    fn annotated(mut crd: CustomResourceDefinition, k: &str, v: &str) -> CustomResourceDefinition {
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        crd
    }

    fn applied_by(mut crd: CustomResourceDefinition, manager: &str) -> CustomResourceDefinition {
        crd.metadata.managed_fields = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some("Apply".into()),
                ..Default::default()
            },
        ]);
        crd
    }

    #[test]
    fn every_crd_carries_the_release_label() {
        for crd in all_crds() {
            let labels = crd.metadata.labels.as_ref().expect("labels");
            assert_eq!(
                labels.get(labels::RELEASE_VERSION).map(String::as_str),
                Some(RELEASE),
                "{:?}",
                crd.metadata.name
            );
        }
    }

    #[test]
    fn what_install_does_with_each_installed_crd() {
        let cluster = ours("clusters.causeway.io");
        let export = ours("serviceexports.multicluster.x-k8s.io");
        let route = ours("httproutes.gateway.networking.k8s.io");
        let property = ours("clusterproperties.about.k8s.io");
        let rel = labels::RELEASE_VERSION;
        let mcs = labels::MCS_RELEASE_VERSION;
        let rev = labels::MCS_CRD_SCHEMA_REVISION;
        type Case<'a> = (
            &'a str,
            &'a CustomResourceDefinition,
            Option<CustomResourceDefinition>,
            Result<&'a str, &'a str>,
        );
        let cases: Vec<Case> = vec![
            ("nothing installed", &cluster, None, Ok("create")),
            (
                "ours, same release",
                &cluster,
                Some(cluster.clone()),
                Ok("update"),
            ),
            (
                "ours, older release",
                &cluster,
                Some(installed(&cluster, &[(rel, "0.0.9")], None)),
                Ok("update"),
            ),
            (
                "ours, newer release",
                &cluster,
                Some(installed(&cluster, &[(rel, "9.0.0")], None)),
                Err("installed by Causeway 9.0.0, newer than this Causeway"),
            ),
            (
                "ours, a label that is no version",
                &cluster,
                Some(installed(&cluster, &[(rel, "latest")], None)),
                Err("not a release version"),
            ),
            (
                "causeway.io from before the label",
                &cluster,
                Some(installed(&cluster, &[(rel, "")], None)),
                Ok("update"),
            ),
            (
                "mcs-api newer release",
                &export,
                Some(installed(&export, &[(rel, ""), (mcs, "v0.6.0")], None)),
                Ok("keep:mcs-api v0.6.0"),
            ),
            (
                "mcs-api same release, newer schema revision",
                &export,
                Some(installed(&export, &[(rel, ""), (rev, "1")], None)),
                Ok("keep:revision 1"),
            ),
            (
                "mcs-api older release",
                &export,
                Some(installed(&export, &[(rel, ""), (mcs, "v0.4.0")], None)),
                Ok("update"),
            ),
            (
                "mcs-api without its labels",
                &export,
                Some(installed(&export, &[(rel, ""), (mcs, ""), (rev, "")], None)),
                Ok("update"),
            ),
            (
                "Gateway API's own, serving v1",
                &route,
                Some(installed(&route, &[(rel, "")], None)),
                Ok("keep:another installer"),
            ),
            (
                "Gateway API's own, upgraded over an older Causeway's (label kept)",
                &route,
                Some(annotated(
                    installed(&route, &[(rel, "0.0.1")], None),
                    GATEWAY_BUNDLE_VERSION,
                    "v1.3.0",
                )),
                Ok("keep:Gateway API v1.3.0"),
            ),
            (
                "another group's CRD a Causeway from before the label applied",
                &route,
                Some(applied_by(
                    installed(&route, &[(rel, "")], None),
                    crate::well_known::FIELD_MANAGER,
                )),
                Ok("update"),
            ),
            (
                "Gateway API's own, too old to serve v1",
                &route,
                Some(installed(&route, &[(rel, "")], Some(&[]))),
                Err("does not serve v1 (it serves nothing)"),
            ),
            (
                "About API's own, v1alpha1 only",
                &property,
                Some(installed(&property, &[(rel, "")], Some(&["v1alpha1"]))),
                Err("does not serve v1beta1 (it serves v1alpha1)"),
            ),
        ];
        for (what, ours, installed, want) in cases {
            let got = plan(installed.as_ref(), ours, false);
            match (want, got) {
                (Ok("create"), Ok(Action::Create)) | (Ok("update"), Ok(Action::Update)) => {}
                (Ok(w), Ok(Action::Keep(why))) if w.starts_with("keep:") => {
                    assert!(why.contains(&w[5..]), "{what}: {why}")
                }
                (Err(w), Err(e)) => assert!(e.contains(w), "{what}: {e}"),
                (want, got) => panic!("{what}: want {want:?}, got {got:?}"),
            }
            // --force replaces whatever is there
            let forced = plan(installed.as_ref(), ours, true).unwrap();
            let expected = if installed.is_some() {
                Action::Update
            } else {
                Action::Create
            };
            assert_eq!(forced, expected, "{what} with --force");
        }
    }

    #[test]
    fn versions_compare_as_releases_not_text() {
        assert!(version("v0.10.0") > version("v0.9.1"));
        assert!(version("1.0.0") > version("1.0.0-rc.1"));
        assert_eq!(version("v0.5.0"), version("0.5.0"));
        assert_eq!(version("five"), None);
    }
}
