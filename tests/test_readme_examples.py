"""The README's "Five minutes with the demo" commands run as written against demo traffic.

The graph is built from the demo traffic that ``lineage up`` publishes (``DemoTraffic(seed=0)``, the same
messages in the same order), loaded through the batch path into a fresh PostgreSQL database; an
``endpoints.json`` in ``./lineage-data`` points the commands at it, as a running ``lineage up`` would. Each
command is run through ``bash`` exactly as the README writes it, and must exit 0 and print (or write)
something about the names it asks for.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from producers.demo import DemoTraffic

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DEMO_MESSAGES = 1_500   # about 30 s of `lineage up`'s default demo rate


def readme_demo_commands() -> list[str]:
    """The command lines of the first bash block under the README's "Five minutes with the demo"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Five minutes with the demo", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's demo section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip().startswith("lineage ")]


@pytest.mark.unit
def test_readme_names_demo_datasets():
    """Every dataset name the README's demo commands quote is one the demo traffic writes."""
    traffic = DemoTraffic(seed=0)
    known = {f"{d.namespace}/{d.name}" for d in traffic.datasets}
    quoted = {arg for cmd in readme_demo_commands() for arg in shlex.split(cmd, comments=True) if "://" in arg}
    assert quoted, "the README's demo commands name no dataset"
    assert quoted <= known, f"not in the demo traffic: {sorted(quoted - known)}"


def _demo_files(directory: Path) -> None:
    lines = []
    for message in DemoTraffic(seed=0).take(DEMO_MESSAGES):
        if message.subject is not None:
            lines.append(json.dumps({**message.value, "subject": message.subject}))
        else:
            lines.append(json.dumps(message.value))
    (directory / "demo.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_readme_demo_commands_run_as_written(tmp_path, pg_dsn):
    lineage = shutil.which("lineage")
    assert lineage, "the `lineage` console script is not on PATH: pip install -e '.[dev]'"
    events_dir = tmp_path / "events"
    events_dir.mkdir()
    _demo_files(events_dir)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("LINEAGE_POSTGRES_DSN", None)
    loaded = subprocess.run([sys.executable, "-m", "lineage", "load", str(events_dir), "--postgres-dsn", pg_dsn,
                             "--engine", "local"], capture_output=True, text=True, timeout=300, env=env)
    assert loaded.returncode == 0, loaded.stderr
    data_dir = tmp_path / "lineage-data"
    data_dir.mkdir()
    (data_dir / "endpoints.json").write_text(json.dumps({"postgres_dsn": pg_dsn}), encoding="utf-8")

    commands = readme_demo_commands()
    assert len(commands) >= 5
    for command in commands:
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                                timeout=180, env=env)
        assert result.returncode == 0, f"{command!r} exited {result.returncode}: {result.stderr}"
        args = shlex.split(command, comments=True)
        if "--output" in args:
            output = tmp_path / args[args.index("--output") + 1]
            assert output.exists() and output.stat().st_size > 0, f"{command!r} wrote nothing"
            continue
        assert result.stdout.strip(), f"{command!r} printed nothing"
        if args[1] == "search":
            assert args[2] in result.stdout, f"{command!r} found no {args[2]!r}"
        named = [a for a in args if "://" in a]
        if args[1] in {"show", "upstream"} and named:
            assert named[0].rsplit("/", 1)[1] in result.stdout, f"{command!r} does not name its node"
