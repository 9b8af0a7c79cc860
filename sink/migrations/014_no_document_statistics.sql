-- 014: ANALYZE collects no planner statistics for the document columns: every jsonb column of the lineage_*
-- tables (facets, schema fields, provenance agent / operation / context, quality metrics, ...) and the event
-- texts (lineage_events.payload).
--
-- No query filters, joins or groups on these columns as a whole (queries look inside them, payload::jsonb ->
-- 'job', agent ->> 'id', where PostgreSQL has no statistics to use anyway), so their histograms and
-- most-common values were never read. Collecting them was the costliest part of autovacuum's ANALYZE: sorting
-- 30,000 sampled jsonb values per column with jsonb's comparison. GraphStore.write_batch of 40,000 demo events
-- into a fresh embedded PostgreSQL (one autoanalyze of each table on the way), the autovacuum worker's CPU from
-- log_autovacuum_min_duration = 0: 5.78 s before, 3.43 s after (ANALYZE of lineage_provenance 1.13 -> 0.35 s,
-- lineage_dataset_versions 0.98 -> 0.38, lineage_quality 0.74 -> 0.16), beside 22 s of the backend's own CPU.
-- The columns' null fraction and width go too; the planner then takes its defaults for IS NULL tests on them.
DO $$
DECLARE
    col record;
BEGIN
    FOR col IN SELECT c.table_name, c.column_name FROM information_schema.columns c
               WHERE c.table_schema = current_schema() AND c.table_name LIKE 'lineage\_%' AND c.data_type = 'jsonb'
               ORDER BY c.table_name, c.column_name
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', col.table_name, col.column_name);
    END LOOP;
END $$;
ALTER TABLE lineage_events ALTER COLUMN payload SET STATISTICS 0;
