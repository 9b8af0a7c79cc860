"""dbt models: Jinja-templated SELECTs whose ``ref()`` / ``source()`` resolve to tables.

A file under a ``models/`` directory of a dbt project (a ``dbt_project.yml`` above it) is one model:
``{{ ref('m') }}`` becomes the table ``m`` (in the configured schema, if any), ``{{ source('s', 't') }}``
becomes ``s.t``; ``{{ config(...) }}`` and other ``{% ... %}`` blocks are dropped; any other
``{{ expression }}`` becomes a NULL literal. The model is read as ``CREATE VIEW <model> AS <select>``
(``materialized='table'`` as a table), so it is a VIEW job named after the model.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["is_dbt_model", "render_model"]

_REF = re.compile(r"""\{\{\s*ref\(\s*['"]([^'"]+)['"]\s*(?:,\s*['"]([^'"]+)['"]\s*)?\)\s*\}\}""")
_SOURCE = re.compile(r"""\{\{\s*source\(\s*['"]([^'"]+)['"]\s*,\s*['"]([^'"]+)['"]\s*\)\s*\}\}""")
_CONFIG = re.compile(r"\{\{\s*config\((.*?)\)\s*\}\}", re.S)
_BLOCK = re.compile(r"\{%-?.*?-?%\}", re.S)
_COMMENT = re.compile(r"\{#.*?#\}", re.S)
_EXPR = re.compile(r"\{\{.*?\}\}", re.S)


def is_dbt_model(path: Path, root: Path) -> bool:
    """True for ``.sql`` files under ``models/`` of a directory holding ``dbt_project.yml`` (up to ``root``)."""
    if path.suffix.lower() != ".sql" or "models" not in path.parts:
        return False
    d = path.parent
    while True:
        if (d / "dbt_project.yml").is_file():
            return True
        if d == root or d.parent == d:
            return False
        d = d.parent


def render_model(text: str, model: str, schema: str = "") -> str:
    """The model as plain SQL: ``CREATE VIEW|TABLE <schema.model> AS <select with refs resolved>``."""
    kind = "VIEW"
    config = _CONFIG.search(text)
    if config and re.search(r"""materialized\s*=\s*['"](table|incremental)['"]""", config.group(1)):
        kind = "TABLE"
    body = _COMMENT.sub("", text)
    body = _CONFIG.sub("", body)
    body = _REF.sub(lambda m: ".".join(p for p in (schema, m.group(2) or m.group(1)) if p), body)
    body = _SOURCE.sub(lambda m: f"{m.group(1)}.{m.group(2)}", body)
    body = _BLOCK.sub("", body)
    body = _EXPR.sub("NULL", body).strip().rstrip(";")
    target = f"{schema}.{model}" if schema else model
    return f"CREATE {kind} {target} AS\n{body}"
