-- Write fencing; mirrors the PostgreSQL store's migration 0008.
--
-- A replica writes a turn's log only while it holds the turn's lease: every fenced log write
-- checks the lease's owner and claim in the same command. `taken_by` names the lease's last
-- takeover, `<owner>/<claim>` (NULL before any), which the shared takeover statement sets.
-- PostgreSQL needs it (a unique key whose change makes a takeover wait for log writes in
-- flight); SQLite has one writer, so writes and takeovers never overlap, and it is only kept
-- alike.
ALTER TABLE turn_leases ADD COLUMN taken_by TEXT;
