"""Kafka message keys, exactly as the official OpenLineage Kafka transport computes them.

The rule (openlineage-python ``KafkaTransport._get_message_key``), so that a job's runs and a
parent's children land in one partition and stay in order:

- DatasetEvent: ``dataset:{dataset.namespace}/{dataset.name}``
- JobEvent:     ``job:{job.namespace}/{job.name}``
- RunEvent:     ``run:{ns}/{name}`` where (ns, name) is, in order of preference,
  ``run.facets.parent.root.job``, ``run.facets.parent.job``, ``job``
  (a parent reference without both namespace and name falls through to the next).

A document of no known kind gets no key (``None``): Kafka then spreads such messages, which
the consumers handle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["message_key", "event_kind"]


def event_kind(event: Mapping[str, Any]) -> str | None:
    """``"run"``, ``"dataset"`` or ``"job"`` for the three OpenLineage event types, else None.

    A RunEvent has ``run`` and ``job``; a DatasetEvent has ``dataset``; a JobEvent has ``job``
    without ``run``.
    """
    if isinstance(event.get("run"), Mapping) and isinstance(event.get("job"), Mapping):
        return "run"
    if isinstance(event.get("dataset"), Mapping):
        return "dataset"
    if isinstance(event.get("job"), Mapping):
        return "job"
    return None


def _qualified(ref: object) -> tuple[str, str] | None:
    if not isinstance(ref, Mapping):
        return None
    namespace, name = ref.get("namespace"), ref.get("name")
    if namespace and name:
        return str(namespace), str(name)
    return None


def _run_key_job(event: Mapping[str, Any]) -> tuple[str, str] | None:
    facets = event["run"].get("facets") or {}
    parent = facets.get("parent") if isinstance(facets, Mapping) else None
    if isinstance(parent, Mapping):
        root = parent.get("root")
        if isinstance(root, Mapping) and (found := _qualified(root.get("job"))):
            return found
        if found := _qualified(parent.get("job")):
            return found
    return _qualified(event["job"])


def message_key(event: Mapping[str, Any]) -> str | None:
    """The official transport's key for ``event`` (a spec-shaped dict), or None for an unknown shape."""
    kind = event_kind(event)
    if kind == "dataset":
        found = _qualified(event["dataset"])
        return f"dataset:{found[0]}/{found[1]}" if found else None
    if kind == "job":
        found = _qualified(event["job"])
        return f"job:{found[0]}/{found[1]}" if found else None
    if kind == "run":
        found = _run_key_job(event)
        return f"run:{found[0]}/{found[1]}" if found else None
    return None
