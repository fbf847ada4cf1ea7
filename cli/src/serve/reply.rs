//! Responses as the SDKs expect them: a JSON body, and on every response the headers the
//! Azure Cosmos DB gateway sends (`x-ms-activity-id`, `x-ms-request-charge`,
//! `x-ms-session-token`, `content-type`, ...). Errors are [`Reply::error`]: a status, the
//! Cosmos error body `{"code": "...", "message": "..."}`, and `x-ms-substatus` where the SDKs
//! act on one.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

/// A response under construction.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Option<Value>,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    /// A 200 with this body.
    pub fn ok(body: Value) -> Self {
        Self::with(StatusCode::OK, body)
    }

    /// A response with this status and body.
    pub fn with(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            body: Some(body),
            headers: Vec::new(),
        }
    }

    /// A response without a body (204, 304).
    pub fn empty(status: StatusCode) -> Self {
        Self {
            status,
            body: None,
            headers: Vec::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Sets `etag` from the body's `_etag`, when it has one.
    pub fn etag_from_body(self) -> Self {
        match self
            .body
            .as_ref()
            .and_then(|b| b.get("_etag"))
            .and_then(Value::as_str)
        {
            Some(e) => {
                let e = e.to_owned();
                self.header("etag", e)
            }
            None => self,
        }
    }

    /// A Cosmos error: `{"code": <status name>, "message": ...}`.
    pub fn error(status: StatusCode, message: impl Into<String>) -> Self {
        let code = match status.as_u16() {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            408 => "RequestTimeout",
            409 => "Conflict",
            410 => "Gone",
            412 => "PreconditionFailed",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            423 => "Locked",
            501 => "NotImplemented",
            503 => "ServiceUnavailable",
            _ => "InternalServerError",
        };
        Self::with(status, json!({"code": code, "message": message.into()}))
    }

    /// The Cosmos error for a library error (its status code, its message).
    pub fn from_ebbdb(e: &ebbdb::Error) -> Self {
        let status =
            StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = match e {
            ebbdb::Error::NotFound(what) => {
                format!("Entity with the specified id does not exist in the system. ({what})")
            }
            ebbdb::Error::Conflict(what) => {
                format!("Entity with the specified id already exists in the system. ({what})")
            }
            ebbdb::Error::PreconditionFailed(what) => format!(
                "Operation cannot be performed because one of the specified precondition \
                 criteria was not met. ({what})"
            ),
            ebbdb::Error::BadRequest(m) | ebbdb::Error::TooLarge(m) => m.clone(),
            other => other.to_string(),
        };
        Self::error(status, message)
    }

    /// Into an HTTP response, with the headers every gateway response carries.
    pub fn into_response(self, activity_id: &str) -> Response<Body> {
        let session_lsn = LSN.load(Ordering::Relaxed);
        let (bytes, content_type) = match &self.body {
            Some(v) => (
                serde_json::to_vec(v).unwrap_or_default(),
                Some("application/json"),
            ),
            None => (Vec::new(), None),
        };
        let mut resp = Response::new(Body::from(bytes));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        let mut put = |name: &str, value: &str| {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                h.insert(n, v);
            }
        };
        if let Some(ct) = content_type {
            put("content-type", ct);
        }
        put("x-ms-activity-id", activity_id);
        put("x-ms-request-charge", "1");
        put("x-ms-session-token", &format!("0:-1#{session_lsn}"));
        put("x-ms-gatewayversion", "version=2.14.0");
        put("x-ms-serviceversion", "version=2.14.0.0");
        put("x-ms-schemaversion", "1.1");
        put(
            "x-ms-last-state-change-utc",
            "Mon, 01 Jan 2024 00:00:00.000 GMT",
        );
        for (name, value) in &self.headers {
            put(name, value);
        }
        resp
    }
}

/// The session token's sequence number: counts the document writes this server made, so a
/// session token never goes backwards (the server is one replica; every read sees every
/// acknowledged write, so the SDKs' session consistency holds whatever token they send).
static LSN: AtomicU64 = AtomicU64::new(1);

/// Counts one document write.
pub fn bump_lsn() {
    LSN.fetch_add(1, Ordering::Relaxed);
}

/// A fresh activity id (a version-4-shaped UUID from a counter mixed with the process's start
/// time: unique per request, which is all the SDKs use it for).
pub fn activity_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let a = start ^ n.rotate_left(32);
    let b = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a & 0xfff) as u16,
        (b >> 52) as u16,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_and_headers() {
        let r = Reply::from_ebbdb(&ebbdb::Error::NotFound("item 'x'".into()));
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let body = r.body.clone().expect("body");
        assert_eq!(body["code"], "NotFound");
        assert!(body["message"]
            .as_str()
            .expect("message")
            .contains("item 'x'"));
        let before = LSN.load(Ordering::Relaxed);
        bump_lsn();
        let resp = r.into_response("a-b");
        let token = resp.headers()["x-ms-session-token"]
            .to_str()
            .expect("text")
            .to_owned();
        let n: u64 = token
            .strip_prefix("0:-1#")
            .expect("shape")
            .parse()
            .expect("number");
        assert!(n > before);
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.headers()["x-ms-activity-id"], "a-b");
    }

    #[test]
    fn activity_ids_differ_and_look_like_uuids() {
        let a = activity_id();
        let b = activity_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }
}
