-- Turn leases and stream retention.
--
-- The replica that runs a turn holds its lease: `owner` (the replica's id) until `expires_at`
-- (milliseconds since the Unix epoch, on the database's clock), and renews it. `claims` counts
-- the turn's claims (1: its creator's; more: takeovers), so every hold is distinct and
-- renewals and takeovers compare and set on it. create_turn adds an unclaimed lease (no owner,
-- claims 0) that expires after a short grace; the creator's first renewal claims it. A running
-- turn whose lease has expired, or that has none (turns left running before this migration),
-- is taken over by another replica. Leases live in a table of their own so that renewing them
-- never waits on the locks of log writes, which update turns.
CREATE TABLE turn_leases (
    turn_id TEXT PRIMARY KEY NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    owner TEXT,
    expires_at INTEGER NOT NULL,
    claims INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- When the turn finished (the `at` of its terminal state); NULL while it runs. Finished turns
-- keep their stream for the retention time, then lose it (`stream_deleted`); their content
-- events stay until the session is deleted.
ALTER TABLE turns ADD COLUMN finished_at TEXT;
ALTER TABLE turns ADD COLUMN stream_deleted INTEGER NOT NULL DEFAULT 0;

UPDATE turns SET finished_at = state ->> '$.completed_at' WHERE status <> 'running';

-- Serves delete_expired_streams: only finished turns that still have their stream.
CREATE INDEX turns_retained_streams ON turns (finished_at) WHERE finished_at IS NOT NULL AND stream_deleted = 0;
