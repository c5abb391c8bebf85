-- Settings: named JSON documents by kind (model providers, later MCP servers and more).
CREATE TABLE settings (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
