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
-- Column names: lineage_search_columns holds one row per (dataset, column), kept by a trigger on
-- lineage_datasets that fires only when a row is inserted or its `fields` change (schema changes are rare
-- next to the merges of every batch), so exact and prefix column matches are btree range scans that stop
-- at the page size even for a column every dataset has (`id`); substrings use a trigram index on it.
-- lineage_field_names(fields), the lower-cased JSON array of a dataset's column names, is kept for psql.
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

CREATE TABLE IF NOT EXISTS lineage_search_columns (
    column_lower  text NOT NULL,                 -- lower(column name)
    dataset_id    uuid NOT NULL,
    column_name   text NOT NULL,
    PRIMARY KEY (dataset_id, column_name)
);
CREATE INDEX IF NOT EXISTS lineage_search_columns_prefix ON lineage_search_columns (column_lower text_pattern_ops);

CREATE OR REPLACE FUNCTION lineage_search_columns_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.fields IS NOT DISTINCT FROM OLD.fields THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM lineage_search_columns WHERE dataset_id = OLD.dataset_id;
    END IF;
    IF TG_OP <> 'DELETE' AND jsonb_typeof(NEW.fields) = 'array' THEN
        INSERT INTO lineage_search_columns (column_lower, dataset_id, column_name)
        SELECT DISTINCT lower(f ->> 'name'), NEW.dataset_id, f ->> 'name'
        FROM jsonb_array_elements(NEW.fields) f
        WHERE jsonb_typeof(f) = 'object' AND f ->> 'name' IS NOT NULL
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS lineage_search_columns_sync ON lineage_datasets;
CREATE TRIGGER lineage_search_columns_sync AFTER INSERT OR DELETE OR UPDATE OF fields ON lineage_datasets
    FOR EACH ROW EXECUTE FUNCTION lineage_search_columns_sync();

INSERT INTO lineage_search_columns (column_lower, dataset_id, column_name)
SELECT DISTINCT lower(f ->> 'name'), d.dataset_id, f ->> 'name'
FROM lineage_datasets d CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(d.fields) = 'array' THEN d.fields ELSE '[]'::jsonb END) f
WHERE jsonb_typeof(f) = 'object' AND f ->> 'name' IS NOT NULL
ON CONFLICT DO NOTHING;

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
        EXECUTE 'CREATE INDEX IF NOT EXISTS lineage_search_columns_trgm ON lineage_search_columns '
                'USING gin (column_lower gin_trgm_ops)';
    END IF;
END
$$;

-- The live-updates poller (api/live.py) reads the batches committed since its last poll, by commit time.
CREATE INDEX IF NOT EXISTS lineage_transactions_committed ON lineage_transactions (committed_at);
