"""Pure quality annotations (WIA-DATA-008 §4) of one dataset version against the previous one.

Both the store (sink/postgres.py, which looks the previous version up in ``lineage_dataset_versions``
inside its transaction) and the stream processor call :func:`quality_annotation` with
:class:`VersionFacts` built from the facets (:func:`facts_from_row`).

Formulas (``cur`` = this version, ``prev`` = the previous version of the same dataset by event time):

* ``completeness = 1 - sum_c(nullCount_c) / (rowCount * n)``, with ``n`` the number of columns that
  report a ``nullCount`` in ``dataQualityMetrics.columnMetrics``; ``None`` when ``rowCount`` is
  missing or 0, or ``n == 0``; clamped to [0, 1].
* ``accuracy = passed / total`` over ``dataQualityAssertions.assertions`` (``success`` true counts as
  passed); ``None`` when there are no assertions.
* ``consistency = |{f in prev.fields : cur has a field named f.name with the same type}| / |prev.fields|``;
  1.0 when there is no previous version or it had no schema (nothing to be inconsistent with);
  ``None`` when this version has no schema but the previous one had.
* ``timeliness``: with ``d = event_time - nominal_end`` in seconds (``nominal_end`` = the run's
  ``nominalTime.nominalEndTime``, else ``nominalStartTime``): 1.0 when ``d <= 0``, 0.0 when
  ``d >= window``, else ``1 - d / window``; ``None`` without a nominal time. ``window`` defaults to
  3600 s (``StoreSettings.timeliness_window_seconds``).

Anomalies (need ``prev``):

* row-count drop: ``prev.row_count > 0`` and ``drop = 1 - cur.row_count / prev.row_count > 0.5`` ->
  ``{"type": "missing", "severity": critical if drop >= 0.9, high if >= 0.75, else medium,
  "count": prev.row_count - cur.row_count}``;
* null spike, per column with null counts and row counts in both versions: ``ratio = nullCount /
  rowCount``; ``cur.ratio - prev.ratio > 0.2`` -> ``{"type": "invalid", "severity": high if the rise
  >= 0.5 else medium, "count": cur.nullCount}``;
* schema change: fields of ``prev`` removed or with another type in ``cur`` (only when both have a
  schema) -> ``{"type": "invalid", "severity": "medium", "count": removed + retyped}``.

Validations: one per assertion ``{rule_name, rule_type, passed, failed_count, details}``; ``rule_type``
from the assertion name (not_null, unique, range, pattern, else custom); ``failed_count`` is the
assertion's ``failedCount`` if given, else 0 when passed and None otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

__all__ = [
    "VersionFacts", "QualityAnnotation", "completeness", "accuracy", "consistency", "timeliness",
    "anomalies", "validations", "quality_annotation", "annotation_values", "facts_from_row", "DEFAULT_TIMELINESS_WINDOW_SECONDS",
]

DEFAULT_TIMELINESS_WINDOW_SECONDS = 3600.0


@dataclass(frozen=True)
class VersionFacts:
    """What the quality formulas need from one dataset version."""

    row_count: int | None = None
    null_counts: Mapping[str, int] = field(default_factory=dict)
    fields: list[Mapping[str, Any]] | None = None      # [{name, type}] or None when no schema facet
    assertions: list[Mapping[str, Any]] = field(default_factory=list)
    event_time: datetime | None = None
    nominal_end: datetime | None = None

    @cached_property
    def types(self) -> dict[str, Any] | None:
        """``{field name: type}`` of :attr:`fields` (None without a schema), computed once: the consistency and
        the schema-change anomaly both compare the two versions' maps."""
        return None if self.fields is None else _types(self.fields)

    def has_quality_input(self) -> bool:
        return bool(self.row_count is not None or self.null_counts or self.assertions or self.fields
                    or self.nominal_end is not None)


@dataclass(frozen=True)
class QualityAnnotation:
    metrics: dict[str, float | None]
    validations: list[dict[str, Any]]
    anomalies: list[dict[str, Any]]


def completeness(cur: VersionFacts) -> float | None:
    """``1 - sum(nullCount) / (rowCount * n_columns_with_nullCount)``; None for rowCount 0/missing or n 0."""
    return _completeness(cur.row_count, cur.null_counts)


