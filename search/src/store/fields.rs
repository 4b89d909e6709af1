//! Clusterpedia's enhanced field selector (federation.md §4.4), parsed: comma-separated
//! terms on any JSON path of the object, including bracketed keys
//! (`metadata.annotations['example.com/x']`) and `status.*`:
//!
//! | term | selects objects whose field |
//! |---|---|
//! | `path` | exists (and is not null) |
//! | `!path` | is absent (or null) |
//! | `path=v`, `path==v` | equals `v` |
//! | `path!=v` | does not equal `v` (absent counts, as in Kubernetes) |
//! | `path in (a,b)` | is one of them |
//! | `path notin (a,b)` | is none of them (absent counts) |
//!
//! An absent (or null) field equals the empty string, as in Kubernetes
//! (`spec.nodeName=` selects unscheduled Pods, `spec.nodeName!=` scheduled ones).
//! Numbers and booleans compare as JSON writes them (`spec.replicas=3`,
//! `spec.paused=true`). List fields cannot be indexed. Pure.

use crate::query::QueryError;

/// What a term asks of its field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldOp {
    /// Present and not null.
    Exists,
    /// Absent or null.
    NotExists,
    /// Equal.
    Eq(String),
    /// Not equal, or absent.
    NotEq(String),
    /// One of.
    In(Vec<String>),
    /// None of, or absent.
    NotIn(Vec<String>),
}

/// One term: a JSON path (one segment per key) and what it must satisfy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    /// The keys from the object's root.
    pub path: Vec<String>,
    /// The test.
    pub op: FieldOp,
}

fn bad(sel: &str, why: impl std::fmt::Display) -> QueryError {
    QueryError(format!(
        "fieldSelector {sel:?}: {why}; write terms like status.phase=Running, metadata.annotations['example.com/x']!=y, spec.nodeName in (a,b), status.phase notin (Failed), metadata.labels['app'] or !spec.nodeName, separated by commas"
    ))
}

/// Splits at commas outside parentheses and brackets/quotes.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut quote, mut start) = (Vec::new(), 0i32, None, 0);
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[') => depth += 1,
            (None, ')' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses a path: dotted identifiers with optional `['key']`, `["key"]` or `[key]`.
fn parse_path(sel: &str, p: &str) -> Result<Vec<String>, QueryError> {
    let p = p.trim();
    let mut out = Vec::new();
    // the segments written as quoted keys (`['8080']`): a number there is a key
    let mut quoted = Vec::new();
    let mut rest = p;
    let ident = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let (key, after) = match r.chars().next() {
                Some(q @ ('\'' | '"')) => {
                    let end = r[1..]
                        .find(q)
                        .ok_or_else(|| bad(sel, format!("unclosed quote in {p:?}")))?;
                    let after = r[1 + end + 1..]
                        .strip_prefix(']')
                        .ok_or_else(|| bad(sel, format!("expected ] in {p:?}")))?;
                    quoted.push(out.len());
                    (&r[1..1 + end], after)
                }
                _ => {
                    let end = r
                        .find(']')
                        .ok_or_else(|| bad(sel, format!("unclosed [ in {p:?}")))?;
                    (&r[..end], &r[end + 1..])
                }
            };
            if key.is_empty() {
                return Err(bad(sel, format!("empty key in {p:?}")));
            }
            out.push(key.to_string());
            rest = after;
        } else {
            let r = if out.is_empty() {
                rest
            } else {
                rest.strip_prefix('.').unwrap_or(rest)
            };
            let end = r.find(|c: char| !ident(c)).unwrap_or(r.len());
            if end == 0 {
                return Err(bad(sel, format!("{p:?} is not a field path")));
            }
            out.push(r[..end].to_string());
            rest = &r[end..];
            if !(rest.is_empty() || rest.starts_with('.') || rest.starts_with('[')) {
                return Err(bad(sel, format!("{p:?} is not a field path")));
            }
        }
    }
    if out.is_empty() {
        return Err(bad(sel, "a term names no field"));
    }
    // PostgreSQL reads a number as a list index and SQLite as a key: the two stores
    // would answer differently, and list fields are not indexed
    if let Some((_, n)) = out.iter().enumerate().find(|(i, k)| {
        let d = k.strip_prefix('-').unwrap_or(k);
        !quoted.contains(i) && !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())
    }) {
        return Err(bad(
            sel,
            format!(
                "{p:?}: {n:?} is a number; list fields cannot be indexed (select on a field outside a list; a key that is a number is written quoted, ['8080'])"
            ),
        ));
    }
    if out.iter().any(|k| k.contains('"')) {
        return Err(bad(sel, format!("{p:?}: a key may not contain '\"'")));
    }
    Ok(out)
}

fn parse_set(sel: &str, s: &str) -> Result<Vec<String>, QueryError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad(sel, format!("{s:?} is not a set: write (a,b)")))?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if vals.is_empty() {
        return Err(bad(sel, "an empty set selects nothing"));
    }
    Ok(vals)
}

