//! Parsing stored items back: every item that [`precheck`](super::precheck) let in must read
//! back, and reading must not recurse deeper than that.
//!
//! `serde_json`'s parser refuses input nested 128 levels or deeper ("recursion limit
//! exceeded"), one level short of what Azure Cosmos DB (and so the write path) allows. A parse
//! that fails is therefore retried, only when [`depth`] (an iterative scan, no recursion) finds
//! the text is 128 levels deep, with the parser's own limit lifted: the depth is known to be at
//! most [`MAX_DEPTH`], so the recursion stays bounded. Anything deeper (which the write path
//! never stores) keeps the parser's error. Ordinary reads pay nothing extra.
//!
//! [`parse_fields`] reads only some top-level properties of an item (for a query that needs
//! no others): the rest of the text is checked by [`skim`] as strictly as the
//! parser checks it, without building values, so it accepts and refuses what [`parse`] does.
//! For an item whose record carries the `DOC` flag it stops once every property it needs was
//! found: such a text is valid and names each property once, so the result is the same.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::precheck::MAX_DEPTH;
use super::skim;

/// The nesting `serde_json`'s parser refuses by default (it accepts up to one less).
const PARSER_LIMIT: usize = 128;

/// Parses a stored item (or any JSON text produced by the write path).
///
/// # Errors
/// The parser's error when `bytes` is not JSON fitting `T`.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match serde_json::from_slice(bytes) {
        Err(e) if (PARSER_LIMIT..=MAX_DEPTH).contains(&depth(bytes)) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            de.disable_recursion_limit();
            let v = T::deserialize(&mut de).map_err(|_| e)?;
            de.end()?;
            Ok(v)
        }
        other => other,
    }
}

/// Parses a stored item keeping only its top-level properties named in `wanted` (the value
/// at each in full): for an object, what [`parse`] gives with every other property removed.
/// Anything that is not an object comes back whole, as from [`parse`]. `doc`: the text is a
/// document item as the document layer wrote it (record flag `DOC`), so the reading stops
/// once every wanted property was found ([`skim::fields`]).
///
/// # Errors
/// The parser's error when `bytes` is not JSON, as from [`parse`].
pub(crate) fn parse_fields(
    bytes: &[u8],
    wanted: &[String],
    doc: bool,
) -> serde_json::Result<Value> {
    let mut out = Map::new();
    let mut bad = false;
    let skimmed = skim::fields(bytes, wanted, doc, |i, text| {
        // The skim checked `text`; the parser builds it (a repeated name: the last wins).
        match serde_json::from_slice(text) {
            Ok(v) => {
                out.insert(wanted[i].clone(), v);
            }
            Err(_) => bad = true,
        }
    });
    if skimmed.is_ok() && !bad {
        return Ok(Value::Object(out));
    }
    // Not an object, or text the skim does not vouch for: the parser decides.
    let mut v: Value = parse(bytes)?;
    if let Value::Object(m) = &mut v {
        m.retain(|k, _| wanted.contains(k));
    }
    Ok(v)
}

/// As [`parse_fields`], into `scratch`, reusing what it holds: when `scratch` is an object
/// left by the previous item of a scan, a property found again takes the place of the old
/// value (the name and the map's node are not allocated again) and one not found is removed.
/// A scan that drops most items so allocates only their values.
///
/// # Errors
/// As [`parse_fields`]; `scratch` is then unspecified.
pub(crate) fn parse_fields_into(
    bytes: &[u8],
    wanted: &[String],
    doc: bool,
    scratch: &mut Value,
) -> serde_json::Result<()> {
    let Value::Object(out) = scratch else {
        *scratch = parse_fields(bytes, wanted, doc)?;
        return Ok(());
    };
    if wanted.len() > 64 {
        *scratch = parse_fields(bytes, wanted, doc)?;
        return Ok(());
    }
    let mut seen = 0u64;
    let mut bad = false;
    let skimmed = skim::fields(bytes, wanted, doc, |i, text| {
        // A string without escapes (the skim checked it: no control characters, valid
        // UTF-8) is its bytes between the quotes, written into the old string if the slot
        // held one: most filtered properties are such strings.
        if let Some(plain) = plain_string(text) {
            match out.get_mut(&wanted[i]) {
                Some(Value::String(old)) => {
                    old.clear();
                    old.push_str(plain);
                }
                Some(slot) => *slot = Value::String(plain.to_owned()),
                None => {
                    out.insert(wanted[i].clone(), Value::String(plain.to_owned()));
                }
            }
            seen |= 1 << i;
            return;
        }
        // A small non-negative integer, as the parser would give it.
        if let Some(n) = small_uint(text) {
            match out.get_mut(&wanted[i]) {
                Some(slot) => *slot = Value::from(n),
                None => {
                    out.insert(wanted[i].clone(), Value::from(n));
                }
            }
            seen |= 1 << i;
            return;
        }
        match serde_json::from_slice(text) {
            Ok(v) => {
                match out.get_mut(&wanted[i]) {
                    Some(slot) => *slot = v,
                    None => {
                        out.insert(wanted[i].clone(), v);
                    }
                }
                seen |= 1 << i;
            }
            Err(_) => bad = true,
        }
    });
    if skimmed.is_ok() && !bad {
        for (i, name) in wanted.iter().enumerate() {
            if seen & (1 << i) == 0 {
                out.remove(name);
            }
        }
        // Names another shape wanted (a query reads items of two kinds with two shapes).
        if out.len() != seen.count_ones() as usize {
            out.retain(|k, _| wanted.contains(k));
        }
        return Ok(());
    }
    *scratch = parse_fields(bytes, wanted, doc)?;
    Ok(())
}

