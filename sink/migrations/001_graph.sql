-- 001: the lineage graph. Append-only: never edit a shipped migration, add 002_... instead.
--
-- Conventions
--   * ids are UUIDv5 of qualified names (see sink/ids.py) so replays and parallel writers agree;
--   * every time is timestamptz in UTC, taken from the events' eventTime (event time), never wall time,
--     except the bookkeeping columns *_batch_id / committed_at;
--   * first_seen / last_seen bound an edge's or node's validity in event time (as-of queries);
--   * last_batch_id says which micro-batch last changed a row (the Parquet projection exports by it);
--   * staging tables are UNLOGGED, keyed (batch_id, part) so a retried task replaces its own rows (002);
--   * aliases: a dataset row with alias_of set is another name of the node alias_of points to
--     (symlinks facet); traversals treat coalesce(alias_of, dataset_id) as the node identity.

CREATE TABLE IF NOT EXISTS lineage_namespaces (
    namespace      text PRIMARY KEY,
    first_seen     timestamptz NOT NULL,
    last_batch_id  bigint
);

-- Datasets: WIA-DATA-008 §1.1 lineage nodes.
CREATE TABLE IF NOT EXISTS lineage_datasets (
    dataset_id      uuid PRIMARY KEY,
    namespace       text NOT NULL,
    name            text NOT NULL,
    qualified_name  text NOT NULL,
    node_type       text NOT NULL DEFAULT 'table',  -- table | view | column | report | model | file | stream
    node_type_source text NOT NULL DEFAULT 'guess',  -- 'facet' (datasetType facet) | 'guess' (from the naming)
    description     text,
    owner           text,
    tags            jsonb NOT NULL DEFAULT '[]',
    fields          jsonb NOT NULL DEFAULT '[]',     -- [{name,type,nullable,description}]
    fields_hash     text,
    alias_of        uuid,                             -- symlinks facet: this name is an alias of that node
    is_placeholder  boolean NOT NULL DEFAULT false,   -- referenced, never described by an event of its own
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    facets_time     timestamptz,                      -- event time of the facets held (older never overwrites newer)
    last_batch_id   bigint,
    UNIQUE (namespace, name)
);

CREATE INDEX IF NOT EXISTS lineage_datasets_aliases ON lineage_datasets (dataset_id) WHERE alias_of IS NOT NULL;

