//! What of each item a query reads, and the form its rows leave the runner in.
//!
//! Most queries touch a few top-level properties (`c.status`, `c.customer.city`): for those
//! an item is read with [`stored::parse_fields`], which checks the whole text (or, for an item
//! the document layer wrote, reads it only up to the last property named) but builds values
//! only for the properties named, and every expression of the query is evaluated on
//! that partial item. This is exact because an expression can reach the item only through
//! `c.<name>…` paths (a `Prop` on `Root`); a query that uses `c` itself anywhere else (`SELECT
//! VALUE c`, `IS_DEFINED(c)`, `c[@p]`) reads whole items. `SELECT *` without JOIN or DISTINCT
//! returns the stored text itself ([`Out::Stored`], a span of its page's [`Rows`] buffer): the
//! caller parses it once, straight into its own type, instead of the runner building a tree
//! and the caller converting it.

use std::collections::BTreeSet;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ast::{Expr, Projection, Select};
use crate::doc::stored;
use crate::error::{Error, Result};

/// How the runner reads each item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reads {
    /// The whole item.
    Whole,
    /// Only these top-level properties (the rest is checked, not built).
    Fields(Vec<String>),
}

/// What a query needs of each item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    pub(crate) reads: Reads,
    /// Rows are the stored items themselves (`SELECT *`, no JOIN, no DISTINCT).
    pub(crate) stored_rows: bool,
}

impl Shape {
    pub(crate) fn of(q: &Select) -> Self {
        let stored_rows =
            matches!(q.projection, Projection::Star) && q.joins.is_empty() && !q.distinct;
        let mut names = BTreeSet::new();
        let mut exprs: Vec<&Expr> = Vec::new();
        exprs.extend(q.filter.iter());
        exprs.extend(q.order_by.iter().map(|(e, _)| e));
        exprs.extend(q.group_by.iter());
        exprs.extend(q.joins.iter().map(|(_, e)| e));
        let mut whole = false;
        match &q.projection {
            Projection::Star => whole |= !stored_rows,
            Projection::Value(e) => exprs.push(e),
            Projection::Fields(fields) => exprs.extend(fields.iter().map(|(_, e)| e)),
        }
        whole |= !exprs.into_iter().all(|e| fields_of(e, &mut names));
        Self {
            reads: if whole {
                Reads::Whole
            } else {
                Reads::Fields(names.into_iter().collect())
            },
            stored_rows,
        }
    }

    /// The item as the query's expressions see it, into `scratch`: whole, or only the
    /// properties they read (`doc`: the record carries the `DOC` flag, so the reading may
    /// stop once it has them). `scratch` is the previous item's, its map reused (see
    /// [`stored::parse_fields_into`]).
    pub(crate) fn parse_into(&self, bytes: &[u8], doc: bool, scratch: &mut Value) -> Result<()> {
        match &self.reads {
            Reads::Whole => stored::parse(bytes).map(|v| *scratch = v),
            Reads::Fields(names) => stored::parse_fields_into(bytes, names, doc, scratch),
        }
        .map_err(not_json)
    }
}

fn not_json(e: serde_json::Error) -> Error {
    Error::BadRequest(format!("stored item is not JSON: {e}"))
}

/// Adds to `out` the top-level property names `e` reads from the item; false if `e` uses the
/// item other than through such a property.
fn fields_of(e: &Expr, out: &mut BTreeSet<String>) -> bool {
    match e {
        Expr::Prop(base, name) if matches!(base.as_ref(), Expr::Root) => {
            out.insert(name.clone());
            true
        }
        Expr::Root => false,
        other => other.children().into_iter().all(|c| fields_of(c, out)),
    }
}

/// One result row: a value the runner built, or a stored item's text returned as it is (where
/// it lies in its page's [`Rows`] buffer).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Out {
    Value(Value),
    Stored(Range<usize>),
}

/// A page's result rows. The stored texts they return lie one after another in one buffer:
/// a row costs no allocation of its own (an indexed filter returning 10,000 items made and
/// freed 10,000 of about 300 bytes), and the caller parses the texts in the order they were
/// copied.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rows {
    pub(super) out: Vec<Out>,
    pub(super) text: Vec<u8>,
}

