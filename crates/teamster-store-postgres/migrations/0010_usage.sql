-- The counters of the operator's limits, shared by every replica; mirrors the SQLite store's
-- migration 0010.
--
-- `request_buckets`: each subject's request-rate token bucket: `tokens` left as of `at_ms`
-- (milliseconds since the Unix epoch on the database server's clock). A request updates its
-- row in one statement; rows idle for a minute (full again) are deleted now and then.
CREATE TABLE request_buckets (
    subject_id TEXT COLLATE "C" PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    at_ms BIGINT NOT NULL,
    -- Whether the request that last updated the row was granted (what the upsert returns).
    granted BOOLEAN NOT NULL
);

-- `turn_places`: each subject's places in its running-turn quota. A place is reserved
-- (`turn_id` NULL) until `expires_at` while its turn is being created, then bound to the turn,
-- and counts while that turn runs under a live lease. Places that no longer count are deleted
-- when their subject next reserves one.
CREATE TABLE turn_places (
    id TEXT COLLATE "C" PRIMARY KEY,
    subject_id TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    turn_id TEXT COLLATE "C",
    expires_at BIGINT NOT NULL
);
CREATE INDEX turn_places_subject ON turn_places (subject_id);

-- `tenant_spend`: what each tenant's model calls spent in a window of the tenant budget (the
-- window's number: seconds since the Unix epoch divided by the window's length). Replicas add
-- to it as their turns spend.
CREATE TABLE tenant_spend (
    tenant TEXT COLLATE "C" NOT NULL,
    window_number BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, window_number)
);
