//! Validation of item bodies: `ttl`, `id`, object shape and system properties
//! (`docs/contract.md` §3, §4).
//!
//! Every failure is an [`Error::BadRequest`] (HTTP 400). The TTL messages are the exact Azure
//! Cosmos DB texts; the others name the offending field.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ttl::{ItemTtl, MAX_TTL_SECS};

/// Longest allowed `id`, in characters (Unicode scalar values, not bytes).
pub const MAX_ID_CHARS: usize = 255;

/// Characters an `id` may not contain.
pub const FORBIDDEN_ID_CHARS: [char; 4] = ['/', '\\', '?', '#'];

/// System properties that [`strip_system_properties`] removes from a caller's item.
///
/// These are the properties Azure Cosmos DB owns; the store writes `_ts` and `_etag` itself and
/// does not use the others, so values supplied for any of them are dropped.
pub const SYSTEM_PROPERTIES: [&str; 5] = ["_ts", "_etag", "_rid", "_self", "_attachments"];

/// The offending value "as written" for an error message: a string's contents without quotes,
/// anything else as compact JSON text (numbers as `serde_json` prints them, e.g. `1e1` as `10.0`).
pub(crate) fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) use crate::ttl::invalid_ttl;

/// Parses a TTL value that must be `-1` or a whole number in `1..=2147483647`.
///
/// Returns `Ok(None)` for `-1`, `Ok(Some(n))` for `n` seconds, and the Cosmos message for `field`
/// otherwise. Fractions (`10.5`, and `1e1`, which JSON reads as a float) are rejected.
pub(crate) fn parse_ttl_number(field: &str, v: &Value) -> Result<Option<u32>> {
    match v.as_i64() {
        Some(-1) => Ok(None),
        Some(n) if n >= 1 && n <= i64::from(MAX_TTL_SECS) => u32::try_from(n)
            .map(Some)
            .map_err(|_| invalid_ttl(field, &render(v))),
        _ => Err(invalid_ttl(field, &render(v))),
    }
}

/// Parses an item's own `ttl` property (`docs/contract.md` §2 rule 2).
///
/// Absent → [`ItemTtl::Inherit`], `-1` → [`ItemTtl::Never`], `1..=2147483647` →
/// [`ItemTtl::Seconds`]. Anything else (0, below -1, above the maximum, `null`, a fraction, a
/// string, bool, array or object) is a 400 with the exact Cosmos message, whatever the
/// container's TTL setting.
pub fn parse_item_ttl(v: Option<&Value>) -> Result<ItemTtl> {
    match v {
        None => Ok(ItemTtl::Inherit),
        Some(v) => Ok(match parse_ttl_number("ttl", v)? {
            None => ItemTtl::Never,
            Some(n) => ItemTtl::Seconds(n),
        }),
    }
}

/// Checks an id string against the rules shared by items and containers; `what` names the owner
/// (`item` or `container`) in the message.
fn check_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::BadRequest(format!("{what} 'id' must not be empty")));
    }
    let chars = id.chars().count();
    if chars > MAX_ID_CHARS {
        return Err(Error::BadRequest(format!(
            "{what} 'id' is {chars} characters long; the maximum is {MAX_ID_CHARS}"
        )));
    }
    if let Some(c) = id.chars().find(|c| FORBIDDEN_ID_CHARS.contains(c)) {
        return Err(Error::BadRequest(format!(
            "{what} 'id' must not contain '/', '\\', '?' or '#' (found '{c}')"
        )));
    }
    Ok(())
}

/// Validates an item's `id` property and returns it.
///
/// 400 naming `id` when it is missing, not a string, empty, longer than 255 characters, or
/// contains `/`, `\`, `?` or `#`.
pub fn validate_id(v: Option<&Value>) -> Result<&str> {
    match v {
        None => Err(Error::BadRequest(
            "item 'id' is missing; every item needs a string 'id'".to_owned(),
        )),
        Some(Value::String(id)) => check_id("item", id).map(|()| id.as_str()),
        Some(other) => Err(Error::BadRequest(format!(
            "item 'id' must be a string, not {}",
            json_kind(other)
        ))),
    }
}

/// Validates a container id with the same rules as an item id (non-empty, at most 255
/// characters, none of `/ \ ? #`).
pub fn validate_container_id(id: &str) -> Result<()> {
    check_id("container", id)
}

/// Returns the item as a JSON object, or a 400 when it is anything else.
pub fn item_object(v: &Value) -> Result<&Map<String, Value>> {
    v.as_object().ok_or_else(|| {
        Error::BadRequest(format!("item must be a JSON object, not {}", json_kind(v)))
    })
}

