//! Planned writes: a read-modify-write whose ops are computed under the log mutex.
//!
//! The document layer's patch and transactional batch read an item, change it and write it
//! back; another writer must not slip in between. [`Keyspace::write_planned`] runs a plan
//! closure inside the write path (`Inner::apply_planned`), after the log mutex is taken and
//! before anything is appended: the plan reads live versions through a [`KeyspaceView`] and
//! returns the ops to apply, which are then appended and applied exactly like a
//! [`WriteBatch`](super::WriteBatch) (one log batch when there is more than one op: all or
//! nothing for a crash and for readers). Nothing else can write while the plan runs, so what it
//! read is what its ops replace.
//!
//! Invariants: the plan runs with the log mutex held and no keyspace lock held (a view takes
//! a keyspace's read lock per lookup, in the engine's lock order); an empty plan writes nothing.

use std::borrow::Cow;
use std::sync::Arc;

use super::write::{Current, Existed, Op};
use super::{Inner, Keyspace};
use crate::error::Result;
use crate::keydir::KeyspaceCore;
use crate::ttl::ItemTtl;

/// What a plan sees of the store: live versions as of now, under the log mutex.
pub(crate) struct View<'a> {
    inner: &'a Inner,
    now_ms: u64,
    /// The sequence number the first record of this write will get (the batch header's, when
    /// the write is a batch).
    next_seq: u64,
}

impl<'a> View<'a> {
    pub(super) fn new(inner: &'a Inner, now_ms: u64, next_seq: u64) -> Self {
        Self {
            inner,
            now_ms,
            next_seq,
        }
    }

    /// The live version of `key` in `ks` at the write's instant.
    pub(crate) fn current<'k>(&'k self, ks: &KeyspaceCore, key: &'k [u8]) -> Current<'k> {
        let found = {
            let st = ks.state.read();
            self.inner.lookup(&st, key, self.now_ms / 1000)
        };
        Current {
            inner: self.inner,
            key,
            found,
        }
    }
}

/// One write a plan returns: a put of `(value, own ttl)`, or a delete (`None`).
pub(crate) type PlannedOp = (Vec<u8>, Option<(Vec<u8>, ItemTtl)>);

/// A plan's view of one keyspace.
pub(crate) struct KeyspaceView<'v, 'a> {
    view: &'v View<'a>,
    core: &'v KeyspaceCore,
}

impl KeyspaceView<'_, '_> {
    /// The write's instant (Unix ms), the same for every op of the plan.
    pub(crate) fn now_ms(&self) -> u64 {
        self.view.now_ms
    }

    /// The live value of `key`, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.view.current(self.core, key).value()
    }

    /// The live version of `key`, for a compare-and-write check.
    pub(crate) fn current<'k>(&'k self, key: &'k [u8]) -> Current<'k> {
        self.view.current(self.core, key)
    }

    /// True if `key` has a live version (its value is not read).
    pub(crate) fn exists(&self, key: &[u8]) -> bool {
        self.view.current(self.core, key).exists()
    }

    /// The sequence number of the first record this write appends: with more than one op
    /// (one log batch) the batch header's, so op `i` gets `next_seq() + 1 + i`.
    pub(crate) fn next_seq(&self) -> u64 {
        self.view.next_seq
    }
}

/// One write of [`Keyspace::write_planned_pair`]: on the first keyspace (`false`) or the
/// second (`true`).
pub(crate) type PairOp = (bool, PlannedOp);

impl Keyspace {
    /// As [`Keyspace::write_planned`] over two keyspaces of one store: the plan sees both and
    /// its ops (each naming its keyspace) are one log batch, all or nothing for a crash and
    /// for readers (the change feed's history is written this way with its item). `self`'s
    /// puts are document items (record flag `DOC`), `other`'s are not.
    pub(crate) fn write_planned_pair(
        &self,
        other: &Keyspace,
        plan: impl FnOnce(&KeyspaceView<'_, '_>, &KeyspaceView<'_, '_>) -> Result<Vec<PairOp>>,
    ) -> Result<Existed> {
        self.check_alive()?;
        other.check_alive()?;
        let (a, b) = (self.core(), other.core());
        self.store().inner.apply_planned(true, None, |view| {
            let ops = plan(
                &KeyspaceView { view, core: a },
                &KeyspaceView { view, core: b },
            )?;
            Ok(Cow::Owned(
                ops.into_iter()
                    .map(|(second, (key, put))| Op {
                        ks: Arc::clone(if second { b } else { a }),
                        key,
                        put,
                        doc: !second,
                    })
                    .collect(),
            ))
        })
    }

    /// An atomic read-modify-write of this keyspace: `plan` runs under the log mutex at the
    /// write's instant, reads what it needs through the view and returns the ops to apply (in
    /// order; later ops see earlier ones). More than one op is written as one log batch. An
    /// error from `plan` writes nothing. `doc`: the puts' values are document items as the
    /// document layer serializes them (record flag `DOC`; see `format::record::FLAG_DOC`).
    pub(crate) fn write_planned(
        &self,
        doc: bool,
        plan: impl FnOnce(&KeyspaceView<'_, '_>) -> Result<Vec<PlannedOp>>,
    ) -> Result<Existed> {
        self.check_alive()?;
        let core = self.core();
        self.store().inner.apply_planned(true, None, |view| {
            let ops = plan(&KeyspaceView { view, core })?;
            Ok(Cow::Owned(
                ops.into_iter()
                    .map(|(key, put)| Op {
                        ks: Arc::clone(core),
                        key,
                        put,
                        doc,
                    })
                    .collect(),
            ))
        })
    }
}