/// Splits `path op rest` where op is a word (` in `, ` notin `) outside brackets.
fn split_word<'a>(term: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let close = term.rfind(']').map_or(0, |i| i + 1);
    let i = term[close..].find(word)? + close;
    Some((&term[..i], &term[i + word.len()..]))
}

/// Parses a field selector; a bad one is a [`QueryError`] saying how to write it.
pub fn parse(sel: &str) -> Result<Vec<FieldTerm>, QueryError> {
    let mut out = Vec::new();
    for term in split_terms(sel) {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let close = term.rfind(']').map_or(0, |i| i + 1);
        let tail = &term[close..];
        let op_at = |op: &str| tail.find(op).map(|i| i + close);
        let (path, op) = if let Some(p) = term.strip_prefix('!') {
            (p, FieldOp::NotExists)
        } else if let Some(i) = op_at("!=") {
            (&term[..i], FieldOp::NotEq(term[i + 2..].trim().to_string()))
        } else if let Some(i) = op_at("==") {
            (&term[..i], FieldOp::Eq(term[i + 2..].trim().to_string()))
        } else if let Some(i) = op_at("=") {
            (&term[..i], FieldOp::Eq(term[i + 1..].trim().to_string()))
        } else if let Some((p, set)) = split_word(term, " notin ") {
            (p, FieldOp::NotIn(parse_set(sel, set)?))
        } else if let Some((p, set)) = split_word(term, " in ") {
            (p, FieldOp::In(parse_set(sel, set)?))
        } else {
            (term, FieldOp::Exists)
        };
        out.push(FieldTerm {
            path: parse_path(sel, path)?,
            op,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::FieldOp::*;
    use super::*;

    fn t(path: &[&str], op: FieldOp) -> FieldTerm {
        FieldTerm {
            path: path.iter().map(|s| s.to_string()).collect(),
            op,
        }
    }

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_every_form() {
        let cases: Vec<(&str, Vec<FieldTerm>)> = vec![
            ("", vec![]),
            ("status.phase", vec![t(&["status", "phase"], Exists)]),
            (
                "metadata.labels['8080']",
                vec![t(&["metadata", "labels", "8080"], Exists)],
            ),
            ("!spec.nodeName", vec![t(&["spec", "nodeName"], NotExists)]),
            (
                "status.phase=Running",
                vec![t(&["status", "phase"], Eq("Running".into()))],
            ),
            (
                "status.phase == Running",
                vec![t(&["status", "phase"], Eq("Running".into()))],
            ),
            (
                "status.phase!=",
                vec![t(&["status", "phase"], NotEq("".into()))],
            ),
            ("a.b in (x, y)", vec![t(&["a", "b"], In(v(&["x", "y"])))]),
            ("a.b notin (x)", vec![t(&["a", "b"], NotIn(v(&["x"])))]),
            (
                "metadata.annotations['example.com/a=b,c']!=x",
                vec![t(
                    &["metadata", "annotations", "example.com/a=b,c"],
                    NotEq("x".into()),
                )],
            ),
            (
                "metadata.labels[\"app\"] in (a,b),!metadata.annotations[x.y]",
                vec![
                    t(&["metadata", "labels", "app"], In(v(&["a", "b"]))),
                    t(&["metadata", "annotations", "x.y"], NotExists),
                ],
            ),
            ("a['k'].b=1", vec![t(&["a", "k", "b"], Eq("1".into()))]),
        ];
        for (sel, want) in cases {
            assert_eq!(parse(sel), Ok(want), "{sel}");
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        let cases = [
            (
                "status.phase in Running",
                "\"Running\" is not a set: write (a,b)",
            ),
            ("a in ()", "an empty set selects nothing"),
            ("=x", "a term names no field"),
            ("a..b=x", "\"a..b\" is not a field path"),
            ("a b=x", "\"a b\" is not a field path"),
            ("a['x=1", "unclosed quote in \"a['x\""),
            ("a[x=1", "unclosed [ in \"a[x\""),
            ("a['']=1", "empty key in \"a['']\""),
            (
                "spec.containers[0].image=nginx",
                "\"spec.containers[0].image\": \"0\" is a number; list fields cannot be indexed (select on a field outside a list; a key that is a number is written quoted, ['8080'])",
            ),
            (
                "spec.containers.-1.image=nginx",
                "\"spec.containers.-1.image\": \"-1\" is a number; list fields cannot be indexed (select on a field outside a list; a key that is a number is written quoted, ['8080'])",
            ),
            (
                "metadata.annotations['a\"b']=x",
                "\"metadata.annotations['a\\\"b']\": a key may not contain '\"'",
            ),
        ];
        for (sel, want) in cases {
            let e = parse(sel).unwrap_err().0;
            assert!(
                e.starts_with(&format!("fieldSelector {sel:?}: {want}; write terms like")),
                "{sel}: {e}"
            );
        }
    }
}
