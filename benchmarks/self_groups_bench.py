"""What a `$self` group costs in the store's recombination: ``python -m benchmarks.self_groups_bench [--groups N]
[--parts-per-group K] [--repeat R] [--dsn DSN]``.

The finisher's step (:func:`stream_processor.recombine.recombine_in_store`) in its two halves, timed on
``N`` groups of ``K`` demo-like `$self` parts each, in a fresh database (an embedded PostgreSQL unless
``--dsn``):

- absorb: the staging pass's ``stg_self_parts`` rows (COPY, timed too) moved into ``lineage_self_parts``,
  the groups opened (no group due yet);
- emit: every group due: recombined (:func:`~stream_processor.recombine.merge_parts`), derived and staged
  with the batch with its enriched-record hand-over, the groups marked emitted.

Prints milliseconds per group for each (median of ``R`` repeats, with the range). Wall time of this process
and PostgreSQL together, on the finisher's single connection. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any


def _part(run_id: str, index: int) -> dict[str, Any]:
    from schemas.identity import canonical_json, event_hash
    from stream_processor.testing import run_event

    ns = "evogeoscienceobject://hub1/inst/ws"
    event = run_event(run_id, "COMPLETE", "2026-01-01T00:00:00Z", job="evo.publish", inputs=["source", "grid"],
                      outputs=[f"object-{index}:1"], namespace=ns)
    return {"status": "ok", "has_self": True, "run_id": run_id, "event_type": "COMPLETE",
            "event_hash": event_hash(event), "event_json": canonical_json(event),
            "event_time": datetime(2026, 1, 1, tzinfo=UTC), "kafka_timestamp": datetime.now(UTC),
            "source_topic": "events", "source_partition": 0, "source_offset": index, "encoding": "avro",
            "key": run_id.encode()}


def _round(dsn: str, groups: int, per_group: int, batch: int) -> tuple[float, float, float]:
    import psycopg

    from sink.postgres import GraphStore
    from stream_processor.recombine import part_doc, recombine_in_store

    rows = [part_doc(_part(run, i)) for run in (str(uuid.uuid4()) for _ in range(groups)) for i in range(per_group)]
    t0 = time.perf_counter()
    GraphStore.stage_partition(dsn, batch, 0, [], None, rows)
    t1 = time.perf_counter()
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        absorbed = recombine_in_store(conn, batch, 10.0, 3600.0, now=now)
        t2 = time.perf_counter()
        emitted = recombine_in_store(conn, batch + 1, 10.0, 3600.0, now=now + timedelta(seconds=11))
        t3 = time.perf_counter()
    assert absorbed.new_parts == groups * per_group and emitted.emitted == groups, (absorbed, emitted)
    with GraphStore(dsn) as store:   # merge them, so the next round starts from a graph that holds them
        store.merge(batch + 1)
    return (t1 - t0) * 1000 / groups, (t2 - t1) * 1000 / groups, (t3 - t2) * 1000 / groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--groups", type=int, default=250, help="groups per round (demo traffic: ~240 per 5,000 events)")
    parser.add_argument("--parts-per-group", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()

    from sink.postgres import GraphStore

    pg = None
    dsn = args.dsn
    if dsn is None:
        import tempfile
        from pathlib import Path

        from lineage.embedded.postgres import EmbeddedPostgres

        pg = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="selfbench-")) / "pg").start()
        dsn = pg.create_database(f"selfbench_{uuid.uuid4().hex[:8]}")
    try:
        with GraphStore(dsn) as store:
            store.migrate()
        figures = [_round(dsn, args.groups, args.parts_per_group, 10 * (i + 1)) for i in range(args.repeat + 1)][1:]
    finally:
        if pg is not None:
            pg.stop()
    for name, values in zip(("stage (COPY)", "absorb", "emit"), zip(*figures, strict=True), strict=True):
        print(f"{name:>13}: {statistics.median(values):.3f} ms/group (range {min(values):.3f}-{max(values):.3f}; "
              f"{args.groups} groups of {args.parts_per_group} part(s), median of {args.repeat})")


if __name__ == "__main__":
    main()
