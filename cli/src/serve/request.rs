//! A request once it is authorized and its body read: the parts the handlers look at, and
//! the readers of the Cosmos request headers (`x-ms-documentdb-partitionkey`,
//! `x-ms-max-item-count`, `If-Match`, ...). Every reader turns a malformed value into a 400
//! naming the header.

use axum::http::{HeaderMap, Method, StatusCode};
use ebbdb::PartitionKey;
use serde_json::Value;

use super::path::Resource;
use super::reply::Reply;

/// What a handler gets.
#[derive(Debug)]
pub struct Request {
    pub method: Method,
    pub resource: Resource,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// `scheme://host:port/` the client reached this server at.
    pub endpoint: String,
}

/// The Cosmos headers this server reads.
pub mod names {
    pub const PARTITION_KEY: &str = "x-ms-documentdb-partitionkey";
    pub const PARTITION_KEY_RANGE_ID: &str = "x-ms-documentdb-partitionkeyrangeid";
    pub const IS_QUERY: &str = "x-ms-documentdb-isquery";
    pub const IS_QUERY_PLAN: &str = "x-ms-cosmos-is-query-plan-request";
    pub const IS_UPSERT: &str = "x-ms-documentdb-is-upsert";
    pub const IS_BATCH_REQUEST: &str = "x-ms-cosmos-is-batch-request";
    pub const IS_BATCH_ATOMIC: &str = "x-ms-cosmos-batch-atomic";
    pub const MAX_ITEM_COUNT: &str = "x-ms-max-item-count";
    pub const CONTINUATION: &str = "x-ms-continuation";
}

impl Request {
    /// A header as text; `Err` (400) when it is present but not visible ASCII.
    pub fn header(&self, name: &str) -> Result<Option<&str>, Reply> {
        match self.headers.get(name) {
            None => Ok(None),
            Some(v) => v.to_str().map(Some).map_err(|_| {
                Reply::error(
                    StatusCode::BAD_REQUEST,
                    format!("the {name} header is not valid text"),
                )
            }),
        }
    }

    /// A boolean header (`true`/`false`, any case); absent is false.
    pub fn flag(&self, name: &str) -> Result<bool, Reply> {
        match self.header(name)? {
            None => Ok(false),
            Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(bad(format!(
                "the {name} header must be true or false, not '{v}'"
            ))),
        }
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<Value, Reply> {
        serde_json::from_slice(&self.body)
            .map_err(|e| bad(format!("the request body is not valid JSON: {e}")))
    }

    /// `x-ms-documentdb-partitionkey`: a JSON array of one value (`[]` or `[{}]` for items
    /// without a partition key value); `None` when absent.
    pub fn partition_key(&self) -> Result<Option<PartitionKey>, Reply> {
        self.header(names::PARTITION_KEY)?
            .map(parse_partition_key)
            .transpose()
    }

    /// The partition key a point operation needs; a 400 when the header is missing.
    pub fn required_partition_key(&self) -> Result<PartitionKey, Reply> {
        self.partition_key()?.ok_or_else(|| {
            bad(
                "PartitionKey value must be supplied for this operation (the \
                 x-ms-documentdb-partitionkey header).",
            )
        })
    }

    /// `x-ms-max-item-count`: a positive page size, or `None` for absent / `-1` (the default).
    pub fn max_item_count(&self) -> Result<Option<usize>, Reply> {
        let Some(v) = self.header(names::MAX_ITEM_COUNT)? else {
            return Ok(None);
        };
        match v.trim().parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(n) if n >= 1 => Ok(Some(usize::try_from(n.min(10_000)).unwrap_or(10_000))),
            _ => Err(bad(format!(
                "the {} header must be a positive integer or -1, not '{v}'",
                names::MAX_ITEM_COUNT
            ))),
        }
    }

    /// `x-ms-continuation`, when present and not empty.
    pub fn continuation(&self) -> Result<Option<String>, Reply> {
        Ok(self
            .header(names::CONTINUATION)?
            .filter(|s| !s.is_empty())
            .map(str::to_owned))
    }

