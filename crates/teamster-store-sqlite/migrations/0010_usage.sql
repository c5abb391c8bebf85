-- The counters of the operator's limits; mirrors the PostgreSQL store's migration 0010. One
-- process uses a SQLite store, but it counts through the same tables, so one code path serves
-- one replica and many.
--
-- `request_buckets`: each subject's request-rate token bucket: `tokens` left as of `at_ms`
-- (milliseconds since the Unix epoch). Rows idle for a minute (full again) are deleted now
-- and then.
CREATE TABLE request_buckets (
    subject_id TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    at_ms INTEGER NOT NULL,
    -- Whether the request that last updated the row was granted (what the upsert returns).
    granted INTEGER NOT NULL
) WITHOUT ROWID;

-- `turn_places`: each subject's places in its running-turn quota: reserved (`turn_id` NULL)
-- until `expires_at` while the turn is being created, then bound to the turn, counting while
-- it runs under a live lease.
CREATE TABLE turn_places (
    id TEXT PRIMARY KEY,
    subject_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT,
    expires_at INTEGER NOT NULL
);
CREATE INDEX turn_places_subject ON turn_places (subject_id);

-- `tenant_spend`: what each tenant's model calls spent in a window of the tenant budget.
CREATE TABLE tenant_spend (
    tenant TEXT NOT NULL,
    window_number INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    PRIMARY KEY (tenant, window_number)
) WITHOUT ROWID;
