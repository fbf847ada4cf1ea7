//! `verify` checks that every put flagged a document item (record flag `DOC`) holds one JSON
//! object: a record whose checksum is good but whose value is not (a bug in a writer, or a
//! deliberate rewrite with a fresh checksum) is a problem, at its offset.

mod common;

use ebbdb::format::record;
use ebbdb::log::scan::scan_all;
use ebbdb::{ContainerProperties, Database};
use serde_json::json;

/// Rewrites, in place and with a fresh checksum, the value of the one DOC record whose value
/// contains `marker`, as `damage` makes it (same length). Returns the record's offset.
fn rewrite(dir: &std::path::Path, marker: &[u8], damage: impl Fn(&[u8]) -> Vec<u8>) -> u64 {
    for path in common::segments(dir).expect("segments") {
        let mut bytes = std::fs::read(&path).expect("read");
        let mut found = None;
        let end = bytes.len();
        scan_all(&bytes, end, |offset, len, rec| {
            let doc = rec.meta.flags & record::FLAG_DOC != 0;
            if doc && rec.value.windows(marker.len()).any(|w| w == marker) {
                let value = damage(rec.value);
                assert_eq!(value.len(), rec.value.len());
                let mut out = Vec::new();
                record::encode(&mut out, &rec.meta, rec.key, &value);
                assert_eq!(out.len(), len as usize);
                found = Some((offset as usize, out));
            }
        });
        if let Some((offset, out)) = found {
            bytes[offset..offset + out.len()].copy_from_slice(&out);
            std::fs::write(&path, &bytes).expect("write");
            return offset as u64;
        }
    }
    panic!("no DOC record holds the marker");
}

/// A way to damage a value (same length), its name, and what `verify` must say.
type Case = (&'static str, fn(&[u8]) -> Vec<u8>, &'static str);

fn problems(dir: &std::path::Path) -> Vec<ebbdb::Finding> {
    ebbdb::verify(dir).expect("verify").problems
}

#[test]
fn a_document_record_that_is_not_a_json_object_is_a_problem() {
    let cases: [Case; 2] = [
        (
            "not JSON",
            |v| {
                let mut v = v.to_vec();
                v[0] = b'!';
                v
            },
            "not JSON",
        ),
        (
            "a string",
            |v| {
                let mut s = vec![b'"'];
                s.resize(v.len() - 1, b'a');
                s.push(b'"');
                s
            },
            "not an object",
        ),
    ];
    for (what, damage, says) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = Database::open(dir.path()).expect("open");
            let c = db
                .create_container(ContainerProperties::new("c", "/pk"))
                .expect("container");
            c.create_item(&json!({"id": "a", "pk": "p", "v": "MARKER"}))
                .expect("create");
            c.create_item(&json!({"id": "b", "pk": "p", "v": "other"}))
                .expect("create");
            // A raw put of non-JSON into the same keyspace is not a document: no problem.
            let raw = ebbdb::doc::partition::encode_key(&"p".into(), "raw");
            c.keyspace()
                .put(&raw, b"not json, MARKEX")
                .expect("raw put");
        }
        assert_eq!(problems(dir.path()), vec![], "{what}: clean before");
        let offset = rewrite(dir.path(), b"MARKER", damage);
        let found = problems(dir.path());
        assert_eq!(found.len(), 1, "{what}: {found:?}");
        assert_eq!(found[0].offset, offset, "{what}");
        assert!(
            found[0].message.contains("flagged a document item") && found[0].message.contains(says),
            "{what}: {}",
            found[0].message
        );
    }
}

/// Items at the edges of what the document layer accepts verify clean: the deepest nesting it
/// takes, numbers at the ends of their ranges, names with non-ASCII and escaped characters.
#[test]
fn unusual_but_legitimate_documents_verify_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Database::open(dir.path()).expect("open");
        let c = db
            .create_container(ContainerProperties::new("c", "/pk"))
            .expect("container");
        // The deepest nesting the layer accepts (found by trying), with a number at the bottom
        // that the skim hands to the parser.
        let nested = |depth: usize| {
            let mut v = json!(1e300);
            for _ in 0..depth {
                v = json!([v]);
            }
            json!({"id": "deep", "pk": "p", "v": v})
        };
        let deepest = (1..400)
            .take_while(|&d| c.upsert_item(&nested(d)).is_ok())
            .last()
            .expect("some nesting is accepted");
        assert!(deepest >= 100, "only {deepest} levels");
        c.upsert_item(&nested(deepest)).expect("deepest");
        c.create_item(&json!({
            "id": "numbers", "pk": "p",
            "big": 1e300, "tiny": 5e-324, "max": u64::MAX, "min": i64::MIN, "neg": -0.0,
        }))
        .expect("numbers");
        c.create_item(&json!({
            "id": "names", "pk": "p",
            "é": 1, "\u{1F600}": 2, "tab\tand\"quote": 3, "\u{7}": 4, "": 5,
        }))
        .expect("names");
        db.compact_full().expect("compact");
    }
    let report = ebbdb::verify(dir.path()).expect("verify");
    assert_eq!(report.problems, vec![]);
    assert!(report.records >= 3);
}
