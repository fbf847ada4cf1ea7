//! Evaluation with Azure Cosmos DB semantics.
//!
//! A value is `Option<Value>`: `None` is *undefined* (a missing property), distinct from JSON
//! `null`. Comparing values of different types, or with undefined, gives undefined; `AND`,
//! `OR` and `NOT` are three-valued; arithmetic and string functions on the wrong types give
//! undefined. A `WHERE` keeps a row only when its condition is exactly `true`.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::{Map, Value};

use super::ast::{BinOp, Expr, UnOp};
use super::parser::num;

/// A value or undefined.
pub(crate) type Val = Option<Value>;

/// Longest string a function may build (larger results are undefined).
const MAX_STRING: usize = 1 << 20;

/// Evaluation context: the row's document and the query parameters.
pub(crate) struct Ctx<'a> {
    pub(crate) doc: &'a Value,
    /// The current element of each `JOIN` alias.
    pub(crate) vars: &'a [Value],
    pub(crate) params: &'a HashMap<String, Value>,
}

fn f64_of(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The type rank used by ORDER BY across types.
fn rank(v: &Val) -> u8 {
    match v {
        None => 0,
        Some(Value::Null) => 1,
        Some(Value::Bool(false)) => 2,
        Some(Value::Bool(true)) => 3,
        Some(Value::Number(_)) => 4,
        Some(Value::String(_)) => 5,
        Some(Value::Array(_)) => 6,
        Some(Value::Object(_)) => 7,
    }
}

/// Total order for ORDER BY: undefined < null < false < true < numbers < strings < arrays <
/// objects; numbers by value, strings by code point, arrays and objects by their JSON text.
pub(crate) fn order(a: &Val, b: &Val) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => f64_of(&Value::Number(x.clone()))
            .partial_cmp(&f64_of(&Value::Number(y.clone())))
            .unwrap_or(Ordering::Equal),
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(x @ (Value::Array(_) | Value::Object(_))), Some(y)) if rank(a) == rank(b) => {
            x.to_string().cmp(&y.to_string())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Equality with Cosmos semantics: undefined if either side is undefined or the types differ.
fn equals(a: &Val, b: &Val) -> Val {
    let (Some(x), Some(y)) = (a, b) else {
        return None;
    };
    match (x, y) {
        (Value::Number(_), Value::Number(_)) => Some(Value::Bool(f64_of(x) == f64_of(y))),
        (Value::String(p), Value::String(q)) => Some(Value::Bool(p == q)),
        (Value::Bool(p), Value::Bool(q)) => Some(Value::Bool(p == q)),
        (Value::Null, Value::Null) => Some(Value::Bool(true)),
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
            Some(Value::Bool(deep_eq(x, y)))
        }
        _ => None,
    }
}

/// Structural equality with numbers compared by value (1 = 1.0).
pub(crate) fn deep_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => f64_of(a) == f64_of(b),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| deep_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_eq(v, w)))
        }
        _ => a == b,
    }
}

/// `<`, `<=`, `>`, `>=`: numbers with numbers, strings with strings, bools with bools,
/// null with null; anything else undefined.
fn compare(a: &Val, b: &Val, want: fn(Ordering) -> bool) -> Val {
    let (Some(x), Some(y)) = (a, b) else {
        return None;
    };
    let ord = match (x, y) {
        (Value::Number(_), Value::Number(_)) => f64_of(x)?.partial_cmp(&f64_of(y)?)?,
        (Value::String(p), Value::String(q)) => p.cmp(q),
        (Value::Bool(p), Value::Bool(q)) => p.cmp(q),
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => return None,
    };
    Some(Value::Bool(want(ord)))
}

fn boolean(v: &Val) -> Option<bool> {
    v.as_ref().and_then(Value::as_bool)
}

fn number(v: &Val) -> Option<f64> {
    v.as_ref().filter(|v| v.is_number()).and_then(f64_of)
}

fn string(v: &Val) -> Option<&str> {
    v.as_ref().and_then(Value::as_str)
}

/// The value a path (`c`, a JOIN alias, then `.name` steps) refers to, borrowed from the row:
/// `Some(None)` for an undefined one, `None` when `e` is not such a path.
fn place<'a>(e: &Expr, cx: &Ctx<'a>) -> Option<Option<&'a Value>> {
    match e {
        Expr::Root => Some(Some(cx.doc)),
        Expr::Var(i) => Some(cx.vars.get(*i)),
        Expr::Prop(base, name) => Some(place(base, cx)?.and_then(|v| match v {
            Value::Object(m) => m.get(name),
            _ => None,
        })),
        _ => None,
    }
}

