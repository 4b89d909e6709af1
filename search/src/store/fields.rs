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
//! `spec.paused=true`). List fields cannot be indexed. Values are not quoted; a comma,
//! an equals sign or a backslash in one is escaped as Kubernetes escapes it (`\,`, `\=`,
//! `\\`: `fields.EscapeValue`). Pure.

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

/// Where [`split_terms`] is in a term.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    /// In the field path, outside brackets.
    Path,
    /// Just after a `[`: a quote here opens a quoted key.
    KeyStart,
    /// In a bracketed key, quoted (until this quote) or not (until `]`).
    Key(Option<char>),
    /// In a value (after `=`), or after a set: only `\` escapes.
    Value,
    /// In a set's parentheses.
    Set,
}

/// Splits at the commas that end terms, each term with where its path ends (the index
/// of its `=`, or of its set's `(`), if it has an operator. Quotes are quotes only where
/// the syntax has them, opening a bracketed key (`['a,b']`); a bracketed key and a
/// set's parentheses hold commas. A value is not quoted (Kubernetes field selectors
/// have no quotes): a comma ends it unless escaped (`\,`, as kube's
/// `fields.EscapeValue` writes it).
fn split_terms(s: &str) -> Vec<(&str, Option<usize>)> {
    let (mut out, mut start, mut op) = (Vec::new(), 0, None);
    let (mut at, mut escaped) = (At::Path, false);
    for (i, c) in s.char_indices() {
        match at {
            At::Path => match c {
                ',' => {
                    out.push((&s[start..i], op.take()));
                    start = i + 1;
                }
                '[' => at = At::KeyStart,
                '=' | '(' => {
                    op = Some(i - start);
                    at = if c == '=' { At::Value } else { At::Set };
                }
                _ => {}
            },
            At::KeyStart => {
                at = match c {
                    '\'' | '"' => At::Key(Some(c)),
                    ']' => At::Path,
                    _ => At::Key(None),
                }
            }
            At::Key(None) if c == ']' => at = At::Path,
            At::Key(Some(q)) if c == q => at = At::Key(None),
            At::Key(_) => {}
            At::Value | At::Set if escaped => escaped = false,
            At::Value | At::Set => match c {
                '\\' => escaped = true,
                ')' if at == At::Set => at = At::Value,
                ',' if at == At::Value => {
                    out.push((&s[start..i], op.take()));
                    start = i + 1;
                    at = At::Path;
                }
                _ => {}
            },
        }
    }
    out.push((&s[start..], op));
    out
}

/// Splits at each `sep` not escaped with a backslash.
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let (mut out, mut start, mut escaped) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

