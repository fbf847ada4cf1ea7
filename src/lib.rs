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
//!   per-item `ttl`, `_ts` and `_etag`.
//! - [`Store`] / [`Keyspace`]: the byte key-value engine underneath, with the same TTL rules.
//!
//! The storage machinery (segment files, mappings, the key directory, compaction, the timer
//! wheel) is private: nothing a caller can reach can break an invariant. ebbdb's own tests and
//! fuzz targets turn on the `test-hooks` feature, which exposes fault injection, a power-loss
//! model and the pure decoders; it is not a stable API and never meant for an application.
//!
//! The user-facing contract (time and TTL rules, validation and exact error texts, status codes,
//! number round-trips, API) is `docs/contract.md` in the repository; "§N" in these docs refers to
//! its sections. See `DESIGN.md` for the on-disk format and the crash-safety argument.

pub mod clock;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod compaction;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod compaction;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod doc;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod doc;
mod engine;
mod error;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod expiry;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod expiry;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod faults;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod faults;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod format;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod format;
mod keydir;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod log;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod log;
mod options;
mod scans;
mod stats;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod ttl;
#[cfg(not(feature = "test-hooks"))]
#[allow(dead_code)]
pub(crate) mod ttl;

pub use clock::{Clock, ManualClock, SystemClock};
pub use doc::{
    Container, ContainerProperties, Database, IndexingMode, ItemOptions, Items, PartitionKey,
    Query, QueryOptions, QueryPage, QueryResults,
};
pub use engine::{
    Expiry, Iter, Keyspace, Store, WriteBatch, MAX_KEYSPACE_NAME_BYTES, RESERVED_KEYSPACE_PREFIXES,
};
pub use error::{Error, Result};
pub use expiry::ExpiryEvent;
pub use options::{
    Options, RecoveryMode, SyncPolicy, MAX_KEY_SIZE, MAX_SEGMENT_SIZE, MAX_VALUE_SIZE,
};
pub use stats::{CompactionReport, SegmentStats, Stats};
pub use ttl::{DefaultTtl, Ttl};
