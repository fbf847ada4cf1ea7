//! Logic of the `json_validation` fuzz target, shared with `tests/fuzz_corpus.rs`.
//!
//! Input: arbitrary bytes taken as JSON text (lossily as UTF-8 where needed). Checks, none of
//! which may panic:
//! - `ContainerProperties::from_json_str`: accepted properties pass `validate()` and survive a
//!   round trip through `to_json_value`/`from_json_value` and through serde.
//! - For a parsed value, the item validators (`item_object`, `validate_id`, `parse_item_ttl`,
//!   `partition::extract`) agree with `Container::create_item` in a fresh database: the create
//!   succeeds (or is a 413) exactly when every validator accepts, and is a 400 otherwise. A
//!   created item is stored as given, minus system properties, plus `_ts` and `_etag`, and
//!   reads back equal. The container is the one the input describes, when the input is valid
//!   container properties, so the partition key path comes from the input too.

use crate::scratch::scratch_dir;
use ebbdb::clock::ManualClock;
use ebbdb::doc::partition;
use ebbdb::doc::validate::{item_object, parse_item_ttl, validate_id, SYSTEM_PROPERTIES};
use ebbdb::{ContainerProperties, Database, Error, Options, SyncPolicy};
use serde_json::Value;

const T0: u64 = 1_700_000_000;
const MAX_ITEM: usize = 512;

/// Runs one input.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let props = ContainerProperties::from_json_str(&text);
    if let Ok(p) = &props {
        assert!(p.validate().is_ok(), "accepted properties fail validate()");
        let again = ContainerProperties::from_json_value(&p.to_json_value())
            .expect("to_json_value output is accepted");
        assert_eq!(&again, p, "properties JSON round trip");
        let via_serde = serde_json::to_string(p).expect("properties serialize");
        let back: ContainerProperties =
            serde_json::from_str(&via_serde).expect("serialized properties deserialize");
        assert_eq!(&back, p, "properties serde round trip");
    } else if let Err(e) = &props {
        assert_eq!(e.status_code(), 400, "properties error is not a 400: {e}");
    }

    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let props = props.unwrap_or_else(|_| ContainerProperties::new("c", "/pk"));
    let id = value.get("id");
    let verdicts = [
        item_object(&value).err(),
        validate_id(id).err(),
        parse_item_ttl(value.get("ttl")).err(),
        partition::extract(&value, &props.partition_key_path).err(),
    ];
    let valid = verdicts.iter().all(Option::is_none);
    for e in verdicts.iter().flatten() {
        assert_eq!(e.status_code(), 400, "validator error is not a 400: {e}");
    }
    // `item_object` failing implies the others see no object; they must not panic either way.

    let dir = scratch_dir();
    let opts = Options::default()
        .clock(ManualClock::at_unix_secs(T0))
        .sync(SyncPolicy::Never)
        .max_item_size(MAX_ITEM);
    let db = Database::open_with(dir.path(), opts).expect("open a fresh database");
    let container = db
        .create_container(props.clone())
        .expect("create a container from accepted properties");
    match container.create_item(&value) {
        Ok(stored) => {
            assert!(
                valid,
                "create_item accepted an item a validator rejects: {verdicts:?}"
            );
            assert!(
                stored_len(&value) <= MAX_ITEM,
                "accepted an item over the size limit"
            );
            check_stored(&value, &stored);
            let pk = partition::extract(&value, &props.partition_key_path).expect("pk extracts");
            let id = stored["id"].as_str().expect("stored id is a string");
            let read: Value = container
                .read_item(pk, id)
                .expect("created item reads back");
            assert_eq!(read, stored, "read-back differs from the stored item");
            assert_eq!(container.count().ok(), Some(1), "count after one create");
        }
        Err(Error::TooLarge(_)) => {
            assert!(valid, "413 for an item a validator rejects: {verdicts:?}");
            let len = stored_len(&value);
            assert!(len > MAX_ITEM, "413 for an item stored in {len} bytes");
        }
        Err(e) => {
            assert!(
                !valid,
                "create_item rejected an item every validator accepts: {e}"
            );
            assert_eq!(e.status_code(), 400, "create_item error is not a 400: {e}");
        }
    }
}

/// Serialized length of `item` as it would be stored: system properties stripped, `_ts` and an
/// `_etag` of the engine's fixed-width format added.
fn stored_len(item: &Value) -> usize {
    let mut map = item.as_object().cloned().unwrap_or_default();
    for k in SYSTEM_PROPERTIES {
        map.remove(k);
    }
    map.insert("_ts".into(), Value::from(T0));
    let etag = format!("\"{:012x}-{:016x}-{:08x}\"", T0 * 1000, 0, 0);
    map.insert("_etag".into(), Value::String(etag));
    serde_json::to_vec(&Value::Object(map)).map_or(usize::MAX, |v| v.len())
}

/// The stored item is the input minus system properties plus `_ts` and `_etag`.
fn check_stored(input: &Value, stored: &Value) {
    let (Some(inp), Some(out)) = (input.as_object(), stored.as_object()) else {
        panic!("created item is not an object");
    };
    assert_eq!(out.get("_ts"), Some(&Value::from(T0)), "_ts");
    assert!(out.get("_etag").is_some_and(Value::is_string), "_etag");
    for (k, v) in inp {
        if !SYSTEM_PROPERTIES.contains(&k.as_str()) {
            assert_eq!(out.get(k), Some(v), "property {k} changed");
        }
    }
    for k in out.keys() {
        assert!(
            k == "_ts" || k == "_etag" || inp.contains_key(k),
            "property {k} appeared"
        );
    }
}

/// Seed inputs: container properties, items, and things near the rules' edges.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"id": "orders", "partitionKey": {"paths": ["/customerId"], "kind": "Hash"}, "defaultTtl": -1, "indexingPolicy": {"indexingMode": "consistent"}}"#,
        r#"{"id": "c", "partitionKey": {"paths": ["/a/b~1c"]}, "defaultTtl": 2147483647, "indexingPolicy": {"indexingMode": "lazy"}}"#,
        r#"{"id": "n", "partitionKey": {"paths": ["/pk"]}, "defaultTtl": 10, "indexingPolicy": {"indexingMode": "none"}}"#,
        r#"{"id": "SO05", "customerId": "C1", "pk": "p", "ttl": 30, "_ts": 5, "_etag": "x", "nested": {"a": [1, 2.5, null, true]}}"#,
        r#"{"id": "a/b", "pk": 1.0, "ttl": 0}"#,
        r#"{"id": "x", "pk": null, "ttl": -1, "_rid": "r", "_self": "s", "_attachments": "t"}"#,
        r#"{"id": "x", "pk": {"o": 1}, "ttl": 1e1}"#,
        r#"{"id": 5, "pk": "x"}"#,
        r#"{"id": "ééé", "ttl": 2147483648}"#,
        r#"[1, "two", {"id": "3"}]"#,
        r#"{"id": "big", "pk": "p", "blob": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
        "",
        "{\"id\": \"\\u0000\", \"ttl\": -1.0}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
