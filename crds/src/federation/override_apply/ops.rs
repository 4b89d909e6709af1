//! The command, args, labels, annotations, field and plaintext overriders: each
//! changes `doc` and returns the JSON pointers it changed.

use serde_json::{Map, Value};

use super::pointer::{self, Op};
use super::{Problem, image};
use crate::federation::overrides::{
    CommandArgsOverrider, FieldOverrider, LabelAnnotationOverrider, OverriderOperator,
    PlaintextOverrider,
};

/// Paths no override may change or contain, because Causeway derives them from the
/// template (kubefed's rule, D.26).
pub const FORBIDDEN_PATHS: [&str; 4] = [
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/generateName",
    "/kind",
];

/// Why `path` may not be patched: it is, or contains, a forbidden path.
pub(super) fn forbidden(path: &str) -> Option<Problem> {
    FORBIDDEN_PATHS
        .iter()
        .find(|f| *f == &path || f.starts_with(&format!("{path}/")))
        .map(|f| Problem::Forbidden {
            path: path.to_string(),
            field: f.to_string(),
        })
}

/// The operation an operator and optional value stand for.
fn op(operator: OverriderOperator, value: Option<&Value>) -> Result<Op<'_>, Problem> {
    let needs = |verb: &'static str| Problem::MissingValue { op: verb };
    Ok(match operator {
        OverriderOperator::Add => Op::Add(value.ok_or(needs("add"))?),
        OverriderOperator::Replace => Op::Replace(value.ok_or(needs("replace"))?),
        OverriderOperator::Remove => Op::Remove,
    })
}

/// One plaintext (JSON patch) operation on the whole object.
pub(super) fn plaintext(doc: &mut Value, o: &PlaintextOverrider) -> Result<Vec<String>, Problem> {
    if let Some(p) = forbidden(&o.path) {
        return Err(p);
    }
    pointer::apply(doc, &o.path, op(o.operator, o.value.as_ref())?)
}

/// Adds values to, or removes values from, the `field` (`command` or `args`) of
/// every container named `o.containerName`. A workload with no such container, or
/// a kind without a pod spec, is left alone.
pub(super) fn command_args(
    doc: &mut Value,
    field: &str,
    o: &CommandArgsOverrider,
) -> Result<Vec<String>, Problem> {
    if o.operator == OverriderOperator::Replace {
        return Err(Problem::Unsupported {
            what: format!("operator replace on {field}"),
            fix: "use add or remove".into(),
        });
    }
    let mut changed = Vec::new();
    for c in image::container_pointers(doc) {
        let Some(Value::Object(container)) = doc.pointer_mut(&c) else {
            continue;
        };
        if container.get("name").and_then(Value::as_str) != Some(&o.container_name) {
            continue;
        }
        let old: Vec<Value> = match container.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(other) => {
                return Err(Problem::NotContainer {
                    op: "change",
                    path: format!("{c}/{field}"),
                    found: pointer::type_name(other),
                });
            }
        };
        let mut new = old.clone();
        match o.operator {
            OverriderOperator::Add => new.extend(o.value.iter().cloned().map(Value::String)),
            _ => new.retain(|v| !v.as_str().is_some_and(|s| o.value.iter().any(|x| x == s))),
        }
        if new == old {
            continue;
        }
        if new.is_empty() {
            container.shift_remove(field);
        } else {
            container.insert(field.to_string(), Value::Array(new));
        }
        changed.push(format!("{c}/{field}"));
    }
    Ok(changed)
}

