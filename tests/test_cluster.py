"""`lineage process --master spark://...` on a Spark standalone cluster: the same graph as local mode.

The cluster is the one the pyspark installation ships: a master and two workers (one core, 1 GB each)
started with ``spark-class``, on this machine. The executors import the project through the workers'
``PYTHONPATH`` (this checkout first), as they would from an installed package on a real cluster.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lineage.embedded.broker import create_topics
from stream_processor.testing import produce, start_processor
from tests.conftest import ROOT, assert_eventually
from tests.test_store_postgres import snapshot

# ~2 minutes on a quiet 2-core machine; up to 10 at a load average of 20 (three JVMs start)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

DEMO_MESSAGES = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _cluster_env(work: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(work / "logs"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two registered workers; all stopped afterwards."""
    spark_class = str(_spark_home() / "bin" / "spark-class")
    env = _cluster_env(tmp_path)
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, *argv: str) -> None:
        with open(tmp_path / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen([spark_class, *argv], stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))
        for i in (1, 2):
            work = tmp_path / f"worker{i}"
            work.mkdir()
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "1g", "--webui-port", str(_free_port()), "--work-dir", str(work), url)
        assert_eventually(lambda: _alive_workers(ui) == 2, timeout=240, interval=1.0,
                          message="two workers registered with the master")
        yield url
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _demo_messages(n: int) -> list[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """Demo traffic as the bench sends it: plain events Avro-encoded, `$self` parts as JSON with a subject."""
    from benchmarks.e2e_bench import _demo_values

    return list(_demo_values(n))


def _drain(master: str | None, bootstrap: str, topics: dict[str, str], dsn: str, work: Path) -> None:
    work.mkdir()
    extra = ["--available-now", "--max-offsets-per-trigger", "100000"] + (["--master", master] if master else [])
    proc = start_processor(bootstrap, topics, dsn, work, "process.log", *extra)
    try:
        code = proc.wait(480)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert code == 0, (work / "process.log").read_text(errors="replace")[-4000:]


def _messages_by_offset(bootstrap: str, topic: str) -> dict[str, bytes]:
    """Every message of ``topic`` by its ``topic[partition]@offset`` (lineage_events.source)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{os.getpid()}",
                         "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[str, bytes] = {}
        while len(out) < DEMO_MESSAGES:
            msg = consumer.poll(5)
            assert msg is not None, f"only {len(out)} of {DEMO_MESSAGES} messages read back"
            if msg.error() is None:
                out[f"{topic}[{msg.partition()}]@{msg.offset()}"] = msg.value()
        return out
    finally:
        consumer.close()


def _same_events(cluster: list[tuple], local: list[tuple], dsn: str, bootstrap: str, topic: str) -> None:
    """lineage_events alike in both runs, except which copy of a message sent twice is its ``source``: the
    stream's dedupe keeps the first copy its task sees, and in which order rows of different Kafka partitions
    reach that task is Spark's choice (seen once under load: one event's source differed). Both copies must
    be the same bytes."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        cols = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'lineage_events' "
            "ORDER BY ordinal_position").fetchall() if r[0] not in ("received_at", "last_batch_id")]
    at = cols.index("source")

    def without_source(rows: list[tuple]) -> list[tuple]:
        return sorted(r[:at] + r[at + 1:] for r in rows)

    assert without_source(cluster) == without_source(local), "lineage_events"
    other = {r[0]: r[at] for r in cluster}
    moved = [(other[r[0]], r[at]) for r in local if other[r[0]] != r[at]]
    if moved:
        sent = _messages_by_offset(bootstrap, topic)
        for a, b in moved:
            assert sent[a] == sent[b], f"sources {a} and {b} of one event carry different messages"


def _batch_ranked(dsn: str, snap: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """``snap`` with each batch id column (``last_batch_id``, ``first_batch_id``) as the batch's rank among the
    committed ones: which Spark batch carries a `$self` group's emission depends on when the group fell due
    (the source ticks, recombine.py), not on the data; the graph and the order of the batches do."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rank = {str(b): str(i) for i, (b,) in enumerate(conn.execute(
            "SELECT batch_id FROM lineage_transactions ORDER BY batch_id").fetchall())}
        first = {t: [c for (c,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            (t,)).fetchall() if c != "received_at"] for t in snap}
    out = {}
    for table, rows in snap.items():
        cols = [c for c in first[table] if c != "last_batch_id"] + ["last_batch_id"] * ("last_batch_id" in first[table])
        at = [i for i, c in enumerate(cols) if c in ("last_batch_id", "first_batch_id")]
        out[table] = sorted(tuple(rank.get(v, v) if i in at else v for i, v in enumerate(row)) for row in rows)
    return out


def test_standalone_cluster_builds_the_same_graph_as_local_mode(standalone_cluster, kafka_bootstrap, topic_names,
                                                                pg_server, tmp_path, monkeypatch):
    messages = _demo_messages(DEMO_MESSAGES)
    assert any(headers for _, headers in messages), "the demo traffic must hold `$self` parts"
    produce(kafka_bootstrap, topic_names["events"], messages)
    # each run publishes to topics of its own; both read the same input topic
    cluster_topics = {**topic_names, **{k: f"{v}.cluster" for k, v in topic_names.items() if k != "events"}}
    create_topics(kafka_bootstrap, [cluster_topics[k] for k in ("enriched", "graph", "dlq")], partitions=1)
    local_dsn = pg_server.create_database(f"t_local_{os.getpid()}_{id(tmp_path) % 10**6}")
    cluster_dsn = pg_server.create_database(f"t_cluster_{os.getpid()}_{id(tmp_path) % 10**6}")

    for name, value in _cluster_env(tmp_path).items():   # the cluster's executors import this checkout
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LINEAGE_SPARK_EXECUTOR_MEMORY", "512m")
    _drain(standalone_cluster, kafka_bootstrap, cluster_topics, cluster_dsn, tmp_path / "cluster")
    _drain(None, kafka_bootstrap, topic_names, local_dsn, tmp_path / "local")

    local, cluster = _batch_ranked(local_dsn, snapshot(local_dsn)), _batch_ranked(cluster_dsn, snapshot(cluster_dsn))
    assert len(local["lineage_events"]) > DEMO_MESSAGES // 2, "the local run stored the demo events"
    assert local["lineage_runs"] and local["lineage_edges"] and local["lineage_quality"]
    for table in local:
        if table == "lineage_events":
            _same_events(cluster[table], local[table], local_dsn, kafka_bootstrap, topic_names["events"])
        else:
            assert cluster[table] == local[table], table
    # the cluster run really ran on the cluster: the master lists the application as finished
    apps = (tmp_path / "master.log").read_text(errors="replace")
    assert "Registered app lineage-processor" in apps
