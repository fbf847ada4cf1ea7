//! Queries: the Azure Cosmos DB for NoSQL SQL dialect over a container's live items.
//!
//! - `lexer.rs`: tokens with positions.
//! - `parser.rs`: a hand-written recursive-descent parser into the typed tree of `ast.rs`
//!   (bounded nesting; every error a 400 naming the position).
//! - `plan.rs`: which WHERE term a secondary index can answer (`doc/index/`).
//! - `eval.rs`: Cosmos semantics (undefined vs null, three-valued logic, the cross-type order,
//!   system functions).
//! - this file: [`Query`], [`QueryOptions`] and the runner: scan (one partition's key prefix
//!   when the options name a partition key), filter, aggregate, order, project, DISTINCT,
//!   OFFSET/LIMIT and TOP.
//!
//! Expiry is exact: the scan evaluates expiry at one `now` for the whole query, so an expired
//! item appears in no clause, count or aggregate.

mod ast;
mod eval;
mod lexer;
mod ordered;
mod parser;
mod plan;
mod shape;

pub(crate) use ordered::Ordered;
pub(crate) use plan::Chosen;
pub(crate) use shape::{Out, Owned, Rows, Source, Typed};

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde_json::{Map, Value};
use smallvec::{smallvec, SmallVec};

use self::ast::{AggFn, Expr, Projection, Select};
use self::eval::{eval, order, Ctx, Val};
use self::shape::Shape;
use super::partition::PartitionKey;
use crate::error::{Error, Result};

/// A query and its parameters.
///
/// ```
/// use ebbdb::{ContainerProperties, Database, Query};
/// use serde_json::{json, Value};
///
/// let dir = tempfile::tempdir()?;
/// let db = Database::open(dir.path())?;
/// let orders = db.create_container(ContainerProperties::new("orders", "/customer"))?;
/// orders.create_item(&json!({"id": "1", "customer": "ann", "total": 120}))?;
/// orders.create_item(&json!({"id": "2", "customer": "bob", "total": 80}))?;
/// let q = Query::new("SELECT VALUE c.id FROM c WHERE c.total > @min").param("@min", 100);
/// let ids: Vec<Value> = orders.query(&q)?.collect::<ebbdb::Result<_>>()?;
/// assert_eq!(ids, vec![json!("1")]);
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    text: String,
    params: HashMap<String, Value>,
}

impl Query {
    /// A query from its text.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            params: HashMap::new(),
        }
    }

    /// Binds `@name` (with or without the `@`) to `value`.
    #[must_use]
    pub fn param(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.params
            .insert(name.trim_start_matches('@').to_string(), value.into());
        self
    }

    /// The query text.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Options of a query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryOptions {
    /// Restrict the query to one partition (a prefix scan of that partition only).
    pub partition_key: Option<PartitionKey>,
    /// Page size for [`Container::query_page`](crate::Container::query_page) (default 100).
    pub max_item_count: Option<usize>,
    /// Where [`Container::query_page`](crate::Container::query_page) resumes: the
    /// `continuation` of the previous page.
    pub continuation: Option<String>,
}

impl QueryOptions {
    /// Sets the partition key.
    #[must_use]
    pub fn partition_key(mut self, pk: impl Into<PartitionKey>) -> Self {
        self.partition_key = Some(pk.into());
        self
    }

    /// Sets the page size of `query_page`.
    #[must_use]
    pub fn max_item_count(mut self, n: usize) -> Self {
        self.max_item_count = Some(n);
        self
    }

    /// Resumes `query_page` after the page that returned `token` (`None`: from the start).
    #[must_use]
    pub fn continuation(mut self, token: Option<String>) -> Self {
        self.continuation = token;
        self
    }
}

/// Identifies a query (text and parameters) so a continuation cannot resume another one.
fn fingerprint(q: &Query, scope: &[u8]) -> u32 {
    let mut params: Vec<(&String, &Value)> = q.params.iter().collect();
    params.sort_by(|a, b| a.0.cmp(b.0));
    let mut h = crc32fast::Hasher::new();
    h.update(&(scope.len() as u64).to_le_bytes());
    h.update(scope);
    h.update(q.text.as_bytes());
    for (k, v) in params {
        h.update(k.as_bytes());
        h.update(canonical(v).as_bytes());
    }
    h.finalize()
}

/// A checksum of a continuation's cursor, tied to its query.
fn body_check(body: &Value, q: &Query, scope: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&fingerprint(q, scope).to_le_bytes());
    h.update(canonical(body).as_bytes());
    h.finalize()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The opaque continuation token of `cursor` for query `q` (JSON text).
pub(crate) fn encode_continuation(cursor: &Cursor, q: &Query, scope: &[u8]) -> String {
    let body = match cursor {
        Cursor::After {
            keys,
            item,
            join,
            emitted,
        } => serde_json::json!({
            "k": keys.iter().map(|k| match k {
                None => serde_json::json!([0]),
                Some(v) => serde_json::json!([1, v]),
            }).collect::<Vec<_>>(),
            "i": hex(item),
            "j": join,
            "e": emitted,
        }),
        Cursor::Index(i) => serde_json::json!({ "x": i }),
    };
    let check = body_check(&body, q, scope);
    // Format 2: the fingerprint covers the scope (format 1, without it, is refused).
    serde_json::json!({"v": 2, "q": fingerprint(q, scope), "c": body, "h": check}).to_string()
}

