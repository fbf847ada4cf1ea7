//! Read-only views of a database: `stats`, `containers` and `scan` (the byte engine).

use std::path::Path;

use ebbdb::{DefaultTtl, Expiry, Store};
use serde_json::{json, Value};

use crate::fail::Failure;
use crate::open;
use crate::show::{self, Out};

/// The document layer's catalogue keyspace and container keyspace prefix (see
/// `ebbdb::RESERVED_KEYSPACE_PREFIXES`).
const CATALOGUE: &str = "__containers";
const CONTAINER_PREFIX: &str = "c:";

fn ttl_json(t: DefaultTtl) -> Value {
    t.to_json_value().map_or(Value::Null, Value::from)
}

fn ttl_text(t: DefaultTtl) -> String {
    match t {
        DefaultTtl::Off => "off".into(),
        DefaultTtl::NeverExpire => "-1 (items expire only with their own ttl)".into(),
        DefaultTtl::Seconds(n) => format!("{n} s ({})", show::duration(u64::from(n))),
    }
}

/// Container ids, read from the catalogue keyspace if the database has one.
fn container_ids(store: &Store) -> Result<Vec<String>, Failure> {
    if !store.keyspaces().iter().any(|k| k == CATALOGUE) {
        return Ok(Vec::new());
    }
    let mut ids = Vec::new();
    for kv in store.keyspace(CATALOGUE)?.iter() {
        let (k, _) = kv?;
        ids.push(String::from_utf8_lossy(&k).into_owned());
    }
    Ok(ids)
}

pub fn stats(dir: &Path, json: bool) -> Result<(), Failure> {
    let store = open::store(dir)?;
    let ids = container_ids(&store)?;
    let mut names = store.keyspaces();
    names.sort();
    let mut keyspaces = Vec::new();
    for name in &names {
        let ks = store.keyspace(name)?;
        let container = name
            .strip_prefix(CONTAINER_PREFIX)
            .filter(|id| ids.iter().any(|i| i == id));
        keyspaces.push((
            name.clone(),
            container.map(str::to_owned),
            ks.len()?,
            ks.default_ttl(),
        ));
    }
    let st = store.stats();
    let now = store.now_unix_millis() / 1000;
    let mut out = Out::new();
    if json {
        let v = json!({
            "dir": dir.display().to_string(),
            "now": now,
            "keyspaces": keyspaces.iter().map(|(n, c, len, ttl)| json!({
                "name": n, "container": c, "live_items": len, "default_ttl": ttl_json(*ttl),
            })).collect::<Vec<_>>(),
            "live_items": st.live_items,
            "live_bytes": st.live_bytes,
            "expired_items": st.expired_items,
            "expired_bytes": st.expired_bytes,
            "oldest_unpurged_expiry": st.oldest_unpurged_expiry,
            "segment_bytes": st.segment_bytes,
            "hint_bytes": st.hint_bytes,
            "disk_bytes": st.disk_bytes,
            "segments": st.segments,
            "per_segment": st.per_segment.iter().map(|s| json!({
                "id": s.id, "bytes": s.bytes, "dead_share": s.dead_share, "active": s.active,
            })).collect::<Vec<_>>(),
            "timers_armed": st.timers_armed,
            "expiry_backlog": st.expiry_backlog,
            "damaged_segments": st.damaged_segments,
            "skipped_bytes": st.skipped_bytes,
            "unlisted_files": st.unlisted_files,
        });
        out.line(v)?;
        return out.finish();
    }
    out.line(format!("database        {}", dir.display()))?;
    out.line(format!("keyspaces       {}", keyspaces.len()))?;
    for (name, container, len, ttl) in &keyspaces {
        let what = match container {
            Some(c) => format!(" (container '{c}')"),
            None if name == CATALOGUE => " (the container catalogue)".to_string(),
            None => String::new(),
        };
        out.line(format!(
            "  {name}{what}: {len} live, default TTL {}",
            ttl_text(*ttl)
        ))?;
    }
    out.line(format!(
        "live items      {} ({} bytes)",
        st.live_items, st.live_bytes
    ))?;
    out.line(format!(
        "expired items   {} not yet purged ({} bytes)",
        st.expired_items, st.expired_bytes
    ))?;
    if let Some(at) = st.oldest_unpurged_expiry {
        out.line(format!(
            "oldest unpurged expiry  {at} (Unix s, {} ago)",
            show::duration(now.saturating_sub(at))
        ))?;
    }
    out.line(format!(
        "disk            {} bytes ({} in segments, {} in hints)",
        st.disk_bytes, st.segment_bytes, st.hint_bytes
    ))?;
    out.line(format!("segments        {}", st.segments))?;
    for s in &st.per_segment {
        out.line(format!(
            "  {:010}{}: {} bytes, {:.1}% dead",
            s.id,
            if s.active { " (active)" } else { "" },
            s.bytes,
            s.dead_share * 100.0
        ))?;
    }
    out.line(format!("timers armed    {}", st.timers_armed))?;
    if st.damaged_segments + st.unlisted_files > 0 {
        out.line(format!(
            "damage          {} damaged segments, {} bytes skipped, {} unlisted files",
            st.damaged_segments, st.skipped_bytes, st.unlisted_files
        ))?;
    }
    out.finish()
}

