-- 012: `$self` recombination state lives in PostgreSQL, next to the graph it feeds, instead of in a Spark
-- stateful operator (stream_processor/recombine.py, "Recombination in the store").
--
-- The staging pass writes each `$self` part of a batch to stg_self_parts, in the same transaction as the
-- batch's other staged rows. The writer, before it marks the batch for merging, moves them into lineage_self_parts
-- (one row per part of a group: (runId, eventType) and the part's event hash), marks their groups pending,
-- and recombines every group that has been quiet for the quiet period into one event staged with the batch:
-- the parts, the group's revision and the recombined rows commit in one transaction, so an emission is
-- neither lost nor repeated by a crash. Emitted groups are kept for the state TTL, for late parts (a late
-- part re-opens its group: revision + 1), then deleted with their parts.
--
-- Why: in Spark every event went through applyInPandasWithState, plain ones too (one linear plan), and
-- every `$self` group cost a pandas round trip on a Python worker: half of the plumbing's CPU on demo
-- traffic (issue 18). Here a plain event costs nothing and a part one COPY row.
CREATE TABLE IF NOT EXISTS stg_self_parts (
    batch_id   bigint  NOT NULL,
    part       integer NOT NULL,
    group_key  text    NOT NULL,            -- self<US>runId<US>eventType (recombine.self_group_key)
    event_hash text    NOT NULL,
    doc        text    NOT NULL             -- the part: event text, times, Kafka coordinates (JSON)
);
CREATE INDEX IF NOT EXISTS stg_self_parts_batch ON stg_self_parts (batch_id, part);

CREATE TABLE IF NOT EXISTS lineage_self_groups (
    group_key     text        PRIMARY KEY,
    revision      integer     NOT NULL DEFAULT 0,     -- of the last emission (0: never emitted)
    pending       boolean     NOT NULL,               -- a part arrived since the last emission
    last_part_at  timestamptz NOT NULL,               -- when the newest part was absorbed (processing time)
    emitted_parts integer     NOT NULL DEFAULT 0,     -- parts merged into the last emission
    emitted_at    timestamptz,
    emitted_batch bigint                              -- the store batch that carried the last emission
);
CREATE INDEX IF NOT EXISTS lineage_self_groups_due ON lineage_self_groups (pending, last_part_at);

CREATE TABLE IF NOT EXISTS lineage_self_parts (
    group_key  text NOT NULL,                          -- its lineage_self_groups row
    event_hash text NOT NULL,
    doc        text NOT NULL,
    PRIMARY KEY (group_key, event_hash)
);
