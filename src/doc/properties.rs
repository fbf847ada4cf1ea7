//! Container properties in the Azure Cosmos DB REST shape (`docs/contract.md` §2, §3, §6).
//!
//! ```json
//! {"id": "orders", "partitionKey": {"paths": ["/customerId"], "kind": "Hash"},
//!  "defaultTtl": -1, "indexingPolicy": {"indexingMode": "consistent"}}
//! ```
//!
//! On input `defaultTtl` absent means Off, `indexingPolicy` and `kind` are optional, and other
//! properties (`_rid`, `_ts`, `conflictResolutionPolicy`, ...) are ignored.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

use super::partition::validate_path;
use super::validate::{invalid_ttl, json_kind, parse_ttl_number, render, validate_container_id};
use crate::error::{Error, Result};
use crate::ttl::DefaultTtl;

/// The message for indexing mode `none` together with a default TTL (exact Cosmos text).
const NONE_WITH_TTL: &str =
    "Indexing mode value cannot be 'none' when 'defaultTtl' is specified in the collection";

/// How a container indexes its items (Cosmos `indexingPolicy.indexingMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IndexingMode {
    /// `"consistent"`: the default.
    #[default]
    Consistent,
    /// `"lazy"`.
    Lazy,
    /// `"none"`: not allowed together with a default TTL.
    None,
}

impl IndexingMode {
    /// The Cosmos JSON spelling: `"consistent"`, `"lazy"` or `"none"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            IndexingMode::Consistent => "consistent",
            IndexingMode::Lazy => "lazy",
            IndexingMode::None => "none",
        }
    }

    /// Parses the Cosmos spelling, case-insensitively; `None` for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [
            IndexingMode::Consistent,
            IndexingMode::Lazy,
            IndexingMode::None,
        ]
        .into_iter()
        .find(|m| m.as_str().eq_ignore_ascii_case(s))
    }
}

impl Serialize for IndexingMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for IndexingMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        IndexingMode::parse(&s).ok_or_else(|| D::Error::custom(invalid_mode(&s)))
    }
}

fn invalid_mode(shown: &str) -> String {
    format!(
        "indexingPolicy.indexingMode '{shown}' is invalid; expected 'consistent', 'lazy' or 'none'"
    )
}

/// The settings of a container: id, partition key path, default TTL and indexing mode.
///
/// Serializes to and from the Azure Cosmos DB REST shape; invalid values fail with the Cosmos
/// messages.
///
/// ```
/// use ebbdb::{ContainerProperties, DefaultTtl};
///
/// let props = ContainerProperties::new("orders", "/customerId")
///     .with_default_ttl(DefaultTtl::Seconds(90 * 86_400));
/// let json = props.to_json_value();
/// assert_eq!(json["partitionKey"]["paths"][0], "/customerId");
/// assert_eq!(json["defaultTtl"], 7_776_000);
/// assert_eq!(ContainerProperties::from_json_value(&json)?, props);
///
/// let bad = ContainerProperties::from_json_str(
///     r#"{"id": "x", "partitionKey": {"paths": ["/p"]}, "defaultTtl": 0}"#);
/// assert_eq!(bad.unwrap_err().status_code(), 400);
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProperties {
    /// Container id: non-empty, at most 255 characters, none of `/ \ ? #`.
    pub id: String,
    /// Partition key path such as `/customerId` or `/address/zip`.
    pub partition_key_path: String,
    /// Default TTL of the container's items (Off unless set).
    pub default_ttl: DefaultTtl,
    /// Indexing mode (consistent unless set).
    pub indexing_mode: IndexingMode,
    /// Change feed retention in minutes (Cosmos `changeFeedPolicy.retentionDuration`): how
    /// long the all-versions-and-deletes change feed keeps superseded versions, deletes and
    /// expiries. `None` (the default): off, and that mode is a 400 for this container.
    pub change_feed_retention_minutes: Option<u32>,
    /// `indexingPolicy.includedPaths` (Cosmos path strings such as `/status/?`): the paths
    /// that get a secondary index (`doc/index/policy.rs` says which forms are indexed). Empty
    /// unless set: queries then scan.
    pub included_paths: Vec<String>,
    /// `indexingPolicy.excludedPaths`: an included path also listed here is not indexed.
    pub excluded_paths: Vec<String>,
}