impl Rows {
    /// Rows of built values only.
    pub(crate) fn values(values: Vec<Value>) -> Self {
        Self {
            out: values.into_iter().map(Out::Value).collect(),
            text: Vec::new(),
        }
    }

    /// The first row when it is a built value (an aggregate's result).
    pub(crate) fn first_value(&self) -> Option<&Value> {
        match self.out.first() {
            Some(Out::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// The rows, each converted to `T` when it is taken (a stored item is parsed straight
    /// into it).
    pub(crate) fn into_typed<T: DeserializeOwned>(self) -> Typed<T> {
        Typed {
            out: self.out.into_iter(),
            text: self.text,
            _t: std::marker::PhantomData,
        }
    }
}

/// The rows of a page converted to `T` one at a time ([`Rows::into_typed`]).
#[derive(Debug)]
pub(crate) struct Typed<T> {
    out: std::vec::IntoIter<Out>,
    text: Vec<u8>,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Iterator for Typed<T> {
    type Item = Result<T>;

    /// The next row as `T` (400 if it does not fit).
    fn next(&mut self) -> Option<Result<T>> {
        let row = match self.out.next()? {
            Out::Value(v) => serde_json::from_value(v),
            Out::Stored(at) => stored::parse(self.text.get(at).unwrap_or_default()),
        };
        Some(row.map_err(|e| {
            Error::BadRequest(format!("a query row does not fit the requested type: {e}"))
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.out.size_hint()
    }
}

/// Where a query's items come from: live items' engine keys and stored text, in key order,
/// one `now`. The engine's readers lend the text in place (`next_with`), so an item the WHERE
/// drops is never copied.
pub(crate) trait Source {
    /// The next item, given to `f` with its key, its text and whether its record carries the
    /// `DOC` flag (the document layer wrote the text: see [`Shape::parse_into`]).
    fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> Result<R>,
    ) -> Option<Result<R>>;
}

impl Source for crate::engine::Iter {
    fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> Result<R>,
    ) -> Option<Result<R>> {
        crate::engine::Iter::next_with_doc(self, f).map(|r| r.and_then(|x| x))
    }
}

impl Source for crate::engine::Picked {
    fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> Result<R>,
    ) -> Option<Result<R>> {
        crate::engine::Picked::next_with(self, f).map(|r| r.and_then(|x| x))
    }
}

/// Items held as owned pairs (a point read, tests).
pub(crate) struct Owned<I>(pub(crate) I);

impl<I: Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>> Source for Owned<I> {
    fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> Result<R>,
    ) -> Option<Result<R>> {
        self.0.next().map(|r| r.and_then(|(k, v)| f(&k, &v, false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::query::parser;

    fn shape(text: &str) -> Shape {
        Shape::of(&parser::parse(text).expect("parse"))
    }

    fn fields(names: &[&str]) -> Reads {
        Reads::Fields(names.iter().map(|n| (*n).to_string()).collect())
    }

    #[test]
    fn reads_only_the_properties_a_query_names() {
        let s = shape("SELECT * FROM c WHERE c.b = 1 AND c.a.x > 2 ORDER BY c.d");
        assert_eq!(s.reads, fields(&["a", "b", "d"]));
        assert!(s.stored_rows);
        let s = shape("SELECT c.id, t FROM c JOIN t IN c.tags WHERE STARTSWITH(c.n, 'x')");
        assert_eq!(s.reads, fields(&["id", "n", "tags"]));
        assert!(!s.stored_rows);
        let s = shape("SELECT VALUE COUNT(1) FROM c GROUP BY c.g");
        assert_eq!(s.reads, fields(&["g"]));
        assert_eq!(shape("SELECT * FROM c").reads, fields(&[]));
    }

    #[test]
    fn reads_whole_items_when_the_item_itself_is_used() {
        for text in [
            "SELECT VALUE c FROM c",
            "SELECT * FROM c WHERE IS_DEFINED(c)",
            "SELECT * FROM c WHERE c[@p] = 1",
            "SELECT DISTINCT * FROM c",
            "SELECT * FROM c JOIN t IN c.tags",
            "SELECT VALUE {a: c} FROM c",
        ] {
            assert_eq!(shape(text).reads, Reads::Whole, "{text}");
        }
    }
}
