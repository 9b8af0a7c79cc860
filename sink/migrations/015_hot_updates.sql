-- 015: the rows later batches merge again (column edges, datasets, jobs, runs) are updated in place (HOT) instead
-- of getting a new entry in each of their indexes.
--
-- A column edge, a dataset or a job touched again by a batch only moves its times and last_batch_id; a run's later
-- events (COMPLETE after START, batches apart when the job runs longer than a micro-batch) move its state and times. The B-tree
-- index on last_batch_id (003) made every such update a non-HOT one: a new heap tuple in another page and a new
-- entry in every index of the table (four for lineage_column_lineage), and a dead tuple for VACUUM. Here that index
-- becomes a BRIN index, which since PostgreSQL 16 no longer blocks HOT updates, and the tables keep a quarter of
-- each page free (fillfactor 75) for the new versions. The per-batch export still finds a batch's rows through it
-- (``last_batch_id = b``: the ranges whose maximum reached b, the pages holding rows of that batch).
--
-- GraphStore.write_batch of 25,000 demo events in batches of 5,000 (after a first batch) on the embedded
-- PostgreSQL 18, two alternating runs each: the column-lineage merge 2.04 / 1.78 s -> 0.93 / 0.83 s, datasets
-- 0.70 / 0.69 -> 0.43 / 0.47, jobs 0.19 -> 0.12 / 0.10; the server's CPU 17.6 / 17.0 s -> 16.1 / 15.7 s; 30,389 of
-- 35,190 column-edge updates HOT (none before); the export of those tables' changed rows 0.11 -> 0.15 s per batch.
-- (Runs: 48 updates in that workload, whose runs mostly start and end within one batch.) On PostgreSQL 14 / 15 the BRIN index still serves the export and the updates stay non-HOT, as before.
-- Existing pages fill up as they are; the free space applies to pages written from now on.
DROP INDEX IF EXISTS lineage_column_lineage_batch;
DROP INDEX IF EXISTS lineage_datasets_batch;
DROP INDEX IF EXISTS lineage_jobs_batch;
DROP INDEX IF EXISTS lineage_runs_batch;
CREATE INDEX IF NOT EXISTS lineage_column_lineage_batch_brin ON lineage_column_lineage
    USING brin (last_batch_id) WITH (pages_per_range = 4);
CREATE INDEX IF NOT EXISTS lineage_datasets_batch_brin ON lineage_datasets USING brin (last_batch_id) WITH (pages_per_range = 4);
CREATE INDEX IF NOT EXISTS lineage_jobs_batch_brin ON lineage_jobs USING brin (last_batch_id) WITH (pages_per_range = 4);
CREATE INDEX IF NOT EXISTS lineage_runs_batch_brin ON lineage_runs USING brin (last_batch_id) WITH (pages_per_range = 4);
ALTER TABLE lineage_column_lineage SET (fillfactor = 75);
ALTER TABLE lineage_datasets SET (fillfactor = 75);
ALTER TABLE lineage_jobs SET (fillfactor = 75);
ALTER TABLE lineage_runs SET (fillfactor = 75);
