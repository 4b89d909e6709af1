//! CEL over Kubernetes objects, as kube-apiserver evaluates it: a JSON object becomes a
//! CEL map, a JSON integer a CEL `int` (kube-apiserver's schemas type integers as
//! `int`, where `cel` would make a non-negative one a `uint`, and `object.spec.x - 5`
//! would then fail below zero), a larger integer a `uint`, any other number a `double`.
//!
//! Used by ResourceInterpreter health rules (`federation::interpreter`) and kubesim's
//! admission `matchConditions`. `cel` (cel-rust) checks no types ahead of running: an
//! expression that compiles can still fail when evaluated (a missing field, a type
//! mismatch), and callers say so then.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::Value;

pub use ::cel::{Context, Program, Value as Cel};

/// `v` as Kubernetes' CEL sees it (JSON integers as `int`).
struct AsKube<'a>(&'a Value);

impl serde::Serialize for AsKube<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => s.serialize_i64(i),
                (None, Some(u)) => s.serialize_u64(u),
                _ => s.serialize_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(&AsKube(v))?;
                }
                seq.end()
            }
            Value::Object(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, &AsKube(v))?;
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

/// `v` as a CEL value; absent or JSON null is CEL `null`.
pub fn value(v: Option<&Value>) -> Result<Cel, String> {
    match v {
        None | Some(Value::Null) => Ok(Cel::Null),
        Some(v) => ::cel::to_value(AsKube(v)).map_err(|e| e.to_string()),
    }
}

/// The longest expression compiled, the most member selections in one, and the
/// deepest nesting of parentheses, brackets and braces: cel's parser recurses for each
/// (a parenthesis through its whole precedence chain), and too deep a thread's stack
/// overflows, which aborts the process (a webhook, the hub controller) rather than
/// failing the expression. Kubernetes' own rules stay far below these.
const MAX_LEN: usize = 10_000;
const MAX_SELECTIONS: usize = 64;
const MAX_DEPTH: usize = 8;

