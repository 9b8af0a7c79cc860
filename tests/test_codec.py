"""schemas.codec: encoding detection, subjects, Evo lineage documents, and garbage that must be rejected."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from schemas.avro import ENVELOPE, latest
from schemas.codec import (
    SUBJECT_HEADER,
    DecodedMessage,
    decode_message,
    detect_encoding,
    encode_confluent,
    encode_evo_document,
    encode_json,
    encode_record,
    encode_single_object,
    subject_header,
)
from schemas.errors import ConfigurationError, DecodeError, SchemaNotFoundError
from schemas.registry import ConfluentSchemaRegistry, LocalSchemaRegistry, subject_for_topic

RUN_ID = "123e4567-e89b-12d3-a456-426614174000"
NS = "evogeoscienceobject://hub1/b3bfd062-820d-4aa4-9751-bda2f1cd8946/c2be55db-53f0-4032-b57f-dde3ddd678d8"
SUBJECT = {"namespace": NS, "name": "7a1c2c4e-0000-4000-8000-000000000001:1720050462228330999"}


def evo_event(event_type: str = "COMPLETE") -> dict[str, Any]:
    """The seed's example event (seeds/evo-geoscience-object-lineage.md) with an eventTime."""
    return {
        "eventType": event_type,
        "eventTime": "2024-07-04T10:00:00+00:00",
        "job": {"namespace": "evocompute", "name": "parsers.dxf:v1.0.0"},
        "run": {"runId": RUN_ID},
        "inputs": [
            {"namespace": NS, "name": "65e24708-6ce3-4d85-b8a3-abcdb1ced751:1720050462228330567"},
            {"namespace": NS, "name": "5b10a44d-75ee-4a3b-b0ae-61967a35fdc5:1720050462228330272"},
        ],
        "outputs": [{"namespace": NS, "name": "$self"}],
        "producer": "https://github.com/OpenLineage/OpenLineage/blob/v1-0-0/client",
        "schemaURL": "https://github.com/SeequentEvo/evo-schemas/blob/main/schema/components/lineage/1.0.0/"
                     "lineage.schema.json#/$defs/RunEvent",
    }


def subject_hdr(subject: dict[str, str] = SUBJECT) -> list[tuple[str, bytes]]:
    return [subject_header(subject)]


# --------------------------------------------------------------------------- happy paths


@pytest.mark.unit
def test_detect_encoding_from_the_first_bytes() -> None:
    ev = evo_event()
    assert detect_encoding(encode_single_object(ev)) == "avro"
    assert detect_encoding(encode_confluent(ev, 3)) == "confluent"
    assert detect_encoding(encode_json(ev)) == "json"
    assert detect_encoding(b"  \n{") == "json"
    assert detect_encoding(b"\xc3\x02") == "unknown"
    assert detect_encoding(b"") == "unknown"
    assert detect_encoding(b"\x7f") == "unknown"


@pytest.mark.unit
def test_each_encoding_decodes_to_the_event_with_its_name() -> None:
    ev = evo_event()
    registry = LocalSchemaRegistry()
    sid = registry.register_envelope(subject_for_topic("openlineage.events"))
    cases = {"avro": encode_single_object(ev), "confluent": encode_confluent(ev, sid), "json": encode_json(ev)}
    for encoding, value in cases.items():
        [msg] = decode_message(value, registry=registry)
        assert msg == DecodedMessage(ev, encoding, None, None)


@pytest.mark.unit
def test_json_is_utf8_json_as_the_openlineage_kafka_transport_sends_it() -> None:
    ev = evo_event()
    ev["job"]["name"] = "jöb 日本"
    value = encode_json(ev)
    assert json.loads(value.decode("utf-8")) == ev
    assert "jöb 日本".encode() in value


