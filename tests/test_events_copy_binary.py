"""stg_events is COPYed in binary format (migration 016): the same values as COPY text, hostile texts included."""

from __future__ import annotations

import datetime

import psycopg
import pytest

from sink.derive import STAGING_COLUMNS
from sink.postgres import _BINARY_HEADER, _BINARY_TRAILER, copy_text, events_copy_binary

HOSTILE = "tab\there\nnewline\rcr\\backslash\\N\\. 日本語 🚀 \"q\" 'x'"
ROWS = [
    ("a" * 64, "run", "COMPLETE", "2024-05-01T10:00:00.000000Z", "0f7c1a3e-1111-4222-8333-444455556666",
     "ns", HOSTILE, "https://producer", "kafka:t/0@1", '{"payload":"' + HOSTILE.replace("\\", "\\\\") + '"}' * 300, 3),
    ("b" * 64, "dataset", None, "2024-05-01T12:00:00+02:00", None, None, None, None, None, "{}", None),
    ("c" * 64, "job", None, "2024-05-01T10:00:00.5Z", None, "ns", "\\N", 7, True, "", 0),   # non-str fields as COPY text has them
]


def _parse(data: bytes) -> list[list[bytes | None]]:
    """A reader of COPY binary rows (no header), enough for the test."""
    rows, pos = [], 0
    while pos < len(data):
        count = int.from_bytes(data[pos:pos + 2], "big", signed=True)
        pos += 2
        fields: list[bytes | None] = []
        for _ in range(count):
            size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            pos += 4
            if size < 0:
                fields.append(None)
            else:
                fields.append(data[pos:pos + size])
                pos += size
        rows.append(fields)
    return rows


def test_binary_rows_carry_the_fields_copy_text_carries():
    parsed = _parse(events_copy_binary(12, 1, ROWS))
    assert len(parsed) == len(ROWS)
    width = 2 + len(STAGING_COLUMNS["stg_events"])
    for row, fields in zip(ROWS, parsed, strict=True):
        assert len(fields) == width
        assert int.from_bytes(fields[0], "big") == 12 and len(fields[0]) == 8
        assert int.from_bytes(fields[1], "big") == 1 and len(fields[1]) == 4
        for value, field in zip(row[:-1], fields[2:-1], strict=True):
            want = None if value is None else (value if isinstance(value, str) else copy_text("", [(value,)])[:-1])
            assert (field.decode() if field is not None else None) == want
        assert fields[-1] is None if row[-1] is None else int.from_bytes(fields[-1], "big", signed=True) == row[-1]


@pytest.mark.integration
def test_binary_copy_stores_what_text_copy_stores(pg_dsn):
    """The same rows through COPY text (as before migration 016) and COPY binary into text columns: equal."""
    columns = ", ".join(f"{c} text" for c in STAGING_COLUMNS["stg_events"][:-1])
    names = ", ".join(STAGING_COLUMNS["stg_events"])
    with psycopg.connect(pg_dsn) as conn:
        for table in ("t_text", "t_binary"):
            conn.execute(f"CREATE TEMP TABLE {table} (batch_id bigint, part integer, {columns}, revision integer)")
        with conn.cursor() as cur:
            with cur.copy(f"COPY t_text (batch_id, part, {names}) FROM STDIN") as copy:
                copy.write(copy_text("12\t1\t", ROWS))
            with cur.copy(f"COPY t_binary (batch_id, part, {names}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(_BINARY_HEADER)
                copy.write(events_copy_binary(12, 1, ROWS[:1], conn.info.encoding))
                copy.write(events_copy_binary(12, 1, ROWS[1:], conn.info.encoding))
                copy.write(_BINARY_TRAILER)
        text = conn.execute("SELECT * FROM t_text ORDER BY event_hash").fetchall()
        binary = conn.execute("SELECT * FROM t_binary ORDER BY event_hash").fetchall()
        assert len(text) == len(ROWS)
        assert binary == text
        # what the events merge casts (MERGE_EVENTS): the times and run ids parse as they did in COPY text
        casts = conn.execute("SELECT event_time::timestamptz, run_id::uuid FROM t_binary ORDER BY event_hash").fetchall()
        assert [str(r[1]) if r[1] else None for r in casts] == [ROWS[0][4], None, None]
        utc = datetime.UTC
        assert [r[0] for r in casts] == [datetime.datetime(2024, 5, 1, 10, tzinfo=utc),
                                         datetime.datetime(2024, 5, 1, 10, tzinfo=utc),
                                         datetime.datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=utc)]


@pytest.mark.integration
def test_events_staged_before_migration_016_merge_after_it(pg_dsn):
    """A batch staged by the previous version (COPY text into timestamptz / uuid columns) and merged after the
    upgrade: the migration converts the staged values and the merge stores the same time and run id."""
    from sink.derive import BatchDeriver
    from sink.postgres import GraphStore
    from tests.test_derive import ds, run_event, stored

    run_id = "0f7c1a3e-1111-4222-8333-444455556666"
    event = stored(run_event("COMPLETE", "2024-05-01T10:00:00.250000Z", run_id, inputs=[ds("a")], outputs=[ds("b")]))
    deriver = BatchDeriver()
    deriver.add([event])
    rows = deriver.finish().tables["stg_events"]
    names = ", ".join(STAGING_COLUMNS["stg_events"])
    with GraphStore(pg_dsn) as store:
        store.migrate(up_to=15)
        types = dict(store.conn.execute("SELECT column_name, data_type FROM information_schema.columns "
                                        "WHERE table_name = 'stg_events'").fetchall())
        assert types["event_time"] == "timestamp with time zone" and types["run_id"] == "uuid"
        with store.conn.cursor() as cur, cur.copy(f"COPY stg_events (batch_id, part, {names}) FROM STDIN") as copy:
            copy.write(copy_text("41\t0\t", rows))
        store.conn.commit()
        store.migrate()
        store.merge(41)
        got = store.conn.execute("SELECT event_time, run_id::text, payload FROM lineage_events "
                                 "WHERE event_hash = %s", (event.event_hash,)).fetchone()
    assert got == (datetime.datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=datetime.UTC), run_id, rows[0][9])
