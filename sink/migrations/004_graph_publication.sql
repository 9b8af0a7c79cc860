-- 004: how far the graph changes have been published to Kafka (stream_processor/writer.py).
--
-- The processor publishes a committed batch's graph changes (openlineage.graph) after the batch's
-- transaction, on a background thread. One row per published stream holds the last batch whose
-- changes were fully published (delivery confirmed by the broker); committed batches above it
-- (lineage_transactions.batch_id > last_batch_id) are published again, in order, on the next batch
-- or after a restart. Batch ids only grow, so a high-water mark is enough.
--
-- Batches committed before this migration are taken as published (the processor published them
-- then): the mark starts at the newest committed batch, -1 on an empty database.

CREATE TABLE IF NOT EXISTS lineage_publications (
    stream          text PRIMARY KEY,                   -- 'graph'
    last_batch_id   bigint NOT NULL,                    -- every committed batch <= this one is published
    published_at    timestamptz NOT NULL DEFAULT now()
);

INSERT INTO lineage_publications (stream, last_batch_id)
SELECT 'graph', coalesce(max(batch_id), -1) FROM lineage_transactions
ON CONFLICT (stream) DO NOTHING;
