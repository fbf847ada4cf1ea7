//! `ORDER BY` served by a secondary index: the items come in the order of their value at
//! the ordered path, so the runner can stop as soon as `TOP`/`LIMIT`/the page is full.
//!
//! Used only when a top-level `AND` term of the WHERE on the same path chose the index
//! (`container/query.rs`): every row the query can return then has a scalar there that lies
//! inside the probe's ranges, so it holds an entry in one of the walked groups, and rows
//! with an undefined, array or object value (which sort outside the scalars and are not
//! indexed) cannot be among the results.
//!
//! The groups (one per indexed value, in value order, descending for `DESC`) are taken with
//! the reader's registration under one hold of the index lock; a group's item keys are sorted
//! when the walk reaches it, which gives the runner's tie order (item key ascending, in either
//! direction). An entry never decides a row: each item read is placed by the value it holds
//! now. An item whose value is another walked group's (a stale entry of a superseded
//! version) is skipped here and returned there; an item is returned at most once. An item
//! written after the query started may hold a value no group had when the groups were taken:
//! it is returned where it was met (its row still carries its own ORDER BY value, and the WHERE
//! still decides it), which is the one place this order can be off, and only for items written
//! while the query runs.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::shape::Source;
use crate::doc::index::{encode, Group};
use crate::doc::stored;
use crate::engine::Picked;
use crate::error::{Error, Result};

/// The items of an index walk in value order (see the module note).
pub(crate) struct Ordered {
    picked: Picked,
    groups: Vec<Group>,
    /// Which group holds a value.
    at: HashMap<Box<[u8]>, usize>,
    /// Whether a group's keys are sorted (and distinct) yet.
    sorted: Vec<bool>,
    /// The group being read.
    current: Option<usize>,
    path: Vec<String>,
    emitted: HashSet<Vec<u8>>,
}

impl Ordered {
    pub(crate) fn new(picked: Picked, groups: Vec<Group>, path: Vec<String>) -> Self {
        let at = groups
            .iter()
            .enumerate()
            .map(|(i, (v, _))| (v.clone(), i))
            .collect();
        let sorted = vec![false; groups.len()];
        Self {
            picked,
            groups,
            at,
            sorted,
            current: None,
            path,
            emitted: HashSet::new(),
        }
    }

    /// Moves the reader to the next group; false when none is left.
    fn advance(&mut self) -> bool {
        let next = self.current.map_or(0, |c| c + 1);
        let Some((_, keys)) = self.groups.get_mut(next) else {
            return false;
        };
        if !self.sorted[next] {
            keys.sort_unstable();
            keys.dedup();
            self.sorted[next] = true;
        }
        self.picked.set_keys(keys.iter().map(|k| k.to_vec()).collect());
        self.current = Some(next);
        true
    }
}

/// Sorts group `i` if needed and tells whether it holds `key`.
fn holds(groups: &mut [Group], sorted: &mut [bool], i: usize, key: &[u8]) -> bool {
    let Some((_, keys)) = groups.get_mut(i) else {
        return false;
    };
    if !sorted[i] {
        keys.sort_unstable();
        keys.dedup();
        sorted[i] = true;
    }
    keys.binary_search_by(|k| (**k).cmp(key)).is_ok()
}

/// The encoded scalar at `path` in the item `text`, if there is one.
fn value_at(text: &[u8], path: &[String]) -> Result<Option<Vec<u8>>> {
    let Some(first) = path.first() else {
        return Ok(None);
    };
    let doc = stored::parse_fields(text, std::slice::from_ref(first))
        .map_err(|e| Error::BadRequest(format!("stored item is not JSON: {e}")))?;
    let found = path.iter().try_fold(&doc, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        _ => None,
    });
    let mut out = Vec::new();
    Ok(found.filter(|v| encode::encode(v, &mut out)).map(|_| out))
}

impl Source for Ordered {
    fn next_with<R>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> Result<R>) -> Option<Result<R>> {
        let mut f = Some(f);
        loop {
            if self.current.is_none() && !self.advance() {
                return None;
            }
            let Self {
                picked,
                groups,
                at,
                sorted,
                current,
                path,
                emitted,
            } = self;
            let here = current.unwrap_or(0);
            let step = picked.next_with(|key, text| -> Result<Option<R>> {
                if emitted.contains(key) {
                    return Ok(None);
                }
                if let Some(enc) = value_at(text, path)? {
                    let elsewhere = at
                        .get(enc.as_slice())
                        .copied()
                        .filter(|&i| i != here);
                    if let Some(i) = elsewhere {
                        if holds(groups, sorted, i, key) {
                            return Ok(None); // returned in its own group
                        }
                    }
                }
                emitted.insert(key.to_vec());
                match f.take() {
                    Some(f) => f(key, text).map(Some),
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
