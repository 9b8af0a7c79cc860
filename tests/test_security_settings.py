"""Security basics: SASL/SSL settings reach every Kafka client; secrets never leak.

The settings must render into each client's configuration (the producer library's
``EmitterSettings.librdkafka_config()``, the processor's ``ProcessorSettings.kafka_config()`` used by
its consumers, producers and admin calls, and the options of the ``lineage_kafka`` Spark source),
and secrets (SASL / SSL key passwords, the PostgreSQL DSN password) must never appear in repr/str
of the settings, in the log of a processor run, in its metrics text, or in connection errors.
"""

from __future__ import annotations

import logging
import uuid

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry, generate_latest

from producers.settings import EmitterSettings
from stream_processor.kafka_source import KafkaStreamReader
from stream_processor.retry import (
    BackoffPolicy,
    DependencyMetrics,
    PostgresRetrier,
    PostgresUnavailableError,
    postgres_address,
    redact,
)
from stream_processor.settings import ProcessorSettings

SASL_SECRET = "sasl-Secret-7f3a9c"
KEY_SECRET = "key-Secret-2b8e1d"
PG_SECRET = "pg-Secret-91c4e0"

SECURITY = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "lineage",
            "sasl_password": SASL_SECRET, "ssl_key_password": KEY_SECRET}
RENDERED = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "lineage",
            "sasl.password": SASL_SECRET, "ssl.key.password": KEY_SECRET}


def _no_secret(text: str) -> None:
    for secret in (SASL_SECRET, KEY_SECRET, PG_SECRET):
        assert secret not in text, f"secret {secret[:6]}... leaked"


@pytest.mark.unit
def test_processor_settings_render_security_for_every_client():
    settings = ProcessorSettings(bootstrap_servers="127.0.0.1:1", **SECURITY,
                                 ssl_ca_location="/etc/ca.pem", kafka_extra={"client.id": "x"})
    conf = settings.kafka_config()
    assert {k: conf[k] for k in RENDERED} == RENDERED
    assert conf["ssl.ca.location"] == "/etc/ca.pem" and conf["client.id"] == "x"
    assert settings.kafka_config(**{"group.id": "g"})["sasl.password"] == SASL_SECRET
    options = settings.source_options()
    assert {k: options[f"kafka.{k}"] for k in RENDERED} == RENDERED
    # the lineage_kafka source's reader turns kafka.* options into its librdkafka conf
    reader = KafkaStreamReader({"kafka.bootstrap.servers": settings.bootstrap_servers, "subscribe": "t",
                                **options})
    assert {k: reader.conf[k] for k in RENDERED} == RENDERED


@pytest.mark.unit
def test_emitter_settings_render_security():
    settings = EmitterSettings(bootstrap_servers="127.0.0.1:1", **SECURITY)
    conf = settings.librdkafka_config()
    assert {k: conf[k] for k in RENDERED} == RENDERED


@pytest.mark.unit
def test_librdkafka_accepts_the_rendered_configs():
    """Each client kind the product makes is constructed from the rendered config (librdkafka validates it)."""
    processor = ProcessorSettings(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT",
                                  sasl_mechanism="PLAIN", sasl_username="u", sasl_password=SASL_SECRET)
    emitter = EmitterSettings(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="PLAIN", sasl_username="u", sasl_password=SASL_SECRET)
    Producer({**emitter.librdkafka_config(), "log_level": 0}).flush(0)
    Producer({**processor.kafka_config(), "log_level": 0}).flush(0)
    Consumer({**processor.kafka_config(), "group.id": "g", "log_level": 0}).close()
    AdminClient({**processor.kafka_config(), "log_level": 0})


@pytest.mark.unit
def test_spark_source_receives_security_options():
    import inspect

    from stream_processor import pipeline

    assert "source_options" in inspect.getsource(pipeline.read_kafka)


@pytest.mark.unit
def test_secrets_never_in_repr_or_str():
    dsn = f"postgresql://lineage:{PG_SECRET}@127.0.0.1:5432/graph"
    settings = ProcessorSettings(postgres_dsn=dsn, **SECURITY,
                                 kafka_extra={"sasl.jaas.config": f"password=\"{SASL_SECRET}\""})
    for text in (repr(settings), str(settings), f"{settings}", repr(EmitterSettings(
            bootstrap_servers="b:1", **SECURITY)), str(EmitterSettings(bootstrap_servers="b:1", **SECURITY))):
        _no_secret(text)
    assert settings.postgres_dsn == dsn  # the value itself is intact for the clients
    with pytest.raises(ValueError) as info:
        ProcessorSettings(postgres_dsn=dsn, sasl_password=SASL_SECRET, starting_offsets="nonsense")
    _no_secret(str(info.value))


