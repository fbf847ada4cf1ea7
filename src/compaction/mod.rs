//! Compaction: choose segments (policy), merge them without their dead records (merge), and
//! write hint files for sealed segments.

hooked_mod!(merge);
pub(crate) mod policy;

use std::fs::File;
use std::io::Write;

use crate::engine::Inner;
use crate::error::{Error, IoContext, Result};
use crate::faults::{self, FaultKind};
use crate::format::hint::HintWriter;
use crate::log::scan::scan_all;
use crate::log::{hint_path, sync_dir};
use crate::options::RecoveryMode;
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
    if path.exists() || seg.is_damaged() {
        return Ok(());
    }
    // A hint must list every record of its segment: one built from a scan that stopped at
    // damage would hide the records after it from every later open.
    let mut w = HintWriter::new(id);
    let end = usize::try_from(seg.len()).unwrap_or(usize::MAX);
    let damage = scan_all(seg.bytes(), end, |off, len, rec| {
        w.add(&rec.meta, rec.key, off, len);
    });
    if let Some(first) = damage.first() {
        seg.mark_damaged();
        inner
            .damage
            .segment(damage.iter().map(|d| d.len() as u64).sum());
        if inner.opts.recovery == RecoveryMode::Strict {
            return Err(Error::corruption(
                seg.path(),
                first.offset as u64,
                first.err.to_string(),
            ));
        }
        return Ok(());
    }
    write_hint_file(inner, id, w)
}

/// Writes a finished hint atomically (tmp, fsync, rename).
pub(crate) fn write_hint_file(inner: &Inner, id: u32, w: HintWriter) -> Result<()> {
    let path = hint_path(&inner.dir, id);
    let tmp = path.with_extension("hint.tmp");
    (|| {
        faults::check(&tmp, FaultKind::Create)?;
        let mut f = File::create(&tmp)?;
        faults::check(&tmp, FaultKind::Write)?;
        f.write_all(&w.finish())?;
        faults::sync_file(&f, &tmp, false)?;
        faults::check(&tmp, FaultKind::Rename)?;
        std::fs::rename(&tmp, &path)
    })()
    .at(&tmp)?;
    sync_dir(&inner.dir).at(&inner.dir)?;
    Ok(())
}