@pytest.mark.unit
def test_what_the_official_openlineage_client_sends_decodes_validates_and_round_trips() -> None:
    import datetime
    import uuid

    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import nominal_time_run, schema_dataset
    from openlineage.client.serde import Serde

    from schemas.validate import validate_event

    run_id = str(uuid.uuid4())
    event = RunEvent(
        eventType=RunState.COMPLETE, eventTime="2026-11-22T15:24:27.049679+01:00",
        run=Run(runId=run_id, facets={"nominalTime": nominal_time_run.NominalTimeRunFacet(
            nominalStartTime=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).isoformat())}),
        job=Job(namespace="ns", name="job"), producer="https://github.com/OpenLineage/OpenLineage/tree/1.0.0/client",
        inputs=[InputDataset("db", "a", facets={"schema": schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name="c", type="int")])})],
        outputs=[OutputDataset("db", "b")],
    )
    value = Serde.to_json(event).encode("utf-8")  # exactly what the client's KafkaTransport.emit sends
    [msg] = decode_message(value)
    assert msg.encoding == "json" and msg.document == json.loads(value)
    out = validate_event(msg.document)
    assert out["eventTime"] == "2026-11-22T14:24:27.049679Z" and out["run"]["runId"] == run_id
    [again] = decode_message(encode_single_object(msg.document))
    assert again.document == msg.document


@pytest.mark.unit
def test_subject_header_wins_over_the_envelope_subject() -> None:
    ev = evo_event()
    inner = {"namespace": "n", "name": "inside"}
    value = encode_single_object(ev, subject=inner, self_link="/events/0/outputs/0")
    [msg] = decode_message(value)
    assert msg.subject == inner and msg.self_link == "/events/0/outputs/0"
    [msg] = decode_message(value, [("other", b"x"), *subject_hdr()])
    assert msg.subject == SUBJECT
    [msg] = decode_message(encode_json(ev), {SUBJECT_HEADER: json.dumps(SUBJECT).encode()})
    assert msg.subject == SUBJECT
    [msg] = decode_message(encode_json(ev), [(SUBJECT_HEADER.encode(), json.dumps(SUBJECT).encode())])
    assert msg.subject == SUBJECT
    [msg] = decode_message(encode_json(ev), [(SUBJECT_HEADER, None)])
    assert msg.subject is None


@pytest.mark.unit
def test_evo_lineage_document_yields_one_message_per_event() -> None:
    events = [evo_event("START"), evo_event("COMPLETE")]
    value = encode_evo_document(events, "/events/1/outputs/0")
    msgs = decode_message(value, subject_hdr())
    assert [m.document for m in msgs] == events
    assert all(m.encoding == "json" and m.subject == SUBJECT for m in msgs)
    assert [m.self_link for m in msgs] == ["/events/1/outputs/0"] * 2
    assert [(m.event_index, m.event_count) for m in msgs] == [(0, 2), (1, 2)]
    assert [(m.self_link.event_index, m.self_link.event_count) for m in msgs] == [(0, 2), (1, 2)]


@pytest.mark.unit
def test_evo_document_wrapped_in_a_lineage_property_is_unpacked() -> None:
    value = json.dumps({"name": "object", "lineage": {"events": [evo_event()], "self_link": "/events/0/outputs/0"}})
    [msg] = decode_message(value.encode())
    assert msg.document == evo_event() and msg.self_link == "/events/0/outputs/0"


@pytest.mark.unit
def test_an_event_with_an_events_key_is_still_an_event() -> None:
    ev = {**evo_event(), "events": [1, 2], "lineage": {"events": [evo_event()]}}
    [msg] = decode_message(encode_json(ev))
    assert msg.document == ev and msg.event_index is None


@pytest.mark.unit
def test_bytearray_and_memoryview_values_decode() -> None:
    value = encode_single_object(evo_event())
    assert decode_message(bytearray(value))[0].document == evo_event()
    assert decode_message(memoryview(value))[0].document == evo_event()


# --------------------------------------------------------------------------- garbage


def _code(value: Any, **kw: Any) -> str:
    with pytest.raises(DecodeError) as info:
        decode_message(value, **kw)
    assert info.value.message  # names the cause
    return info.value.code


