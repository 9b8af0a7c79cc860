"""The edges: walk files, scan them in parallel, build events, keep the scan manifest.

Order does not matter: a first pass reads the DDL of every SQL file (CREATE TABLE / VIEW,
ALTER TABLE) into one catalog, the second pass analyses every statement against it.
Per-directory settings come from ``lineage-scan.toml`` (``dialect``, ``default_database``,
``default_schema``), applying to that directory and below.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from scanner.catalog import Catalog, load_schema_file
from scanner.dbt import is_dbt_model, render_model
from scanner.dialects import canonical_dialect
from scanner.events import Naming, dataset_event, event_digest, job_event, retraction_event
from scanner.files import DEFAULT_LIMITS, Limits, units_of_sql
from scanner.model import FileResult, ScanIssue, ScanResult, TableSchema
from scanner.split import split_statements
from scanner.sql import SqlContext, analyze_statement, parse_statement

__all__ = ["scan", "ScanOptions", "walk_files", "CONFIG_FILE", "SQL_SUFFIXES"]

CONFIG_FILE = "lineage-scan.toml"
SQL_SUFFIXES = {".sql", ".hql", ".ddl", ".dml", ".prc", ".vw", ".tab", ".psql", ".bql"}
PY_SUFFIXES = {".py"}
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", ".tox", "dbt_packages", ".mypy_cache"}
#: In a dbt project (beside dbt_project.yml) only models/ holds lineage; these hold Jinja macros and tests.
_DBT_SKIP_DIRS = {"macros", "snapshots", "analyses", "tests", "seeds", "target", "logs"}


@dataclass(frozen=True)
class ScanOptions:
    dialect: str = ""
    default_database: str = ""
    default_schema: str = ""
    limits: Limits = DEFAULT_LIMITS


@dataclass(frozen=True)
class _Task:
    path: str
    rel: str
    options: ScanOptions
    dbt: bool = False


def walk_files(paths: Iterable[str | os.PathLike[str]], base: ScanOptions) -> list[_Task]:
    """SQL and Python files under ``paths``, sorted; each with its directory's options."""
    tasks: list[_Task] = []
    cache: dict[Path, ScanOptions] = {}
    for p in paths:
        root = Path(p)
        if root.is_file():
            files, rel_root = [root], root.parent
        else:
            files, rel_root = [], root
            for dirpath, dirnames, filenames in os.walk(root):
                skip = _SKIP_DIRS | (_DBT_SKIP_DIRS if os.path.isfile(os.path.join(dirpath, "dbt_project.yml"))
                                     else set())
                dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
                files.extend(Path(dirpath) / f for f in sorted(filenames))
        top = rel_root.resolve()
        for f in files:
            if f.suffix.lower() not in SQL_SUFFIXES | PY_SUFFIXES:
                continue
            # configuration is read from the scanned root down only
            opts = base
            d = f.parent.resolve()
            chain = []
            while True:
                chain.append(d)
                if d == top or d.parent == d:
                    break
                d = d.parent
            for directory in reversed(chain):
                cfg = directory / CONFIG_FILE
                if directory not in cache:
                    if cfg.is_file():
                        data = tomllib.loads(cfg.read_text(encoding="utf-8"))
                        opts = replace(opts, dialect=canonical_dialect(data.get("dialect", opts.dialect)),
                                       default_database=data.get("default_database", opts.default_database),
                                       default_schema=data.get("default_schema", opts.default_schema))
                    cache[directory] = opts
                else:
                    opts = cache[directory]
            tasks.append(_Task(str(f), f.resolve().relative_to(top).as_posix() if f.resolve().is_relative_to(top)
                               else f.name, opts, is_dbt_model(f.resolve(), top)))
    return tasks


def _read_text(path: str, limits: Limits) -> tuple[str | None, ScanIssue | None, str]:
    try:
        size = os.path.getsize(path)
        if size > limits.max_file_bytes:
            return None, ScanIssue(path, 1, f"file of {size} bytes exceeds the limit ({limits.max_file_bytes})"), ""
        raw = Path(path).read_bytes()
    except OSError as exc:
        return None, ScanIssue(path, 1, f"cannot read: {exc}"), ""
    if b"\x00" in raw[:8192]:
        if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
            try:
                return raw.decode("utf-16"), None, ""
            except UnicodeDecodeError:
                pass
        return None, ScanIssue(path, 1, "binary file (NUL bytes), skipped"), ""
    text = raw.decode("utf-8-sig", errors="replace")
    return text, None, ""


