-- The initial schema of the PostgreSQL store: agents with immutable versions, sessions, turns, and
-- the two parts of each turn's event log (the stream and the folded content). It mirrors the
-- SQLite store's schema column for column.
--
-- Ids, names and timestamps use the "C" collation, so they compare and sort by bytes whatever
-- the database's locale: listings and keyset cursors then order exactly as in every other
-- backend. Timestamps are the records' fixed-width RFC 3339 text, which sorts as text and reads
-- back exactly as written. JSON columns are TEXT holding serde_json text of the protocol types,
-- and event data is TEXT too: the store returns the very bytes it was given (JSONB would
-- reorder keys and respell numbers).

CREATE TABLE agents (
    id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    -- The version that get_agent and list_agents return.
    latest_version BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL
);

CREATE TABLE agent_versions (
    agent_id TEXT COLLATE "C" NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    version BIGINT NOT NULL,
    -- The AgentSpec as JSON.
    spec TEXT NOT NULL,
    -- When this version was stored (the record's updated_at).
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (agent_id, version)
);

-- Sessions do not reference agents: a session that pinned a version outlives its agent.
CREATE TABLE sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    -- 'session' (bound to a saved agent) or 'session/draft' (carries its own spec).
    kind TEXT NOT NULL CHECK (kind IN ('session', 'session/draft')),
    -- The saved agent and pinned version; NULL for drafts.
    agent_id TEXT COLLATE "C",
    agent_version BIGINT,
    -- The saved agent's name, or a draft's optional link to one.
    agent_name TEXT COLLATE "C",
    -- A draft's AgentSpec as JSON; NULL for saved sessions.
    draft_spec TEXT,
    title TEXT,
    -- The creator's subject_id (for filtering) and the whole Subject as JSON.
    created_by_id TEXT COLLATE "C" NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    -- The compare-and-set target of create_turn: its row lock serialises concurrent creates.
    last_turn_id TEXT COLLATE "C"
);

-- One index per listing shape: unfiltered or filtered by creator, agent name or agent id,
-- ordered by either timestamp with the id as tie-break (the keyset cursor).
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_updated ON sessions (updated_at, id);
CREATE INDEX sessions_by_creator_created ON sessions (created_by_id, created_at, id);
CREATE INDEX sessions_by_creator_updated ON sessions (created_by_id, updated_at, id);
CREATE INDEX sessions_by_agent_name_created ON sessions (agent_name, created_at, id);
CREATE INDEX sessions_by_agent_id_created ON sessions (agent_id, created_at, id);

CREATE TABLE turns (
    id TEXT COLLATE "C" PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    previous_turn_id TEXT COLLATE "C",
    -- The Vec<TurnInput> as JSON.
    input TEXT NOT NULL,
    -- The TurnState as JSON, and its status alone for finding running turns.
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    -- The Subject as JSON.
    created_by TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL
);

-- Serves the cascade from sessions and listing a session's turns.
CREATE INDEX turns_by_session ON turns (session_id, created_at, id);
-- Serves running_turns: only running turns are in it.
CREATE INDEX turns_running ON turns (created_at, id) WHERE status = 'running';

-- Every event of a turn, deltas included, as the exact text that was sent.
CREATE TABLE stream_events (
    turn_id TEXT COLLATE "C" NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (turn_id, sequence)
);

-- The folded, list-visible events of a turn, at the sequence number of the event they fold.
CREATE TABLE content_events (
    turn_id TEXT COLLATE "C" NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (turn_id, sequence)
);
