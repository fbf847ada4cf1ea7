//! The read path: from a key-directory entry to the value bytes.
//!
//! A reader finds the entry and the segment holding it under the keyspace's read lock (so a
//! concurrent merge cannot retire the segment between the two), then copies the record out
//! without any lock for sealed segments (mapping) or the flushed part of the active segment
//! (`pread`); a record still in the active segment's unflushed tail is copied under the tail's
//! own lock (never the log mutex, which a catalogue change holds across fsyncs). Every
//! record read is checked: CRC, and that it is the key that was asked for.

use std::sync::Arc;

use super::Inner;
use crate::error::{Error, Result};
use crate::format::record::{self, Kind, FLAG_DOC};
use crate::keydir::{Entry, KeyspaceState};
use crate::log::active::ActiveFile;
use crate::log::segment::Segment;

/// Cache lines a lookup prefetches from a record's start: a 16-byte key and a 100-byte value
/// behind a 20-byte header span three lines at most offsets.
const RECORD_LINES: usize = 3;

/// Where an entry's bytes live.
#[derive(Debug, Clone)]
pub(crate) enum SegRef {
    Sealed(Arc<Segment>),
    Active(Arc<ActiveFile>),
}

impl SegRef {
    /// The segment's file id.
    fn id(&self) -> u32 {
        match self {
            SegRef::Sealed(s) => s.id,
            SegRef::Active(a) => a.id,
        }
    }

    /// Starts loading the first cache lines from `offset` on into the caches, without waiting
    /// (`mmap::prefetch_addr`: nothing is read, no address faults). Nothing where `offset` is
    /// not mapped.
    fn prefetch_at(&self, offset: u32) {
        if let Some(first) = self.mapped(offset, 1) {
            let at = first.as_ptr().addr();
            for line in 0..RECORD_LINES {
                crate::log::mmap::prefetch_addr(at + line * 64);
            }
        }
    }

    /// The bytes at `offset` where they are mapped (a sealed segment, or the flushed part of
    /// the active one), unchecked.
    pub(crate) fn mapped(&self, offset: u32, len: u32) -> Option<&[u8]> {
        match self {
            SegRef::Sealed(s) => s.read(offset, len),
            SegRef::Active(a) => a.read_mapped(offset, len),
        }
    }
}

impl Inner {
    /// The segment holding `e`. Call while holding the keyspace's read lock.
    pub(crate) fn locate(&self, e: &Entry) -> Option<SegRef> {
        self.locate_file(e.file)
    }

    /// Segment `file`, if it is in the set.
    fn locate_file(&self, file: u32) -> Option<SegRef> {
        let set = self.segments.read();
        if set.active.id == file {
            return Some(SegRef::Active(Arc::clone(&set.active)));
        }
        set.sealed.get(&file).cloned().map(SegRef::Sealed)
    }

    /// The live entry for `key` at `now` and where it lives. The record is asked for from
    /// where the key directory's index remembers it while the entry is still being loaded,
    /// and that segment is kept if the entry agrees (DESIGN.md §3.1, "The record's place in
    /// the index").
    pub(crate) fn lookup(
        &self,
        st: &KeyspaceState,
        key: &[u8],
        now: u64,
    ) -> Option<(Entry, SegRef)> {
        let mut early = None;
        let e = *st.live_hinted(key, now, |file, offset| {
            if let Some(seg) = self.locate_file(file) {
                seg.prefetch_at(offset);
                early = Some(seg);
            }
        })?;
        let seg = match early {
            Some(seg) if seg.id() == e.file => seg,
            _ => self.locate(&e)?,
        };
        Some((e, seg))
    }

    /// Copies out the value of the record `e` for `key`. Never takes the log mutex: a record
    /// still in the active segment's unflushed tail is copied under the tail's own lock.
    pub(crate) fn read_value(&self, seg: &SegRef, e: &Entry, key: &[u8]) -> Result<Vec<u8>> {
        self.with_value(seg, e, key, <[u8]>::to_vec)
    }

    /// Calls `f` with the value of the record `e` for `key`, checked (CRC, key, sequence
    /// number). For a sealed segment or the flushed part of the active one the slice is the
    /// mapping itself: no allocation, no copy. A record in the active segment's unflushed tail
    /// is copied out first.
    pub(crate) fn with_value<R>(
        &self,
        seg: &SegRef,
        e: &Entry,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.with_record(seg, e, key, |value, _| f(value))
    }

    /// As [`Inner::with_value`], also telling `f` whether the record carries the `DOC` flag
    /// (read from the checked record itself, not from the entry).
    pub(crate) fn with_record<R>(
        &self,
        seg: &SegRef,
        e: &Entry,
        key: &[u8],
        f: impl FnOnce(&[u8], bool) -> R,
    ) -> Result<R> {
        let f = |(value, doc): (&[u8], bool)| f(value, doc);
        match seg {
            SegRef::Sealed(s) => {
                let bytes = s.read(e.offset, e.len).ok_or_else(|| {
                    Error::corruption(
                        s.path(),
                        u64::from(e.offset),
                        "record beyond end of segment",
                    )
                })?;
                Ok(f(decode_value(bytes, e, key, || s.path().to_path_buf())?))
            }
            SegRef::Active(a) => {
                // The path is only built for an error: formatting it cost 3-4 % of a scan.
                let path = || a.current_path();
                if let Some(bytes) = a.read_mapped(e.offset, e.len) {
                    return Ok(f(decode_value(bytes, e, key, path)?));
                }
                let bytes = a
                    .read_any(e.offset, e.len)
                    .map_err(|err| Error::io_at(path(), err))?
                    .ok_or_else(|| {
                        Error::corruption(
                            path(),
                            u64::from(e.offset),
                            "record not in active segment",
                        )
                    })?;
                Ok(f(decode_value(&bytes, e, key, path)?))
            }
        }
    }
}

/// The checked record's value, and whether it carries the `DOC` flag.
fn decode_value<'a>(
    bytes: &'a [u8],
    e: &Entry,
    key: &[u8],
    path: impl Fn() -> std::path::PathBuf,
) -> Result<(&'a [u8], bool)> {
    let rec = record::decode(bytes)
        .map_err(|err| Error::corruption(path(), u64::from(e.offset), err.to_string()))?;
    if rec.meta.kind != Kind::Put || rec.key != key || rec.meta.seq != e.seq {
        return Err(Error::corruption(
            path(),
            u64::from(e.offset),
            "record does not match the key directory",
        ));
    }
    Ok((rec.value, rec.meta.flags & FLAG_DOC != 0))
}
