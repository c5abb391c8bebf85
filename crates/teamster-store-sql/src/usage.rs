//! The usage counters' statements that read the same on both backends.

/// Adds `$3` uses of model `$2` by tenant `$1`.
pub const ADD_MODEL_USES: &str = "INSERT INTO model_uses (tenant, model, uses) VALUES ($1, $2, $3) \
     ON CONFLICT (tenant, model) DO UPDATE SET uses = model_uses.uses + excluded.uses";

/// Tenant `$1`'s uses of each model: `(model, uses)`, by model.
pub const MODEL_USES: &str = "SELECT model, uses FROM model_uses WHERE tenant = $1 ORDER BY model";
