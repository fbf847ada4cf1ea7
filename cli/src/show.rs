//! Output: a buffered stdout that turns a closed pipe into a quiet exit (so `ebbdb scan | head`
//! never panics), safe text for arbitrary bytes, tables, and reading partition key arguments.

use std::fmt::Display;
use std::io::{BufWriter, ErrorKind, Stdout, Write};

use ebbdb::PartitionKey;
use serde_json::Value;

use crate::fail::{self, Failure};

/// Buffered standard output.
pub struct Out {
    w: BufWriter<Stdout>,
}

impl Out {
    pub fn new() -> Self {
        Self {
            w: BufWriter::new(std::io::stdout()),
        }
    }

    /// Writes one line.
    pub fn line(&mut self, s: impl Display) -> Result<(), Failure> {
        writeln!(self.w, "{s}").map_err(write_failed)
    }

    /// Flushes; call at the end of a command.
    pub fn finish(mut self) -> Result<(), Failure> {
        self.w.flush().map_err(write_failed)
    }
}

fn write_failed(e: std::io::Error) -> Failure {
    if e.kind() == ErrorKind::BrokenPipe {
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Failure::quiet(0)
    } else {
        fail::io("writing to standard output", e)
    }
}

/// Bytes as text: UTF-8 with backslashes, control characters and invisible formatting
/// characters (bidi overrides, zero-width) escaped (`\\`, `\n`, `\u{202e}`); bytes that are
/// not UTF-8 as `\xNN` (printable ASCII as is, backslash and quotes escaped).
pub fn bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => text(s),
        Err(_) => b.escape_ascii().to_string(),
    }
}

/// `s` with backslashes, control characters and invisible formatting characters escaped.
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c == '\\' {
            out.push_str("\\\\");
        } else if c.is_control() || invisible {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A partition key argument: a string, or (with `--pk-json`) a JSON string, number, bool or
/// null, or `undefined` for the items that have no value at the partition key path.
pub fn partition_key(arg: &str, json: bool) -> Result<PartitionKey, Failure> {
    if !json {
        return Ok(PartitionKey::from(arg));
    }
    if arg == "undefined" {
        return Ok(PartitionKey::UNDEFINED);
    }
    let v: Value = serde_json::from_str(arg).map_err(|e| {
        Failure::new(
            fail::REFUSED,
            format!("--pk-json: '{arg}' is not JSON: {e}"),
        )
    })?;
    match v {
        Value::String(s) => Ok(PartitionKey::from(s)),
        Value::Bool(b) => Ok(PartitionKey::from(b)),
        Value::Null => Ok(PartitionKey::NULL),
        Value::Number(n) => n.as_f64().map(PartitionKey::from).ok_or_else(|| {
            Failure::new(
                fail::REFUSED,
                format!("--pk-json: {n} is not a finite number"),
            )
        }),
        other => Err(Failure::new(
            fail::REFUSED,
            format!("a partition key is a string, number, bool or null, not {other}"),
        )),
    }
}

/// A cell of a table: strings without quotes, anything else as compact JSON, control
/// characters escaped.
fn cell(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::String(s)) => text(s),
        Some(other) => other.to_string(),
    }
}

/// Renders rows as a table: one column per property of the object rows (in order of first
/// appearance), or one `value` column for rows that are not objects.
pub fn table(rows: &[Value]) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    let all_objects = rows.iter().all(Value::is_object);
    if all_objects {
        for row in rows {
            if let Value::Object(m) = row {
                for k in m.keys() {
                    if !cols.contains(k) {
                        cols.push(k.clone());
                    }
                }
            }
        }
    } else {
        cols.push("value".into());
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            if all_objects {
                cols.iter().map(|c| cell(row.get(c))).collect()
            } else {
                vec![cell(Some(row))]
            }
        })
        .collect();
    grid(&cols, &cells)
}

/// Aligns `cells` under the `cols` headings, with a rule under the headings.
pub fn grid(cols: &[String], cells: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = cols.iter().map(|c| c.chars().count()).collect();
    for r in cells {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let fmt_row = |r: &[String]| -> String {
        let parts: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}", w = *w))
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut out = vec![fmt_row(cols)];
    out.push(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  "),
    );
    out.extend(cells.iter().map(|r| fmt_row(r)));
    out
}

/// Whole seconds as a short duration: `90d`, `1h 2m`, `30s`.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut parts = Vec::new();
    for (n, unit) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            parts.push(format!("{n}{unit}"));
        }
    }
    if parts.is_empty() {
        "0s".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_shown_safely() {
        assert_eq!(bytes(b"plain"), "plain");
        assert_eq!(bytes(b"a\nb\x1b\"\\"), "a\\nb\\u{1b}\"\\\\");
        assert_eq!(bytes("x\u{202e}y".as_bytes()), "x\\u{202e}y");
        assert_eq!(bytes(b"\xff\x00k"), "\\xff\\x00k");
        assert_eq!(hex(b"\x01\xab"), "01ab");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            serde_json::json!({"id": "a", "n": 1}),
            serde_json::json!({"id": "bbb", "x": true}),
        ];
        let t = table(&rows);
        assert_eq!(t[0], "id   n  x");
        assert_eq!(t[2], "a    1");
        assert_eq!(t[3], "bbb     true");
        assert_eq!(duration(90 * 86_400 + 61), "90d 1m 1s");
    }
}
