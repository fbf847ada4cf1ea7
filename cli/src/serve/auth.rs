//! Master-key authorization: the HMAC-SHA256 token every Azure Cosmos DB SDK signs its requests
//! with, checked on every request before anything else runs.
//!
//! The `authorization` header is the URL-encoded text `type=master&ver=1.0&sig=<base64>`, where
//! the signature is HMAC-SHA256, keyed with the base64-decoded account key, over
//!
//! ```text
//! lower(verb) \n lower(resourceType) \n resourceLink \n lower(x-ms-date) \n lower(date) \n
//! ```
//!
//! `resourceLink` is the path of the resource the request addresses (for a feed or a create, the
//! parent's path), with no leading or trailing `/`, its names as they are (case kept, not
//! URL-encoded). This file owns the key, that text and the comparison (in constant time), and
//! the freshness of the signed date: like Azure, a request dated more than 15 minutes from the
//! server's clock is refused, so a captured request cannot be replayed later.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The Azure Cosmos DB emulator's well-known key, the default of `ebbdb serve --key`.
pub const EMULATOR_KEY: &str =
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";

/// A decoded master key, kept as the HMAC state it keys.
#[derive(Clone)]
pub struct MasterKey(Hmac<Sha256>);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// Decodes a base64 key as the SDKs take it.
    pub fn from_base64(key: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(key.trim())
            .map_err(|e| format!("the key is not valid base64: {e}"))?;
        if bytes.is_empty() {
            return Err("the key is empty".to_owned());
        }
        let mac = Hmac::<Sha256>::new_from_slice(&bytes)
            .map_err(|e| format!("the key cannot key HMAC-SHA256: {e}"))?;
        Ok(Self(mac))
    }

    /// The base64 signature of `text` under this key (what a client sends).
    #[cfg(test)]
    pub fn sign(&self, text: &str) -> String {
        let mut mac = self.0.clone();
        mac.update(text.as_bytes());
        STANDARD.encode(mac.finalize().into_bytes())
    }

    /// True when `sig` is the signature of `text`, compared in constant time.
    fn verifies(&self, text: &str, sig: &[u8]) -> bool {
        let mut mac = self.0.clone();
        mac.update(text.as_bytes());
        mac.verify_slice(sig).is_ok()
    }
}

/// What is signed, besides the key: the request's verb, resource type and link, and dates.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub verb: &'a str,
    pub resource_type: &'a str,
    pub resource_link: &'a str,
    pub x_ms_date: &'a str,
    pub date: &'a str,
}

impl Signed<'_> {
    /// The string to sign.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}\n{}\n",
            self.verb.to_lowercase(),
            self.resource_type.to_lowercase(),
            self.resource_link,
            self.x_ms_date.to_lowercase(),
            self.date.to_lowercase()
        )
    }
}

/// Why a request is not authorized (the text goes into the 401 body).
pub fn check(key: &MasterKey, header: Option<&str>, signed: &Signed<'_>) -> Result<(), String> {
    let Some(header) = header else {
        return Err(
            "Required Header authorization is missing. Ensure a valid Authorization \
                    token is passed."
                .to_owned(),
        );
    };
    let decoded = super::path::percent_decode(header)
        .ok_or_else(|| "the authorization header is not valid URL-encoded text".to_owned())?;
    let mut kind = None;
    let mut version = None;
    let mut sig = None;
    for part in decoded.split('&') {
        match part.split_once('=') {
            Some(("type", v)) => kind = Some(v),
            Some(("ver", v)) => version = Some(v),
            Some(("sig", v)) => sig = Some(v),
            _ => {}
        }
    }
    if kind != Some("master") {
        return Err(format!(
            "authorization type '{}' is not supported; ebbdb serve accepts master-key tokens only",
            kind.unwrap_or("")
        ));
    }
    if version != Some("1.0") {
        return Err(format!(
            "authorization token version '{}' is not supported (expected 1.0)",
            version.unwrap_or("")
        ));
    }
    let sig = sig.ok_or_else(|| "the authorization token has no signature".to_owned())?;
    let sig = STANDARD
        .decode(sig.trim())
        .map_err(|_| "the authorization signature is not valid base64".to_owned())?;
    if key.verifies(&signed.text(), &sig) {
        return Ok(());
    }
    Err(format!(
        "The input authorization token can't serve the request. The wrong key is being used or \
         the expected payload is not built as per the protocol. Server used the following \
         payload to sign: '{}'",
        signed.text().replace('\n', "\\n")
    ))
}

