//! `import`: items from an `ebbdb export` directory (each `<id>.container.json` with its
//! `<id>.json` or `<id>.ndjson`) or from one file of items, into containers of a database.
//!
//! Each item is validated as `create_item` validates it (so a duplicate id is a 409). Items
//! are written in batches with `Container::create_items`: a batch is written all or nothing.
//! With `--on-error skip` a refused item is reported (by its number and line) and left out
//! of its batch; with `--on-error stop` it is reported, its batch is not written, and the
//! import stops. A missing container is created from its properties file, so its `defaultTtl`
//! is in force before the first item arrives (item `ttl` means nothing without it).

use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ebbdb::{BulkCreate, Container, ContainerProperties, Database};
use serde_json::{json, Value};

use crate::fail::{self, Failure};
use crate::reader::{Body, Next, Reader};
use crate::show::Out;
use crate::{open, progress, OnError};

/// Longest item text kept in memory; anything longer is refused as too large without being
/// parsed (the database's own item limit, 2 MiB by default, applies to what is kept).
const MAX_ITEM_TEXT: usize = 16 << 20;
/// A batch is written once it holds this many bytes of item text, whatever its count.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// One container's worth of input.
struct Source {
    /// The target container id.
    id: String,
    /// Properties to create it with, if it does not exist.
    props: Option<ContainerProperties>,
    items: PathBuf,
}

struct Summary {
    id: String,
    imported: u64,
    refused: u64,
    stopped: bool,
}

fn refused(msg: impl Into<String>) -> Failure {
    Failure::new(fail::REFUSED, msg)
}

fn read_props(path: &Path) -> Result<ContainerProperties, Failure> {
    let text = fs::read_to_string(path).map_err(|e| fail::io(path.display(), e))?;
    ContainerProperties::from_json_str(&text)
        .map_err(|e| refused(format!("{}: {}", path.display(), fail::with_status(&e))))
}

/// The items file beside a properties file: `<stem>.json` or `<stem>.ndjson`.
fn items_beside(dir: &Path, stem: &str) -> Result<PathBuf, Failure> {
    let json = dir.join(format!("{stem}.json"));
    let ndjson = dir.join(format!("{stem}.ndjson"));
    match (json.is_file(), ndjson.is_file()) {
        (true, false) => Ok(json),
        (false, true) => Ok(ndjson),
        (true, true) => Err(refused(format!(
            "both {} and {} exist; keep one",
            json.display(),
            ndjson.display()
        ))),
        (false, false) => Err(Failure::new(
            fail::NOT_FOUND,
            format!(
                "no {} (or .ndjson) beside its properties file",
                json.display()
            ),
        )),
    }
}

fn sources(path: &Path, only: Option<&str>) -> Result<Vec<Source>, Failure> {
    if path.is_dir() {
        let mut names: Vec<String> = fs::read_dir(path)
            .map_err(|e| fail::io(path.display(), e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| n.ends_with(".container.json"))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let props = read_props(&path.join(&name))?;
            if only.is_some_and(|c| c != props.id) {
                continue;
            }
            let stem = name.trim_end_matches(".container.json");
            out.push(Source {
                id: props.id.clone(),
                items: items_beside(path, stem)?,
                props: Some(props),
            });
        }
        if out.is_empty() {
            return Err(Failure::new(
                fail::NOT_FOUND,
                match only {
                    Some(c) => format!("no container '{c}' in the export {}", path.display()),
                    None => format!("no *.container.json files in {}", path.display()),
                },
            ));
        }
        return Ok(out);
    }
    if !path.is_file() {
        return Err(Failure::new(
            fail::NOT_FOUND,
            format!("{} does not exist", path.display()),
        ));
    }
    let id = only.ok_or_else(|| {
        refused("--container is required when importing one file (it names the target container)")
    })?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".ndjson")
        .or_else(|| name.strip_suffix(".json"))
        .unwrap_or(name);
    let beside = path.with_file_name(format!("{stem}.container.json"));
    let props = if beside.is_file() {
        let mut p = read_props(&beside)?;
        p.id = id.to_string();
        Some(p)
    } else {
        None
    };
    Ok(vec![Source {
        id: id.to_string(),
        props,
        items: path.to_path_buf(),
    }])
}

/// The target container: the existing one, or a new one from the properties.
fn target(db: &Database, src: &Source) -> Result<Container, Failure> {
    match db.container(&src.id) {
        Ok(c) => {
            if let Some(p) = &src.props {
                let have = c.properties();
                if have.partition_key_path != p.partition_key_path {
                    return Err(refused(format!(
                        "container '{}' exists with partition key '{}', the export has '{}'",
                        src.id, have.partition_key_path, p.partition_key_path
                    )));
                }
                if have.default_ttl != p.default_ttl {
                    eprintln!(
                        "note: container '{}' exists with defaultTtl {:?}; the export's {:?} is \
                         not applied",
                        src.id,
                        have.default_ttl.to_json_value(),
                        p.default_ttl.to_json_value()
                    );
                }
            }
            Ok(c)
        }
        Err(e) if e.is_not_found() => match &src.props {
            Some(p) => Ok(db.create_container(p.clone())?),
            None => Err(Failure::new(
                fail::NOT_FOUND,
                format!(
                    "container '{}' does not exist; create it first, or import an export \
                     directory (its .container.json creates the container with its defaultTtl)",
                    src.id
                ),
            )),
        },
        Err(e) => Err(e.into()),
    }
}

