-- Agent names are unique per tenant, not across the server; mirrors the PostgreSQL store's
-- migration 0012.
--
-- SQLite cannot drop a column's UNIQUE constraint, so both agent tables are built again and the
-- rows copied (every existing name was unique across the server, so it is unique in its tenant).
-- The new versions table references the new agents table, which is renamed into place only after
-- the old tables are gone: dropping the old agents table then cascades to nothing, and the
-- rename carries the reference along.
CREATE TABLE agents_by_tenant (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    -- The version that get_agent and list_agents return.
    latest_version INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT 'local',
    created_by TEXT,
    UNIQUE (tenant, name)
) STRICT;

CREATE TABLE agent_versions_by_tenant (
    agent_id TEXT NOT NULL REFERENCES agents_by_tenant (id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    -- The AgentSpec as JSON.
    spec TEXT NOT NULL,
    -- When this version was stored (the record's updated_at).
    created_at TEXT NOT NULL,
    PRIMARY KEY (agent_id, version)
) STRICT, WITHOUT ROWID;

INSERT INTO agents_by_tenant (id, name, latest_version, created_at, tenant, created_by)
    SELECT id, name, latest_version, created_at, tenant, created_by FROM agents;
INSERT INTO agent_versions_by_tenant (agent_id, version, spec, created_at)
    SELECT agent_id, version, spec, created_at FROM agent_versions;

DROP TABLE agent_versions;
DROP TABLE agents;
ALTER TABLE agents_by_tenant RENAME TO agents;
ALTER TABLE agent_versions_by_tenant RENAME TO agent_versions;