/// The JSON type name of a value, for messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Removes caller-supplied system properties ([`SYSTEM_PROPERTIES`]: `_ts`, `_etag`, `_rid`,
/// `_self`, `_attachments`) from an item before it is stamped and stored.
pub fn strip_system_properties(map: &mut Map<String, Value>) {
    for key in SYSTEM_PROPERTIES {
        map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ttl_msg(v: &str) -> String {
        format!(
            "The input ttl '{v}' is invalid. Ensure to provide a nonzero positive integer less than \
             or equal to '2147483647', or '-1' which means never expire."
        )
    }

    /// Asserts `parse_item_ttl` rejects `v` with the Cosmos text showing `shown`.
    fn rejects_ttl(v: Value, shown: &str) {
        match parse_item_ttl(Some(&v)) {
            Err(Error::BadRequest(m)) => assert_eq!(m, ttl_msg(shown), "for {v}"),
            other => panic!("expected 400 for ttl {v}, got {other:?}"),
        }
        let err = parse_item_ttl(Some(&v)).err();
        assert_eq!(err.map(|e| e.status_code()), Some(400));
    }

    fn bad_request(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::BadRequest(m)) => m,
            other => panic!("expected BadRequest, got {other:?}"),
        }
    }

    #[test]
    fn ttl_message_is_the_exact_cosmos_text() {
        assert_eq!(
            bad_request(parse_item_ttl(Some(&json!(0)))),
            "The input ttl '0' is invalid. Ensure to provide a nonzero positive integer less than \
             or equal to '2147483647', or '-1' which means never expire."
        );
    }

    #[test]
    fn ttl_absent_inherits() {
        assert_eq!(parse_item_ttl(None).ok(), Some(ItemTtl::Inherit));
    }

    #[test]
    fn ttl_valid_values() {
        assert_eq!(parse_item_ttl(Some(&json!(-1))).ok(), Some(ItemTtl::Never));
        assert_eq!(
            parse_item_ttl(Some(&json!(1))).ok(),
            Some(ItemTtl::Seconds(1))
        );
        assert_eq!(
            parse_item_ttl(Some(&json!(2_147_483_647))).ok(),
            Some(ItemTtl::Seconds(MAX_TTL_SECS))
        );
    }

    #[test]
    fn ttl_zero_rejected() {
        rejects_ttl(json!(0), "0");
    }

    #[test]
    fn ttl_below_minus_one_rejected() {
        rejects_ttl(json!(-2), "-2");
        rejects_ttl(json!(i64::MIN), "-9223372036854775808");
    }

    #[test]
    fn ttl_above_max_rejected() {
        rejects_ttl(json!(2_147_483_648_i64), "2147483648");
        rejects_ttl(json!(u64::MAX), "18446744073709551615");
    }

    #[test]
    fn ttl_null_rejected() {
        rejects_ttl(Value::Null, "null");
    }

    #[test]
    fn ttl_fraction_rejected() {
        rejects_ttl(json!(10.5), "10.5");
        rejects_ttl(json!(-1.0), "-1.0");
    }

    #[test]
    fn ttl_exponent_form_rejected() {
        let v: Value = serde_json::from_str("1e1").unwrap_or(Value::Null);
        assert!(v.is_f64());
        rejects_ttl(v, "10.0");
    }

    #[test]
    fn ttl_string_rejected() {
        rejects_ttl(json!("10"), "10");
        rejects_ttl(json!("abc"), "abc");
    }

    #[test]
    fn ttl_bool_rejected() {
        rejects_ttl(json!(true), "true");
        rejects_ttl(json!(false), "false");
    }

    #[test]
    fn ttl_array_rejected() {
        rejects_ttl(json!([10]), "[10]");
    }

    #[test]
    fn ttl_object_rejected() {
        rejects_ttl(json!({"s": 10}), r#"{"s":10}"#);
    }

    #[test]
    fn id_valid() {
        let v = json!("SO05");
        assert_eq!(validate_id(Some(&v)).ok(), Some("SO05"));
        let long = json!("é".repeat(255)); // 255 chars, 510 bytes
        assert!(validate_id(Some(&long)).is_ok());
    }

    #[test]
    fn id_missing_rejected() {
        assert_eq!(
            bad_request(validate_id(None)),
            "item 'id' is missing; every item needs a string 'id'"
        );
    }

    #[test]
    fn id_not_a_string_rejected() {
        assert_eq!(
            bad_request(validate_id(Some(&json!(5)))),
            "item 'id' must be a string, not a number"
        );
        assert_eq!(
            bad_request(validate_id(Some(&Value::Null))),
            "item 'id' must be a string, not null"
        );
    }

    #[test]
    fn id_empty_rejected() {
        assert_eq!(
            bad_request(validate_id(Some(&json!("")))),
            "item 'id' must not be empty"
        );
    }

    #[test]
    fn id_over_255_chars_rejected() {
        assert_eq!(
            bad_request(validate_id(Some(&json!("a".repeat(256))))),
            "item 'id' is 256 characters long; the maximum is 255"
        );
        assert!(validate_id(Some(&json!("é".repeat(256)))).is_err());
    }

    #[test]
    fn id_forbidden_chars_rejected() {
        for c in ['/', '\\', '?', '#'] {
            let id = json!(format!("a{c}b"));
            assert_eq!(
                bad_request(validate_id(Some(&id))),
                format!("item 'id' must not contain '/', '\\', '?' or '#' (found '{c}')")
            );
        }
    }

    #[test]
    fn container_id_rules() {
        assert!(validate_container_id("orders").is_ok());
        assert_eq!(
            bad_request(validate_container_id("")),
            "container 'id' must not be empty"
        );
        assert_eq!(
            bad_request(validate_container_id("a/b")),
            "container 'id' must not contain '/', '\\', '?' or '#' (found '/')"
        );
        assert!(validate_container_id(&"x".repeat(256)).is_err());
        assert!(validate_container_id(&"x".repeat(255)).is_ok());
    }

    #[test]
    fn item_not_an_object_rejected() {
        assert_eq!(
            bad_request(item_object(&json!([1]))),
            "item must be a JSON object, not an array"
        );
        assert_eq!(
            bad_request(item_object(&json!("x"))),
            "item must be a JSON object, not a string"
        );
        let obj = json!({"id": "a"});
        assert_eq!(item_object(&obj).ok().map(Map::len), Some(1));
    }

    #[test]
    fn strip_removes_system_properties_only() {
        let mut m = match json!({"id": "a", "_ts": 1, "_etag": "x", "_rid": "r", "_self": "s",
            "_attachments": "t", "_other": 1, "ttl": 5})
        {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        strip_system_properties(&mut m);
        assert_eq!(Value::Object(m), json!({"id": "a", "_other": 1, "ttl": 5}));
    }
}
