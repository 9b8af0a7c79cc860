"""The JSON documents under tests/fixtures/openlineage/ (specs' examples, real producers' events, invalid ones), for
tests that run a codec or scanner over real material."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "openlineage"


def fixture_documents() -> Iterator[Any]:
    """Every JSON value of the fixtures tree, a file's list item by item; files that are not JSON are skipped."""
    for path in sorted(FIXTURES.rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        yield from doc if isinstance(doc, list) else [doc]
