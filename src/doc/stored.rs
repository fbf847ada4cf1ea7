//! Parsing stored items back: every item that [`precheck`](super::precheck) let in must read
//! back, and reading must not recurse deeper than that.
//!
//! `serde_json`'s parser refuses input nested 128 levels or deeper ("recursion limit
//! exceeded"), one level short of what Azure Cosmos DB (and so the write path) allows. A parse
//! that fails is therefore retried, only when [`depth`] (an iterative scan, no recursion) finds
//! the text is 128 levels deep, with the parser's own limit lifted: the depth is known to be at
//! most [`MAX_DEPTH`], so the recursion stays bounded. Anything deeper (which the write path
//! never stores) keeps the parser's error. Ordinary reads pay nothing extra.

use serde::de::DeserializeOwned;

use super::precheck::MAX_DEPTH;

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
}
