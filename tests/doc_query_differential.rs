//! Differential test of the query engine: random `WHERE` predicates (comparisons across mixed
//! types, three-valued `AND`/`OR`/`NOT`), random `ORDER BY` direction and `TOP`, over random
//! documents with random TTLs, checked against a small reference evaluator written here from
//! the contract's rules alone. Every query runs unpaged, paged, and (when it pins a partition)
//! through the planner, at several clock positions so expiry is part of every comparison.
//! Every query runs over two containers holding the same items: one without secondary indexes
//! and one indexing both fields, whose items were rewritten (stale index entries to ignore).

use std::cmp::Ordering;

use ebbdb::clock::ManualClock;
use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, Query, QueryOptions};
use proptest::prelude::*;
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000;

#[derive(Debug, Clone)]
enum Field {
    Missing,
    Null,
    Num(i64),
    Str(String),
    Bool(bool),
}

impl Field {
    fn json(&self) -> Option<Value> {
        match self {
            Field::Missing => None,
            Field::Null => Some(Value::Null),
            Field::Num(n) => Some(json!(n)),
            Field::Str(s) => Some(json!(s)),
            Field::Bool(b) => Some(json!(b)),
        }
    }
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::Missing),
        Just(Field::Null),
        (-3i64..4).prop_map(Field::Num),
        prop::sample::select(vec!["a", "b", "c"]).prop_map(|s| Field::Str(s.into())),
        any::<bool>().prop_map(Field::Bool),
    ]
}

#[derive(Debug, Clone)]
struct Doc {
    pk: u8,
    v: Field,
    w: Field,
    ttl: Option<u32>,
}

fn doc() -> impl Strategy<Value = Doc> {
    (0u8..3, field(), field(), prop::option::of(1u32..6)).prop_map(|(pk, v, w, ttl)| Doc {
        pk,
        v,
        w,
        ttl,
    })
}

#[derive(Debug, Clone)]
enum Pred {
    Cmp(&'static str, &'static str, Field),
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Not(Box<Pred>),
}

fn literal(f: &Field) -> String {
    match f {
        Field::Missing => "undefined".into(),
        Field::Null => "null".into(),
        Field::Num(n) => n.to_string(),
        Field::Str(s) => format!("'{s}'"),
        Field::Bool(b) => b.to_string(),
    }
}

impl Pred {
    fn sql(&self) -> String {
        match self {
            Pred::Cmp(path, op, lit) => format!("c.{path} {op} {}", literal(lit)),
            Pred::And(a, b) => format!("({} AND {})", a.sql(), b.sql()),
            Pred::Or(a, b) => format!("({} OR {})", a.sql(), b.sql()),
            Pred::Not(a) => format!("(NOT {})", a.sql()),
        }
    }
}

fn pred() -> impl Strategy<Value = Pred> {
    let leaf = (
        prop::sample::select(vec!["v", "w"]),
        prop::sample::select(vec!["=", "!=", "<", "<=", ">", ">="]),
        field().prop_filter("a literal", |f| !matches!(f, Field::Missing)),
    )
        .prop_map(|(p, o, f)| Pred::Cmp(p, o, f));
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Pred::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Pred::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Pred::Not(Box::new(a))),
        ]
    })
}

// ---- the reference: the contract's rules, written out without the engine's code ------------

/// `Some(bool)` or undefined (`None`).
fn compare(a: &Option<Value>, op: &str, b: &Value) -> Option<bool> {
    let a = a.as_ref()?;
    let ord = match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?)?,
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => return None,
    };
    Some(match op {
        "=" => ord == Ordering::Equal,
        "!=" => ord != Ordering::Equal,
        "<" => ord == Ordering::Less,
        "<=" => ord != Ordering::Greater,
        ">" => ord == Ordering::Greater,
        _ => ord != Ordering::Less,
    })
}

