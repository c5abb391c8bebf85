-- Files of a session (large attachments), stored once and referenced from turns and events by
-- their SHA-256 digest; they go with their session. The bytes are kept in chunks, so that no
-- statement (and no connection's buffer) has to hold a whole file.
CREATE TABLE session_files (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    digest TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, digest)
);

CREATE TABLE session_file_chunks (
    session_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (session_id, digest, chunk),
    FOREIGN KEY (session_id, digest) REFERENCES session_files (session_id, digest) ON DELETE CASCADE
);