@pytest.mark.unit
def test_redact_masks_dsn_passwords():
    assert redact(f"postgresql://u:{PG_SECRET}@h:5/db") == "postgresql://u:***@h:5/db"
    assert PG_SECRET not in redact(f"host=h password={PG_SECRET} dbname=x")
    assert PG_SECRET not in redact(f"host=h password='{PG_SECRET} x' dbname=x")
    assert redact(f"token {SASL_SECRET}", (SASL_SECRET,)) == "token ***"
    assert postgres_address(f"postgresql://u:{PG_SECRET}@db.example:6543/x") == "db.example:6543"
    assert BackoffPolicy(0.5, 2.0, 5.0).delay(0) == 0.5
    assert [BackoffPolicy(0.5, 2.0, 5.0).delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]


@pytest.mark.integration
def test_postgres_password_not_in_connection_errors(caplog):
    """A closed port: the store's error, the retrier's log and its give-up error never carry the password."""
    from lineage.embedded.ports import free_port
    from sink.postgres import GraphStore

    dsn = f"postgresql://lineage:{PG_SECRET}@127.0.0.1:{free_port('127.0.0.1')}/graph"
    with pytest.raises(Exception) as info:
        GraphStore(dsn).migrate()
    chain, exc = [], info.value
    while exc is not None:
        chain.append(f"{type(exc).__name__}: {exc!r} {exc}")
        exc = exc.__cause__ or exc.__context__
    _no_secret("\n".join(chain))
    caplog.set_level(logging.DEBUG)
    registry = CollectorRegistry()
    retrier = PostgresRetrier(dsn, BackoffPolicy(initial_seconds=0.05, max_interval_seconds=0.1,
                                                 max_total_seconds=0.5), DependencyMetrics.for_registry(registry))
    with pytest.raises(PostgresUnavailableError) as gave_up:
        retrier.call("merge", lambda: GraphStore(dsn).migrate())
    _no_secret(str(gave_up.value) + repr(gave_up.value))
    assert "waiting for PostgreSQL at 127.0.0.1:" in caplog.text
    _no_secret(caplog.text)
    assert registry.get_sample_value("lineage_sink_retries_total", {"dependency": "postgres", "step": "merge"}) >= 2
    assert registry.get_sample_value("lineage_waiting_for", {"dependency": "postgres"}) == 0
    _no_secret(generate_latest(registry).decode())


@pytest.mark.integration
@pytest.mark.slow
def test_processor_run_logs_and_metrics_carry_no_secret(spark, kafka_bootstrap, topic_names, pg_server, tmp_path,
                                                        caplog, capfd):
    """A real drain with a password in the DSN and SASL secrets configured (PLAINTEXT broker: librdkafka
    ignores the SASL properties) leaks neither into the log, the status lines nor the metrics text."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from schemas.codec import encode_single_object
    from stream_processor.metrics import ProcessorMetrics
    from stream_processor.runner import run_processor
    from stream_processor.testing import produce, run_event

    base = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    params = conninfo_to_dict(base)
    params["password"] = PG_SECRET  # the embedded server trusts local connections: any password works
    dsn = make_conninfo(**params)
    produce(kafka_bootstrap, topic_names["events"], [encode_single_object(run_event(job=f"s{i}")) for i in range(5)])
    settings = ProcessorSettings(
        bootstrap_servers=kafka_bootstrap, postgres_dsn=dsn, checkpoint_dir=str(tmp_path / "ck"),
        parquet_dir=str(tmp_path / "pq"), topic_events=topic_names["events"],
        topic_enriched=topic_names["enriched"], topic_graph=topic_names["graph"], topic_dlq=topic_names["dlq"],
        trigger_interval_seconds=0.5, recombine_quiet_seconds=1.0, metrics_port=0,
        sasl_username="lineage", sasl_password=SASL_SECRET, ssl_key_password=KEY_SECRET)
    caplog.set_level(logging.DEBUG)
    lines: list[str] = []
    metrics = ProcessorMetrics()
    run_processor(settings, available_now=True, spark=spark, status=lines.append, metrics=metrics,
                  timeout_seconds=240)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM lineage_events").fetchone()[0] == 5
    captured = capfd.readouterr()
    _no_secret(caplog.text)
    _no_secret("\n".join(lines))
    _no_secret(captured.out + captured.err)
    text = generate_latest(metrics.registry).decode()
    assert "lineage_waiting_for" in text and "lineage_events_consumed_total" in text
    _no_secret(text)


@pytest.mark.unit
def test_source_timeouts_reach_the_reader():
    settings = ProcessorSettings(bootstrap_servers="127.0.0.1:1", source_poll_timeout_seconds=7.5,
                                 source_probe_retry_seconds=3, chunk_timeout_seconds=9)
    reader = KafkaStreamReader({"kafka.bootstrap.servers": settings.bootstrap_servers, "subscribe": "t",
                                **settings.source_options()})
    assert (reader.poll_timeout_ms, reader.probe_retry_seconds, reader.chunk_timeout_seconds) == (7500, 3.0, 9.0)
    defaults = KafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                  **ProcessorSettings(bootstrap_servers="127.0.0.1:1").source_options()})
    assert (defaults.poll_timeout_ms, defaults.probe_retry_seconds) == (120_000, 15.0)
