"""Carry a checkpoint written with the `$self` Spark operator over to the store's recombination (migration 012).

Up to session 10 the query held open `$self` groups in an ``applyInPandasWithState`` operator. The query has
no such operator now, and Spark refuses a checkpoint whose stateful operators differ from the plan's
(``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``). So before the query starts,
:func:`upgrade_checkpoint` looks at the checkpoint's state metadata (Spark's ``state-metadata`` reader) and,
for such a checkpoint:

1. reads the operator's groups at the last committed batch (Spark's ``statestore`` reader) and writes them to
   ``lineage_self_groups`` / ``lineage_self_parts`` (a group already there is left alone, so a second run is
   harmless): open groups are emitted one quiet period after the upgrade, emitted ones keep their revision
   and wait the state TTL for late parts, as they did in Spark;
2. moves the checkpoint aside to ``<checkpoint>.pre-012`` (kept, not deleted) and starts a new one whose
   first batch reads from the old one's committed offsets (the file ``lineage-starting-offsets.json`` in the
   new checkpoint: :func:`starting_offsets` gives it to the source while the new checkpoint has no batch).

The dedupe state is not carried over: an event the old window remembered and that arrives again is
dropped by the sink's durable dedupe (``event_hash``) instead. The new checkpoint gets a new store epoch
(writer.py, "Store batch ids"). A checkpoint on a remote file system (``scheme://``) is not moved: the
processor stops with an error saying what to do (docs/OPERATIONS.md, "Upgrading").
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from schemas.errors import ConfigurationError

__all__ = ["upgrade_checkpoint", "starting_offsets", "OLD_OPERATOR", "STARTING_OFFSETS_FILE"]

log = logging.getLogger(__name__)

OLD_OPERATOR = "applyInPandasWithState"
STARTING_OFFSETS_FILE = "lineage-starting-offsets.json"
BACKUP_SUFFIX = ".pre-012"

_INSERT_GROUPS = """
    INSERT INTO lineage_self_groups (group_key, revision, pending, last_part_at, emitted_parts, emitted_at)
    SELECT g.group_key, g.revision, g.pending, now(), g.emitted_parts, CASE WHEN g.pending THEN NULL ELSE now() END
    FROM unnest(%(keys)s::text[], %(revisions)s::int[], %(pending)s::boolean[], %(emitted)s::int[])
         AS g(group_key, revision, pending, emitted_parts)
    ON CONFLICT (group_key) DO NOTHING RETURNING group_key"""
_INSERT_PARTS = """
    INSERT INTO lineage_self_parts (group_key, event_hash, doc)
    SELECT * FROM unnest(%(keys)s::text[], %(hashes)s::text[], %(docs)s::text[]) ON CONFLICT DO NOTHING"""


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def committed_offsets(checkpoint: Path) -> tuple[int, str] | None:
    """``(batch id, source offsets JSON)`` of the checkpoint's last committed batch, or None if it committed none.
    The JSON has the per-topic offsets only (the ``lineage_kafka`` source's ``$``-keys dropped)."""
    commits = _batches(checkpoint / "commits")
    if not commits:
        return None
    last = commits[-1]
    lines = (checkpoint / "offsets" / str(last)).read_text(encoding="utf-8").splitlines()
    # offsets/<n>: a version line, the batch metadata, then one line per source (one source here)
    source = json.loads(lines[2])
    return last, json.dumps({topic: parts for topic, parts in source.items() if not topic.startswith("$")})


def _old_operator(spark: Any, checkpoint: str) -> int | None:
    rows = spark.read.format("state-metadata").load(checkpoint).collect()
    return next((int(r["operatorId"]) for r in rows if r["operatorName"] == OLD_OPERATOR), None)


def _carry_groups(spark: Any, checkpoint: str, operator: int, batch_id: int, dsn: str) -> tuple[int, int]:
    """Write the operator's groups at ``batch_id`` to the store; returns (groups, of which open)."""
    from sink.postgres import GraphStore

    rows = (spark.read.format("statestore").option("operatorId", operator).option("batchId", batch_id)
            .load(checkpoint).select("key.group_key", "value.groupState.*").collect())
    groups = [r for r in rows if r["group_key"] and r["group_key"].startswith("self\x1f")]
    parts = [(g["group_key"], p["event_hash"], json.dumps(p, separators=(",", ":")))
             for g in groups for p in json.loads(g["parts"] or "[]")]
    with GraphStore(dsn) as store:
        store.migrate()
        with store.conn.transaction():
            added = {k for (k,) in store.conn.execute(_INSERT_GROUPS, {
                "keys": [g["group_key"] for g in groups], "revisions": [int(g["revision"] or 0) for g in groups],
                "pending": [bool(g["pending"]) for g in groups],
                "emitted": [int(g["emitted_parts"] or 0) for g in groups]}).fetchall()}
            mine = [p for p in parts if p[0] in added]
            store.conn.execute(_INSERT_PARTS, {"keys": [p[0] for p in mine], "hashes": [p[1] for p in mine],
                                               "docs": [p[2] for p in mine]})
    return len(groups), sum(1 for g in groups if g["pending"])


def upgrade_checkpoint(spark: Any, settings: Any) -> Path | None:
    """Upgrade ``settings.checkpoint_dir`` if the `$self` operator wrote it (module doc); returns where the old
    checkpoint was moved, or None when there was nothing to upgrade."""
    checkpoint = getattr(settings, "checkpoint_dir", None)
    if not checkpoint or ("://" not in str(checkpoint) and not (Path(checkpoint) / "state").is_dir()):
        return None
    try:
        operator = _old_operator(spark, str(checkpoint))
    except Exception as exc:  # noqa: BLE001 - py4j errors; a checkpoint without state metadata is not an old one
        log.debug("no state metadata in %s: %s", checkpoint, exc)
        return None
    if operator is None:
        return None
    if "://" in str(checkpoint):
        raise ConfigurationError(
            f"the checkpoint {checkpoint} was written with the `$self` operator of an earlier version, and it is not "
            "on a local file system, so it cannot be upgraded in place: see docs/OPERATIONS.md, 'Upgrading'")
    path = Path(checkpoint)
    committed = committed_offsets(path)
    if committed is not None:
        batch_id, offsets = committed
        groups, open_ = _carry_groups(spark, str(path), operator, batch_id, settings.require_postgres())
    else:
        offsets, groups, open_ = None, 0, 0
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if backup.exists():
        backup = path.with_name(f"{path.name}{BACKUP_SUFFIX}-{int(time.time())}")
    fresh = path.with_name(path.name + ".upgrading")
    fresh.mkdir(parents=True, exist_ok=True)
    if offsets is not None:
        (fresh / STARTING_OFFSETS_FILE).write_text(offsets + "\n", encoding="utf-8")
    path.rename(backup)
    fresh.rename(path)
    log.warning("checkpoint %s was written with the `$self` operator of an earlier version: %d `$self` group(s) "
                "(%d open) carried into the store, the checkpoint moved to %s, and a new one starts at its "
                "committed offsets %s", path, groups, open_, backup, offsets or "(none: nothing was committed)")
    return backup


def starting_offsets(settings: Any) -> str:
    """The source's ``startingOffsets``: what :func:`upgrade_checkpoint` recorded for a checkpoint that has not
    committed a batch yet, else the settings' own."""
    checkpoint = getattr(settings, "checkpoint_dir", None)
    if checkpoint and "://" not in str(checkpoint):
        recorded = Path(checkpoint) / STARTING_OFFSETS_FILE
        if recorded.is_file() and not _batches(Path(checkpoint) / "commits"):
            return recorded.read_text(encoding="utf-8").strip()
    return settings.starting_offsets
