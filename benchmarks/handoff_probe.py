"""What handing an event from decode to the staging pass costs in Python, parsed once or twice (no Spark, no server).

    PYTHONPATH=. python benchmarks/handoff_probe.py [--events 2500] [--repeats 5] [--corpus demo|fixtures]

Issue 18's item 1 has decode derive each plain event's graph rows from the event it parsed and hand them on, so
the staging pass never parses the text again (``derive_at_decode``, ``LINEAGE_DERIVE_AT_DECODE``; default on). The
other way hands on the text only and the staging pass parses and derives it. This probe runs both on the same
messages, alternated, each repeat on a fresh slice (new event hashes, as every batch brings):

- *decode*: :class:`stream_processor.decode.DecodedColumns` (packed, as the ``lineage_kafka`` reader tasks run it)
  over the slice's messages, one Arrow batch per 1,000 messages;
- *staging*: what stream_processor/writer.py's staging pass does with those batches before its COPY: the rows
  (:func:`~stream_processor.decode.full_rows`), :class:`~stream_processor.writer.ParsedOnRead` (`$self` parts left
  out: they go to the recombination), and
  ``BatchDeriver.add`` 250 events at a time, then ``finish`` (the reduction), inside :func:`sink.heap.frozen_heap`
  as the staging pass runs it. The COPY text and the server are the same either way and not timed.

Printed per way: CPU of this thread per accepted event (``time.thread_time``), decode, staging and both, median
(range) over the repeats, and the packed value's bytes per event (what crosses the JVM twice: reader -> dedupe's
shuffle -> staging worker; this probe does not price that transit, the goals command does). Then the pieces the
difference is made of, per event: the text's parse (``sink.fastjson.loads``, which the rows save), and the rows'
``marshal.dumps`` / ``loads`` and LZ4 (which they cost).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import marshal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import CHUNK, fixture_docs, iter_demo_messages  # noqa: E402

#: Messages per Arrow batch the decoder hands on (a reader task hands one per poll's worth).
DECODE_BATCH = 1000


def _messages(corpus: str, n: int, offset: int) -> list[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """``n`` messages from ``offset`` on; the fixtures are repeated (their hashes repeat too: the staging pass's
    reduction then folds them, so the demo corpus is the figure to quote)."""
    if corpus == "demo":
        return list(itertools.islice(iter_demo_messages(), offset, offset + n))
    import json

    base = [(json.dumps(doc).encode(), None) for _ident, doc in fixture_docs()]
    return [base[(offset + i) % len(base)] for i in range(n)]


def decode(messages: list[tuple[bytes, Any]], derive: bool) -> list[Any]:
    """The packed Arrow batches a reader task would hand on for ``messages``."""
    from stream_processor.decode import DecodedColumns

    out = DecodedColumns(None, packed=True, derive=derive)
    batches = []
    for offset, (value, headers) in enumerate(messages):
        out.add(value, headers or [], "lineage.raw", 0, offset, None, None)
        if out.messages >= DECODE_BATCH:
            batches.append(out.take())
    last = out.take()
    return batches + ([last] if last is not None else [])


def stage(batches: list[Any]) -> tuple[int, int]:
    """The staging pass's Python side up to its COPY (module doc); ``(accepted events, texts parsed)``."""
    from sink.derive import BatchDeriver
    from sink.heap import frozen_heap
    from stream_processor.decode import full_rows
    from stream_processor.recombine import is_self_part
    from stream_processor.writer import ParsedOnRead

    events = ParsedOnRead()
    with frozen_heap():
        for batch in batches:
            for row in full_rows(batch):
                if row["status"] == "ok" and not is_self_part(row):   # a part goes to the recombination (writer.py)
                    events.append(row)
        deriver = BatchDeriver()
        for start in range(0, len(events), CHUNK):
            deriver.add(events[start:start + CHUNK])
        deriver.finish()
    return len(events), events.parses