fn holds(p: &Pred, d: &Doc) -> Option<bool> {
    match p {
        Pred::Cmp(path, op, lit) => {
            let f = if *path == "v" { &d.v } else { &d.w };
            compare(&f.json(), op, &lit.json()?)
        }
        Pred::And(a, b) => match (holds(a, d), holds(b, d)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Pred::Or(a, b) => match (holds(a, d), holds(b, d)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Pred::Not(a) => holds(a, d).map(|x| !x),
    }
}

/// undefined < null < false < true < numbers < strings.
fn rank(f: &Field) -> (u8, i64, String) {
    match f {
        Field::Missing => (0, 0, String::new()),
        Field::Null => (1, 0, String::new()),
        Field::Bool(b) => (2 + u8::from(*b), 0, String::new()),
        Field::Num(n) => (4, *n, String::new()),
        Field::Str(s) => (5, 0, s.clone()),
    }
}

fn reference(
    docs: &[Doc],
    now_off: u64,
    p: &Pred,
    desc: bool,
    top: Option<usize>,
    pk: Option<u8>,
) -> Vec<String> {
    let mut rows: Vec<(usize, &Doc)> = docs
        .iter()
        .enumerate()
        .filter(|(_, d)| d.ttl.is_none_or(|t| u64::from(t) > now_off))
        .filter(|(_, d)| pk.is_none_or(|k| d.pk == k))
        .filter(|(_, d)| holds(p, d) == Some(true))
        .collect();
    // Ties broken by item key: partition (as its string) then id.
    rows.sort_by(|(i, a), (j, b)| {
        let o = rank(&a.v).cmp(&rank(&b.v));
        let o = if desc { o.reverse() } else { o };
        o.then_with(|| (a.pk, format!("{i:03}")).cmp(&(b.pk, format!("{j:03}"))))
    });
    let mut ids: Vec<String> = rows.into_iter().map(|(i, _)| format!("{i:03}")).collect();
    if let Some(t) = top {
        ids.truncate(t);
    }
    ids
}

fn check(docs: &[Doc], p: &Pred, desc: bool, top: Option<usize>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), Options::default().clock(clock.clone()))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let fail = |e: ebbdb::Error| TestCaseError::fail(e.to_string());
    let plain = db
        .create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )
        .map_err(fail)?;
    // The same items in a container indexing both fields (and the partition key), written
    // through a detour: a first version with the fields swapped, replaced by the real one,
    // and a decoy per item that is deleted again, so stale entries are there to be ignored.
    let indexed = db
        .create_container(
            ContainerProperties::new("ci", "/pk")
                .with_default_ttl(DefaultTtl::NeverExpire)
                .with_included_paths(["/v/?", "/w/?", "/pk/?"]),
        )
        .map_err(fail)?;
    for (i, d) in docs.iter().enumerate() {
        let pk = format!("p{}", d.pk);
        let mut first = json!({"id": format!("{i:03}"), "pk": pk});
        if let Some(w) = d.w.json() {
            first["v"] = w;
        }
        if let Some(v) = d.v.json() {
            first["w"] = v;
        }
        indexed.create_item(&first).map_err(fail)?;
        let mut decoy = first.clone();
        decoy["id"] = json!(format!("decoy{i:03}"));
        indexed.create_item(&decoy).map_err(fail)?;
        indexed
            .delete_item(pk.as_str(), &format!("decoy{i:03}"))
            .map_err(fail)?;
    }
    for (i, d) in docs.iter().enumerate() {
        let mut item = json!({"id": format!("{i:03}"), "pk": format!("p{}", d.pk)});
        if let Some(v) = d.v.json() {
            item["v"] = v;
        }
        if let Some(w) = d.w.json() {
            item["w"] = w;
        }
        if let Some(t) = d.ttl {
            item["ttl"] = json!(t);
        }
        plain.create_item(&item).map_err(fail)?;
        let pk = format!("p{}", d.pk);
        indexed
            .replace_item(pk.as_str(), &format!("{i:03}"), &item)
            .map_err(fail)?;
    }
    let dir_word = if desc { "DESC" } else { "ASC" };
    let top_word = top.map(|t| format!("TOP {t} ")).unwrap_or_default();
    for now_off in [0u64, 2, 4, 6] {
        clock.set_unix_millis((T0 + now_off) * 1000);
        for pk in [None, Some(1u8)] {
            let pinned = pk
                .map(|k| format!(" AND c.pk = 'p{k}'"))
                .unwrap_or_default();
            let text = format!(
                "SELECT {top_word}VALUE c.id FROM c WHERE {}{pinned} ORDER BY c.v {dir_word}",
                p.sql()
            );
            let want = reference(docs, now_off, p, desc, top, pk);
            let q = Query::new(&text);
            // A lone comparison other than `!=` is answered by the index (so this test
            // compares the index's answers, not a second scan).
            if let Pred::Cmp(path, op, _) = p {
                let plan = indexed.query_plan(&q).map_err(fail)?;
                let want_plan = if *op == "!=" { "" } else { *path };
                prop_assert_eq!(
                    plan.strip_prefix("index /").unwrap_or(""),
                    want_plan,
                    "{}",
                    text
                );
            }
            for c in [&plain, &indexed] {
                let got: Vec<String> = c
                    .query(&q)
                    .and_then(|rows| rows.collect())
                    .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                prop_assert_eq!(&got, &want, "{} at +{}s", text, now_off);
                let mut paged = Vec::new();
                let mut token = None;
                loop {
                    let page = c
                        .query_page::<String>(
                            &q,
                            &QueryOptions::default()
                                .max_item_count(3)
                                .continuation(token),
                        )
                        .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                    paged.extend(page.items);
                    match page.continuation {
                        Some(t) => token = Some(t),
                        None => break,
                    }
                }
                prop_assert_eq!(&paged, &want, "paged: {}", text);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn queries_match_the_reference(
        docs in prop::collection::vec(doc(), 0..24),
        p in pred(),
        desc in any::<bool>(),
        top in prop::option::of(0usize..8),
    ) {
        check(&docs, &p, desc, top)?;
    }
}

#[test]
fn a_fixed_case_with_every_type() -> Result<(), TestCaseError> {
    let docs: Vec<Doc> = [
        Field::Missing,
        Field::Null,
        Field::Num(2),
        Field::Str("b".into()),
        Field::Bool(true),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, v)| Doc {
        pk: (i % 3) as u8,
        v,
        w: Field::Num(i as i64),
        ttl: if i == 2 { Some(3) } else { None },
    })
    .collect();
    let p = Pred::Or(
        Box::new(Pred::Cmp("w", ">=", Field::Num(0))),
        Box::new(Pred::Not(Box::new(Pred::Cmp("v", "=", Field::Null)))),
    );
    check(&docs, &p, false, None)?;
    check(&docs, &p, true, Some(3))
}
