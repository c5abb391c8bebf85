-- The resource a session is about (a user, a repository, a ticket: the application's id), for
-- listing a resource's sessions and its creator's resources; mirrors the PostgreSQL store's
-- migration 0014.
ALTER TABLE sessions ADD COLUMN resource_id TEXT;
CREATE INDEX sessions_by_creator_resource ON sessions (created_by_id, resource_id, updated_at, id);
