-- 002: staging tables for set-based batch writes (sink/postgres.py).
--
-- A batch is derived in Python (sink/derive.py), COPYed here tagged (batch_id, part), then merged into
-- the graph tables by INSERT ... SELECT ... ON CONFLICT DO UPDATE with event-time guards, in one
-- transaction that also deletes the batch's staged rows. UNLOGGED: staged rows are a cache of derivable
-- data; a crash loses them and the batch is simply staged again. Column order here is the COPY order of
-- sink/derive.py's STAGING_COLUMNS (kept in sync by tests/test_store_migrations.py). Rows may already be
-- reduced per key by sink/derive.py (first_seen / last_seen carry the min / max event time of the key).

CREATE UNLOGGED TABLE IF NOT EXISTS stg_events (
    batch_id bigint NOT NULL, part integer NOT NULL,
    event_hash text, event_kind text, event_type text, event_time timestamptz, run_id uuid,
    job_namespace text, job_name text, producer text, source text, payload jsonb, revision integer
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_namespaces (
    batch_id bigint NOT NULL, part integer NOT NULL,
    namespace text, first_seen timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_datasets (
    batch_id bigint NOT NULL, part integer NOT NULL,
    dataset_id uuid, namespace text, name text, qualified_name text, node_type text, node_type_guess text,
    description text, owner text, tags jsonb, fields jsonb, fields_hash text, alias_of uuid,
    is_placeholder boolean, first_seen timestamptz, last_seen timestamptz, facets_time timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_dataset_versions (
    batch_id bigint NOT NULL, part integer NOT NULL,
    version_id uuid, dataset_id uuid, version text, event_time timestamptz, run_id uuid,
    row_count bigint, byte_count bigint, null_counts jsonb, fields_hash text, fields jsonb,
    assertions jsonb, nominal_end timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_jobs (
    batch_id bigint NOT NULL, part integer NOT NULL,
    job_id uuid, namespace text, name text, qualified_name text, job_type text, description text,
    owners jsonb, tracing jsonb, is_placeholder boolean, first_seen timestamptz, last_seen timestamptz, facets_time timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_job_versions (
    batch_id bigint NOT NULL, part integer NOT NULL,
    job_version_id uuid, job_id uuid, source_type text, source_url text, git_commit text, sql text,
    first_seen timestamptz, last_seen timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_runs (
    batch_id bigint NOT NULL, part integer NOT NULL,
    run_id uuid, job_id uuid, job_version_id uuid, state text, state_rank smallint, state_time timestamptz,
    started_at timestamptz, ended_at timestamptz, nominal_start timestamptz, nominal_end timestamptz,
    error_message text, parent_run_id uuid, parent_job_id uuid, root_run_id uuid, producer text,
    is_placeholder boolean, first_seen timestamptz, last_seen timestamptz, facets_time timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_run_io (
    batch_id bigint NOT NULL, part integer NOT NULL,
    run_id uuid, dataset_id uuid, direction text, version_id uuid, event_time timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_edges (
    batch_id bigint NOT NULL, part integer NOT NULL,
    edge_id uuid, source_node_id uuid, target_node_id uuid, kind text, edge_type text, job_id uuid,
    job_version_id uuid, run_id uuid, transformation jsonb, metadata jsonb, tracing jsonb,
    first_seen timestamptz, last_seen timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_column_lineage (
    batch_id bigint NOT NULL, part integer NOT NULL,
    column_lineage_id uuid, source_dataset_id uuid, source_table text, source_column text,
    target_dataset_id uuid, target_table text, target_column text, transformation_type text,
    transformation_logic text, dependencies jsonb, job_id uuid, first_seen timestamptz, last_seen timestamptz
);
CREATE UNLOGGED TABLE IF NOT EXISTS stg_provenance (
    batch_id bigint NOT NULL, part integer NOT NULL,
    provenance_id uuid, node_id uuid, event_hash text, event_type text, event_time timestamptz,
    agent jsonb, operation jsonb, context jsonb, tracing jsonb
);

CREATE INDEX IF NOT EXISTS stg_events_b ON stg_events (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_namespaces_b ON stg_namespaces (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_datasets_b ON stg_datasets (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_dataset_versions_b ON stg_dataset_versions (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_jobs_b ON stg_jobs (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_job_versions_b ON stg_job_versions (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_runs_b ON stg_runs (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_run_io_b ON stg_run_io (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_edges_b ON stg_edges (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_column_lineage_b ON stg_column_lineage (batch_id, part);
CREATE INDEX IF NOT EXISTS stg_provenance_b ON stg_provenance (batch_id, part);
