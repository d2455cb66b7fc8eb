-- vramscope's metadata. One migration set for SQLite and PostgreSQL, so it
-- sticks to what both accept: TEXT and BIGINT columns, no enums, no JSON
-- types, no partial or expression indexes.

-- One row per uploaded snapshot. The file itself lives in the blob store
-- under `blob_key` (content-addressed, so rows with the same sha256 share it).
CREATE TABLE snapshots (
    id             TEXT PRIMARY KEY,
    sha256         TEXT NOT NULL,
    blob_key       TEXT NOT NULL,
    name           TEXT NOT NULL,
    job            TEXT,
    host           TEXT,
    rank           BIGINT,
    -- JSON array of strings, for reading back; filters use snapshot_tags.
    tags           TEXT NOT NULL,
    -- 'manual' | 'threshold' | 'oom'
    trigger_kind   TEXT NOT NULL,
    size_bytes     BIGINT NOT NULL,
    uploaded_at_ms BIGINT NOT NULL,
    -- 'parsing' | 'ready' | 'failed'
    status         TEXT NOT NULL,
    error          TEXT,
    stats_json     TEXT
);

-- Keyset pagination walks this index backwards (newest first).
CREATE INDEX snapshots_uploaded_idx ON snapshots (uploaded_at_ms, id);
CREATE INDEX snapshots_job_idx ON snapshots (job);
CREATE INDEX snapshots_host_idx ON snapshots (host);
CREATE INDEX snapshots_sha256_idx ON snapshots (sha256);
CREATE INDEX snapshots_blob_key_idx ON snapshots (blob_key);

-- One row per (snapshot, tag): an exact tag filter is an indexed equality
-- here, where a LIKE over the JSON column could match inside another tag.
CREATE TABLE snapshot_tags (
    snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    tag         TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, tag)
);

CREATE INDEX snapshot_tags_tag_idx ON snapshot_tags (tag);

-- API tokens. `id` is the short public part of a token, shown in lists and
-- used to find the row; only an argon2 hash of the secret is kept.
CREATE TABLE tokens (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL,
    secret_hash   TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
