-- Which allocator a telemetry source's process ran on (`native`,
-- `cudaMallocAsync`) and whether its allocator history could be recorded:
-- under cudaMallocAsync it cannot, and the live page says so. NULL for
-- sources of agents from before this migration.
ALTER TABLE telemetry_sources ADD COLUMN backend TEXT;
ALTER TABLE telemetry_sources ADD COLUMN history BIGINT;
