//! Partition keys: extraction from items and the engine key encoding (`docs/contract.md` §4).
//!
//! An item lives under the engine key `encode_prefix(pk) ++ id`. The prefix is self-delimiting
//! (no partition's prefix is a prefix of another partition's keys), so the items of one partition
//! are exactly a prefix scan of [`encode_prefix`].
//!
//! Prefix layout, one tag byte then a body:
//!
//! | value | bytes |
//! |---|---|
//! | undefined | `0x01` |
//! | null | `0x02` |
//! | false / true | `0x03` / `0x04` |
//! | number | `0x05` + 8 bytes, order-preserving big-endian `f64` |
//! | string | `0x06` + UTF-8 with `0x00` escaped as `0x00 0xFF`, then `0x00 0x01` |
//!
//! Numbers are JSON doubles, as in Azure Cosmos DB: `1`, `1.0` and `PartitionKey::from(1i64)` are
//! one partition, `-0.0` is `0.0`, and integers beyond 2^53 share a partition with their nearest
//! double.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::error::{Error, Result};

const TAG_UNDEFINED: u8 = 0x01;
const TAG_NULL: u8 = 0x02;
const TAG_FALSE: u8 = 0x03;
const TAG_TRUE: u8 = 0x04;
const TAG_NUMBER: u8 = 0x05;
const TAG_STRING: u8 = 0x06;
const ESCAPE: u8 = 0x00;
const ESCAPED_ZERO: u8 = 0xFF;
const TERMINATOR: u8 = 0x01;

/// The value of an item's partition key.
///
/// Equality is partition identity: numbers compare by their canonical double (`-0.0 == 0.0`).
#[derive(Debug, Clone)]
pub struct PartitionKey(Inner);

#[derive(Debug, Clone)]
enum Inner {
    Undefined,
    Null,
    Bool(bool),
    Number(f64),
    String(String),
}

/// The one bit pattern stored for a number: `-0.0` becomes `0.0`, every NaN the same NaN.
fn canonical(f: f64) -> f64 {
    if f == 0.0 {
        0.0
    } else if f.is_nan() {
        f64::NAN
    } else {
        f
    }
}

impl PartitionKey {
    /// The partition of items whose partition key value is JSON `null`.
    pub const NULL: PartitionKey = PartitionKey(Inner::Null);
    /// The partition of items that have no value at the partition key path.
    pub const UNDEFINED: PartitionKey = PartitionKey(Inner::Undefined);

    /// True for [`PartitionKey::UNDEFINED`].
    #[must_use]
    pub fn is_undefined(&self) -> bool {
        matches!(self.0, Inner::Undefined)
    }

    /// The JSON value of this key, `None` for undefined.
    #[must_use]
    pub fn to_json_value(&self) -> Option<Value> {
        match &self.0 {
            Inner::Undefined => None,
            Inner::Null => Some(Value::Null),
            Inner::Bool(b) => Some(Value::Bool(*b)),
            Inner::Number(n) => Some(number_value(*n)),
            Inner::String(s) => Some(Value::String(s.clone())),
        }
    }
}

/// A double as JSON: integral values within ±2^53 as integers (`1`, not `1.0`); NaN and the
/// infinities, which JSON cannot hold and no JSON item produces, as `null`.
#[allow(clippy::cast_possible_truncation)]
fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

impl PartialEq for PartitionKey {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Inner::Undefined, Inner::Undefined) | (Inner::Null, Inner::Null) => true,
            (Inner::Bool(a), Inner::Bool(b)) => a == b,
            (Inner::Number(a), Inner::Number(b)) => {
                canonical(*a).to_bits() == canonical(*b).to_bits()
            }
            (Inner::String(a), Inner::String(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for PartitionKey {}

impl Hash for PartitionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        encode_prefix(self).hash(state);
    }
}

impl From<&str> for PartitionKey {
    fn from(s: &str) -> Self {
        PartitionKey(Inner::String(s.to_owned()))
    }
}

impl From<String> for PartitionKey {
    fn from(s: String) -> Self {
        PartitionKey(Inner::String(s))
    }
}

