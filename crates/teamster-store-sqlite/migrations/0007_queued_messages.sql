-- Messages clients queued for a session: follow-ups (each starts the next turn once the
-- running one ends) and steers (joined to the running turn at its next model step), kept in
-- order until used or removed. They go with their session.
CREATE TABLE queued_messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('follow_up', 'steer')),
    -- The UserContent as JSON, and the Subject that queued it as JSON.
    content TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX queued_messages_in_order ON queued_messages (session_id, kind, created_at, id);
