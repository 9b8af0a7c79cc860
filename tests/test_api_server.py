"""The server's frame: start, /healthz against the real broker and PostgreSQL, OpenAPI, keys, stop."""

from __future__ import annotations

import pytest
import requests

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
        assert "/healthz" in spec["paths"]


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
