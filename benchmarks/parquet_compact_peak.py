"""Peak memory of Parquet compaction against the table's size: ``python -m benchmarks.parquet_compact_peak
[--rows-per-batch 2500] [--batches 20 60]``.

``ParquetGraphStore.compact`` (sink/parquet.py) reads every file of a table, sorts the rows by id and writes
one base file: its memory follows the whole table, and ``lineage_events`` carries each event's payload. The
writer compacts a table every ``max_batch_files`` batch files, so a long-running processor's driver peaks
higher and higher as the graph grows (seen in ``benchmarks/soak.py``: 0.9-2.0 GB jumps of the processor's
Python process). This writes ``--batches`` batch files of ``--rows-per-batch`` synthetic ``lineage_events``
rows (4,400-character payloads, like demo events) and reports the process's peak RSS before and after one
compaction, for each ``--batches`` value in a fresh process. Prints figures; asserts nothing.

Measured 2026-11-26 (session 11): 50,000 rows (220 MB of payload) 182 -> 866 MB, 1.8 s; 150,000 rows
(660 MB) 182 -> 2,254 MB, 3.7 s: ~3.4x the payload on top of the process.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import subprocess
import sys
import tempfile
import time


def _measure(rows_per_batch: int, batches: int) -> str:
    import pyarrow as pa

    from sink.parquet import TABLES, ParquetGraphStore

    schema = TABLES["lineage_events"].schema
    payload = "x" * 4400
    store = ParquetGraphStore(tempfile.mkdtemp(prefix="compact-peak-"), max_batch_files=10**9)  # compact below
    for b in range(batches):
        cols = {}
        for f in schema:
            if f.name == "event_hash":
                cols[f.name] = pa.array([hashlib.sha256(f"{b}-{i}".encode()).hexdigest()
                                         for i in range(rows_per_batch)], f.type)
            elif f.name == "payload":
                cols[f.name] = pa.array([payload] * rows_per_batch, f.type)
            elif f.name in ("_batch_id", "_commit_seq", "first_batch_id") or pa.types.is_integer(f.type):
                cols[f.name] = pa.array([b if f.name.startswith(("_", "first")) else 0] * rows_per_batch, f.type)
            else:
                cols[f.name] = pa.nulls(rows_per_batch, f.type)
        store.write_batch(b, {"lineage_events": pa.table(cols, schema=schema)})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    store.compact("lineage_events")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = rows_per_batch * batches
    return (f"{rows} rows ({rows * 4.4 / 1000:.0f} MB of payload): peak RSS {before:.0f} MB before compacting, "
            f"{after:.0f} MB after; compaction {time.perf_counter() - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows-per-batch", type=int, default=2500)
    parser.add_argument("--batches", type=int, nargs="+", default=[20, 60])
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # the child's run
    args = parser.parse_args()
    if args.one is not None:
        print(_measure(args.rows_per_batch, args.one))
        return
    for batches in args.batches:   # a fresh process each: ru_maxrss never goes down
        subprocess.run([sys.executable, "-m", "benchmarks.parquet_compact_peak", "--rows-per-batch",
                        str(args.rows_per_batch), "--one", str(batches)], check=True)


if __name__ == "__main__":
    main()
