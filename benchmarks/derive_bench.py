"""What the staging pass's Python work costs per event: derive, COPY text, annotation keys (no Spark, no server).

    PYTHONPATH=. python benchmarks/derive_bench.py [--events 2000] [--repeats 7] [--corpus demo|fixtures]
                                                   [--profile OUT.prof]

Per partition the staging pass (``GraphStore._derive_and_stage``, called by stream_processor/writer.py's
``_stage_and_publish``) derives the events with ``BatchDeriver.add`` 250 at a time, handing each event's own rows
to ``keys_to_text(keys_from_rows(...))`` (``handover``: the annotation keys for the enrich step), writes the
``stg_events`` rows of each chunk as COPY text, reduces the other tables' rows (``finish``) and writes them and
the keys as COPY text. :func:`stage_text` does exactly that, with the COPY text kept in memory instead of sent
to PostgreSQL; the server's side (parsing the COPY, the merge) is not part of this figure.

Events are prepared as the stream hands them to the staging pass: the demo messages (``DemoTraffic(seed=7)``,
encoded as benchmarks/e2e_bench.py sends them) go through ``stream_processor.decode.decode_record`` (decode,
validate, canonical text, hash) and are parsed once (``sink.fastjson.loads``), as writer.py's ``_stored`` does;
none of that is timed. ``--corpus fixtures`` uses the real-producer events of tests/fixtures/openlineage/
instead (the valid ones, repeated up to ``--events``).

Each repeat stages a fresh slice of ``--events`` events (new run ids and hashes, as every batch brings), after
one untimed warm-up slice (a long-lived Python worker has the world's dataset / job ids and schemas memoised).
The figure is CPU time of this thread per event (``time.thread_time``: other processes on the shared 2-core
machine do not inflate it), printed as median and range over the repeats.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from schemas.codec import encode_single_object  # noqa: E402
from sink.fastjson import loads  # noqa: E402
from sink.model import StoredEvent  # noqa: E402
from stream_processor.decode import decode_record  # noqa: E402

#: ``GraphStore._derive_and_stage``'s chunk (sink/postgres.py ``_STREAM_EVENTS``).
CHUNK = 250


def _stored_from_message(value: bytes, headers: list[tuple[str, bytes]] | None, source: str) -> list[StoredEvent]:
    out = []
    for row in decode_record(value, headers):
        if row["status"] == "ok":
            out.append(StoredEvent(event=loads(row["event_json"]), event_hash=row["event_hash"], source=source,
                                   text=row["event_json"]))
    return out


def iter_demo_messages(seed: int = 7) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """``(value, headers)`` of the demo messages (``DemoTraffic(seed)``) as benchmarks/e2e_bench.py sends them:
    Avro single-object encoded, or JSON with a ``lineage.subject`` header for a subject's message."""
    from producers.demo import DemoTraffic

    for m in DemoTraffic(seed=seed).messages():
        if m.subject:
            yield json.dumps(m.value).encode(), [("lineage.subject", json.dumps(m.subject).encode())]
        else:
            yield encode_single_object(m.value), None


