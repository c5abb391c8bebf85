-- How many times each tenant's sessions switched to or ran on each model (`provider/model`),
-- for the model catalog's `use_count`; mirrors the PostgreSQL store's migration 0013.
CREATE TABLE model_uses (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    uses INTEGER NOT NULL,
    PRIMARY KEY (tenant, model)
) WITHOUT ROWID;