pub fn containers(dir: &Path, json: bool) -> Result<(), Failure> {
    let db = open::database(dir)?;
    let mut rows = Vec::new();
    for props in db.containers()? {
        let count = db.container(&props.id)?.count()?;
        rows.push((props, count));
    }
    let mut out = Out::new();
    if json {
        let list: Vec<Value> = rows
            .iter()
            .map(|(p, n)| {
                let mut v = p.to_json_value();
                if let Value::Object(m) = &mut v {
                    m.insert("itemCount".into(), Value::from(*n));
                }
                v
            })
            .collect();
        out.line(Value::Array(list))?;
        return out.finish();
    }
    let cols: Vec<String> = ["id", "partitionKey", "defaultTtl", "indexing", "items"]
        .map(String::from)
        .to_vec();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(p, n)| {
            vec![
                show::text(&p.id),
                show::text(&p.partition_key_path),
                p.default_ttl
                    .to_json_value()
                    .map_or_else(|| "off".to_string(), |t| t.to_string()),
                p.indexing_mode.as_str().to_string(),
                n.to_string(),
            ]
        })
        .collect();
    if cells.is_empty() {
        out.line("(no containers)")?;
    } else {
        for l in show::grid(&cols, &cells) {
            out.line(l)?;
        }
    }
    out.finish()
}

pub fn scan(
    dir: &Path,
    keyspace: &str,
    prefix: Option<&str>,
    limit: Option<usize>,
    json: bool,
) -> Result<(), Failure> {
    let store = open::store(dir)?;
    let ks = store.keyspace(keyspace)?;
    let iter = match prefix {
        Some(p) => ks.prefix(p.as_bytes()),
        None => ks.iter(),
    };
    let mut out = Out::new();
    for kv in iter.take(limit.unwrap_or(usize::MAX)) {
        let (k, v) = kv?;
        if json {
            let expires_at = match ks.remaining_ttl(&k)? {
                None => continue, // expired since the scan read it
                Some(Expiry::At { unix_secs, .. }) => Value::from(unix_secs),
                Some(_) => Value::Null,
            };
            let mut o = serde_json::Map::new();
            for (name, b) in [("key", &k), ("value", &v)] {
                match std::str::from_utf8(b) {
                    Ok(s) => o.insert(name.into(), Value::from(s)),
                    Err(_) => o.insert(format!("{name}_hex"), Value::from(show::hex(b))),
                };
            }
            o.insert("expires_at".into(), expires_at);
            out.line(Value::Object(o))?;
        } else {
            out.line(format!("{}\t{}", show::bytes(&k), show::bytes(&v)))?;
        }
    }
    out.finish()
}
