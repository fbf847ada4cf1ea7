//! # ebbdb
//!
//! An embedded database for data with a shelf life. A database is a local directory holding an
//! append-only log of segment files; every record carries its write time and TTL, and expiry is
//! exact: an item is invisible to every read, scan and count the instant it expires, and its
//! bytes disappear when compaction merges segments without copying it. Expiry never writes a
//! delete record.
//!
//! Two layers:
//! - [`Database`] / [`Container`]: Azure Cosmos DB–style JSON documents with `defaultTtl`,
//!   per-item `ttl`, `_ts` and `_etag`; queries, patch ([`PatchOp`]), transactional batches
//!   ([`TransactionalBatch`]) and a change feed ([`ChangeFeedOptions`]).
//! - [`Store`] / [`Keyspace`]: the byte key-value engine underneath, with the same TTL rules.
//!
//! The storage machinery (segment files, mappings, the key directory, compaction, the expiry
//! timers) is private: nothing a caller can reach can break an invariant. ebbdb's own tests and
//! fuzz targets turn on the `test-hooks` feature, which exposes fault injection, a power-loss
//! model and the pure decoders; it is not a stable API and never meant for an application.
//!
//! The user-facing contract (time and TTL rules, validation and exact error texts, status codes,
//! number round-trips, API) is `docs/contract.md` in the repository; "§N" in these docs refers to
//! its sections. See `DESIGN.md` for the on-disk format and the crash-safety argument.

/// Declares a module that is crate-private, or public (and hidden from the docs) with the
/// `test-hooks` feature, for ebbdb's own tests and fuzz targets. Dead code is allowed without
/// the feature: some items exist only for those tests.
macro_rules! hooked_mod {
    ($name:ident) => {
        #[cfg(feature = "test-hooks")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "test-hooks"))]
        #[allow(dead_code)]
        pub(crate) mod $name;
    };
}

pub mod clock;
hooked_mod!(compaction);
hooked_mod!(doc);
mod engine;
mod error;
hooked_mod!(expiry);
hooked_mod!(faults);
hooked_mod!(format);
mod keydir;
hooked_mod!(log);
mod options;
mod scans;
mod stats;
hooked_mod!(ttl);
mod verify;

pub use clock::{Clock, ManualClock, SystemClock};
pub use doc::BulkCreate;
pub use doc::{
    BatchOperationResult, ChangeFeedIter, ChangeFeedMode, ChangeFeedOptions, ChangeFeedPage,
    ChangeFeedStart, ChangeReceiver, TransactionalBatch, TransactionalBatchResponse,
    MAX_BATCH_BYTES, MAX_BATCH_OPS,
};
pub use doc::{
    Container, ContainerProperties, Database, IndexingMode, ItemOptions, Items, PartitionKey,
    PatchOp, Query, QueryOptions, QueryPage, QueryResults, MAX_PATCH_OPS,
};
pub use engine::{
    Expiry, Iter, Keyspace, Store, WriteBatch, MAX_KEYSPACE_NAME_BYTES, RESERVED_KEYSPACE_PREFIXES,
};
pub use error::{Error, Result};
pub use expiry::ExpiryEvent;
pub use options::{
    set_huge_pages, HugePages, Options, RecoveryMode, SyncPolicy, HUGE_PAGES_FROM_BYTES,
    MAX_KEY_SIZE, MAX_SEGMENT_SIZE, MAX_VALUE_SIZE,
};
pub use stats::{CompactionReport, SegmentStats, Stats};
pub use ttl::{DefaultTtl, Ttl};
pub use verify::{verify, verify_with_progress, Finding, VerifyReport};