/// The largest change feed retention in minutes: its seconds still fit a record's TTL.
pub const MAX_RETENTION_MINUTES: u32 = 35_791_394;

impl ContainerProperties {
    /// New properties with TTL Off and consistent indexing.
    pub fn new(id: impl Into<String>, partition_key_path: impl Into<String>) -> Self {
        ContainerProperties {
            id: id.into(),
            partition_key_path: partition_key_path.into(),
            default_ttl: DefaultTtl::Off,
            indexing_mode: IndexingMode::Consistent,
            change_feed_retention_minutes: None,
            included_paths: Vec::new(),
            excluded_paths: Vec::new(),
        }
    }

    /// Adds Cosmos index paths to `indexingPolicy.includedPaths` (`"/status/?"`): each gets an
    /// ordered secondary index that queries use for `=`, `IN`, ranges, `BETWEEN` and
    /// `STARTSWITH`.
    #[must_use]
    pub fn with_included_paths<S: Into<String>>(
        mut self,
        paths: impl IntoIterator<Item = S>,
    ) -> Self {
        self.included_paths
            .extend(paths.into_iter().map(Into::into));
        self
    }

    /// Adds paths to `indexingPolicy.excludedPaths`.
    #[must_use]
    pub fn with_excluded_paths<S: Into<String>>(
        mut self,
        paths: impl IntoIterator<Item = S>,
    ) -> Self {
        self.excluded_paths
            .extend(paths.into_iter().map(Into::into));
        self
    }

    /// The property paths that get a secondary index (from the included and excluded paths).
    pub(crate) fn indexed_paths(&self) -> Result<Vec<Vec<String>>> {
        super::index::policy::indexed_paths(&self.included_paths, &self.excluded_paths)
    }

    /// Turns on the all-versions-and-deletes change feed with a retention window of `minutes`
    /// (1 to 35,791,394; `0` turns it off). Checked by [`ContainerProperties::validate`].
    #[must_use]
    pub fn with_change_feed_retention_minutes(mut self, minutes: u32) -> Self {
        self.change_feed_retention_minutes = (minutes > 0).then_some(minutes);
        self
    }

    /// The retention window in seconds, if the all-versions change feed is on.
    pub(crate) fn retention_secs(&self) -> Option<u64> {
        self.change_feed_retention_minutes
            .map(|m| u64::from(m.min(MAX_RETENTION_MINUTES)) * 60)
    }

    /// Sets the default TTL.
    #[must_use]
    pub fn with_default_ttl(mut self, ttl: DefaultTtl) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Sets the indexing mode.
    #[must_use]
    pub fn with_indexing_mode(mut self, mode: IndexingMode) -> Self {
        self.indexing_mode = mode;
        self
    }

    /// Checks every rule: the container id, the partition key path (starts with `/`, non-empty
    /// segments, no trailing `/`), `DefaultTtl::Seconds(n)` with `n` in `1..=2147483647`, and no
    /// indexing mode `none` with a default TTL other than Off. Errors are 400s with the
    /// messages of `docs/contract.md` §3.
    pub fn validate(&self) -> Result<()> {
        validate_container_id(&self.id)?;
        validate_path(&self.partition_key_path)?;
        if let DefaultTtl::Seconds(n) = self.default_ttl {
            if !self.default_ttl.is_valid() {
                return Err(invalid_ttl("defaultTtl", &n.to_string()));
            }
        }
        if self.indexing_mode == IndexingMode::None && self.default_ttl != DefaultTtl::Off {
            return Err(Error::BadRequest(NONE_WITH_TTL.to_owned()));
        }
        if let Some(m) = self.change_feed_retention_minutes {
            if m == 0 || m > MAX_RETENTION_MINUTES {
                return Err(invalid_retention(&m.to_string()));
            }
        }
        self.indexed_paths()?;
        Ok(())
    }