/// Evaluates `e` for one row.
pub(crate) fn eval(e: &Expr, cx: &Ctx<'_>) -> Val {
    match e {
        Expr::Lit(v) => v.clone(),
        Expr::Param(p) => cx.params.get(p).cloned(),
        Expr::Root => Some(cx.doc.clone()),
        Expr::Var(i) => cx.vars.get(*i).cloned(),
        Expr::Prop(base, name) => match place(e, cx) {
            // A path from the item or an alias: only the value at its end is copied.
            Some(found) => found.cloned(),
            None => match eval(base, cx) {
                Some(Value::Object(mut m)) => m.remove(name),
                _ => None,
            },
        },
        Expr::Index(base, index) => match (eval(base, cx), eval(index, cx)) {
            (Some(Value::Array(mut a)), Some(Value::Number(n))) => n
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < a.len())
                .map(|i| a.swap_remove(i)),
            (Some(Value::Object(mut m)), Some(Value::String(k))) => m.remove(&k),
            _ => None,
        },
        Expr::Unary(op, inner) => {
            let v = eval(inner, cx);
            match op {
                UnOp::Not => boolean(&v).map(|b| Value::Bool(!b)),
                UnOp::Neg => number(&v).map(|n| num(-n)),
                UnOp::Plus => number(&v).map(num),
            }
        }
        Expr::Binary(op, a, b) => binary(*op, a, b, cx),
        Expr::In(x, list, negated) => {
            let v = eval(x, cx);
            v.as_ref()?;
            let mut found = false;
            for item in list {
                if equals(&v, &eval(item, cx)) == Some(Value::Bool(true)) {
                    found = true;
                    break;
                }
            }
            Some(Value::Bool(found != *negated))
        }
        Expr::Between(x, lo, hi, negated) => {
            let v = eval(x, cx);
            let ge = compare(&v, &eval(lo, cx), |o| o != Ordering::Less);
            let le = compare(&v, &eval(hi, cx), |o| o != Ordering::Greater);
            let inside = and(&ge, &le);
            if *negated {
                boolean(&inside).map(|b| Value::Bool(!b))
            } else {
                inside
            }
        }
        Expr::Like(x, pattern, escape, negated) => {
            let v = eval(x, cx);
            let p = eval(pattern, cx);
            let esc = match escape {
                Some(e) => {
                    let ev = eval(e, cx);
                    let s = string(&ev)?;
                    let mut chars = s.chars();
                    let c = chars.next()?;
                    if chars.next().is_some() {
                        return None;
                    }
                    Some(c)
                }
                None => None,
            };
            let m = like(string(&v)?, string(&p)?, esc);
            Some(Value::Bool(m != *negated))
        }
        Expr::Ternary(c, a, b) => {
            if boolean(&eval(c, cx)) == Some(true) {
                eval(a, cx)
            } else {
                eval(b, cx)
            }
        }
        Expr::Call(name, args) => {
            let vals: Vec<Val> = args.iter().map(|a| eval(a, cx)).collect();
            call(name, &vals)
        }
        // Aggregates are computed over the rows by the caller; in row context they are
        // undefined.
        Expr::Agg(..) => None,
        Expr::Object(fields) => {
            let mut m = Map::new();
            for (k, e) in fields {
                if let Some(v) = eval(e, cx) {
                    m.insert(k.clone(), v);
                }
            }
            Some(Value::Object(m))
        }
        Expr::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|e| eval(e, cx).unwrap_or(Value::Null))
                .collect(),
        )),
    }
}

fn and(a: &Val, b: &Val) -> Val {
    match (boolean(a), boolean(b)) {
        (Some(false), _) | (_, Some(false)) => Some(Value::Bool(false)),
        (Some(true), Some(true)) => Some(Value::Bool(true)),
        _ => None,
    }
}

fn or(a: &Val, b: &Val) -> Val {
    match (boolean(a), boolean(b)) {
        (Some(true), _) | (_, Some(true)) => Some(Value::Bool(true)),
        (Some(false), Some(false)) => Some(Value::Bool(false)),
        _ => None,
    }
}

