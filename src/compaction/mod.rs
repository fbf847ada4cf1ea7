//! Compaction: choose segments (policy), merge them without their dead records (merge), and
//! write hint files for sealed segments.

pub mod merge;
pub mod policy;

use std::fs::File;
use std::io::Write;

use crate::engine::Inner;
use crate::error::Result;
use crate::faults::{self, FaultKind};
use crate::format::hint::HintWriter;
use crate::log::scan::scan;
use crate::log::{hint_path, sync_dir};
use crate::stats::CompactionReport;

/// Runs the policy (or a full merge) now.
pub(crate) fn run(inner: &Inner, full: bool) -> Result<CompactionReport> {
    merge::run(inner, full)
}

/// Writes the hint file of sealed segment `id` (if it is still published and has none).
pub(crate) fn write_hint_for(inner: &Inner, id: u32) -> Result<()> {
    let Some(seg) = inner.segments.read().sealed.get(&id).cloned() else {
        return Ok(());
    };
    let path = hint_path(&inner.dir, id);
    if path.exists() {
        return Ok(());
    }
    let mut w = HintWriter::new(id);
    scan(seg.bytes(), |off, len, rec| {
        w.add(&rec.meta, rec.key, off, len)
    });
    write_hint_file(inner, id, w)
}

/// Writes a finished hint atomically (tmp, fsync, rename).
pub(crate) fn write_hint_file(inner: &Inner, id: u32, w: HintWriter) -> Result<()> {
    let path = hint_path(&inner.dir, id);
    let tmp = path.with_extension("hint.tmp");
    {
        faults::check(&tmp, FaultKind::Create)?;
        let mut f = File::create(&tmp)?;
        faults::check(&tmp, FaultKind::Write)?;
        f.write_all(&w.finish())?;
        faults::sync_file(&f, &tmp, false)?;
    }
    faults::check(&tmp, FaultKind::Rename)?;
    std::fs::rename(&tmp, &path)?;
    sync_dir(&inner.dir)?;
    Ok(())
}