/// The contents of `text` when it is a JSON string holding no escape (`"abc"`), as the
/// skim vouched for it.
fn plain_string(text: &[u8]) -> Option<&str> {
    let inner = text.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// The value of `text` when it is a non-negative integer of at most 18 digits with no
/// leading zero (what `serde_json` reads as an unsigned integer); `None` for anything else,
/// which the parser reads (signs, fractions, exponents: `-0` is a float there).
fn small_uint(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 18 || (text.len() > 1 && text[0] == b'0') {
        return None;
    }
    text.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// The deepest nesting of objects and arrays in JSON text (0 for a scalar), found without
/// recursion. Brackets inside strings do not count. Meant for well-formed text; on anything
/// else it returns some number and the parser reports the real problem.
pub(crate) fn depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// One scratch value carried across a sequence of texts (objects with and without the
    /// wanted names, a repeated name, a nested value, text the skim refuses, JSON that is not
    /// an object, and three sets of names in turn, as a query reading items of two kinds
    /// does) gives, after each text, what a fresh `parse_fields` gives.
    #[test]
    fn a_reused_scratch_gives_what_a_fresh_parse_gives() {
        let texts: [&[u8]; 17] = [
            br#"{"a":1,"b":"x","c":[1,2]}"#,
            br#"{"a":0,"b":-0,"c":999999999999999999}"#,
            br#"{"a":1.5,"b":10,"c":1000000000000000000,"zz":-7}"#,
            r#"{"a":"text","b":"a\nb\u00e9","c":"ünï"}"#.as_bytes(),
            br#"{"a":"","b":"\"q\"","c":"longer than the string before it"}"#,
            br#"{"a":"shorter","c":"x"}"#,
            br#"{"b":"y"}"#,
            br#"{"c":{"d":[true,null]},"z":5}"#,
            br#"{"a":1,"a":2,"b":"dup"}"#,
            br#"[1,2,3]"#,
            br#"{"a":5,"c":1}"#,
            br#""text""#,
            br#"{"c":2,"b":[]}"#,
            br#"{"a":"\ud800","b":3}"#,
            br#"{}"#,
            br#"{"a":null,"b":false,"c":"z"}"#,
            br#"{"b":1e400}"#,
        ];
        // The last: 64 names (the widest set read with early stops), "a" the 64th.
        let mut wide: Vec<String> = (0..63).map(|i| format!("n{i:02}")).collect();
        wide.push("a".into());
        let sets: [Vec<String>; 4] = [
            vec!["a".into(), "b".into()],
            vec!["c".into()],
            vec!["b".into(), "c".into(), "zz".into()],
            wide,
        ];
        for doc in [false, true] {
            let mut scratch = Value::Object(Map::new());
            for round in 0..sets.len() {
                for (t, text) in texts.iter().enumerate() {
                    let wanted = &sets[(t + round) % sets.len()];
                    let fresh = parse_fields(text, wanted, doc);
                    let reused = parse_fields_into(text, wanted, doc, &mut scratch);
                    match fresh {
                        Ok(v) => {
                            assert!(reused.is_ok(), "{t} {round}");
                            assert_eq!(scratch, v, "text {t}, round {round}, doc {doc}");
                        }
                        Err(_) => {
                            assert!(reused.is_err(), "{t} {round}");
                            // An error ends a query: its scratch is not used again.
                            scratch = Value::Object(Map::new());
                        }
                    }
                }
            }
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn depth_ignores_brackets_in_strings() {
        assert_eq!(depth(b"1"), 0);
        assert_eq!(depth(br#"{"a":[1,{"b":"[[[{{"}]}"#), 3);
        assert_eq!(depth(br#"["\"[[", ["\\"]]"#), 2);
    }

    #[test]
    fn parses_up_to_max_depth_and_no_further() {
        assert!(serde_json::from_str::<Value>(&nested(127)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(128)).is_err());
        let v: Value = parse(nested(MAX_DEPTH).as_bytes()).expect("128 levels read back");
        assert_eq!(v.to_string(), nested(MAX_DEPTH));
        assert!(parse::<Value>(nested(MAX_DEPTH + 1).as_bytes()).is_err());
        assert!(parse::<Value>(b"[[1]").is_err());
        assert!(parse::<Value>(format!("{} x", nested(MAX_DEPTH)).as_bytes()).is_err());
    }

    fn fields(text: &str, wanted: &[&str]) -> serde_json::Result<Value> {
        let wanted: Vec<String> = wanted.iter().map(|w| (*w).to_string()).collect();
        parse_fields(text.as_bytes(), &wanted, false)
    }

    #[test]
    fn parse_fields_keeps_only_the_wanted_properties() {
        let text = r#"{"a": {"x": [1, 2.5]}, "b": "skip \" me", "c\u0041": true, "a": 7}"#;
        assert_eq!(
            fields(text, &["a"]).expect("parse"),
            serde_json::json!({"a": 7})
        );
        assert_eq!(
            fields(text, &["cA", "zz"]).expect("parse"),
            serde_json::json!({"cA": true})
        );
        assert_eq!(fields(text, &[]).expect("parse"), serde_json::json!({}));
        // Not an object: whole, as `parse` gives it.
        assert_eq!(
            fields(" [1, 2]", &["a"]).expect("parse"),
            serde_json::json!([1, 2])
        );
    }

    #[test]
    fn parse_fields_refuses_what_parse_refuses() {
        for bad in [
            "not json",
            r#"{"a": 1, "b": [1, }"#,
            r#"{"a": 1, "b": tru}"#,
            r#"{"a": 1} x"#,
            r#"{"a": 1, "b": "\x"}"#,
        ] {
            assert!(parse::<Value>(bad.as_bytes()).is_err(), "{bad}");
            assert!(fields(bad, &["a"]).is_err(), "{bad}");
        }
        let bad_utf8 = b"{\"a\": 1, \"b\": \"\xff\"}";
        assert!(parse::<Value>(bad_utf8).is_err());
        assert!(parse_fields(bad_utf8, &["a".to_string()], false).is_err());
        let deep = format!(r#"{{"a": 1, "b": {}}}"#, nested(MAX_DEPTH - 1));
        assert_eq!(
            fields(&deep, &["a"]).expect("128 levels"),
            serde_json::json!({"a": 1})
        );
        let too_deep = format!(r#"{{"a": 1, "b": {}}}"#, nested(MAX_DEPTH));
        assert!(fields(&too_deep, &["a"]).is_err());
    }

    /// Random texts from tricky fragments: `parse_fields` agrees with `parse` followed by
    /// dropping the other properties, in what it accepts and what it returns.
    #[test]
    fn parse_fields_agrees_with_parse_on_random_texts() {
        const PARTS: &[&[u8]] = &[
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            b" ",
            b"\"a\"",
            b"\"b\"",
            b"\"",
            b"\\",
            b"\\\"",
            b"\\u0041",
            b"\\ud83d\\ude00",
            b"\\ud800",
            b"\\n",
            b"\\q",
            b"x",
            b"0",
            b"-1",
            b"1.5",
            b"1e3",
            b"01",
            b"true",
            b"nul",
            b"null",
            b"\t",
            b"\x01",
            "\u{e9}".as_bytes(),
            b"\xc3",
            b"\xff",
            b"abcdefgh",
            b"\"abcdefghijklmnop\"",
        ];
        let wanted = ["a".to_string(), "b".to_string()];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut rand = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut ok, mut total) = (0, 0);
        for _ in 0..200_000 {
            let mut text = b"{\"a\":".to_vec();
            for _ in 0..rand(12) {
                text.extend_from_slice(PARTS[rand(PARTS.len())]);
            }
            if rand(2) == 0 {
                text.extend_from_slice(b"}");
            }
            let want = parse::<Value>(&text).map(|mut v| {
                if let Value::Object(m) = &mut v {
                    m.retain(|k, _| wanted.contains(k));
                }
                v
            });
            let got = parse_fields(&text, &wanted, false);
            assert_eq!(
                want.as_ref().ok(),
                got.as_ref().ok(),
                "{}",
                String::from_utf8_lossy(&text)
            );
            // The skim itself vouches for exactly the valid objects (no fallback taken).
            assert_eq!(
                skim::fields(&text, &wanted, false, |_, _| {}).is_ok(),
                want.as_ref().is_ok_and(Value::is_object),
                "{}",
                String::from_utf8_lossy(&text)
            );
            total += 1;
            ok += usize::from(want.is_ok());
        }
        assert!(ok > total / 100, "too few valid texts: {ok} of {total}");
    }
}