fn binary(op: BinOp, a: &Expr, b: &Expr, cx: &Ctx<'_>) -> Val {
    let x = eval(a, cx);
    if op == BinOp::Coalesce {
        return if x.is_some() { x } else { eval(b, cx) };
    }
    let y = eval(b, cx);
    match op {
        BinOp::And => and(&x, &y),
        BinOp::Or => or(&x, &y),
        BinOp::Eq => equals(&x, &y),
        BinOp::Ne => equals(&x, &y).map(|v| Value::Bool(v != Value::Bool(true))),
        BinOp::Lt => compare(&x, &y, |o| o == Ordering::Less),
        BinOp::Le => compare(&x, &y, |o| o != Ordering::Greater),
        BinOp::Gt => compare(&x, &y, |o| o == Ordering::Greater),
        BinOp::Ge => compare(&x, &y, |o| o != Ordering::Less),
        BinOp::Concat => Some(Value::String(format!("{}{}", string(&x)?, string(&y)?))),
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
            let (p, q) = (number(&x)?, number(&y)?);
            let r = match op {
                BinOp::Add => p + q,
                BinOp::Sub => p - q,
                BinOp::Mul => p * q,
                BinOp::Div if q != 0.0 => p / q,
                BinOp::Rem if q != 0.0 => p % q,
                _ => return None,
            };
            r.is_finite().then(|| num(r))
        }
        BinOp::Coalesce => None,
    }
}