def demo_messages(n: int, seed: int = 7) -> list[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """The first ``n`` of :func:`iter_demo_messages`."""
    return list(itertools.islice(iter_demo_messages(seed), n))


def demo_events(n: int, skip: int = 0) -> list[StoredEvent]:
    """The accepted events of demo messages ``skip``.. (seed 7, as e2e_bench sends them), ``n`` of them."""
    out: list[StoredEvent] = []
    for i, (value, headers) in enumerate(iter_demo_messages()):
        if len(out) >= n + skip:
            break
        out += _stored_from_message(value, headers, f"demo[0]@{i}")
    return out[skip:skip + n]


def fixture_docs() -> list[tuple[str, dict[str, Any]]]:
    """``(id, document)`` of the spec and client examples and the real-producer corpus under tests/fixtures/openlineage/
    (templates filled as tests/test_real_producers.py fills them), as producers send them."""
    from tests.test_real_producers import CORPUS_EVENTS
    from tests.test_schemas_roundtrip import SPEC_EVENTS

    return [(f"spec/{name}", doc) for name, doc in SPEC_EVENTS] + [(e.id, e.event) for e in CORPUS_EVENTS]


def fixture_events() -> list[tuple[str, StoredEvent]]:
    """``(id, event)`` of every fixture event under tests/fixtures/openlineage/ the decoder accepts: the spec
    and client examples, each standard facet example placed in an event, and the real-producer corpus
    (templates filled as tests/test_real_producers.py fills them)."""
    out = []
    for ident, doc in fixture_docs():
        for k, stored in enumerate(_stored_from_message(json.dumps(doc).encode(), None, ident)):
            out.append((f"{ident}/{k}", stored))
    return out


def _keys_text(stored: StoredEvent, rows: dict[str, list[tuple[Any, ...]]]) -> tuple[str, str]:
    from sink.annotations_lookup import keys_from_rows, keys_to_text

    return stored.event_hash, keys_to_text(keys_from_rows(stored.event_hash, rows))


def stage_text(events: list[StoredEvent], batch_id: int = 1, part: int = 0) -> dict[str, list[str]]:
    """The COPY text the staging pass writes for ``events`` (``GraphStore._derive_and_stage`` with keys),
    per staging table, plus ``stg_event_keys``; and the rejected events as ``source: code``."""
    from sink.derive import STAGING_COLUMNS, BatchDeriver
    from sink.postgres import copy_text

    prefix = f"{int(batch_id)}\t{int(part)}\t"
    deriver = BatchDeriver()
    keys: list[tuple[str, str]] = []

    def on_event(stored: StoredEvent, rows: dict[str, list[tuple[Any, ...]]]) -> None:
        keys.append(_keys_text(stored, rows))

    out: dict[str, list[str]] = {table: [] for table in STAGING_COLUMNS}
    sent = 0
    for start in range(0, len(events), CHUNK):
        deriver.add(events[start:start + CHUNK], on_event)
        fresh = deriver.events_since(sent)
        if fresh:
            sent += len(fresh)
            out["stg_events"].append(copy_text(prefix, fresh))
    rows = deriver.finish()
    for table in STAGING_COLUMNS:
        if table == "stg_events":
            continue
        data = rows.tables[table]
        for start in range(0, len(data), 2000):
            out[table].append(copy_text(prefix, data[start:start + 2000]))
    out["stg_event_keys"] = [copy_text(prefix, keys)] if keys else []
    out["rejected"] = [f"{source}: {exc.code}" for source, exc in rows.rejected]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--corpus", choices=("demo", "fixtures"), default="demo")
    parser.add_argument("--profile", help="write a cProfile of the timed repeats to this file")
    args = parser.parse_args()
    n, repeats = args.events, args.repeats
    if args.corpus == "demo":
        pool = demo_events(n * (repeats + 1))
        slices = [pool[i * n:(i + 1) * n] for i in range(repeats + 1)]
    else:
        fixtures = [s for _, s in fixture_events()]
        pool = list(itertools.islice(itertools.cycle(fixtures), n))
        slices = [pool] * (repeats + 1)
    size = sum(len(s.text or "") for s in pool) / len(pool)
    print(f"{args.corpus}: {n} events per repeat, {size / 1000:.1f} kB mean canonical text, {repeats} repeats")
    stage_text(slices[0])   # warm-up: imports, memoised ids and schemas of the world
    profiler = cProfile.Profile() if args.profile else None
    figures = []
    for events in slices[1:]:
        if profiler:
            profiler.enable()
        start = time.thread_time()
        stage_text(events)
        figures.append((time.thread_time() - start) / len(events) * 1e6)
        if profiler:
            profiler.disable()
    if profiler:
        profiler.dump_stats(args.profile)
    print(f"staging pass (derive + COPY text + keys): median {statistics.median(figures):.0f} us/event "
          f"(range {min(figures):.0f}-{max(figures):.0f}, {repeats} repeats: "
          f"{', '.join(f'{f:.0f}' for f in figures)})")


if __name__ == "__main__":
    main()
