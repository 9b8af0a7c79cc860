"""A checkpoint written with the `$self` Spark operator (up to session 10) is upgraded on start: its open groups are
carried into the store and emitted there, and a new checkpoint starts at its committed offsets.

The old checkpoint is made here by a query of the old plan's shape: decode, dedupe, then
``applyInPandasWithState`` keyed by the `$self` group with the old state schema, holding each group open
(the old operator kept a group in state until its quiet period passed)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.checkpoint_upgrade import BACKUP_SUFFIX, STARTING_OFFSETS_FILE, committed_offsets
from stream_processor.testing import StreamHarness, produce, run_event, test_settings, utc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NS = "evogeoscienceobject://hub1/inst/ws"
OLD_STATE_SCHEMA = "parts string, revision int, pending boolean, emitted_parts int"


def _part(run_id: str, name: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    event = run_event(run_id, "COMPLETE", utc(-0.001), job="evo.publish", inputs=["source"], outputs=["$self"],
                      namespace=NS)
    return encode_single_object(event), [("lineage.subject", json.dumps({"namespace": NS, "name": name}).encode())]


def _run_old_plan(spark, settings) -> None:
    """Run the old plan over what the topic holds, keeping every `$self` group open in operator state."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from stream_processor.dedupe import dedupe_within_window
    from stream_processor.pipeline import decoded_stream

    def hold(key, frames, state):
        import json as j

        import pandas as pd

        from stream_processor.decode import unpack_row
        if not key[0].startswith("self\x1f"):
            for _ in frames:
                pass
            return
        parts = j.loads(state.get[0]) if state.exists else []
        for pdf in frames:
            for _, row in pdf.iterrows():
                full = {**row, **unpack_row(row["packed"])}
                parts.append({"event_json": full["event_json"], "event_hash": full["event_hash"],
                              "event_time": pd.Timestamp(full["event_time"]).isoformat(),
                              "kafka_timestamp": full["kafka_timestamp"].isoformat(),
                              "source_topic": full["source_topic"], "source_partition": int(full["source_partition"]),
                              "source_offset": int(full["source_offset"]), "encoding": full["encoding"], "key": None})
        state.update((j.dumps(parts), 0, True, 0))
        state.setTimeoutDuration(3_600_000)
        yield pd.DataFrame({"group_key": [key[0]]})

    deduped = dedupe_within_window(decoded_stream(spark, settings), settings.dedupe_window_seconds)
    group = F.when(F.col("has_self"), F.concat_ws("\x1f", F.lit("self"), F.col("run_id"), F.col("event_type"))) \
        .otherwise(F.lit("plain:0"))
    stream = (deduped.withColumn("group_key", group).groupBy("group_key")
              .applyInPandasWithState(hold, "group_key string", OLD_STATE_SCHEMA, "append",
                                      GroupStateTimeout.ProcessingTimeTimeout))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    query = (stream.writeStream.foreachBatch(lambda df, b: df.count())
             .option("checkpointLocation", settings.checkpoint_dir).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


def test_old_checkpoint_is_upgraded_and_its_open_group_emitted(spark, kafka_bootstrap, topic_names, pg_dsn,
                                                               tmp_path):
    carried_run, new_run = str(uuid.uuid4()), str(uuid.uuid4())
    checkpoint = tmp_path / "ck"
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(checkpoint), recombine_quiet_seconds=1.0)
    topic = topic_names["events"]
    produce(kafka_bootstrap, topic, [_part(carried_run, "a:1"), encode_single_object(run_event(job="before"))])
    _run_old_plan(spark, settings)
    committed = committed_offsets(checkpoint)
    assert committed is not None and sum(json.loads(committed[1])[topic].values()) == 2

    produce(kafka_bootstrap, topic, [_part(new_run, "b:1"), encode_single_object(run_event(job="after"))])

    def emitted() -> dict[str, tuple[int, list[str]]]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT run_id::text, revision, payload FROM lineage_events "
                                "WHERE job_name = 'evo.publish'").fetchall()
        return {r: (rev, sorted(o["name"] for o in json.loads(p)["outputs"])) for r, rev, p in rows}

    with StreamHarness(spark, settings) as h:
        h.drain()
        got = h.wait_for(lambda: len(emitted()) == 2 and emitted(), message="both groups recombined")
    assert got == {carried_run: (1, ["a:1"]), new_run: (1, ["b:1"])}
    with psycopg.connect(pg_dsn) as conn:
        jobs = sorted(j for (j,) in conn.execute("SELECT DISTINCT job_name FROM lineage_events").fetchall())
    # the new checkpoint started at the old one's committed offsets: what the old query read is not read again
    # (its no-op sink never wrote "before"), what came after is
    assert jobs == ["after", "evo.publish"]
    backup = Path(str(checkpoint) + BACKUP_SUFFIX)
    assert (backup / "commits").is_dir() and (checkpoint / STARTING_OFFSETS_FILE).is_file()
    assert committed_offsets(checkpoint) is not None   # the new checkpoint committed its own batches
