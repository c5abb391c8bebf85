-- Settings: named JSON documents by kind (model providers, later MCP servers and more). The
-- value is TEXT so that it reads back exactly as written.
CREATE TABLE settings (
    kind TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, name)
);