def _completeness(row_count: int | None, null_counts: Mapping[str, int]) -> float | None:
    if not row_count or row_count <= 0 or not null_counts:
        return None
    nulls = 0
    for v in null_counts.values():
        n = int(v)
        if n > 0:
            nulls += n
    value = 1.0 - nulls / (row_count * len(null_counts))
    return min(1.0, max(0.0, value))


def accuracy(cur: VersionFacts) -> float | None:
    """``passed / total`` assertions; None without assertions."""
    return _accuracy(cur.assertions)


def _accuracy(assertions: list[Mapping[str, Any]]) -> float | None:
    if not assertions:
        return None
    passed = 0
    for a in assertions:
        if a.get("success") is True:
            passed += 1
    return passed / len(assertions)


def _types(fields: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {str(f.get("name")): f.get("type") for f in fields}


def consistency(cur: VersionFacts, prev: VersionFacts | None) -> float | None:
    """Share of the previous version's fields still present with the same type (module doc)."""
    if prev is None or not prev.fields:
        return 1.0
    return _consistency(cur.types, prev.types or {})


def _consistency(now: dict[str, Any] | None, before: dict[str, Any]) -> float | None:
    """:func:`consistency` of two versions' ``{field: type}`` maps, the previous one non-empty."""
    if now is None:
        return None
    kept = 0
    for name, kind in before.items():
        if name in now and now[name] == kind:
            kept += 1
    return kept / len(before)


def timeliness(cur: VersionFacts, window_seconds: float = DEFAULT_TIMELINESS_WINDOW_SECONDS) -> float | None:
    """1.0 on time, decaying linearly to 0.0 ``window_seconds`` after the nominal end (module doc)."""
    return _timeliness(cur.event_time, cur.nominal_end, window_seconds)


def _timeliness(event_time: datetime | None, nominal_end: datetime | None, window_seconds: float) -> float | None:
    if nominal_end is None or event_time is None:
        return None
    late = (event_time - nominal_end).total_seconds()
    if late <= 0:
        return 1.0
    if window_seconds <= 0 or late >= window_seconds:
        return 0.0
    return 1.0 - late / window_seconds


def anomalies(cur: VersionFacts, prev: VersionFacts | None) -> list[dict[str, Any]]:
    """Row-count drop, null spikes and schema changes against ``prev`` (module doc)."""
    if prev is None:
        return []
    return _anomalies(cur.row_count, cur.null_counts, cur.types, prev.row_count, prev.null_counts,
                      prev.types if prev.fields else None)


def _anomalies(row_count: int | None, null_counts: Mapping[str, int], now: dict[str, Any] | None,
               p_row_count: int | None, p_null_counts: Mapping[str, int], before: dict[str, Any] | None
               ) -> list[dict[str, Any]]:
    """:func:`anomalies` of a version with a previous one; ``now`` / ``before``: their ``{field: type}`` maps (None
    without a schema; ``before`` None also for an empty previous schema)."""
    out: list[dict[str, Any]] = []
    if p_row_count and p_row_count > 0 and row_count is not None:
        drop = 1.0 - row_count / p_row_count
        if drop > 0.5:
            severity = "critical" if drop >= 0.9 else "high" if drop >= 0.75 else "medium"
            out.append({"type": "missing", "severity": severity, "count": p_row_count - row_count,
                        "description": f"row count fell {drop:.0%}: {p_row_count} -> {row_count}"})
    if row_count and p_row_count and row_count > 0 and p_row_count > 0 and null_counts and p_null_counts:
        spikes = None
        for col, nulls in null_counts.items():
            if col in p_null_counts:
                before_ratio = p_null_counts[col] / p_row_count
                after_ratio = nulls / row_count
                if after_ratio - before_ratio > 0.2:
                    if spikes is None:
                        spikes = []
                    spikes.append((col, before_ratio, after_ratio, nulls))
        if spikes is not None:
            spikes.sort()   # by column, as the set of shared columns was
            for col, before_ratio, after_ratio, nulls in spikes:
                out.append({"type": "invalid", "severity": "high" if after_ratio - before_ratio >= 0.5 else "medium",
                            "count": int(nulls),
                            "description": f"null ratio of {col} rose {before_ratio:.2f} -> {after_ratio:.2f}"})
    if before and now is not None:
        removed = [n for n in before if n not in now]
        retyped = [n for n, k in before.items() if n in now and now[n] != k]
        if removed or retyped:
            out.append({"type": "invalid", "severity": "medium", "count": len(removed) + len(retyped),
                        "description": f"schema change: removed {removed}, type changed {retyped}"})
    return out


def _rule_type(name: str) -> str:
    lowered = name.lower()
    if "null" in lowered:
        return "not_null"
    if "unique" in lowered or "distinct" in lowered:
        return "unique"
    if any(w in lowered for w in ("range", "between", "min", "max", "greater", "less")):
        return "range"
    if any(w in lowered for w in ("regex", "pattern", "match", "like")):
        return "pattern"
    return "custom"


#: :func:`_rule_type` by assertion name (a store sees few distinct names); bounded by clearing.
_RULE_TYPES: dict[str, str] = {}


def _cached_rule_type(name: str) -> str:
    found = _RULE_TYPES.get(name)
    if found is None:
        if len(_RULE_TYPES) >= 4096:
            _RULE_TYPES.clear()
        found = _RULE_TYPES[name] = _rule_type(name)
    return found


def validations(cur: VersionFacts) -> list[dict[str, Any]]:
    """WIA §4 validation objects from the assertions (module doc)."""
    return _validations(cur.assertions)


def _validations(assertions: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for a in assertions:
        name = str(a.get("assertion") or "")
        passed = a.get("success") is True
        failed = a.get("failedCount")
        column = a.get("column")
        out.append({"rule_name": name, "rule_type": _cached_rule_type(name), "passed": passed,
                    "failed_count": failed if isinstance(failed, int) else (0 if passed else None),
                    "details": f"column {column}" if column else None})
    return out


def quality_annotation(cur: VersionFacts, prev: VersionFacts | None,
                       window_seconds: float = DEFAULT_TIMELINESS_WINDOW_SECONDS) -> QualityAnnotation:
    """The §4 annotation of ``cur``: metrics, validations and anomalies against ``prev``."""
    return QualityAnnotation(
        metrics={"completeness": completeness(cur), "accuracy": accuracy(cur),
                 "consistency": consistency(cur, prev), "timeliness": timeliness(cur, window_seconds)},
        validations=validations(cur),
        anomalies=anomalies(cur, prev),
    )


def annotation_values(row_count: int | None, null_counts: Any, fields: Any, assertions: Any,
                      event_time: datetime | None, nominal_end: datetime | None, has_prev: bool,
                      p_row_count: int | None, p_null_counts: Any, p_fields: Any,
                      window_seconds: float = DEFAULT_TIMELINESS_WINDOW_SECONDS
                      ) -> tuple[dict[str, float | None], list[dict[str, Any]], list[dict[str, Any]]] | None:
    """``(metrics, validations, anomalies)`` of :func:`quality_annotation` for the version and previous version
    :func:`facts_from_row` would build from these column values (JSON columns parsed or as text; ``has_prev``
    false: no previous version), or None when the version has no quality input
    (:meth:`VersionFacts.has_quality_input`). The same figures without the two :class:`VersionFacts` (the store
    annotates every dataset version a batch touches: ~24 -> ~11 us a version, compiled, docs/PERFORMANCE.md
    session 30)."""
    null_counts = _json(null_counts) or {}
    fields = _json(fields)
    assertions = _json(assertions) or []
    if not (row_count is not None or null_counts or assertions or fields or nominal_end is not None):
        return None
    now = None if fields is None else _types(fields)
    consistent: float | None = 1.0
    found: list[dict[str, Any]] = []
    if has_prev:
        p_null_counts = _json(p_null_counts) or {}
        p_fields = _json(p_fields)
        before = _types(p_fields) if p_fields else None
        if before is not None:
            consistent = _consistency(now, before)
        found = _anomalies(row_count, null_counts, now, p_row_count, p_null_counts, before)
    metrics = {"completeness": _completeness(row_count, null_counts), "accuracy": _accuracy(assertions),
               "consistency": consistent, "timeliness": _timeliness(event_time, nominal_end, window_seconds)}
    return metrics, _validations(assertions), found


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value  # a tuple: `str | bytes` builds a union per call


def facts_from_row(row: Mapping[str, Any]) -> VersionFacts:
    """Facts from a ``lineage_dataset_versions`` row (or a dict with the same keys)."""
    return VersionFacts(
        row_count=row.get("row_count"),
        null_counts=_json(row.get("null_counts")) or {},
        fields=_json(row.get("fields")),
        assertions=_json(row.get("assertions")) or [],
        event_time=row.get("event_time"),
        nominal_end=row.get("nominal_end"),
    )
