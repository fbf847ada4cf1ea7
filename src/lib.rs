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
//! The user-facing contract (time and TTL rules, validation and exact error texts, status codes,
//! number round-trips, API) is `docs/contract.md` in the repository; "§N" in these docs refers to
//! its sections. See `DESIGN.md` for the on-disk format and the crash-safety argument.

pub mod clock;
pub mod compaction;
pub mod doc;
mod engine;
mod error;
pub mod expiry;
#[doc(hidden)]
pub mod faults;
pub mod format;
pub mod keydir;
pub mod log;
mod options;
mod scans;
pub mod stats;
pub mod ttl;

pub use doc::{
    Container, ContainerProperties, Database, IndexingMode, ItemOptions, Items, PartitionKey,
};
pub use engine::{
    Expiry, Iter, Keyspace, Store, WriteBatch, MAX_KEYSPACE_NAME_BYTES, RESERVED_KEYSPACE_PREFIXES,
};
pub use error::{Error, Result};
pub use expiry::ExpiryEvent;
pub use options::{Options, RecoveryMode, SyncPolicy, MAX_KEY_SIZE, MAX_VALUE_SIZE};
pub use stats::{CompactionReport, Stats};
pub use ttl::{DefaultTtl, Ttl};
