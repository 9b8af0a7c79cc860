"""What the merge's quality query (``sink.postgres.QUALITY_INPUTS``) costs the server and the client, by its columns.

    PYTHONPATH=. python benchmarks/quality_query_probe.py [--events 10000] [--rounds 5]

A fresh embedded PostgreSQL (the product's default server) takes three batches of ``--events`` demo events through
``GraphStore.write_batch``; a fourth is staged and merged up to ``lineage_dataset_versions`` (where the merge runs the
query) in a transaction that is rolled back at the end. Then, round by round and alternated, the statement runs:

* **current**: ``QUALITY_INPUTS`` as the merge runs it;
* **with_previous_extras**: the same plus the previous version's ``assertions``, ``event_time`` and ``nominal_end``,
  which it fetched until session 37 (``annotate_versions`` never read them; one of them jsonb, parsed by the client);
* **current_binary**: the current statement on a cursor reading binary results.

Per variant, median (range) over ``--rounds`` of the wall time, the backend's CPU (``/proc``) and this thread's CPU
(``time.thread_time``: psycopg building the rows, the jsonb parses), and the rows. The annotations made from each
variant's rows are compared with the current one's (``annotate_versions``); that equality is the only check. The
cyclic collector is frozen after the events are made, so its collections do not walk them in the timed fetches.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.store_write_bench import _process_cpu, demo_events  # noqa: E402

#: The columns the statement fetched before session 37, after the previous version's fields.
_EXTRAS = ", p.assertions, p.event_time, p.nominal_end"
_AFTER = "THEN p.fields END,"


def variants() -> dict[str, tuple[str, bool]]:
    """``{name: (statement, binary results)}``; the extras go where the old statement had them."""
    from sink.postgres import QUALITY_INPUTS

    head, sep, tail = QUALITY_INPUTS.partition(_AFTER)
    if not sep:
        raise SystemExit("QUALITY_INPUTS changed shape: update the probe")
    extras = head + "THEN p.fields END" + _EXTRAS + "," + tail
    return {"current": (QUALITY_INPUTS, False), "with_previous_extras": (extras, False),
            "current_binary": (QUALITY_INPUTS, True)}


#: Where the extras sit in a row of the old statement: after the previous version's fields (the 12th column).
_AT, _EXTRA_COUNT = 12, _EXTRAS.count(",")


def _current_shape(name: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of ``name`` as the current statement gives them (the extras dropped)."""
    if name != "with_previous_extras":
        return rows
    return [r[:_AT] + r[_AT + _EXTRA_COUNT:] for r in rows]


def probe(events: int, rounds: int) -> dict[str, dict[str, Any]]:
    from psycopg.types.json import set_json_loads

    from lineage.embedded.postgres import EmbeddedPostgres
    from sink import postgres as pg

    stored = demo_events(4 * events)
    gc.freeze()
    timed: dict[str, list[tuple[float, float, float, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="quality-query-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data")
        server.start()
        try:
            store = pg.GraphStore(server.dsn)
            store.migrate()
            for n in range(3):
                store.write_batch(n, stored[n * events:(n + 1) * events])
            conn = store.conn
            backend = conn.info.backend_pid
            params = {"b": 3}
            with conn.transaction(force_rollback=True):
                store._derive_and_stage(conn, 3, 0, stored[3 * events:], store.settings.store_copy_chunk_bytes, {})
                with conn.cursor() as cur:
                    one_part = not cur.execute(pg.STAGED_PARTS, params).fetchone()[0]
                    for table, statements in pg._MERGES:
                        cur.execute(statements[one_part], params).fetchone()
                        if table == "lineage_dataset_versions":
                            break
                want = None
                statements = variants()
                for _ in range(rounds):
                    for name, (statement, binary) in statements.items():
                        with conn.cursor(binary=binary) as cur:
                            set_json_loads(pg._loads, cur)
                            cpu0, wall0, own0 = _process_cpu(backend) or 0.0, time.perf_counter(), time.thread_time()
                            rows = cur.execute(statement, params).fetchall()
                            figures = (time.perf_counter() - wall0, (_process_cpu(backend) or 0.0) - cpu0,
                                       time.thread_time() - own0, len(rows))
                        timed.setdefault(name, []).append(figures)
                        made = pg.annotate_versions(_current_shape(name, rows), 3600.0)
                        if want is None:
                            want = made
                        elif made != want:
                            raise SystemExit(f"{name}: annotations differ from the current statement's")
        finally:
            server.stop(mode="immediate")
    out = {}
    for name, runs in timed.items():
        out[name] = {"rows": runs[0][3]}
        for i, key in enumerate(("wall_s", "backend_cpu_s", "client_cpu_s")):
            values = [r[i] for r in runs]
            out[name][key] = (round(statistics.median(values), 3), round(min(values), 3), round(max(values), 3))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10000, help="events per batch")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for name, figures in probe(args.events, args.rounds).items():
        cells = ", ".join(f"{key} {m} ({lo}-{hi})" for key, (m, lo, hi) in
                          ((k, v) for k, v in figures.items() if k != "rows"))
        print(f"{name:>22}: {figures['rows']} rows; median (range) {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
