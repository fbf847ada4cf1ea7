//! Item commands of the document layer: `get`, `put`, `delete`, `query`.

use std::io::Read;
use std::path::Path;

use ebbdb::{Query, QueryOptions};
use serde_json::Value;

use crate::fail::{self, Failure};
use crate::open;
use crate::show::{self, Out};

pub fn get(
    dir: &Path,
    container: &str,
    pk: &str,
    pk_json: bool,
    id: &str,
    json: bool,
) -> Result<(), Failure> {
    let pk = show::partition_key(pk, pk_json)?;
    let db = open::database(dir)?;
    let item: Value = db.container(container)?.read_item(pk, id)?;
    let mut out = Out::new();
    if json {
        out.line(&item)?;
    } else {
        out.line(serde_json::to_string_pretty(&item).unwrap_or_else(|_| item.to_string()))?;
    }
    out.finish()
}

pub fn delete(
    dir: &Path,
    container: &str,
    pk: &str,
    pk_json: bool,
    id: &str,
) -> Result<(), Failure> {
    let pk = show::partition_key(pk, pk_json)?;
    let db = open::database(dir)?;
    db.container(container)?.delete_item(pk, id)?;
    let mut out = Out::new();
    out.line(format!("deleted '{id}'"))?;
    out.finish()
}

/// Upserts every item of `file` (`-`: stdin): one JSON object, a JSON array of objects, or one
/// object per line. Input is read whole (use `import` for large files). Each refused item is
/// reported by number; the others are written.
pub fn put(dir: &Path, container: &str, file: &str) -> Result<(), Failure> {
    let mut text = String::new();
    let read = if file == "-" {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_string(&mut text))
    };
    read.map_err(|e| fail::io(if file == "-" { "standard input" } else { file }, e))?;
    let items = parse_items(&text);
    let db = open::database(dir)?;
    let c = db.container(container)?;
    let (mut ok, mut refused) = (0usize, 0usize);
    for (n, line, item) in items {
        let result = item.and_then(|v| c.upsert_item(&v).map_err(|e| fail::with_status(&e)));
        match result {
            Ok(_) => ok += 1,
            Err(msg) => {
                refused += 1;
                eprintln!("item {n} (line {line}): {msg}");
            }
        }
    }
    let mut out = Out::new();
    out.line(format!("upserted {ok} items into '{container}'"))?;
    out.finish()?;
    if refused > 0 {
        return Err(Failure::new(
            fail::REFUSED,
            format!("{refused} items were refused (listed above)"),
        ));
    }
    Ok(())
}

/// Items of a `put` input, numbered from 1 with the line each starts on: the whole text as one
/// JSON value (an object, or an array of them), or else one value per non-empty line.
fn parse_items(text: &str) -> Vec<(usize, usize, Result<Value, String>)> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, 1, Ok(v)))
            .collect(),
        Ok(v) => vec![(1, 1, Ok(v))],
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .enumerate()
            .map(|(n, (line, l))| {
                (
                    n + 1,
                    line + 1,
                    serde_json::from_str(l).map_err(|e| format!("malformed JSON: {e}")),
                )
            })
            .collect(),
    }
}

/// `@name=value`: the value is JSON if it parses as JSON, else a string.
fn param(arg: &str) -> Result<(String, Value), Failure> {
    let bad = || {
        Failure::new(
            fail::REFUSED,
            format!("--param '{arg}': expected @name=value"),
        )
    };
    let (name, value) = arg.split_once('=').ok_or_else(bad)?;
    if !name.starts_with('@') || name.len() < 2 {
        return Err(bad());
    }
    let v = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
    Ok((name.to_string(), v))
}

pub fn query(
    dir: &Path,
    container: &str,
    sql: &str,
    params: &[String],
    partition_key: Option<(&str, bool)>,
    json_lines: bool,
) -> Result<(), Failure> {
    let mut q = Query::new(sql);
    for p in params {
        let (name, value) = param(p)?;
        q = q.param(&name, value);
    }
    let mut opts = QueryOptions::default();
    if let Some((k, as_json)) = partition_key {
        opts = opts.partition_key(show::partition_key(k, as_json)?);
    }
    let db = open::database(dir)?;
    let c = db.container(container)?;
    let rows = c
        .query_with::<Value>(&q, &opts)?
        .collect::<ebbdb::Result<Vec<Value>>>()?;
    let mut out = Out::new();
    if json_lines {
        for r in &rows {
            out.line(r)?;
        }
    } else {
        for l in show::table(&rows) {
            out.line(l)?;
        }
        out.line(format!("({} rows)", rows.len()))?;
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_and_put_inputs_parse() {
        assert_eq!(param("@n=5").ok().map(|p| p.1), Some(Value::from(5)));
        assert_eq!(param("@s=abc").ok().map(|p| p.1), Some(Value::from("abc")));
        assert_eq!(param("@s=\"5\"").ok().map(|p| p.1), Some(Value::from("5")));
        assert!(param("n=5").is_err());
        assert_eq!(parse_items("[{\"id\":\"a\"},{\"id\":\"b\"}]").len(), 2);
        assert_eq!(parse_items("{\n\"id\": \"a\"\n}").len(), 1);
        let lines = parse_items("{\"id\":\"a\"}\n\n{bad\n{\"id\":\"c\"}\n");
        assert_eq!(lines.len(), 3);
        assert_eq!((lines[1].0, lines[1].1), (2, 3));
        assert!(lines[1].2.is_err());
    }
}
