-- 003: indexes for the traversal queries and the per-batch Parquet projection.
--
-- Covering indexes on the edge table let a walk step be an index-only probe (measured with
-- benchmarks/query_bench.py on 1,000,000 edges: upstream depth-5 p95 213 -> 143 ms, downstream
-- 176 -> 59 ms, route 65 -> 27 ms). The last_batch_id indexes let each micro-batch export only
-- the rows it changed (sink/parquet.py write_from_postgres / changed_rows) instead of scanning
-- whole tables as the graph grows.

CREATE INDEX IF NOT EXISTS lineage_edges_tgt_kind_cov ON lineage_edges (target_node_id, kind)
    INCLUDE (source_node_id, edge_type, first_seen, valid_to);
CREATE INDEX IF NOT EXISTS lineage_edges_src_kind_cov ON lineage_edges (source_node_id, kind)
    INCLUDE (target_node_id, edge_type, first_seen, valid_to);

CREATE INDEX IF NOT EXISTS lineage_datasets_batch ON lineage_datasets (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_jobs_batch ON lineage_jobs (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_runs_batch ON lineage_runs (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_edges_batch ON lineage_edges (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_column_lineage_batch ON lineage_column_lineage (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_provenance_batch ON lineage_provenance (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_quality_batch ON lineage_quality (last_batch_id);
CREATE INDEX IF NOT EXISTS lineage_events_batch ON lineage_events (first_batch_id);
