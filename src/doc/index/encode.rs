//! The order-preserving byte encoding of indexed values.
//!
//! Only scalars are indexed: `null`, `false`, `true`, numbers and strings, each a type tag
//! followed by its bytes, so byte order is the query's cross-type order (null < false < true
//! < number < string) and, within a type, the value order:
//!
//! | value  | bytes                                                                 |
//! |--------|-----------------------------------------------------------------------|
//! | null   | `01`                                                                  |
//! | false  | `02`                                                                  |
//! | true   | `03`                                                                  |
//! | number | `04` + 8 bytes big-endian: the f64's bits, sign-flipped (negatives all inverted), `-0` as `0` |
//! | string | `05` + UTF-8 with `00` written `00 FF`, then `00 00`                  |
//!
//! Every encoding is self-delimiting, so an index entry is `value ++ item key` and an equality
//! lookup is a prefix range. Numbers are compared as the evaluator compares them (as f64), so
//! `1` and `1.0` have one encoding. Tag `00` marks "not indexed here" (undefined, an array or
//! an object) in a version's list of values.

use serde_json::Value;

pub(crate) const ABSENT: u8 = 0x00;
pub(crate) const NULL: u8 = 0x01;
pub(crate) const FALSE: u8 = 0x02;
pub(crate) const TRUE: u8 = 0x03;
pub(crate) const NUMBER: u8 = 0x04;
pub(crate) const STRING: u8 = 0x05;

/// The type tag of an indexable value (`None` for arrays and objects).
pub(crate) fn tag(v: &Value) -> Option<u8> {
    match v {
        Value::Null => Some(NULL),
        Value::Bool(false) => Some(FALSE),
        Value::Bool(true) => Some(TRUE),
        Value::Number(_) => Some(NUMBER),
        Value::String(_) => Some(STRING),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// Appends the encoding of `v` to `out` (a `Vec`, or a `SmallVec` that keeps short ones
/// inline); false (nothing appended) for arrays and objects.
pub(crate) fn encode(v: &Value, out: &mut impl Extend<u8>) -> bool {
    let Some(t) = tag(v) else {
        return false;
    };
    out.extend([t]);
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0) + 0.0; // -0.0 + 0.0 is 0.0
            let bits = f.to_bits();
            let key = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend(key.to_be_bytes());
        }
        Value::String(s) => encode_str_body(s, out),
        _ => {}
    }
    if let Value::String(_) = v {
        out.extend([0, 0]);
    }
    true
}

/// A string's bytes with `00` escaped as `00 FF`, without the terminator: the encoding of
/// every string that starts with `s` starts with `05` and this.
pub(crate) fn encode_str_body(s: &str, out: &mut impl Extend<u8>) {
    for part in s.as_bytes().split_inclusive(|&b| b == 0) {
        out.extend(part.iter().copied());
        if part.ends_with(&[0]) {
            out.extend([0xFF]);
        }
    }
}

/// The length of the encoded value at the start of `b` (including an `ABSENT` tag), or `None`
/// if `b` does not start with one.
pub(crate) fn encoded_len(b: &[u8]) -> Option<usize> {
    match *b.first()? {
        ABSENT | NULL | FALSE | TRUE => Some(1),
        NUMBER => (b.len() >= 9).then_some(9),
        STRING => {
            let mut i = 1;
            loop {
                match (b.get(i)?, b.get(i + 1)) {
                    (0, Some(0)) => return Some(i + 2),
                    (0, Some(0xFF)) => i += 2,
                    (0, _) => return None,
                    _ => i += 1,
                }
            }
        }
        _ => None,
    }
}

/// The smallest byte string greater than every string starting with `p` (`None`: no bound).
pub(crate) fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn enc(v: Value) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(encode(&v, &mut out));
        out
    }

    #[test]
    fn byte_order_is_the_query_order() {
        let vals = [
            json!(null),
            json!(false),
            json!(true),
            json!(-1e300),
            json!(-2.5),
            json!(-1),
            json!(0),
            json!(0.5),
            json!(1),
            json!(1e300),
            json!(""),
            json!("\u{0}"),
            json!("\u{0}a"),
            json!("A"),
            json!("a"),
            json!("a\u{0}"),
            json!("ab"),
            json!("é"),
        ];
        let encs: Vec<Vec<u8>> = vals.iter().cloned().map(enc).collect();
        for w in encs.windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
        for e in &encs {
            assert_eq!(encoded_len(e), Some(e.len()));
        }
    }

    #[test]
    fn equal_numbers_share_one_encoding() {
        assert_eq!(enc(json!(1)), enc(json!(1.0)));
        assert_eq!(enc(json!(0)), enc(json!(-0.0)));
        let mut out = Vec::new();
        assert!(!encode(&json!([1]), &mut out) && !encode(&json!({}), &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF]), None);
    }
}
