-- 010: the staging pass hands the enrich step everything it needs, so the enriched records are made on the
-- driver after the merge from what PostgreSQL holds, instead of by a second Spark pass over the batch
-- (stream_processor/enrich.py).
--
-- Per staged event, besides its annotation keys (006): the Kafka key of the message it came from
-- (record_key) and the enriched record without its event text, annotations and processing time (record,
-- JSON; stream_processor/publish.py enriched_record). The event text is lineage_events.payload; an event the
-- store could not derive has no payload there, so its record carries the event itself and keys is NULL.
-- No longer a cache but the enrich step's input: rows of a batch are deleted once its records are
-- published. LOGGED: a batch whose offsets Spark committed may still wait for its records (a crash between
-- the merge and the publication); the rows are small (~0.5 kB per event).
ALTER TABLE stg_event_keys ADD COLUMN IF NOT EXISTS record_key bytea;
ALTER TABLE stg_event_keys ADD COLUMN IF NOT EXISTS record text;
ALTER TABLE stg_event_keys ALTER COLUMN keys DROP NOT NULL;
ALTER TABLE stg_event_keys SET LOGGED;
