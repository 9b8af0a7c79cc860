"""Pydantic models of the OpenLineage 2-0-x events: RunEvent, DatasetEvent, JobEvent.

They reject what the spec rejects, with messages that name the field (pydantic's ``loc``, or
:class:`schemas.errors.EventValidationError.field` through :func:`parse_event`):

- ``run.runId`` must be a UUID; ``eventTime`` an ISO-8601 date-time *with* an offset;
- ``eventType`` one of START, RUNNING, COMPLETE, ABORT, FAIL, OTHER (optional, as in the spec);
- ``namespace`` and ``name`` are required, non-empty strings on jobs and datasets;
- ``producer`` (an absolute URI) and ``schemaURL`` are required (this library fills in defaults).

Facets are open-ended: any JSON object, kept verbatim; unknown top-level properties are kept
too. :meth:`_Event.to_dict` returns spec JSON (``None`` members of the models omitted, facet
content untouched). Facet constructors for the standard facets used by the builder and the
demo live at the bottom of this module.
"""

from __future__ import annotations

import re
import traceback
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.errors import EventValidationError

__all__ = [
    "PRODUCER", "SPEC_BASE", "EventType", "Dataset", "InputDataset", "OutputDataset", "StaticDataset", "Job",
    "Run", "RunEvent", "DatasetEvent", "JobEvent", "parse_event", "facet", "parent_run_facet",
    "error_message_facet", "schema_facet", "column_lineage_facet", "input_field",
]

PRODUCER = "https://github.com/lineage-stream/lineage-stream/tree/main/producers"
SPEC_BASE = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
FACETS_BASE = "https://openlineage.io/spec/facets"

_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s]+\Z")
NonEmpty = Annotated[str, Field(min_length=1)]
Facets = dict[str, dict[str, Any]]


class EventType(StrEnum):
    """The run state transition an event reports."""

    START = "START"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    ABORT = "ABORT"
    FAIL = "FAIL"
    OTHER = "OTHER"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)


class Dataset(_Model):
    namespace: NonEmpty
    name: NonEmpty
    facets: Facets = Field(default_factory=dict)


class InputDataset(Dataset):
    inputFacets: Facets = Field(default_factory=dict)


class OutputDataset(Dataset):
    outputFacets: Facets = Field(default_factory=dict)


class StaticDataset(Dataset):
    pass


class Job(_Model):
    namespace: NonEmpty
    name: NonEmpty
    facets: Facets = Field(default_factory=dict)


