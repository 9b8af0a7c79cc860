"""Static checks of what ships in ops/ and docker-compose.yml (no Docker engine runs here).

- promtool accepts the scrape config and the alert rules;
- the compose file parses, pins every image, references only files that exist, uses the
  LINEAGE_* variables the code reads, the topic names of the code, and the ports the
  Prometheus scrape config expects;
- the Grafana provisioning points at the dashboard folder and the dashboard is valid JSON
  whose panels all query the provisioned datasource.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "ops"
pytestmark = pytest.mark.unit


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _promtool() -> str:
    path = shutil.which("promtool")
    if not path:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package (scripts/ensure-prometheus.sh)")
    return path


def test_promtool_accepts_rules() -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(OPS / "prometheus" / "alerts.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 rules found" in result.stdout


def test_promtool_accepts_scrape_config(tmp_path: Path) -> None:
    # The shipped config names the rule file by its in-container path; check it beside a copy.
    config = (OPS / "prometheus" / "prometheus.yml").read_text().replace("/etc/prometheus/alerts.yml", "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(OPS / "prometheus" / "alerts.yml", tmp_path / "alerts.yml")
    result = subprocess.run([_promtool(), "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_images_are_pinned() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        image = service.get("image")
        assert image, f"service {name} has no image"
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), f"{name}: image {image!r} is not pinned"


def test_compose_references_existing_files() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: mounts missing {source}"
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), f"{name}: missing Dockerfile"


def test_compose_topics_match_code() -> None:
    from lineage.embedded.broker import DEFAULT_TOPICS

    command = "\n".join(_compose()["services"]["kafka-init"]["command"])
    topics = re.search(r"for t in ([^;]+);", command).group(1).split()
    assert sorted(topics) == sorted(DEFAULT_TOPICS)


def test_compose_metrics_ports_match_scrape_config() -> None:
    services = _compose()["services"]
    scrape = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for target in targets:
        host, port = target.split(":")
        assert host in services, f"scrape target {target} names no compose service"
        env = services[host].get("environment", {})
        assert str(env.get("LINEAGE_METRICS_PORT")) == port, f"{host} exposes metrics on another port than {port}"
        assert any(str(p).endswith(f":{port}") for p in services[host].get("ports", [])), f"{host}:{port} not published"


def test_compose_uses_only_variables_the_code_reads() -> None:
    code = "\n".join(p.read_text(errors="replace") for d in ("lineage", "producers", "stream_processor", "sink", "schemas")
                     for p in (ROOT / d).rglob("*.py"))
    services = _compose()["services"]
    names = {key for s in services.values() for key in (s.get("environment") or {}) if key.startswith("LINEAGE_")}
    assert names, "compose sets no LINEAGE_ variables"
    for name in sorted(names):
        suffix = name[len("LINEAGE_"):]
        flag = "--" + suffix.lower().replace("_", "-")
        read = name in code or flag in code or re.search(rf"\b{suffix.lower()}\s*:", code)
        assert read, f"docker-compose sets {name}, which no code reads (no {name}, flag {flag} or settings field)"


def test_grafana_provisioning_and_dashboard() -> None:
    datasources = yaml.safe_load((OPS / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = datasources["datasources"][0]["uid"]
    providers = yaml.safe_load((OPS / "grafana" / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboards = list((OPS / "grafana" / "dashboards").glob("*.json"))
    assert dashboards
    for path in dashboards:
        dash = json.loads(path.read_text())
        assert dash["panels"], f"{path.name} has no panels"
        for panel in dash["panels"]:
            assert panel["datasource"]["uid"] == uid
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
