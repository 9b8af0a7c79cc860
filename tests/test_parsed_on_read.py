"""The staging pass keeps its partition's accepted events as texts and parses them a chunk at a time
(``stream_processor.writer.ParsedOnRead``): what ``GraphStore.stage_partition`` stages from it equals what it
stages from the parsed events, and only about one chunk (``sink.postgres._STREAM_EVENTS``) of parsed events is
alive at any moment, however many the partition holds (a parsed demo event is ~30 kB of Python objects)."""

from __future__ import annotations

import json
import weakref
from typing import Any

import psycopg
import pytest

from producers.demo import DemoTraffic
from schemas.codec import SUBJECT_HEADER, decode_message
from schemas.identity import canonical_json, event_hash
from schemas.validate import validate_message
from sink.postgres import _STREAM_EVENTS, GraphStore
from stream_processor.publish import handover_record
from stream_processor.writer import ParsedOnRead, _parsed, stored_event

#: The row of an event the deriver rejects (a NUL PostgreSQL cannot store): its record carries its text.
_BAD_TEXT = ('{"eventTime":"2024-01-01T00:00:00Z","eventType":"COMPLETE","job":{"name":"j","namespace":"n\\u0000"},'
             '"run":{"runId":"r"}}')


def _rows(n: int) -> list[dict[str, Any]]:
    """Accepted decoded rows of ``n`` demo events (the columns the staging pass reads), then the bad one."""
    rows = []
    for i, message in enumerate(DemoTraffic(seed=5).messages()):
        headers = [(SUBJECT_HEADER, json.dumps(message.subject).encode())] if message.subject else None
        for decoded in decode_message(json.dumps(message.value).encode(), headers):
            event = validate_message(decoded)
            rows.append(_row(canonical_json(event), event_hash(event), i))
        if len(rows) >= n:
            break
    return [*rows[:n], _row(_BAD_TEXT, "bad-event", 10**6)]


def _row(text: str, digest: str, offset: int) -> dict[str, Any]:
    return {"status": "ok", "event_json": text, "event_hash": digest, "kind": "run", "event_type": "COMPLETE",
            "event_time": None, "run_id": None, "job_namespace": None, "job_name": None, "revision": 0,
            "source_topic": "demo", "source_partition": 0, "source_offset": offset, "subject": None,
            "key": f"k{offset}".encode()}


def _filled(events: ParsedOnRead, rows: list[dict[str, Any]]) -> Any:
    for row in rows:
        events.append(row)
    return events


def _staged(conn: psycopg.Connection, table: str, batch_id: int) -> list[tuple]:
    """The rows of staging ``table`` staged as ``batch_id``, every column but the batch id, in a fixed order."""
    columns = [c for (c,) in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND column_name <> 'batch_id' "
        "ORDER BY ordinal_position", (table,)).fetchall()]
    return conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE batch_id = %s "
                        f"ORDER BY {', '.join(c + '::text' for c in columns)}", (batch_id,)).fetchall()


class _Counting(ParsedOnRead):
    """:class:`ParsedOnRead` counting the parsed events alive (a finalizer on each), and the most at once."""

    def __init__(self) -> None:
        super().__init__()
        self.alive = 0
        self.most = 0

    def _gone(self) -> None:
        self.alive -= 1

    def __getitem__(self, index: Any) -> Any:
        out = super().__getitem__(index)
        for stored in out if isinstance(out, list) else [out]:
            self.alive += 1
            weakref.finalize(stored, self._gone)
        self.most = max(self.most, self.alive)
        return out


def test_a_slice_is_freshly_parsed_events_equal_to_the_rows_stored_events():
    rows = _rows(30)
    events = ParsedOnRead()
    for row in rows:
        events.append(row)
    assert len(events) == len(rows)
    first, again = events[2:5], events[2:5]
    assert first == again == [stored_event(r) for r in rows[2:5]]
    assert first[0] is not again[0] and first[0].event is not again[0].event
    assert events[-1] == stored_event(rows[-1]) and events[-1].text == _BAD_TEXT
    assert [e.event_hash for e in events] == [r["event_hash"] for r in rows]   # iteration reads through __getitem__
    assert _parsed((_BAD_TEXT, "h", "s", 3, None)).revision == 3
    assert events.parses == 2 * 3 + 2 + len(rows)   # rows without graph rows from decode: each read is a parse
    events.clear()
    assert len(events) == 0


