"""End to end through the HTTP front door: the official OpenLineage client's HTTP transport (gzip, API key)
posts to the real server, the real stream processes the topic into PostgreSQL, and ``marquez-python``
reads the graph back through the Marquez-compatible API."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from tests.conftest import assert_eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "marquez-test-key"
NS = "postgres://warehouse:5432"   # a namespace with ':' and '/', as real ones are
JOB_NS = "airflow-prod"


def _events() -> list[Any]:
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import column_lineage_dataset as cl
    from openlineage.client.facet_v2 import (
        datasource_dataset,
        documentation_dataset,
        documentation_job,
        sql_job,
    )
    from openlineage.client.facet_v2 import nominal_time_run as nt
    from openlineage.client.facet_v2 import schema_dataset as sd

    start = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)
    schema = sd.SchemaDatasetFacet(fields=[sd.SchemaDatasetFacetFields(name="id", type="bigint"),
                                           sd.SchemaDatasetFacetFields(name="amount", type="decimal(18,2)")])
    lineage = cl.ColumnLineageDatasetFacet(fields={
        "id": cl.Fields(inputFields=[cl.InputField(NS, "raw.orders", "order_id")]),
        "amount": cl.Fields(inputFields=[cl.InputField(NS, "raw.orders", "total")]),
    })
    events = []
    for i, (job, inp, out) in enumerate([("load_orders", "raw.orders", "staging/orders"),
                                         ("build_revenue", "staging/orders", "mart.revenue")]):
        t = start + timedelta(hours=i)
        # facets as producers spread them: some on the START only (dataSource, nominalTime, documentation of
        # the job), the rest on the COMPLETE; Marquez answers each as the latest event gave it
        started = Run(runId=(run_id := str(uuid.uuid4())), facets={
            "nominalTime": nt.NominalTimeRunFacet(nominalStartTime=t.isoformat())})
        source = {"dataSource": datasource_dataset.DatasourceDatasetFacet(name="warehouse", uri=NS)}
        facets = {"schema": schema, "columnLineage": lineage,
                  "documentation": documentation_dataset.DocumentationDatasetFacet(description="orders, cleaned")
                  } if i == 0 else {"schema": schema}
        events.append(RunEvent(eventType=RunState.START, eventTime=t.isoformat(), run=started,
                               job=Job(namespace=JOB_NS, name=job, facets={
                                   "documentation": documentation_job.DocumentationJobFacet(description=f"{job} job")}),
                               producer="https://example.com/test",
                               inputs=[InputDataset(NS, inp)], outputs=[OutputDataset(NS, out, facets=source)]))
        events.append(RunEvent(eventType=RunState.COMPLETE, eventTime=(t + timedelta(minutes=5)).isoformat(),
                               run=Run(runId=run_id), producer="https://example.com/test",
                               job=Job(namespace=JOB_NS, name=job, facets={
                                   "sql": sql_job.SQLJobFacet(query=f"INSERT INTO {out} SELECT * FROM {inp}")}),
                               inputs=[InputDataset(NS, inp)], outputs=[OutputDataset(NS, out, facets=facets)]))
    return events


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, pg_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server on a processed graph: events sent by the OpenLineage client, then `lineage process --available-now`."""
    from openlineage.client import OpenLineageClient

    from api.settings import ApiSettings
    from api.testing import running_server
    from lineage.embedded.broker import create_topics
    from stream_processor.testing import process_command

    suffix = uuid.uuid4().hex[:10]
    topics = {k: f"m{suffix}.{k}" for k in ("events", "enriched", "graph", "dlq")}
    create_topics(kafka_bootstrap, topics.values(), partitions=3)
    dsn = pg_server.create_database(f"m_{suffix}")
    work = tmp_path_factory.mktemp("marquez")
    settings = ApiSettings(postgres_dsn=dsn, bootstrap_servers=kafka_bootstrap, topic_events=topics["events"],
                           topic_dlq=topics["dlq"], api_keys=[KEY], read_requires_key=True)
    with running_server(settings) as url:
        client = OpenLineageClient(config={"transport": {
            "type": "http", "url": url, "compression": "gzip", "auth": {"type": "api_key", "apiKey": KEY}}})
        for event in _events():
            client.emit(event)
        client.close()
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        done = subprocess.run(process_command(kafka_bootstrap, topics, dsn, work, "--available-now"),
                              capture_output=True, text=True, env=env, timeout=400)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield url


def _client(url: str) -> Any:
    from marquez_client import MarquezClient

    return MarquezClient(url, api_key=KEY)


