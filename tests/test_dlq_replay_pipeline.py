"""A fixable rejection end to end: DLQ, fix the cause, `lineage dlq replay`, the graph holds the events once.

The cause is the issue's example: Confluent-framed Avro whose schema id the registry does not know
yet (the producer's schema is registered late). The registry is a minimal HTTP test server playing
the external Confluent Schema Registry (``GET /schemas/ids/{id}``, what the processor's client calls);
Kafka, Spark and PostgreSQL are the real ones. The processor (the real query, ``--registry-url``)
rejects those messages to the DLQ with ``decode.unknown_schema_id``; once the schema is registered,
``lineage dlq replay --reason decode.unknown_schema_id`` re-submits them, they land in
lineage_events exactly once, and a second replay adds nothing.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

from schemas.avro import ENVELOPE, latest
from schemas.codec import encode_confluent, encode_single_object
from stream_processor.testing import StreamHarness, produce, run_event, test_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATE_SCHEMA_ID = 42


class _SchemaRegistry:
    """``GET /schemas/ids/{id}`` of a Confluent Schema Registry; schemas appear when :meth:`add` is called."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.lookups = 0
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                registry.lookups += 1
                parts = self.path.split("?")[0].strip("/").split("/")
                sid = int(parts[2]) if len(parts) == 3 and parts[:2] == ["schemas", "ids"] else -1
                if sid in registry.schemas:
                    status, body = 200, {"schema": registry.schemas[sid], "schemaType": "AVRO"}
                else:
                    status, body = 404, {"error_code": 40403, "message": f"Schema {sid} not found"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, schema_id: int, schema: str) -> None:
        self.schemas[schema_id] = schema

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _lineage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lineage", *args], capture_output=True, text=True, timeout=120)


def _events(dsn: str) -> tuple[int, int, set[str]]:
    with psycopg.connect(dsn) as conn:
        total, distinct = conn.execute("SELECT count(*), count(DISTINCT event_hash) FROM lineage_events").fetchone()
        jobs = {r[0] for r in conn.execute("SELECT job_name FROM lineage_events")}
    return int(total), int(distinct), jobs


def _dlq(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    result = _lineage("dlq", "list", "--json", "--bootstrap-servers", bootstrap, "--topic-dlq", topic)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_late_schema_dlq_replay_lands_exactly_once(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    registry = _SchemaRegistry()
    late = [run_event(job=f"late{i}") for i in range(12)]
    good = [run_event(job=f"good{i}") for i in range(8)]
    produce(kafka_bootstrap, topic_names["events"],
            [encode_confluent(e, LATE_SCHEMA_ID) for e in late] + [encode_single_object(e) for e in good])
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), registry_url=registry.url)
    base = ["--bootstrap-servers", kafka_bootstrap, "--topic-dlq", topic_names["dlq"]]
    try:
        with StreamHarness(spark, settings) as harness:
            harness.drain(extra_batches=1)
            assert _events(pg_dsn) == (8, 8, {f"good{i}" for i in range(8)})
            assert registry.lookups > 0, "the processor never asked the registry"
            rejected = _dlq(kafka_bootstrap, topic_names["dlq"])
            assert sorted(r["error_code"] for r in rejected) == ["decode.unknown_schema_id"] * 12
            assert all(str(LATE_SCHEMA_ID) in r["message"] for r in rejected)
            assert harness.total("rejected") == 12

            registry.add(LATE_SCHEMA_ID, latest(ENVELOPE).json)  # the cause is fixed: the schema is registered
            replay = _lineage("dlq", "replay", *base, "--topic-events", topic_names["events"],
                              "--reason", "decode.unknown_schema_id")
            assert replay.returncode == 0, replay.stderr
            assert "replayed 12 message(s)" in replay.stdout
            harness.drain(extra_batches=1)
            expected = {f"good{i}" for i in range(8)} | {f"late{i}" for i in range(12)}
            assert _events(pg_dsn) == (20, 20, expected)
            assert len(_dlq(kafka_bootstrap, topic_names["dlq"])) == 12, "a replayed message was rejected again"

            again = _lineage("dlq", "replay", *base, "--topic-events", topic_names["events"])
            assert again.returncode == 0, again.stderr
            assert "replayed 12 message(s)" in again.stdout
            harness.drain(extra_batches=1)
            assert _events(pg_dsn) == (20, 20, expected), "the second replay added events"
            assert len(_dlq(kafka_bootstrap, topic_names["dlq"])) == 12
    finally:
        registry.stop()
