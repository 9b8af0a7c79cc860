-- 017: each graph staging table and the enrich step's hand-over table (stg_event_keys) are partitioned into four
-- batch slots (batch_id mod 4), so that a merged (enriched) batch's staged rows go with a TRUNCATE of its slot
-- instead of a DELETE that autovacuum then has to clean up.
--
-- A batch's rows were deleted at the end of its merge (~76,000 rows and ~30 MB a 10,000-event batch of demo events,
-- most of it stg_events' texts and stg_provenance's documents); the DELETE ran on the finisher's critical path and
-- left the dead rows to autovacuum. benchmarks/staging_clear_probe.py (session 46): the DELETE 10 (5-19) us of
-- server CPU per event, a VACUUM right after it 5 (3-5), a TRUNCATE of the same rows 2 (2-3); autovacuum's own
-- rounds over the staging tables cost more than the VACUUM right after (store_server_ledger.py: 0.94 s per 30,000
-- events). At most three stream batches are in flight (writer.py, FINISH_DEPTH), and lineage load stages one batch
-- ahead, so consecutive batch ids never share a slot; the store writes and reads a batch's rows in its slot's tables
-- (stg_<name>_s<slot>) by name and TRUNCATEs them when nothing else holds them (sink/postgres.py, clear_slot:
-- a lock taken without waiting, and no other batch's rows in the slot: another writer's batch, a batch a crash
-- left). Otherwise it DELETEs the batch's rows, as before. Readers may query the parent tables as before.
-- stg_event_keys is read by the enrich step after the merge's commit and cleared by it the same way.
--
-- Rows staged before this migration (a batch a crash left staged) are moved into their slots.
DO $$
DECLARE
    t text;
    s int;
BEGIN
    FOREACH t IN ARRAY ARRAY['stg_events', 'stg_namespaces', 'stg_datasets', 'stg_dataset_versions', 'stg_jobs',
                             'stg_job_versions', 'stg_runs', 'stg_run_io', 'stg_edges', 'stg_column_lineage',
                             'stg_provenance']
    LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_unslotted');
        EXECUTE format('ALTER INDEX %I RENAME TO %I', t || '_b', t || '_unslotted_b');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)'
                       ' PARTITION BY LIST (((batch_id %% 4 + 4) %% 4))', t, t || '_unslotted');
        FOR s IN 0..3 LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES IN (%s)', t || '_s' || s, t, s);
        END LOOP;
        EXECUTE format('CREATE INDEX %I ON %I (batch_id, part)', t || '_b', t);
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', t, t || '_unslotted');
        EXECUTE format('DROP TABLE %I', t || '_unslotted');
    END LOOP;
    ALTER TABLE stg_event_keys RENAME TO stg_event_keys_unslotted;
    ALTER INDEX stg_event_keys_batch_hash RENAME TO stg_event_keys_unslotted_batch_hash;
    ALTER INDEX stg_event_keys_part RENAME TO stg_event_keys_unslotted_part;
    CREATE TABLE stg_event_keys (LIKE stg_event_keys_unslotted INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)
        PARTITION BY LIST (((batch_id % 4 + 4) % 4));
    FOR s IN 0..3 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF stg_event_keys FOR VALUES IN (%s)', 'stg_event_keys_s' || s, s);
    END LOOP;
    CREATE INDEX stg_event_keys_batch_hash ON stg_event_keys (batch_id, event_hash);
    CREATE INDEX stg_event_keys_part ON stg_event_keys (part, batch_id);
    INSERT INTO stg_event_keys SELECT * FROM stg_event_keys_unslotted;
    DROP TABLE stg_event_keys_unslotted;
END $$;