    /// Reads and validates properties from the Cosmos REST shape.
    pub fn from_json_value(v: &Value) -> Result<Self> {
        let obj = v.as_object().ok_or_else(|| {
            Error::BadRequest(format!(
                "container properties must be a JSON object, not {}",
                json_kind(v)
            ))
        })?;
        let id = match obj.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::BadRequest(format!(
                    "container 'id' must be a string, not {}",
                    json_kind(other)
                )))
            }
            None => return Err(Error::BadRequest("container 'id' is missing".to_owned())),
        };
        validate_container_id(&id)?;
        let partition_key_path = parse_partition_key(obj.get("partitionKey"))?;
        let default_ttl = parse_default_ttl(obj.get("defaultTtl"))?;
        let indexing_mode = parse_indexing_policy(obj.get("indexingPolicy"))?;
        let change_feed_retention_minutes = parse_change_feed_policy(obj.get("changeFeedPolicy"))?;
        let policy = obj.get("indexingPolicy");
        let included_paths = parse_policy_paths(policy, "includedPaths")?;
        let excluded_paths = parse_policy_paths(policy, "excludedPaths")?;
        let props = ContainerProperties {
            id,
            partition_key_path,
            default_ttl,
            indexing_mode,
            change_feed_retention_minutes,
            included_paths,
            excluded_paths,
        };
        props.validate()?;
        Ok(props)
    }

    /// Parses JSON text in the Cosmos REST shape; malformed JSON is a 400 naming the problem.
    pub fn from_json_str(s: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(s).map_err(|e| {
            Error::BadRequest(format!("container properties are not valid JSON: {e}"))
        })?;
        Self::from_json_value(&v)
    }

    /// The Cosmos REST shape; `defaultTtl` is omitted when Off.
    #[must_use]
    pub fn to_json_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("id".to_owned(), Value::String(self.id.clone()));
        obj.insert(
            "partitionKey".to_owned(),
            json!({"paths": [self.partition_key_path], "kind": "Hash"}),
        );
        if let Some(ttl) = self.default_ttl.to_json_value() {
            obj.insert("defaultTtl".to_owned(), Value::from(ttl));
        }
        let mut policy = Map::new();
        policy.insert(
            "indexingMode".to_owned(),
            Value::from(self.indexing_mode.as_str()),
        );
        for (name, paths) in [
            ("includedPaths", &self.included_paths),
            ("excludedPaths", &self.excluded_paths),
        ] {
            if !paths.is_empty() {
                let list = paths.iter().map(|p| json!({ "path": p })).collect();
                policy.insert(name.to_owned(), Value::Array(list));
            }
        }
        obj.insert("indexingPolicy".to_owned(), Value::Object(policy));
        if let Some(m) = self.change_feed_retention_minutes {
            obj.insert(
                "changeFeedPolicy".to_owned(),
                json!({ "retentionDuration": m }),
            );
        }
        Value::Object(obj)
    }
}

/// Parses a container's `defaultTtl` (`docs/contract.md` §2 rule 1): `None` (absent) → Off,
/// `-1` → NeverExpire, `1..=2147483647` → Seconds; anything else (0, below -1, above the
/// maximum, `null`, a non-integer, a string, bool, array or object) is a 400 with the exact
/// Cosmos message.
pub fn parse_default_ttl(v: Option<&Value>) -> Result<DefaultTtl> {
    match v {
        None => Ok(DefaultTtl::Off),
        Some(v) => Ok(match parse_ttl_number("defaultTtl", v)? {
            None => DefaultTtl::NeverExpire,
            Some(n) => DefaultTtl::Seconds(n),
        }),
    }
}

/// `partitionKey`: an object with `paths` holding exactly one valid path, and optional
/// `kind` `"Hash"`.
fn parse_partition_key(v: Option<&Value>) -> Result<String> {
    let bad = |m: &str| Err(Error::BadRequest(m.to_owned()));
    let Some(v) = v else {
        return bad("container 'partitionKey' is missing");
    };
    let Some(pk) = v.as_object() else {
        return bad("container 'partitionKey' must be an object with 'paths'");
    };
    match pk.get("kind") {
        None => {}
        Some(Value::String(k)) if k.eq_ignore_ascii_case("hash") => {}
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "partitionKey.kind '{}' is not supported; only 'Hash' is",
                render(other)
            )))
        }
    }
    match pk.get("paths").and_then(Value::as_array).map(Vec::as_slice) {
        Some([Value::String(path)]) => {
            validate_path(path)?;
            Ok(path.clone())
        }
        _ => bad("partitionKey.paths must be an array of exactly one path string"),
    }
}