/// A value (trimmed) with kube's escapes (`\\`, `\,`, `\=`) undone; another escape is
/// an error, as in kube-apiserver.
fn unescape(sel: &str, v: &str) -> Result<String, QueryError> {
    let v = v.trim();
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=')) => out.push(e),
            other => {
                let seq: String = std::iter::once('\\').chain(other).collect();
                return Err(bad(
                    sel,
                    format!(
                        "invalid escape sequence {seq} in {v:?} (in a value, a comma is escaped as \\, an equals sign as \\= and a backslash as \\\\)"
                    ),
                ));
            }
        }
    }
    Ok(out)
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
    let mut vals = Vec::new();
    for v in split_unescaped(inner, ',') {
        let v = unescape(sel, v)?;
        if !v.is_empty() {
            vals.push(v);
        }
    }
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
    for (term, op_at) in split_terms(sel) {
        if term.trim().is_empty() {
            continue;
        }
        let (path, op) = match op_at {
            None => {
                if let Some(p) = term.trim().strip_prefix('!') {
                    (p, FieldOp::NotExists)
                } else if let Some((p, set)) = split_word(term, " notin ") {
                    // a set without parentheses: parse_set says how to write it
                    (p, FieldOp::NotIn(parse_set(sel, set)?))
                } else if let Some((p, set)) = split_word(term, " in ") {
                    (p, FieldOp::In(parse_set(sel, set)?))
                } else {
                    (term, FieldOp::Exists)
                }
            }
            Some(i) if term[i..].starts_with('=') => {
                let (head, value) = (&term[..i], &term[i + 1..]);
                match head.strip_suffix('!') {
                    Some(p) => (p, FieldOp::NotEq(unescape(sel, value)?)),
                    None => {
                        let value = value.strip_prefix('=').unwrap_or(value);
                        (head, FieldOp::Eq(unescape(sel, value)?))
                    }
                }
            }
            // a set: `path in (a,b)`, `path notin (a,b)`
            Some(i) => {
                let (head, set) = (&term[..i], &term[i..]);
                match head.trim_end().rsplit_once(char::is_whitespace) {
                    Some((p, "in")) => (p, FieldOp::In(parse_set(sel, set)?)),
                    Some((p, "notin")) => (p, FieldOp::NotIn(parse_set(sel, set)?)),
                    _ => (term, FieldOp::Exists),
                }
            }
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

    /// A value is not quoted (Kubernetes field selectors have no quotes): a quote,
    /// parenthesis or bracket in it is part of it, and only an escaped comma (`\,`, as
    /// kube's `fields.EscapeValue` writes it) does not end its term.
    #[test]
    fn values_split_at_unescaped_commas_only() {
        let name = |v: &str| t(&["metadata", "name"], Eq(v.into()));
        let node = t(&["spec", "nodeName"], Eq("n1".into()));
        let cases: Vec<(&str, Vec<FieldTerm>)> = vec![
            (
                "metadata.name=it's,spec.nodeName=n1",
                vec![name("it's"), node.clone()],
            ),
            (
                "metadata.name=\"x,spec.nodeName=n1",
                vec![name("\"x"), node.clone()],
            ),
            (
                "metadata.name!='a',spec.nodeName=n1",
                vec![t(&["metadata", "name"], NotEq("'a'".into())), node.clone()],
            ),
            (
                "metadata.name=a(b,spec.nodeName=n1",
                vec![name("a(b"), node.clone()],
            ),
            (
                "metadata.name=a[b,spec.nodeName=n1",
                vec![name("a[b"), node.clone()],
            ),
            ("metadata.name=a]b", vec![name("a]b")]),
            (
                "metadata.annotations['x']=a]b,spec.nodeName=n1",
                vec![
                    t(&["metadata", "annotations", "x"], Eq("a]b".into())),
                    node.clone(),
                ],
            ),
            // kube's escapes: \, \= and \\
            (
                r"metadata.name=a\,b,spec.nodeName=n1",
                vec![name("a,b"), node.clone()],
            ),
            (r"metadata.name=a\=b", vec![name("a=b")]),
            (
                r"metadata.name=a\\,spec.nodeName=n1",
                vec![name(r"a\"), node.clone()],
            ),
            (r"metadata.name==a\,b", vec![name("a,b")]),
            (
                r"a.b in (x\,y, it's),spec.nodeName=n1",
                vec![t(&["a", "b"], In(v(&["x,y", "it's"]))), node.clone()],
            ),
            (
                "a.b notin (x),spec.nodeName=n1",
                vec![t(&["a", "b"], NotIn(v(&["x"]))), node.clone()],
            ),
            // a quoted key still holds what it quotes
            (
                "metadata.annotations['a],b']=x,spec.nodeName=n1",
                vec![
                    t(&["metadata", "annotations", "a],b"], Eq("x".into())),
                    node,
                ],
            ),
        ];
        for (sel, want) in cases {
            assert_eq!(parse(sel), Ok(want), "{sel}");
        }
        for (sel, want) in [
            (
                r"metadata.name=a\b",
                r#"invalid escape sequence \b in "a\\b""#,
            ),
            (r"metadata.name=a\", r#"invalid escape sequence \ in "a\\""#),
            (r"a.b in (x\y)", r#"invalid escape sequence \y in "x\\y""#),
        ] {
            let e = parse(sel).unwrap_err().0;
            assert!(
                e.starts_with(&format!("fieldSelector {sel:?}: {want}")),
                "{sel}: {e}"
            );
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
            ("a['x=1", "unclosed quote in \"a['x=1\""),
            ("a[x=1", "unclosed [ in \"a[x=1\""),
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