def one(messages: list[tuple[bytes, Any]], derive: bool) -> dict[str, float]:
    """One way over ``messages``: CPU per accepted event (µs) of decode and staging, packed bytes per event."""
    gc.collect()
    t0 = time.thread_time()
    batches = decode(messages, derive)
    t1 = time.thread_time()
    accepted, parses = stage(batches)
    t2 = time.thread_time()
    packed = sum(b.column("packed").nbytes for b in batches)
    n = max(accepted, 1)
    return {"decode_us": (t1 - t0) / n * 1e6, "staging_us": (t2 - t1) / n * 1e6, "total_us": (t2 - t0) / n * 1e6,
            "packed_bytes": packed / n, "staging_parses": parses / n}


def pieces(messages: list[tuple[bytes, Any]]) -> dict[str, float]:
    """Per accepted event (µs): the text's parse, the rows' marshal dumps / loads and their LZ4 both ways."""
    import pyarrow as pa

    from sink.derive import EventDeriver
    from sink.fastjson import loads
    from sink.model import StoredEvent
    from stream_processor.decode import decode_record

    rows = [r for value, headers in messages for r in decode_record(value, headers or [], keep_event=True)
            if r["status"] == "ok"]
    deriver = EventDeriver()
    graphs = [deriver.rows(StoredEvent(event=r.pop("_event"), event_hash=r["event_hash"], text=r["event_json"],
                                       source="probe")) for r in rows]
    texts = [r["event_json"] for r in rows]
    codec = pa.Codec("lz4_raw")

    def timed(fn: Any, items: list[Any]) -> float:
        t0 = time.thread_time()
        for item in items:
            fn(item)
        return (time.thread_time() - t0) / max(len(items), 1) * 1e6

    dumped = [marshal.dumps(g, 4) for g in graphs]
    squeezed = [(codec.compress(d, asbytes=True), len(d)) for d in dumped]
    was = gc.isenabled()
    gc.disable()   # as in the staging pass (frozen_heap) and a reader task's small heap: no collections of these lists
    try:
        return {"parse_text_us": timed(loads, texts),
                "marshal_dumps_us": timed(lambda g: marshal.dumps(g, 4), graphs),
                "marshal_loads_us": timed(marshal.loads, dumped),
                "lz4_both_us": timed(lambda d: codec.compress(d, asbytes=True), dumped)
                + timed(lambda s: codec.decompress(s[0], decompressed_size=s[1], asbytes=True), squeezed),
                "rows_marshal_bytes": statistics.mean(map(len, dumped)) if dumped else 0.0,
                "text_bytes": statistics.mean(map(len, texts)) if texts else 0.0}
    finally:
        if was:
            gc.enable()


def _fmt(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=2500, help="messages per repeat (default 2500)")
    parser.add_argument("--repeats", type=int, default=5, help="alternated repeats per way (default 5)")
    parser.add_argument("--corpus", choices=("demo", "fixtures"), default="demo")
    ns = parser.parse_args(argv)
    ways = {"parsed once (derive at decode)": True, "parsed twice (derive in staging)": False}
    warm = _messages(ns.corpus, 500, 0)
    for derive in ways.values():   # imports, the deriver's memoised ids and schemas
        one(warm, derive)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    offset = 500
    for repeat in range(ns.repeats):
        messages = _messages(ns.corpus, ns.events, offset)
        offset += ns.events
        order = list(ways.items()) if repeat % 2 == 0 else list(ways.items())[::-1]
        for name, derive in order:
            results[name].append(one(messages, derive))
    print(f"{ns.corpus} corpus, {ns.events} messages x {ns.repeats} repeats, µs of CPU per accepted event, "
          "median (range)")
    print(f"{'way':>34}  {'decode':>20}  {'staging':>20}  {'both':>20}  packed B/event  staging parses/event")
    for name, runs in results.items():
        print(f"{name:>34}  {_fmt([r['decode_us'] for r in runs]):>20}  {_fmt([r['staging_us'] for r in runs]):>20}  "
              f"{_fmt([r['total_us'] for r in runs]):>20}  {statistics.median(r['packed_bytes'] for r in runs):14.0f}  "
              f"{statistics.median(r['staging_parses'] for r in runs):.2f}")
    parts = pieces(_messages(ns.corpus, ns.events, offset))
    print("pieces, µs per event (collector paused): "
          + ", ".join(f"{k[:-3]} {v:.1f}" for k, v in parts.items() if k.endswith("_us"))
          + f"; the rows marshalled {parts['rows_marshal_bytes']:.0f} B against the text's {parts['text_bytes']:.0f} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
