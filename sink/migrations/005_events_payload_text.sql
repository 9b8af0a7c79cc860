-- 004: raw events are kept as their canonical JSON text (sorted keys, compact separators, UTF-8), the exact
-- text whose sha256 is event_hash, instead of jsonb.
--
-- Why: lineage_events is an audit log, and jsonb re-orders keys and re-formats numbers, so a stored payload
-- could not be re-hashed to prove its identity; text can (sha256(convert_to(payload, 'UTF8')) = event_hash).
-- It is also the bulkiest write of every batch: COPY of 3.7 kB events measured ~16k rows/s into jsonb and
-- ~31k rows/s into text on the same server (benchmarks/store_write_bench.py prints both). Queries that
-- look inside an event cast it: payload::jsonb -> 'job' ->> 'name'.
--
-- Rows written before this migration keep jsonb's text form of the event (same content, jsonb key order).
ALTER TABLE lineage_events ALTER COLUMN payload TYPE text USING payload::text;
ALTER TABLE stg_events ALTER COLUMN payload TYPE text USING payload::text;
