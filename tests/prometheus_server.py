"""A real Prometheus server for the ops tests (Debian's `prometheus` binary), on a free port."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lineage.embedded.ports import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]


class PrometheusServer:
    """Prometheus scraping ``targets`` every second, loading the shipped alert rules."""

    def __init__(self, workdir: Path, targets: list[str], job: str = "lineage-processor") -> None:
        self.workdir = workdir
        self.targets = targets
        self.job = job
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if not binary:
            raise RuntimeError("prometheus is missing: `make test` installs it (scripts/ensure-prometheus.sh)")
        shutil.copy(ROOT / "ops" / "prometheus" / "alerts.yml", self.workdir / "alerts.yml")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}]}],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=open(self.workdir / "prometheus.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
        )
        if not wait_for_port("127.0.0.1", self.port, 30) or not self._wait_ready(60):
            raise RuntimeError(f"prometheus did not start: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")
        return self

    def _wait_ready(self, timeout: float) -> bool:
        """The port opens before the TSDB is loaded (the API answers 503 until then): wait for /-/ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as resp:
                    if resp.status == 200:
                        return True
            except OSError:  # URLError / HTTPError 503 / connection reset while starting
                pass
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus API {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def wait_for_series(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(1)
        raise AssertionError(f"no series for {expr!r} within {timeout:.0f}s")
