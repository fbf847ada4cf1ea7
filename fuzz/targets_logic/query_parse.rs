//! Logic of the `query_parse` fuzz target, shared with `tests/fuzz_corpus.rs`.
//!
//! Input: bytes taken as query text (lossily as UTF-8). The query is run over a small fixed set
//! of documents (numbers, strings, nulls, arrays, nested objects, missing fields) with a few
//! parameters bound. Checks: no panic, no stack overflow (nesting is bounded by the parser),
//! every error is a 400, and a query that succeeds gives the same rows when run again.

use ebbdb::doc::query::run_over;
use ebbdb::Query;
use serde_json::{json, Value};

fn docs() -> Vec<Value> {
    vec![
        json!({"id": "1", "pk": "a", "n": 5, "s": "apple", "tags": ["x", "y"], "o": {"k": 1, "l": [1, 2]}}),
        json!({"id": "2", "pk": "a", "n": 2.5, "s": "Banana", "tags": [], "flag": true}),
        json!({"id": "3", "pk": "b", "n": "5", "nul": null, "o": {"k": "1"}}),
        json!({"id": "4", "pk": null, "n": -1e300, "s": "", "tags": [{"t": 1}, null]}),
        json!({"id": "5"}),
    ]
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let q = Query::new(text.as_ref())
        .param("@a", 1)
        .param("@s", "apple")
        .param("@arr", json!([1, "x"]));
    match run_over(&q, docs()) {
        Ok(rows) => {
            let again = run_over(&q, docs()).expect("a query that ran once runs again");
            assert_eq!(rows, again, "the same query gave different rows");
        }
        Err(e) => assert_eq!(e.status_code(), 400, "query error is not a 400: {e}"),
    }
}

/// Seed inputs: one query per clause and operator family, and a few broken ones.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        "SELECT * FROM c",
        "SELECT VALUE c.id FROM c WHERE c.n > @a ORDER BY c.n DESC",
        "SELECT DISTINCT TOP 3 c.pk, c.o.k AS k FROM c WHERE IS_DEFINED(c.s) OFFSET 1 LIMIT 2",
        "SELECT VALUE {\"a\": c.tags[0], \"b\": [c.n, c.s ?? 'none']} FROM c",
        "SELECT VALUE t FROM c JOIN t IN c.tags WHERE NOT IS_NULL(t)",
        "SELECT c.pk, COUNT(1) AS n, SUM(c.n) AS s, MIN(c.s), MAX(c.s), AVG(c.n) FROM c GROUP BY c.pk",
        "SELECT * FROM c WHERE c.s LIKE '%an_%' ESCAPE '!' AND c.n BETWEEN -1 AND 10 OR c.id IN ('1', @s)",
        "SELECT VALUE (c.n > 1 ? UPPER(c.s) : LOWER(c.s)) || '!' FROM c",
        "SELECT VALUE ARRAY_CONTAINS(@arr, c.n) FROM c WHERE STARTSWITH(c.s, 'a', true)",
        "SELECT VALUE SUBSTRING(c.s, 1, 2) FROM c ORDER BY c.o DESC, c.tags",
        "SELECT * FROM c WHERE",
        "SELECT ((((((1)))))) FROM c",
        "SELECT VALUE c.n * -c.n / 0 % 3 FROM c",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
