"""`lineage dlq list|replay` against the real broker, with dead-letter records as the processor writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from lineage.topic_reader import read_topic
from schemas.codec import encode_record

pytestmark = pytest.mark.integration


def _dead_letter(offset: int, code: str, value: bytes, failed_at: datetime) -> bytes:
    return encode_record("dead_letter", {
        "key": b"run:ns/job", "value": value, "headers": [{"key": "lineage.subject", "value": b'{"namespace":"n","name":"o"}'}],
        "topic": "openlineage.events", "partition": 1, "offset": offset,
        "error_class": "EventValidationError", "error_code": code, "message": f"bad thing at {offset}",
        "field": "eventTime" if code.startswith("validation") else None, "failed_at": failed_at,
    })


@pytest.fixture
def dlq_with_records(kafka_bootstrap: str, topic_names: dict[str, str]) -> dict[str, str]:
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic_names["dlq"], _dead_letter(7, "validation.event_time", b'{"a": 1}',
                                                     datetime(2026, 11, 1, tzinfo=UTC)))
    producer.produce(topic_names["dlq"], _dead_letter(8, "decode.json", b"{not json",
                                                     datetime(2026, 11, 20, tzinfo=UTC)))
    producer.produce(topic_names["dlq"], b"\x00\x01 not a dead letter")
    assert producer.flush(30) == 0
    return topic_names


def _lineage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lineage", *args], capture_output=True, text=True, timeout=120)


def test_dlq_list_shows_reasons_and_filters(kafka_bootstrap: str, dlq_with_records: dict[str, str]) -> None:
    base = ["dlq", "list", "--bootstrap-servers", kafka_bootstrap, "--topic-dlq", dlq_with_records["dlq"]]
    result = _lineage(*base, "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["error_code"] for r in records) == ["decode.json", "dlq.unreadable", "validation.event_time"]
    validation = next(r for r in records if r["error_code"] == "validation.event_time")
    assert validation["field"] == "eventTime" and validation["offset"] == 7

    only_decode = _lineage(*base, "--reason", "decode")
    assert only_decode.returncode == 0
    assert "decode.json" in only_decode.stdout and "validation.event_time" not in only_decode.stdout
    assert "1 rejected message(s): decode.json 1" in only_decode.stderr

    recent = _lineage(*base, "--since", "2026-11-10T00:00:00Z", "--json")
    assert [json.loads(line)["offset"] for line in recent.stdout.splitlines()] == [8]

    bad_since = _lineage(*base, "--since", "last tuesday")
    assert bad_since.returncode == 2 and "--since" in bad_since.stderr


def test_dlq_replay_resubmits_original_bytes(kafka_bootstrap: str, dlq_with_records: dict[str, str]) -> None:
    result = _lineage("dlq", "replay", "--bootstrap-servers", kafka_bootstrap, "--topic-dlq", dlq_with_records["dlq"],
                      "--topic-events", dlq_with_records["events"], "--reason", "validation")
    assert result.returncode == 0, result.stderr
    assert "replayed 1 message(s)" in result.stdout
    replayed = list(read_topic(kafka_bootstrap, dlq_with_records["events"]))
    assert len(replayed) == 1
    msg = replayed[0]
    assert msg.value() == b'{"a": 1}' and msg.key() == b"run:ns/job"
    headers = dict(msg.headers())
    assert headers["lineage.subject"] == b'{"namespace":"n","name":"o"}'
    assert headers["lineage.replayed_from"].decode().startswith(dlq_with_records["dlq"] + "[")
