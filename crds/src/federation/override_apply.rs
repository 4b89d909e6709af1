//! Applying override policies to a resource template for one member cluster, with
//! provenance (issue 14 item 3; requirements D.26–31 of
//! `../shared/reference/federation.md` §8).
//!
//! 1. [`applicable_policies`] picks the rules of the OverridePolicies and
//!    ClusterOverridePolicies that apply to a template in a cluster, in the order
//!    they apply (D.28, D.31).
//! 2. [`apply`] applies them to the template's manifest, each rule's overriders in
//!    the order image → command → args → labels → annotations → field → plaintext
//!    (D.27), and returns the result with a [`Provenance`]: which rule changed each
//!    path, so that `causeway explain` can say why a cluster's copy differs.
//! 3. [`validate`] is the admission check of a policy's overriders (D.26).
//!
//! Everything here is pure: no client, no clock.

use std::collections::BTreeMap;
use std::fmt;

use kube::ResourceExt;
use serde_json::Value;

use super::cluster::Cluster;
use super::overrides::{ClusterOverridePolicy, OverridePolicy, OverrideSpec, Overriders};
use super::schedule::affinity_matches;
use super::selection::{Specificity, TemplateMeta, policy_specificity};

mod image;
mod ops;
mod pointer;
mod validate;

pub use image::{ImageRef, pod_spec_pointer};
pub use ops::FORBIDDEN_PATHS;
pub use pointer::display_path;
pub use validate::validate;

/// The two kinds of override policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    /// `ClusterOverridePolicy` (cluster-scoped; applies first).
    ClusterOverridePolicy,
    /// `OverridePolicy` (namespaced; applies after the cluster-scoped ones).
    OverridePolicy,
}

/// Names an override policy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    /// Which kind of policy.
    pub kind: PolicyKind,
    /// The namespace of an OverridePolicy; `None` for a ClusterOverridePolicy.
    pub namespace: Option<String>,
    /// The policy's name.
    pub name: String,
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.name)
    }
}

/// Names one rule (an entry of `spec.overrideRules`) of a policy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId {
    /// The policy.
    pub policy: PolicyId,
    /// The index of the rule in `spec.overrideRules`.
    pub rule: usize,
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rule {}", self.policy, self.rule)
    }
}

/// The seven overriders, in the order they apply within a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OverriderKind {
    /// `imageOverrider`.
    Image,
    /// `commandOverrider`.
    Command,
    /// `argsOverrider`.
    Args,
    /// `labelsOverrider`.
    Labels,
    /// `annotationsOverrider`.
    Annotations,
    /// `fieldOverrider`.
    Field,
    /// `plaintext`.
    Plaintext,
}

impl OverriderKind {
    /// The field name in `overriders` (`imageOverrider`, ...).
    pub fn field(self) -> &'static str {
        match self {
            Self::Image => "imageOverrider",
            Self::Command => "commandOverrider",
            Self::Args => "argsOverrider",
            Self::Labels => "labelsOverrider",
            Self::Annotations => "annotationsOverrider",
            Self::Field => "fieldOverrider",
            Self::Plaintext => "plaintext",
        }
    }

    /// A short name for people (`image`, `plaintext`, ...).
    pub fn short(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Command => "command",
            Self::Args => "args",
            Self::Labels => "labels",
            Self::Annotations => "annotations",
            Self::Field => "field",
            Self::Plaintext => "plaintext",
        }
    }
}

/// Which overrider of which rule set a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The rule.
    pub rule: RuleId,
    /// The overrider in it.
    pub overrider: OverriderKind,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.rule, self.overrider.short())
    }
}

/// For every path whose value in the result differs from the template, the
/// overrider that wrote it last. Keys are JSON pointers; [`Provenance`]'s `Display`
/// prints one line per path: `spec.template.spec.containers[0].image ← OverridePolicy
/// prod/registry rule 0 (image)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    changes: BTreeMap<String, Origin>,
    overlaps: Vec<Overlap>,
    /// Recorded pointers whose write inserted into or removed from an array: the
    /// items after it shift, but their values stay.
    shifts: std::collections::BTreeSet<String>,
}

