"""The server's frame: start, /healthz against the real broker and PostgreSQL, OpenAPI, keys, stop."""

from __future__ import annotations

import pytest
import requests

from stream_processor.testing import run_event
from tests.conftest import assert_eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(kafka_bootstrap: str, topic_names: dict[str, str], pg_dsn: str) -> object:
    from api.settings import ApiSettings

    return ApiSettings(postgres_dsn=pg_dsn, bootstrap_servers=kafka_bootstrap, topic_events=topic_names["events"],
                       topic_dlq=topic_names["dlq"], api_keys=["k1", "k2"])


def test_healthz_openapi_and_docs(settings: object) -> None:
    from api.testing import running_server

    with running_server(settings) as url:  # type: ignore[arg-type]
        health = requests.get(f"{url}/healthz", timeout=10)
        assert health.status_code == 200, health.text
        assert health.json() == {"status": "ok", "database": "ok", "broker": "ok"}
        spec = requests.get(f"{url}/openapi.json", timeout=10).json()
        assert {"/healthz", "/api/v1/lineage", "/api/v1/namespaces/{namespace}/datasets/{dataset}"} <= set(spec["paths"])
        assert set(spec["paths"]["/api/v1/lineage"]) == {"get", "post"}
        docs = requests.get(f"{url}/docs", timeout=10)
        assert docs.status_code == 200 and "/openapi.json" in docs.text
        assert "<script src" not in docs.text and "cdn" not in docs.text.lower()  # offline: nothing loaded from elsewhere


def test_healthz_says_which_part_is_down(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    from api.settings import ApiSettings
    from api.testing import running_server
    from lineage.embedded.ports import free_port

    dead = ApiSettings(postgres_dsn=f"postgresql://nobody@127.0.0.1:{free_port()}/x",
                       bootstrap_servers=kafka_bootstrap, topic_events=topic_names["events"])
    with running_server(dead) as url:
        health = requests.get(f"{url}/healthz", timeout=15)
        assert health.status_code == 503
        body = health.json()
        assert body["broker"] == "ok" and body["database"] != "ok"


@pytest.mark.unit
def test_api_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from api.deps import key_matches
    from api.settings import ApiSettings

    monkeypatch.setenv("LINEAGE_API_KEYS", "alpha, beta")
    s = ApiSettings(postgres_dsn="postgresql://x", bootstrap_servers="b:9092")
    assert [k.get_secret_value() for k in s.api_keys] == ["alpha", "beta"]
    assert "alpha" not in repr(s)
    assert key_matches("beta", s.api_keys) and not key_matches("gamma", s.api_keys)


def test_lineage_serve_finds_the_stack_in_endpoints_json_and_stops_gracefully_on_sigterm(
        kafka_bootstrap: str, topic_names: dict[str, str], pg_dsn: str, tmp_path: object) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import ROOT

    data_dir = Path(str(tmp_path))
    (data_dir / "endpoints.json").write_text(json.dumps(
        {"kafka_bootstrap": kafka_bootstrap, "postgres_dsn": pg_dsn, "topics": topic_names}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEAGE_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "lineage", "serve", "--port", "0", "--data-dir", str(data_dir)],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        assert "listening on http://127.0.0.1:" in line, line
        url = line.split("listening on ", 1)[1].split()[0]
        assert_eventually(lambda: _status(url) == 200, timeout=30, message="/healthz not 200")
        answer = requests.post(f"{url}/api/v1/lineage", json=run_event(), timeout=30)
        assert answer.status_code == 201, answer.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _status(url: str) -> int:
    try:
        return requests.get(f"{url}/healthz", timeout=15).status_code
    except requests.RequestException:
        return 0