/// Reads a continuation token back; 400 if it is malformed or belongs to another query or
/// scope (`scope`: the container and the partition the query was confined to, which the
/// token's cursor is only meaningful within).
pub(crate) fn decode_continuation(token: &str, q: &Query, scope: &[u8]) -> Result<Cursor> {
    let invalid = || bad("the continuation token is not valid for this query");
    let v: Value = serde_json::from_str(token).map_err(|_| invalid())?;
    if v["v"] != 2 || v["q"].as_u64() != Some(u64::from(fingerprint(q, scope))) {
        return Err(invalid());
    }
    let c = &v["c"];
    if v["h"].as_u64() != Some(u64::from(body_check(c, q, scope))) {
        return Err(invalid()); // damaged in transit or by hand
    }
    if let Some(i) = c["x"].as_u64() {
        return Ok(Cursor::Index(usize::try_from(i).map_err(|_| invalid())?));
    }
    let keys = c["k"]
        .as_array()
        .ok_or_else(invalid)?
        .iter()
        .map(|k| match k.as_array().map(Vec::as_slice) {
            Some([t]) if t == 0 => Ok(None),
            Some([t, v]) if t == 1 => Ok(Some(v.clone())),
            _ => Err(invalid()),
        })
        .collect::<Result<Vec<Val>>>()?;
    Ok(Cursor::After {
        keys,
        item: c["i"].as_str().and_then(unhex).ok_or_else(invalid)?,
        join: c["j"]
            .as_u64()
            .and_then(|j| usize::try_from(j).ok())
            .ok_or_else(invalid)?,
        emitted: c["e"]
            .as_u64()
            .and_then(|e| usize::try_from(e).ok())
            .ok_or_else(invalid)?,
    })
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadRequest(msg.into())
}

/// Checks the query can be run before reading anything: parameters bound, aggregates only
/// where they make sense.
fn check(q: &Select, params: &HashMap<String, Value>) -> Result<()> {
    let mut missing = Vec::new();
    let mut visit = |e: &Expr| collect_params(e, &mut missing);
    match &q.projection {
        Projection::Star => {}
        Projection::Value(e) => visit(e),
        Projection::Fields(fields) => fields.iter().for_each(|(_, e)| visit(e)),
    }
    for e in q.filter.iter().chain(q.order_by.iter().map(|(e, _)| e)) {
        visit(e);
    }
    for e in q
        .top
        .iter()
        .chain(&q.group_by)
        .chain(q.joins.iter().map(|(_, e)| e))
    {
        visit(e);
    }
    if let Some((a, b)) = &q.offset_limit {
        visit(a);
        visit(b);
    }
    if let Some(p) = missing.iter().find(|p| !params.contains_key(*p)) {
        return Err(bad(format!("the parameter '@{p}' is not bound")));
    }
    if q.filter.as_ref().is_some_and(Expr::has_aggregate) {
        return Err(bad("aggregates are not allowed in WHERE"));
    }
    if q.order_by.iter().any(|(e, _)| e.has_aggregate()) {
        return Err(bad("aggregates are not allowed in ORDER BY"));
    }
    // Outside its aggregates a grouped projection may use only the GROUP BY values (Cosmos
    // refuses anything else); without GROUP BY an aggregate projection may use no row value.
    let grouped_ok = |e: &Expr| only_grouped(e, &q.group_by);
    match &q.projection {
        Projection::Value(e) if (e.has_aggregate() || !q.group_by.is_empty()) && !grouped_ok(e) => {
            return Err(bad(
                "outside an aggregate, the projection may only use GROUP BY expressions",
            ));
        }
        Projection::Fields(fields)
            if !q.group_by.is_empty() && fields.iter().any(|(_, e)| !grouped_ok(e)) =>
        {
            return Err(bad(
                "outside an aggregate, the projection may only use GROUP BY expressions",
            ));
        }
        _ => {}
    }
    if !q.group_by.is_empty() {
        if matches!(q.projection, Projection::Star) {
            return Err(bad("SELECT * cannot be used with GROUP BY"));
        }
        if !q.order_by.is_empty() {
            return Err(bad("ORDER BY cannot be used with GROUP BY"));
        }
    } else if let Projection::Fields(fields) = &q.projection {
        let aggs = fields.iter().filter(|(_, e)| e.has_aggregate()).count();
        if aggs > 0 && aggs < fields.len() {
            return Err(bad(
                "a projection mixing aggregates and plain values needs GROUP BY",
            ));
        }
    }
    Ok(())
}

/// True when every reference to the item (or a JOIN alias) in `e` lies inside an aggregate or
/// inside one of the GROUP BY expressions.
fn only_grouped(e: &Expr, group_by: &[Expr]) -> bool {
    if group_by.iter().any(|g| g == e) {
        return true;
    }
    match e {
        Expr::Agg(..) => true,
        Expr::Root | Expr::Var(_) => false,
        other => other
            .children()
            .into_iter()
            .all(|c| only_grouped(c, group_by)),
    }
}

fn collect_params(e: &Expr, out: &mut Vec<String>) {
    if let Expr::Param(p) = e {
        out.push(p.clone());
    }
    for c in e.children() {
        collect_params(c, out);
    }
}

/// A non-negative integer from TOP / OFFSET / LIMIT.
fn count_of(e: &Expr, params: &HashMap<String, Value>, what: &str) -> Result<usize> {
    let empty = Value::Null;
    let v = eval(
        e,
        &Ctx {
            doc: &empty,
            vars: &[],
            params,
        },
    );
    v.as_ref()
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad(format!("{what} must be a non-negative integer")))
}

/// A conditional patch's filter predicate (`FROM c WHERE …`), parsed by the query parser and
/// evaluated with the query evaluator: one expression language.
#[derive(Debug, Clone)]
pub(crate) struct Predicate {
    filter: Option<Expr>,
}

impl Predicate {
    /// Parses `text`; 400 for a syntax error (naming the position), a parameter (a predicate
    /// has none to bind) or an aggregate.
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let filter = parser::parse_predicate(text)?;
        if let Some(f) = &filter {
            let mut params = Vec::new();
            collect_params(f, &mut params);
            if let Some(p) = params.first() {
                return Err(bad(format!(
                    "the parameter '@{p}' cannot be bound in a filter predicate"
                )));
            }
            if f.has_aggregate() {
                return Err(bad("aggregates are not allowed in a filter predicate"));
            }
        }
        Ok(Self { filter })
    }

    /// True when the WHERE condition is `true` for `doc` (undefined and `false` do not match).
    pub(crate) fn matches(&self, doc: &Value) -> bool {
        let Some(f) = &self.filter else {
            return true;
        };
        let params = HashMap::new();
        let cx = Ctx {
            doc,
            vars: &[],
            params: &params,
        };
        eval(f, &cx) == Some(Value::Bool(true))
    }
}

