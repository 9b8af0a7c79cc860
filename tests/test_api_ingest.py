"""POST /api/v1/lineage against the real broker: acknowledged publishes with the official keys, and hostile bodies."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator

import pytest
import requests

from stream_processor.testing import run_event
from tests.conftest import assert_eventually

pytestmark = pytest.mark.integration

KEY = "s3cret-key"


@pytest.fixture
def server(kafka_bootstrap: str, topic_names: dict[str, str], pg_dsn: str) -> Iterator[str]:
    from api.settings import ApiSettings
    from api.testing import running_server

    settings = ApiSettings(postgres_dsn=pg_dsn, bootstrap_servers=kafka_bootstrap, topic_events=topic_names["events"],
                           topic_dlq=topic_names["dlq"], api_keys=[KEY], max_body_bytes=1_000_000)
    with running_server(settings) as url:
        yield url


def _read(bootstrap: str, topic: str, n: int) -> list[tuple[str | None, dict]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])  # no group join: faster
    out: list[tuple[str | None, dict]] = []
    try:
        def more() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.key().decode() if msg.key() else None, json.loads(msg.value())))
            return len(out) >= n
        assert_eventually(more, timeout=30, interval=0, message=f"{n} messages on {topic}")
    finally:
        consumer.close()
    return out


def _post(url: str, body: bytes, *, key: str | None = KEY, **headers: str) -> requests.Response:
    h = {"Content-Type": "application/json", **headers}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    return requests.post(f"{url}/api/v1/lineage", data=body, headers=h, timeout=30)


def test_single_event_and_batch_are_published_with_the_official_keys(server: str, kafka_bootstrap: str,
                                                                     topic_names: dict[str, str]) -> None:
    from producers.keys import message_key

    single = run_event(job="http_single")
    answer = _post(server, json.dumps(single).encode())
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"index": 0, "status": "accepted", "key": "run:test/http_single"}

    batch = [run_event(job=f"http_batch_{i}") for i in range(3)]
    bad = run_event(job="bad")
    bad["run"]["runId"] = "not-a-uuid"
    answer = _post(server, gzip.compress(json.dumps([*batch, bad]).encode()), **{"Content-Encoding": "gzip"})
    assert answer.status_code == 207, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == ["accepted"] * 3 + ["rejected"]
    assert results[3]["error"]["field"] == "run.runId"

    published = _read(kafka_bootstrap, topic_names["events"], 4)
    assert sorted(published, key=lambda m: m[1]["job"]["name"]) == sorted(
        [(message_key(e), e) for e in [single, *batch]], key=lambda m: m[1]["job"]["name"])


def test_hostile_bodies_get_the_right_status_and_the_server_stays_healthy(server: str) -> None:
    good = json.dumps(run_event()).encode()
    assert _post(server, good, key=None).status_code == 401
    assert _post(server, good, key="wrong").status_code == 403
    assert _post(server, good, **{"Content-Type": "text/plain"}).status_code == 415
    assert _post(server, good, **{"Content-Type": "application/x-www-form-urlencoded"}).status_code == 415
    assert _post(server, good, **{"Content-Encoding": "br"}).status_code == 415

    malformed = _post(server, b'{"eventType": "START",')
    assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["detail"]
    assert _post(server, b"").status_code == 400
    assert _post(server, b"[" * 100_000 + b"]" * 100_000).status_code == 400
    assert _post(server, b"\x1f\x8b garbage", **{"Content-Encoding": "gzip"}).status_code == 400
    assert _post(server, gzip.compress(good)[:-8], **{"Content-Encoding": "gzip"}).status_code == 400

    missing = run_event()
    del missing["producer"]
    answer = _post(server, json.dumps(missing).encode())
    assert answer.status_code == 400 and answer.json()["field"] == "producer"
    assert _post(server, b"[1, 2]").json()["results"][0]["error"]["code"] == "validation.not_an_event"

    bomb = gzip.compress(b" " * 200_000_000, compresslevel=9)  # ~200 kB that inflates to 200 MB
    assert len(bomb) < 1_000_000
    answer = _post(server, bomb, **{"Content-Encoding": "gzip"})
    assert answer.status_code == 413 and "decompressed" in answer.json()["detail"]

    huge = b" " * (50 * 1024 * 1024)
    assert _post(server, huge).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while streaming
        for _ in range(50):
            yield b" " * (1024 * 1024)
    try:
        status = requests.post(f"{server}/api/v1/lineage", data=chunks(), timeout=30,
                               headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
                               ).status_code
    except requests.ConnectionError:
        status = 413  # the server answered and closed while the client was still sending: its answer was 413
    assert status == 413

    assert requests.get(f"{server}/healthz", timeout=10).status_code == 200
    assert _post(server, good).status_code == 201
    big = json.dumps([run_event(job=f"big_{i}") for i in range(800)]).encode()  # > 256 kB: checked off the loop
    assert len(big) > 256 * 1024
    answer = _post(server, big)
    assert answer.status_code == 200 and answer.json()["accepted"] == 800
    metrics = requests.get(f"{server}/metrics", timeout=10).text
    assert 'lineage_http_requests_total{method="POST",route="/api/v1/lineage",status="413"}' in metrics


def test_broker_down_is_503_with_retry_after(pg_dsn: str) -> None:
    from api.settings import ApiSettings
    from api.testing import running_server
    from lineage.embedded.ports import free_port

    settings = ApiSettings(postgres_dsn=pg_dsn, bootstrap_servers=f"127.0.0.1:{free_port()}",
                           delivery_timeout_seconds=3, topic_events="nowhere")
    with running_server(settings) as url:
        answer = _post(url, json.dumps(run_event()).encode(), key=None)
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) > 0
        health = requests.get(f"{url}/healthz", timeout=15)
        assert health.status_code == 503 and health.json()["broker"] == "unreachable"


def test_a_standard_facet_that_breaks_its_schema_is_dropped_reported_and_dead_lettered(
        server: str, kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    from stream_processor.publish import decode_record

    event = run_event(job="facets")
    bad_owner = {"_producer": "https://example.com/p", "_schemaURL":
                 "https://openlineage.io/spec/facets/1-0-1/OwnershipDatasetFacet.json#/$defs/OwnershipDatasetFacet",
                 "owners": "not-a-list"}
    event["outputs"][0]["facets"] = {"ownership": bad_owner}
    answer = _post(server, json.dumps(event).encode())
    assert answer.status_code == 201, answer.text
    dropped = answer.json()["dropped_facets"]
    assert [(d["facet"], d["facet_path"]) for d in dropped] == [("ownership", "outputs[0].facets.ownership")]

    [(key, published)] = _read(kafka_bootstrap, topic_names["events"], 1)
    assert "ownership" not in (published["outputs"][0].get("facets") or {})
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g{uuid.uuid4().hex}"})
    dlq = topic_names["dlq"]
    consumer.assign([TopicPartition(dlq, p, OFFSET_BEGINNING) for p in range(3)])
    try:
        records = []

        def found() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append(decode_record(msg.value())[1])
            return bool(records)
        assert_eventually(found, timeout=30, interval=0, message="dead-letter record")
    finally:
        consumer.close()
    assert records[0]["error_code"] == "validation.facet"
    assert records[0]["field"].startswith("outputs[0].facets.ownership")
    assert records[0]["topic"] == topic_names["events"] and json.loads(records[0]["value"]) == event
    assert key == "run:test/facets"


def test_the_fast_path_and_the_documented_route_answer_alike(server: str, kafka_bootstrap: str,
                                                               topic_names: dict[str, str], pg_dsn: str) -> None:
    """``lineage serve`` answers POST /api/v1/lineage without FastAPI's stack (api.app.LineageApp); with CORS
    configured the documented FastAPI route answers. Both must give the same statuses, bodies and headers."""
    from api.settings import ApiSettings
    from api.testing import running_server

    good = run_event(job="parity_good")
    bad = run_event(job="parity_bad")
    bad["run"]["runId"] = "not-a-uuid"
    cases = [
        (json.dumps(good).encode(), {}),                                   # 201
        (json.dumps(bad).encode(), {}),                                    # 400 naming the field
        (json.dumps([good, bad]).encode(), {}),                            # 207
        (b"{not json", {}),                                                # 400
        (json.dumps(good).encode(), {"Content-Type": "text/plain"}),       # 415
        (b"x" * 1_000_001, {}),                                            # 413
        (json.dumps(good).encode(), {"key": None}),                        # 401 + WWW-Authenticate
        (json.dumps(good).encode(), {"key": "wrong"}),                     # 403
    ]
    settings = ApiSettings(postgres_dsn=pg_dsn, bootstrap_servers=kafka_bootstrap, topic_events=topic_names["events"],
                           topic_dlq=topic_names["dlq"], api_keys=[KEY], max_body_bytes=1_000_000,
                           cors_origins=["http://example.test"])

    def answers(url: str) -> list[tuple[int, object, str | None, str | None]]:
        out = []
        for body, extra in cases:
            extra = dict(extra)
            answer = _post(url, body, key=extra.pop("key", KEY), **extra)
            out.append((answer.status_code, answer.json(), answer.headers.get("www-authenticate"),
                        answer.headers.get("content-type")))
        return out

    fast = answers(server)
    with running_server(settings) as full_stack:
        routed = answers(full_stack)
    assert [a[0] for a in fast] == [201, 400, 207, 400, 415, 413, 401, 403]
    assert fast == routed