# -- worker functions (module level: they run in a process pool) ------------------------------------

_CATALOG = Catalog()


def _init_worker(catalog: Catalog) -> None:
    global _CATALOG
    _CATALOG = catalog


def _ddl_of(task: _Task) -> tuple[str, list[TableSchema], list[TableSchema]]:
    """Pass 1: what CREATE TABLE / VIEW and ALTER TABLE statements of one SQL file declare."""
    if Path(task.path).suffix.lower() not in SQL_SUFFIXES:
        return task.rel, [], []
    text, _issue, _ = _read_text(task.path, task.options.limits)
    if text and task.dbt:
        text = render_model(text, Path(task.path).stem, task.options.default_schema)
    if not text or not _mentions_ddl(text):
        return task.rel, [], []
    o = task.options
    ctx = SqlContext(o.dialect, Catalog(), o.default_database, o.default_schema)
    try:
        chunks = split_statements(text, o.dialect, keyword_mode=o.dialect in ("tsql", "fabric"))
    except Exception:  # noqa: BLE001 - pass 2 reports it
        return task.rel, [], []
    for chunk in chunks:
        words = [t.text.upper() for t in chunk.tokens[:8]]
        if not words or words[0] not in ("CREATE", "ALTER", "USE") or chunk.routine:
            continue
        if words[0] != "USE" and not any(w in ("TABLE", "VIEW") for w in words):
            continue
        if len(chunk.text) > o.limits.max_statement_chars:
            continue
        try:
            for tree in parse_statement(chunk.text, o.dialect):
                analyze_statement(tree, ctx, chunk.text)
        except Exception:  # noqa: BLE001,S112 - pass 2 reports parse errors
            continue
    return task.rel, list(ctx.learnt), list(ctx.catalog)


def _mentions_ddl(text: str) -> bool:
    low = text.lower()
    return "create" in low or "alter" in low


def _scan_file(task: _Task) -> FileResult:
    """Pass 2: one file's jobs, DDL tables and issues."""
    o = task.options
    result = FileResult(task.rel)
    text, issue, _ = _read_text(task.path, o.limits)
    if issue is not None:
        result.issues.append(ScanIssue(task.rel, issue.line, issue.reason))
        return result
    assert text is not None
    if task.dbt:
        text = render_model(text, Path(task.path).stem, o.default_schema)
    catalog = Catalog(_CATALOG)
    ctx = SqlContext(o.dialect, catalog, o.default_database, o.default_schema)
    if Path(task.path).suffix.lower() in PY_SUFFIXES:
        from scanner.python_code import units_of_python
        units, issues, count = units_of_python(text, ctx, task.rel, o.limits)
    else:
        units, issues, count = units_of_sql(text, ctx, task.rel, o.limits, ddl_known=True)
        if task.dbt:    # one model, one job: named after the model, as dbt's own integration types it
            units = [replace(u, name=f"{task.rel}::{Path(task.path).stem}", integration="DBT", job_type="MODEL",
                             object_name=u.outputs[0] if u.outputs else None) for u in units[:1]]
    result.units, result.issues, result.statements = units, issues, count
    return result


# -- the scan ---------------------------------------------------------------------------------------

def _progress(done: int, total: int, stream) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    stream.write(f"\rscanning [{'#' * filled}{'.' * (width - filled)}] {done}/{total} files")
    if done == total:
        stream.write("\n")
    stream.flush()