impl From<&String> for PartitionKey {
    fn from(s: &String) -> Self {
        PartitionKey(Inner::String(s.clone()))
    }
}

impl From<bool> for PartitionKey {
    fn from(b: bool) -> Self {
        PartitionKey(Inner::Bool(b))
    }
}

impl From<f64> for PartitionKey {
    fn from(n: f64) -> Self {
        PartitionKey(Inner::Number(canonical(n)))
    }
}

macro_rules! from_integer {
    ($($t:ty),*) => {$(
        impl From<$t> for PartitionKey {
            /// Integers are JSON numbers, i.e. doubles; values beyond 2^53 are rounded.
            #[allow(clippy::cast_precision_loss, clippy::cast_lossless)]
            fn from(n: $t) -> Self {
                PartitionKey::from(n as f64)
            }
        }
    )*};
}
from_integer!(i32, i64, u32, u64);

/// One segment of a partition key path, with `~1` → `/` and `~0` → `~` undone.
fn unescape<'a>(path: &str, seg: &'a str) -> Result<Cow<'a, str>> {
    if !seg.contains('~') {
        return Ok(Cow::Borrowed(seg));
    }
    let mut out = String::with_capacity(seg.len());
    let mut chars = seg.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => {
                    return Err(Error::BadRequest(format!(
                        "partition key path '{path}' is invalid: '~' must be followed by '0' or '1'"
                    )))
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(Cow::Owned(out))
}

/// The unescaped segments of a valid partition key path.
fn segments(path: &str) -> Result<Vec<Cow<'_, str>>> {
    let bad =
        |why: &str| Error::BadRequest(format!("partition key path '{path}' is invalid: {why}"));
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad("it must start with '/'"));
    };
    if rest.is_empty() || rest.ends_with('/') {
        return Err(bad("it must not end with '/'"));
    }
    rest.split('/')
        .map(|seg| {
            if seg.is_empty() {
                Err(bad("it must not contain an empty segment ('//')"))
            } else {
                unescape(path, seg)
            }
        })
        .collect()
}

/// Checks a partition key path: starts with `/`, has non-empty segments, does not end with `/`,
/// and uses `~` only in the escapes `~0` (`~`) and `~1` (`/`).
pub fn validate_path(path: &str) -> Result<()> {
    segments(path).map(|_| ())
}

/// The longest string partition key value an item may carry, in UTF-8 bytes (Azure Cosmos DB's
/// limit). Longer ones are refused before anything is written: an engine key holds the value,
/// and one over the engine's key limit would fail only inside the write, after the document
/// layer had staged its index changes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;

/// The partition key of `item` at `path` (e.g. `/customerId`, `/address/zip`).
///
/// A value missing at any step (or a step through a non-object) gives
/// [`PartitionKey::UNDEFINED`], JSON `null` gives [`PartitionKey::NULL`]. An object or array
/// value, a string over [`MAX_PARTITION_KEY_BYTES`], or an invalid path, is a 400 naming the path.
pub fn extract(item: &Value, path: &str) -> Result<PartitionKey> {
    let mut at = item;
    for seg in segments(path)? {
        match at.as_object().and_then(|m| m.get(seg.as_ref())) {
            Some(v) => at = v,
            None => return Ok(PartitionKey::UNDEFINED),
        }
    }
    Ok(PartitionKey(match at {
        Value::Null => Inner::Null,
        Value::Bool(b) => Inner::Bool(*b),
        Value::Number(n) => Inner::Number(canonical(n.as_f64().unwrap_or(f64::NAN))),
        Value::String(s) if s.len() > MAX_PARTITION_KEY_BYTES => {
            return Err(Error::BadRequest(format!(
                "partition key value at path '{path}' is {} bytes long; the maximum is \
                 {MAX_PARTITION_KEY_BYTES}",
                s.len()
            )))
        }
        Value::String(s) => Inner::String(s.clone()),
        Value::Array(_) | Value::Object(_) => {
            return Err(Error::BadRequest(format!(
                "partition key value at path '{path}' must be a string, number, boolean or null, \
                 not {}",
                super::validate::json_kind(at)
            )))
        }
    }))
}

