"""Deterministic identity: canonical events, event hashes and UUIDv5 node ids.

Replays and parallel writers must land on the same rows, so every id here is a pure
function of names (as the OpenLineage client's static UUIDs are).

Formulas::

    canonical_json(e) = json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    event_hash(e)     = sha256(UTF-8(canonical_json(e))).hexdigest()  (= hash_canonical(canonical_json(e)))
    node_uuid(kind, *parts) = uuid5(LINEAGE_NAMESPACE, kind + "\\x1f" + "\\x1f".join(parts))
    dataset_id(ns, name)    = node_uuid("dataset", ns, name)
    job_id(ns, name)        = node_uuid("job", ns, name)
    run_node_id(run_id)     = node_uuid("run", run_id.lower())
    edge_id(kind, a, b)     = node_uuid("edge", kind, a, b)

``\\x1f`` (ASCII unit separator) cannot be confused with characters of real names, so
``("a/b", "c")`` and ``("a", "b/c")`` get different ids. ``event_hash`` is meant for a
*validated* (normalised) event: UTC times and resolved ``$self`` make equal events hash equal.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

__all__ = [
    "LINEAGE_NAMESPACE",
    "canonical_json",
    "event_hash",
    "hash_canonical",
    "node_uuid",
    "dataset_id",
    "job_id",
    "run_node_id",
    "edge_id",
]

#: The project's UUIDv5 namespace: uuid5(NAMESPACE_URL, "https://github.com/lineage-stream/lineage-stream").
LINEAGE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/lineage-stream/lineage-stream")

_SEP = "\x1f"
# Built once: json.dumps(..., sort_keys=True, ...) would build a new encoder on every call.
_canonical_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical_json(event: Any) -> str:
    """Canonical JSON text: sorted keys, compact separators, non-ASCII kept as is."""
    return _canonical_encode(event)


def event_hash(event: Any) -> str:
    """sha256 hex digest of ``canonical_json(event)`` encoded as UTF-8.

    Lone surrogates (possible from JSON ``\\ud800`` escapes) are encoded with
    ``surrogatepass`` so that hashing never fails.
    """
    return hash_canonical(canonical_json(event))


def hash_canonical(text: str) -> str:
    """``event_hash`` from an already computed ``canonical_json(event)`` (saves encoding the event twice)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def node_uuid(kind: str, *parts: str) -> str:
    """``str(uuid5(LINEAGE_NAMESPACE, kind + "\\x1f" + "\\x1f".join(parts)))``."""
    return str(uuid.uuid5(LINEAGE_NAMESPACE, _SEP.join((kind, *parts))))


def dataset_id(namespace: str, name: str) -> str:
    """Id of a dataset node: ``node_uuid("dataset", namespace, name)``."""
    return node_uuid("dataset", namespace, name)


def job_id(namespace: str, name: str) -> str:
    """Id of a job node: ``node_uuid("job", namespace, name)``."""
    return node_uuid("job", namespace, name)


def run_node_id(run_id: str) -> str:
    """Id of a run node: ``node_uuid("run", run_id.lower())`` (the runId itself is the client's UUID)."""
    return node_uuid("run", run_id.lower())


def edge_id(kind: str, source_id: str, target_id: str) -> str:
    """Id of a directed edge: ``node_uuid("edge", kind, source_id, target_id)``."""
    return node_uuid("edge", kind, source_id, target_id)