@pytest.mark.unit
@pytest.mark.parametrize("value,code", [
    (None, "decode.empty"),
    (b"", "decode.empty"),
    (b"\xc3", "decode.bad_magic"),
    (b"\xc3\x02" + b"\x00" * 20, "decode.bad_magic"),
    (b"\x7fELF\x02\x01", "decode.bad_magic"),
    (b"\xc3\x01\x01\x02", "decode.truncated"),
    (b"\xc3\x01" + b"\xaa" * 8 + b"\x00", "decode.unknown_fingerprint"),
    (b"\x00\x00\x01", "decode.truncated"),
    (b'{"eventType": "START"', "decode.json"),
    (b"[1, 2]", "decode.json"),
    (b'"just a string"', "decode.json"),
    (b"42", "decode.json"),
    (b"null", "decode.json"),
    (b'{"a": "\xff\xfe"}', "decode.utf8"),
    (b"\xef\xbb\xbf[]", "decode.bom"),  # strict JSON (RFC 8259): no byte-order mark
    (b'{"a": NaN}', "decode.json"),
    (b'{"a": -Infinity}', "decode.json"),
    (b"[" * 10_000 + b"]" * 10_000, "decode.too_deep"),
    (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "decode.too_deep"),
    (b'{"events": []}', "decode.document"),
    (b'{"events": [1]}', "decode.document"),
    (b'{"events": [{}], "self_link": 3}', "decode.document"),
    ("a str, not bytes", "decode.type"),
])
def test_garbage_raises_decode_error_with_a_code(value: Any, code: str) -> None:
    assert _code(value) == code


@pytest.mark.unit
def test_truncated_and_corrupted_avro_bodies_are_decode_errors() -> None:
    value = encode_single_object(evo_event(), SUBJECT, "/outputs/0")
    codes = set()
    for cut in range(10, len(value)):
        codes.add(_code(value[:cut]))
    assert codes <= {"decode.truncated", "decode.avro"} and "decode.truncated" in codes
    assert _code(value + b"\x00") == "decode.avro"  # trailing bytes
    for i in range(10, len(value)):
        corrupted = value[:i] + bytes([value[i] ^ 0xFF]) + value[i + 1:]
        try:
            decode_message(corrupted)
        except DecodeError as exc:
            assert exc.code != "decode.internal", exc.message


@pytest.mark.unit
def test_unknown_fingerprint_is_a_schema_not_found_error() -> None:
    value = b"\xc3\x01" + b"\x01" * 8 + b"\x00\x00"
    with pytest.raises(SchemaNotFoundError) as info:
        decode_message(value)
    assert info.value.code == "decode.unknown_fingerprint" and "0101010101010101" in info.value.message


@pytest.mark.unit
def test_a_shipped_non_envelope_record_on_the_input_topic_is_rejected() -> None:
    value = encode_record("graph_change", {"op": "delete", "table": "t", "id": "x", "payload": None, "batch_id": 1})
    assert _code(value) == "decode.unexpected_schema"


@pytest.mark.unit
def test_confluent_without_registry_or_with_unknown_id_is_schema_not_found() -> None:
    value = encode_confluent(evo_event(), 42)
    with pytest.raises(SchemaNotFoundError) as info:
        decode_message(value)
    assert info.value.code == "decode.unknown_schema_id" and "no schema registry" in info.value.message
    with pytest.raises(SchemaNotFoundError):
        decode_message(value, registry=LocalSchemaRegistry())
    with pytest.raises(SchemaNotFoundError):
        decode_message(value, registry={41: latest(ENVELOPE).json})
    assert _code(value, registry={42: "not a schema"}) == "decode.registry"
    assert _code(value, registry={42: '"string"'}) in {"decode.avro", "decode.truncated"}


@pytest.mark.unit
def test_oversize_input_is_rejected_before_parsing() -> None:
    value = encode_json({**evo_event(), "pad": "x" * 5000})
    assert _code(value, max_bytes=1000) == "decode.too_large"
    assert decode_message(value, max_bytes=len(value))[0].document["pad"] == "x" * 5000


