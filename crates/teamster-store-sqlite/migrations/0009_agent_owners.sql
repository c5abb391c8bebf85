-- Agent owners; mirrors the PostgreSQL store's migration 0009.
--
-- An agent belongs to a tenant and records who created it (the creator's Subject as JSON).
-- Agents stored before this migration belong to the tenant `local` (that of the local user of
-- a server without authentication, who is an admin) and have no creator, so with API keys only
-- the admins of a tenant named `local` (and its collaborators) reach them.
ALTER TABLE agents ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
ALTER TABLE agents ADD COLUMN created_by TEXT;
