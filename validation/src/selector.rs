//! Label selectors as strings (`a=b,c!=d,e in (x,y),!f`), parsed as kube-apiserver
//! parses them, with its messages. kubesim evaluates them on objects; the search store
//! turns them into SQL.

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `k=v`, `k==v`.
    Eq(String, String),
    /// `k!=v` (an object without `k` matches, as in Kubernetes).
    NotEq(String, String),
    /// `k in (a,b)`.
    In(String, Vec<String>),
    /// `k notin (a,b)` (an object without `k` matches).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    NotExists(String),
}

impl Requirement {
    /// The label key the requirement tests.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Eq(k, _)
            | Requirement::NotEq(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k,
        }
    }
}

/// kube's `Requirement.String()`: the form [`parse`] reads, set values sorted.
impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |vs: &[String]| {
            let mut vs: Vec<&str> = vs.iter().map(String::as_str).collect();
            vs.sort_unstable();
            vs.join(",")
        };
        match self {
            Requirement::Eq(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEq(k, v) => write!(f, "{k}!={v}"),
            Requirement::In(k, vs) => write!(f, "{k} in ({})", set(vs)),
            Requirement::NotIn(k, vs) => write!(f, "{k} notin ({})", set(vs)),
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::NotExists(k) => write!(f, "!{k}"),
        }
    }
}

/// A selector's string form as kube prints it (`labels.Selector.String()`): its
/// requirements sorted by key, comma separated.
pub fn display(reqs: &[Requirement]) -> String {
    let mut sorted: Vec<&Requirement> = reqs.iter().collect();
    sorted.sort_by(|a, b| a.key().cmp(b.key()));
    sorted
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// `(a,b)`: the values, an empty one where kube's parser reads one (`()`, `(a,)`,
/// `(a,,b)`: the empty label value, which an object labelled `k: ""` has).
fn parse_set(s: &str) -> Option<Vec<String>> {
    let s = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    let mut values: Vec<String> = Vec::new();
    for v in s.split(',').map(|x| x.trim().to_string()) {
        if !values.contains(&v) {
            values.push(v);
        }
    }
    Some(values)
}

/// `key <op> (set)` split into the key and the set, with or without a space before the
/// parenthesis (`env in (a)`, `env in(a)`), as kube's lexer reads it.
fn set_operator<'a>(part: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    let (key, rest) = part.split_once(char::is_whitespace)?;
    let rest = rest.trim_start().strip_prefix(op)?;
    rest.starts_with(|c: char| c.is_whitespace() || c == '(')
        .then_some((key, rest))
}

/// Parses `a=b,c!=d,e in (x,y),!f` (all requirements must hold; empty selects
/// everything). The error is kube-apiserver's message.
pub fn parse(s: &str) -> Result<Vec<Requirement>, String> {
    let mut reqs = Vec::new();
    let bad = |why: &str| format!("unable to parse requirement: {why}");
    for part in split_top_level(s) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let req = if let Some(k) = part.strip_prefix('!') {
            let k = k.trim();
            if !valid_key(k) {
                return Err(bad(&format!("invalid label key \"{k}\"")));
            }
            Requirement::NotExists(k.to_string())
        } else if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once("==") {
            Requirement::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once('=') {
            Requirement::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, rest)) = set_operator(part, "notin") {
            Requirement::NotIn(k.into(), parse_set(rest).ok_or_else(|| bad(part))?)
        } else if let Some((k, rest)) = set_operator(part, "in") {
            Requirement::In(k.into(), parse_set(rest).ok_or_else(|| bad(part))?)
        } else if part.contains(['>', '<']) {
            return Err(bad(&format!(
                "{part:?}: the numeric operators > and < are not supported here: select with =, !=, in or notin"
            )));
        } else {
            Requirement::Exists(part.to_string())
        };
        let vals: Vec<&String> = match &req {
            Requirement::Eq(_, v) | Requirement::NotEq(_, v) => vec![v],
            Requirement::In(_, vs) | Requirement::NotIn(_, vs) => vs.iter().collect(),
            Requirement::Exists(_) | Requirement::NotExists(_) => vec![],
        };
        let k = req.key();
        if !valid_key(k) {
            return Err(bad(&format!("invalid label key \"{k}\"")));
        }
        if let Some(v) = vals.iter().find(|v| !valid_value(v)) {
            return Err(bad(&format!("invalid label value: \"{v}\"")));
        }
        if matches!(&req, Requirement::In(_, vs) | Requirement::NotIn(_, vs) if vs.is_empty()) {
            return Err(bad(
                "for 'in', 'notin' operators, values set can't be empty",
            ));
        }
        reqs.push(req);
    }
    Ok(reqs)
}

