-- Cancel requests: a replica asked to cancel a turn that runs on another replica records the
-- request here (and announces it on the change feed); the replica running the turn stops it,
-- and also looks here on a slow timer, so a lost announcement only delays the cancel. The
-- first reason recorded (a cancel reason's wire name, such as 'client-cancelled') wins; NULL
-- means no request.
ALTER TABLE turns ADD COLUMN cancel_requested TEXT;
