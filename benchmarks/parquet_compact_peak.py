"""Peak memory of Parquet compaction against the table's size: ``python -m benchmarks.parquet_compact_peak
[--rows 50000 150000] [--rows-per-batch 2500] [--series-rows-per-batch 250] [--mode compact series]``.

Synthetic ``lineage_events`` rows (4,400-character payloads, like demo events; ``"x" * 4400``, so the files are
small on disk but the decoded rows are as large as real ones) through ``ParquetGraphStore`` (sink/parquet.py), for
each ``--rows`` value in a fresh process (``ru_maxrss`` never goes down). Prints figures; asserts nothing.

``compact``: writes ``rows / --rows-per-batch`` batch files without automatic compaction, then one explicit
``compact()`` of the whole table; reports the process's peak RSS before and after.

``series``: the writer's own path: ``rows / --series-rows-per-batch`` ``write_batch`` calls on a store with the
default policy (``max_batch_files=32``; size-tiered segments since the streaming compaction), so compactions happen
as the table grows. Reports the peak RSS after the first batch, after each third of the series, the time spent in
the automatic compaction (amortised per batch) and the files left. Also runs against older code (it wraps
``compact_tiers`` if the store has it, else ``compact``).

Measured 2026-11-26 (session 11, the old whole-table compaction): ``compact`` 50,000 rows (220 MB of payload)
182 -> 866 MB, 1.8 s; 150,000 rows (660 MB) 182 -> 2,254 MB, 3.7 s: ~3.4x the payload on top of the process.
The streaming, size-tiered compaction's figures are in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _batch(b: int, rows: int) -> Any:
    import pyarrow as pa

    from sink.parquet import TABLES

    schema = TABLES["lineage_events"].schema
    cols = {}
    for f in schema:
        if f.name == "event_hash":
            cols[f.name] = pa.array([hashlib.sha256(f"{b}-{i}".encode()).hexdigest() for i in range(rows)], f.type)
        elif f.name == "payload":
            cols[f.name] = pa.array(["x" * 4400] * rows, f.type)
        elif pa.types.is_integer(f.type):
            cols[f.name] = pa.array([b if f.name.startswith(("_", "first")) else 0] * rows, f.type)
        else:
            cols[f.name] = pa.nulls(rows, f.type)
    return pa.table(cols, schema=schema)


def _compact(root: str, rows_per_batch: int, batches: int) -> str:
    from sink.parquet import ParquetGraphStore

    store = ParquetGraphStore(root, max_batch_files=10**9)  # compact below
    for b in range(batches):
        store.write_batch(b, {"lineage_events": _batch(b, rows_per_batch)})
    before = _peak_mb()
    started = time.perf_counter()
    store.compact("lineage_events")
    rows = rows_per_batch * batches
    return (f"compact: {rows} rows ({rows * 4.4 / 1000:.0f} MB of payload) in {batches} batch files: peak RSS "
            f"{before:.0f} MB before compacting, {_peak_mb():.0f} MB after; compaction "
            f"{time.perf_counter() - started:.1f} s")


def _series(root: str, rows_per_batch: int, batches: int) -> str:
    from sink.parquet import ParquetGraphStore

    store = ParquetGraphStore(root)      # the writer's default policy
    auto = "compact_tiers" if hasattr(store, "compact_tiers") else "compact"
    inner = getattr(store, auto)
    spent = [0.0, 0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started
            spent[1] += 1

    setattr(store, auto, timed)
    marks = []
    writing = 0.0
    for b in range(batches):
        rows = _batch(b, rows_per_batch)
        started = time.perf_counter()
        store.write_batch(b, {"lineage_events": rows})
        writing += time.perf_counter() - started
        if b == 0:
            first = _peak_mb()
        if (b + 1) % max(1, batches // 3) == 0 or b + 1 == batches:
            marks.append(f"{(b + 1) * rows_per_batch // 1000}k rows {_peak_mb():.0f} MB")
    total = rows_per_batch * batches
    return (f"series ({auto}): {total} rows ({total * 4.4 / 1000:.0f} MB of payload) in {batches} batches of "
            f"{rows_per_batch}: peak RSS {first:.0f} MB after the first batch, then {', '.join(marks)}; "
            f"{spent[1]} compactions {spent[0]:.1f} s = {spent[0] / batches * 1000:.0f} ms per batch amortised "
            f"(write_batch in all {writing / batches * 1000:.0f} ms per batch); "
            f"{len(store.files('lineage_events'))} files at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[50_000, 150_000])
    parser.add_argument("--rows-per-batch", type=int, default=2500)
    parser.add_argument("--series-rows-per-batch", type=int, default=250)
    parser.add_argument("--mode", nargs="+", choices=["compact", "series"], default=["compact", "series"])
    parser.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)  # the child's run: mode rows
    args = parser.parse_args()
    if args.one is not None:
        mode, rows = args.one[0], int(args.one[1])
        with tempfile.TemporaryDirectory(prefix=f"compact-{mode}-") as root:
            if mode == "compact":
                print(_compact(root, args.rows_per_batch, rows // args.rows_per_batch), flush=True)
            else:
                print(_series(root, args.series_rows_per_batch, rows // args.series_rows_per_batch), flush=True)
        return
    for mode in args.mode:
        for rows in args.rows:   # a fresh process each: ru_maxrss never goes down
            subprocess.run([sys.executable, "-m", "benchmarks.parquet_compact_peak", "--rows-per-batch",
                            str(args.rows_per_batch), "--series-rows-per-batch", str(args.series_rows_per_batch),
                            "--one", mode, str(rows)], check=True)


if __name__ == "__main__":
    main()
