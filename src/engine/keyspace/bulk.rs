//! Create-only multi-key writes: the engine side of the document layer's bulk create
//! (`Container::create_items`, used by `ebbdb import`).
//!
//! Invariant: the liveness check of every key and the append of the whole batch happen under
//! one hold of the log mutex, at the one instant `at_ms` that the caller also stamped into the
//! values, so "none of these keys is live" is true at the moment the batch is written, and the
//! batch is written all or nothing (one batch header, as for [`WriteBatch`](super::WriteBatch)).

use std::sync::Arc;

use super::super::write::{Current, Op};
use super::Keyspace;
use crate::error::{Error, Result};
use crate::ttl::ItemTtl;

impl Keyspace {
    /// Writes every `(key, value, ttl)` of `puts` as one atomic batch at `at_ms` (taken from
    /// `Store::now_unix_millis` and stamped into the values), but only if none of the keys
    /// is live at that instant. The values are document items (record flag `DOC`). Returns
    /// the indexes (into `puts`) of the keys that are live; when it is non-empty nothing was
    /// written. The caller makes the keys distinct.
    /// `on_free` runs under the log mutex once every key is known to be free, just before the
    /// batch is appended (the document layer stages its index entries there).
    ///
    /// # Errors
    /// As [`Keyspace::put`]: a deleted keyspace, a key or value over its limit, a poisoned
    /// store, I/O errors. Nothing is written then either.
    pub(crate) fn create_all(
        &self,
        puts: Vec<(Vec<u8>, Vec<u8>, ItemTtl)>,
        at_ms: u64,
        on_free: impl FnOnce(),
    ) -> Result<Vec<usize>> {
        let ops: Vec<Op> = puts
            .into_iter()
            .map(|(key, value, ttl)| Op {
                ks: Arc::clone(self.core()),
                key,
                put: Some((value, ttl)),
                doc: true,
            })
            .collect();
        let now = at_ms / 1000;
        let mut live = Vec::new();
        let check = |_: &Current<'_>| {
            // Under the log mutex (lock order: log, then a keyspace's state). The state's lock
            // is let go before `on_free`: the document layer's staging takes its index queue,
            // which a reader holds while it waits for this lock, and a waiting reaper (a
            // writer of the lock) makes new readers wait; holding both deadlocked.
            {
                let st = self.core().state.read();
                live.extend(
                    ops.iter()
                        .enumerate()
                        .filter(|(_, op)| st.live(&op.key, now).is_some())
                        .map(|(i, _)| i),
                );
            }
            if live.is_empty() {
                on_free();
                Ok(())
            } else {
                Err(Error::Conflict("a key of the batch is live".into()))
            }
        };
        match self
            .inner()
            .apply_checked(&ops, true, Some(check), Some(at_ms))
        {
            Ok(_) => Ok(Vec::new()),
            Err(Error::Conflict(_)) if !live.is_empty() => Ok(live),
            Err(e) => Err(e),
        }
    }
}
