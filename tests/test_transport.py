"""The OpenLineage client transport, configured exactly as a user would, against the real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from schemas.codec import decode_message
from schemas.errors import ConfigurationError
from tests.test_emitter import consume_all

pytestmark = pytest.mark.integration


def _official_event(job_name: str) -> object:
    from openlineage.client import event_v2
    from openlineage.client.facet_v2 import schema_dataset, sql_job

    return event_v2.RunEvent(
        eventTime="2024-05-01T10:00:00.000Z", eventType=event_v2.RunState.COMPLETE,
        run=event_v2.Run(runId=str(uuid.uuid4())),
        job=event_v2.Job(namespace="airflow", name=job_name, facets={"sql": sql_job.SQLJobFacet(query="select 1")}),
        inputs=[event_v2.InputDataset(namespace="pg", name="public.a")],
        outputs=[event_v2.OutputDataset(namespace="pg", name="public.b", facets={
            "schema": schema_dataset.SchemaDatasetFacet(fields=[
                schema_dataset.SchemaDatasetFacetFields(name="id", type="int")])})],
    )


def _check_consumed(bootstrap: str, topic: str, event: object) -> dict:
    from openlineage.client.serde import Serde

    sent = Serde.to_dict(event)
    job_name = sent["job"]["name"]
    messages = consume_all(bootstrap, topic, 1)
    assert len(messages) == 1
    assert messages[0].value()[:2] == b"\xc3\x01"  # Avro single-object encoding
    assert messages[0].key() == f"run:airflow/{job_name}".encode()
    decoded = decode_message(messages[0].value(), messages[0].headers())
    assert len(decoded) == 1 and decoded[0].encoding == "avro"
    doc = decoded[0].document
    assert doc["job"]["facets"]["sql"]["query"] == "select 1"
    assert doc["outputs"] == sent["outputs"] and doc["inputs"] == sent["inputs"]
    assert doc["outputs"][0]["facets"]["schema"]["fields"][0]["name"] == "id"
    assert doc["run"]["runId"] == sent["run"]["runId"] and doc["eventTime"] == sent["eventTime"]
    assert doc["eventType"] == "COMPLETE"
    return doc


def test_client_from_yaml_file_via_openlineage_config(kafka_bootstrap: str, topic_names: dict[str, str],
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openlineage.client import OpenLineageClient

    config = tmp_path / "openlineage.yml"
    config.write_text(
        "transport:\n"
        "  type: producers.transport.LineageKafkaTransport\n"
        f"  bootstrap_servers: {kafka_bootstrap}\n"
        f"  topic: {topic_names['events']}\n"
        "  config:\n"
        "    client.id: yaml-user\n", encoding="utf-8")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    client = OpenLineageClient()
    assert type(client.transport).__name__ == "LineageKafkaTransport"
    event = _official_event("yaml_job")
    client.emit(event)
    client.close()
    _check_consumed(kafka_bootstrap, topic_names["events"], event)


def test_client_from_config_dict_with_short_type(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    from openlineage.client import OpenLineageClient

    import producers.transport  # noqa: F401 - registers the short name `lineage_kafka_avro`

    client = OpenLineageClient(config={"transport": {"type": "lineage_kafka_avro", "bootstrap_servers": kafka_bootstrap,
                                                     "topic": topic_names["events"], "flush": "true"}})
    event = _official_event("dict_job")
    client.emit(event)
    client.close()
    _check_consumed(kafka_bootstrap, topic_names["events"], event)


def test_transport_from_code(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    from openlineage.client import OpenLineageClient

    from producers.transport import LineageKafkaConfig, LineageKafkaTransport

    transport = LineageKafkaTransport(LineageKafkaConfig(bootstrap_servers=kafka_bootstrap,
                                                         topic=topic_names["events"], flush=False))
    client = OpenLineageClient(transport=transport)
    event = _official_event("code_job")
    client.emit(event)
    assert client.close() is True
    _check_consumed(kafka_bootstrap, topic_names["events"], event)


@pytest.mark.unit
def test_bad_transport_config_fails_loudly() -> None:
    from producers.transport import LineageKafkaConfig

    with pytest.raises(ConfigurationError, match="bootstrap_servers"):
        LineageKafkaConfig.from_dict({"type": "lineage_kafka_avro", "topic": "t"})
    with pytest.raises(ConfigurationError, match="unknown key"):
        LineageKafkaConfig.from_dict({"bootstrap_servers": "x:1", "tpoic": "t"})
    config = LineageKafkaConfig.from_dict({"config": {"bootstrap.servers": "h:1", "linger.ms": 5}})
    assert config.bootstrap_servers == "h:1" and config.settings().librdkafka_config()["linger.ms"] == "5"
