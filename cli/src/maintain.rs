//! Maintenance: `compact` (merge segments now) and `verify` (read-only integrity check).

use std::path::Path;

use serde_json::{json, Value};

use crate::fail::{self, Failure};
use crate::open;
use crate::progress;
use crate::show::Out;

pub fn compact(dir: &Path, full: bool, json: bool) -> Result<(), Failure> {
    let store = open::store(dir)?;
    let before = store.stats().disk_bytes;
    let spin = progress::spinner(if full {
        "merging every segment"
    } else {
        "compacting"
    });
    let report = if full {
        store.compact_full()
    } else {
        store.compact()
    };
    spin.finish_and_clear();
    let r = report?;
    let after = store.stats().disk_bytes;
    let mut out = Out::new();
    if json {
        out.line(json!({
            "full": full,
            "segments_merged": r.segments_merged,
            "segments_dropped": r.segments_dropped,
            "segments_written": r.segments_written,
            "records_copied": r.records_copied,
            "markers_written": r.markers_written,
            "bytes_before": r.bytes_before,
            "bytes_after": r.bytes_after,
            "disk_bytes_before": before,
            "disk_bytes_after": after,
        }))?;
    } else {
        out.line(format!(
            "merged {} segments and dropped {} unread; wrote {} ({} records copied, {} markers)",
            r.segments_merged,
            r.segments_dropped,
            r.segments_written,
            r.records_copied,
            r.markers_written
        ))?;
        out.line(format!(
            "segment bytes {} -> {}; directory {} -> {} bytes",
            r.bytes_before, r.bytes_after, before, after
        ))?;
    }
    out.finish()
}

fn finding(f: &ebbdb::Finding) -> Value {
    json!({"file": f.file.display().to_string(), "offset": f.offset, "message": f.message})
}

pub fn verify(dir: &Path, json: bool) -> Result<(), Failure> {
    open::require_database(dir)?;
    let bar = progress::bar(0, "verifying", true);
    let report = ebbdb::verify_with_progress(dir, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = report?;
    let mut out = Out::new();
    if json {
        out.line(json!({
            "clean": report.is_clean(),
            "problems": report.problems.iter().map(finding).collect::<Vec<_>>(),
            "notes": report.notes.iter().map(finding).collect::<Vec<_>>(),
            "segments": report.segments,
            "hints": report.hints,
            "records": report.records,
            "bytes_read": report.bytes_read,
            "keys": report.keys,
            "keyspaces": report.keyspaces,
        }))?;
    } else {
        for p in &report.problems {
            out.line(format!("problem: {p}"))?;
        }
        for n in &report.notes {
            out.line(format!("note: {n}"))?;
        }
        out.line(format!(
            "{}: {} segments, {} hints, {} records, {} keys in {} keyspaces, {} bytes read",
            if report.is_clean() {
                "ok".to_string()
            } else {
                format!("{} problems", report.problems.len())
            },
            report.segments,
            report.hints,
            report.records,
            report.keys,
            report.keyspaces,
            report.bytes_read
        ))?;
    }
    out.finish()?;
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure::new(
            fail::CORRUPT,
            format!(
                "verify found {} problems in {} (listed above)",
                report.problems.len(),
                dir.display()
            ),
        ))
    }
}
