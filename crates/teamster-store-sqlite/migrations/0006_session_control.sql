-- The control layer's choices: the mode and model a session's next turns run with, and the
-- ones each turn ran with (JSON of a SessionControl; NULL when nothing is chosen).
ALTER TABLE sessions ADD COLUMN control TEXT;
ALTER TABLE turns ADD COLUMN control TEXT;