/// Two override policies writing the same path, or one a path inside the other's
/// (federation.md §9.5 ★): the later one wins, as D.28 orders them, and the user is
/// told, since the earlier one's value is lost for that cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The path the later policy wrote (a JSON pointer).
    pub pointer: String,
    /// What wrote it, or a path around or inside it, first.
    pub earlier: Origin,
    /// What wrote it later, and wins.
    pub later: Origin,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} overrides {}",
            display_path(&self.pointer),
            self.later,
            self.earlier
        )
    }
}

impl Provenance {
    /// Who last changed the value at `pointer`, if an override changed it.
    pub fn get(&self, pointer: &str) -> Option<&Origin> {
        self.changes.get(pointer)
    }

    /// Every changed path (a JSON pointer) with its origin, in pointer order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Origin)> {
        self.changes.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether no path was changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Where two policies wrote the same path (or one inside the other's), in the
    /// order they were found; a policy's own rules layering on each other are not.
    pub fn overlaps(&self) -> &[Overlap] {
        &self.overlaps
    }

    /// Records that `origin` wrote `pointer`, replacing what was recorded for it and
    /// for the paths under it (last writer wins), and noting where it overrides
    /// another policy's write. `shift`: the write inserted into or removed from the
    /// array at `pointer`, so the values there stay (shifted): it overrides nothing,
    /// and a later write inside that array does not override it either.
    fn record(&mut self, pointer: String, origin: Origin, shift: bool) {
        let under = format!("{pointer}/");
        // an insert or removal overrides nothing: the items keep their values
        if !shift {
            for (k, earlier) in &self.changes {
                let overlaps = if *k == pointer || k.starts_with(&under) {
                    true
                } else {
                    // inside what an earlier write replaced, unless that was a shift
                    pointer.starts_with(&format!("{k}/")) && !self.shifts.contains(k)
                };
                if overlaps && earlier.rule.policy != origin.rule.policy {
                    let overlap = Overlap {
                        pointer: pointer.clone(),
                        earlier: earlier.clone(),
                        later: origin.clone(),
                    };
                    if !self.overlaps.contains(&overlap) {
                        self.overlaps.push(overlap);
                    }
                }
            }
        }
        self.changes.retain(|k, _| !k.starts_with(&under));
        self.shifts.retain(|k| !k.starts_with(&under));
        if shift {
            self.shifts.insert(pointer.clone());
        } else {
            self.shifts.remove(&pointer);
        }
        self.changes.insert(pointer, origin);
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (pointer, origin) in &self.changes {
            writeln!(f, "{} ← {origin}", display_path(pointer))?;
        }
        Ok(())
    }
}

/// Why an overrider could not be applied (the cluster gets `ApplyOverridesFailed`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rule}, {}[{index}]: {problem}", overrider.field())]
pub struct OverrideError {
    /// The rule.
    pub rule: RuleId,
    /// The overrider kind.
    pub overrider: OverriderKind,
    /// The index of the overrider in its list.
    pub index: usize,
    /// What went wrong.
    pub problem: Box<Problem>,
}

/// What is wrong with one overrider, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The path is not an RFC 6901 JSON pointer.
    #[error("path {path:?} is not a JSON pointer: {why}; write it like /spec/replicas (RFC 6901)")]
    BadPointer {
        /// The path.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The path does not exist in the manifest.
    #[error(
        "cannot {op} {path}: it does not exist in the manifest; fix the path, or use add to create it"
    )]
    Missing {
        /// The operation.
        op: &'static str,
        /// The missing path.
        path: String,
    },
    /// A parent of the path is a scalar.
    #[error("cannot {op} under {path}: it is {found}, not an object or an array")]
    NotContainer {
        /// The operation.
        op: &'static str,
        /// The parent.
        path: String,
        /// What the parent is.
        found: &'static str,
    },
    /// An array index that is not a number or `-`.
    #[error("{token:?} in {path} is not an array index: use 0 to {len} or - (append)")]
    BadIndex {
        /// The path up to the token.
        path: String,
        /// The token.
        token: String,
        /// The array's length.
        len: usize,
    },
    /// An array index past the end.
    #[error("the index in {path} is past the end of the array (length {len})")]
    OutOfRange {
        /// The path.
        path: String,
        /// The array's length.
        len: usize,
    },
    /// A path Causeway derives from the template.
    #[error(
        "{path} may not be overridden because it changes {field}, which Causeway takes from the template; override another field"
    )]
    Forbidden {
        /// The path.
        path: String,
        /// The derived field it is or contains.
        field: String,
    },
    /// add or replace without a value.
    #[error("{op} needs a value; set value, or use remove")]
    MissingValue {
        /// The operation.
        op: &'static str,
    },
    /// An operator the overrider does not support.
    #[error("{what} is not supported; {fix}")]
    Unsupported {
        /// What was asked for.
        what: String,
        /// What to do instead.
        fix: String,
    },
    /// A field that must hold a string does not.
    #[error("{path} is {found}, not a string")]
    NotString {
        /// The field.
        path: String,
        /// What it holds.
        found: &'static str,
    },
    /// An image field that does not hold an image reference, or a change that
    /// would break it.
    #[error("image {image:?} at {path}: {why}")]
    BadImage {
        /// The field.
        path: String,
        /// Its value.
        image: String,
        /// What is wrong.
        why: String,
    },
    /// A field overrider's field does not parse as its format.
    #[error("{path} does not hold valid {format} ({why}); fix the template or the fieldPath")]
    BadEmbedded {
        /// The field.
        path: String,
        /// JSON or YAML.
        format: &'static str,
        /// The parser's message.
        why: String,
    },
    /// A patch of the document inside a field failed.
    #[error("in the {format} document in {path}: {inner}")]
    InField {
        /// The field.
        path: String,
        /// JSON or YAML.
        format: &'static str,
        /// What went wrong inside.
        inner: Box<Problem>,
    },
}

