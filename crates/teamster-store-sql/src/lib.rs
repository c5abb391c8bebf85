//! SQL that both store backends write alike, generic over the sqlx driver: a backend's crate
//! keeps only its dialect (schema, upserts, batch writes, notifications) and calls these for
//! the rest.
//!
//! [`Sql`] holds the shared statements (reads of every record, deletes, session writes, the
//! lease compare-and-sets), `usage.rs` the model-use counter's; [`error`] maps sqlx errors onto the store's. Statements number
//! their parameters `$N`, which both drivers read as the N-th bound value, so each runs on
//! SQLite and on PostgreSQL unchanged.

mod columns;
pub mod error;
mod listing;
mod statements;
mod usage;

pub use columns::{agent_query, session_query};
pub use statements::{Sql, lease_held, lease_holder};
pub use usage::{ADD_MODEL_USES, MODEL_USES};
