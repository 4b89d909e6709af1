//! JSON pointers (RFC 6901) and the `add`, `replace` and `remove` operations of a
//! JSON patch (RFC 6902) on a [`Value`], as the plaintext and field overriders use
//! them.
//!
//! Two departures from RFC 6902, both to make overrides easier to write:
//! - `add` creates missing intermediate objects (`/metadata/annotations/x` on a
//!   template without annotations works);
//! - `add` of an object at `/metadata/labels` or `/metadata/annotations` that already
//!   exists merges the keys into it instead of replacing the map (D.26).

use serde_json::{Map, Value};

use super::Problem;

/// The maps that `add` merges into rather than replaces.
const MERGED_MAPS: [&str; 2] = ["/metadata/labels", "/metadata/annotations"];

/// One patch operation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op<'a> {
    /// Insert or set the value (RFC 6902 `add`).
    Add(&'a Value),
    /// Set the value of an existing member (RFC 6902 `replace`).
    Replace(&'a Value),
    /// Delete an existing member (RFC 6902 `remove`).
    Remove,
}

impl Op<'_> {
    fn verb(&self) -> &'static str {
        match self {
            Op::Add(_) => "add",
            Op::Replace(_) => "replace",
            Op::Remove => "remove",
        }
    }
}

/// The reference tokens of `path`, unescaped (`~1` → `/`, `~0` → `~`).
pub(super) fn parse(path: &str) -> Result<Vec<String>, Problem> {
    let bad = |why: &str| Problem::BadPointer {
        path: path.to_string(),
        why: why.to_string(),
    };
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad(if path.is_empty() {
            "it is empty, which would replace the whole document"
        } else {
            "it does not start with '/'"
        }));
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => out.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(bad("'~' must be followed by 0 or 1")),
                    },
                }
            }
            Ok(out)
        })
        .collect()
}

/// `token` escaped for a JSON pointer (`~` → `~0`, `/` → `~1`).
pub(super) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The pointer made of `tokens`.
pub(super) fn join<S: AsRef<str>>(tokens: &[S]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", escape(t.as_ref())))
        .collect()
}

/// `pointer` as a field path for people: `spec.template.spec.containers[0].image`,
/// with keys that contain `.` or `/` quoted: `metadata.annotations["example.com/x"]`.
pub fn display_path(pointer: &str) -> String {
    let Ok(tokens) = parse(pointer) else {
        return pointer.to_string();
    };
    let mut out = String::new();
    for t in tokens {
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{t}]"));
        } else if t.contains(['.', '/', '[', ']', '"']) || t.is_empty() {
            out.push_str(&format!("[{t:?}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&t);
        }
    }
    out
}

/// Applies `op` at `path` and returns the pointers it changed: the path itself (with
/// `-` resolved to the index it appended at), the array for an insertion or removal
/// that shifts items, or one per merged key.
pub(super) fn apply(doc: &mut Value, path: &str, op: Op<'_>) -> Result<Vec<String>, Problem> {
    let tokens = parse(path)?;
    let (last, parents) = tokens
        .split_last()
        .expect("parse returns at least one token");
    if let Op::Add(Value::Object(add)) = op
        && MERGED_MAPS.contains(&path)
        && let Some(Value::Object(map)) = doc.pointer_mut(path)
    {
        for (k, v) in add {
            map.insert(k.clone(), v.clone());
        }
        return Ok(add
            .keys()
            .map(|k| format!("{path}/{}", escape(k)))
            .collect());
    }
    let missing = || Problem::Missing {
        op: op.verb(),
        path: path.to_string(),
    };
    let mut parent = doc;
    for (depth, token) in parents.iter().enumerate() {
        let at = || join(&tokens[..=depth]);
        // a missing container an add goes through is made of the kind the next token
        // names: a list for `-` or an index (`…/env/-`), else a map
        let made = || match tokens[depth + 1].as_str() {
            "-" => Value::Array(Vec::new()),
            t if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => Value::Array(Vec::new()),
            _ => Value::Object(Map::new()),
        };
        parent = match parent {
            Value::Object(map) => match (map.contains_key(token.as_str()), op) {
                // a null an add goes through is as good as missing (`tolerations: null`)
                (true, Op::Add(_)) if map[token.as_str()].is_null() => {
                    let v = map.get_mut(token.as_str()).expect("checked");
                    *v = made();
                    v
                }
                (true, _) => map.get_mut(token.as_str()).expect("checked"),
                (false, Op::Add(_)) => map.entry(token.clone()).or_insert_with(made),
                (false, _) => return Err(missing()),
            },
            Value::Array(items) => {
                let i = index(token, items.len(), &at())?.filter(|i| *i < items.len());
                match i {
                    Some(i) => &mut items[i],
                    None => return Err(missing()),
                }
            }
            Value::Null if matches!(op, Op::Add(_)) => {
                *parent = Value::Object(Map::new());
                let Value::Object(map) = parent else {
                    unreachable!("just set")
                };
                map.entry(token.clone()).or_insert_with(made)
            }
            other => return Err(not_container(&at(), other, op)),
        };
    }
    let changed = match (parent, op) {
        (Value::Object(map), Op::Add(v)) => {
            map.insert(last.clone(), v.clone());
            path.to_string()
        }
        (Value::Object(map), Op::Replace(v)) => {
            *map.get_mut(last.as_str()).ok_or_else(missing)? = v.clone();
            path.to_string()
        }
        (Value::Object(map), Op::Remove) => {
            map.shift_remove(last.as_str()).ok_or_else(missing)?;
            path.to_string()
        }
        (Value::Array(items), op) => {
            let len = items.len();
            let i = index(last, len, path)?;
            // Inserting or removing inside the array shifts the items after it,
            // so the change is the array's; appending or replacing, the item's.
            let array = join(parents);
            let at = |i: usize| format!("{array}/{i}");
            match (op, i) {
                (Op::Add(v), None) => {
                    items.push(v.clone());
                    at(len)
                }
                (Op::Add(v), Some(i)) if i <= len => {
                    items.insert(i, v.clone());
                    if i == len { at(i) } else { array }
                }
                (Op::Replace(v), Some(i)) if i < len => {
                    items[i] = v.clone();
                    at(i)
                }
                (Op::Remove, Some(i)) if i < len => {
                    items.remove(i);
                    array
                }
                _ => {
                    return Err(Problem::OutOfRange {
                        path: path.to_string(),
                        len,
                    });
                }
            }
        }
        (other, op) => return Err(not_container(&join(parents), other, op)),
    };
    Ok(vec![changed])
}

/// The array index `token` stands for: `Some(i)`, or `None` for `-` (past the end).
fn index(token: &str, len: usize, at: &str) -> Result<Option<usize>, Problem> {
    if token == "-" {
        return Ok(None);
    }
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    match token.parse::<usize>() {
        Ok(i) if digits && (token == "0" || !token.starts_with('0')) => Ok(Some(i)),
        _ => Err(Problem::BadIndex {
            path: at.to_string(),
            token: token.to_string(),
            len,
        }),
    }
}

fn not_container(at: &str, found: &Value, op: Op<'_>) -> Problem {
    Problem::NotContainer {
        op: op.verb(),
        path: if at.is_empty() { "/".into() } else { at.into() },
        found: type_name(found),
    }
}

/// `a string`, `an object`, ... for messages.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
