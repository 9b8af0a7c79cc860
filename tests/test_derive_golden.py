"""The staging pass's output is byte-identical to that of the code before the derive speed-ups (base ed0b938).

For every fixture event under tests/fixtures/openlineage/ (spec and client examples, each standard facet
example in an event, the real-producer corpus) and for 1,000 demo events (``DemoTraffic(seed=7)``, as the
benches send them), the COPY text the staging pass writes (``benchmarks/derive_bench.py``'s ``stage_text``:
derive, reduce, COPY text of every staging table and of ``stg_event_keys``) and the COPY text of the unreduced
rows of ``derive_event`` are hashed; ``tests/fixtures/derive_golden.json`` holds those hashes as the code of
ed0b938 wrote them (fixture events one by one; demo events one hash per 250 events, and the demo events staged
as 250-event batches, whose reduction merges rows across events). Regenerate it only for an intended change
of the staged rows, from the code that has it:

    PYTHONPATH=<checkout> python tests/test_derive_golden.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).parent / "fixtures" / "derive_golden.json"
DEMO_EVENTS = 1000
DEMO_BATCH = 250


def _digest(parts: dict[str, list[str]]) -> str:
    h = hashlib.sha256()
    for table in sorted(parts):
        h.update(f"\x00{table}\x00".encode())
        for text in parts[table]:
            h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:20]


def _event_parts(stored: Any) -> dict[str, list[str]]:
    """Staged COPY text of one event alone, plus the COPY text of its unreduced rows (``derive_event``)."""
    from benchmarks.derive_bench import stage_text
    from sink.derive import derive_event
    from sink.postgres import copy_text

    parts = stage_text([stored])
    try:
        rows = derive_event(stored).tables
    except ValueError as exc:   # EventValidationError: the same rejection stage_text lists
        parts["raw:error"] = [repr(exc)]
    else:
        parts.update({f"raw:{table}": [copy_text("1\t0\t", data)] for table, data in rows.items()})
    return parts


def digests() -> dict[str, dict[str, str]]:
    from benchmarks.derive_bench import demo_events, fixture_events, stage_text

    out: dict[str, dict[str, str]] = {"fixtures": {}, "demo_events": {}, "demo_batches": {}}
    for ident, stored in fixture_events():
        out["fixtures"][ident] = _digest(_event_parts(stored))
    demo = demo_events(DEMO_EVENTS)
    assert len(demo) == DEMO_EVENTS
    for start in range(0, DEMO_EVENTS, DEMO_BATCH):
        chunk = demo[start:start + DEMO_BATCH]
        per_event = {f"{i}": [_digest(_event_parts(s))] for i, s in enumerate(chunk)}
        out["demo_events"][f"{start}"] = _digest(per_event)
        out["demo_batches"][f"{start}"] = _digest(stage_text(chunk, batch_id=7, part=start // DEMO_BATCH))
    return out


@pytest.mark.unit
def test_staged_rows_equal_the_golden_of_the_code_before() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = digests()
    assert len(now["fixtures"]) > 100          # the corpus was found (a test that cannot fail is a bug)
    assert set(now["fixtures"]) == set(golden["fixtures"])
    changed = {k for k, v in now["fixtures"].items() if golden["fixtures"][k] != v}
    assert not changed, f"staged rows differ for fixture events {sorted(changed)}"
    assert now["demo_events"] == golden["demo_events"]
    assert now["demo_batches"] == golden["demo_batches"]


@pytest.mark.unit
def test_digest_sees_a_changed_row() -> None:
    """A one-character change of one staged value changes the digest (the comparison can fail)."""
    from benchmarks.derive_bench import fixture_events

    _, stored = fixture_events()[0]
    parts = _event_parts(stored)
    altered = dict(parts, stg_datasets=[t.replace("\t", "\t ", 1) for t in parts["stg_datasets"]] or [" "])
    assert _digest(altered) != _digest(parts)


class _Text(str):
    def __str__(self) -> str:
        return "not this"


@pytest.mark.unit
def test_copy_text_writes_what_field_writes_for_every_kind_of_value() -> None:
    """copy_text's inline cases give the per-value ``_field`` text, escapes included."""
    from sink.postgres import _field, copy_text

    values = ["plain", "", "tab\there", "line\nbreak", "cr\rhere", "back\\slash", "\\N", "ü → 😀", None, True,
              False, 0, 1, -7, 2**70, 1.5, _Text("sub\tclass"), _Text("sub")]
    rows = [tuple(values), tuple(reversed(values)), (), ("only",), (None,)]
    want = "".join("1\t0\t" + "\t".join(_field(v) for v in row) + "\n" for row in rows)
    assert copy_text("1\t0\t", rows) == want
    assert copy_text("1\t0\t", []) == ""


@pytest.mark.unit
def test_keys_text_is_the_json_modules_text_for_any_character() -> None:
    """keys_to_text (orjson when its text is printable ASCII) writes what ``json.dumps`` wrote before."""
    from sink.annotations_lookup import EventKeys, OutputVersion, keys_to_text

    points = [*range(0x3000), *range(0xD7F0, 0xE010), 0xFEFF, 0xFFFD, 0xFFFF, 0x1F600, 0x10FFFF]
    for c in points:
        text = f"a{chr(c)}b"
        keys = EventKeys("h", [text, "p2"], [OutputVersion("v", "q", "n", text)], {"n": text, text: "x"})
        want = json.dumps({"p": keys.provenance_ids, "o": [["v", "q", "n", text]], "n": keys.names},
                          separators=(",", ":"))
        assert keys_to_text(keys) == want, hex(c)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    import sink

    print(f"golden from {sink.__file__}", file=sys.stderr)
    GOLDEN.write_text(json.dumps(digests(), indent=0, sort_keys=True) + "\n")
