"""Types that cross the boundary between the stream processor (or `lineage load`) and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["StoredEvent", "BatchResult"]


@dataclass(frozen=True)
class StoredEvent:
    """One validated, normalised OpenLineage event on its way into the graph.

    ``event`` is the output of :func:`schemas.validate.validate_event`; ``event_hash`` is
    :func:`schemas.identity.event_hash` of it; ``source`` says where it came from
    (``topic[partition]@offset`` or ``path:line``); ``revision`` is the `$self`
    recombination revision (0 for events that were not recombined); ``text`` is
    :func:`schemas.identity.canonical_json` of ``event`` when the caller already has it (the stream
    decoder does: it hashed that text), stored as ``lineage_events.payload`` without serialising again.
    """

    event: dict[str, Any]
    event_hash: str
    source: str = ""
    revision: int = 0
    text: str | None = None


@dataclass
class BatchResult:
    """What one committed batch did: the transaction-log row, returned to the caller for metrics."""

    batch_id: int
    events_in: int = 0
    events_new: int = 0
    duplicates: int = 0
    rows_added: int = 0
    rows_modified: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False
