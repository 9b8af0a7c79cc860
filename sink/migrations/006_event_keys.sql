-- 006: the annotation keys of the events a stream batch staged, handed from the staging pass to the enrich
-- pass (stream_processor/writer.py) so that pass does not derive every event a second time.
--
-- One row per staged event: its event_hash and the JSON of its annotation keys
-- (sink/annotations_lookup.py: provenance ids, output versions with their quality ids, dataset names).
-- A cache, never the truth: the enrich pass takes (and deletes) the rows of its events and derives the keys
-- of any event it does not find here, so a lost, stale or concurrently deleted row only costs time.
-- UNLOGGED like the staging tables; not touched by the merge (the enrich pass runs after it).
CREATE UNLOGGED TABLE IF NOT EXISTS stg_event_keys (
    batch_id bigint NOT NULL, part integer NOT NULL,
    event_hash text NOT NULL, keys text NOT NULL
);
CREATE INDEX IF NOT EXISTS stg_event_keys_batch_hash ON stg_event_keys (batch_id, event_hash);
CREATE INDEX IF NOT EXISTS stg_event_keys_part ON stg_event_keys (part, batch_id);