/// Applies `rules` in order (each rule's overriders in the order image → command →
/// args → labels → annotations → field → plaintext) to a copy of `manifest`.
///
/// Returns the result and the provenance of every path whose value differs from
/// `manifest`. The first failing overrider fails the whole apply: the caller marks
/// that cluster `ApplyOverridesFailed` with the error's message.
pub fn apply(
    manifest: &Value,
    rules: &[(RuleId, &Overriders)],
) -> Result<(Value, Provenance), OverrideError> {
    let mut doc = manifest.clone();
    let mut prov = Provenance::default();
    for (rule, o) in rules {
        let mut run = Run {
            doc: &mut doc,
            prov: &mut prov,
            rule,
        };
        run.each(OverriderKind::Image, &o.image_overrider, image::apply)?;
        run.each(OverriderKind::Command, &o.command_overrider, |d, x| {
            ops::command_args(d, "command", x)
        })?;
        run.each(OverriderKind::Args, &o.args_overrider, |d, x| {
            ops::command_args(d, "args", x)
        })?;
        run.each(OverriderKind::Labels, &o.labels_overrider, |d, x| {
            ops::labels_annotations(d, "labels", x)
        })?;
        run.each(
            OverriderKind::Annotations,
            &o.annotations_overrider,
            |d, x| ops::labels_annotations(d, "annotations", x),
        )?;
        run.each(OverriderKind::Field, &o.field_overrider, ops::field)?;
        run.each_at(
            OverriderKind::Plaintext,
            &o.plaintext,
            ops::plaintext,
            |p| Some(p.path.as_str()),
        )?;
    }
    prov.changes
        .retain(|p, _| manifest.pointer(p) != doc.pointer(p));
    Ok((doc, prov))
}

/// One rule being applied.
struct Run<'a> {
    doc: &'a mut Value,
    prov: &'a mut Provenance,
    rule: &'a RuleId,
}

