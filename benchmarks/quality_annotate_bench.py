"""What the merge's quality annotations cost in Python, per dataset version (``sink.postgres.annotate_versions``).

    PYTHONPATH=. python benchmarks/quality_annotate_bench.py [--events 20000] [--batch-size 5000] [--repeats 7]
                                                            [--postgres-dsn DSN]

A fresh embedded PostgreSQL (or ``--postgres-dsn``) takes ``--events`` demo events through ``GraphStore.write_batch``
in ``--batch-size`` batches; the rows each merge's ``QUALITY_INPUTS`` statement returned (one per dataset version the
batch touched, with its previous version's facts) are kept. Then ``annotate_versions`` runs over the kept rows of the
batches after the first (a warm store) ``--repeats`` times: its thread CPU per version, median and range, and the
quality rows it makes. The figure is the Python work of the merge's ``quality-annotations`` thread; the statement, the
rows' loading and the upsert are not in it (``store_server_ledger.py``, ``quality_merge_probe.py``). Run it with a
checkout's ``PYTHONPATH`` (its compiled modules built) to compare two versions, alternated. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.pg_value_probe import probe_server  # noqa: E402
from benchmarks.store_write_bench import demo_events  # noqa: E402


def capture_inputs(dsn: str, events: int, batch_size: int) -> list[list[tuple[Any, ...]]]:
    """The ``QUALITY_INPUTS`` rows of each batch's merge, writing ``events`` demo events in ``batch_size`` batches."""
    import sink.postgres as pg

    kept: list[list[tuple[Any, ...]]] = []
    original = pg.annotate_versions

    def keeping(inputs: Any, window: float) -> list[dict[str, Any]]:
        kept.append(list(inputs))
        return original(inputs, window)

    pg.annotate_versions = keeping
    try:
        stored = demo_events(events)
        with pg.GraphStore(dsn) as store:
            store.migrate()
            for batch, start in enumerate(range(0, len(stored), batch_size), start=1):
                store.write_batch(batch, stored[start:start + batch_size])
    finally:
        pg.annotate_versions = original
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--postgres-dsn", default=None, help="a server to use (default: a fresh embedded one)")
    args = parser.parse_args(argv)
    from sink.postgres import annotate_versions

    with probe_server(args.postgres_dsn, "quality-annotate-") as dsn:
        kept = capture_inputs(dsn, args.events, args.batch_size)
    rows = [row for batch in kept[1:] or kept for row in batch]
    if not rows:
        raise SystemExit("no quality inputs: the batches touched no dataset version")
    per_version, made = [], 0
    for _ in range(args.repeats):
        started = time.thread_time()
        made = len(annotate_versions(rows, 3600.0))
        per_version.append(1e6 * (time.thread_time() - started) / len(rows))
    print(f"{len(rows)} versions of {len(kept)} batches ({args.events} demo events), {made} quality rows; "
          f"module {sys.modules['sink.postgres'].__file__}")
    print(f"annotate_versions: median {statistics.median(per_version):.1f} us per version "
          f"(range {min(per_version):.1f}-{max(per_version):.1f}, {args.repeats} repeats: "
          f"{', '.join(f'{v:.1f}' for v in per_version)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