fn invalid_retention(shown: &str) -> Error {
    Error::BadRequest(format!(
        "changeFeedPolicy.retentionDuration '{shown}' is invalid; expected a whole number of \
         minutes from 0 (off) to {MAX_RETENTION_MINUTES}"
    ))
}

/// `changeFeedPolicy`: optional object whose optional `retentionDuration` is a whole number of
/// minutes (0 or absent: off).
fn parse_change_feed_policy(v: Option<&Value>) -> Result<Option<u32>> {
    let Some(v) = v else {
        return Ok(None);
    };
    if v.is_null() {
        return Ok(None);
    }
    let Some(policy) = v.as_object() else {
        return Err(Error::BadRequest(format!(
            "container 'changeFeedPolicy' must be an object, not {}",
            json_kind(v)
        )));
    };
    match policy.get("retentionDuration") {
        None => Ok(None),
        Some(d) => match d.as_u64() {
            Some(0) => Ok(None),
            Some(m) if m <= u64::from(MAX_RETENTION_MINUTES) => Ok(u32::try_from(m).ok()),
            _ => Err(invalid_retention(&render(d))),
        },
    }
}

/// `indexingPolicy`: optional object whose optional `indexingMode` is a mode string.
fn parse_indexing_policy(v: Option<&Value>) -> Result<IndexingMode> {
    let Some(v) = v else {
        return Ok(IndexingMode::Consistent);
    };
    let Some(policy) = v.as_object() else {
        return Err(Error::BadRequest(format!(
            "container 'indexingPolicy' must be an object, not {}",
            json_kind(v)
        )));
    };
    match policy.get("indexingMode") {
        None => Ok(IndexingMode::Consistent),
        Some(Value::String(s)) => {
            IndexingMode::parse(s).ok_or_else(|| Error::BadRequest(invalid_mode(s)))
        }
        Some(other) => Err(Error::BadRequest(invalid_mode(&render(other)))),
    }
}

/// `indexingPolicy.includedPaths` / `excludedPaths`: absent, or an array of objects each
/// with a `path` string (other members, such as Cosmos's `indexes`, are ignored). Each path
/// is checked (`doc/index/policy.rs`); anything else is a 400 naming the field.
fn parse_policy_paths(policy: Option<&Value>, field: &str) -> Result<Vec<String>> {
    let Some(list) = policy.and_then(|p| p.get(field)) else {
        return Ok(Vec::new());
    };
    let Some(list) = list.as_array() else {
        return Err(Error::BadRequest(format!(
            "indexingPolicy.{field} must be an array of {{\"path\": ...}} objects, not {}",
            json_kind(list)
        )));
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| match item.get("path") {
            Some(Value::String(p)) if item.is_object() => {
                super::index::policy::parse_path(field, p)?;
                Ok(p.clone())
            }
            _ => Err(Error::BadRequest(format!(
                "indexingPolicy.{field}[{i}] must be an object with a 'path' string, not {}",
                render(item)
            ))),
        })
        .collect()
}

