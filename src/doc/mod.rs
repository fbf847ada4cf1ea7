//! The document layer: Azure Cosmos DB–style containers of JSON items over the engine.
//!
//! - `database.rs`: [`Database`], the container catalogue.
//! - `container.rs`: [`Container`], item operations, etags, conditional writes.
//! - `properties.rs`: [`ContainerProperties`] and the Cosmos REST JSON shape.
//! - `validate.rs`: item `ttl`, `id` and shape checks with the exact Cosmos messages.
//! - `finite.rs`: refuses typed items holding NaN or infinity (which JSON cannot hold).
//! - `partition.rs`: [`PartitionKey`], extraction by path, and the order-preserving key
//!   encoding that keeps a partition's items adjacent.

mod container;
mod database;
mod finite;
pub mod partition;
pub mod properties;
pub mod validate;

pub use container::{Container, ItemOptions, Items};
pub use database::Database;
pub use partition::PartitionKey;
pub use properties::{ContainerProperties, IndexingMode};