pub fn import(
    dir: &Path,
    path: &Path,
    only: Option<&str>,
    on_error: OnError,
    batch_size: usize,
    json: bool,
) -> Result<(), Failure> {
    let sources = sources(path, only)?;
    let db = open::database_or_create(dir)?;
    let mut done = Vec::new();
    for src in &sources {
        let c = target(&db, src)?;
        let s = import_one(&c, src, on_error, batch_size)?;
        let stop = s.stopped;
        done.push(s);
        if stop {
            break;
        }
    }
    let mut out = Out::new();
    if json {
        out.line(json!({"containers": done.iter().map(|s| json!({
            "id": s.id, "imported": s.imported, "refused": s.refused, "stopped": s.stopped,
        })).collect::<Vec<_>>()}))?;
    } else {
        for s in &done {
            out.line(format!(
                "{}: {} items imported, {} refused{}",
                s.id,
                s.imported,
                s.refused,
                if s.stopped { " (stopped)" } else { "" }
            ))?;
        }
    }
    out.finish()?;
    let refused_total: u64 = done.iter().map(|s| s.refused).sum();
    if done.iter().any(|s| s.stopped) {
        return Err(refused(
            "import stopped at a refused item (listed above); whole batches before it were \
             imported, nothing after it",
        ));
    }
    if refused_total > 0 {
        return Err(refused(format!(
            "{refused_total} items were refused (listed above); the others were imported"
        )));
    }
    Ok(())
}

/// An item waiting in the current batch.
struct Pending {
    number: usize,
    line: usize,
    item: Value,
}

fn import_one(
    c: &Container,
    src: &Source,
    on_error: OnError,
    batch_size: usize,
) -> Result<Summary, Failure> {
    let file = File::open(&src.items).map_err(|e| fail::io(src.items.display(), e))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = progress::bar(len, &src.id, true);
    let mut reader = Reader::new(
        BufReader::with_capacity(1 << 16, bar.wrap_read(file)),
        MAX_ITEM_TEXT,
    );
    let name = src.items.display().to_string();
    let mut s = Summary {
        id: src.id.clone(),
        imported: 0,
        refused: 0,
        stopped: false,
    };
    let mut batch: Vec<Pending> = Vec::new();
    let mut batch_bytes = 0usize;
    let report = |s: &mut Summary, number: usize, line: usize, msg: &str| {
        s.refused += 1;
        bar.suspend(|| eprintln!("{name}: item {number} (line {line}): {msg}"));
    };
    loop {
        let next = reader
            .next_item()
            .map_err(|e| fail::io(src.items.display(), e))?;
        match next {
            Next::End => break,
            Next::Fatal { line, message } => {
                s.refused += 1;
                bar.suspend(|| eprintln!("{name}: line {line}: malformed JSON: {message}"));
                s.stopped = on_error == OnError::Stop;
                if s.stopped {
                    batch.clear();
                }
                break;
            }
            Next::Item(raw) => {
                let parsed = match raw.body {
                    Body::TooLarge(n) => Err(format!(
                        "entity too large: the item is {n} bytes of JSON, over the \
                         {MAX_ITEM_TEXT}-byte limit of the import (413)"
                    )),
                    Body::Json(bytes) => {
                        batch_bytes += bytes.len();
                        serde_json::from_slice::<Value>(&bytes)
                            .map_err(|e| format!("malformed JSON: {e}"))
                    }
                };
                match parsed {
                    Ok(item) => batch.push(Pending {
                        number: raw.number,
                        line: raw.line,
                        item,
                    }),
                    Err(msg) => {
                        report(&mut s, raw.number, raw.line, &msg);
                        if on_error == OnError::Stop {
                            s.stopped = true;
                            batch.clear();
                            break;
                        }
                    }
                }
                if batch.len() >= batch_size || batch_bytes >= MAX_BATCH_BYTES {
                    if !flush(c, &mut batch, on_error, &mut s, &report)? {
                        break;
                    }
                    batch_bytes = 0;
                }
            }
        }
    }
    if !s.stopped {
        flush(c, &mut batch, on_error, &mut s, &report)?;
    }
    bar.finish_and_clear();
    Ok(s)
}

/// Writes the batch (all or nothing). A refused item is reported; with `skip` it is dropped
/// and the rest written, with `stop` nothing is written and `false` is returned.
fn flush(
    c: &Container,
    batch: &mut Vec<Pending>,
    on_error: OnError,
    s: &mut Summary,
    report: &impl Fn(&mut Summary, usize, usize, &str),
) -> Result<bool, Failure> {
    while !batch.is_empty() {
        let items: Vec<Value> = batch.iter().map(|p| p.item.clone()).collect();
        match c.create_items(&items)? {
            BulkCreate::Created(n) => {
                s.imported += n as u64;
                batch.clear();
            }
            BulkCreate::Refused(list) => {
                let mut drop = vec![false; batch.len()];
                for (i, e) in &list {
                    if let (Some(p), Some(d)) = (batch.get(*i), drop.get_mut(*i)) {
                        report(s, p.number, p.line, &fail::with_status(e));
                        *d = true;
                    }
                }
                if on_error == OnError::Stop || !drop.iter().any(|d| *d) {
                    s.stopped = true;
                    batch.clear();
                    return Ok(false);
                }
                let mut keep = drop.iter().map(|d| !d);
                batch.retain(|_| keep.next().unwrap_or(false));
            }
            _ => {
                return Err(Failure::new(
                    fail::OTHER,
                    "unexpected bulk-create outcome from this version of the library",
                ))
            }
        }
    }
    Ok(true)
}