/// A parsed and checked query, ready to plan and run.
pub(crate) struct Prepared<'a> {
    select: Select,
    params: &'a HashMap<String, Value>,
    shape: Shape,
    /// The WHERE and shape for document items read from one partition, when some of the
    /// WHERE's terms hold for every such item ([`Prepared::within_partition`]).
    pinned: Option<Pinned>,
}

/// What a query evaluates for a document item (record flag `DOC`) read from a pinned
/// partition: the WHERE without the terms the partition makes true, and the shape of what
/// that leaves to read.
struct Pinned {
    filter: Option<Expr>,
    shape: Shape,
}

/// Parses and checks `query` (400 on any problem, before anything is read).
pub(crate) fn prepare(query: &Query) -> Result<Prepared<'_>> {
    let select = parser::parse(&query.text)?;
    check(&select, &query.params)?;
    Ok(Prepared {
        shape: Shape::of(&select),
        select,
        params: &query.params,
        pinned: None,
    })
}

impl Prepared<'_> {
    /// The value the WHERE clause requires at `path` (property names from the item's root),
    /// if one of its top-level `AND` terms is `c.<path> = <literal or parameter>`: every row
    /// the query can return then has it there.
    pub(crate) fn required_value(&self, path: &[String]) -> Option<Value> {
        let mut terms = Vec::new();
        if let Some(f) = &self.select.filter {
            conjuncts(f, &mut terms);
        }
        terms
            .into_iter()
            .find_map(|t| self.equality_on(t, path).cloned())
    }

    /// The literal or bound parameter `v` when `t` is `c.<path> = v` (either way round).
    fn equality_on<'s>(&'s self, t: &'s Expr, path: &[String]) -> Option<&'s Value> {
        let Expr::Binary(ast::BinOp::Eq, a, b) = t else {
            return None;
        };
        let v = if is_path(a, path) {
            b
        } else if is_path(b, path) {
            a
        } else {
            return None;
        };
        match v.as_ref() {
            Expr::Lit(Some(v)) => Some(v),
            Expr::Param(name) => self.params.get(name),
            _ => None,
        }
    }

    /// Tells the query that every item it reads is in one partition (a prefix scan of it, or
    /// an index walk bounded to it): the top-level `AND` terms `c.<path> = v` (`path`: the
    /// partition key path) with a literal or parameter `v` for which `same_partition(v)`
    /// holds are then true for every document item read, and are not evaluated for them.
    ///
    /// Why that is exact: the document layer writes an item (flag `DOC`) only under the key
    /// its own partition key value gives (create, upsert and bulk derive the key from the
    /// body; replace and batch refuse a body whose value differs; patch refuses the path,
    /// and a stored value whose partition key is not its partition's), and two partitions
    /// never share a key prefix. The caller does not call this for a partition key path
    /// under a system property (its value is stamped anew on every write). Equal partition keys are equal values
    /// under `=`: strings, booleans and null exactly, numbers as the same `f64` (`-0` taken
    /// as `0`), which is how `=` compares numbers too. Items written through the key-value
    /// API carry no `DOC` flag and are checked by the whole WHERE. Not used with a JOIN (the
    /// WHERE then runs per joined row).
    pub(crate) fn within_partition(
        &mut self,
        path: &[String],
        same_partition: impl Fn(&Value) -> bool,
    ) {
        let Some(f) = &self.select.filter else {
            return;
        };
        if !self.select.joins.is_empty() {
            return;
        }
        let mut terms = Vec::new();
        conjuncts(f, &mut terms);
        let implied = |t: &Expr| {
            self.equality_on(t, path)
                .is_some_and(|v| !v.is_array() && !v.is_object() && same_partition(v))
        };
        let kept: Vec<Expr> = terms
            .iter()
            .filter(|t| !implied(t))
            .map(|t| (*t).clone())
            .collect();
        if kept.len() == terms.len() {
            return;
        }
        let filter = kept
            .into_iter()
            .reduce(|a, b| Expr::Binary(ast::BinOp::And, Box::new(a), Box::new(b)));
        let mut reduced = self.select.clone();
        reduced.filter = filter;
        self.pinned = Some(Pinned {
            shape: Shape::of(&reduced),
            filter: reduced.filter,
        });
    }

    /// Where an unordered scan may start for this page: the item key of the cursor (rows of
    /// earlier items come before it in result order and would be skipped anyway).
    pub(crate) fn scan_from(&self, page: &PageSpec) -> Option<Vec<u8>> {
        let plain = self.select.order_by.is_empty()
            && self.select.group_by.is_empty()
            && !self.select.distinct;
        match &page.after {
            Some(Cursor::After { item, .. }) if plain => Some(item.clone()),
            _ => None,
        }
    }

    /// True for exactly `SELECT VALUE COUNT(1) FROM c` (no WHERE, JOIN, GROUP BY or clause
    /// after): the count of live items, which needs no item parsed.
    pub(crate) fn is_plain_count(&self) -> bool {
        let q = &self.select;
        matches!(&q.projection, Projection::Value(Expr::Agg(AggFn::Count, arg))
            if matches!(arg.as_ref(), Expr::Lit(Some(_))))
            && q.filter.is_none()
            && q.joins.is_empty()
            && q.group_by.is_empty()
            && q.order_by.is_empty()
            && q.top.is_none()
            && q.offset_limit.is_none()
            && !q.distinct
    }

    /// Runs over `items` (live items' engine keys and stored text, in key order, one
    /// `now`), returning one page of result rows and, if more follow, where the next page
    /// starts.
    pub(crate) fn run(self, items: impl Source, page: &PageSpec) -> Result<(Rows, Option<Cursor>)> {
        run_select(&self, items, page, false)
    }

    /// As [`Prepared::run`], over items that come in the query's `ORDER BY` order (an index
    /// walk, `ordered.rs`): the runner stops once the page is full.
    pub(crate) fn run_presorted(
        self,
        items: impl Source,
        page: &PageSpec,
    ) -> Result<(Rows, Option<Cursor>)> {
        run_select(&self, items, page, true)
    }

    /// The path and direction of a single `ORDER BY c.<path>` that an index walk can serve:
    /// no JOIN, DISTINCT, GROUP BY or aggregate, and a bound (TOP, LIMIT or a page size), so
    /// that stopping early pays.
    pub(crate) fn index_order(&self, page: &PageSpec) -> Option<(Vec<String>, bool)> {
        let q = &self.select;
        let [(e, desc)] = q.order_by.as_slice() else {
            return None;
        };
        let aggregate = match &q.projection {
            Projection::Value(e) => e.has_aggregate(),
            Projection::Fields(f) => f.iter().any(|(_, e)| e.has_aggregate()),
            Projection::Star => false,
        };
        let bounded = q.top.is_some() || q.offset_limit.is_some() || page.max.is_some();
        if !q.joins.is_empty() || q.distinct || !q.group_by.is_empty() || aggregate || !bounded {
            return None;
        }
        let mut path = Vec::new();
        let mut at = e;
        while let Expr::Prop(base, name) = at {
            path.push(name.clone());
            at = base;
        }
        path.reverse();
        (matches!(at, Expr::Root) && !path.is_empty()).then_some((path, *desc))
    }
}

