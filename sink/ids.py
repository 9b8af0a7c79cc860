"""Ids of graph rows beyond the node ids of :mod:`schemas.identity` (same namespace, same formula).

Every id is ``schemas.identity.node_uuid(kind, *parts)``; the kinds used by the store:

============================  ==========================================================
``dataset_id(ns, name)``      dataset node (``node_uuid("dataset", ns, name)``)
``job_id(ns, name)``          job node (``node_uuid("job", ns, name)``)
``version_id(ds, version)``   ``node_uuid("dataset_version", dataset_id, version)``
``job_version_id(job, ...)``  ``node_uuid("job_version", job_id, type, url, version, sha1(sql))``
``data_edge_id``              ``node_uuid("edge", "dataset", source, target, job_id)``
``job_edge_id``               ``schemas.identity.edge_id(kind, source, target)`` (kind reads|writes)
``column_lineage_id``         ``node_uuid("column_lineage", src_ds, src_col, tgt_ds, tgt_col)``
``provenance_id``             ``node_uuid("provenance", event_hash, node_id, role)``
``quality_id(version_id)``    ``node_uuid("quality", version_id)``
============================  ==========================================================

Ids of names that repeat across events (datasets, jobs, edges, column lineage) are memoised (``lru_cache``, 65,536
entries each). Dataset versions and ``edge_id`` are not: in a derivation of 42,033 demo events ``version_id`` hit 11 %
of its calls and ``edge_id`` none (only ``job_edge_id``'s misses reach it), while their caches held 51,155 entries, 17.0 MB
(tracemalloc), that nothing evicts before 65,536 apiece, in every worker and in the driver (the driver's slow RSS
growth in a soak, docs/PERFORMANCE.md session 17). Derivation CPU without them: 8.6-9.3 s for those events against
8.0-9.8 s with them (3 runs each, twice, interleaved): no difference. Run ids are the client's ``runId`` (a UUID) lower-cased, not hashed, so that a run can be looked up
by the id its producer logs.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from schemas.identity import LINEAGE_NAMESPACE

_NS = LINEAGE_NAMESPACE.bytes
_sha1 = hashlib.sha1


def node_uuid(kind: str, *parts: str) -> str:
    """``schemas.identity.node_uuid`` computed without building ``uuid.UUID`` objects (the store derives
    tens of ids per event); equal by construction and by tests/test_derive.py."""
    x = _sha1(_NS + "\x1f".join((kind, *parts)).encode("utf-8")).hexdigest()
    # version nibble 5 (hex digit 12), variant bits 10 (the top two bits of hex digit 16)
    return f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"


#: Hex digit -> the same digit with its top two bits set to ``10`` (RFC 4122 variant).
_VARIANT = {f"{d:x}": f"{(d & 0x3) | 0x8:x}" for d in range(16)}


@lru_cache(maxsize=1 << 16)
def dataset_id(namespace: str, name: str) -> str:
    return node_uuid("dataset", namespace, name)


@lru_cache(maxsize=1 << 16)
def job_id(namespace: str, name: str) -> str:
    return node_uuid("job", namespace, name)


def edge_id(kind: str, source: str, target: str) -> str:
    return node_uuid("edge", kind, source, target)

__all__ = [
    "dataset_id", "job_id", "node_uuid", "version_id", "job_version_id", "data_edge_id", "job_edge_id",
    "column_lineage_id", "provenance_id", "quality_id",
]


def version_id(dataset: str, version: str) -> str:
    return node_uuid("dataset_version", dataset, version)


def job_version_id(job: str, source_type: str | None, url: str | None, version: str | None,
                   sql: str | None) -> str:
    sql_hash = hashlib.sha1(sql.encode("utf-8", "surrogatepass")).hexdigest() if sql else ""
    return node_uuid("job_version", job, source_type or "", url or "", version or "", sql_hash)


@lru_cache(maxsize=1 << 16)
def data_edge_id(source: str, target: str, job: str) -> str:
    return node_uuid("edge", "dataset", source, target, job)


@lru_cache(maxsize=1 << 16)
def job_edge_id(kind: str, source: str, target: str) -> str:
    return edge_id(kind, source, target)


@lru_cache(maxsize=1 << 16)
def column_lineage_id(src_ds: str, src_col: str, tgt_ds: str, tgt_col: str) -> str:
    return node_uuid("column_lineage", src_ds, src_col, tgt_ds, tgt_col)


def provenance_id(event_hash: str, node: str, role: str) -> str:
    return node_uuid("provenance", event_hash, node, role)


def quality_id(version: str) -> str:
    return node_uuid("quality", version)
