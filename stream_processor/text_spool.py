"""The event texts a batch's staging tasks had, kept beside PostgreSQL for the driver's export (local mode).

After a batch's merge the driver reads the rows it changed once (``sink.parquet.changed_rows``) for the Parquet
files, the enriched records and the graph topic. Of those bytes ~85 % are the new events' texts
(``lineage_events.payload``, ~4 kB per demo event, ~40 MB per 10,000-event batch), which the staging tasks had in
hand a few seconds earlier: PostgreSQL wrote them out again as CSV (``COPY ... TO STDOUT``) and the driver parsed
them back into Arrow, ~26 µs of CPU per event between the two (``benchmarks/export_csv_probe.py``'s events table,
docs/PERFORMANCE.md session 45).

In local mode the staging tasks run on the driver's machine, so each task also writes the ``(event_hash, payload)``
pairs of the events it staged to an Arrow IPC file of this spool (:func:`write_texts`; written under a temporary
name and renamed, so a file is whole or absent), and the export takes the payload column from the batch's files
(:meth:`TextSpool.texts`) by hash, reading from PostgreSQL only the texts of events no file has: the `$self` step's
recombined events, a batch an earlier run staged, a task whose file is missing. A hash names one text
(``sha256(payload) = event_hash``, migration 005), so any file that has a hash has its text: a re-run task's file,
a file of a batch re-run after a restart, or a stale one, can only give the same bytes PostgreSQL holds. A cluster's
executors do not share the driver's disk: no spool there (``WriterConfig.text_spool`` None), the export reads
every text from PostgreSQL as before.

Files live in one directory per writer (``lineage-texts-<pid>-*`` in the temporary directory), one subdirectory per
batch, removed once the batch's after-commit steps are done; the directory goes when the writer's query has stopped
and its last batch is finished (``runner._stop_query``), or when the process exits, and a new spool removes the
directories of processes that no longer run (a killed processor's).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["TextSpool", "write_texts", "SPOOL_PREFIX"]

SPOOL_PREFIX = "lineage-texts-"
_log = logging.getLogger(__name__)
_OWNED = re.compile(re.escape(SPOOL_PREFIX) + r"(\d+)-")


def _batch_dir(root: str | os.PathLike[str], batch_id: int) -> Path:
    return Path(root) / f"batch={int(batch_id)}"


def write_texts(root: str | os.PathLike[str], batch_id: int, part: int, hashes: Sequence[str],
                texts: Sequence[str]) -> Path | None:
    """Write ``(event_hash, payload)`` of the events task ``part`` of ``batch_id`` staged as one Arrow IPC file
    (replacing an earlier attempt's); returns its path, or None when there is nothing to write, the spool's
    directory is gone (the writer closed) or the write failed (logged: a full disk): the export then reads these
    texts from PostgreSQL."""
    if not hashes:
        return None
    import pyarrow as pa

    folder = _batch_dir(root, batch_id)
    try:
        folder.mkdir(exist_ok=True)
    except FileNotFoundError:
        return None
    table = pa.table({"event_hash": pa.array(hashes, pa.string()), "payload": pa.array(texts, pa.string())})
    path = folder / f"part={int(part)}.arrow"
    tmp = folder / f".part={int(part)}.{os.getpid()}.tmp"
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)
    except OSError as exc:   # a full or vanished disk: the spool only spares work, the export reads PostgreSQL
        with contextlib.suppress(OSError):
            tmp.unlink()
        _log.warning("text spool: no file for batch %s part %s (%s); the export reads these texts from PostgreSQL",
                     batch_id, part, exc)
        return None
    return path


class TextSpool:
    """The spool's directory on the driver: made on construction, removed by :meth:`close`."""

    def __init__(self, parent: str | os.PathLike[str] | None = None) -> None:
        parent = Path(parent or tempfile.gettempdir())
        _remove_orphans(parent)
        self.root = Path(tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=parent))
        atexit.register(self.close)   # a writer nobody closed (a test's, a run stopped on a Kafka outage)

    def texts(self, batch_id: int) -> Any:
        """The ``(event_hash, payload)`` Arrow table of every file of ``batch_id`` (None when it has none). The
        files are memory-mapped: the table's buffers stay valid after :meth:`discard` removes them."""
        import pyarrow as pa

        folder = _batch_dir(self.root, batch_id)
        tables = []
        for path in sorted(folder.glob("part=*.arrow")) if folder.is_dir() else ():
            try:
                with pa.memory_map(str(path)) as source:
                    tables.append(pa.ipc.open_file(source).read_all())
            except (OSError, pa.ArrowInvalid):   # unreadable: its texts come from PostgreSQL
                continue
        return pa.concat_tables(tables) if tables else None

    def discard(self, batch_id: int) -> None:
        """Remove ``batch_id``'s files (its after-commit steps are done)."""
        shutil.rmtree(_batch_dir(self.root, batch_id), ignore_errors=True)

    def close(self) -> None:
        """Remove the directory and what it holds (a staging task after this writes no file)."""
        shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.close)


def _remove_orphans(parent: Path) -> None:
    """Remove the spool directories under ``parent`` of processes that no longer run."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            match = _OWNED.match(entry.name)
            if match and entry.is_dir() and not _alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True