/// The top-level `AND` terms of `e`.
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Binary(ast::BinOp::And, a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        other => out.push(other),
    }
}

/// Whether `e` is `c.<path[0]>.<path[1]>…`.
fn is_path(e: &Expr, path: &[String]) -> bool {
    match (e, path.split_last()) {
        (Expr::Root, None) => true,
        (Expr::Prop(base, name), Some((last, rest))) => name == last && is_path(base, rest),
        _ => false,
    }
}

/// Test hook (fuzzing): runs `query` over in-memory `docs` as if they were a container's
/// items, in the given order.
///
/// # Errors
/// As a query on a container.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn run_over(query: &Query, docs: Vec<Value>) -> Result<Vec<Value>> {
    run(query, docs.into_iter().map(Ok))
}

/// Runs `query` over `items` (live items, one `now`), returning the result rows.
#[cfg(any(test, feature = "test-hooks"))]
pub(crate) fn run(query: &Query, items: impl Iterator<Item = Result<Value>>) -> Result<Vec<Value>> {
    let keyed = items.enumerate().map(|(i, r)| {
        let text = serde_json::to_vec(&r?).map_err(|e| bad(e.to_string()))?;
        Ok(((i as u64).to_be_bytes().to_vec(), text))
    });
    let (rows, _) = prepare(query)?.run(Owned(keyed), &PageSpec::default())?;
    rows.into_typed().collect()
}

/// An item's engine key, held in the row (a partition key's prefix and an id are usually
/// under 40 bytes): an indexed filter returning 10,000 items allocated and freed one key
/// each, and the allocator, its small free lists merged by the page's large buffers, spent
/// a tenth of the query on them.
type ItemKey = SmallVec<[u8; 40]>;

/// One row: the item, its engine key, which combination of `JOIN` elements it is, and the
/// current element of each `JOIN` alias.
struct Row {
    /// The item, or only the properties the query reads (`shape.rs`).
    doc: Value,
    item: ItemKey,
    join: usize,
    vars: Vec<Value>,
    /// Where the stored text lies in the page's text buffer, when it is the row's result
    /// (`Shape::stored_rows`).
    stored: Option<Range<usize>>,
}

impl Row {
    /// The row aggregates over no item are evaluated against.
    fn empty() -> Self {
        Row {
            doc: Value::Null,
            item: ItemKey::new(),
            join: 0,
            vars: Vec::new(),
            stored: None,
        }
    }

    fn cx<'a>(&'a self, params: &'a HashMap<String, Value>) -> Ctx<'a> {
        Ctx {
            doc: &self.doc,
            vars: &self.vars,
            params,
        }
    }
}

/// The rows of one item: one per combination of the `JOIN` arrays' elements (a join over a
/// value that is not an array yields no row). Without JOIN the one row is not allocated.
fn expand(
    item: ItemKey,
    doc: Value,
    stored: Option<Range<usize>>,
    joins: &[(String, Expr)],
    params: &HashMap<String, Value>,
) -> SmallVec<[Row; 1]> {
    let mut rows: SmallVec<[Row; 1]> = smallvec![Row {
        doc,
        item,
        join: 0,
        vars: Vec::new(),
        stored,
    }];
    for (_, array) in joins {
        let mut next = SmallVec::new();
        for row in rows {
            if let Some(Value::Array(items)) = eval(array, &row.cx(params)) {
                for item in items {
                    let mut vars = row.vars.clone();
                    vars.push(item);
                    next.push(Row {
                        doc: row.doc.clone(),
                        item: row.item.clone(),
                        join: 0,
                        vars,
                        stored: None,
                    });
                }
            }
        }
        rows = next;
    }
    for (i, row) in rows.iter_mut().enumerate() {
        row.join = i;
    }
    rows
}