@pytest.mark.integration
def test_staging_from_texts_holds_one_chunk_of_parsed_events_and_stages_the_same(pg_dsn):
    n = 3 * _STREAM_EVENTS + 17
    rows = _rows(n)
    handover = {r["event_hash"]: (r["key"], handover_record(r)) for r in rows}
    lazy = _filled(_Counting(), rows)
    GraphStore(pg_dsn).migrate()
    staged_lazy = GraphStore.stage_partition(pg_dsn, 7_100_001, 0, lazy, handover)
    staged_list = GraphStore.stage_partition(pg_dsn, 7_100_002, 0, [stored_event(r) for r in rows], handover)
    assert staged_lazy == staged_list > n
    # the old staging pass held all n + 1 parsed events at once
    assert 0 < lazy.most <= 2 * _STREAM_EVENTS
    tables = ("stg_events", "stg_provenance", "stg_dataset_versions", "stg_edges", "stg_event_keys")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in tables:
            got = _staged(conn, table, 7_100_001)
            assert got and got == _staged(conn, table, 7_100_002), table
        # the rejected event's record carries its text, as with parsed events
        keys, record = conn.execute("SELECT keys, record FROM stg_event_keys WHERE batch_id = 7100001 AND "
                                    "event_hash = 'bad-event'").fetchone()
        assert keys is None and json.loads(record)["event"] == _BAD_TEXT


def _decoded_rows() -> list[dict[str, Any]]:
    """The accepted rows the stream's decode makes with parse once (``DecodedColumns(packed=True, derive=True)``, read
    back as the staging pass reads them) of demo messages and of every fixture event the decoder accepts (real producers' quirks)."""
    from benchmarks.derive_bench import fixture_events
    from benchmarks.e2e_bench import _demo_values
    from stream_processor.decode import DecodedColumns, full_rows

    columns = DecodedColumns(packed=True, derive=True)
    values = list(_demo_values(600)) + [(e.text.encode(), None) for _, e in fixture_events()]
    for offset, (value, headers) in enumerate(values):
        columns.add(value, headers or [], "demo", 0, offset, None, b"k%d" % offset)
    return [r for r in full_rows(columns.take()) if r["status"] == "ok" and not (r["has_self"] and r["run_id"])]


@pytest.mark.integration
def test_events_derived_at_decode_stage_what_their_parsed_texts_stage(pg_dsn):
    """Parse once (issue 18): the rows decode derived from the event it parsed, staged without parsing again,
    equal the rows derived from the event's text parsed in the staging pass (jsonb values, row sets)."""
    rows = _decoded_rows()
    assert len(rows) > 600 and all(r["graph"] is not None for r in rows)
    handover = {r["event_hash"]: (r["key"], handover_record(r)) for r in rows}
    derived = _filled(ParsedOnRead(), rows)
    GraphStore(pg_dsn).migrate()
    staged = GraphStore.stage_partition(pg_dsn, 7_100_003, 0, derived, handover)
    assert derived.parses == 0
    parsed = [stored_event({**r, "graph": None}) for r in rows]
    assert staged == GraphStore.stage_partition(pg_dsn, 7_100_004, 0, parsed, handover) > len(rows)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # every staging table (the partitioned parents: migration 017's slot partitions hold one batch or the other)
        tables = [t for (t,) in conn.execute("SELECT relname FROM pg_class WHERE relname LIKE 'stg\\_%' AND relkind "
                                             "IN ('r', 'p') AND NOT relispartition AND relname <> 'stg_self_parts'"
                                             ).fetchall()]
        assert "stg_column_lineage" in tables and "stg_event_keys" in tables
        for table in tables:
            assert _staged(conn, table, 7_100_003) == _staged(conn, table, 7_100_004), table
