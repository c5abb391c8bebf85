-- Agent names are unique per tenant, not across the server; mirrored by the SQLite store's
-- migration 0012. Every existing name was unique across the server, so it is unique in its
-- tenant.
ALTER TABLE agents DROP CONSTRAINT agents_name_key;
ALTER TABLE agents ADD CONSTRAINT agents_tenant_name_key UNIQUE (tenant, name);