fn project(q: &Select, row: &Row, params: &HashMap<String, Value>) -> Val {
    let cx = row.cx(params);
    match &q.projection {
        Projection::Star if q.joins.is_empty() => Some(row.doc.clone()),
        Projection::Star => {
            let mut m = Map::new();
            m.insert(q.alias.clone(), row.doc.clone());
            for ((name, _), v) in q.joins.iter().zip(&row.vars) {
                m.insert(name.clone(), v.clone());
            }
            Some(Value::Object(m))
        }
        Projection::Value(e) => eval(e, &cx),
        Projection::Fields(fields) => {
            let mut m = Map::new();
            for (name, e) in fields {
                if let Some(v) = eval(e, &cx) {
                    m.insert(name.clone(), v);
                }
            }
            Some(Value::Object(m))
        }
    }
}

/// True when the query's WHERE (if any) is `true` for the row.
fn passes(
    filter: Option<&Expr>,
    doc: &Value,
    vars: &[Value],
    params: &HashMap<String, Value>,
) -> bool {
    filter.is_none_or(|f| eval(f, &Ctx { doc, vars, params }) == Some(Value::Bool(true)))
}

/// Where a page of a query resumes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cursor {
    /// After this row (its ORDER BY keys, item key and join combination), `emitted` rows
    /// returned so far.
    After {
        keys: Vec<Val>,
        item: Vec<u8>,
        join: usize,
        emitted: usize,
    },
    /// Grouped and DISTINCT results are paged by index into the whole result.
    Index(usize),
}

/// One page of a query: at most `max` rows (all of them with `None`) after `after`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PageSpec {
    pub(crate) after: Option<Cursor>,
    pub(crate) max: Option<usize>,
}

/// Compares two rows by the query's order: ORDER BY keys (with directions), then item key,
/// then join combination. A total order, so a cursor resumes exactly.
fn position_cmp(
    q: &Select,
    a: (&[Val], &[u8], usize),
    b: (&[Val], &[u8], usize),
) -> std::cmp::Ordering {
    for ((x, y), (_, desc)) in a.0.iter().zip(b.0).zip(&q.order_by) {
        let o = order(x, y);
        let o = if *desc { o.reverse() } else { o };
        if o != std::cmp::Ordering::Equal {
            return o;
        }
    }
    a.1.cmp(b.1).then(a.2.cmp(&b.2))
}