    /// `If-Match`, when present (`*` matches any live item and is treated as absent).
    pub fn if_match(&self) -> Result<Option<String>, Reply> {
        Ok(self
            .header("if-match")?
            .filter(|s| s.trim() != "*")
            .map(str::to_owned))
    }

    /// `If-None-Match`, when present.
    pub fn if_none_match(&self) -> Result<Option<String>, Reply> {
        Ok(self.header("if-none-match")?.map(str::to_owned))
    }
}

/// A partition key in the header's form: a JSON array of one value (`[]` or `[{}]` for
/// items without a partition key value).
pub fn parse_partition_key(text: &str) -> Result<PartitionKey, Reply> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "the {} header is not a JSON array: {e}",
            names::PARTITION_KEY
        ))
    })?;
    let Value::Array(parts) = v else {
        return Err(bad(format!(
            "the {} header must be a JSON array such as [\"value\"]",
            names::PARTITION_KEY
        )));
    };
    match parts.as_slice() {
        [] => Ok(PartitionKey::UNDEFINED),
        [Value::Object(o)] if o.is_empty() => Ok(PartitionKey::UNDEFINED),
        [Value::Null] => Ok(PartitionKey::NULL),
        [Value::Bool(b)] => Ok(PartitionKey::from(*b)),
        [Value::String(s)] => Ok(PartitionKey::from(s.as_str())),
        [Value::Number(n)] => match n.as_f64() {
            Some(f) => Ok(PartitionKey::from(f)),
            None => Err(bad("the partition key number is out of range")),
        },
        [_] => Err(bad(
            "a partition key value must be a string, number, bool or null",
        )),
        _ => Err(bad(
            "the partition key has more components than the container's one path \
             (hierarchical partition keys are not supported)",
        )),
    }
}

/// A 400 with this message.
pub fn bad(message: impl Into<String>) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn req(headers: &[(&'static str, &'static str)]) -> Request {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, HeaderValue::from_static(v));
        }
        Request {
            method: Method::GET,
            resource: Resource::Account,
            headers: h,
            body: Vec::new(),
            endpoint: String::new(),
        }
    }

    #[test]
    fn partition_key_header() {
        let pk = |v: &'static str| req(&[(names::PARTITION_KEY, v)]).partition_key();
        assert_eq!(
            pk("[\"C1\"]").ok().flatten(),
            Some(PartitionKey::from("C1"))
        );
        assert_eq!(pk("[5]").ok().flatten(), Some(PartitionKey::from(5.0)));
        assert_eq!(pk("[null]").ok().flatten(), Some(PartitionKey::NULL));
        assert_eq!(pk("[{}]").ok().flatten(), Some(PartitionKey::UNDEFINED));
        assert_eq!(pk("[]").ok().flatten(), Some(PartitionKey::UNDEFINED));
        assert_eq!(pk("[true]").ok().flatten(), Some(PartitionKey::from(true)));
        for bad in ["C1", "[1,2]", "[[1]]", "{\"a\":1}", "[{\"a\":1}]"] {
            let r = pk(bad).expect_err(bad);
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        assert_eq!(req(&[]).partition_key().ok().flatten(), None);
        assert!(req(&[]).required_partition_key().is_err());
    }

    #[test]
    fn page_size_flags_and_conditions() {
        let n = |v: &'static str| req(&[(names::MAX_ITEM_COUNT, v)]).max_item_count();
        assert_eq!(n("5").ok().flatten(), Some(5));
        assert_eq!(n("-1").ok().flatten(), None);
        assert!(n("0").is_err());
        assert!(n("x").is_err());
        assert_eq!(n("100000").ok().flatten(), Some(10_000));
        assert!(req(&[(names::IS_UPSERT, "True")])
            .flag(names::IS_UPSERT)
            .unwrap_or(false));
        assert!(req(&[(names::IS_UPSERT, "yes")])
            .flag(names::IS_UPSERT)
            .is_err());
        assert_eq!(req(&[("if-match", "*")]).if_match().ok().flatten(), None);
        assert_eq!(
            req(&[("if-match", "\"e\"")])
                .if_match()
                .ok()
                .flatten()
                .as_deref(),
            Some("\"e\"")
        );
    }
}