/// How far a request's date may be from the server's clock.
pub const MAX_SKEW: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Why the signed date is not acceptable at `now`: missing, not an HTTP date, or more than
/// [`MAX_SKEW`] away. The date is `x-ms-date`, or `date` when that is absent.
pub fn check_date(signed: &Signed<'_>, now: std::time::SystemTime) -> Result<(), String> {
    let text = if signed.x_ms_date.is_empty() {
        signed.date
    } else {
        signed.x_ms_date
    };
    if text.is_empty() {
        return Err(
            "The request has no x-ms-date (or date) header; the signed date is \
                    required."
                .to_owned(),
        );
    }
    let at = httpdate::parse_http_date(text)
        .map_err(|_| format!("The x-ms-date header '{text}' is not an HTTP date (RFC 1123)."))?;
    let skew = match now.duration_since(at) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    if skew > MAX_SKEW {
        return Err(format!(
            "The authorization token is not valid at the current time: the request is dated \
             '{text}', the server's time is '{}' (at most {} minutes apart).",
            httpdate::fmt_http_date(now),
            MAX_SKEW.as_secs() / 60
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed<'a>(link: &'a str, date: &'a str) -> Signed<'a> {
        Signed {
            verb: "GET",
            resource_type: "docs",
            resource_link: link,
            x_ms_date: date,
            date: "",
        }
    }

    fn header(key: &MasterKey, s: &Signed<'_>) -> String {
        let token = format!("type=master&ver=1.0&sig={}", key.sign(&s.text()));
        token
            .replace('%', "%25")
            .replace('=', "%3D")
            .replace('&', "%26")
            .replace('+', "%2B")
            .replace('/', "%2F")
    }

    #[test]
    fn text_lowercases_all_but_the_link() {
        let s = signed("dbs/Db/colls/C", "Thu, 27 Apr 2017 00:51:12 GMT");
        assert_eq!(
            s.text(),
            "get\ndocs\ndbs/Db/colls/C\nthu, 27 apr 2017 00:51:12 gmt\n\n"
        );
    }

    #[test]
    fn known_signature() {
        // Computed independently (Python hmac/hashlib) for the emulator key and this text.
        let key = MasterKey::from_base64(EMULATOR_KEY).expect("key");
        let s = Signed {
            verb: "GET",
            resource_type: "dbs",
            resource_link: "dbs/ToDoList",
            x_ms_date: "Thu, 27 Apr 2017 00:51:12 GMT",
            date: "",
        };
        assert_eq!(
            key.sign(&s.text()),
            "mM0rMK/7o1MZhQwDitGRoGisPRPx09os/86Jk0YwquY="
        );
    }

    #[test]
    fn accepts_its_own_signature_and_refuses_changes() {
        let key = MasterKey::from_base64(EMULATOR_KEY).expect("key");
        let s = signed("dbs/a/colls/b", "Mon, 23 Nov 2026 07:00:00 GMT");
        let h = header(&key, &s);
        assert_eq!(check(&key, Some(&h), &s), Ok(()));
        // Another link, verb, date or key: refused.
        assert!(check(&key, Some(&h), &signed("dbs/a/colls/B", s.x_ms_date)).is_err());
        assert!(check(
            &key,
            Some(&h),
            &signed(s.resource_link, "Mon, 23 Nov 2026 07:00:01 GMT")
        )
        .is_err());
        let other = MasterKey::from_base64("AAAA").expect("key");
        assert!(check(&other, Some(&h), &s).is_err());
        assert!(check(&key, None, &s).is_err());
        assert!(check(&key, Some("type%3Daad%26ver%3D1.0%26sig%3Dabc"), &s).is_err());
        assert!(check(&key, Some("type%3Dmaster%26ver%3D1.0%26sig%3D%21%21"), &s).is_err());
        assert!(check(&key, Some("%zz"), &s).is_err());
    }

    #[test]
    fn dates_within_fifteen_minutes() {
        let now = httpdate::parse_http_date("Mon, 23 Nov 2026 08:00:00 GMT").expect("date");
        let at = |x: &'static str, d: &'static str| Signed {
            verb: "GET",
            resource_type: "",
            resource_link: "",
            x_ms_date: x,
            date: d,
        };
        assert!(check_date(&at("Mon, 23 Nov 2026 08:14:59 GMT", ""), now).is_ok());
        assert!(check_date(&at("Mon, 23 Nov 2026 07:45:00 GMT", ""), now).is_ok());
        assert!(check_date(&at("", "Mon, 23 Nov 2026 08:01:00 GMT"), now).is_ok());
        assert!(check_date(&at("Mon, 23 Nov 2026 08:15:01 GMT", ""), now).is_err());
        assert!(check_date(&at("Mon, 23 Nov 2026 07:44:59 GMT", ""), now).is_err());
        assert!(check_date(&at("", ""), now).is_err());
        assert!(check_date(&at("yesterday", ""), now).is_err());
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(MasterKey::from_base64("not base64!").is_err());
        assert!(MasterKey::from_base64("").is_err());
    }
}