@pytest.mark.unit
def test_depth_limit_is_configurable_and_applies_inside_avro() -> None:
    deep = {"eventType": "START", "run": {"runId": RUN_ID, "facets": {"d": json.loads("[" * 40 + "]" * 40)}}}
    assert _code(encode_json(deep), max_depth=20) == "decode.too_deep"
    assert _code(encode_single_object(deep), max_depth=20) == "decode.too_deep"
    assert decode_message(encode_single_object(deep), max_depth=64)[0].document == deep
    # brackets inside strings do not count
    stringy = {"run": {"runId": RUN_ID, "facets": {"q": "[" * 5000}}}
    assert decode_message(encode_json(stringy), max_depth=8)[0].document == stringy
    assert decode_message(encode_single_object(stringy), max_depth=8)[0].document == stringy


@pytest.mark.unit
def test_very_deep_json_is_rejected_quickly() -> None:
    value = b"[" * 500_000 + b"]" * 500_000
    start = time.monotonic()
    assert _code(value) == "decode.too_deep"
    assert time.monotonic() - start < 30  # a deadline, not a performance assertion


@pytest.mark.unit
@pytest.mark.parametrize("value", [
    b"[" * 300 + b'\\"' * 100_000,  # escaped quotes and no closing quote: quadratic for a naive string regex
    b"[" * 300 + b'"' + b"\\" * 200_001,
    b'["' * 100_000,
])
def test_adversarial_bracket_scans_finish(value: bytes) -> None:
    start = time.monotonic()
    assert _code(value) in {"decode.too_deep", "decode.json"}
    assert time.monotonic() - start < 30  # a deadline against a hang, not a performance assertion


@pytest.mark.unit
def test_encoders_reject_a_subject_without_namespace_and_name() -> None:
    for bad in ({"namespace": "n"}, {"namespace": "", "name": "x"}, {"namespace": "n", "name": 3}):
        with pytest.raises((ValueError, KeyError)):
            encode_single_object(evo_event(), bad)
        with pytest.raises((ValueError, KeyError)):
            subject_header(bad)


@pytest.mark.unit
def test_self_link_pointer_pickles_with_its_position() -> None:
    import pickle

    [msg, _] = decode_message(encode_evo_document([evo_event(), evo_event()], "/events/1/outputs/0"))
    copy = pickle.loads(pickle.dumps(msg))
    assert copy == msg and copy.self_link.event_index == 0 and copy.self_link.event_count == 2


@pytest.mark.unit
@pytest.mark.parametrize("header", [
    b"not json", b"[1]", b'{"namespace": "n"}', b'{"namespace": "", "name": "x"}', b'{"namespace": 1, "name": "x"}',
    b"\xff", b"[" * 5000,
])
def test_bad_subject_header_is_a_decode_error(header: bytes) -> None:
    assert _code(encode_json(evo_event()), headers=[(SUBJECT_HEADER, header)]) in {"decode.subject"}


@pytest.mark.unit
def test_headers_that_are_not_pairs_are_a_decode_error() -> None:
    assert _code(encode_json(evo_event()), headers=[("only-a-key",)]) == "decode.headers"


# --------------------------------------------------------------------------- registry wrapper


@pytest.mark.unit
def test_local_registry_assigns_stable_ids() -> None:
    reg = LocalSchemaRegistry()
    a = reg.register_envelope()
    assert reg.register_envelope() == a
    assert json.loads(reg.get_schema(a)) == latest(ENVELOPE).raw
    with pytest.raises(SchemaNotFoundError):
        reg.get_schema(a + 1)
    assert subject_for_topic("openlineage.events") == "openlineage.events-value"


