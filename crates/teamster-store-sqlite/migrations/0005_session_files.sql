-- Files of a session (large attachments), stored once and referenced from turns and events by
-- their SHA-256 digest; they go with their session.
CREATE TABLE session_files (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    digest TEXT NOT NULL,
    media_type TEXT NOT NULL,
    data BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, digest)
) WITHOUT ROWID;
