"""The hand-written encoders (stream_processor/avro_records.py) write fastavro's bytes: pure, no server."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime, timedelta

import pytest

from schemas.avro import latest
from stream_processor import avro_records
from stream_processor.avro_records import WRITTEN_FOR, encode_enriched, encode_graph_change
from stream_processor.consumer import to_typed
from stream_processor.publish import encode_record, graph_change

_CHARS = string.printable + "é€😀\u2028\x00"
_LONGS = [0, 1, 63, 64, -1, -64, -65, 127, 128, 2**31 - 1, -2**31, 2**40, 2**63 - 1, -2**63]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.choice([0, 1, 5, 63, 64, 200, 5000])))


def _maybe(rng: random.Random) -> str | None:
    return None if rng.random() < 0.3 else _text(rng)


def _enriched(rng: random.Random) -> dict:
    return {
        "event": _text(rng), "event_hash": _text(rng), "kind": _text(rng), "event_type": _maybe(rng),
        "event_time": _maybe(rng), "run_id": _maybe(rng), "job_namespace": _maybe(rng), "job_name": _maybe(rng),
        "revision": rng.choice(_LONGS),
        "source": None if rng.random() < 0.3 else {"topic": _text(rng), "partition": rng.choice([0, 1, 2**31 - 1]),
                                                  "offset": rng.choice(_LONGS[:11])},
        "subject": None if rng.random() < 0.5 else {"namespace": _text(rng), "name": _text(rng)},
        "quality": _maybe(rng), "provenance": _maybe(rng),
        "processed_at": datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(-2**50, 2**52)),
    }


def test_the_encoders_are_for_the_shipped_versions() -> None:
    assert {name: latest(name).fingerprint for name in WRITTEN_FOR} == WRITTEN_FOR


@pytest.mark.parametrize("seed", range(4))
def test_enriched_records_as_fastavro_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        record = _enriched(rng)
        assert encode_enriched(record) == encode_record("enriched_record", record)


def test_a_batch_shares_its_processed_at_and_the_next_gets_its_own() -> None:
    """The enrich step gives a batch's records one ``processed_at`` object, encoded once (``_processed_at``): records
    sharing it, then another time, then the first one again, are each written as fastavro writes them."""
    rng = random.Random(30)
    first, second = datetime(2026, 11, 29, 4, 0, tzinfo=UTC), datetime(2026, 11, 29, 4, 0, 1, 5, tzinfo=UTC)
    for when in (first, first, second, second, first, 1_795_925_964_451_000):
        record = {**_enriched(rng), "processed_at": when}
        assert encode_enriched(record) == encode_record("enriched_record", record)


@pytest.mark.parametrize("seed", range(4))
def test_graph_changes_as_fastavro_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        change = {"op": rng.choice(["upsert", "delete"]), "table": _text(rng), "id": _text(rng),
                  "payload": _maybe(rng), "batch_id": rng.choice(_LONGS)}
        assert encode_graph_change(change) == encode_record("graph_change", change)
    real = graph_change("lineage_nodes", "n1", {"node_id": "n1", "first_seen": datetime(2024, 1, 1, tzinfo=UTC)}, 7)
    decoded = to_typed(encode_graph_change(real), b"n1")
    assert (decoded.table, decoded.id, decoded.batch_id, decoded.payload["node_id"]) == ("lineage_nodes", "n1", 7, "n1")


def test_another_latest_version_goes_to_the_generic_writer(monkeypatch) -> None:
    monkeypatch.setitem(avro_records.WRITTEN_FOR, "graph_change", b"\x00" * 8)
    monkeypatch.setattr(avro_records, "_HEADERS", {})
    change = {"op": "upsert", "table": "t", "id": "x", "payload": "{}", "batch_id": 3}
    assert encode_graph_change(change) == encode_record("graph_change", change)
    assert avro_records._HEADERS["graph_change"] is None      # written by encode_record, not by hand


def test_payload_rows_write_the_payloads_to_pylist_gives() -> None:
    import pyarrow as pa

    from stream_processor.publish import payload_rows

    times = [datetime(2024, 1, 1, 7, 39, 20, 484000, tzinfo=UTC), datetime(2024, 1, 1, 7, 39, 20, tzinfo=UTC), None,
             datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
             datetime(1, 1, 1, 0, 0, 0, 5, tzinfo=UTC)]
    table = pa.table({
        "id": pa.array(["a", "b", None, "d", "e", "f"]),
        "seen": pa.array(times, type=pa.timestamp("us", tz="UTC")),
        "ms": pa.array(times, type=pa.timestamp("ms", tz="UTC")),      # not the export's type: left to str()
        "n": pa.array([1, None, 3, -4, 2**62, 0], type=pa.int64()),
        "flag": pa.array([True, False, None, True, False, True]),
        "doc": pa.array(['{"a": 1}', "{}", None, '{"é": "\\u0000"}', "[]", "null"]),
    })
    rows = payload_rows(table)
    assert [graph_change("t", "x", r, 1) for r in rows] == [graph_change("t", "x", r, 1) for r in table.to_pylist()]
    assert rows[0]["seen"] == "2024-01-01 07:39:20.484000+00:00" and rows[1]["seen"] == "2024-01-01 07:39:20+00:00"
    assert rows[2]["seen"] is None


@pytest.mark.parametrize("seed", range(2))
def test_graph_upserts_are_the_records_of_graph_change(seed: int, monkeypatch) -> None:
    from stream_processor.avro_records import encode_graph_upserts

    rng = random.Random(seed)
    rows = [{"row_id": rng.choice([_text(rng), None, "", rng.randint(0, 9)]), "name": _maybe(rng),
             "n": rng.choice(_LONGS[:11] + [2**64]),   # beyond 64 bits: the json module writes it
             "seen": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 2**40)),
             "doc": {"z": 1, "a": [_text(rng)]}} for _ in range(300)]
    table = _text(rng) or "lineage_nodes"
    batch_id = rng.choice(_LONGS)

    def expected() -> list[tuple[bytes, bytes]]:
        return [(str(r["row_id"] or "").encode("utf-8"),
                 encode_graph_change(graph_change(table, str(r["row_id"] or ""), r, batch_id))) for r in rows]

    assert list(encode_graph_upserts(table, rows, "row_id", batch_id)) == expected()
    monkeypatch.setitem(avro_records.WRITTEN_FOR, "graph_change", b"\x00" * 8)   # another latest version
    monkeypatch.setattr(avro_records, "_HEADERS", {})
    assert list(encode_graph_upserts(table, rows, "row_id", batch_id)) == expected()
    assert avro_records._HEADERS["graph_change"] is None


def test_utc_micros_text_is_the_wall_time_with_six_digits() -> None:
    import pyarrow as pa

    from sink.arrowtime import utc_micros_text

    times = [datetime(2024, 1, 1, 7, 39, 20, 484000, tzinfo=UTC), datetime(2024, 1, 1, 7, 39, 20, tzinfo=UTC), None,
             datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    column = pa.chunked_array([pa.array(times, type=pa.timestamp("us", tz="UTC"))])
    assert utc_micros_text(column).to_pylist() == [
        t.strftime("%Y-%m-%d %H:%M:%S.%f") if t else None for t in times]
    assert utc_micros_text(column, "T").to_pylist() == [
        t.strftime("%Y-%m-%dT%H:%M:%S.%f") if t else None for t in times]