fn run_select(
    p: &Prepared<'_>,
    mut items: impl Source,
    page: &PageSpec,
    presorted: bool,
) -> Result<(Rows, Option<Cursor>)> {
    let (q, shape, params) = (&p.select, &p.shape, p.params);
    let top = q
        .top
        .as_ref()
        .map(|e| count_of(e, params, "TOP"))
        .transpose()?;
    let (offset, limit) = match &q.offset_limit {
        Some((o, l)) => (
            count_of(o, params, "OFFSET")?,
            Some(count_of(l, params, "LIMIT")?),
        ),
        None => (0, None),
    };
    // The most rows the whole query returns (after OFFSET).
    let total = match (top, limit) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    };
    let aggregate = match &q.projection {
        Projection::Value(e) => e.has_aggregate(),
        Projection::Fields(f) => f.iter().any(|(_, e)| e.has_aggregate()),
        Projection::Star => false,
    };
    let grouped = aggregate || !q.group_by.is_empty();
    let positional = !grouped && !q.distinct;
    let (after, emitted) = match &page.after {
        Some(Cursor::After {
            keys,
            item,
            join,
            emitted,
        }) if positional => (Some((keys.as_slice(), item.as_slice(), *join)), *emitted),
        Some(Cursor::After { .. }) | Some(Cursor::Index(_)) if positional => {
            return Err(bad("the continuation does not belong to this query"));
        }
        _ => (None, 0),
    };
    // Rows still to return, and whether OFFSET still applies (only before the first page).
    let remaining = total.map(|t| t.saturating_sub(emitted));
    let skip = if after.is_none() { offset } else { 0 };
    // Rows that pass the filter (and come after the cursor), with their ORDER BY keys.
    let mut rows: Vec<(Vec<Val>, Row)> = Vec::new();
    // With aggregates, each row is folded into its group as it comes: memory follows the
    // groups, not the rows that match.
    let mut groups = grouped.then(|| Groups::new(q));
    // Without ORDER BY the scan is in result order and can stop once the page is full
    // (one row more tells whether another page follows).
    // How many rows after the cursor the page can use: the rest of TOP/LIMIT, or one more
    // than the page size (to tell whether another page follows), plus what OFFSET skips.
    let needed = match (remaining, page.max) {
        (Some(r), Some(m)) => Some(r.min(m.saturating_add(1))),
        (r, m) => r.or(m.map(|m| m.saturating_add(1))),
    }
    .map(|w| w.saturating_add(skip));
    // Items in result order (no ORDER BY, or an index walk in its order) let the scan stop.
    let early_stop = ((q.order_by.is_empty() || presorted) && positional)
        .then_some(needed)
        .flatten();
    let sorted_bound = (!q.order_by.is_empty() && positional)
        .then_some(needed)
        .flatten();
    // Without JOIN a row is its item: the WHERE runs while the engine lends the item's
    // text, and only the items it keeps are copied.
    let prefilter = q.joins.is_empty();
    let mut scratch = Value::Object(Map::new());
    // The stored texts of the rows kept, one after another (`Row::stored` spans).
    let mut texts: Vec<u8> = Vec::new();
    'items: loop {
        if early_stop.is_some_and(|n| rows.len() >= n) {
            break;
        }
        let next = items.next_with(|key, text, written| {
            let (shape, filter) = match &p.pinned {
                Some(pinned) if written => (&pinned.shape, pinned.filter.as_ref()),
                _ => (shape, q.filter.as_ref()),
            };
            // An item the WHERE drops leaves its map for the next one to reuse.
            shape.parse_into(text, written, &mut scratch)?;
            if prefilter && !passes(filter, &scratch, &[], params) {
                return Ok(None);
            }
            if prefilter && shape.stored_rows && !grouped {
                // The row is the stored text: what it was filtered on is needed only for its
                // ORDER BY keys, so the map stays for the next item too.
                let cx = Ctx {
                    doc: &scratch,
                    vars: &[],
                    params,
                };
                let keys = q.order_by.iter().map(|(e, _)| eval(e, &cx)).collect();
                let row = (
                    ItemKey::from_slice(key),
                    Value::Null,
                    Some(keep_text(&mut texts, text)),
                );
                return Ok(Some((row, Some(keys))));
            }
            let doc = std::mem::replace(&mut scratch, Value::Object(Map::new()));
            let stored = shape.stored_rows.then(|| keep_text(&mut texts, text));
            Ok(Some(((ItemKey::from_slice(key), doc, stored), None)))
        });
        let Some(item) = next else { break };
        let Some(((key, doc, stored), mut item_keys)) = item? else {
            continue;
        };
        for row in expand(key, doc, stored, &q.joins, params) {
            if early_stop.is_some_and(|n| rows.len() >= n) {
                break 'items;
            }
            if !prefilter && !passes(q.filter.as_ref(), &row.doc, &row.vars, params) {
                continue;
            }
            if let Some(groups) = &mut groups {
                groups.add(q, row, params);
                continue;
            }
            let keys: Vec<Val> = item_keys.take().unwrap_or_else(|| {
                let cx = row.cx(params);
                q.order_by.iter().map(|(e, _)| eval(e, &cx)).collect()
            });
            if let Some(after) = after {
                if position_cmp(q, (&keys, &row.item, row.join), after)
                    != std::cmp::Ordering::Greater
                {
                    // Its text was the last one kept.
                    if let Some(at) = &row.stored {
                        texts.truncate(at.start);
                    }
                    continue;
                }
            }
            rows.push((keys, row));
            // ORDER BY with a bound (TOP, LIMIT or a page): keep only the best rows, so memory
            // follows the bound, not the container (sort-and-cut at twice the bound).
            if let Some(b) = sorted_bound {
                if rows.len() >= b.saturating_mul(2).max(64) {
                    rows.sort_by(|(ka, a), (kb, b)| {
                        position_cmp(q, (ka, &a.item, a.join), (kb, &b.item, b.join))
                    });
                    rows.truncate(b);
                    compact_texts(&mut rows, &mut texts);
                }
            }
        }
    }
    if positional {
        if !q.order_by.is_empty() {
            rows.sort_by(|(ka, a), (kb, b)| {
                position_cmp(q, (ka, &a.item, a.join), (kb, &b.item, b.join))
            });
        }
        let mut out = Vec::new();
        let mut last = None;
        let mut more = false;
        let mut count = 0usize;
        let cap = match (remaining, page.max) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (r, m) => r.or(m),
        };
        for (keys, mut row) in rows.into_iter().skip(skip) {
            if cap.is_some_and(|c| count >= c) {
                more = remaining.is_none_or(|r| count < r);
                break;
            }
            if let Some(at) = row.stored.take() {
                out.push(Out::Stored(at));
            } else if let Some(v) = project(q, &row, params) {
                out.push(Out::Value(v));
            }
            count += 1;
            last = Some((keys, row.item, row.join));
        }
        let cursor = match (more, last) {
            (true, Some((keys, item, join))) => Some(Cursor::After {
                keys,
                item: item.to_vec(),
                join,
                emitted: emitted.saturating_add(count),
            }),
            _ => None,
        };
        return Ok((Rows { out, text: texts }, cursor));
    }
    let mut out = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    if let Some(groups) = groups {
        for v in groups.finish(q, params) {
            if q.distinct && !seen.insert(canonical(&v)) {
                continue;
            }
            out.push(v);
        }
    } else {
        if !q.order_by.is_empty() {
            rows.sort_by(|(ka, a), (kb, b)| {
                position_cmp(q, (ka, &a.item, a.join), (kb, &b.item, b.join))
            });
        }
        for (_, row) in rows {
            let Some(v) = project(q, &row, params) else {
                continue;
            };
            if !seen.insert(canonical(&v)) {
                continue;
            }
            out.push(v);
        }
    }
    let mut out: Vec<Value> = out.into_iter().skip(offset).collect();
    if let Some(t) = total {
        out.truncate(t);
    }
    // Paged by index into the whole (recomputed) result.
    let start = match page.after {
        Some(Cursor::Index(i)) => i,
        Some(Cursor::After { .. }) => {
            return Err(bad("the continuation does not belong to this query"));
        }
        None => 0,
    };
    let rest: Vec<Value> = out.into_iter().skip(start).collect();
    match page.max {
        Some(m) if rest.len() > m => {
            let page_rows: Vec<Value> = rest.into_iter().take(m).collect();
            Ok((Rows::values(page_rows), Some(Cursor::Index(start + m))))
        }
        _ => Ok((Rows::values(rest), None)),
    }
}

/// Copies an item's stored text to the end of the page's text buffer; where it lies there.
fn keep_text(texts: &mut Vec<u8>, text: &[u8]) -> Range<usize> {
    let start = texts.len();
    texts.extend_from_slice(text);
    start..texts.len()
}

/// Drops from the text buffer what no row refers to any more (after a sort-and-cut), so that
/// it follows the rows kept, as they do the bound.
fn compact_texts(rows: &mut [(Vec<Val>, Row)], texts: &mut Vec<u8>) {
    let mut kept = Vec::new();
    for (_, row) in rows.iter_mut() {
        if let Some(at) = &mut row.stored {
            let text = texts.get(at.clone()).unwrap_or_default();
            *at = keep_text(&mut kept, text);
        }
    }
    *texts = kept;
}

