-- Live telemetry from capture agents (`vramscope agent`). Like 0001, only
-- what both SQLite and PostgreSQL accept: TEXT and BIGINT columns,
-- ON CONFLICT upserts. Samples are bounded by the server's retention pass
-- (older samples thinned to one per window, a cap per source).

-- One row per process of a job that sent telemetry: `source` is
-- `{job}--{host}--rank{N}` (or `--pid{P}` without a rank).
CREATE TABLE telemetry_sources (
    source     TEXT PRIMARY KEY,
    job        TEXT NOT NULL,
    host       TEXT NOT NULL,
    rank       BIGINT,
    local_rank BIGINT,
    world_size BIGINT,
    pid        BIGINT NOT NULL,
    first_ms   BIGINT NOT NULL,
    last_ms    BIGINT NOT NULL
);

CREATE INDEX telemetry_sources_last_idx ON telemetry_sources (last_ms);

-- One row per (source, device, time). The key makes a batch sent twice
-- (an acknowledgement lost to a reconnect) land once.
CREATE TABLE telemetry_samples (
    source            TEXT NOT NULL,
    device            BIGINT NOT NULL,
    t_ms              BIGINT NOT NULL,
    allocated         BIGINT,
    reserved          BIGINT,
    active            BIGINT,
    device_total      BIGINT,
    device_free       BIGINT,
    capacity          BIGINT,
    nvml_used         BIGINT,
    nvml_process_used BIGINT,
    PRIMARY KEY (source, device, t_ms)
);
