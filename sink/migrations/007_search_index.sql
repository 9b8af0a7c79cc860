-- 007: indexes for search (sink/catalog.py search) and for node detail (sink/catalog.py show).
--
-- Search matches the query, lower-cased, against lower(name) and lower(qualified_name) (which holds the
-- namespace) of datasets and jobs, and against the column names of datasets, in three tiers: exact,
-- prefix, substring.
--   * exact and prefix: btree text_pattern_ops indexes on lower(name) / lower(qualified_name), which
--     serve `= q` and `LIKE 'q%'` whatever the length of q, and need no extension;
--   * substring (`LIKE '%q%'`) and column names: pg_trgm GIN indexes. pg_trgm ships with PostgreSQL
--     (contrib) and is a trusted extension (PG 13+), so the database owner may create it; the embedded
--     PostgreSQL 18 wheel and Debian's PostgreSQL 15 both have it. Where it is missing or may not be
--     created, this migration still succeeds (a WARNING says so): search then answers substring queries
--     by scanning, correct but slow on large graphs. `CREATE EXTENSION pg_trgm` as a superuser and
--     re-create the indexes below (the statements are idempotent) to get them.
-- lineage_field_names(fields) is the lower-cased JSON array of a dataset's column names
-- (`["id", "amount"]`): with the quotes kept, `LIKE '%"q"%'` is an exact column match and `LIKE '%"q%'`
-- a prefix match, both served by one trigram index.
-- lineage_events (job_namespace, job_name, event_time): the latest events of a job (its facets: SQL,
-- sourceCodeLocation, jobType; the tableConstraints facet of the datasets it declares).

CREATE OR REPLACE FUNCTION lineage_field_names(fields jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT lower(jsonb_path_query_array(fields, '$[*].name')::text) $$;

CREATE INDEX IF NOT EXISTS lineage_datasets_name_prefix ON lineage_datasets (lower(name) text_pattern_ops);
CREATE INDEX IF NOT EXISTS lineage_datasets_qname_prefix ON lineage_datasets (lower(qualified_name) text_pattern_ops);
CREATE INDEX IF NOT EXISTS lineage_jobs_name_prefix ON lineage_jobs (lower(name) text_pattern_ops);
CREATE INDEX IF NOT EXISTS lineage_jobs_qname_prefix ON lineage_jobs (lower(qualified_name) text_pattern_ops);
CREATE INDEX IF NOT EXISTS lineage_events_job ON lineage_events (job_namespace, job_name, event_time);

DO $$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'lineage search: the pg_trgm extension is not available (%); substring search will scan '
                      'instead of using a trigram index. Install PostgreSQL''s contrib package and run '
                      'CREATE EXTENSION pg_trgm as a superuser, then the CREATE INDEX statements of '
                      'sink/migrations/007_search_index.sql', SQLERRM;
    END;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE 'CREATE INDEX IF NOT EXISTS lineage_datasets_qname_trgm ON lineage_datasets '
                'USING gin (lower(qualified_name) gin_trgm_ops)';
        EXECUTE 'CREATE INDEX IF NOT EXISTS lineage_jobs_qname_trgm ON lineage_jobs '
                'USING gin (lower(qualified_name) gin_trgm_ops)';
        EXECUTE 'CREATE INDEX IF NOT EXISTS lineage_datasets_fields_trgm ON lineage_datasets '
                'USING gin (lineage_field_names(fields) gin_trgm_ops)';
    END IF;
END
$$;

-- The live-updates poller (api/live.py) reads the batches committed since its last poll, by commit time.
CREATE INDEX IF NOT EXISTS lineage_transactions_committed ON lineage_transactions (committed_at);