impl Run<'_> {
    fn each<T>(
        &mut self,
        overrider: OverriderKind,
        items: &[T],
        f: impl Fn(&mut Value, &T) -> Result<Vec<String>, Problem>,
    ) -> Result<(), OverrideError> {
        self.each_at(overrider, items, f, |_| None)
    }

    /// [`Self::each`] for overriders that name the path they write (`path`): a changed
    /// pointer above that path is an array insert or removal (a shift).
    fn each_at<T>(
        &mut self,
        overrider: OverriderKind,
        items: &[T],
        f: impl Fn(&mut Value, &T) -> Result<Vec<String>, Problem>,
        path: impl Fn(&T) -> Option<&str>,
    ) -> Result<(), OverrideError> {
        for (index, item) in items.iter().enumerate() {
            let changed = f(self.doc, item).map_err(|problem| OverrideError {
                rule: self.rule.clone(),
                overrider,
                index,
                problem: Box::new(problem),
            })?;
            for pointer in changed {
                let origin = Origin {
                    rule: self.rule.clone(),
                    overrider,
                };
                // pointer::apply names the array, not the item, for an insert or removal
                let shift = path(item).is_some_and(|p| p.starts_with(&format!("{pointer}/")));
                self.prov.record(pointer, origin, shift);
            }
        }
        Ok(())
    }
}

/// The rules that apply to the template `manifest` in `cluster`, in the order to
/// apply them (D.28, D.31):
/// - ClusterOverridePolicies first, then the OverridePolicies of the template's
///   namespace (none for a cluster-scoped template);
/// - within each, by [`Specificity`] (match-all or kind only, then labelSelector,
///   then name), then by name;
/// - within a policy, its rules in order, keeping those whose `targetCluster` is
///   unset or matches `cluster` (the scheduler's [`affinity_matches`], so that
///   a rule targets the clusters a placement with the same affinity would).
pub fn applicable_policies<'a>(
    manifest: &Value,
    cluster: &Cluster,
    cluster_policies: &'a [ClusterOverridePolicy],
    policies: &'a [OverridePolicy],
) -> Vec<(RuleId, &'a Overriders)> {
    let template = template_meta(manifest);
    let mut chosen: Vec<(PolicyId, Specificity, &OverrideSpec)> = Vec::new();
    for p in cluster_policies {
        if let Some(s) = specificity(&p.spec, &template) {
            let id = PolicyId {
                kind: PolicyKind::ClusterOverridePolicy,
                namespace: None,
                name: p.name_any(),
            };
            chosen.push((id, s, &p.spec));
        }
    }
    for p in policies {
        let ns = p.namespace();
        if template.namespace.is_none() || ns != template.namespace {
            continue;
        }
        if let Some(s) = specificity(&p.spec, &template) {
            let id = PolicyId {
                kind: PolicyKind::OverridePolicy,
                namespace: ns,
                name: p.name_any(),
            };
            chosen.push((id, s, &p.spec));
        }
    }
    chosen.sort_by(|(a, sa, _), (b, sb, _)| (a.kind, sa, &a.name).cmp(&(b.kind, sb, &b.name)));
    chosen
        .into_iter()
        .flat_map(|(policy, _, spec)| {
            spec.override_rules
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.target_cluster
                        .as_ref()
                        .is_none_or(|a| affinity_matches(a, cluster))
                })
                .map(move |(rule, r)| {
                    let id = RuleId {
                        policy: policy.clone(),
                        rule,
                    };
                    (id, &r.overriders)
                })
        })
        .collect()
}

/// How specifically `spec` selects `template`: an override policy without
/// resource selectors selects every template (as [`Specificity::KindOnly`], the
/// least specific); otherwise the most specific of its matching selectors.
pub fn specificity(spec: &OverrideSpec, template: &TemplateMeta) -> Option<Specificity> {
    if spec.resource_selectors.is_empty() {
        return Some(Specificity::KindOnly);
    }
    policy_specificity(&spec.resource_selectors, template)
}

/// The selection view of a manifest (missing fields are empty).
fn template_meta(manifest: &Value) -> TemplateMeta {
    let text = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let labels = manifest
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    TemplateMeta {
        api_version: text("/apiVersion").to_string(),
        kind: text("/kind").to_string(),
        namespace: Some(text("/metadata/namespace"))
            .filter(|ns| !ns.is_empty())
            .map(str::to_string),
        name: text("/metadata/name").to_string(),
        labels,
    }
}

#[cfg(test)]
mod tests;
