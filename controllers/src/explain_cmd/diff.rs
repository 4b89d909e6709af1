//! Pure: the rendered diff from a template to a Work's manifest, one change per JSON
//! leaf path, each with where it comes from (the Work's override provenance, or a
//! field Causeway sets itself).

use std::collections::BTreeMap;

use causeway_controllers::propagation::render::manifest_of;
use causeway_crds::federation::override_apply::display_path;
use causeway_crds::well_known::annotations;
use serde::Serialize;
use serde_json::{Map, Value};

/// One changed leaf.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Change {
    /// The field for people: `spec.template.spec.containers[0].image`.
    pub path: String,
    /// The JSON pointer.
    pub pointer: String,
    /// The template's value (`None`: absent).
    pub template: Option<Value>,
    /// The member's value (`None`: absent, removed by an override).
    pub member: Option<Value>,
    /// Why it differs: the override that set it, or what Causeway added.
    pub source: String,
}

/// `token` escaped for a JSON pointer.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The leaves that differ between `template` and `member`, in document order (an
/// object or array missing on one side counts as empty, so each added or removed leaf
/// is its own line).
pub(crate) fn leaves(
    template: &Value,
    member: &Value,
) -> Vec<(String, Option<Value>, Option<Value>)> {
    let mut out = Vec::new();
    walk(String::new(), Some(template), Some(member), &mut out);
    out
}

fn walk(
    at: String,
    a: Option<&Value>,
    b: Option<&Value>,
    out: &mut Vec<(String, Option<Value>, Option<Value>)>,
) {
    if a == b {
        return;
    }
    let empty_obj = Map::new();
    let empty_arr = Vec::new();
    if let (Some(x), Some(y)) = (as_obj(a, &empty_obj), as_obj(b, &empty_obj)) {
        let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            walk(format!("{at}/{}", escape(k)), x.get(k), y.get(k), out);
        }
        return;
    }
    if let (Some(x), Some(y)) = (as_arr(a, &empty_arr), as_arr(b, &empty_arr)) {
        for i in 0..x.len().max(y.len()) {
            walk(format!("{at}/{i}"), x.get(i), y.get(i), out);
        }
        return;
    }
    out.push((at, a.cloned(), b.cloned()));
}

/// `v` as an object; absent counts as `empty`.
fn as_obj<'a>(
    v: Option<&'a Value>,
    empty: &'a Map<String, Value>,
) -> Option<&'a Map<String, Value>> {
    match v {
        None => Some(empty),
        Some(Value::Object(m)) => Some(m),
        Some(_) => None,
    }
}

/// `v` as an array; absent counts as `empty`.
fn as_arr<'a>(v: Option<&'a Value>, empty: &'a Vec<Value>) -> Option<&'a Vec<Value>> {
    match v {
        None => Some(empty),
        Some(Value::Array(items)) => Some(items),
        Some(_) => None,
    }
}

/// The Work's provenance annotation for one manifest: path (a JSON pointer, or a
/// display path) → "OverridePolicy demo/shop rule 0 imageOverrider".
pub(crate) type Provenance = BTreeMap<String, String>;

/// Pure: the provenance of manifest `ordinal` from the Work's
/// [`annotations::PROVENANCE`] value (JSON: ordinal → path → origin).
pub(crate) fn provenance_of(
    annotation: Option<&str>,
    ordinal: usize,
) -> Result<Provenance, String> {
    let Some(text) = annotation else {
        return Ok(Provenance::new());
    };
    let all: BTreeMap<String, BTreeMap<String, Value>> =
        serde_json::from_str(text).map_err(|e| {
            format!(
                "annotation {} does not parse ({e})",
                annotations::PROVENANCE
            )
        })?;
    Ok(all
        .get(&ordinal.to_string())
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let origin = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), origin)
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The origin recorded for `pointer`: its own, an ancestor's (an override that set a
/// whole object), else those of the paths under it.
fn recorded(prov: &Provenance, pointer: &str) -> Option<String> {
    let lookup = |p: &str| prov.get(p).or_else(|| prov.get(&display_path(p)));
    let mut p = pointer;
    loop {
        if let Some(origin) = lookup(p) {
            return Some(origin.clone());
        }
        match p.rfind('/') {
            Some(i) if i > 0 => p = &p[..i],
            _ => break,
        }
    }
    let under = format!("{pointer}/");
    let shown = display_path(pointer);
    let below: Vec<&str> = prov
        .iter()
        .filter(|(k, _)| {
            k.starts_with(&under)
                || k.starts_with(&format!("{shown}."))
                || k.starts_with(&format!("{shown}["))
        })
        .map(|(_, v)| v.as_str())
        .collect();
    (!below.is_empty()).then(|| below.join(", "))
}

/// Pure: the diff of `template` → `member` for one cluster, each change labelled.
/// Both are taken as the renderer takes a template ([`manifest_of`]: without what the
/// server and kubectl set). `divided` is where the kind keeps its replica count
/// (`/spec/replicas`, or its ResourceInterpreter's path) when the binding gives this
/// cluster its own replica count.
pub(crate) fn diff(
    template: &Value,
    member: &Value,
    prov: &Provenance,
    divided: Option<&str>,
) -> Vec<Change> {
    let generation = format!(
        "/metadata/annotations/{}",
        escape(annotations::TEMPLATE_GENERATION)
    );
    leaves(&manifest_of(template), &manifest_of(member))
        .into_iter()
        .map(|(pointer, template, member)| {
            let source = if let Some(origin) = recorded(prov, &pointer) {
                format!("set by {origin}")
            } else if pointer == generation {
                "added by Causeway: the template generation it was rendered from".to_string()
            } else if divided == Some(pointer.as_str()) {
                "set by Causeway: this cluster's share of the replicas (binding spec.clusters)"
                    .to_string()
            } else if [
                "/metadata/labels/causeway.io~1",
                "/metadata/annotations/causeway.io~1",
            ]
            .iter()
            .any(|p| pointer.starts_with(p))
            {
                "added by Causeway".to_string()
            } else {
                "changed by Causeway (no override recorded)".to_string()
            };
            Change {
                path: display_path(&pointer),
                pointer,
                template,
                member,
                source,
            }
        })
        .collect()
}

/// A value for a diff line: compact JSON, `<none>` when absent.
pub(crate) fn shown(v: Option<&Value>) -> String {
    v.map_or_else(|| "<none>".to_string(), Value::to_string)
}
