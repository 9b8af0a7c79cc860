"""Flag helpers shared by the subcommands: environment defaults, the data dir, endpoints.json."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from schemas.errors import ConfigurationError

__all__ = ["env_default", "add_data_dir", "read_endpoints", "resolve_endpoint", "ENDPOINTS_FILE"]

ENDPOINTS_FILE = "endpoints.json"


def env_default(flag: str, default: Any = None) -> Any:
    """The value of ``LINEAGE_<FLAG>`` (``--bootstrap-servers`` -> ``LINEAGE_BOOTSTRAP_SERVERS``), else ``default``."""
    name = "LINEAGE_" + flag.lstrip("-").replace("-", "_").upper()
    return os.environ.get(name, default)


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", default=env_default("--data-dir", "./lineage-data"),
        help="where `lineage up` keeps its state and endpoints.json (env LINEAGE_DATA_DIR, default ./lineage-data)",
    )


def read_endpoints(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The endpoints a running `lineage up` wrote into ``data_dir``, or None when there is none."""
    path = Path(data_dir) / ENDPOINTS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} is unreadable ({exc}); remove it or start `lineage up` again") from exc


def resolve_endpoint(value: str | None, data_dir: str, key: str, flag: str) -> str:
    """A flag / env value if given, else the one a running `lineage up` wrote, else a clear error."""
    if value:
        return value
    endpoints = read_endpoints(data_dir) or {}
    if endpoints.get(key):
        return str(endpoints[key])
    raise ConfigurationError(
        f"no {flag} given: pass {flag}, set LINEAGE_{flag.lstrip('-').replace('-', '_').upper()}, "
        f"or start `lineage up --data-dir {data_dir}` first"
    )
