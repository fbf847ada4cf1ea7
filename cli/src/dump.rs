//! `export`: each container to `<id>.json` (a JSON array, the Azure Cosmos DB data migration
//! tool's format) or `<id>.ndjson`, beside `<id>.container.json` (its properties in the Cosmos
//! REST shape: `id`, `partitionKey`, `defaultTtl`, `indexingPolicy`).
//!
//! Streaming: items go from the engine's scan straight to the file, one at a time. System
//! properties are stripped. With `--ttl remaining` an item that will expire gets `ttl` = its
//! exact remaining lifetime at the export's instant (the engine's own deadline for it, so
//! default-TTL changes are accounted for), at least 1; items already expired are not written.
//! Files are written under a `.tmp` name and renamed when complete.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use ebbdb::{Container, Expiry};
use serde_json::{json, Map, Value};

use crate::fail::{self, Failure};
use crate::show::Out;
use crate::{open, progress, TtlMode};

/// Properties Azure Cosmos DB owns; never exported.
const SYSTEM_PROPERTIES: [&str; 5] = ["_rid", "_self", "_etag", "_attachments", "_ts"];

/// A container id as a file name: ASCII letters, digits, `-`, `_` and inner `.` as they are,
/// every other byte as `%XX`.
pub fn file_stem(id: &str) -> String {
    let mut s = String::new();
    for (i, b) in id.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

struct Summary {
    id: String,
    file: PathBuf,
    exported: u64,
    skipped: u64,
}

pub fn export(
    dir: &Path,
    only: Option<&str>,
    out_dir: &Path,
    ndjson: bool,
    ttl: TtlMode,
    json: bool,
) -> Result<(), Failure> {
    let db = open::database(dir)?;
    let containers = match only {
        Some(id) => vec![db.container(id)?],
        None => db
            .containers()?
            .iter()
            .map(|p| db.container(&p.id))
            .collect::<ebbdb::Result<Vec<_>>>()?,
    };
    fs::create_dir_all(out_dir).map_err(|e| fail::io(out_dir.display(), e))?;
    let now_s = db.store().now_unix_millis() / 1000;
    let mut done = Vec::new();
    for c in &containers {
        done.push(export_one(c, out_dir, ndjson, ttl, now_s)?);
    }
    let mut out = Out::new();
    if json {
        out.line(json!({
            "now": now_s,
            "ttl": if ttl == TtlMode::Remaining { "remaining" } else { "original" },
            "containers": done.iter().map(|s| json!({
                "id": s.id, "file": s.file.display().to_string(),
                "exported": s.exported, "expired_skipped": s.skipped,
            })).collect::<Vec<_>>(),
        }))?;
    } else {
        for s in &done {
            out.line(format!(
                "{}: {} items -> {}{}",
                s.id,
                s.exported,
                s.file.display(),
                if s.skipped > 0 {
                    format!(" ({} expired during the export, skipped)", s.skipped)
                } else {
                    String::new()
                }
            ))?;
        }
        if done.is_empty() {
            out.line("(no containers)")?;
        }
    }
    out.finish()
}

fn export_one(
    c: &Container,
    out_dir: &Path,
    ndjson: bool,
    ttl: TtlMode,
    now_s: u64,
) -> Result<Summary, Failure> {
    let stem = file_stem(c.id());
    let props_path = out_dir.join(format!("{stem}.container.json"));
    let props = serde_json::to_string_pretty(&c.properties().to_json_value())
        .map_err(|e| Failure::new(fail::OTHER, e.to_string()))?;
    write_atomically(&props_path, |w| writeln!(w, "{props}"))?;

    let file = out_dir.join(format!("{stem}.{}", if ndjson { "ndjson" } else { "json" }));
    let bar = progress::bar(c.count()? as u64, c.id(), false);
    let (mut exported, mut skipped) = (0u64, 0u64);
    let ks = c.keyspace();
    let mut failure = None;
    write_atomically(&file, |w| {
        if !ndjson {
            w.write_all(b"[")?;
        }
        for kv in ks.iter() {
            let result = (|| -> Result<Option<Value>, Failure> {
                let (key, bytes) = kv?;
                let Some(expiry) = ks.remaining_ttl(&key)? else {
                    return Ok(None); // expired since the scan read it
                };
                Ok(Some(exported_item(&bytes, expiry, ttl, now_s)?))
            })();
            let item = match result {
                Ok(Some(item)) => item,
                Ok(None) => {
                    skipped += 1;
                    continue;
                }
                Err(f) => {
                    failure = Some(f);
                    return Err(std::io::Error::other("export stopped"));
                }
            };
            let sep: &[u8] = match (ndjson, exported) {
                (true, _) => b"",
                (false, 0) => b"\n",
                (false, _) => b",\n",
            };
            w.write_all(sep)?;
            serde_json::to_writer(&mut *w, &item)?;
            if ndjson {
                w.write_all(b"\n")?;
            }
            exported += 1;
            bar.inc(1);
        }
        if !ndjson {
            w.write_all(if exported == 0 { b"]\n" } else { b"\n]\n" })?;
        }
        Ok(())
    })
    .map_err(|e| failure.take().unwrap_or(e))?;
    bar.finish_and_clear();
    Ok(Summary {
        id: c.id().to_string(),
        file,
        exported,
        skipped,
    })
}

/// The item as exported: system properties stripped, `ttl` per the mode.
fn exported_item(
    bytes: &[u8],
    expiry: Expiry,
    mode: TtlMode,
    now_s: u64,
) -> Result<Value, Failure> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Stored items were checked to be at most 128 levels deep when written.
    de.disable_recursion_limit();
    let mut map: Map<String, Value> = serde::Deserialize::deserialize(&mut de)
        .map_err(|e| Failure::new(fail::CORRUPT, format!("a stored item is not JSON: {e}")))?;
    for p in SYSTEM_PROPERTIES {
        map.remove(p);
    }
    if let (TtlMode::Remaining, Expiry::At { unix_secs, .. }) = (mode, expiry) {
        map.insert(
            "ttl".into(),
            Value::from(unix_secs.saturating_sub(now_s).max(1)),
        );
    }
    Ok(Value::Object(map))
}

/// Writes `path` through `path.tmp`, renamed into place only when `write` succeeded.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Failure> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp)?);
        write(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(fail::io(path.display(), e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("orders"), "orders");
        assert_eq!(file_stem("a.b-c_d"), "a.b-c_d");
        assert_eq!(file_stem(".."), "%2E.");
        assert_eq!(file_stem("a b*é"), "a%20b%2A%C3%A9");
    }
}
