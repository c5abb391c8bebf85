//! Operator limits on what subjects use, counted in the store so that replicas sharing it hold
//! a subject to one limit together: the request rate, the running-turn quota and the model-call
//! places it implies (`limits.rs`), and the session and tenant spending budgets the engine checks
//! before every model call (`budgets.rs`).
//!
//! This crate knows the store's usage part and the engine's spend-limit seam, nothing of
//! sessions, HTTP or the service that plans turns.

mod budgets;
mod error;
mod limits;

pub use budgets::{TenantBudget, TenantLedger, for_turn, tenant_of};
pub use error::{LimitError, QuotaExceeded, RateLimited, Result};
pub use limits::{FanOut, Limits, ModelCallPlaces, RequestRate, Reservation, TurnQuota};