class Run(_Model):
    runId: str
    facets: Facets = Field(default_factory=dict)

    @field_validator("runId", mode="before")
    @classmethod
    def _uuid(cls, value: object) -> str:
        if isinstance(value, uuid.UUID):
            return str(value)
        try:
            return str(uuid.UUID(str(value)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"runId must be a UUID, got {value!r}") from exc


def _check_event_time(value: object) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("eventTime must carry a UTC offset (e.g. 2024-05-01T12:00:00Z)")
        return value.isoformat()
    if not isinstance(value, str):
        raise ValueError(f"eventTime must be an ISO-8601 string, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"eventTime is not an ISO-8601 date-time: {value!r}") from exc
    if "t" not in value.lower() or parsed.tzinfo is None:
        raise ValueError(f"eventTime must be a date-time with an offset (Z or +hh:mm): {value!r}")
    return value


class _Event(_Model):
    eventTime: str
    producer: NonEmpty = PRODUCER
    schemaURL: NonEmpty = f"{SPEC_BASE}#/$defs/RunEvent"

    @field_validator("eventTime", mode="before")
    @classmethod
    def _event_time(cls, value: object) -> str:
        return _check_event_time(value)

    @field_validator("producer")
    @classmethod
    def _producer_uri(cls, value: str) -> str:
        if not _URI.match(value):
            raise ValueError(f"producer must be an absolute URI (https://...), got {value!r}")
        return value

    def to_dict(self) -> dict[str, Any]:
        """The event as spec JSON: model members that are None are left out; facets as given."""
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)


class RunEvent(_Event):
    eventType: EventType | None = None
    run: Run
    job: Job
    inputs: list[InputDataset] = Field(default_factory=list)
    outputs: list[OutputDataset] = Field(default_factory=list)


class DatasetEvent(_Event):
    schemaURL: NonEmpty = f"{SPEC_BASE}#/$defs/DatasetEvent"
    dataset: StaticDataset


class JobEvent(_Event):
    schemaURL: NonEmpty = f"{SPEC_BASE}#/$defs/JobEvent"
    job: Job
    inputs: list[InputDataset] = Field(default_factory=list)
    outputs: list[OutputDataset] = Field(default_factory=list)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def parse_event(document: dict[str, Any]) -> RunEvent | DatasetEvent | JobEvent:
    """Build the model for ``document`` (kind from its shape); raise EventValidationError naming the field."""
    if not isinstance(document, dict):
        raise EventValidationError("an OpenLineage event must be a JSON object", code="validation.not_an_event")
    model: type[_Event]
    if "run" in document:
        model = RunEvent
    elif "dataset" in document:
        model = DatasetEvent
    elif "job" in document:
        model = JobEvent
    else:
        raise EventValidationError("not an OpenLineage event: no run, job or dataset",
                                   code="validation.not_an_event", field="run")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = _field_path(tuple(first["loc"]))
        code = {"run.runId": "validation.run_id", "eventTime": "validation.event_time",
                "eventType": "validation.event_type"}.get(field)
        if code is None:
            code = "validation.missing" if first["type"] == "missing" else "validation.type"
        raise EventValidationError(f"{field}: {first['msg']}", code=code, field=field) from exc


# -- facets -------------------------------------------------------------------------------------

def facet(schema: str, producer: str = PRODUCER, **content: Any) -> dict[str, Any]:
    """A facet: ``_producer``, ``_schemaURL`` (``schema`` like ``"1-0-1/ErrorMessageRunFacet"``) and content."""
    name = schema.rsplit("/", 1)[-1]
    url = schema if schema.startswith("http") else f"{FACETS_BASE}/{schema}.json#/$defs/{name}"
    return {"_producer": producer, "_schemaURL": url, **{k: v for k, v in content.items() if v is not None}}


def parent_run_facet(run_id: str, namespace: str, name: str, *, root_run_id: str | None = None,
                     root_namespace: str | None = None, root_name: str | None = None) -> dict[str, Any]:
    """The ``parent`` run facet (1-2-0): parent run and job, and the root of the chain when given."""
    content: dict[str, Any] = {"run": {"runId": str(run_id)}, "job": {"namespace": namespace, "name": name}}
    if root_run_id and root_namespace and root_name:
        content["root"] = {"run": {"runId": str(root_run_id)},
                           "job": {"namespace": root_namespace, "name": root_name}}
    return facet("1-2-0/ParentRunFacet", **content)


def error_message_facet(exc: BaseException, language: str = "python") -> dict[str, Any]:
    """The ``errorMessage`` run facet (1-0-1): message, programmingLanguage, stackTrace."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return facet("1-0-1/ErrorMessageRunFacet", message=f"{type(exc).__name__}: {exc}",
                 programmingLanguage=language, stackTrace=stack)


def schema_facet(fields: list[tuple[str, str]] | list[dict[str, Any]]) -> dict[str, Any]:
    """The ``schema`` dataset facet (1-2-0) from ``[(name, type), ...]`` or field dicts."""
    rendered = [f if isinstance(f, dict) else {"name": f[0], "type": f[1]} for f in fields]
    return facet("1-2-0/SchemaDatasetFacet", fields=rendered)


TransformationKind = Literal["IDENTITY", "TRANSFORMATION", "AGGREGATION", "JOIN", "GROUP_BY", "FILTER",
                             "SORT", "WINDOW", "CONDITIONAL"]
_DIRECT = {"IDENTITY", "TRANSFORMATION", "AGGREGATION"}


def input_field(namespace: str, name: str, field: str, subtype: TransformationKind = "IDENTITY", *,
                description: str | None = None, masking: bool = False) -> dict[str, Any]:
    """One ``inputFields[]`` entry of the column-lineage facet, with one transformation.

    ``type`` is DIRECT for IDENTITY / TRANSFORMATION / AGGREGATION, INDIRECT otherwise (1-2-0).
    """
    transformation: dict[str, Any] = {"type": "DIRECT" if subtype in _DIRECT else "INDIRECT",
                                      "subtype": subtype, "masking": masking}
    if description:
        transformation["description"] = description
    return {"namespace": namespace, "name": name, "field": field, "transformations": [transformation]}


def column_lineage_facet(fields: dict[str, list[dict[str, Any]]],
                         dataset: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``columnLineage`` dataset facet (1-2-0): output field -> ``{"inputFields": [...]}``."""
    content: dict[str, Any] = {"fields": {out: {"inputFields": inputs} for out, inputs in fields.items()}}
    if dataset:
        content["dataset"] = dataset
    return facet("1-2-0/ColumnLineageDatasetFacet", **content)
