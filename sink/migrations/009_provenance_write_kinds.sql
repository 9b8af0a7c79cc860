-- 009: provenance write kinds resolved over all the writes of a dataset, whatever the arrival order.
--
-- declared_type is what the event itself says (sink/derive.py): accessed for a read, created / deleted when
-- its lifecycleStateChange is CREATE or OVERWRITE / DROP, else modified. event_type is the resolved kind:
-- the declared one, except that a plain write (declared modified) that is the earliest write of its node in
-- event time (ties: smallest provenance_id) is created. The merge (sink/postgres.py RESOLVE_WRITE_KINDS)
-- re-resolves the nodes each batch writes, so a late-arriving earlier write becomes created and the
-- record that was created becomes modified (with that batch's last_batch_id, so Parquet and the graph topic
-- carry the change).
ALTER TABLE lineage_provenance ADD COLUMN IF NOT EXISTS declared_type text;
UPDATE lineage_provenance SET declared_type = event_type WHERE declared_type IS NULL;
CREATE INDEX IF NOT EXISTS lineage_provenance_writes ON lineage_provenance (node_id, event_time, provenance_id)
    WHERE declared_type <> 'accessed';
-- the plain writes resolved to created: at most one per node, the one a late earlier write takes it from
CREATE INDEX IF NOT EXISTS lineage_provenance_created ON lineage_provenance (node_id)
    WHERE event_type = 'created' AND declared_type = 'modified';
WITH ranked AS (
    SELECT provenance_id,
           CASE WHEN declared_type <> 'modified' THEN declared_type
                WHEN row_number() OVER (PARTITION BY node_id ORDER BY event_time, provenance_id) = 1 THEN 'created'
                ELSE 'modified' END AS want
      FROM lineage_provenance WHERE declared_type <> 'accessed')
UPDATE lineage_provenance p SET event_type = r.want
  FROM ranked r WHERE p.provenance_id = r.provenance_id AND p.event_type IS DISTINCT FROM r.want;