impl Serialize for ContainerProperties {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Pk<'a> {
            paths: [&'a str; 1],
            kind: &'static str,
        }
        #[derive(Serialize)]
        struct IndexPath<'a> {
            path: &'a str,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Policy<'a> {
            indexing_mode: IndexingMode,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            included_paths: Vec<IndexPath<'a>>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            excluded_paths: Vec<IndexPath<'a>>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            id: &'a str,
            partition_key: Pk<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            default_ttl: Option<i64>,
            indexing_policy: Policy<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            change_feed_policy: Option<FeedPolicy>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct FeedPolicy {
            retention_duration: u32,
        }
        fn paths(list: &[String]) -> Vec<IndexPath<'_>> {
            list.iter().map(|p| IndexPath { path: p }).collect()
        }
        Wire {
            id: &self.id,
            partition_key: Pk {
                paths: [&self.partition_key_path],
                kind: "Hash",
            },
            default_ttl: self.default_ttl.to_json_value(),
            indexing_policy: Policy {
                indexing_mode: self.indexing_mode,
                included_paths: paths(&self.included_paths),
                excluded_paths: paths(&self.excluded_paths),
            },
            change_feed_policy: self.change_feed_retention_minutes.map(|m| FeedPolicy {
                retention_duration: m,
            }),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ContainerProperties {
    /// Accepts the Cosmos shape through [`ContainerProperties::from_json_value`], so the error
    /// messages are the same.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        ContainerProperties::from_json_value(&v).map_err(|e| match e {
            Error::BadRequest(m) => D::Error::custom(m),
            other => D::Error::custom(other),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_ttl_msg(v: &str) -> String {
        format!(
            "The input defaultTtl '{v}' is invalid. Ensure to provide a nonzero positive integer \
             less than or equal to '2147483647', or '-1' which means never expire."
        )
    }

    fn bad_request<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::BadRequest(m)) => m,
            other => panic!("expected BadRequest, got {other:?}"),
        }
    }

    /// The 400 message of `from_json_value(body)`.
    fn err(body: &Value) -> String {
        bad_request(ContainerProperties::from_json_value(body))
    }

    fn pk(path: &str) -> Value {
        json!({"paths": [path]})
    }

    /// Asserts `defaultTtl: v` fails with the Cosmos text showing `shown`, through every entry.
    fn rejects_default_ttl(v: Value, shown: &str) {
        let want = default_ttl_msg(shown);
        assert_eq!(bad_request(parse_default_ttl(Some(&v))), want);
        let body = json!({"id": "orders", "partitionKey": pk("/customerId"), "defaultTtl": v});
        assert_eq!(err(&body), want);
        let text = body.to_string();
        assert_eq!(bad_request(ContainerProperties::from_json_str(&text)), want);
        let serde_err = serde_json::from_value::<ContainerProperties>(body).err();
        assert_eq!(serde_err.map(|e| e.to_string()), Some(want));
    }

    #[test]
    fn default_ttl_message_is_the_exact_cosmos_text() {
        assert_eq!(
            bad_request(parse_default_ttl(Some(&json!(0)))),
            "The input defaultTtl '0' is invalid. Ensure to provide a nonzero positive integer less \
             than or equal to '2147483647', or '-1' which means never expire."
        );
    }

    #[test]
    fn default_ttl_valid_values() {
        let parse = |v: Value| parse_default_ttl(Some(&v)).ok();
        assert_eq!(parse_default_ttl(None).ok(), Some(DefaultTtl::Off));
        assert_eq!(parse(json!(-1)), Some(DefaultTtl::NeverExpire));
        assert_eq!(parse(json!(1)), Some(DefaultTtl::Seconds(1)));
        let max = DefaultTtl::Seconds(2_147_483_647);
        assert_eq!(parse(json!(2_147_483_647)), Some(max));
    }

    #[test]
    fn default_ttl_zero_rejected() {
        rejects_default_ttl(json!(0), "0");
    }

    #[test]
    fn default_ttl_below_minus_one_rejected() {
        rejects_default_ttl(json!(-2), "-2");
    }

    #[test]
    fn default_ttl_above_max_rejected() {
        rejects_default_ttl(json!(2_147_483_648_i64), "2147483648");
    }

    #[test]
    fn default_ttl_null_rejected() {
        rejects_default_ttl(Value::Null, "null");
    }

    #[test]
    fn default_ttl_not_an_integer_rejected() {
        rejects_default_ttl(json!(10.5), "10.5");
        let ten: Value = serde_json::from_str("1e1").unwrap_or(Value::Null);
        rejects_default_ttl(ten, "10.0");
        rejects_default_ttl(json!("10"), "10");
        rejects_default_ttl(json!(true), "true");
        rejects_default_ttl(json!([1]), "[1]");
        rejects_default_ttl(json!({"a": 1}), r#"{"a":1}"#);
    }

    #[test]
    fn default_ttl_seconds_out_of_range_rejected_by_validate() {
        let p = ContainerProperties::new("c", "/pk");
        let zero = p.clone().with_default_ttl(DefaultTtl::Seconds(0));
        assert_eq!(bad_request(zero.validate()), default_ttl_msg("0"));
        let big = p.with_default_ttl(DefaultTtl::Seconds(2_147_483_648));
        assert_eq!(bad_request(big.validate()), default_ttl_msg("2147483648"));
    }

    #[test]
    fn indexing_none_with_default_ttl_rejected() {
        let want =
            "Indexing mode value cannot be 'none' when 'defaultTtl' is specified in the collection";
        for ttl in [DefaultTtl::NeverExpire, DefaultTtl::Seconds(10)] {
            let p = ContainerProperties::new("c", "/pk")
                .with_indexing_mode(IndexingMode::None)
                .with_default_ttl(ttl);
            assert_eq!(bad_request(p.validate()), want);
        }
        let none = json!({"indexingMode": "none"});
        let body =
            json!({"id": "c", "partitionKey": pk("/pk"), "defaultTtl": -1, "indexingPolicy": none});
        assert_eq!(err(&body), want);
        let none = json!({"indexingMode": "None"});
        let body =
            json!({"indexingPolicy": none, "defaultTtl": 5, "partitionKey": pk("/p"), "id": "c"});
        assert_eq!(err(&body), want);
        let off = ContainerProperties::new("c", "/pk").with_indexing_mode(IndexingMode::None);
        assert!(off.validate().is_ok());
    }

    #[test]
    fn container_id_invalid_rejected() {
        let invalid = |id: String| bad_request(ContainerProperties::new(id, "/pk").validate());
        assert_eq!(invalid(String::new()), "container 'id' must not be empty");
        assert!(invalid("a#b".into()).starts_with("container 'id' must not contain"));
        assert!(invalid("x".repeat(256)).starts_with("container 'id' is 256 characters"));
        let body = json!({"id": 7, "partitionKey": pk("/pk")});
        assert_eq!(err(&body), "container 'id' must be a string, not a number");
        let body = json!({"partitionKey": pk("/pk")});
        assert_eq!(err(&body), "container 'id' is missing");
    }

    #[test]
    fn partition_key_path_invalid_rejected() {
        for path in ["pk", "/", "/a/", "/a//b", "", "/a~2"] {
            let m = bad_request(ContainerProperties::new("c", path).validate());
            assert!(
                m.starts_with(&format!("partition key path '{path}' is invalid")),
                "{m}"
            );
            let body = json!({"id": "c", "partitionKey": pk(path)});
            assert_eq!(err(&body), m);
        }
        let ok = ContainerProperties::new("c", "/address/zip");
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn partition_key_shape_rejected() {
        let one_path = "partitionKey.paths must be an array of exactly one path string";
        let cases = [
            (json!({"id": "c"}), "container 'partitionKey' is missing"),
            (
                json!({"id": "c", "partitionKey": "/pk"}),
                "container 'partitionKey' must be an object with 'paths'",
            ),
            (json!({"id": "c", "partitionKey": {"paths": []}}), one_path),
            (
                json!({"id": "c", "partitionKey": {"paths": ["/a", "/b"]}}),
                one_path,
            ),
            (
                json!({"id": "c", "partitionKey": {"paths": "/a"}}),
                one_path,
            ),
            (
                json!({"id": "c", "partitionKey": {"paths": ["/a"], "kind": "Range"}}),
                "partitionKey.kind 'Range' is not supported; only 'Hash' is",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(err(&body), want, "{body}");
        }
    }

    #[test]
    fn indexing_policy_invalid_rejected() {
        let body = |p: Value| json!({"id": "c", "partitionKey": pk("/pk"), "indexingPolicy": p});
        let tail = "is invalid; expected 'consistent', 'lazy' or 'none'";
        let fast = body(json!({"indexingMode": "fast"}));
        assert_eq!(
            err(&fast),
            format!("indexingPolicy.indexingMode 'fast' {tail}")
        );
        let one = body(json!({"indexingMode": 1}));
        assert_eq!(err(&one), format!("indexingPolicy.indexingMode '1' {tail}"));
        let s = body(json!("consistent"));
        assert_eq!(
            err(&s),
            "container 'indexingPolicy' must be an object, not a string"
        );
    }

    #[test]
    fn not_an_object_or_not_json_rejected() {
        let arr = json!([1]);
        assert_eq!(
            err(&arr),
            "container properties must be a JSON object, not an array"
        );
        let m = bad_request(ContainerProperties::from_json_str("{\"id\": "));
        assert!(
            m.starts_with("container properties are not valid JSON: "),
            "{m}"
        );
        assert!(m.contains("line 1"), "{m}");
    }

    #[test]
    fn to_json_value_is_the_cosmos_shape() {
        let p = ContainerProperties::new("orders", "/customerId")
            .with_default_ttl(DefaultTtl::NeverExpire);
        let text = r#"{"id":"orders","partitionKey":{"paths":["/customerId"],"kind":"Hash"},"defaultTtl":-1,"indexingPolicy":{"indexingMode":"consistent"}}"#;
        let want: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        assert_eq!(p.to_json_value(), want);
        assert_eq!(serde_json::to_value(&p).ok(), Some(want));
        assert_eq!(serde_json::to_string(&p).ok().as_deref(), Some(text));
    }

    #[test]
    fn default_ttl_omitted_when_off() {
        let p = ContainerProperties::new("c", "/pk").with_indexing_mode(IndexingMode::Lazy);
        let want = json!({"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash"},
            "indexingPolicy": {"indexingMode": "lazy"}});
        assert_eq!(p.to_json_value(), want);
        assert_eq!(serde_json::to_value(&p).ok(), Some(want));
    }

    #[test]
    fn minimal_input_gets_defaults() {
        let text = r#"{"id":"c","partitionKey":{"paths":["/a/b"]},"_rid":"x"}"#;
        let p = ContainerProperties::from_json_str(text);
        assert_eq!(p.ok(), Some(ContainerProperties::new("c", "/a/b")));
        let pk = json!({"paths": ["/a"], "kind": "hash"});
        let body = json!({"id": "c", "partitionKey": pk, "indexingPolicy": {}});
        let p = ContainerProperties::from_json_value(&body);
        assert_eq!(p.ok(), Some(ContainerProperties::new("c", "/a")));
    }

    #[test]
    fn serde_round_trip() {
        let cases = [
            ContainerProperties::new("a", "/pk"),
            ContainerProperties::new("b", "/x~1y/z")
                .with_default_ttl(DefaultTtl::Seconds(7_776_000)),
            ContainerProperties::new("c", "/pk")
                .with_default_ttl(DefaultTtl::NeverExpire)
                .with_indexing_mode(IndexingMode::Lazy),
            ContainerProperties::new("d", "/pk").with_indexing_mode(IndexingMode::None),
        ];
        for p in cases {
            let text = serde_json::to_string(&p).unwrap_or_default();
            let back = serde_json::from_str::<ContainerProperties>(&text);
            assert_eq!(back.ok().as_ref(), Some(&p));
            let back = ContainerProperties::from_json_value(&p.to_json_value());
            assert_eq!(back.ok(), Some(p));
        }
    }

    #[test]
    fn indexing_mode_parse_is_case_insensitive() {
        assert_eq!(
            IndexingMode::parse("CONSISTENT"),
            Some(IndexingMode::Consistent)
        );
        assert_eq!(IndexingMode::parse("Lazy"), Some(IndexingMode::Lazy));
        assert_eq!(IndexingMode::parse("none"), Some(IndexingMode::None));
        assert_eq!(IndexingMode::parse("nope"), None);
        let none = serde_json::from_value::<IndexingMode>(json!("NONE"));
        assert_eq!(none.ok(), Some(IndexingMode::None));
        assert!(serde_json::from_value::<IndexingMode>(json!("x")).is_err());
    }
}