@pytest.mark.unit
def test_confluent_registry_needs_a_url_and_reports_an_unreachable_registry() -> None:
    with pytest.raises(ConfigurationError):
        ConfluentSchemaRegistry({})
    registry = ConfluentSchemaRegistry({"url": "http://127.0.0.1:9", "max.retries": 0})
    value = encode_confluent(evo_event(), 5)
    assert _code(value, registry=registry) == "decode.registry"


class _RegistryAPI:
    """The three Schema Registry REST calls the wrapper makes, on 127.0.0.1, for the real
    confluent-kafka client to talk to (no Schema Registry server can run on these machines)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.schemas: dict[int, str] = {}
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # register (/subjects/s/versions) and lookup (/subjects/s)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                subject = self.path.split("/")[2].split("?")[0]
                ids = [i for i, t in api.schemas.items() if t == body["schema"]]
                if not ids and "/versions" not in self.path:
                    return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                sid = ids[0] if ids else len(api.schemas) + 1
                api.schemas[sid] = body["schema"]
                self._reply(200, {"id": sid, "subject": subject, "version": 1, "schema": body["schema"]})

            def do_GET(self) -> None:  # /schemas/ids/{id}
                sid = int(self.path.split("/")[3].split("?")[0])
                if sid not in api.schemas:
                    return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                self._reply(200, {"schema": api.schemas[sid], "schemaType": "AVRO"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.mark.unit
def test_confluent_registry_wrapper_registers_looks_up_and_resolves_ids() -> None:
    api = _RegistryAPI()
    try:
        writer = ConfluentSchemaRegistry({"url": api.url})
        subject = subject_for_topic("openlineage.events")
        with pytest.raises(Exception):  # noqa: B017 - not registered yet: the client's own 404 error
            writer.lookup_envelope(subject)
        sid = writer.register_envelope(subject)
        assert writer.register_envelope(subject) == sid and writer.lookup_envelope(subject) == sid
        value = encode_confluent(evo_event(), sid, SUBJECT)
        reader = ConfluentSchemaRegistry(api.url)  # a fresh client, as on an executor: fetches by id
        [msg] = decode_message(value, registry=reader)
        assert msg.document == evo_event() and msg.subject == SUBJECT and msg.encoding == "confluent"
        with pytest.raises(SchemaNotFoundError) as info:
            decode_message(encode_confluent(evo_event(), sid + 100), registry=reader)
        assert info.value.code == "decode.unknown_schema_id"
    finally:
        api.stop()


# --------------------------------------------------------------------------- the real broker


@pytest.mark.integration
def test_every_encoding_through_the_real_broker_with_headers(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = topic_names["events"]
    registry = LocalSchemaRegistry()
    sid = registry.register_envelope()
    ev = evo_event()
    sent = [
        ("avro", encode_single_object(ev), subject_hdr()),
        ("confluent", encode_confluent(ev, sid, SUBJECT), None),
        ("json", encode_json(ev), subject_hdr()),
        ("json", encode_evo_document([evo_event("START"), ev], "/events/1/outputs/0"), subject_hdr()),
        ("garbage", b"\xc3\x01" + b"\x09" * 12, None),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i, (_, value, headers) in enumerate(sent):
        producer.produce(topic, value=value, key=f"run:evocompute/k{i}", partition=0, headers=headers)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = []
    deadline = time.monotonic() + 60
    try:
        while len(received) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                received.append(msg)
    finally:
        consumer.close()
    assert len(received) == len(sent)

    for (encoding, _, _), msg in zip(sent[:3], received[:3], strict=True):
        [decoded] = decode_message(msg.value(), msg.headers(), registry=registry)
        assert decoded.encoding == encoding
        assert decoded.document == ev
        assert decoded.subject == SUBJECT
    evo = decode_message(received[3].value(), received[3].headers())
    assert [m.document["eventType"] for m in evo] == ["START", "COMPLETE"]
    assert {m.self_link for m in evo} == {"/events/1/outputs/0"} and evo[0].subject == SUBJECT
    with pytest.raises(SchemaNotFoundError):
        decode_message(received[4].value(), received[4].headers())
