"""Realistic synthetic OpenLineage traffic, for ``lineage demo``, ``lineage up`` and benchmarks.

:class:`DemoTraffic` is a pure, deterministic generator (same seed and start time, same
messages): a small data platform of warehouses, a lake and geoscience objects; jobs with
schemas, SQL, source code locations, owners, tags and documentation; runs that go
START -> (RUNNING) -> COMPLETE | FAIL | ABORT, interleaved; orchestrator runs with child
task runs (``parent`` run facet with ``root``); column lineage (1-2-0, DIRECT
IDENTITY/TRANSFORMATION/AGGREGATION and INDIRECT JOIN/FILTER/GROUP_BY/SORT); data quality
metrics and assertions on inputs, output statistics on outputs, row-count drops and null spikes
now and then; symlinks on some datasets; Evo-style multi-object ``$self`` publishes (one Evo
document per created object, with its subject); and about ``duplicate_rate`` exact duplicates
and ``late_rate`` events held back and sent later (out of order).

:func:`publish_demo` paces the messages into a :class:`producers.emitter.LineageEmitter` at
a target rate.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .models import (
    PRODUCER,
    SPEC_BASE,
    TransformationKind,
    column_lineage_facet,
    facet,
    input_field,
    parent_run_facet,
    schema_facet,
)

__all__ = ["DemoTraffic", "DemoMessage", "DemoStats", "publish_demo", "publish_message"]

DEMO_START = datetime(2024, 1, 1, tzinfo=UTC)
PRODUCERS = (
    "https://github.com/apache/airflow/tree/providers-openlineage/2.1.0",
    "https://github.com/OpenLineage/OpenLineage/tree/1.30.0/integration/spark",
    "https://github.com/OpenLineage/OpenLineage/tree/1.30.0/integration/dbt",
    PRODUCER,
)
NAMESPACES = ("postgres://warehouse.internal:5432", "s3://acme-lake", "bigquery://acme-analytics",
              "snowflake://acme.eu-west-1")
EVO_NAMESPACE = "evogeoscienceobject://hub1/b3bfd062-820d-4aa4-9751-bda2f1cd8946/c2be55db-53f0-4032-b57f-dde3ddd678d8"
COLUMN_TYPES = ("bigint", "varchar", "double", "timestamp", "boolean", "decimal(18,2)", "date")
OWNERS = ("team:data-platform", "team:finance-analytics", "user:ana@acme.io", "team:geoscience")
WORDS = ("orders", "customers", "payments", "shipments", "drillholes", "assays", "sessions", "events",
         "invoices", "inventory", "products", "surveys", "blocks", "wells", "sensors", "accounts")
DIRECT: tuple[TransformationKind, ...] = ("IDENTITY", "IDENTITY", "TRANSFORMATION", "AGGREGATION")
INDIRECT: tuple[TransformationKind, ...] = ("JOIN", "FILTER", "GROUP_BY", "SORT", "WINDOW", "CONDITIONAL")


@dataclass(frozen=True)
class DemoMessage:
    """One message to publish: an OpenLineage event, or an Evo document when ``subject`` is set."""

    value: dict[str, Any]
    subject: dict[str, str] | None = None
    kind: str = "event"          # event | evo | duplicate | late


@dataclass
class _Dataset:
    namespace: str
    name: str
    fields: list[tuple[str, str]]
    rows: int
    owner: str
    symlink: tuple[str, str] | None = None

    def ref(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name}


@dataclass
class _Job:
    namespace: str
    name: str
    inputs: list[_Dataset]
    outputs: list[_Dataset]
    producer: str
    sql: str | None
    owner: str
    commit: str


@dataclass
class DemoStats:
    """What :func:`publish_demo` did."""

    messages: int = 0
    events: int = 0
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)


class DemoTraffic:
    """Deterministic synthetic traffic: iterate :meth:`messages` (endless) or call :meth:`take`."""

    def __init__(self, seed: int = 0, *, start_time: datetime = DEMO_START, datasets: int = 60, jobs: int = 40,
                 duplicate_rate: float = 0.01, late_rate: float = 0.01, evo_share: float = 0.08,
                 max_active_runs: int = 8) -> None:
        self.rng = random.Random(seed)
        self.clock = start_time
        self.duplicate_rate, self.late_rate, self.evo_share = duplicate_rate, late_rate, evo_share
        self.max_active = max_active_runs
        self.datasets = [self._make_dataset(i) for i in range(datasets)]
        self.jobs = [self._make_job(i) for i in range(jobs)]
        self.orchestrators = [f"dag_{w}" for w in self.rng.sample(WORDS, 4)]

    # -- world ------------------------------------------------------------------------------

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _make_dataset(self, i: int) -> _Dataset:
        rng = self.rng
        namespace = NAMESPACES[i % len(NAMESPACES)]
        stem = f"{rng.choice(WORDS)}_{i}"
        name = f"{rng.choice(('raw', 'staging', 'mart'))}.{stem}" if "s3" not in namespace else f"/lake/{stem}"
        fields = [("id", "bigint")] + [(f"{rng.choice(WORDS)[:-1]}_{k}", rng.choice(COLUMN_TYPES))
                                       for k in range(rng.randint(2, 7))]
        symlink = ("hive://metastore:9083", f"lake.{stem}") if namespace.startswith("s3") and i % 2 else None
        return _Dataset(namespace, name, fields, rng.randint(1_000, 5_000_000), rng.choice(OWNERS), symlink)

    def _make_job(self, i: int) -> _Job:
        rng = self.rng
        inputs = rng.sample(self.datasets, rng.randint(1, 3))
        outputs = rng.sample([d for d in self.datasets if d not in inputs], rng.randint(1, 2))
        producer = rng.choice(PRODUCERS)
        sql = None
        if "dbt" in producer or "airflow" in producer:
            sql = (f"INSERT INTO {outputs[0].name} SELECT {', '.join(f for f, _ in outputs[0].fields[:3])} "
                   f"FROM {inputs[0].name}")
        namespace = rng.choice(("airflow-prod", "spark-prod", "dbt-analytics"))
        return _Job(namespace, f"{rng.choice(WORDS)}_pipeline_{i}.task", inputs, outputs, producer, sql,
                    rng.choice(OWNERS), f"{rng.getrandbits(40):010x}")

    # -- facets -----------------------------------------------------------------------------

    def _dataset_facets(self, d: _Dataset) -> dict[str, Any]:
        facets: dict[str, Any] = {
            "schema": schema_facet(d.fields),
            "ownership": facet("1-0-1/OwnershipDatasetFacet", owners=[{"name": d.owner, "type": "MAINTAINER"}]),
            "documentation": facet("1-1-0/DocumentationDatasetFacet", description=f"{d.name} table"),
        }
        if "finance" in d.owner or "customers" in d.name:
            facets["tags"] = facet("1-0-0/TagsDatasetFacet", tags=[
                {"key": "sensitivity", "value": "confidential", "source": "demo"},
                {"key": "pii", "value": "true", "source": "demo", "field": d.fields[-1][0]}])
        if d.symlink:
            facets["symlinks"] = facet("1-0-1/SymlinksDatasetFacet", identifiers=[
                {"namespace": d.symlink[0], "name": d.symlink[1], "type": "TABLE"}])
        return facets

    def _quality(self, d: _Dataset) -> dict[str, Any]:
        rng = self.rng
        spike = rng.random() < 0.05
        columns = {f: {"nullCount": int(d.rows * (0.3 if spike and k == 1 else rng.random() * 0.02)),
                       "distinctCount": rng.randint(1, max(1, d.rows))} for k, (f, _) in enumerate(d.fields)}
        assertions = [{"assertion": "not_null", "success": rng.random() > 0.05, "column": d.fields[0][0]},
                      {"assertion": "row_count_above_zero", "success": d.rows > 0}]
        return {"dataQualityMetrics": facet("1-0-3/DataQualityMetricsInputDatasetFacet", rowCount=d.rows,
                                            bytes=d.rows * 48, columnMetrics=columns),
                "dataQualityAssertions": facet("1-1-0/DataQualityAssertionsDatasetFacet", assertions=assertions)}

    def _column_lineage(self, out: _Dataset, inputs: list[_Dataset]) -> dict[str, Any]:
        rng = self.rng
        fields = {}
        for name, _ in out.fields:
            src = rng.choice(inputs)
            fields[name] = [input_field(src.namespace, src.name, rng.choice(src.fields)[0], rng.choice(DIRECT))]
        dataset = [input_field(inputs[0].namespace, inputs[0].name, inputs[0].fields[0][0], rng.choice(INDIRECT))]
        return column_lineage_facet(fields, dataset)

    def _job_facets(self, job: _Job) -> dict[str, Any]:
        facets: dict[str, Any] = {
            "sourceCodeLocation": facet("1-1-0/SourceCodeLocationJobFacet", type="git",
                                        url=f"https://github.com/acme/pipelines/blob/main/{job.name}.py",
                                        repoUrl="https://github.com/acme/pipelines", path=f"{job.name}.py",
                                        version=job.commit, branch="main"),
            "ownership": facet("1-0-1/OwnershipJobFacet", owners=[{"name": job.owner, "type": "OWNER"}]),
            "documentation": facet("1-1-0/DocumentationJobFacet", description=f"builds {job.outputs[0].name}"),
            "jobType": facet("2-0-4/JobTypeJobFacet", processingType="BATCH", integration="DEMO", jobType="TASK"),
        }
        if job.sql:
            facets["sql"] = facet("1-1-0/SQLJobFacet", query=job.sql)
        return facets

    # -- events -----------------------------------------------------------------------------

    def _tick(self) -> str:
        self.clock += timedelta(milliseconds=self.rng.randint(50, 4000))
        return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def _event(self, event_type: str, run_id: str, job_ns: str, job_name: str, producer: str, *,
               run_facets: dict[str, Any] | None = None, job_facets: dict[str, Any] | None = None,
               inputs: list[dict[str, Any]] | None = None, outputs: list[dict[str, Any]] | None = None
               ) -> dict[str, Any]:
        return {"eventTime": self._tick(), "producer": producer, "schemaURL": f"{SPEC_BASE}#/$defs/RunEvent",
                "eventType": event_type, "run": {"runId": run_id, "facets": run_facets or {}},
                "job": {"namespace": job_ns, "name": job_name, "facets": job_facets or {}},
                "inputs": inputs or [], "outputs": outputs or []}

    def _job_run(self, job: _Job, parent: dict[str, Any] | None) -> Iterator[DemoMessage]:
        rng, run_id = self.rng, self._uuid()
        run_facets: dict[str, Any] = {"nominalTime": facet("1-0-1/NominalTimeRunFacet",
                                                           nominalStartTime=self.clock.isoformat())}
        if parent:
            run_facets["parent"] = parent
        inputs = [{**d.ref(), "facets": {"schema": schema_facet(d.fields)}} for d in job.inputs]
        yield DemoMessage(self._event("START", run_id, job.namespace, job.name, job.producer,
                                      run_facets=run_facets, job_facets=self._job_facets(job), inputs=inputs))
        if rng.random() < 0.3:
            yield DemoMessage(self._event("RUNNING", run_id, job.namespace, job.name, job.producer,
                                          run_facets=run_facets, inputs=inputs))
        roll = rng.random()
        if roll < 0.08:
            facets = {**run_facets, "errorMessage": facet("1-0-1/ErrorMessageRunFacet",
                                                          message="ValueError: upstream file missing",
                                                          programmingLanguage="python",
                                                          stackTrace="Traceback (most recent call last): ...")}
            yield DemoMessage(self._event("FAIL", run_id, job.namespace, job.name, job.producer,
                                          run_facets=facets, inputs=inputs))
            return
        if roll < 0.10:
            yield DemoMessage(self._event("ABORT", run_id, job.namespace, job.name, job.producer,
                                          run_facets=run_facets, inputs=inputs))
            return
        for d in job.outputs:  # next version of each output: row counts drift, sometimes drop
            d.rows = max(0, int(d.rows * (0.3 if rng.random() < 0.03 else rng.uniform(0.98, 1.08))))
        done_inputs = [{**d.ref(), "inputFacets": self._quality(d)} for d in job.inputs]
        outputs = [{**d.ref(), "facets": {**self._dataset_facets(d), "columnLineage": self._column_lineage(d, job.inputs)},
                    "outputFacets": {"outputStatistics": facet("1-0-2/OutputStatisticsOutputDatasetFacet",
                                                               rowCount=d.rows, size=d.rows * 52)}}
                   for d in job.outputs]
        yield DemoMessage(self._event("COMPLETE", run_id, job.namespace, job.name, job.producer,
                                      run_facets=run_facets, inputs=done_inputs, outputs=outputs))

    def _dag_run(self) -> Iterator[DemoMessage]:
        rng, run_id = self.rng, self._uuid()
        dag = rng.choice(self.orchestrators)
        producer = PRODUCERS[0]
        yield DemoMessage(self._event("START", run_id, "airflow-prod", dag, producer))
        parent = parent_run_facet(run_id, "airflow-prod", dag, root_run_id=run_id, root_namespace="airflow-prod",
                                  root_name=dag)
        for job in rng.sample(self.jobs, rng.randint(2, 4)):
            yield from self._job_run(job, parent)
        yield DemoMessage(self._event("COMPLETE", run_id, "airflow-prod", dag, producer))

    def _evo_run(self) -> Iterator[DemoMessage]:
        """A compute task creating 1-3 geoscience objects: one Evo document per object."""
        rng, run_id = self.rng, self._uuid()
        job_name = f"parsers.{rng.choice(('dxf', 'omf', 'csv'))}:v1.{rng.randint(0, 9)}.0"
        inputs = [{"namespace": EVO_NAMESPACE, "name": f"{self._uuid()}:{rng.getrandbits(60)}"}
                  for _ in range(rng.randint(1, 2))]
        objects = [{"namespace": EVO_NAMESPACE, "name": f"{self._uuid()}:{rng.getrandbits(60)}",
                    "facets": {"schema": schema_facet([("x", "double"), ("y", "double"), ("z", "double")])}}
                   for _ in range(rng.randint(1, 3))]
        start = self._event("START", run_id, "evocompute", job_name, PRODUCER, inputs=inputs)
        yield DemoMessage(start, kind="evo-start-internal")
        complete = self._event("COMPLETE", run_id, "evocompute", job_name, PRODUCER, inputs=inputs)
        for obj in objects:
            own = {**obj, "name": "$self"}
            events = [{**start, "outputs": [own]}, {**complete, "outputs": [own]}]
            subject = {"namespace": str(obj["namespace"]), "name": str(obj["name"])}
            yield DemoMessage({"events": events, "self_link": "/events/1/outputs/0"}, subject, "evo")

    def _script(self) -> Iterator[DemoMessage]:
        roll = self.rng.random()
        if roll < self.evo_share:
            return (m for m in self._evo_run() if m.kind != "evo-start-internal")
        if roll < self.evo_share + 0.15:
            return self._dag_run()
        return self._job_run(self.rng.choice(self.jobs), None)

    def messages(self) -> Iterator[DemoMessage]:
        """Endless messages: interleaved runs, with duplicates and late events mixed in."""
        rng = self.rng
        active: list[Iterator[DemoMessage]] = []
        recent: deque[DemoMessage] = deque(maxlen=200)
        held: list[tuple[int, DemoMessage]] = []
        index = 0
        while True:
            if held and held[0][0] <= index:
                _, late = held.pop(0)
                index += 1
                yield DemoMessage(late.value, late.subject, "late")
                continue
            if recent and rng.random() < self.duplicate_rate:
                original = rng.choice(recent)
                index += 1
                yield DemoMessage(original.value, original.subject, "duplicate")
                continue
            if len(active) < self.max_active and (not active or rng.random() < 0.35):
                active.append(self._script())
            script = rng.choice(active)
            message = next(script, None)
            if message is None:
                active.remove(script)
                continue
            if message.subject is None and rng.random() < self.late_rate:
                held.append((index + rng.randint(5, 100), message))
                held.sort(key=lambda h: h[0])
                continue
            recent.append(message)
            index += 1
            yield message

    def take(self, n: int) -> list[DemoMessage]:
        """The first ``n`` messages."""
        out = []
        for message in self.messages():
            out.append(message)
            if len(out) >= n:
                return out
        return out


def publish_message(emitter: Any, message: DemoMessage) -> int:
    """Publish one demo message; returns the number of events it carried."""
    if message.subject is not None:
        from .evo import publish_document

        publish_document(emitter, message.value, message.subject)
        return len(message.value["events"])
    emitter.emit(message.value)
    return 1


def publish_demo(emitter: Any, *, rate: float = 100.0, duration_seconds: float | None = None,
                 max_messages: int | None = None, seed: int = 0, start_time: datetime | None = None,
                 stop: threading.Event | None = None, on_progress: Callable[[DemoStats], None] | None = None,
                 progress_every_seconds: float = 1.0, burst_seconds: float = 0.0) -> DemoStats:
    """Publish demo traffic at ``rate`` messages/s (0: as fast as possible) until ``duration_seconds``,
    ``max_messages`` or ``stop`` is set; flushes at the end (DeliveryError if anything failed).

    Pacing: message ``i`` is sent no earlier than ``t0 + i / rate``; with ``burst_seconds``, in bursts of
    ``rate * burst_seconds`` messages (at least one), burst ``k`` no earlier than ``t0 + k * burst_seconds``: the same
    rate, in a few record batches per partition per burst (``lineage.embedded.broker.DEMO_BURST_SECONDS``).
    """
    per_burst = max(1, round(rate * burst_seconds)) if rate > 0 and burst_seconds > 0 else 0
    traffic = DemoTraffic(seed, start_time=start_time or datetime.now(UTC))
    stats = DemoStats()
    t0 = last_progress = time.monotonic()
    for message in traffic.messages():
        now = time.monotonic()
        if (stop is not None and stop.is_set()) or (duration_seconds is not None and now - t0 >= duration_seconds):
            break
        if max_messages is not None and stats.messages >= max_messages:
            break
        if rate > 0:
            due = t0 + (stats.messages // per_burst * burst_seconds if per_burst else stats.messages / rate)
            while due > now:
                emitter.poll(min(due - now, 0.2))
                now = time.monotonic()
                if stop is not None and stop.is_set():
                    break
        stats.events += publish_message(emitter, message)
        stats.messages += 1
        stats.kinds[message.kind] = stats.kinds.get(message.kind, 0) + 1
        if now - last_progress >= progress_every_seconds:
            if getattr(emitter, "failed", 0):
                emitter.flush()  # raises DeliveryError now rather than at the end
            stats.seconds = now - t0
            if on_progress:
                on_progress(stats)
            last_progress = now
    emitter.flush()
    stats.seconds = time.monotonic() - t0
    if on_progress:
        on_progress(stats)
    return stats
