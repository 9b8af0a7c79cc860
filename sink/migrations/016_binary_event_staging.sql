-- 016: stg_events is COPYed in binary format, so its event_time and run_id are staged as the text the deriver
-- wrote and cast by the events merge (MERGE_EVENTS: event_time::timestamptz, run_id::uuid).
--
-- Each staged event row carries the event's text (~4 kB of demo traffic). In COPY's text format the server scans
-- every byte of it for delimiters and escapes (and the client checks it for the characters to escape); in the
-- binary format both sides take it by its length. Binary fields must be in the column type's binary form, and
-- the deriver has these two values as text (the validator's ISO-8601 UTC time, the run's UUID): staged as
-- text, the server parses them once, in the merge, with the same input functions COPY text used, so the stored
-- values are the same. The merge is the only reader of stg_events' rows (sink/postgres.py).
--
-- The backend's CPU for the payload COPY of 10,000 demo events (3.9 kB texts, an embedded PostgreSQL 18), 3 rounds:
-- text 73 (67-85) us per event, binary 56 (48-57) (docs/PERFORMANCE.md, session 27).
ALTER TABLE stg_events
    ALTER COLUMN event_time TYPE text USING event_time::text,
    ALTER COLUMN run_id TYPE text USING run_id::text;
