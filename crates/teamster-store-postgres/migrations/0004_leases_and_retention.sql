-- Turn leases and stream retention; mirrors the SQLite store's migration 0004.
--
-- The replica that runs a turn holds its lease: `owner` (the replica's id) until `expires_at`
-- (milliseconds since the Unix epoch, on the database server's clock, so replicas whose clocks
-- disagree still agree on expiry), and renews it. `claims` counts the turn's claims (1: its
-- creator's; more: takeovers), so every hold is distinct and renewals and takeovers compare
-- and set on it. create_turn adds an unclaimed lease (no owner, claims 0) that expires after
-- a short grace; the creator's first renewal claims it. A running turn whose lease has
-- expired, or that has none (turns left running before this migration), is taken over by
-- another replica. Leases live in a table of their own so that renewing them never waits on
-- the row locks of log writes, which update turns: a renewal locks lease rows only.
CREATE TABLE turn_leases (
    turn_id TEXT COLLATE "C" PRIMARY KEY REFERENCES turns (id) ON DELETE CASCADE,
    owner TEXT COLLATE "C",
    expires_at BIGINT NOT NULL,
    claims BIGINT NOT NULL
);

-- When the turn finished (the `at` of its terminal state); NULL while it runs. Finished turns
-- keep their stream for the retention time, then lose it (`stream_deleted`); their content
-- events stay until the session is deleted.
ALTER TABLE turns ADD COLUMN finished_at TEXT COLLATE "C";
ALTER TABLE turns ADD COLUMN stream_deleted BOOLEAN NOT NULL DEFAULT FALSE;

UPDATE turns SET finished_at = state::json ->> 'completed_at' WHERE status <> 'running';

-- Serves delete_expired_streams: only finished turns that still have their stream.
CREATE INDEX turns_retained_streams ON turns (finished_at) WHERE finished_at IS NOT NULL AND NOT stream_deleted;