def test_openlineage_http_client_events_reach_the_graph(stack: str) -> None:
    events = requests.get(f"{stack}/api/v1/events/lineage", params={"sortDirection": "asc"},
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()
    assert events["totalCount"] == 4
    assert [(e["job"]["name"], e["eventType"]) for e in events["events"]] == [
        ("load_orders", "START"), ("load_orders", "COMPLETE"), ("build_revenue", "START"), ("build_revenue", "COMPLETE")]
    assert requests.get(f"{stack}/api/v1/namespaces", timeout=10).status_code == 401  # reads need the key here


def test_marquez_python_reads_namespaces_datasets_jobs_and_runs(stack: str) -> None:
    client = _client(stack)
    names = {n["name"] for n in client.list_namespaces()["namespaces"]}
    assert {NS, JOB_NS} <= names
    assert client.get_namespace(NS)["name"] == NS

    datasets = client.list_datasets(NS)
    assert {d["name"] for d in datasets["datasets"]} == {"raw.orders", "staging/orders", "mart.revenue"}
    orders = client.get_dataset(NS, "staging/orders")
    assert orders["id"] == {"namespace": NS, "name": "staging/orders"}
    assert [(f["name"], f["type"]) for f in orders["fields"]] == [("id", "bigint"), ("amount", "decimal(18,2)")]

    job = client.get_job(JOB_NS, "build_revenue")
    assert job["inputs"] == [{"namespace": NS, "name": "staging/orders"}]
    assert job["outputs"] == [{"namespace": NS, "name": "mart.revenue"}]
    assert job["latestRun"]["state"] == "COMPLETED"
    assert {j["name"] for j in client.list_jobs(JOB_NS)["jobs"]} == {"load_orders", "build_revenue"}

    runs = client.list_job_runs(JOB_NS, "load_orders")["runs"]
    assert len(runs) == 1 and runs[0]["state"] == "COMPLETED" and runs[0]["durationMs"] == 300_000
    run = client.get_job_run(runs[0]["id"])
    assert [v["datasetVersionId"]["name"] for v in run["outputDatasetVersions"]] == ["staging/orders"]
    assert [v["datasetVersionId"]["name"] for v in run["inputDatasetVersions"]] == ["raw.orders"]

    versions = client.list_dataset_versions(NS, "staging/orders")["versions"]
    assert versions, "the written dataset has a version"
    one = client.get_dataset_version(NS, "staging/orders", versions[0]["version"])
    assert one["id"]["version"] == versions[0]["version"]
    assert len(client.list_events()["events"]) == 4


def test_marquez_python_reads_facets_as_the_latest_events_gave_them(stack: str) -> None:
    client = _client(stack)
    orders = client.get_dataset(NS, "staging/orders")
    facets = orders["facets"]
    assert {"schema", "columnLineage", "documentation", "dataSource"} <= set(facets)
    assert [(f["name"], f["type"]) for f in facets["schema"]["fields"]] == [("id", "bigint"),
                                                                           ("amount", "decimal(18,2)")]
    assert facets["documentation"]["description"] == "orders, cleaned"
    assert facets["dataSource"]["name"] == "warehouse"                  # given by the START only
    assert facets["schema"]["_producer"] and facets["schema"]["_schemaURL"].endswith("SchemaDatasetFacet")
    listed = {d["name"]: d["facets"] for d in client.list_datasets(NS)["datasets"]}
    assert listed["staging/orders"] == facets
    assert set(listed["mart.revenue"]) == {"schema", "dataSource"} and listed["raw.orders"] == {}
    version = client.list_dataset_versions(NS, "staging/orders")["versions"][0]
    assert version["facets"]["documentation"]["description"] == "orders, cleaned"
    assert client.get_dataset_version(NS, "staging/orders", version["version"])["facets"] == version["facets"]

    job = client.get_job(JOB_NS, "build_revenue")
    assert job["facets"]["documentation"]["description"] == "build_revenue job"
    assert job["facets"]["sql"]["query"] == "INSERT INTO mart.revenue SELECT * FROM staging/orders"
    run = client.list_job_runs(JOB_NS, "load_orders")["runs"][0]
    assert run["facets"]["nominalTime"]["nominalStartTime"].startswith("2026-11-01T06:00")
    assert client.get_job_run(run["id"])["facets"] == run["facets"]
    assert job["latestRun"]["facets"]["nominalTime"]["nominalStartTime"].startswith("2026-11-01T07:00")


def test_marquez_lineage_graph_and_column_lineage(stack: str) -> None:
    graph = requests.get(f"{stack}/api/v1/lineage", params={"nodeId": f"dataset:{NS}:staging/orders", "depth": 3},
                         headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()["graph"]
    by_id = {n["id"]: n for n in graph}
    assert set(by_id) == {f"dataset:{NS}:raw.orders", f"job:{JOB_NS}:load_orders", f"dataset:{NS}:staging/orders",
                          f"job:{JOB_NS}:build_revenue", f"dataset:{NS}:mart.revenue"}
    node = by_id[f"dataset:{NS}:staging/orders"]
    assert node["type"] == "DATASET" and node["data"]["name"] == "staging/orders"
    assert node["inEdges"] == [{"origin": f"job:{JOB_NS}:load_orders", "destination": f"dataset:{NS}:staging/orders"}]
    assert node["outEdges"] == [{"origin": f"dataset:{NS}:staging/orders", "destination": f"job:{JOB_NS}:build_revenue"}]

    columns = _client(stack).get_column_lineage_by_dataset_field(NS, "staging/orders", "amount")["graph"]
    by_id = {n["id"]: n for n in columns}
    target = by_id[f"datasetField:{NS}:staging/orders:amount"]
    assert target["data"]["fieldType"] == "decimal(18,2)"
    assert [(f["dataset"], f["field"]) for f in target["data"]["inputFields"]] == [("raw.orders", "total")]
    assert f"datasetField:{NS}:raw.orders:total" in by_id

    missing = requests.get(f"{stack}/api/v1/namespaces/{requests.utils.quote(NS, safe='')}/datasets/nope",
                           headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert missing.status_code == 404
    assert_eventually(lambda: requests.get(f"{stack}/healthz", timeout=10).status_code == 200, timeout=10)


def test_facets_newest_event_wins_deleted_facets_go_and_aliases_and_job_events_count(pg_server, tmp_path) -> None:
    """Without the broker: events loaded by `lineage load`, read back through marquez-python."""
    import json

    from api.testing import running_server
    from lineage.cli import main
    from tests.test_api_graph import settings_for
    from tests.test_derive import based, ds, run_event

    spec = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/"
    doc = {"namespace": "pg", "name": "docs.t"}

    def dataset_event(time: str, facets: dict) -> dict:
        return {"eventTime": time, "producer": "https://example.com/p", "schemaURL": spec + "DatasetEvent",
                "dataset": {**doc, "facets": based(facets)}}

    physical = ds("warehouse/orders", "s3://bucket", fields=["id"], symlinks={"identifiers": [
        {"namespace": "hive://metastore", "name": "db.orders", "type": "TABLE"}]})
    events = [
        dataset_event("2026-01-01T00:00:00Z", {"documentation": {"description": "first"},
                                               "ownership": {"owners": [{"name": "team:a"}]}}),
        run_event("COMPLETE", "2026-01-02T00:00:00Z", str(uuid.uuid4()), job="write_t", inputs=[physical],
                  outputs=[ds("docs.t", "pg", fields=["a", "b"], documentation={"description": "second"})]),
        dataset_event("2026-01-03T00:00:00Z", {"documentation": {"_deleted": True}}),
        {"eventTime": "2026-01-04T00:00:00Z", "producer": "https://example.com/scanner", "schemaURL": spec + "JobEvent",
         "job": {"namespace": "scanner", "name": "ddl.sql", "facets": {}}, "inputs": [],
         "outputs": [ds("declared.t", "pg", fields=["x"])]},
    ]
    for i, event in enumerate(events):
        (tmp_path / f"{i}.json").write_text(json.dumps(event), encoding="utf-8")
    dsn = pg_server.create_database(f"f_{uuid.uuid4().hex[:12]}")
    assert main(["load", str(tmp_path), "--postgres-dsn", dsn, "--engine", "local"]) == 0
    from marquez_client import MarquezClient

    with running_server(settings_for(dsn)) as url:
        client = MarquezClient(url)
        facets = client.get_dataset("pg", "docs.t")["facets"]
        assert set(facets) == {"ownership", "schema"}       # documentation: "second", then deleted
        assert [f["name"] for f in facets["schema"]["fields"]] == ["a", "b"]
        assert facets["ownership"]["owners"] == [{"name": "team:a"}]
        canonical = client.get_dataset("hive://metastore", "db.orders")["facets"]   # named by its alias
        assert canonical["symlinks"]["identifiers"][0]["name"] == "db.orders" and "schema" in canonical
        declared = client.get_dataset("pg", "declared.t")["facets"]                # a JobEvent's output
        assert [f["name"] for f in declared["schema"]["fields"]] == ["x"]
