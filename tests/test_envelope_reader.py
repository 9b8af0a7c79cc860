"""schemas.envelope_reader reads the v2 envelope exactly as fastavro does, and leaves everything else to fastavro.

The property that keeps the codec's behaviour: whenever the hand-written reader returns a record, fastavro reads
the same bytes to the same record and consumes them all; on anything else it returns None (the codec then calls
fastavro, which raises as before). Checked on generated records, real events, Avro's negative-count array blocks,
every truncation of real messages, and random bytes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.avro import ENVELOPE, by_fingerprint, latest
from schemas.codec import _read_envelope, encode_single_object
from schemas.envelope_reader import READ_FOR, read_envelope
from stream_processor.avro_records import _varint as long
from tests.openlineage_fixtures import fixture_documents

ROOT = Path(__file__).resolve().parent.parent
V2 = by_fingerprint(READ_FOR)


def _fastavro(body: bytes, offset: int = 0) -> Any:
    """fastavro's record and whether it consumed ``body`` exactly, or the exception type it raised."""
    buf = io.BytesIO(body)
    buf.seek(offset)
    try:
        rec = schemaless_reader(buf, V2.parsed, None)
    except Exception as exc:  # noqa: BLE001 - any failure is fastavro's to word
        return type(exc)
    return rec, buf.tell() == len(body)


def _agrees(body: bytes, offset: int = 0) -> None:
    mine = read_envelope(body, offset)
    if mine is not None:
        assert _fastavro(body, offset) == (mine, True)


def test_the_reader_is_for_the_latest_shipped_envelope() -> None:
    """When a new envelope version ships, this reader is no longer used for it (the codec asks for READ_FOR's
    schema by identity); this test says so, so that someone writes the reader for the new version."""
    assert V2 is not None and V2.version == 2
    assert latest(ENVELOPE).fingerprint == READ_FOR


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_names = st.fixed_dictionaries({"namespace": _text, "name": _text})
_records = st.fixed_dictionaries({
    "kind": st.sampled_from(["RUN", "DATASET", "JOB", "UNKNOWN"]),
    "eventTime": st.none() | _text, "eventType": st.none() | _text, "producer": st.none() | _text,
    "schemaURL": st.none() | _text, "run": st.none() | st.fixed_dictionaries({"runId": _text}),
    "job": st.none() | _names, "dataset": st.none() | _names,
    "inputs": st.none() | st.lists(_names, max_size=4), "outputs": st.none() | st.lists(_names, max_size=70),
    "rest": st.none() | _text, "subject": st.none() | _names, "self_link": st.none() | _text,
    "trace_id": st.none() | _text,
})


@settings(max_examples=400, deadline=None)
@given(_records)
def test_generated_records_read_as_fastavro_reads_them(record: dict[str, Any]) -> None:
    buf = io.BytesIO()
    schemaless_writer(buf, V2.parsed, record)
    body = buf.getvalue()
    assert read_envelope(body, 0) == record
    assert _fastavro(body) == (record, True)
    for cut in (len(body) - 1, len(body) // 2):   # truncated: left to fastavro
        assert read_envelope(body[:cut], 0) is None
    assert read_envelope(body + b"\x00", 0) is None  # bytes left over: left to fastavro


def _real_messages() -> list[bytes]:
    messages = []
    for doc in fixture_documents():
        if isinstance(doc, dict):
            try:
                messages.append(encode_single_object(doc))
            except (TypeError, ValueError):
                continue
    return messages


def test_real_events_every_truncation_and_the_codec() -> None:
    messages = _real_messages()
    assert len(messages) > 10
    for value in messages:
        assert read_envelope(value, 10) == _fastavro(value, 10)[0]
        assert _read_envelope(value, 10, V2.parsed, None, "test") == _fastavro(value, 10)[0]
        for cut in range(10, len(value), max(1, len(value) // 40)):
            _agrees(value[:cut], 10)


def test_array_blocks_with_negative_counts() -> None:
    """Avro lets a writer give a block's byte size after a negative count; fastavro writes one block, other
    writers may not."""
    def string(s: str) -> bytes:
        raw = s.encode()
        return long(len(raw)) + raw

    item = string("ns") + string("a")
    body = (long(0) + long(0) * 4 + long(0) * 3   # RUN, four null strings, no run / job / dataset
            + long(1) + long(-2) + long(len(item) * 2) + item + item + long(1) + item + long(0)   # inputs: blocks
            + long(0) + long(0) + long(0) + long(0) + long(0))   # no outputs / rest / subject / self_link / trace
    mine = read_envelope(body, 0)
    assert mine is not None and mine["inputs"] == [{"namespace": "ns", "name": "a"}] * 3
    assert _fastavro(body) == (mine, True)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=60))
def test_random_bytes_never_read_differently(body: bytes) -> None:
    _agrees(body)


@pytest.mark.parametrize("body", [
    b"\x08",                          # kind index 4: no such symbol
    b"\x00\x04",                      # a union branch 2
    b"\x00\x02\x01",                  # a string of length -1
    b"\x00\x02\x04\xff\xfe",          # invalid UTF-8
    b"\x00" + b"\xff" * 11,           # a varint longer than 64 bits
])
def test_malformed_bodies_are_left_to_fastavro(body: bytes) -> None:
    assert read_envelope(body, 0) is None


def test_runs_as_python_without_cython() -> None:
    code = ("import sys; sys.modules['cython'] = None\n"
            "from schemas import envelope_reader\n"
            "from schemas.codec import encode_single_object\n"
            "v = encode_single_object({'eventTime': 't', 'run': {'runId': 'r'}, 'job': {'namespace': 'n', 'name': 'j'},"
            " 'inputs': [{'namespace': 'a', 'name': 'b'}]})\n"
            "print(envelope_reader.read_envelope(v, 10)['inputs'])\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LINEAGE_PURE_PYTHON": "1"},
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[{'namespace': 'a', 'name': 'b'}]"
