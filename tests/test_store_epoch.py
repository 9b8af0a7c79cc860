"""A new checkpoint against a database that already holds stream batches loses nothing.

Spark numbers a checkpoint's micro-batches from 0 and the store skips batch ids it has committed (a
replay is a no-op), so without a per-checkpoint store epoch (stream_processor/writer.py, "store batch
ids") the first batches of a fresh checkpoint — a deleted checkpoint, ``lineage up`` after its embedded
broker lost the topics — would be dropped as "already committed".
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.testing import StreamHarness, produce, run_event, test_settings
from stream_processor.writer import EPOCH_BITS, EPOCH_FILE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _jobs(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))


def _batch_ids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return sorted(r[0] for r in conn.execute("SELECT batch_id FROM lineage_transactions"))


def test_fresh_checkpoint_on_a_used_database_keeps_every_event(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    topic = topic_names["events"]
    first = [run_event(job=f"first-{i}") for i in range(3)]
    produce(kafka_bootstrap, topic, [encode_single_object(e) for e in first])
    with StreamHarness(spark, test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck1"))) as h:
        h.drain()
    assert _jobs(pg_dsn) == [f"first-{i}" for i in range(3)]
    assert (tmp_path / "ck1" / EPOCH_FILE).read_text().strip() == "0"   # an empty database: Spark's ids
    old_ids = _batch_ids(pg_dsn)
    assert old_ids and max(old_ids) < 1 << EPOCH_BITS

    second = [run_event(job=f"second-{i}") for i in range(3)]
    produce(kafka_bootstrap, topic, [encode_single_object(e) for e in second])
    ck2 = Path(tmp_path / "ck2")
    with StreamHarness(spark, test_settings(kafka_bootstrap, topic_names, pg_dsn, str(ck2))) as h:
        h.drain()    # re-reads the whole topic from batch 0: the first three are duplicates, the rest is new
    assert _jobs(pg_dsn) == sorted([f"first-{i}" for i in range(3)] + [f"second-{i}" for i in range(3)])
    assert (ck2 / EPOCH_FILE).read_text().strip() == "1"
    new_ids = [b for b in _batch_ids(pg_dsn) if b not in old_ids]
    assert new_ids and min(new_ids) >= 1 << EPOCH_BITS

    # the same checkpoint again: the epoch file is read back, nothing is stored twice
    with StreamHarness(spark, test_settings(kafka_bootstrap, topic_names, pg_dsn, str(ck2))) as h:
        h.drain()
    assert (ck2 / EPOCH_FILE).read_text().strip() == "1"
    assert len(_jobs(pg_dsn)) == 6
