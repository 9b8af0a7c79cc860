"""`lineage process` / `lineage tail` flags: environment defaults, endpoints.json, clear errors."""

from __future__ import annotations

import json

import pytest

from lineage.cli import build_parser, main


@pytest.mark.unit
def test_process_without_dsn_is_a_clear_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LINEAGE_POSTGRES_DSN", raising=False)
    code = main(["process", "--bootstrap-servers", "127.0.0.1:1", "--data-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--postgres-dsn" in err and "LINEAGE_POSTGRES_DSN" in err and "lineage up" in err


@pytest.mark.unit
def test_process_settings_from_env_and_endpoints(tmp_path, monkeypatch):
    from lineage.commands.process import build_settings

    (tmp_path / "endpoints.json").write_text(json.dumps({
        "kafka_bootstrap": "127.0.0.1:9999", "postgres_dsn": "postgresql://u@h/db", "parquet_dir": "/pq",
        "topics": {"events": "e1", "enriched": "e2", "graph": "e3", "dlq": "e4"}}))
    monkeypatch.setenv("LINEAGE_MAX_OFFSETS_PER_TRIGGER", "500")
    args = build_parser().parse_args(["process", "--data-dir", str(tmp_path), "--trigger-interval-seconds", "2"])
    s = build_settings(args)
    assert (s.bootstrap_servers, s.postgres_dsn, s.parquet_dir) == ("127.0.0.1:9999", "postgresql://u@h/db", "/pq")
    assert (s.topic_events, s.topic_enriched, s.topic_graph, s.topic_dlq) == ("e1", "e2", "e3", "e4")
    assert s.max_offsets_per_trigger == 500 and s.trigger_interval_seconds == 2.0
    assert s.checkpoint_dir == f"{tmp_path}/checkpoints"


@pytest.mark.unit
def test_micro_batches_are_capped_by_default_and_zero_lifts_the_cap(tmp_path, monkeypatch, capsys):
    # a backlog (a restart after an outage, a new processor reading from the earliest offset) is read in batches
    # of the default cap, not in one batch as large as the backlog (docs/PERFORMANCE.md, session 18)
    from lineage.commands.process import build_settings
    from stream_processor.settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER

    monkeypatch.delenv("LINEAGE_MAX_OFFSETS_PER_TRIGGER", raising=False)
    base = ["process", "--data-dir", str(tmp_path), "--bootstrap-servers", "127.0.0.1:1",
            "--postgres-dsn", "postgresql://u@h/db"]
    assert build_settings(build_parser().parse_args(base)).max_offsets_per_trigger == DEFAULT_MAX_OFFSETS_PER_TRIGGER
    assert build_settings(build_parser().parse_args([*base, "--max-offsets-per-trigger", "0"])) \
        .max_offsets_per_trigger == 0
    monkeypatch.setenv("LINEAGE_MAX_OFFSETS_PER_TRIGGER", "0")
    assert build_settings(build_parser().parse_args(base)).max_offsets_per_trigger == 0
    # the help names the default (the CLI does not import the settings module to say it)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["process", "--help"])
    assert f"default {DEFAULT_MAX_OFFSETS_PER_TRIGGER:,}" in " ".join(capsys.readouterr().out.split())
    # lineage bench drains in the batches lineage process makes by default
    assert build_parser().parse_args(["bench"]).max_batch_events == DEFAULT_MAX_OFFSETS_PER_TRIGGER
