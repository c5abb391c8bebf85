-- Cancel requests: a replica that cannot reach a running turn in memory records the request
-- here for the process that runs it. The first reason recorded (a cancel reason's wire name,
-- such as 'client-cancelled') wins; NULL means no request. A single SQLite process runs every
-- turn of its database itself, so it only records requests; the column mirrors PostgreSQL's.
ALTER TABLE turns ADD COLUMN cancel_requested TEXT;