def _map(func: Callable, tasks: Sequence, jobs: int, catalog: Catalog | None,
         on_done: Callable[[int], None] | None = None) -> list:
    if jobs <= 1 or len(tasks) < 4:
        _init_worker(catalog or Catalog())
        out = []
        for i, t in enumerate(tasks):
            out.append(func(t))
            if on_done:
                on_done(i + 1)
        return out
    results: list = [None] * len(tasks)
    chunk = max(1, min(32, len(tasks) // (jobs * 8) or 1))
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(catalog or Catalog(),)) as pool:
        for i, r in enumerate(pool.map(func, tasks, chunksize=chunk)):
            results[i] = r
            if on_done:
                on_done(i + 1)
    return results


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def scan(paths: Iterable[str | os.PathLike[str]] | str, *, dialect: str = "", default_database: str = "",
         default_schema: str = "", namespace: str = "sql://default", job_namespace: str = "code-scan",
         namespace_map: Sequence[tuple[str, str]] = (), schema_files: Sequence[str] = (),
         jobs: int | None = None, state_path: str | os.PathLike[str] | None = None,
         event_time: str | None = None, limits: Limits = DEFAULT_LIMITS, progress: bool | None = None,
         repo_url: str = "") -> ScanResult:
    """Scan SQL and Python files into jobs, DDL tables and OpenLineage events.

    ``state_path``: the scan manifest (JSON). With it, an unchanged job keeps its ``eventTime`` so a
    re-scan writes byte-identical events, and a job in the manifest but no longer in the code gets a
    retraction event (:func:`scanner.events.retraction_event`). Without it ``event_time`` (default:
    now) stamps every event.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    base = ScanOptions(canonical_dialect(dialect), default_database, default_schema, limits)
    tasks = walk_files(paths, base)
    jobs = jobs or os.cpu_count() or 1
    catalog = Catalog()
    for sf in schema_files:
        catalog.merge(load_schema_file(sf))
    declared: list[tuple[str, TableSchema]] = []
    for rel, learnt, known in _map(_ddl_of, tasks, jobs, None):
        for t in known:
            catalog.add(t)
        declared.extend((rel, t) for t in learnt)
    show = sys.stderr.isatty() if progress is None else progress
    on_done = (lambda n: _progress(n, len(tasks), sys.stderr)) if show and tasks else None
    files: list[FileResult] = _map(_scan_file, tasks, jobs, catalog, on_done)
    result = ScanResult(files=len(tasks))
    tables: dict[tuple, tuple[TableSchema, str]] = {}
    for rel, t in declared:
        tables.setdefault(t.table.key(), (catalog.lookup(t.table) or t, rel))
    for fr in files:
        result.units.extend(fr.units)
        result.issues.extend(fr.issues)
        result.statements += fr.statements
    result.tables = [tables[k][0] for k in sorted(tables)]
    naming = Naming(namespace, job_namespace, tuple(namespace_map), repo_url)
    result.events = _events(result, tables, naming, catalog, state_path, event_time)
    return result


def _events(result: ScanResult, tables: dict, naming: Naming, catalog: Catalog,
            state_path: str | os.PathLike[str] | None, event_time: str | None) -> list[dict]:
    state: dict = {"jobs": {}, "datasets": {}}
    if state_path is not None and Path(state_path).is_file():
        try:
            state = json.loads(Path(state_path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {"jobs": {}, "datasets": {}}
    now = event_time or _now()
    new_state: dict = {"jobs": {}, "datasets": {}}
    events: list[dict] = []

    def stamp(kind: str, key: str, build: Callable[[str], dict]) -> None:
        draft = build("1970-01-01T00:00:00Z")
        digest = event_digest(draft)
        prev = state.get(kind, {}).get(key)
        t = prev["eventTime"] if prev and prev.get("digest") == digest and event_time is None else now
        new_state[kind][key] = {"digest": digest, "eventTime": t}
        events.append(build(t))

    seen_names: dict[str, int] = {}
    for key in sorted(tables):
        table, path = tables[key]
        stamp("datasets", table.table.qualified, lambda t, table=table, path=path: dataset_event(table, naming, t, path))
    for unit in sorted(result.units, key=lambda u: (u.path, u.line, u.name)):
        n = seen_names.get(unit.name, 0)
        seen_names[unit.name] = n + 1
        if n:
            unit = replace(unit, name=f"{unit.name}#{n + 1}")
        stamp("jobs", unit.name, lambda t, unit=unit: job_event(unit, naming, t, catalog))
    for name in sorted(set(state.get("jobs", {})) - set(new_state["jobs"])):
        if state["jobs"][name].get("retracted"):
            continue
        events.append(retraction_event(name, naming, now))
        result.retracted.append(name)
        new_state["jobs"][name] = {"digest": "", "eventTime": now, "retracted": True}
    if state_path is not None:
        Path(state_path).parent.mkdir(parents=True, exist_ok=True)
        Path(state_path).write_text(json.dumps(new_state, indent=1, sort_keys=True), encoding="utf-8")
    return events
