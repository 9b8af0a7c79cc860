-- 008: a commit sequence number per committed batch, the order the Parquet projection resolves rows by.
--
-- Two writers share the graph: the stream processor (batch ids >= 0: epoch * 2^40 + Spark micro-batch id)
-- and `lineage load` (negative, content-derived batch ids). Batch ids are identities, not an order: a load
-- running beside the stream commits batches whose ids say nothing about when they committed. The Parquet
-- reader keeps, per row id, the row of the latest commit; it needs an order that follows commits.
--
-- commit_seq is drawn from lineage_commit_seq by the DEFAULT of the INSERT INTO lineage_transactions, the
-- last statement of a batch's transaction, after every graph row it changes is locked. Two batches that
-- change one row serialise on that row's lock, so the one that commits later draws the greater number;
-- rows no two batches share need no order. A replayed batch finds its transaction row and keeps its number.
--
-- Existing rows: stream batches keep their batch id as their number (their Parquet files are already named
-- by it), loads get numbers above every stream batch id, and the sequence continues above all of them.
CREATE SEQUENCE IF NOT EXISTS lineage_commit_seq AS bigint MINVALUE 0 START 0;
ALTER TABLE lineage_transactions ADD COLUMN IF NOT EXISTS commit_seq bigint;
UPDATE lineage_transactions SET commit_seq = batch_id WHERE commit_seq IS NULL AND batch_id >= 0;
WITH top AS (SELECT coalesce(max(batch_id), -1) AS m FROM lineage_transactions WHERE batch_id >= 0),
     loads AS (SELECT batch_id, row_number() OVER (ORDER BY committed_at, batch_id) AS n
                 FROM lineage_transactions WHERE commit_seq IS NULL)
UPDATE lineage_transactions t SET commit_seq = top.m + loads.n FROM top, loads WHERE t.batch_id = loads.batch_id;
SELECT setval('lineage_commit_seq', (SELECT coalesce(max(commit_seq), -1) + 1 FROM lineage_transactions), false);
ALTER TABLE lineage_transactions ALTER COLUMN commit_seq SET DEFAULT nextval('lineage_commit_seq');
CREATE UNIQUE INDEX IF NOT EXISTS lineage_transactions_commit_seq ON lineage_transactions (commit_seq);