/// A text form in which values that compare equal (1 and 1.0 included) are identical.
fn canonical(v: &Value) -> String {
    match v {
        // -0.0 equals 0 under `=`, so it is the same value here.
        Value::Number(n) => format!("n{}", n.as_f64().unwrap_or(0.0) + 0.0),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => {
            let mut fields: Vec<(&String, &Value)> = m.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            format!(
                "{{{}}}",
                fields
                    .iter()
                    .map(|(k, v)| format!("{k:?}:{}", canonical(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
        other => other.to_string(),
    }
}

/// The groups of an aggregate query, each folded row by row: its GROUP BY values, its first
/// row (the plain parts of the projection, a GROUP BY value, are evaluated against it) and
/// one running aggregate per aggregate call of the projection.
struct Groups {
    /// The projection's aggregate calls, in the order [`replace_aggs`] meets them.
    calls: Vec<(AggFn, Expr)>,
    list: Vec<(Vec<Val>, Row, Vec<Acc>)>,
    /// Canonical text of the GROUP BY values → index in `list`.
    index: HashMap<String, usize>,
}

impl Groups {
    fn new(q: &Select) -> Self {
        let mut calls = Vec::new();
        for e in projection_exprs(q) {
            replace_aggs(e, &mut |f, arg| {
                calls.push((f, arg.clone()));
                None
            });
        }
        Self {
            calls,
            list: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Folds `row` into its group (undefined is a GROUP BY value of its own).
    fn add(&mut self, q: &Select, row: Row, params: &HashMap<String, Value>) {
        let (key, values) = {
            let cx = row.cx(params);
            let key: Vec<Val> = q.group_by.iter().map(|e| eval(e, &cx)).collect();
            let values: Vec<Val> = self.calls.iter().map(|(_, arg)| eval(arg, &cx)).collect();
            (key, values)
        };
        let text = key
            .iter()
            .map(|v| v.as_ref().map_or_else(|| "~".to_string(), canonical))
            .collect::<Vec<_>>()
            .join("|");
        let i = match self.index.get(&text) {
            Some(&i) => i,
            None => {
                self.index.insert(text, self.list.len());
                let accs = self.calls.iter().map(|(f, _)| Acc::new(*f)).collect();
                self.list.push((key, row, accs));
                self.list.len() - 1
            }
        };
        let accs = &mut self.list[i].2;
        for (((f, _), acc), v) in self.calls.iter().zip(accs.iter_mut()).zip(values) {
            acc.add(*f, v);
        }
    }

    /// One value per group in GROUP BY order (none dropped but undefined projections); with
    /// no GROUP BY and no row, the aggregates over nothing (`COUNT` is 0).
    fn finish(mut self, q: &Select, params: &HashMap<String, Value>) -> Vec<Value> {
        if self.list.is_empty() && q.group_by.is_empty() {
            let accs = self.calls.iter().map(|(f, _)| Acc::new(*f)).collect();
            self.list.push((Vec::new(), Row::empty(), accs));
        }
        self.list.sort_by(|(a, ..), (b, ..)| {
            a.iter()
                .zip(b)
                .map(|(x, y)| order(x, y))
                .find(|o| *o != std::cmp::Ordering::Equal)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut out = Vec::new();
        for (_, first, accs) in self.list {
            let mut results = accs.iter().zip(&self.calls).map(|(a, (f, _))| a.result(*f));
            let mut at = |e: &Expr| {
                let replaced = replace_aggs(e, &mut |_, _| results.next().flatten());
                eval(&replaced, &first.cx(params))
            };
            let v = match &q.projection {
                Projection::Value(e) => at(e),
                Projection::Fields(fields) => {
                    let mut m = Map::new();
                    for (name, e) in fields {
                        if let Some(v) = at(e) {
                            m.insert(name.clone(), v);
                        }
                    }
                    Some(Value::Object(m))
                }
                Projection::Star => None,
            };
            if let Some(v) = v {
                out.push(v);
            }
        }
        out
    }
}

/// The projection's expressions, in order.
fn projection_exprs(q: &Select) -> Vec<&Expr> {
    match &q.projection {
        Projection::Value(e) => vec![e],
        Projection::Fields(fields) => fields.iter().map(|(_, e)| e).collect(),
        Projection::Star => Vec::new(),
    }
}

/// `e` with each aggregate call replaced by the literal `f` gives for it, calls met in a fixed
/// order (the one [`Groups`] relies on to pair calls with their running aggregates).
fn replace_aggs(e: &Expr, f: &mut dyn FnMut(AggFn, &Expr) -> Val) -> Expr {
    let mut r = |x: &Expr| Box::new(replace_aggs(x, f));
    match e {
        Expr::Agg(g, arg) => Expr::Lit(f(*g, arg)),
        Expr::Prop(x, n) => Expr::Prop(r(x), n.clone()),
        Expr::Index(a, b) => {
            let a = r(a);
            Expr::Index(a, r(b))
        }
        Expr::Unary(op, x) => Expr::Unary(*op, r(x)),
        Expr::Binary(op, a, b) => {
            let a = r(a);
            Expr::Binary(*op, a, r(b))
        }
        Expr::Ternary(a, b, c) => {
            let a = r(a);
            let b = r(b);
            Expr::Ternary(a, b, r(c))
        }
        Expr::In(x, list, not) => {
            let x = r(x);
            let list = list.iter().map(|a| replace_aggs(a, f)).collect();
            Expr::In(x, list, *not)
        }
        Expr::Between(a, b, c, not) => {
            let a = r(a);
            let b = r(b);
            Expr::Between(a, b, r(c), *not)
        }
        Expr::Like(a, b, c, not) => {
            let a = r(a);
            let b = r(b);
            Expr::Like(a, b, c.as_deref().map(&mut r), *not)
        }
        Expr::Call(n, args) => {
            let args = args.iter().map(|a| replace_aggs(a, f)).collect();
            Expr::Call(n.clone(), args)
        }
        Expr::Array(items) => Expr::Array(items.iter().map(|a| replace_aggs(a, f)).collect()),
        Expr::Object(fields) => Expr::Object(
            fields
                .iter()
                .map(|(k, a)| (k.clone(), replace_aggs(a, f)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One aggregate over a group's rows, running: `COUNT` counts defined values; `SUM` and `AVG`
/// are undefined if any defined value is not a number (`SUM` of nothing is 0); `MIN`/`MAX`
/// follow the cross-type order over the defined values (the first of equal minima, the last
/// of equal maxima, as `Iterator::min_by`/`max_by` pick them).
enum Acc {
    Count(usize),
    Sum {
        sum: f64,
        n: usize,
        not_number: bool,
    },
    Best(Option<Value>),
}

impl Acc {
    fn new(f: AggFn) -> Self {
        match f {
            AggFn::Count => Acc::Count(0),
            AggFn::Sum | AggFn::Avg => Acc::Sum {
                sum: 0.0,
                n: 0,
                not_number: false,
            },
            AggFn::Min | AggFn::Max => Acc::Best(None),
        }
    }

    fn add(&mut self, f: AggFn, v: Val) {
        let Some(v) = v else { return };
        match self {
            Acc::Count(n) => *n += 1,
            Acc::Sum { sum, n, not_number } => match v.as_f64().filter(|_| v.is_number()) {
                Some(x) if !*not_number => {
                    *sum += x;
                    *n += 1;
                }
                Some(_) => {}
                None => *not_number = true,
            },
            Acc::Best(best) => {
                let new = Some(v);
                let take = best.is_none() || {
                    let o = order(&new, best);
                    if f == AggFn::Min {
                        o == std::cmp::Ordering::Less
                    } else {
                        o != std::cmp::Ordering::Less
                    }
                };
                if take {
                    *best = new;
                }
            }
        }
    }

    fn result(&self, f: AggFn) -> Val {
        match self {
            Acc::Count(n) => Some(Value::from(*n)),
            Acc::Sum {
                not_number: true, ..
            } => None,
            Acc::Sum { sum, n, .. } => match f {
                AggFn::Sum => Some(parser::num(*sum)),
                _ if *n == 0 => None,
                _ => Some(parser::num(*sum / *n as f64)),
            },
            Acc::Best(best) => best.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::eval::deep_eq;
    use super::*;
    use serde_json::json;

    fn q(text: &str, docs: &[Value]) -> Result<Vec<Value>> {
        run(&Query::new(text), docs.iter().cloned().map(Ok))
    }

    /// Aggregates folded row by row give what they give over the collected rows: several
    /// calls in one projection each get their own result, `MIN` keeps the first of equal
    /// minima and `MAX` the last of equal maxima (1 and 1.0 print apart), a non-number makes
    /// `SUM`/`AVG` undefined wherever it comes, and a group's plain parts come from its first
    /// row.
    #[test]
    fn aggregates_fold_each_group_in_row_order() {
        let docs = [
            json!({"g": "x", "a": 1.0, "b": 5}),
            json!({"g": "y", "a": 2}),
            json!({"g": "x", "a": 1, "b": "five"}),
            json!({"g": "x", "a": 3.0, "b": 6}),
            json!({"g": "y", "a": 2.0}),
            json!({"a": 7}),
        ];
        let out = q(
            "SELECT c.g, COUNT(1) AS n, MIN(c.a) AS lo, MAX(c.a) AS hi, SUM(c.b) AS sb, \
             AVG(c.a) * 2 AS avg2, [COUNT(c.b), MAX(c.b)] AS bs FROM c GROUP BY c.g",
            &docs,
        )
        .expect("query");
        let text: Vec<String> = out.iter().map(Value::to_string).collect();
        assert_eq!(
            text,
            [
                r#"{"avg2":14,"bs":[0,null],"hi":7,"lo":7,"n":1,"sb":0}"#,
                r#"{"avg2":3.3333333333333335,"bs":[3,"five"],"g":"x","hi":3.0,"lo":1.0,"n":3}"#,
                r#"{"avg2":4,"bs":[0,null],"g":"y","hi":2.0,"lo":2,"n":2,"sb":0}"#,
            ]
        );
        let none = q("SELECT VALUE [COUNT(1), SUM(c.a), AVG(c.a)] FROM c", &[]).expect("query");
        assert_eq!(none, [json!([0, 0, null])]);
    }

    /// An aggregate inside `IN`, `BETWEEN` or `LIKE` is computed like any other (it was left
    /// in place and evaluated to undefined, dropping the row or the field).
    #[test]
    fn aggregates_inside_in_between_and_like_are_computed() {
        let docs = [
            json!({"g": "x", "a": 1, "s": "ab"}),
            json!({"g": "x", "a": 4, "s": "b"}),
            json!({"g": "y", "a": 9, "s": "ac"}),
        ];
        let got = |text: &str| q(text, &docs).expect("query");
        assert_eq!(got("SELECT VALUE COUNT(1) IN (2, 3) FROM c"), [json!(true)]);
        assert_eq!(
            got("SELECT c.g, MAX(c.a) BETWEEN 1 AND 5 AS ok FROM c GROUP BY c.g"),
            [
                json!({"g": "x", "ok": true}),
                json!({"g": "y", "ok": false})
            ]
        );
        assert_eq!(
            got("SELECT VALUE [MIN(c.s) LIKE 'a%', MAX(c.s) NOT LIKE 'a%'] FROM c"),
            [json!([true, true])]
        );
    }

    #[test]
    fn distinct_treats_1_and_1_0_alike() {
        let docs = [json!({"a": 1}), json!({"a": 1.0}), json!({"a": 2})];
        let out = q("SELECT DISTINCT VALUE c.a FROM c", &docs).expect("query");
        assert_eq!(out.len(), 2);
        assert!(deep_eq(&out[0], &json!(1)));
    }

    #[test]
    fn unbound_parameter_is_a_400() {
        let e = q("SELECT * FROM c WHERE c.a = @x", &[]).expect_err("unbound");
        assert_eq!(e.status_code(), 400);
    }
}