/// Adds, replaces (existing keys only) or removes keys of `/metadata/<map>`
/// (`labels` or `annotations`).
pub(super) fn labels_annotations(
    doc: &mut Value,
    map: &str,
    o: &LabelAnnotationOverrider,
) -> Result<Vec<String>, Problem> {
    let at = format!("/metadata/{map}");
    if doc.pointer(&at).is_none_or(Value::is_null) {
        if o.operator != OverriderOperator::Add {
            return Ok(Vec::new());
        }
        pointer::apply(doc, &at, Op::Add(&Value::Object(Map::new())))?;
    }
    let Some(Value::Object(entries)) = doc.pointer_mut(&at) else {
        let found = doc.pointer(&at).map_or("nothing", pointer::type_name);
        return Err(Problem::NotContainer {
            op: "change",
            path: at,
            found,
        });
    };
    let mut changed = Vec::new();
    for (k, v) in &o.value {
        let new = Value::String(v.clone());
        let did = match o.operator {
            OverriderOperator::Add => entries.insert(k.clone(), new.clone()) != Some(new),
            OverriderOperator::Replace => match entries.get_mut(k) {
                Some(old) if *old != new => {
                    *old = new;
                    true
                }
                _ => false,
            },
            OverriderOperator::Remove => entries.shift_remove(k).is_some(),
        };
        if did {
            changed.push(format!("{at}/{}", pointer::escape(k)));
        }
    }
    Ok(changed)
}

/// The formats a field overrider can edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedded {
    /// JSON text; written back compact.
    Json,
    /// A single YAML document; written back block style.
    Yaml,
}

impl Embedded {
    fn name(self) -> &'static str {
        match self {
            Embedded::Json => "JSON",
            Embedded::Yaml => "YAML",
        }
    }
}

/// Parses the string at `o.fieldPath`, applies the `json` then the `yaml`
/// operations to it, and writes it back (only when something changed). The other keys
/// keep their values as a YAML 1.2 reader sees them, not their spelling: `1.30` is
/// written `1.3`, and `NO`, `y`, `on`, `1_000` stay the strings they are in YAML 1.2
/// (read as YAML 1.1, as Karmada's sigs.k8s.io/yaml does, they would become booleans
/// and numbers, silently changing keys the override never named).
pub(super) fn field(doc: &mut Value, o: &FieldOverrider) -> Result<Vec<String>, Problem> {
    if let Some(p) = forbidden(&o.field_path) {
        return Err(p);
    }
    pointer::parse(&o.field_path)?;
    let mut changed = false;
    let steps = [
        (
            Embedded::Json,
            o.json
                .iter()
                .map(|j| (&j.sub_path, j.operator, j.value.as_ref()))
                .collect::<Vec<_>>(),
        ),
        (
            Embedded::Yaml,
            o.yaml
                .iter()
                .map(|y| (&y.sub_path, y.operator, y.value.as_ref()))
                .collect(),
        ),
    ];
    for (format, ops) in steps.into_iter().filter(|(_, ops)| !ops.is_empty()) {
        let Some(field) = doc.pointer_mut(&o.field_path) else {
            return Err(Problem::Missing {
                op: "patch",
                path: o.field_path.clone(),
            });
        };
        let Value::String(text) = field else {
            return Err(Problem::NotString {
                path: o.field_path.clone(),
                found: pointer::type_name(field),
            });
        };
        let in_field = |inner: Problem| Problem::InField {
            path: o.field_path.clone(),
            format: format.name(),
            inner: Box::new(inner),
        };
        let unreadable = |why: String| Problem::BadEmbedded {
            path: o.field_path.clone(),
            format: format.name(),
            why,
        };
        let mut embedded: Value = match format {
            Embedded::Json => serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?,
            Embedded::Yaml => {
                let yaml_1_2 = serde_saphyr::options! {
                    strict_booleans: true,
                    underscored_numbers_as_strings: true,
                };
                serde_saphyr::from_str_with_options(text, yaml_1_2)
                    .map_err(|e| unreadable(e.to_string()))?
            }
        };
        let before = embedded.clone();
        for (sub_path, operator, value) in ops {
            pointer::apply(
                &mut embedded,
                sub_path,
                op(operator, value).map_err(in_field)?,
            )
            .map_err(in_field)?;
        }
        if embedded == before {
            continue;
        }
        *text = match format {
            Embedded::Json => {
                serde_json::to_string(&embedded).map_err(|e| unreadable(e.to_string()))?
            }
            Embedded::Yaml => {
                serde_saphyr::to_string(&embedded).map_err(|e| unreadable(e.to_string()))?
            }
        };
        changed = true;
    }
    Ok(if changed {
        vec![o.field_path.clone()]
    } else {
        Vec::new()
    })
}
