"""Real producers' events through the official OpenLineage client's Kafka transport into the running stream.

The corpus of tests/fixtures/openlineage/integrations (Spark, dbt, Flink, Hive, Airflow; see
tests/test_real_producers.py) is emitted with ``openlineage.client.OpenLineageClient`` and its own
``KafkaTransport`` (JSON values, the client's message keys) to the input topic of the real query. Every event
must reach the graph, none the dead-letter topic, and the graph must be the one ``lineage load`` builds from
the same events: the stream and the batch path are one set of semantics.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from stream_processor.testing import StreamHarness, test_settings
from tests.test_real_producers import VALID_EVENTS, Graph, _graph_tables, client_event, graph  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def typed_client_event(event: dict[str, Any]) -> Any:
    """:func:`client_event` with the parent run facet as the client's own class: its Kafka transport reads the
    parent job from it for the message key, as a real integration's typed facet gives it."""
    from openlineage.client.facet_v2 import parent_run

    out = client_event(event)
    parent = (event["run"].get("facets") or {}).get("parent")
    if parent and "runId" in (parent.get("run") or {}):
        root = parent.get("root")
        out.run.facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent["run"]["runId"]),
            job=parent_run.Job(namespace=parent["job"]["namespace"], name=parent["job"]["name"]),
            root=parent_run.Root(run=parent_run.RootRun(runId=root["run"]["runId"]),
                                 job=parent_run.RootJob(namespace=root["job"]["namespace"], name=root["job"]["name"]))
            if root else None,
            producer=parent.get("_producer") or event["producer"])
    return out


def test_official_kafka_transport_into_the_stream(spark: Any, kafka_bootstrap: str, topic_names: dict[str, str],
                                                  pg_server: Any, graph: Graph, tmp_path: Any) -> None:  # noqa: F811
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.kafka import KafkaConfig, KafkaTransport

    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    def client(message_key: str | None = None) -> Any:
        return OpenLineageClient(transport=KafkaTransport(KafkaConfig(
            config={"bootstrap.servers": kafka_bootstrap}, topic=topic_names["events"], messageKey=message_key)))

    keyed, fixed_key = client(), client("run:spark/parent-without-run")
    # standard facets of the corpus that break their schema (templates' partial facets, the proxy's negative
    # fixtures) are dropped and dead-lettered as validation.facet: as many records as the validator finds
    from openlineage.client.serde import Serde

    from schemas.validate import validate_openlineage_event
    dropped = sum(len(validate_openlineage_event(json.loads(Serde.to_json(typed_client_event(copy.deepcopy(
        item.event))))).facet_violations) for item in VALID_EVENTS)
    assert dropped > 0
    settings = test_settings(kafka_bootstrap, topic_names, dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        for item in VALID_EVENTS:
            # Spark's parent facets without a run (its CLI and serde fixtures) are no ParentRunFacet the Python
            # client can build, and its key function reads only typed facets: those go with a fixed key
            parent = (item.event["run"].get("facets") or {}).get("parent")
            untyped = parent and "runId" not in (parent.get("run") or {})     # also the proxy's invalid parent
            (fixed_key if untyped else keyed).emit(typed_client_event(copy.deepcopy(item.event)))
        h.drain()
        assert h.total("rejected") == dropped
        assert h.total("consumed") == len(VALID_EVENTS)
    streamed = Graph(dsn)
    assert streamed.value("SELECT count(*) FROM lineage_events") == len(VALID_EVENTS)
    # the producers' own names arrive untouched (the client adds a tags facet, nothing else of the graph changes)
    assert {r["producer"] for r in streamed.rows("SELECT DISTINCT producer FROM lineage_events")} \
        == {r["producer"] for r in graph.rows("SELECT DISTINCT producer FROM lineage_events")}
    assert _graph_tables(streamed) == _graph_tables(graph)
