-- Team review: comments on snapshots, and pins that retention respects.
-- Like 0001, only what both SQLite and PostgreSQL accept.

-- A pinned snapshot is never deleted by the retention policy.
-- 0 or 1 (no BOOLEAN: sqlx's Any driver decodes integers on both).
ALTER TABLE snapshots ADD COLUMN pinned BIGINT NOT NULL DEFAULT 0;

-- One row per comment. A comment may refer to a moment of the snapshot's
-- timeline (`trace_row` and/or `time_us`) and to an allocation (`addr`, at
-- that moment); all three are optional.
CREATE TABLE comments (
    id          TEXT PRIMARY KEY,
    snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    -- The name of the API token that wrote it ('local' without tokens).
    author      TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    trace_row   BIGINT,
    time_us     BIGINT,
    -- Decimal text: device addresses reach above 2^63, past BIGINT.
    addr        TEXT
);

-- The review thread of a snapshot, oldest first; also "has comments?" for retention.
CREATE INDEX comments_snapshot_idx ON comments (snapshot_id, created_ms);
