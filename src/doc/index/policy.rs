//! `indexingPolicy.includedPaths` / `excludedPaths`: checking the Cosmos path strings and
//! choosing the paths that get a secondary index.
//!
//! A path is `/` followed by segments and ends in `/?` (the scalar at that path) or `/*` (that
//! path and everything beneath). A segment is a property name without `/`, `"`, `[`, `]`,
//! `*`, `?`, a double-quoted name (`/"a b"/?`), or `[]` (array elements). `/*` alone is the
//! whole item: Cosmos's default, which ebbdb serves with scans (no secondary index).
//!
//! Indexed: every included path whose segments are property names (`/status/?`,
//! `/address/zip/?`, `/status/*`), unless the very same path is also excluded; at most
//! [`MAX_INDEXED_PATHS`]. For `/p/*` the index holds the scalar at `/p`; queries on deeper
//! paths scan. Paths with `[]` are kept (they round-trip) but not indexed.

use crate::error::{Error, Result};

/// The most paths a container may index (each costs memory per item and time per write).
pub const MAX_INDEXED_PATHS: usize = 16;

/// A checked path: its property names (empty for `/*`), whether it has an array segment, and
/// whether it ends in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexPath {
    pub(crate) segments: Vec<String>,
    pub(crate) has_array: bool,
    pub(crate) wildcard: bool,
}

fn invalid(field: &str, path: &str, why: &str) -> Error {
    Error::BadRequest(format!(
        "indexingPolicy.{field} path '{path}' is invalid: {why}"
    ))
}

/// Parses one Cosmos index path; `field` names the list for the 400 message.
pub(crate) fn parse_path(field: &str, path: &str) -> Result<IndexPath> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(invalid(field, path, "it must start with '/'"));
    };
    if rest == "*" {
        return Ok(IndexPath {
            segments: Vec::new(),
            has_array: false,
            wildcard: true,
        });
    }
    let (body, wildcard) = if let Some(b) = rest.strip_suffix("/?") {
        (b, false)
    } else if let Some(b) = rest.strip_suffix("/*") {
        (b, true)
    } else {
        return Err(invalid(field, path, "it must end in '/?' or '/*'"));
    };
    let mut segments = Vec::new();
    let mut has_array = false;
    let mut chars = body.chars().peekable();
    loop {
        let mut seg = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            for c in chars.by_ref() {
                if c == '"' {
                    closed = true;
                    break;
                }
                seg.push(c);
            }
            if !closed {
                return Err(invalid(field, path, "a quoted name is not closed"));
            }
            if seg.is_empty() {
                return Err(invalid(field, path, "a quoted name is empty"));
            }
            segments.push(seg);
        } else {
            while let Some(&c) = chars.peek() {
                if c == '/' {
                    break;
                }
                seg.push(c);
                chars.next();
            }
            if seg == "[]" {
                has_array = true;
                segments.push(seg);
            } else if seg.is_empty() {
                return Err(invalid(field, path, "it has an empty segment"));
            } else if seg.contains(['"', '[', ']', '*', '?']) || seg.contains(char::is_whitespace) {
                return Err(invalid(
                    field,
                    path,
                    &format!("segment '{seg}' needs double quotes"),
                ));
            } else {
                segments.push(seg);
            }
        }
        match chars.next() {
            None => break,
            Some('/') => {}
            Some(_) => return Err(invalid(field, path, "a quoted name must end its segment")),
        }
    }
    Ok(IndexPath {
        segments,
        has_array,
        wildcard,
    })
}

/// The property paths to index, in the order of `included` (duplicates once), from checked
/// included and excluded path strings.
///
/// # Errors
/// 400 for a malformed path or more than [`MAX_INDEXED_PATHS`] indexable paths.
pub(crate) fn indexed_paths(included: &[String], excluded: &[String]) -> Result<Vec<Vec<String>>> {
    let excluded: Vec<IndexPath> = excluded
        .iter()
        .map(|p| parse_path("excludedPaths", p))
        .collect::<Result<_>>()?;
    let mut out: Vec<Vec<String>> = Vec::new();
    for p in included {
        let parsed = parse_path("includedPaths", p)?;
        if parsed.segments.is_empty() || parsed.has_array {
            continue;
        }
        if excluded
            .iter()
            .any(|x| x.segments == parsed.segments && !x.has_array)
        {
            continue;
        }
        if !out.contains(&parsed.segments) {
            out.push(parsed.segments);
        }
    }
    if out.len() > MAX_INDEXED_PATHS {
        return Err(Error::BadRequest(format!(
            "indexingPolicy.includedPaths names {} indexable paths; at most {MAX_INDEXED_PATHS} are supported",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        parse_path("includedPaths", p)
            .map(|x| x.segments)
            .unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn good_paths_parse() {
        assert_eq!(segs("/status/?"), vec!["status"]);
        assert_eq!(segs("/a/b/*"), vec!["a", "b"]);
        assert_eq!(segs("/\"a b\"/c/?"), vec!["a b", "c"]);
        assert!(segs("/*").is_empty());
        assert!(parse_path("x", "/tags/[]/?").is_ok_and(|p| p.has_array));
    }

    #[test]
    fn bad_paths_are_400s() {
        for p in [
            "",
            "status/?",
            "/status",
            "/status/",
            "//?",
            "/a//b/?",
            "/\"a/?",
            "/a b/?",
            "/?",
            "/a/*/b/?",
            "/\"\"/?",
            "/\"a\"b/?",
        ] {
            let e = parse_path("includedPaths", p).expect_err(p);
            assert_eq!(e.status_code(), 400, "{p}");
        }
    }

    #[test]
    fn excluded_and_root_and_array_paths_are_not_indexed() {
        let inc = ["/*", "/a/?", "/b/?", "/t/[]/?", "/a/*"].map(String::from);
        let exc = ["/b/?".to_string()];
        assert_eq!(
            indexed_paths(&inc, &exc).ok(),
            Some(vec![vec!["a".to_string()]])
        );
    }

    #[test]
    fn too_many_paths_are_refused() {
        let inc: Vec<String> = (0..=MAX_INDEXED_PATHS)
            .map(|i| format!("/p{i}/?"))
            .collect();
        assert!(indexed_paths(&inc, &[]).is_err());
    }
}