#[cfg(test)]
mod tests {
    use super::Requirement::*;
    use super::*;

    fn s(v: &str) -> String {
        v.to_string()
    }

    #[test]
    fn parses_every_operator() {
        let cases: Vec<(&str, Vec<Requirement>)> = vec![
            ("", vec![]),
            ("app=web", vec![Eq(s("app"), s("web"))]),
            ("app==web", vec![Eq(s("app"), s("web"))]),
            ("app=", vec![Eq(s("app"), s(""))]),
            ("app != web", vec![NotEq(s("app"), s("web"))]),
            ("app in (a, b)", vec![In(s("app"), vec![s("a"), s("b")])]),
            ("app notin (a)", vec![NotIn(s("app"), vec![s("a")])]),
            ("app in(a,b)", vec![In(s("app"), vec![s("a"), s("b")])]),
            ("app  notin(a)", vec![NotIn(s("app"), vec![s("a")])]),
            (
                "app in (a),b",
                vec![In(s("app"), vec![s("a")]), Exists(s("b"))],
            ),
            ("example.com/tier", vec![Exists(s("example.com/tier"))]),
            // an empty value where kube's parser reads one: `()`, a trailing or a doubled
            // comma (the empty label value)
            ("app in ()", vec![In(s("app"), vec![s("")])]),
            ("app notin ()", vec![NotIn(s("app"), vec![s("")])]),
            ("app in (web,)", vec![In(s("app"), vec![s("web"), s("")])]),
            (
                "app in (a,,b)",
                vec![In(s("app"), vec![s("a"), s(""), s("b")])],
            ),
            ("!tier", vec![NotExists(s("tier"))]),
            (
                "a=b,c in (d,e),!f",
                vec![
                    Eq(s("a"), s("b")),
                    In(s("c"), vec![s("d"), s("e")]),
                    NotExists(s("f")),
                ],
            ),
        ];
        for (sel, want) in cases {
            assert_eq!(parse(sel), Ok(want), "{sel}");
        }
    }

    #[test]
    fn prints_as_kube_prints_and_parses_back() {
        let reqs = parse("tier=web,x notin (b,a),!canary,env in (prod,dev),zone,app!=db").unwrap();
        let printed = display(&reqs);
        assert_eq!(
            printed,
            "app!=db,!canary,env in (dev,prod),tier=web,x notin (a,b),zone"
        );
        let mut back = parse(&printed).unwrap();
        let mut want = reqs;
        for r in want.iter_mut().chain(back.iter_mut()) {
            if let In(_, vs) | NotIn(_, vs) = r {
                vs.sort();
            }
        }
        back.sort_by(|a, b| a.key().cmp(b.key()));
        want.sort_by(|a, b| a.key().cmp(b.key()));
        assert_eq!(back, want);
        assert_eq!(display(&[]), "");
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        let cases = [
            (
                "a b=c",
                "unable to parse requirement: invalid label key \"a b\"",
            ),
            ("app in web", "unable to parse requirement: app in web"),
            (
                "x=(",
                "unable to parse requirement: invalid label value: \"(\"",
            ),
            ("!", "unable to parse requirement: invalid label key \"\""),
            (
                "priority>5",
                "unable to parse requirement: \"priority>5\": the numeric operators > and < are not supported here: select with =, !=, in or notin",
            ),
        ];
        for (sel, want) in cases {
            assert_eq!(parse(sel), Err(want.to_string()), "{sel}");
        }
    }
}