/// Compiles `expression`, the error as text.
pub fn compile(expression: &str) -> Result<Program, String> {
    if expression.len() > MAX_LEN {
        return Err(format!(
            "the expression is {} characters long, more than the {MAX_LEN} allowed: write a shorter one",
            expression.len()
        ));
    }
    let selections = expression.bytes().filter(|&b| b == b'.').count();
    if selections > MAX_SELECTIONS {
        return Err(format!(
            "the expression has {selections} member selections, more than the {MAX_SELECTIONS} allowed: write a simpler one"
        ));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in expression.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_DEPTH {
        return Err(format!(
            "the expression nests parentheses, brackets or braces {deepest} deep, more than the {MAX_DEPTH} allowed: write a flatter one"
        ));
    }
    Program::compile(expression).map_err(|e| e.to_string())
}

/// The functions of CEL's standard library that need its date and time support, which
/// is not built in (it would bring a time zone database): an expression calling one
/// would compile and then fail on every evaluation.
const WITHOUT_TIME: &[&str] = &[
    "timestamp",
    "duration",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

/// Variables other Kubernetes CEL environments declare (validation rules' `self` and
/// `oldSelf`, admission's `oldObject`, `params`, `authorizer`...), which an expression
/// written for one of them may use. Not `request` or `variables`, which a
/// comprehension may well name its own variable.
const ELSEWHERE: &[&str] = &[
    "self",
    "oldSelf",
    "object",
    "oldObject",
    "params",
    "namespaceObject",
    "authorizer",
];

/// Compiles `expression` for an environment that declares only `variables`, and refuses
/// what would compile but fail on every evaluation (kube-apiserver's type check refuses
/// such expressions when they are written): a variable of another Kubernetes CEL
/// environment (`self` in a health rule, say), or a date and time function. (A
/// comprehension's own variables are references too, so names outside those
/// environments are not judged.)
pub fn check(expression: &str, variables: &[&str]) -> Result<Arc<Program>, String> {
    // from the programs compiled before: the hub checks its interpreters every round
    let program = compiled(expression)?;
    let refs = program.references();
    let mut foreign: Vec<&str> = ELSEWHERE
        .iter()
        .copied()
        .filter(|v| !variables.contains(v) && refs.has_variable(v))
        .collect();
    foreign.sort_unstable();
    if let Some(v) = foreign.first() {
        return Err(format!(
            "undeclared reference to '{v}' (the variables are {})",
            variables.join(", ")
        ));
    }
    if let Some(f) = WITHOUT_TIME.iter().find(|f| refs.has_function(f)) {
        return Err(format!(
            "{f}() is not available: Causeway's CEL has no date and time support"
        ));
    }
    Ok(program)
}

/// How many compiled expressions [`boolean`] keeps (it forgets them all past that).
const KEPT: usize = 256;

/// `expression` compiled, from the programs compiled before: the same few expressions
/// (a kind's health rule, a webhook's matchConditions) are run on every status change
/// or request, and compiling is the dearer part of running one.
fn compiled(expression: &str) -> Result<Arc<Program>, String> {
    static PROGRAMS: LazyLock<Mutex<HashMap<String, Arc<Program>>>> =
        LazyLock::new(Default::default);
    let programs = || PROGRAMS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = programs().get(expression) {
        return Ok(p.clone());
    }
    let p = Arc::new(compile(expression)?);
    let mut kept = programs();
    if kept.len() >= KEPT {
        kept.clear();
    }
    kept.insert(expression.to_string(), p.clone());
    Ok(p)
}

/// Runs `expression` in `ctx` and expects a bool: `Err` says why not (it does not
/// compile, it fails, or it is of another type).
pub fn boolean(expression: &str, ctx: &Context<'_, '_>) -> Result<bool, String> {
    match compiled(expression)?
        .execute(ctx)
        .map_err(|e| e.to_string())?
    {
        Cel::Bool(b) => Ok(b),
        other => Err(format!("evaluated to {other:?}, not a bool")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(expr: &str, object: &Value) -> Result<bool, String> {
        let mut ctx = Context::default();
        ctx.add_variable_from_value("object", value(Some(object))?);
        boolean(expr, &ctx)
    }

    /// An expression the parser would recurse too deep for is refused, not compiled
    /// (a stack overflow aborts the process); one at the limit compiles on a thread
    /// with the 2 MiB stack of tokio's workers.
    #[test]
    fn expressions_too_deep_for_the_parser_are_refused() {
        let on_small_stack = |expr: String| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || compile(&expr).map(drop))
                .unwrap()
                .join()
                .unwrap()
        };
        let e = on_small_stack(format!("object{}", ".a".repeat(50_000))).unwrap_err();
        assert!(e.contains("characters long"), "{e}");
        let e = on_small_stack(format!("object{}", ".a".repeat(MAX_SELECTIONS + 1))).unwrap_err();
        assert!(e.contains("member selections"), "{e}");
        on_small_stack(format!("object{}", ".a".repeat(MAX_SELECTIONS))).unwrap();
        let nested = |n: usize| format!("{}object{}", "(".repeat(n), ")".repeat(n));
        let e = on_small_stack(nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(e.contains("deep"), "{e}");
        on_small_stack(nested(MAX_DEPTH)).unwrap();
        on_small_stack(format!(
            "[{}1{}]",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        ))
        .unwrap();
        // both at their limits at once: brackets and calls around a chain of selections
        let chain = format!("object{}", ".a".repeat(MAX_SELECTIONS));
        on_small_stack(format!(
            "{}has({chain}){}",
            "[(".repeat((MAX_DEPTH - 1) / 2),
            ")]".repeat((MAX_DEPTH - 1) / 2)
        ))
        .unwrap();
    }

    #[test]
    fn json_numbers_are_what_kubernetes_makes_them() {
        let o = json!({"spec": {"n": 3, "big": u64::MAX, "f": 1.5}, "status": null});
        for (expr, want) in [
            ("object.spec.n == 3", Ok(true)),
            ("object.spec.n > 2 && object.spec.n < 4", Ok(true)),
            ("object.spec.big == 18446744073709551615u", Ok(true)),
            ("object.spec.f == 1.5", Ok(true)),
            ("object.status == null", Ok(true)),
            ("has(object.spec.n) && !has(object.spec.m)", Ok(true)),
        ] {
            assert_eq!(eval(expr, &o), want, "{expr}");
        }
        let missing = eval("object.spec.m == 1", &o).unwrap_err();
        assert!(missing.contains('m'), "{missing}");
        assert_eq!(
            eval(
                "object.spec.s.matches('^a+$')",
                &json!({"spec": {"s": "aaa"}})
            ),
            Ok(true)
        );
        let not_bool = eval("object.spec.n", &o).unwrap_err();
        assert!(not_bool.contains("not a bool"), "{not_bool}");
        assert!(eval("object.spec.n ==", &o).is_err());
        assert_eq!(value(None), Ok(Cel::Null));
    }

    #[test]
    fn what_would_fail_every_evaluation_is_refused_at_once() {
        assert!(check("object.status.phase == 'Running'", &["object"]).is_ok());
        assert!(
            check(
                "has(object.status) && object.spec.items.all(i, i.ready)",
                &["object"]
            )
            .is_ok()
        );
        assert_eq!(
            check("self.status.ready", &["object"]).err().as_deref(),
            Some("undeclared reference to 'self' (the variables are object)")
        );
        assert_eq!(
            check(
                "timestamp(object.status.at) < timestamp('2030-01-01T00:00:00Z')",
                &["object"]
            )
            .err()
            .as_deref(),
            Some("timestamp() is not available: Causeway's CEL has no date and time support")
        );
        assert!(check("object.status.phase ==", &["object"]).is_err());
    }
}
