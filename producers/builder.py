"""Instrument a Python job: a context manager and a decorator that emit a run's lineage.

    with lineage_run(emitter, "etl", "daily_orders", inputs=[("pg://db", "public.orders")]) as run:
        run.add_output("s3://lake", "orders_daily", facets={"schema": schema_facet([("id", "int")])})
        run.add_column_lineage("s3://lake", "orders_daily",
                               {"id": [input_field("pg://db", "public.orders", "id")]})
        ...                                   # the job's work

    @track_lineage(emitter, "etl", inputs=[("pg://db", "public.orders")])
    def daily_orders(): ...

On entry a START event is sent; on a normal exit COMPLETE; when the body raises an
``Exception``, FAIL with the ``errorMessage`` run facet (message, programmingLanguage,
stackTrace) and the exception is re-raised; on ``KeyboardInterrupt``/``SystemExit``, ABORT.
Inputs, outputs, run / job / dataset facets and column lineage added during the body are in the
terminal event. ``run.child(...)`` starts a nested run with the ``parent`` run facet (root kept).
``emitter`` is anything with ``emit(event_dict)``: a :class:`producers.emitter.LineageEmitter`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ParamSpec, Protocol, TypeVar

from .models import (
    PRODUCER,
    EventType,
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    column_lineage_facet,
    error_message_facet,
    parent_run_facet,
)

__all__ = ["LineageRun", "lineage_run", "track_lineage", "DatasetSpec"]

P = ParamSpec("P")
R = TypeVar("R")

#: A dataset given to the builder: ``(namespace, name)``, a dict or a model.
DatasetSpec = tuple[str, str] | dict[str, Any] | InputDataset | OutputDataset


class _Emits(Protocol):
    def emit(self, event: Any) -> None: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _dataset(spec: DatasetSpec, model: type[InputDataset] | type[OutputDataset]) -> Any:
    if isinstance(spec, model):
        return spec
    if isinstance(spec, tuple):
        namespace, name = spec
        return model(namespace=namespace, name=name)
    if isinstance(spec, (InputDataset, OutputDataset)):
        return model.model_validate(spec.model_dump())
    return model.model_validate(spec)


class LineageRun:
    """One run of a job: collects datasets and facets, emits its events."""

    def __init__(self, emitter: _Emits, job_namespace: str, job_name: str, *, run_id: str | None = None,
                 inputs: Iterable[DatasetSpec] = (), outputs: Iterable[DatasetSpec] = (),
                 run_facets: dict[str, dict[str, Any]] | None = None,
                 job_facets: dict[str, dict[str, Any]] | None = None,
                 parent: LineageRun | dict[str, Any] | None = None, producer: str = PRODUCER) -> None:
        self.emitter = emitter
        self.run = Run(runId=run_id or str(uuid.uuid4()), facets=dict(run_facets or {}))
        self.job = Job(namespace=job_namespace, name=job_name, facets=dict(job_facets or {}))
        self.inputs: list[InputDataset] = [_dataset(d, InputDataset) for d in inputs]
        self.outputs: list[OutputDataset] = [_dataset(d, OutputDataset) for d in outputs]
        self.producer = producer
        self.state: EventType | None = None
        if parent is not None:
            self.set_parent(parent)

    @property
    def run_id(self) -> str:
        return self.run.runId

    # -- collecting ---------------------------------------------------------------------------

    def add_input(self, namespace: str, name: str, *, facets: dict[str, Any] | None = None,
                  input_facets: dict[str, Any] | None = None) -> InputDataset:
        dataset = InputDataset(namespace=namespace, name=name, facets=facets or {}, inputFacets=input_facets or {})
        self.inputs.append(dataset)
        return dataset

    def add_output(self, namespace: str, name: str, *, facets: dict[str, Any] | None = None,
                   output_facets: dict[str, Any] | None = None) -> OutputDataset:
        dataset = OutputDataset(namespace=namespace, name=name, facets=facets or {},
                                outputFacets=output_facets or {})
        self.outputs.append(dataset)
        return dataset

    def add_run_facet(self, name: str, facet: dict[str, Any]) -> None:
        self.run.facets[name] = facet

    def add_job_facet(self, name: str, facet: dict[str, Any]) -> None:
        self.job.facets[name] = facet

    def _find(self, namespace: str, name: str) -> InputDataset | OutputDataset:
        candidates: list[InputDataset | OutputDataset] = [*self.outputs, *self.inputs]
        for dataset in candidates:
            if dataset.namespace == namespace and dataset.name == name:
                return dataset
        raise KeyError(f"no dataset {namespace}/{name} in this run: add_input/add_output it first")

    def add_dataset_facet(self, namespace: str, name: str, facet_name: str, facet: dict[str, Any]) -> None:
        """Attach a dataset facet to an input or output already added (outputs searched first)."""
        self._find(namespace, name).facets[facet_name] = facet

    def add_column_lineage(self, namespace: str, name: str, fields: dict[str, list[dict[str, Any]]],
                           dataset: list[dict[str, Any]] | None = None) -> None:
        """The ``columnLineage`` facet of output ``namespace/name`` (see ``models.input_field``)."""
        self.add_dataset_facet(namespace, name, "columnLineage", column_lineage_facet(fields, dataset))

    def set_parent(self, parent: LineageRun | dict[str, Any]) -> None:
        """Set the ``parent`` run facet from another LineageRun (root carried over) or a facet dict."""
        if isinstance(parent, LineageRun):
            root = (parent.run.facets.get("parent") or {}).get("root")
            grand = (parent.run.facets.get("parent") or {})
            if root:
                root_ids = (root["run"]["runId"], root["job"]["namespace"], root["job"]["name"])
            elif grand:  # the parent is itself a child: its parent is our root
                root_ids = (grand["run"]["runId"], grand["job"]["namespace"], grand["job"]["name"])
            else:
                root_ids = (parent.run_id, parent.job.namespace, parent.job.name)
            facet = parent_run_facet(parent.run_id, parent.job.namespace, parent.job.name,
                                     root_run_id=root_ids[0], root_namespace=root_ids[1], root_name=root_ids[2])
        else:
            facet = parent
        self.run.facets["parent"] = facet

    def child(self, job_name: str, job_namespace: str | None = None, **kwargs: Any) -> LineageRun:
        """A run whose ``parent`` facet points at this one (same emitter)."""
        return LineageRun(self.emitter, job_namespace or self.job.namespace, job_name, parent=self, **kwargs)

    # -- emitting -----------------------------------------------------------------------------

    def event(self, event_type: EventType | str) -> RunEvent:
        """The RunEvent of ``event_type`` with everything collected so far."""
        return RunEvent(eventTime=_now(), eventType=EventType(event_type), producer=self.producer,
                        run=self.run.model_copy(deep=True), job=self.job.model_copy(deep=True),
                        inputs=[d.model_copy(deep=True) for d in self.inputs],
                        outputs=[d.model_copy(deep=True) for d in self.outputs])

    def _send(self, event_type: EventType) -> RunEvent:
        event = self.event(event_type)
        self.emitter.emit(event.to_dict())
        self.state = event_type
        return event

    def start(self) -> RunEvent:
        return self._send(EventType.START)

    def running(self) -> RunEvent:
        return self._send(EventType.RUNNING)

    def complete(self) -> RunEvent:
        return self._send(EventType.COMPLETE)

    def abort(self) -> RunEvent:
        return self._send(EventType.ABORT)

    def fail(self, exc: BaseException) -> RunEvent:
        """FAIL with the ``errorMessage`` run facet built from ``exc``."""
        self.run.facets["errorMessage"] = error_message_facet(exc)
        return self._send(EventType.FAIL)

    @contextmanager
    def track(self) -> Iterator[LineageRun]:
        """START now; COMPLETE, FAIL (re-raising) or ABORT when the block ends."""
        self.start()
        try:
            yield self
        except Exception as exc:
            self.fail(exc)
            raise
        except BaseException:
            self.abort()
            raise
        self.complete()


@contextmanager
def lineage_run(emitter: _Emits, job_namespace: str, job_name: str, **kwargs: Any) -> Iterator[LineageRun]:
    """Context manager: a tracked :class:`LineageRun` (keyword arguments as its constructor)."""
    with LineageRun(emitter, job_namespace, job_name, **kwargs).track() as run:
        yield run


def track_lineage(emitter: _Emits | Callable[[], _Emits], job_namespace: str, job_name: str | None = None, *,
                  pass_run: bool = False, **kwargs: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: each call of the function is one tracked run of job ``job_name`` (default: its
    qualified name). ``emitter`` may be a zero-argument factory, called at each run. With
    ``pass_run=True`` the :class:`LineageRun` is passed as keyword argument ``lineage_run``."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        name = job_name or f"{func.__module__}.{func.__qualname__}"

        @functools.wraps(func)
        def wrapper(*args: P.args, **kw: P.kwargs) -> R:
            target = emitter() if callable(emitter) and not hasattr(emitter, "emit") else emitter
            with lineage_run(target, job_namespace, name, **kwargs) as run:  # type: ignore[arg-type]
                if pass_run:
                    kw["lineage_run"] = run
                return func(*args, **kw)

        return wrapper

    return decorate