-- Dataset revisions (the paper's DatasetRevision): one row per version seen.
CREATE TABLE IF NOT EXISTS lineage_dataset_versions (
    version_id      uuid PRIMARY KEY,
    dataset_id      uuid NOT NULL,
    version         text NOT NULL,
    event_time      timestamptz NOT NULL,
    run_id          uuid,
    row_count       bigint,
    byte_count      bigint,
    null_counts     jsonb NOT NULL DEFAULT '{}',      -- {column: nullCount}
    fields_hash     text,
    fields          jsonb,                            -- schema fields of this version (consistency vs previous)
    assertions      jsonb NOT NULL DEFAULT '[]',      -- dataQualityAssertions.assertions
    nominal_end     timestamptz,                      -- run nominal end (or start) time, for timeliness
    last_batch_id   bigint
);
CREATE INDEX IF NOT EXISTS lineage_dataset_versions_ds ON lineage_dataset_versions (dataset_id, event_time, version_id);

CREATE TABLE IF NOT EXISTS lineage_jobs (
    job_id          uuid PRIMARY KEY,
    namespace       text NOT NULL,
    name            text NOT NULL,
    qualified_name  text NOT NULL,
    job_type        text,                              -- jobType facet: processingType/integration/jobType
    description     text,
    owners          jsonb NOT NULL DEFAULT '[]',
    tracing         jsonb NOT NULL DEFAULT '{}',       -- paper §3.4.4 properties: deterministic, reversible, privacy_preserving, generative, terminal
    is_placeholder  boolean NOT NULL DEFAULT false,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    facets_time     timestamptz,
    last_batch_id   bigint,
    UNIQUE (namespace, name)
);

-- Transform revisions: source location / git commit / SQL.
CREATE TABLE IF NOT EXISTS lineage_job_versions (
    job_version_id  uuid PRIMARY KEY,
    job_id          uuid NOT NULL,
    source_type     text,
    source_url      text,
    git_commit      text,
    sql             text,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    last_batch_id   bigint
);

-- Executions. State machine START -> RUNNING -> COMPLETE | FAIL | ABORT in event time.
CREATE TABLE IF NOT EXISTS lineage_runs (
    run_id          uuid PRIMARY KEY,
    job_id          uuid,
    job_version_id  uuid,
    state           text,
    state_rank      smallint,                          -- START 1 < RUNNING/OTHER 2 < COMPLETE/FAIL/ABORT 3
    state_time      timestamptz,                       -- event time of the event that set `state`
    started_at      timestamptz,
    ended_at        timestamptz,
    duration_ms     bigint,
    nominal_start   timestamptz,
    nominal_end     timestamptz,
    error_message   text,
    parent_run_id   uuid,
    parent_job_id   uuid,
    root_run_id     uuid,
    producer        text,
    is_placeholder  boolean NOT NULL DEFAULT false,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    facets_time     timestamptz,                       -- event time of job/parent/nominal columns held
    last_batch_id   bigint
);
CREATE INDEX IF NOT EXISTS lineage_runs_job ON lineage_runs (job_id);
CREATE INDEX IF NOT EXISTS lineage_runs_parent ON lineage_runs (parent_run_id);

-- Slots: which datasets (and versions) a run read and wrote.
CREATE TABLE IF NOT EXISTS lineage_run_io (
    run_id          uuid NOT NULL,
    dataset_id      uuid NOT NULL,
    direction       text NOT NULL CHECK (direction IN ('input', 'output')),
    version_id      uuid,
    event_time      timestamptz NOT NULL,
    last_batch_id   bigint,
    PRIMARY KEY (run_id, dataset_id, direction)
);
CREATE INDEX IF NOT EXISTS lineage_run_io_ds ON lineage_run_io (dataset_id, direction);

-- WIA §1.2 edges between nodes. Dataset-to-dataset edges carry the WIA edge type;
-- job edges (kind 'reads' / 'writes') connect jobs and datasets for job-level traversal.
CREATE TABLE IF NOT EXISTS lineage_edges (
    edge_id         uuid PRIMARY KEY,                  -- uuid5(source, target, kind, job)
    source_node_id  uuid NOT NULL,
    target_node_id  uuid NOT NULL,
    kind            text NOT NULL,                     -- 'dataset' | 'reads' (dataset->job) | 'writes' (job->dataset)
    edge_type       text NOT NULL,                     -- derived_from | aggregated_from | joined_with | filtered_from | projected_from | reads | writes
    job_id          uuid,
    job_version_id  uuid,
    run_id          uuid,                              -- the run that last produced this edge
    transformation  jsonb NOT NULL DEFAULT '{}',       -- {type, logic, version, git_commit}
    metadata        jsonb NOT NULL DEFAULT '{}',       -- {job_name, execution_time, duration_ms, records_processed}
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    valid_to        timestamptz,                       -- set when a newer job version stopped producing this edge
    tracing         jsonb NOT NULL DEFAULT '{}',       -- the job's tracing properties (terminal stops traversals)
    last_batch_id   bigint
);
CREATE INDEX IF NOT EXISTS lineage_edges_job ON lineage_edges (job_id);
CREATE INDEX IF NOT EXISTS lineage_edges_run ON lineage_edges (run_id);
CREATE INDEX IF NOT EXISTS lineage_edges_src ON lineage_edges (source_node_id);
CREATE INDEX IF NOT EXISTS lineage_edges_tgt ON lineage_edges (target_node_id);

-- WIA §2 column lineage.
CREATE TABLE IF NOT EXISTS lineage_column_lineage (
    column_lineage_id    uuid PRIMARY KEY,              -- uuid5(source table, column, target table, column)
    source_dataset_id    uuid NOT NULL,
    source_table         text NOT NULL,                 -- qualified name
    source_column        text NOT NULL,
    target_dataset_id    uuid NOT NULL,
    target_table         text NOT NULL,
    target_column        text NOT NULL,
    transformation_type  text NOT NULL,                 -- direct | computed | aggregated | joined
    transformation_logic text,
    dependencies         jsonb NOT NULL DEFAULT '[]',
    job_id               uuid,
    first_seen           timestamptz NOT NULL,
    last_seen            timestamptz NOT NULL,
    last_batch_id        bigint
);
CREATE INDEX IF NOT EXISTS lineage_column_lineage_src ON lineage_column_lineage (source_dataset_id, source_column);
CREATE INDEX IF NOT EXISTS lineage_column_lineage_tgt ON lineage_column_lineage (target_dataset_id, target_column);

-- WIA §3 provenance: one record per (event, dataset touched).
CREATE TABLE IF NOT EXISTS lineage_provenance (
    provenance_id   uuid PRIMARY KEY,
    node_id         uuid NOT NULL,
    event_hash      text NOT NULL,
    event_type      text NOT NULL,                      -- created | modified | accessed | deleted
    event_time      timestamptz NOT NULL,
    agent           jsonb NOT NULL,
    operation       jsonb NOT NULL,
    context         jsonb NOT NULL,
    tracing         jsonb NOT NULL DEFAULT '{}',
    last_batch_id   bigint
);
CREATE INDEX IF NOT EXISTS lineage_provenance_node ON lineage_provenance (node_id, event_time);

-- WIA §4 quality annotations, per dataset version.
CREATE TABLE IF NOT EXISTS lineage_quality (
    quality_id      uuid PRIMARY KEY,                   -- uuid5(version_id)
    node_id         uuid NOT NULL,
    version_id      uuid NOT NULL,
    measured_at     timestamptz NOT NULL,
    metrics         jsonb NOT NULL,                     -- {completeness, accuracy, consistency, timeliness}
    validations     jsonb NOT NULL DEFAULT '[]',
    anomalies       jsonb NOT NULL DEFAULT '[]',
    last_batch_id   bigint
);
CREATE INDEX IF NOT EXISTS lineage_quality_node ON lineage_quality (node_id, measured_at);

-- Raw events, unique by canonical event hash: the durable dedupe, the audit trail, the replay source.
CREATE TABLE IF NOT EXISTS lineage_events (
    event_hash      text PRIMARY KEY,
    event_kind      text NOT NULL,                      -- run | dataset | job
    event_type      text,
    event_time      timestamptz NOT NULL,
    run_id          uuid,
    job_namespace   text,
    job_name        text,
    producer        text,
    source          text,                               -- topic[partition]@offset or file:line
    payload         jsonb NOT NULL,                     -- the canonical (normalised) event
    revision        integer NOT NULL DEFAULT 0,         -- $self recombination revision
    first_batch_id  bigint,
    received_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS lineage_events_run ON lineage_events (run_id);
CREATE INDEX IF NOT EXISTS lineage_job_versions_job ON lineage_job_versions (job_id, first_seen);

-- The paper's transaction log: one row per committed micro-batch.
CREATE TABLE IF NOT EXISTS lineage_transactions (
    batch_id        bigint PRIMARY KEY,
    committed_at    timestamptz NOT NULL DEFAULT now(),
    identity        jsonb NOT NULL DEFAULT '{}',        -- committer: host, user, application, version
    producers       jsonb NOT NULL DEFAULT '[]',
    events_in       integer NOT NULL DEFAULT 0,
    events_new      integer NOT NULL DEFAULT 0,
    duplicates      integer NOT NULL DEFAULT 0,
    rows_added      integer NOT NULL DEFAULT 0,
    rows_modified   integer NOT NULL DEFAULT 0,
    rows_by_table   jsonb NOT NULL DEFAULT '{}'         -- {table: rows added or modified}
);