/// Order-preserving bytes of a double: sorts like the numbers themselves.
fn number_bytes(n: f64) -> [u8; 8] {
    let bits = canonical(n).to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    ordered.to_be_bytes()
}

fn number_from_bytes(b: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(b);
    let bits = if ordered >> 63 == 1 {
        ordered & !(1 << 63)
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

/// The engine key prefix shared by every item of partition `pk`; self-delimiting.
#[must_use]
pub fn encode_prefix(pk: &PartitionKey) -> Vec<u8> {
    match &pk.0 {
        Inner::Undefined => vec![TAG_UNDEFINED],
        Inner::Null => vec![TAG_NULL],
        Inner::Bool(false) => vec![TAG_FALSE],
        Inner::Bool(true) => vec![TAG_TRUE],
        Inner::Number(n) => {
            let mut out = Vec::with_capacity(9);
            out.push(TAG_NUMBER);
            out.extend_from_slice(&number_bytes(*n));
            out
        }
        Inner::String(s) => {
            let mut out = Vec::with_capacity(s.len() + 3);
            out.push(TAG_STRING);
            for &b in s.as_bytes() {
                out.push(b);
                if b == ESCAPE {
                    out.push(ESCAPED_ZERO);
                }
            }
            out.extend_from_slice(&[ESCAPE, TERMINATOR]);
            out
        }
    }
}

/// The engine key of item `id` in partition `pk`: `encode_prefix(pk)` followed by the id's bytes.
#[must_use]
pub fn encode_key(pk: &PartitionKey, id: &str) -> Vec<u8> {
    let mut out = encode_prefix(pk);
    out.extend_from_slice(id.as_bytes());
    out
}

/// Splits an engine key into its partition key and the rest; `None` when the prefix is malformed
/// or not in the one form [`encode_prefix`] writes.
pub fn decode_prefix(key: &[u8]) -> Option<(PartitionKey, &[u8])> {
    let (&tag, rest) = key.split_first()?;
    let inner = match tag {
        TAG_UNDEFINED => return Some((PartitionKey::UNDEFINED, rest)),
        TAG_NULL => return Some((PartitionKey::NULL, rest)),
        TAG_FALSE => return Some((PartitionKey::from(false), rest)),
        TAG_TRUE => return Some((PartitionKey::from(true), rest)),
        TAG_NUMBER => {
            let bytes: [u8; 8] = rest.get(..8)?.try_into().ok()?;
            let n = number_from_bytes(bytes);
            if n.to_bits() != canonical(n).to_bits() {
                return None;
            }
            return Some((PartitionKey(Inner::Number(n)), rest.get(8..)?));
        }
        TAG_STRING => rest,
        _ => return None,
    };
    let mut body = Vec::new();
    let mut i = 0;
    loop {
        let b = *inner.get(i)?;
        if b == ESCAPE {
            match *inner.get(i + 1)? {
                ESCAPED_ZERO => body.push(ESCAPE),
                TERMINATOR => break,
                _ => return None,
            }
            i += 2;
        } else {
            body.push(b);
            i += 1;
        }
    }
    let s = String::from_utf8(body).ok()?;
    Some((PartitionKey(Inner::String(s)), inner.get(i + 2..)?))
}

/// Inverse of [`encode_key`]; `None` when the key is malformed or the id is not UTF-8.
#[must_use]
pub fn decode_key(key: &[u8]) -> Option<(PartitionKey, String)> {
    let (pk, id) = decode_prefix(key)?;
    let id = std::str::from_utf8(id).ok()?;
    Some((pk, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn bad_request(r: Result<PartitionKey>) -> String {
        match r {
            Err(Error::BadRequest(m)) => m,
            other => panic!("expected BadRequest, got {other:?}"),
        }
    }

    /// The partition key of `item` at `path`, `None` on error.
    fn at(item: &Value, path: &str) -> Option<PartitionKey> {
        extract(item, path).ok()
    }

    fn some(pk: impl Into<PartitionKey>) -> Option<PartitionKey> {
        Some(pk.into())
    }

    #[test]
    fn extract_top_level_and_nested() {
        let item = json!({"id": "1", "customerId": "C1", "address": {"zip": 98052, "city": null}});
        assert_eq!(at(&item, "/customerId"), some("C1"));
        assert_eq!(at(&item, "/address/zip"), some(98052));
        assert_eq!(at(&item, "/address/city"), Some(PartitionKey::NULL));
    }

    #[test]
    fn extract_missing_is_undefined() {
        let item = json!({"id": "1", "address": {"zip": 1}, "s": "x"});
        // Missing at the first or a later step, or stepping through a non-object.
        for path in ["/customerId", "/address/street", "/nope/deeper", "/s/x"] {
            assert_eq!(at(&item, path), Some(PartitionKey::UNDEFINED), "{path}");
        }
        assert!(PartitionKey::UNDEFINED.is_undefined());
        assert_ne!(PartitionKey::UNDEFINED, PartitionKey::NULL);
    }

    #[test]
    fn extract_null_bool_number() {
        let item = json!({"n": null, "b": true, "f": 1.5});
        assert_eq!(at(&item, "/n"), Some(PartitionKey::NULL));
        assert_eq!(at(&item, "/b"), some(true));
        assert_eq!(at(&item, "/f"), some(1.5));
    }

    #[test]
    fn partition_key_value_object_rejected() {
        assert_eq!(
            bad_request(extract(&json!({"pk": {"a": 1}}), "/pk")),
            "partition key value at path '/pk' must be a string, number, boolean or null, \
             not an object"
        );
    }

    #[test]
    fn partition_key_value_array_rejected() {
        let err = extract(&json!({"a": {"b": [1]}}), "/a/b").err();
        assert_eq!(err.as_ref().map(Error::status_code), Some(400));
        assert_eq!(
            bad_request(extract(&json!({"a": {"b": [1]}}), "/a/b")),
            "partition key value at path '/a/b' must be a string, number, boolean or null, \
             not an array"
        );
    }

    #[test]
    fn extract_tilde_escapes() {
        let item = json!({"a/b": "slash", "m~n": "tilde", "x": {"~1": "lit"}});
        assert_eq!(at(&item, "/a~1b"), some("slash"));
        assert_eq!(at(&item, "/m~0n"), some("tilde"));
        assert_eq!(at(&item, "/x/~01"), some("lit"));
    }

    #[test]
    fn invalid_paths_rejected() {
        let cases = [
            ("pk", "it must start with '/'"),
            ("", "it must start with '/'"),
            ("/", "it must not end with '/'"),
            ("/a/", "it must not end with '/'"),
            ("/a//b", "it must not contain an empty segment ('//')"),
            ("/a~2", "'~' must be followed by '0' or '1'"),
            ("/a~", "'~' must be followed by '0' or '1'"),
        ];
        for (path, why) in cases {
            let want = format!("partition key path '{path}' is invalid: {why}");
            assert_eq!(
                bad_request(validate_path(path).map(|()| PartitionKey::NULL)),
                want
            );
            assert_eq!(bad_request(extract(&json!({}), path)), want);
        }
        assert!(validate_path("/a/b~0~1").is_ok());
    }

    #[test]
    fn integer_and_float_forms_are_one_partition() {
        assert_eq!(at(&json!({"p": 1}), "/p"), some(1i64));
        assert_eq!(at(&json!({"p": 1.0}), "/p"), some(1i64));
        let prefix = |pk: PartitionKey| encode_prefix(&pk);
        assert_eq!(prefix(1u32.into()), prefix(1.0.into()));
        assert_eq!(prefix((-0.0).into()), prefix(0i32.into()));
        assert_eq!(PartitionKey::from(-0.0), PartitionKey::from(0u64));
        assert_ne!(PartitionKey::from(1), PartitionKey::from("1"));
        assert_ne!(PartitionKey::from(1), PartitionKey::from(true));
    }

    #[test]
    fn string_keys_with_zero_bytes_do_not_overlap() {
        let a = PartitionKey::from("a");
        let a0b = PartitionKey::from("a\0b");
        let key = encode_key(&a0b, "x");
        assert!(!key.starts_with(&encode_prefix(&a)));
        assert!(!encode_key(&a, "\0b").starts_with(&encode_prefix(&a0b)));
        assert_eq!(encode_prefix(&"".into()), vec![TAG_STRING, 0, 1]);
        assert_eq!(encode_prefix(&"\0".into()), vec![TAG_STRING, 0, 0xFF, 0, 1]);
        assert_eq!(decode_key(&key), Some((a0b, "x".to_owned())));
    }

    #[test]
    fn malformed_keys_are_none() {
        assert_eq!(decode_key(&[]), None);
        assert_eq!(decode_key(&[0x7F]), None);
        assert_eq!(decode_key(&[TAG_NUMBER, 1, 2]), None);
        assert_eq!(decode_key(&[TAG_STRING, b'a']), None); // no terminator
        assert_eq!(decode_key(&[TAG_STRING, b'a', 0]), None); // cut terminator
        assert_eq!(decode_key(&[TAG_STRING, 0, 7]), None); // bad escape
        assert_eq!(decode_key(&[TAG_STRING, 0xC3, 0, 1]), None); // pk not UTF-8
        assert_eq!(decode_key(&[TAG_NULL, 0xFF]), None); // id not UTF-8
        let mut neg_zero = vec![TAG_NUMBER];
        neg_zero.extend_from_slice(&(!(-0.0f64).to_bits()).to_be_bytes());
        assert_eq!(decode_key(&neg_zero), None); // -0.0 is never written
        neg_zero.truncate(1);
        neg_zero.extend_from_slice(&number_bytes(0.0));
        assert_eq!(decode_key(&neg_zero), Some((0.into(), String::new())));
    }

    #[test]
    fn to_json_value_round_trips() {
        for v in [json!(null), json!(true), json!(2.5), json!(-7), json!("s")] {
            let pk = at(&json!({"p": v.clone()}), "/p");
            assert_eq!(pk.and_then(|p| p.to_json_value()), Some(v));
        }
        assert_eq!(PartitionKey::UNDEFINED.to_json_value(), None);
    }

    fn any_pk() -> impl Strategy<Value = PartitionKey> {
        prop_oneof![
            Just(PartitionKey::UNDEFINED),
            Just(PartitionKey::NULL),
            any::<bool>().prop_map(PartitionKey::from),
            any::<f64>().prop_map(PartitionKey::from),
            any::<i64>().prop_map(PartitionKey::from),
            "[a\\x00\\x01\\u{FF}é]{0,5}".prop_map(PartitionKey::from),
            any::<String>().prop_map(PartitionKey::from),
        ]
    }

    fn any_id() -> impl Strategy<Value = String> {
        prop_oneof!["[a\\x00\\x01\\u{FF}]{0,5}", any::<String>()]
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(pk in any_pk(), id in any_id()) {
            let key = encode_key(&pk, &id);
            prop_assert!(key.starts_with(&encode_prefix(&pk)));
            prop_assert_eq!(decode_key(&key), Some((pk, id)));
        }

        #[test]
        fn distinct_partitions_never_share_a_prefix(pk1 in any_pk(), pk2 in any_pk(), id in any_id()) {
            let key = encode_key(&pk2, &id);
            prop_assert_eq!(key.starts_with(&encode_prefix(&pk1)), pk1 == pk2);
        }

        #[test]
        fn a_string_partition_never_covers_its_extensions(
            s in "[a\\x00\\x01]{0,4}", t in "[a\\x00\\x01]{1,4}", id in any_id()
        ) {
            let (short, long) = (PartitionKey::from(s.clone()), PartitionKey::from(s + &t));
            let long_key = encode_key(&long, &id);
            let short_key = encode_key(&short, &(t + &id));
            prop_assert!(!long_key.starts_with(&encode_prefix(&short)));
            prop_assert!(!short_key.starts_with(&encode_prefix(&long)));
        }

        #[test]
        fn number_order_is_preserved(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (ea, eb) = (number_bytes(a), number_bytes(b));
            prop_assert_eq!(ea.cmp(&eb), a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal));
        }
    }
}
