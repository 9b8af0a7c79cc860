"""The compiled twins of the hot modules (schemas/_compiled.py, scripts/build_compiled.py).

- the finder loads a module's extension only when it was built from the source beside it, and the pure module again
  once that source changes (a real Cython build of a small package in a temporary directory);
- the build ``make test`` ran is complete and in use;
- compiled and pure modules give the same bytes: the staging pass's COPY text of demo and real-producer events
  (derive, ids, the annotation keys), the decoder's rows, the enrich step's hand-over records and graph changes, and
  quality annotations, computed in two interpreters, one with ``LINEAGE_PURE_PYTHON=1``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from schemas import _compiled

ROOT = Path(__file__).resolve().parent.parent
HAVE_TOOLS = importlib.util.find_spec("Cython") is not None and shutil.which(os.environ.get("CC", "cc")) is not None

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="Cython or a C compiler is missing: nothing is compiled")


def _build_module() -> object:
    spec = importlib.util.spec_from_file_location("_build_compiled_under_test", ROOT / "scripts" / "build_compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_finder_loads_a_matching_build_and_ignores_a_stale_one(tmp_path: Path) -> None:
    package = tmp_path / "hotpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "hot.py"
    source.write_text("def answer(x: str) -> str:\n    return f'answer {x}'\n")
    finder = _compiled.CompiledFinder(("hotpkg.hot",), root=tmp_path)
    assert finder.find_spec("hotpkg.hot") is None                      # not built yet
    assert _build_module().build(["hotpkg.hot"], 1, root=tmp_path) == ["hotpkg.hot"]
    assert not list(package.glob("*.c")) and not list(package.glob("*.so"))   # the source tree stays clean

    spec = finder.find_spec("hotpkg.hot")
    assert spec is not None and spec.origin.endswith(importlib.machinery.EXTENSION_SUFFIXES[0])
    assert finder.find_spec("hotpkg.other") is None                    # not listed: the usual import
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.answer(1) == "answer 1"   # annotations are not enforced (annotation_typing=False): as CPython
        assert not isinstance(module.answer, types.FunctionType)      # compiled, not bytecode
    finally:
        sys.path.remove(str(tmp_path))

    source.write_text(source.read_text() + "\n# edited after the build\n")
    assert finder.find_spec("hotpkg.hot") is None                      # stale: the pure module is imported
    assert _compiled._usable("hotpkg.hot", tmp_path)[0] == "stale"


def test_the_build_of_this_checkout_is_complete_and_in_use() -> None:
    states = _compiled.status()
    if os.environ.get(_compiled.PURE_ENV):
        pytest.skip(f"{_compiled.PURE_ENV} is set")
    if set(states.values()) == {"absent"}:
        pytest.skip("not built here: run `python scripts/build_compiled.py` (make test does)")
    assert states == dict.fromkeys(_compiled.COMPILED_MODULES, "compiled")
    import sink.derive
    import stream_processor.decode

    for module in (sink.derive, stream_processor.decode):
        assert module.__file__.endswith(importlib.machinery.EXTENSION_SUFFIXES[0]), module.__file__


#: Run in a fresh interpreter: digests of what the compiled modules compute, and which modules were compiled.
_PROBE = textwrap.dedent("""
    import hashlib, json, sys
    from datetime import UTC, datetime
    sys.path.insert(0, sys.argv[1])
    from benchmarks.derive_bench import demo_events, demo_messages, fixture_events, stage_text
    from schemas import _compiled
    from sink.postgres import annotate_versions
    from stream_processor.avro_records import encode_graph_upserts
    from stream_processor.decode import decode_record
    from stream_processor.publish import handover_record

    out = {}
    def digest(name, parts):
        h = hashlib.sha256()
        for p in parts:
            h.update(p if isinstance(p, bytes) else repr(p).encode())
        out[name] = h.hexdigest()

    events = demo_events(300) + [e for _, e in fixture_events()]
    digest("staging", [f"{t}:{x}" for t, texts in sorted(stage_text(events).items()) for x in texts])
    rows = []
    for value, headers in demo_messages(300, seed=11):
        for row in decode_record(value, headers):
            rows.append(row)
    digest("decoded", [sorted(r.items(), key=lambda kv: kv[0]) for r in rows])
    ok = [dict(r, source_topic="t", source_partition=0, source_offset=i) for i, r in enumerate(rows)
          if r["status"] == "ok"]
    digest("handover", [handover_record(r) for r in ok])
    graph = [{"node_id": f"n{i}", "name": f"ds {i}", "seen": i * 1.5, "tags": ["a", i]} for i in range(50)]
    digest("graph", list(encode_graph_upserts("lineage_nodes", graph, "node_id", 7)))
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    fields = [{"name": "a", "type": "int"}, {"name": "b", "type": "text"}]
    inputs = [
        ("00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-0000000000aa", t1, 10, {"a": 9}, fields[:1],
         [{"assertion": "not_null_a", "success": False, "column": "a"}], t0, True, 100, {"a": 0}, fields, False),
        ("00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-0000000000aa", t1, None, {}, None, [],
         None, False, None, None, None, False),
    ]
    digest("quality", annotate_versions(inputs, 3600.0))
    print(json.dumps({"digests": out,
                      "files": {n: sys.modules[n].__file__ for n in _compiled.COMPILED_MODULES if n in sys.modules}}))
""")


def _probe(pure: bool) -> dict:
    env = dict(os.environ)
    env.pop(_compiled.PURE_ENV, None)
    if pure:
        env[_compiled.PURE_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_compiled_and_pure_modules_give_the_same_results() -> None:
    if set(_compiled.status().values()) != {"compiled"}:
        pytest.skip("the modules are not all compiled here: nothing to compare")
    compiled, pure = _probe(pure=False), _probe(pure=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert compiled["files"] and all(f.endswith(suffix) for f in compiled["files"].values()), compiled["files"]
    assert pure["files"] and all(f.endswith(".py") for f in pure["files"].values()), pure["files"]
    assert compiled["digests"] == pure["digests"]
