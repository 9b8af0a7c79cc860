-- 016: the stream's reader tasks stage the plain events they decode themselves, under a stage key of their own.
--
-- The lineage_kafka reader task already holds each event parsed (it decodes in the task); it derives the event's
-- graph rows and COPYs them into the staging tables under a stage key computed from its Kafka range (so a re-run
-- of the batch, which reads the same ranges from Spark's offsets log, replaces the same rows), and only narrow
-- rows travel on through the dedupe to foreachBatch (stream_processor/reader_stage.py). The merge then reads the
-- rows under the batch's own id and under its stage keys (sink/postgres.py, ``ANY(keys)``).
--
-- lineage_staged_batches records, with a batch's mark, the stage keys it merges and how many deduplicated
-- events it took from them (its events_in): a batch recovered after a crash is merged from them as it would have
-- been. stg_reader_keys has one row per key a reader task staged, with when: staged rows whose key no batch
-- took (a batch read and never marked: a crash before its foreachBatch, whose re-run is planned anew and stages
-- under new keys; a range whose every event was a duplicate) are swept by key once they are old.
ALTER TABLE lineage_staged_batches ADD COLUMN IF NOT EXISTS stage_keys bigint[] NOT NULL DEFAULT '{}';
ALTER TABLE lineage_staged_batches ADD COLUMN IF NOT EXISTS keyed_events bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS stg_reader_keys (
    stage_key  bigint PRIMARY KEY,
    staged_at  timestamptz NOT NULL DEFAULT now()
);
