-- Write fencing; mirrors the SQLite store's migration 0008.
--
-- A replica writes a turn's log only while it holds the turn's lease: every fenced log write
-- key-share locks the turn's lease row and checks its owner and claim in the same statement.
-- `taken_by` names the lease's last takeover, `<owner>/<claim>` (NULL before any); only
-- takeovers change it. It is part of a unique key so that a takeover's update, which changes
-- a key column, takes the row's exclusive lock: that lock conflicts with the key-share locks
-- of log writes, so a write in flight either commits before the takeover does, or waits for it
-- and then, re-checking the new row, writes nothing. Renewals and releases change no key
-- column, so they never wait on log writes, nor log writes on them. (The owner is part of the
-- value so that replicas racing to give a turn without a lease row its first one insert
-- different keys: the losers then find the winner's row, as the primary key says, rather
-- than fail on this index.)
ALTER TABLE turn_leases ADD COLUMN taken_by TEXT COLLATE "C";

CREATE UNIQUE INDEX turn_leases_takeovers ON turn_leases (turn_id, taken_by);
