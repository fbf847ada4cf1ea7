//! Queries with Azure Cosmos DB semantics over live items (docs/contract.md §7): one test per
//! clause and operator family, the cross-type rules, aggregates, parameters, partitions, and
//! exact TTL (an expired item appears in no clause, count or aggregate).
//!
//! The cases (`doc_query/cases.rs`) run twice: over containers without secondary indexes
//! (every query scans) and over containers indexing every path the cases query (the planner
//! answers `=`, `IN`, ranges, `BETWEEN` and `STARTSWITH` from the index). Results must be the
//! same; `indexed::the_index_answers_the_indexable_terms` checks the index is really used.

mod scan {
    const INDEXED: bool = false;
    include!("doc_query/cases.rs");
}

mod indexed {
    const INDEXED: bool = true;
    include!("doc_query/cases.rs");

    #[test]
    fn the_index_answers_the_indexable_terms() {
        let (_d, _c, _db, c) = setup();
        for (text, plan) in [
            ("SELECT * FROM c WHERE c.n = 5", "index /n"),
            ("SELECT * FROM c WHERE c.s IN ('apple', 'date')", "index /s"),
            (
                "SELECT * FROM c WHERE c.n > 1 AND c.flag = true",
                "index /flag",
            ),
            ("SELECT * FROM c WHERE c.n BETWEEN 1 AND 5", "index /n"),
            ("SELECT * FROM c WHERE STARTSWITH(c.s, 'a')", "index /s"),
            ("SELECT * FROM c WHERE c.o.k <= 1", "index /o/k"),
            ("SELECT * FROM c WHERE c.pk = 'a'", "partition"),
            ("SELECT * FROM c WHERE c.pk = 'a' AND c.id = '1'", "point"),
            ("SELECT * FROM c WHERE c.n + 1 = 6", "scan"),
            ("SELECT * FROM c WHERE STARTSWITH(c.s, 'a', true)", "scan"),
        ] {
            let got = c.query_plan(&ebbdb::Query::new(text)).expect("plan");
            assert_eq!(got, plan, "{text}");
        }
    }
}
