//! `ORDER BY` served by a secondary index: the items come in the order of their value at
//! the ordered path, so the runner can stop as soon as `TOP`/`LIMIT`/the page is full.
//!
//! Used only when a top-level `AND` term of the WHERE on the same path chose the index
//! (`container/query.rs`): every row the query can return then has a scalar there that lies
//! inside the probe's ranges, so it holds an entry in one of the walked groups, and rows
//! with an undefined, array or object value (which sort outside the scalars and are not
//! indexed) cannot be among the results.
//!
//! The walk takes a few groups (one per indexed value, in value order, descending for
//! `DESC`) per hold of the index lock, the first ones with the reader's registration; a
//! group's item keys are sorted when it is taken, which gives the runner's tie order (item key
//! ascending, in either direction). An entry never decides a row: each item read is placed by
//! the value it holds now. An item met under an entry whose value lies before the item's
//! current value is skipped there, never returned out of order: it is returned where the
//! index holds its current value, if the walk gets there; an item is returned at most once.
//! An item that is not written while the query runs keeps its entry at its value, so it is
//! met exactly there, once. An item written while the walk runs is met at its old or its new
//! value, or not at all: if it moved to a value the walk had passed, or if a transactional
//! batch moved it after the walk began (the reader shows the item as it was before the
//! batch, and once the batch settles the index no longer holds that value): the same as a
//! continued page misses or repeats an item changed in between. Returning it where it was
//! met would put a row out of order, and a walk that stops early would then leave out
//! unchanged items that belong before it.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

use super::shape::Source;
use crate::doc::index::{encode, Group, IndexSet, Walk};
use crate::doc::stored;
use crate::engine::{KeyList, Picked};
use crate::error::{Error, Result};

/// The items of an index walk in value order (see the module note).
pub(crate) struct Ordered<'a> {
    set: &'a IndexSet,
    walk: Walk,
    keep: &'a dyn Fn(&[u8]) -> bool,
    picked: Picked,
    /// Groups taken and not yet read, and the value of the group being read.
    groups: VecDeque<Group>,
    current: Option<Box<[u8]>>,
    path: Vec<String>,
    emitted: HashSet<Vec<u8>>,
}

impl<'a> Ordered<'a> {
    pub(crate) fn new(
        set: &'a IndexSet,
        (picked, walk, first): (Picked, Walk, Vec<Group>),
        keep: &'a dyn Fn(&[u8]) -> bool,
        path: Vec<String>,
    ) -> Self {
        Self {
            set,
            walk,
            keep,
            picked,
            groups: first.into(),
            current: None,
            path,
            emitted: HashSet::new(),
        }
    }

    /// Moves the reader to the next group; false when none is left.
    fn advance(&mut self) -> bool {
        if self.groups.is_empty() {
            self.groups = self.walk.more(self.set, self.keep).into();
        }
        let Some((value, keys)) = self.groups.pop_front() else {
            return false;
        };
        let mut keys: KeyList = keys.iter().map(|k| &**k).collect();
        keys.sort_dedup();
        self.picked.set_keys(keys);
        self.current = Some(value);
        true
    }
}

/// The encoded scalar at `path` in the item `text`, if there is one.
fn value_at(text: &[u8], path: &[String], written: bool) -> Result<Option<Vec<u8>>> {
    let Some(first) = path.first() else {
        return Ok(None);
    };
    let doc = stored::parse_fields(text, std::slice::from_ref(first), written)
        .map_err(|e| Error::BadRequest(format!("stored item is not JSON: {e}")))?;
    let found = path.iter().try_fold(&doc, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        _ => None,
    });
    let mut out = Vec::new();
    Ok(found.filter(|v| encode::encode(v, &mut out)).map(|_| out))
}

impl Source for Ordered<'_> {
    fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> Result<R>,
    ) -> Option<Result<R>> {
        let mut f = Some(f);
        loop {
            if self.current.is_none() && !self.advance() {
                return None;
            }
            let Self {
                walk,
                picked,
                current,
                path,
                emitted,
                ..
            } = self;
            let here = current.as_deref().unwrap_or_default();
            let step = picked.next_with(|key, text, written| -> Result<Option<R>> {
                if emitted.contains(key) {
                    return Ok(None);
                }
                if let Some(now) = value_at(text, path, written)? {
                    if walk.is_after(&now, here) {
                        // Returned at its own value if the index holds it there, else not at
                        // all: never out of order.
                        return Ok(None);
                    }
                }
                emitted.insert(key.to_vec());
                match f.take() {
                    Some(f) => f(key, text, written).map(Some),
                    None => Ok(None),
                }
            });
            match step {
                Some(Ok(Ok(Some(r)))) => return Some(Ok(r)),
                Some(Ok(Ok(None))) => {}
                Some(Ok(Err(e)) | Err(e)) => return Some(Err(e)),
                None => {
                    if !self.advance() {
                        return None;
                    }
                }
            }
        }
    }
}
