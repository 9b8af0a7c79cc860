"""A real Prometheus scrapes a real running pipeline; every dashboard query and alert rule is evaluated.

The processor runs as `python -m lineage process` (a subprocess, as users run it) against the
embedded broker and PostgreSQL; traffic includes good events, duplicates and garbage so that the
reject and duplicate series exist. Prometheus (Debian's package) scrapes it every second with the
shipped alert rules loaded; each panel's PromQL and each rule's expression is then evaluated through
Prometheus' HTTP API: it must evaluate without error, and the metrics it selects must have series.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from lineage.embedded.ports import free_port
from tests.prometheus_server import PrometheusServer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run_event(run_id: str, event_type: str, minute: int) -> dict:
    return {
        "eventType": event_type,
        "eventTime": f"2026-11-20T10:{minute:02d}:00+00:00",
        "run": {"runId": run_id, "facets": {}},
        "job": {"namespace": "ops-test", "name": f"job_{minute % 5}", "facets": {}},
        "inputs": [{"namespace": "postgres://db:5432", "name": f"public.src_{minute % 7}"}],
        "outputs": [{"namespace": "postgres://db:5432", "name": f"public.dst_{minute % 5}"}],
        "producer": "https://example.com/ops-test",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }


def _produce_traffic(bootstrap: str, topic: str) -> None:
    from schemas.codec import encode_json, encode_single_object

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(60):
        event = _run_event(str(uuid.uuid4()), "COMPLETE" if i % 2 else "START", i % 60)
        value = encode_single_object(event) if i % 3 else encode_json(event)
        producer.produce(topic, value=value)
        if i % 10 == 0:
            producer.produce(topic, value=value)  # an exact duplicate
    for garbage in (b"\x00\x01garbage", b"{not json", b"\xc3\x01" + b"\xff" * 8 + b"trunc", b'{"eventType": "START"}'):
        producer.produce(topic, value=garbage)
    assert producer.flush(30) == 0


@pytest.fixture
def running_processor(kafka_bootstrap: str, topic_names: dict[str, str], pg_dsn: str, tmp_path: Path):
    port = free_port()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    log = open(tmp_path / "processor.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "lineage", "process", "--bootstrap-servers", kafka_bootstrap,
         "--postgres-dsn", pg_dsn, "--parquet-dir", str(tmp_path / "parquet"),
         "--checkpoint-dir", str(tmp_path / "checkpoints"), "--metrics-port", str(port),
         "--topic-events", topic_names["events"], "--topic-enriched", topic_names["enriched"],
         "--topic-graph", topic_names["graph"], "--topic-dlq", topic_names["dlq"],
         "--trigger-interval-seconds", "1"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True,
    )
    try:
        yield port, proc, tmp_path / "processor.log"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_prometheus_evaluates_dashboard_and_alerts(kafka_bootstrap, topic_names, running_processor, tmp_path):
    port, proc, log_path = running_processor
    _produce_traffic(kafka_bootstrap, topic_names["events"])
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{port}"]).start()
    try:
        try:
            prometheus.wait_for_series("lineage_batches_committed_total > 0", timeout=240)
        except AssertionError:
            raise AssertionError(f"the processor committed no batch; exit={proc.poll()} log tail:\n"
                                 + log_path.read_text(errors="replace")[-4000:]) from None
        rejected = prometheus.wait_for_series("sum(lineage_events_rejected_total)", timeout=60)
        assert float(rejected[0]["value"][1]) >= 4

        dashboard = json.loads((ROOT / "ops/grafana/dashboards/lineage-pipeline.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                series = prometheus.wait_for_series(target["expr"], timeout=60)
                assert series, panel["title"]

        rules = yaml.safe_load((ROOT / "ops/prometheus/alerts.yml").read_text())
        for rule in (r for g in rules["groups"] for r in g["rules"]):
            prometheus.query(rule["expr"])  # evaluates without error (raises on a bad expression)
            for metric in set(re.findall(r"\b(lineage_[a-z_]+|up)\b", rule["expr"])):
                selector = f'{metric}{{job="lineage-processor"}}' if metric == "up" else metric
                assert prometheus.wait_for_series(selector, timeout=30), f"{rule['alert']}: no series for {metric}"
        loaded = prometheus.api("rules")["groups"][0]["rules"]
        assert {r["name"] for r in loaded} == {r["alert"] for g in rules["groups"] for r in g["rules"]}
        assert all(r["health"] == "ok" for r in loaded), [(r["name"], r.get("lastError")) for r in loaded]
    finally:
        prometheus.stop()
    assert proc.poll() is None, "the processor died during the test"
