"""What the stream's plumbing costs without the graph: ``python -m benchmarks.stream_plumbing_probe [--events N]
[--stage all|decode-dedupe]``.

This runs the very same query as the processor (``stream_processor.pipeline.build_stream``: Kafka source,
decode, dedupe in state) on the same demo events, but its ``foreachBatch`` only counts the rows in one
Python pass over the batch (as the writer's staging pass reads it, making each `$self` part's staging row)
- no derive, no PostgreSQL, no enrich, no Parquet, no topics. Since session 11 the `$self` recombination
is no Spark operator: its cost is that staging row here and the finisher's step in the store
(``benchmarks/self_groups_bench.py``). The CPU of this process tree (driver, JVM, Python workers; the broker is not in it) from the first
batch's commit to the last one's, per event of those batches, is what the plumbing costs; the rest of the
full pipeline's figure is the graph's.

Since session 39 decode also derives each plain event's graph rows from the event it parsed (issue 18's "parse
once"; ``LINEAGE_DERIVE_AT_DECODE``, on by default), work that was the staging pass's: with the default this
figure includes that derivation and the graph rows' bytes through the JVM. The plumbing alone, as measured up to
session 38: ``LINEAGE_DERIVE_AT_DECODE=false python -m benchmarks.stream_plumbing_probe``.

Run from the repository root (it imports benchmarks.e2e_bench and benchmarks.idle_cpu). Prints figures; asserts nothing.

Up to session 10 (the query with the `$self` operator) - measured 2026-11-23 (20,000 demo events, batches of 5,000, machine otherwise quiet): batches 2..5, 15,027
events in 11.9 s = 1,260 events/s, 19.6 CPU-s = 1.30 ms/event with both cores 82 % busy. The full pipeline
spends ~3.6 ms/event (README): ~1.3 ms is this plumbing, ~2.3 ms the graph (derive, COPY, merge, enrich,
Parquet, topics). Even a free sink would leave this design at ~1,300 events/s on 2 cores.

``--unfused`` decodes in a ``mapInArrow`` after the source (the plan before the ``lineage_kafka`` reader
decoded in its own tasks; :func:`stream_processor.pipeline.decoded_stream`), for A/B runs.

``--stage decode-dedupe`` stops before the `$self` operator (the counted rows are then the deduplicated,
not yet recombined, events): 0.65 and 0.57 ms/event, interleaved with 1.58 and 1.50 for ``--stage all``
(2026-11-23, machine shared).

The operator's share is paid per `$self` group, not per plain row. 245 of each 5,000 demo messages carry
``$self``, and ~240 recombined rows come out per batch (one-part groups, mostly). CPU-s per 5,000-event
batch, 20,000 demo events, one JVM reading one topic with each plan in turn (an ad hoc A/B script):
decode + dedupe only 2.4-2.7; the full query 3.8-4.1; decode + dedupe + the operator fed ONLY the `$self`
parts (sink counting ~240 rows) 3.9-4.5, i.e. ~6 ms of CPU per one-part group. Plain rows pass through
the operator's 8 bucket groups at a cost within the noise. py-spy of the Python workers in the `$self`-only
run: importlib 16 %, Arrow-to-pandas of the groups 14 %, JSON encoding 9 % of all samples (decode 27 %).
A plan that routes plain rows around the operator (shared ``event_hash`` shuffle, a dedupe per side, union;
branch ``helper/self-bypass``) measured 0.91-1.05 ms/event against 0.88-1.08 for this plan in the same A/B,
and was not adopted: no gain, and a third state operator that old checkpoints cannot resume with.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def _count_rows(batches: Any) -> Any:
    """Count the rows as the writer's staging pass reads them, making each `$self` part's ``stg_self_parts``
    row as it does (the stream's `$self` work on the executors since the recombination moved to the store)."""
    import pyarrow as pa

    from stream_processor.decode import full_rows
    from stream_processor.recombine import is_self_part, part_doc

    n = 0
    for batch in batches:
        for row in full_rows(batch):
            n += 1
            if is_self_part(row):
                part_doc(row)
    yield pa.RecordBatch.from_pydict({"n": [n]})


def main() -> None:
    from benchmarks.e2e_bench import COMPRESSION, COMPRESSIONS

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--max-batch-events", type=int, default=10_000)
    parser.add_argument("--stage", choices=("all", "decode-dedupe"), default="all",
                        help="all: the stream's whole query; decode-dedupe: the same since the $self operator left")
    parser.add_argument("--unfused", action="store_true",
                        help="decode in a mapInArrow after the source, not in lineage_kafka's reader tasks")
    parser.add_argument("--compression", choices=COMPRESSIONS, default=COMPRESSION,
                        help="compression.type of the demo messages produced (default: lineage bench's, %(default)s; "
                             "before session 35 they were sent uncompressed: --compression none)")
    args = parser.parse_args()

    from benchmarks.e2e_bench import _demo_values, _produce
    from benchmarks.idle_cpu import tree_cpu_seconds
    from lineage.embedded.broker import EmbeddedBroker, create_topics
    from stream_processor.dedupe import dedupe_within_window
    from stream_processor.pipeline import build_stream, decoded_stream
    from stream_processor.session import build_spark_session
    from stream_processor.settings import ProcessorSettings

    work = Path(tempfile.mkdtemp(prefix="lineage-plumbing-"))
    broker = EmbeddedBroker(partitions=3, topics=(), log_path=work / "tansu.log").start()
    try:
        topic = f"plumbing{uuid.uuid4().hex[:6]}.events"
        create_topics(broker.bootstrap, [topic], partitions=3)
        _produce(broker.bootstrap, topic, _demo_values(args.events), compression=args.compression)
        settings = ProcessorSettings(bootstrap_servers=broker.bootstrap, postgres_dsn="postgresql://unused/x",
                                     topic_events=topic, checkpoint_dir=str(work / "ck"),
                                     max_offsets_per_trigger=args.max_batch_events, recombine_quiet_seconds=2.0)
        spark = build_spark_session(app_name="plumbing-probe", shuffle_partitions=settings.shuffle_partitions)
        spark.conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        marks: list[tuple[int, float, float]] = []   # (rows so far, wall, tree CPU) at each batch's end

        def count(df: Any, _batch_id: int) -> None:
            rows = sum(r["n"] for r in df.mapInArrow(_count_rows, "n long").collect())
            if rows:
                total = (marks[-1][0] if marks else 0) + rows
                marks.append((total, time.monotonic(), tree_cpu_seconds(os.getpid())))

        if args.stage == "all":
            stream = build_stream(spark, settings, fuse_decode=not args.unfused)
        else:
            decoded = decoded_stream(spark, settings, fuse_decode=not args.unfused)
            stream = dedupe_within_window(decoded, settings.dedupe_window_seconds)
        query = (stream.writeStream.foreachBatch(count)
                 .option("checkpointLocation", settings.checkpoint_dir).trigger(processingTime="0.5 seconds").start())
        deadline = time.monotonic() + 900
        while (not marks or marks[-1][0] < args.events * 0.98) and time.monotonic() < deadline:
            time.sleep(0.5)   # demo traffic holds a few duplicates, which the dedupe drops
        # stopped between triggers, not in one: interrupting a running batch's Python work made Spark's stream
        # thread log a StackOverflowError (java.util.regex, formatting the interruption) after the figures
        settle = time.monotonic() + 10
        while query.status.get("isTriggerActive") and time.monotonic() < settle:
            time.sleep(0.05)
        query.stop()
        spark.stop()
    finally:
        broker.stop()
    if len(marks) < 2:
        print(f"too few batches to measure: {marks}")
        return
    events = marks[-1][0] - marks[0][0]
    cpu = marks[-1][2] - marks[0][2]
    wall = marks[-1][1] - marks[0][1]
    print(f"batches 2..{len(marks)}: {events} events in {wall:.1f} s = {events / wall:.0f} events/s; "
          f"{cpu:.1f} CPU-s of this process tree = {cpu / events * 1000:.2f} ms/event "
          f"({cpu / wall / 2 * 100:.0f} % of 2 cores)")


if __name__ == "__main__":
    main()
