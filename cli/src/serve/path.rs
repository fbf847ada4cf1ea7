//! Request paths: which resource a URL addresses, and the resource type and link the
//! authorization signature covers.
//!
//! The Cosmos REST resource tree is `/dbs/{db}/colls/{coll}/docs/{id}` (and `pkranges` under
//! a container). The SDKs URL-encode each name and may end the path with a `/`; names here
//! are decoded, and a path that does not fit the tree is [`Resource::Unknown`] (a 404 with a
//! Cosmos body, after authorization).

/// What a request path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// `/`: the database account.
    Account,
    /// `/dbs`.
    Databases,
    /// `/dbs/{db}`.
    Database(String),
    /// `/dbs/{db}/colls`.
    Containers(String),
    /// `/dbs/{db}/colls/{coll}`.
    Container(String, String),
    /// `/dbs/{db}/colls/{coll}/docs`.
    Documents(String, String),
    /// `/dbs/{db}/colls/{coll}/docs/{id}`.
    Document(String, String, String),
    /// `/dbs/{db}/colls/{coll}/pkranges`.
    PartitionKeyRanges(String, String),
    /// Anything else.
    Unknown,
}

/// A parsed path: the resource, and what the signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub resource: Resource,
    /// Lower-case resource type (`dbs`, `colls`, `docs`, `pkranges`), empty for the account.
    pub resource_type: String,
    /// The signed link: decoded segments joined by `/`, without the trailing type segment of
    /// a feed path.
    pub resource_link: String,
}

/// Decodes `%XX` escapes (and nothing else: `+` stays `+`); `None` for a bad escape or text
/// that is not UTF-8 once decoded.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a request path (without the query string). `None` when a segment is not valid
/// percent-encoded UTF-8.
pub fn parse(path: &str) -> Option<Parsed> {
    let raw: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let segs = raw
        .iter()
        .map(|s| percent_decode(s))
        .collect::<Option<Vec<String>>>()?;
    // The signature's type and link: a path with an odd number of segments is a feed
    // (type = last segment, link = the parent); an even one names a resource.
    let (resource_type, resource_link) = if segs.is_empty() {
        (String::new(), String::new())
    } else if segs.len() % 2 == 1 {
        (
            segs[segs.len() - 1].to_lowercase(),
            segs[..segs.len() - 1].join("/"),
        )
    } else {
        (segs[segs.len() - 2].to_lowercase(), segs.join("/"))
    };
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let resource = match s.as_slice() {
        [] => Resource::Account,
        ["dbs"] => Resource::Databases,
        ["dbs", db] => Resource::Database((*db).to_owned()),
        ["dbs", db, "colls"] => Resource::Containers((*db).to_owned()),
        ["dbs", db, "colls", c] => Resource::Container((*db).to_owned(), (*c).to_owned()),
        ["dbs", db, "colls", c, "docs"] => Resource::Documents((*db).to_owned(), (*c).to_owned()),
        ["dbs", db, "colls", c, "docs", id] => {
            Resource::Document((*db).to_owned(), (*c).to_owned(), (*id).to_owned())
        }
        ["dbs", db, "colls", c, "pkranges"] => {
            Resource::PartitionKeyRanges((*db).to_owned(), (*c).to_owned())
        }
        _ => Resource::Unknown,
    };
    Some(Parsed {
        resource,
        resource_type,
        resource_link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> (Resource, String, String) {
        let x = parse(path).expect("parses");
        (x.resource, x.resource_type, x.resource_link)
    }

    #[test]
    fn the_tree_and_its_signed_links() {
        assert_eq!(p("/"), (Resource::Account, "".into(), "".into()));
        assert_eq!(p("/dbs"), (Resource::Databases, "dbs".into(), "".into()));
        assert_eq!(
            p("/dbs/shop/"),
            (
                Resource::Database("shop".into()),
                "dbs".into(),
                "dbs/shop".into()
            )
        );
        assert_eq!(
            p("/dbs/shop/colls/"),
            (
                Resource::Containers("shop".into()),
                "colls".into(),
                "dbs/shop".into()
            )
        );
        assert_eq!(
            p("/dbs/shop/colls/Orders/docs/"),
            (
                Resource::Documents("shop".into(), "Orders".into()),
                "docs".into(),
                "dbs/shop/colls/Orders".into()
            )
        );
        assert_eq!(
            p("/dbs/shop/colls/o/docs/a%20b%C3%A9"),
            (
                Resource::Document("shop".into(), "o".into(), "a bé".into()),
                "docs".into(),
                "dbs/shop/colls/o/docs/a bé".into()
            )
        );
        assert_eq!(
            p("/dbs/shop/colls/o/pkranges"),
            (
                Resource::PartitionKeyRanges("shop".into(), "o".into()),
                "pkranges".into(),
                "dbs/shop/colls/o".into()
            )
        );
        assert_eq!(p("/dbs/shop/users").0, Resource::Unknown);
        assert_eq!(p("/nope").0, Resource::Unknown);
        assert_eq!(p("/dbs/a/colls/b/docs/c/attachments").0, Resource::Unknown);
    }

    #[test]
    fn bad_escapes() {
        assert!(parse("/dbs/%zz").is_none());
        assert!(parse("/dbs/%ff").is_none());
        assert!(parse("/dbs/%4").is_none());
        assert_eq!(percent_decode("a+b%2Fc").as_deref(), Some("a+b/c"));
    }
}
