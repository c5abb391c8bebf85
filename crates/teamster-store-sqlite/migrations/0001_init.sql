-- The initial schema of the SQLite store: agents with immutable versions, sessions, turns, and
-- the two parts of each turn's event log (the stream and the folded content).
--
-- JSON columns hold serde_json text of the protocol types. Timestamps are fixed-width RFC 3339
-- text, so they compare and sort as strings. Event data is stored exactly as given.

CREATE TABLE agents (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL UNIQUE,
    -- The version that get_agent and list_agents return.
    latest_version INTEGER NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE agent_versions (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    -- The AgentSpec as JSON.
    spec TEXT NOT NULL,
    -- When this version was stored (the record's updated_at).
    created_at TEXT NOT NULL,
    PRIMARY KEY (agent_id, version)
) STRICT, WITHOUT ROWID;

-- Sessions do not reference agents: a session that pinned a version outlives its agent.
CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    -- 'session' (bound to a saved agent) or 'session/draft' (carries its own spec).
    kind TEXT NOT NULL CHECK (kind IN ('session', 'session/draft')),
    -- The saved agent and pinned version; NULL for drafts.
    agent_id TEXT,
    agent_version INTEGER,
    -- The saved agent's name, or a draft's optional link to one.
    agent_name TEXT,
    -- A draft's AgentSpec as JSON; NULL for saved sessions.
    draft_spec TEXT,
    title TEXT,
    -- The creator's subject_id (for filtering) and the whole Subject as JSON.
    created_by_id TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_turn_id TEXT
) STRICT;

-- One index per listing shape: unfiltered or filtered by creator, agent name or agent id,
-- ordered by either timestamp with the id as tie-break (the keyset cursor).
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_updated ON sessions (updated_at, id);
CREATE INDEX sessions_by_creator_created ON sessions (created_by_id, created_at, id);
CREATE INDEX sessions_by_creator_updated ON sessions (created_by_id, updated_at, id);
CREATE INDEX sessions_by_agent_name_created ON sessions (agent_name, created_at, id);
CREATE INDEX sessions_by_agent_id_created ON sessions (agent_id, created_at, id);

CREATE TABLE turns (
    id TEXT PRIMARY KEY NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    previous_turn_id TEXT,
    -- The Vec<TurnInput> as JSON.
    input TEXT NOT NULL,
    -- The TurnState as JSON, and its status alone for finding running turns.
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    -- The Subject as JSON.
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- Serves the cascade from sessions and listing a session's turns.
CREATE INDEX turns_by_session ON turns (session_id, created_at, id);
-- Serves running_turns: only running turns are in it.
CREATE INDEX turns_running ON turns (created_at, id) WHERE status = 'running';

-- Every event of a turn, deltas included, as the exact text that was sent.
CREATE TABLE stream_events (
    turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (turn_id, sequence)
) STRICT, WITHOUT ROWID;

-- The folded, list-visible events of a turn, at the sequence number of the event they fold.
CREATE TABLE content_events (
    turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (turn_id, sequence)
) STRICT, WITHOUT ROWID;
