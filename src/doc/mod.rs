//! The document layer: Azure Cosmos DB–style containers of JSON items over the engine.
//!
//! - `database.rs`: [`Database`], the container catalogue.
//! - `container.rs`: [`Container`], item operations, etags, conditional writes.
//! - `properties.rs`: [`ContainerProperties`] and the Cosmos REST JSON shape.
//! - `validate.rs`: item `ttl`, `id` and shape checks with the exact Cosmos messages.
//! - `query/`: the Cosmos DB SQL dialect (parser, evaluator, planner, runner).
//! - `index/`: secondary indexes of the `indexingPolicy.includedPaths`, kept in step with
//!   every write and used by the query planner.
//! - `precheck.rs`: refuses items holding NaN or infinity (which JSON cannot hold) or nested
//!   deeper than 128 levels, before they are converted.
//! - `stored.rs`: parses stored items back, up to the same 128 levels.
//! - `partition.rs`: [`PartitionKey`], extraction by path, and the order-preserving key
//!   encoding that keeps a partition's items adjacent.

mod batch;
mod container;
mod database;
mod feed;
mod index;
mod patch;
hooked_mod!(partition);
mod precheck;
pub(crate) mod properties;
hooked_mod!(query);
mod skim;
pub(crate) mod stored;
hooked_mod!(validate);

pub use batch::{
    BatchOperationResult, TransactionalBatch, TransactionalBatchResponse, MAX_BATCH_BYTES,
    MAX_BATCH_OPS,
};
pub use container::BulkCreate;
pub use container::{Container, ItemOptions, Items, QueryPage, QueryResults};
pub use database::Database;
pub use feed::{
    ChangeFeedIter, ChangeFeedMode, ChangeFeedOptions, ChangeFeedPage, ChangeFeedStart,
    ChangeReceiver,
};
pub use partition::PartitionKey;
pub use patch::{PatchOp, MAX_PATCH_OPS};
pub use properties::{ContainerProperties, IndexingMode};
pub use query::{Query, QueryOptions};
