"""The stream's packed decoded rows (stream_processor/decode.py): the same rows as the wide form."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from benchmarks.e2e_bench import _demo_values
from stream_processor.decode import (
    NARROW_COLUMNS,
    PACKED_COLUMNS,
    PACKED_EXTRA,
    arrow_decoded_schema,
    decode_batches,
    full_rows,
    pack_row,
    unpack_row,
)

pytestmark = pytest.mark.unit


def _source(values: list[tuple[bytes | None, list | None]], ts: datetime | None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": [b"k%d" % i for i in range(n)], "value": [v for v, _ in values], "topic": ["in"] * n,
        "partition": [3] * n, "offset": list(range(n)), "timestamp": [ts] * n, "timestampType": [0] * n,
        "headers": [[{"key": k, "value": v} for k, v in (h or [])] for _, h in values]})


def test_packed_columns_are_the_wide_columns_not_kept_narrow():
    names = arrow_decoded_schema().names
    assert sorted(NARROW_COLUMNS + PACKED_COLUMNS) == sorted(names)
    assert not set(NARROW_COLUMNS) & set(PACKED_COLUMNS)


@pytest.mark.parametrize("ts", [datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), None])
def test_packed_batches_read_back_as_the_wide_rows(ts):
    # demo traffic (plain events, Evo `$self` documents, duplicates) plus rejected messages: garbage bytes,
    # a null value, JSON that is no event, with headers (the DLQ needs raw_value and raw_headers back)
    values = list(_demo_values(40)) + [(b"\x00garbage", [("h", b"\x01")]), (None, None), (b'{"not": "an event"}', None)]
    wide = [r for b in decode_batches(iter([_source(values, ts)])) for r in b.to_pylist()]
    packed_batches = list(decode_batches(iter([_source(values, ts)]), packed=True, derive=True))
    assert all(b.schema.names == [*NARROW_COLUMNS, "packed"] for b in packed_batches)
    packed = [r for b in packed_batches for r in full_rows(b)]
    extras = [{name: r.pop(name) for name in PACKED_EXTRA} for r in packed]
    assert len(wide) >= len(values) and packed == wide
    # and what only the packed rows carry: the parse each message took, the graph rows of each plain event
    ok = [(r, x) for r, x in zip(packed, extras, strict=True) if r["status"] == "ok"]
    parts = [x for r, x in ok if r["has_self"] and r["run_id"]]
    plain = [x for r, x in ok if not (r["has_self"] and r["run_id"])]
    assert parts and plain
    assert all(x["graph"] is None for x in parts) and all(x["graph"] is not None for x in plain)
    assert all(x["graph"] is None and x["parses"] is None
               for r, x in zip(packed, extras, strict=True) if r["status"] != "ok")
    messages = {(r["source_partition"], r["source_offset"]) for r, _ in ok}
    assert sum(x["parses"] for _, x in ok) == len(messages)   # one parse per message, an Evo document's too
    assert sum(r["status"] != "ok" for r in packed) == 3
    assert any(r["raw_headers"] == [{"key": "h", "value": b"\x01"}] for r in packed)


def test_full_rows_leaves_a_wide_batch_as_it_is():
    values = list(_demo_values(5))
    batch = next(decode_batches(iter([_source(values, None)])))
    assert full_rows(batch) == batch.to_pylist()


def test_full_rows_gives_to_pylists_values_in_its_order_timestamps_and_nulls_included():
    """full_rows makes the UTC timestamps' datetimes itself (from their microseconds): the same instants, in UTC,
    None for a null, keys in the batch's column order."""
    import pyarrow as pa

    stamps = [datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), None, datetime(1970, 1, 1, tzinfo=UTC),
              datetime(2262, 1, 1, 23, 59, 59, 999999, tzinfo=UTC), datetime(1678, 1, 1, tzinfo=UTC)]
    batch = pa.RecordBatch.from_pydict(
        {"event_time": stamps, "status": ["ok", None, "ok", "ok", "rejected"], "n": [1, 2, None, 4, 5],
         "naive": [datetime(2024, 1, 1)] * 5},
        schema=pa.schema([("event_time", pa.timestamp("us", tz="UTC")), ("status", pa.string()), ("n", pa.int64()),
                          ("naive", pa.timestamp("us"))]))
    rows = full_rows(batch)
    assert rows == batch.to_pylist() and [list(r) for r in rows] == [list(r) for r in batch.to_pylist()]
    assert [r["event_time"] for r in rows] == stamps
    assert all(r["event_time"] is None or r["event_time"].utcoffset().total_seconds() == 0 for r in rows)
    assert rows[0]["naive"].tzinfo is None


def test_a_naive_kafka_timestamp_is_read_as_utc():
    row = {name: None for name in PACKED_COLUMNS}
    row["kafka_timestamp"] = datetime(2024, 1, 2, 3, 4, 5, 6)
    assert unpack_row(pack_row(row))["kafka_timestamp"] == datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def test_an_event_the_deriver_refuses_is_left_for_the_staging_pass_to_derive():
    """Decode derives what it can; an event the deriver refuses gets no graph rows (the staging pass parses and
    derives it again, and reports its reason there), and decoding goes on."""
    from stream_processor.decode import DecodedColumns

    columns = DecodedColumns(packed=True, derive=True)
    row = {"event_hash": "h", "event_json": "{}", "source_topic": "t", "source_partition": 0, "source_offset": 1}
    refused = {"eventTime": "2024-01-01T00:00:00Z", "eventType": "COMPLETE", "run": {"runId": "r"},
               "job": {"namespace": "n", "name": "j"}, "outputs": [{"namespace": "n", "name": "o",
                                                                   "facets": {"schema": {"fields": 7}}}]}
    assert columns._derived(refused, row) is None
    fine = {**refused, "outputs": [{"namespace": "n", "name": "o"}]}
    graph = columns._derived(fine, row)
    assert graph is not None and graph[0][0][8] == "t[0]@1" and graph[0][0][9] is None   # source; no payload


def test_without_derive_the_packed_rows_carry_texts_only():
    """``LINEAGE_DERIVE_AT_DECODE=false``, the default (the source's ``derive=false``): no graph rows, the staging
    pass derives."""
    from stream_processor.settings import ProcessorSettings

    batches = list(decode_batches(iter([_source(list(_demo_values(10)), None)]), packed=True, derive=False))
    rows = [r for b in batches for r in full_rows(b)]
    assert rows and all(r["graph"] is None for r in rows) and any(r["parses"] == 1 for r in rows)
    assert ProcessorSettings(derive_at_decode=False).source_options()["derive"] == "false"
    assert ProcessorSettings().source_options()["derive"] == "false"   # the default (settings.py: why)
    assert ProcessorSettings(derive_at_decode=True).source_options()["derive"] == "true"
