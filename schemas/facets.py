"""The OpenLineage standard facet schemas, compiled once, and the check of one facet against its schema.

``schemas/openlineage_facets/`` holds ``spec/facets/*.json`` and ``spec/OpenLineage.json`` of
github.com/OpenLineage/OpenLineage at commit 8f02abfb7a252783b95df79f443edb13959bf52c (Apache-2.0),
copied verbatim. Each facet file names its facet(s) as top-level ``properties`` (``"ownership": {"$ref":
"#/$defs/OwnershipDatasetFacet"}``) and says where the facet lives through the base facet it extends
(``OpenLineage.json#/$defs/DatasetFacet`` / ``InputDatasetFacet`` / ``OutputDatasetFacet`` / ``RunFacet`` /
``JobFacet``; a ``oneOf`` / ``anyOf`` of such definitions, as ``subset`` and ``lineage`` have, defines the
facet at each level). :data:`LEVELS` are those places, the key of a schema is ``(level, facet name)``.

Lookup (:func:`facet_validator`): the facet's own level first; a dataset facet found under another of the
three dataset levels (``facets`` / ``inputFacets`` / ``outputFacets``: e.g. ``dataQualityAssertions``, an
input facet in the spec, sent in a dataset's ``facets``) is checked against that schema, since the facet's
name is what says which facet it is. A name the spec does not define is a custom facet: only the core's
``_producer`` / ``_schemaURL`` apply (checked in :mod:`schemas.validate`).

Validation uses ``jsonschema-rs`` (compiled once per process: one validator of all standard facets of an
event for the fast path, :func:`event_facets_validator`, and one per facet to find what fails);
``benchmarks/validate_bench.py`` measures it against ``fastjsonschema``. An explicit ``null`` for a field is
read as absent (:func:`strip_nulls`): a facet that fails is checked once more without its ``null`` fields
before it counts as a violation, so valid facets pay for one check only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["LEVELS", "FacetViolation", "check_facet", "event_facets_validator", "facet_validator", "json_path",
           "standard_facets", "strip_nulls"]

_DIR = Path(__file__).parent / "openlineage_facets"
_CORE_FILE = "OpenLineage.json"
_CORE_PREFIX = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/"
#: The base facet definitions of OpenLineage.json -> the level a facet extending them lives at.
_BASES = {"RunFacet": "run", "JobFacet": "job", "DatasetFacet": "dataset", "InputDatasetFacet": "input",
          "OutputDatasetFacet": "output"}
#: Where facets live: ``run.facets``, ``job.facets``, ``<dataset>.facets``, ``inputs[].inputFacets``,
#: ``outputs[].outputFacets``.
LEVELS = tuple(_BASES.values())
_DATASET_LEVELS = ("dataset", "input", "output")


@dataclass(frozen=True)
class FacetViolation:
    """One standard facet that breaks its schema: it is dropped from the stored event.

    ``path``: JSON path of the violation in the event (``outputs[0].facets.ownership.owners[1].name``);
    ``facet_path``: the dropped facet (``outputs[0].facets.ownership``); ``facet``: its name;
    ``message``: what is wrong, naming ``path``.
    """

    facet: str
    facet_path: str
    path: str
    message: str


def _read(name: str) -> dict[str, Any]:
    return json.loads((_DIR / name).read_text(encoding="utf-8"))


def _local_refs(node: Any) -> Any:
    """The schema with references into OpenLineage.json made local (``#/$defs/X``)."""
    if isinstance(node, dict):
        return {k: (v.replace(_CORE_PREFIX, "#/$defs/") if k == "$ref" and isinstance(v, str) else _local_refs(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_local_refs(v) for v in node]
    return node


def _levels_of(defs: dict[str, Any], name: str) -> list[tuple[str, str]]:
    """``[(level, definition)]`` of a facet definition: its base, or the bases of its oneOf / anyOf."""
    body = defs[name]
    for part in body.get("allOf", []):
        ref = part.get("$ref", "")
        if ref.startswith("#/$defs/") and ref[8:] in _BASES:
            return [(_BASES[ref[8:]], name)]
    out: list[tuple[str, str]] = []
    for key in ("oneOf", "anyOf"):
        for part in body.get(key, []):
            ref = part.get("$ref", "")
            if ref.startswith("#/$defs/") and ref[8:] in defs:
                out += _levels_of(defs, ref[8:])
    return out


@cache
def _spec() -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[tuple[str, str], tuple[str, str]]]:
    """``(core $defs, {file stem: its $defs}, {(level, facet name): (file stem, definition)})`` of the shipped
    files, references into OpenLineage.json made local."""
    core = _local_refs(_read(_CORE_FILE))["$defs"]
    # BaseFacet's `_producer` / `_schemaURL` belong to the core (schemas.validate rejects the whole message when
    # they are missing or no URI); checking their format again on every facet was ~30 % of this layer's time
    for field in ("_producer", "_schemaURL"):
        core["BaseFacet"]["properties"][field].pop("format", None)
    files: dict[str, dict[str, Any]] = {}
    table: dict[tuple[str, str], tuple[str, str]] = {}
    for entry in sorted(_DIR.iterdir()):
        if not entry.name.endswith("Facet.json"):
            continue
        stem = entry.name[: -len(".json")]
        spec = _local_refs(_read(entry.name))
        defs = files[stem] = spec["$defs"]
        clash = set(defs) & set(core)
        if clash:  # a shipped file that would shadow a core definition: refuse rather than validate wrongly
            raise RuntimeError(f"{entry.name} redefines OpenLineage.json definitions {sorted(clash)}")
        for facet, prop in spec.get("properties", {}).items():
            targets = ([prop["$ref"][8:]] if "$ref" in prop
                       else [p["$ref"][8:] for key in ("oneOf", "anyOf") for p in prop.get(key, [])])
            for target in targets:
                for level, definition in _levels_of(defs, target):
                    table[(level, facet)] = (stem, definition)
    return core, files, table


@cache
def standard_facets() -> dict[tuple[str, str], dict[str, Any]]:
    """``{(level, facet name): self-contained JSON schema}`` for every facet of the shipped spec files."""
    core, files, table = _spec()
    return {key: {"$defs": {**core, **files[stem]}, "$ref": f"#/$defs/{definition}"}
            for key, (stem, definition) in table.items()}


def _compile(schema: dict[str, Any]) -> Any:
    try:
        import jsonschema_rs
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("facet validation needs jsonschema-rs: pip install jsonschema-rs") from exc

    # Formats (uuid, uri, date-time) are annotations in JSON Schema 2020-12, the spec's draft: the official
    # schema does not reject a facet for them, and real producers rely on it (the Spark integration sends
    # `dataSource.uri: "file"`, dbt templates a parent runId). The core's own format rules (runId a UUID,
    # eventTime RFC 3339, producer and schemaURL URIs) are checked by schemas/validate.py.
    return jsonschema_rs.validator_for(schema, validate_formats=False)


_VALIDATORS: dict[tuple[str, str], Any] = {}
_MISSING = object()


def _schema_for(level: str, name: str) -> dict[str, Any] | None:
    schemas = standard_facets()
    schema = schemas.get((level, name))
    if schema is None and level in _DATASET_LEVELS:
        schema = next((schemas[(other, name)] for other in _DATASET_LEVELS if (other, name) in schemas), None)
    return schema


def facet_validator(level: str, name: str) -> Any:
    """The compiled validator of standard facet ``name`` at ``level`` (module doc), or None for a custom facet.
    Compiled on first use and cached for the life of the process."""
    key = (level, name)
    found = _VALIDATORS.get(key, _MISSING)
    if found is _MISSING:
        schema = _schema_for(level, name)
        found = _VALIDATORS[key] = None if schema is None else _compile(schema)
    return found


def _container(level: str, refs: dict[tuple[str, str], str]) -> dict[str, Any]:
    names = {name for (lvl, name) in refs if lvl == level}
    if level in _DATASET_LEVELS:
        names |= {name for (lvl, name) in refs if lvl in _DATASET_LEVELS}
    props = {}
    for name in sorted(names):
        key = next(k for k in [(level, name)] + [(o, name) for o in _DATASET_LEVELS] if k in refs)
        props[name] = {"$ref": refs[key]}
    return {"type": "object", "properties": props}


@cache
def event_facets_validator() -> Any:
    """One compiled validator of every standard facet of an event at once: the fast path.

    ``is_valid(event)`` is True when every standard facet in ``run.facets``, ``job.facets``,
    ``dataset.facets``, ``inputs[].facets`` / ``inputFacets`` and ``outputs[].facets`` / ``outputFacets``
    meets its schema as sent (nulls included); one call converts the event once, where a call per facet
    converts each facet separately. When it says False, :func:`check_facet` finds which facets fail."""
    core, files, table = _spec()
    defs: dict[str, Any] = dict(core)
    for stem, own in files.items():
        for def_name, body in own.items():
            defs[f"{stem}.{def_name}"] = _prefix_refs(body, stem, set(own))
    refs = {key: f"#/$defs/{stem}.{definition}" for key, (stem, definition) in table.items()}
    dataset = _container("dataset", refs)
    composite = {
        "$defs": defs,
        "type": "object",
        "properties": {
            "run": {"properties": {"facets": _container("run", refs)}},
            "job": {"properties": {"facets": _container("job", refs)}},
            "dataset": {"properties": {"facets": dataset}},
            "inputs": {"items": {"properties": {"facets": dataset, "inputFacets": _container("input", refs)}}},
            "outputs": {"items": {"properties": {"facets": dataset, "outputFacets": _container("output", refs)}}},
        },
    }
    return _compile(composite)


def _prefix_refs(node: Any, stem: str, own: set[str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/") and v[8:] in own:
                out[k] = f"#/$defs/{stem}.{v[8:]}"
            else:
                out[k] = _prefix_refs(v, stem, own)
        return out
    if isinstance(node, list):
        return [_prefix_refs(v, stem, own) for v in node]
    return node


def strip_nulls(value: Any) -> Any:
    """``value`` without the ``null`` fields of its objects, at any depth (list items stay as they are)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$-")


def json_path(base: str, parts: Any) -> str:
    """``base`` followed by ``parts`` as ``.key`` / ``[index]`` / ``["odd key"]``."""
    out = base
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and set(part) <= _IDENT:
            out += f".{part}"
        else:
            out += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _violation(error: Any, name: str, facet_path: str) -> FacetViolation:
    parts = list(error.instance_path)
    if type(error.kind).__name__ == "Required":
        parts.append(error.kind.property)
        what = "is required"
    else:  # jsonschema-rs says it plainly: '"10" is not of type "integer"', '"x" is not a "uuid"'
        what = error.message if len(error.message) <= 200 else f"{_short(error.instance)} breaks the facet's schema"
    path = json_path(facet_path, parts)
    return FacetViolation(facet=name, facet_path=facet_path, path=path,
                          message=f"{path}: {what} (standard facet {name!r} dropped)")


def check_facet(level: str, name: str, facet: Any, facet_path: str) -> FacetViolation | None:
    """None when ``facet`` (a standard one at ``level``) meets its schema, or is custom; else the first
    violation. Explicit nulls are read as absent (module doc)."""
    validator = facet_validator(level, name)
    if validator is None or validator.is_valid(facet):
        return None
    stripped = strip_nulls(facet)
    for error in validator.iter_errors(stripped):
        return _violation(error, name, facet_path)
    return None
