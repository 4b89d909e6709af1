//! Image references (`[registry[:port]/]repository[:tag][@digest]`) and the image
//! overrider (D.29), plus where a workload keeps its pod spec.
//!
//! References are not normalised: `nginx` stays `nginx` (not
//! `docker.io/library/nginx`), so a Registry replace on `nginx:1.19` gives
//! `reg.io/nginx:1.19`. The first path component is the registry when it contains
//! `.` or `:` or is `localhost`, as Docker decides.

use std::fmt;

use serde_json::Value;

use super::Problem;
use super::pointer;
use crate::federation::overrides::{ImageComponent, ImageOverrider, OverriderOperator};

/// A parsed image reference.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, with its port if any (`host:10443`); `None` for `nginx`.
    pub registry: Option<String>,
    /// Repository path (`library/nginx`).
    pub repository: String,
    /// Tag (`1.19`).
    pub tag: Option<String>,
    /// Digest (`sha256:...`).
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `image`; the error says what is wrong with it.
    pub fn parse(image: &str) -> Result<Self, String> {
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err("an image reference must be non-empty and contain no spaces".into());
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, d)) if is_digest(d) => (rest, Some(d.to_string())),
            Some((_, d)) => {
                return Err(format!(
                    "digest {d:?} must look like algorithm:hex, e.g. sha256:2c26b4..."
                ));
            }
            None => (image, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
                (Some(first.to_string()), path)
            }
            _ => (None, rest),
        };
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_string())),
            _ => (path, None),
        };
        if repository.is_empty() || repository.split('/').any(str::is_empty) {
            return Err(
                "the repository (e.g. library/nginx) is missing or has an empty part".into(),
            );
        }
        if let Some(t) = &tag
            && !is_tag(t)
        {
            return Err(format!(
                "tag {t:?} must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
            ));
        }
        Ok(Self {
            registry,
            repository: repository.to_string(),
            tag,
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = &self.registry {
            write!(f, "{r}/")?;
        }
        f.write_str(&self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn is_digest(d: &str) -> bool {
    d.split_once(':').is_some_and(|(alg, hex)| {
        !alg.is_empty()
            && alg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+._-".contains(&b))
            && hex.len() >= 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn is_tag(t: &str) -> bool {
    (1..=128).contains(&t.len())
        && !t.starts_with(['.', '-'])
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Applies one change to `image`:
/// - `add` appends the value to the component (`reg.io` + `-eu`);
/// - `replace` sets it;
/// - `remove` drops it (a Repository cannot be removed).
///
/// The Tag component stands for the tag and the digest: a value that looks like a
/// digest (`sha256:...`) sets the digest and drops the tag, any other sets the tag
/// and drops the digest, and remove drops both.
pub fn change(image: &ImageRef, o: &ImageOverrider) -> Result<ImageRef, String> {
    let mut out = image.clone();
    let value = || {
        o.value
            .clone()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| "add and replace need a non-empty value".to_string())
    };
    let append = |old: Option<&str>| -> Result<String, String> {
        Ok(format!("{}{}", old.unwrap_or_default(), value()?))
    };
    match (o.component, o.operator) {
        (ImageComponent::Registry, OverriderOperator::Add) => {
            out.registry = Some(append(image.registry.as_deref())?)
        }
        (ImageComponent::Registry, OverriderOperator::Replace) => out.registry = Some(value()?),
        (ImageComponent::Registry, OverriderOperator::Remove) => out.registry = None,
        (ImageComponent::Repository, OverriderOperator::Add) => {
            out.repository = append(Some(&image.repository))?
        }
        (ImageComponent::Repository, OverriderOperator::Replace) => out.repository = value()?,
        (ImageComponent::Repository, OverriderOperator::Remove) => {
            return Err("the Repository of an image cannot be removed; use replace".into());
        }
        (ImageComponent::Tag, OverriderOperator::Remove) => {
            out.tag = None;
            out.digest = None;
        }
        (ImageComponent::Tag, op) => {
            let v = match op {
                OverriderOperator::Add => append(image.tag.as_deref())?,
                _ => value()?,
            };
            if is_digest(&v) {
                out.tag = None;
                out.digest = Some(v);
            } else {
                out.tag = Some(v);
                out.digest = None;
            }
        }
    }
    // Re-parse so that a value that breaks the reference is an error here, not in
    // the member's kubelet.
    ImageRef::parse(&out.to_string()).map_err(|e| format!("the result {out} is invalid: {e}"))
}

/// Where the pod spec of a workload of `kind` is: `/spec` for a Pod,
/// `/spec/template/spec` for Deployments, ReplicaSets, StatefulSets, DaemonSets and
/// Jobs, `/spec/jobTemplate/spec/template/spec` for CronJobs; `None` otherwise.
pub fn pod_spec_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("/spec"),
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" => {
            Some("/spec/template/spec")
        }
        "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

/// Pointers to the containers of the workload in `doc`. Not its init containers, as
/// Karmada's image, command and args overriders (a registry mirror policy written for
/// Karmada must not start rewriting init images here); a predicate path reaches them.
pub(super) fn container_pointers(doc: &Value) -> Vec<String> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some(spec) = pod_spec_pointer(kind) else {
        return Vec::new();
    };
    ["containers"]
        .iter()
        .flat_map(|list| {
            let at = format!("{spec}/{list}");
            let n = doc
                .pointer(&at)
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            (0..n).map(move |i| format!("{at}/{i}"))
        })
        .collect()
}

/// Applies the image overrider `o` to `doc` and returns the pointers it changed.
pub(super) fn apply(doc: &mut Value, o: &ImageOverrider) -> Result<Vec<String>, Problem> {
    let paths = match &o.predicate {
        Some(p) => {
            pointer::parse(&p.path)?;
            // as plaintext and field overriders: a policy the webhook did not see (or
            // stored before it ran) never renames or moves the object
            if let Some(problem) = super::ops::forbidden(&p.path) {
                return Err(problem);
            }
            vec![p.path.clone()]
        }
        None => container_pointers(doc)
            .into_iter()
            .map(|c| format!("{c}/image"))
            .filter(|p| doc.pointer(p).is_some())
            .collect(),
    };
    let mut changed = Vec::new();
    for path in paths {
        let field = doc.pointer_mut(&path).ok_or_else(|| Problem::Missing {
            op: "override the image at",
            path: path.clone(),
        })?;
        let Value::String(old) = field else {
            return Err(Problem::NotString {
                path,
                found: pointer::type_name(field),
            });
        };
        let bad = |why: String| Problem::BadImage {
            path: path.clone(),
            image: old.clone(),
            why,
        };
        let new = change(&ImageRef::parse(old).map_err(bad)?, o)
            .map_err(bad)?
            .to_string();
        if *old != new {
            *old = new;
            changed.push(path);
        }
    }
    Ok(changed)
}
