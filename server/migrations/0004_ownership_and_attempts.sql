-- Comments belong to the token that wrote them, by its id: token names are
-- not unique (the default is "default"). A comment protects its snapshot
-- from retention only when its author could upload or pin (an uploader or
-- an admin); NULL, for comments written before this migration, still
-- protects as before.
ALTER TABLE comments ADD COLUMN author_token TEXT;
ALTER TABLE comments ADD COLUMN author_role TEXT;

-- Background parses started for a snapshot. A server that stopped during
-- one, perhaps killed by the file, does not start it at every start-up.
ALTER TABLE snapshots ADD COLUMN parse_attempts BIGINT NOT NULL DEFAULT 0;

-- A telemetry source belongs to the token whose agent created it: another
-- token cannot write samples under its name or ask it to capture (NULL
-- without tokens).
ALTER TABLE telemetry_sources ADD COLUMN owner_token TEXT;

-- Secrets every instance shares, made by the first to start: `link_key`
-- signs the download links of the dashboard (a plain link carries no token).
CREATE TABLE server_secrets (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