/// SQL LIKE: `%` any run, `_` any one character, `esc` makes the next character literal.
fn like(s: &str, pattern: &str, esc: Option<char>) -> bool {
    #[derive(Clone, Copy)]
    enum P {
        Any,
        One,
        Lit(char),
    }
    let mut pat = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == esc {
            if let Some(n) = chars.next() {
                pat.push(P::Lit(n));
            }
        } else if c == '%' {
            pat.push(P::Any);
        } else if c == '_' {
            pat.push(P::One);
        } else {
            pat.push(P::Lit(c));
        }
    }
    let text: Vec<char> = s.chars().collect();
    // Iterative matching with backtracking to the last `%` (linear memory, no recursion).
    let (mut ti, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < text.len() {
        match pat.get(pi) {
            Some(P::One) => {
                ti += 1;
                pi += 1;
            }
            Some(P::Lit(c)) if *c == text[ti] => {
                ti += 1;
                pi += 1;
            }
            Some(P::Any) => {
                star = Some((pi, ti));
                pi += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pat[pi..].iter().all(|p| matches!(p, P::Any))
}

fn call(name: &str, a: &[Val]) -> Val {
    let arg = |i: usize| a.get(i).cloned().flatten();
    let s = |i: usize| a.get(i).and_then(|v| string(v).map(str::to_string));
    let n = |i: usize| a.get(i).and_then(number);
    let ignore_case = || a.get(2).and_then(boolean).unwrap_or(false);
    let cased = |x: String| if ignore_case() { x.to_lowercase() } else { x };
    let b = |x: bool| Some(Value::Bool(x));
    match name {
        "IS_DEFINED" => b(arg(0).is_some()),
        "IS_NULL" => b(matches!(arg(0), Some(Value::Null))),
        "IS_NUMBER" => b(matches!(arg(0), Some(Value::Number(_)))),
        "IS_STRING" => b(matches!(arg(0), Some(Value::String(_)))),
        "IS_BOOL" => b(matches!(arg(0), Some(Value::Bool(_)))),
        "IS_ARRAY" => b(matches!(arg(0), Some(Value::Array(_)))),
        "IS_OBJECT" => b(matches!(arg(0), Some(Value::Object(_)))),
        "IS_PRIMITIVE" => b(matches!(
            arg(0),
            Some(Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_))
        )),
        "STARTSWITH" => b(cased(s(0)?).starts_with(&cased(s(1)?))),
        "ENDSWITH" => b(cased(s(0)?).ends_with(&cased(s(1)?))),
        "CONTAINS" => b(cased(s(0)?).contains(&cased(s(1)?))),
        "LOWER" => Some(Value::String(s(0)?.to_lowercase())),
        "UPPER" => Some(Value::String(s(0)?.to_uppercase())),
        "LENGTH" => Some(Value::from(s(0)?.chars().count())),
        "LTRIM" => Some(Value::String(s(0)?.trim_start().to_string())),
        "RTRIM" => Some(Value::String(s(0)?.trim_end().to_string())),
        "TRIM" => Some(Value::String(s(0)?.trim().to_string())),
        "REVERSE" => Some(Value::String(s(0)?.chars().rev().collect())),
        "REPLACE" => {
            let (text, from, to) = (s(0)?, s(1)?, s(2)?);
            if from.is_empty() {
                return Some(Value::String(text));
            }
            // Nested REPLACEs multiply lengths: refuse (undefined) past 1 MiB of output.
            let grows = to.len().saturating_sub(from.len());
            let bound = text.len().saturating_add(text.len() / from.len() * grows);
            if bound > MAX_STRING {
                return None;
            }
            Some(Value::String(text.replace(&from, &to)))
        }
        "SUBSTRING" => {
            let text: Vec<char> = s(0)?.chars().collect();
            let start = n(1)?.max(0.0) as usize;
            let len = n(2)?.max(0.0) as usize;
            Some(Value::String(text.iter().skip(start).take(len).collect()))
        }
        "LEFT" => Some(Value::String(
            s(0)?.chars().take(n(1)?.max(0.0) as usize).collect(),
        )),
        "RIGHT" => {
            let text: Vec<char> = s(0)?.chars().collect();
            let k = (n(1)?.max(0.0) as usize).min(text.len());
            Some(Value::String(text[text.len() - k..].iter().collect()))
        }
        "CONCAT" => {
            let mut out = String::new();
            for i in 0..a.len() {
                out.push_str(&s(i)?);
            }
            Some(Value::String(out))
        }
        "INDEX_OF" => {
            let hay: Vec<char> = s(0)?.chars().collect();
            let needle: Vec<char> = s(1)?.chars().collect();
            let from = a.get(2).map_or(Some(0.0), number)?.max(0.0) as usize;
            let pos = (from..=hay.len().saturating_sub(needle.len()))
                .find(|&i| hay.get(i..i + needle.len()) == Some(needle.as_slice()));
            Some(Value::from(pos.map_or(-1, |p| p as i64)))
        }
        "TOSTRING" => Some(Value::String(match arg(0)? {
            Value::String(s) => s,
            other => other.to_string(),
        })),
        "ARRAY_CONTAINS" => {
            let Some(Value::Array(items)) = arg(0) else {
                return None;
            };
            let needle = arg(1)?;
            let partial = a.get(2).and_then(boolean).unwrap_or(false);
            b(items.iter().any(|item| {
                if partial {
                    match (item, &needle) {
                        (Value::Object(i), Value::Object(n)) => n
                            .iter()
                            .all(|(k, v)| i.get(k).is_some_and(|w| deep_eq(v, w))),
                        _ => deep_eq(item, &needle),
                    }
                } else {
                    deep_eq(item, &needle)
                }
            }))
        }
        "ARRAY_LENGTH" => match arg(0)? {
            Value::Array(x) => Some(Value::from(x.len())),
            _ => None,
        },
        "ABS" => Some(num(n(0)?.abs())),
        "FLOOR" => Some(num(n(0)?.floor())),
        "CEILING" => Some(num(n(0)?.ceil())),
        "ROUND" => Some(num(n(0)?.round())),
        "TRUNC" => Some(num(n(0)?.trunc())),
        "SQRT" => {
            let r = n(0)?.sqrt();
            r.is_finite().then(|| num(r))
        }
        "POWER" => {
            let r = n(0)?.powf(n(1)?);
            r.is_finite().then(|| num(r))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn like_patterns() {
        assert!(like("order-17", "order-%", None));
        assert!(like("abc", "a_c", None));
        assert!(!like("abc", "a_", None));
        assert!(like("50%", "50!%", Some('!')));
        assert!(!like("500", "50!%", Some('!')));
        assert!(like("", "%", None));
        assert!(like("aXbXc", "a%b%c", None));
    }

    #[test]
    fn cross_type_order() {
        let vals: Vec<Val> = vec![
            Some(json!({"a": 1})),
            Some(json!([1])),
            Some(json!("s")),
            Some(json!(2)),
            Some(json!(true)),
            Some(json!(false)),
            Some(Value::Null),
            None,
        ];
        let mut sorted = vals.clone();
        sorted.sort_by(order);
        let want: Vec<Val> = vals.into_iter().rev().collect();
        assert_eq!(sorted, want);
    }
}
