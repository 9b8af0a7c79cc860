"""One SQL file (or SQL string) -> jobs: statements grouped into queries, views and procedures.

Limits (reported, never fatal): a statement longer than ``max_statement_chars`` is skipped; one that
takes longer than ``statement_timeout_seconds`` to analyse is abandoned (SIGALRM, main thread only);
RecursionError on deeply nested SQL is caught.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import signal
import threading
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.tokens import TokenType

from scanner.model import ScanIssue, StatementLineage, TableName, Unit
from scanner.split import CONTROL, Chunk, split_body, split_statements
from scanner.sql import SqlContext, TempTable, analyze_statement, parse_statement

__all__ = ["Limits", "DEFAULT_LIMITS", "statements_of", "units_of_sql", "job_name"]

T = TokenType
_STRINGS = {T.RAW_STRING, T.HEREDOC_STRING, T.STRING, T.NATIONAL_STRING}
_ROUTINE_KINDS = {"PROCEDURE": "PROCEDURE", "PROC": "PROCEDURE", "FUNCTION": "FUNCTION", "TRIGGER": "TRIGGER"}


@dataclass(frozen=True)
class Limits:
    max_statement_chars: int = 1_000_000
    statement_timeout_seconds: float = 20.0
    max_file_bytes: int = 200_000_000


DEFAULT_LIMITS = Limits()


class StatementTimeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(_sig, _frame):
        raise StatementTimeout(f"statement took longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_COMPOUND = re.compile(r"([\w.\[\]\"]+)\s*([-+*/%|&^])=(?!=)")


_INSERT_EXEC = re.compile(r"(?is)^(\s*INSERT\s+(?:INTO\s+)?[^\s(]+\s*(?:\([^)]*\))?\s*)EXEC(?:UTE)?\b.*$")
_OUTPUT_INTO = re.compile(r"(?is)\bOUTPUT\s+(?:inserted|deleted|\$action)\b.*?\bINTO\s+[\w.\[\]#@]+(?:\s*\([^)]*\))?")
_REPLACE_INTO = re.compile(r"(?is)^(\s*)REPLACE\s+INTO\b")


def _dialect_fixups(text: str, dialect: str) -> str:
    """Grammar sqlglot does not read, rewritten to equivalents. T-SQL: ``SET a += b`` -> ``SET a = a + b``;
    ``INSERT INTO t EXEC p`` -> an INSERT of unknown rows; ``OUTPUT ... INTO audit`` dropped. MySQL:
    ``REPLACE INTO`` -> ``INSERT INTO``."""
    if dialect in ("tsql", "fabric"):
        if "=" in text:
            text = _COMPOUND.sub(lambda m: f"{m.group(1)} = {m.group(1)} {m.group(2)}", text)
        if "EXEC" in text.upper():
            text = _INSERT_EXEC.sub(lambda m: f"{m.group(1)}SELECT NULL", text)
        if "OUTPUT" in text.upper():
            text = _OUTPUT_INTO.sub("", text)
    elif dialect in ("mysql", "", "singlestore", "doris", "starrocks"):
        text = _REPLACE_INTO.sub(lambda m: f"{m.group(1)}INSERT INTO", text)
    return text


def _expand_multitable(tree: exp.Expression) -> list[exp.Expression]:
    """``INSERT ALL INTO a ... INTO b ... SELECT`` (Snowflake, Oracle) and Hive's ``FROM src INSERT ... INSERT ...``
    as one INSERT per target, each reading the shared source."""
    if type(tree).__name__ != "MultitableInserts":
        return [tree]
    source = tree.args.get("source")
    out: list[exp.Expression] = []
    for item in tree.expressions:
        insert = item.this if type(item).__name__ == "ConditionalInsert" else item
        if not isinstance(insert, exp.Insert) or source is None:
            continue
        body = insert.expression
        if isinstance(body, exp.Select) and body.args.get("from_") is None:
            query = body.copy()
            query.set("from_", exp.From(this=source.copy() if isinstance(source, exp.Table)
                                        else exp.Subquery(this=source.copy(), alias=exp.TableAlias(
                                            this=exp.to_identifier("_src")))))
        elif isinstance(body, exp.Values) and body.expressions:
            values = body.expressions[0].expressions
            query = exp.Select(expressions=[v.copy() for v in values])
            src = source.copy() if isinstance(source, exp.Table) else exp.Subquery(
                this=source.copy(), alias=exp.TableAlias(this=exp.to_identifier("_src")))
            query.set("from_", exp.From(this=src))
        elif isinstance(source, exp.Select):
            query = source.copy()      # INSERT ALL INTO t SELECT ...: every column of the source
        else:
            continue
        out.append(exp.Insert(this=insert.this.copy(), expression=query, overwrite=insert.args.get("overwrite")))
    return out


#: Dialects whose grammar is tried, in order, when a statement does not parse in the configured one.
PARSE_FALLBACKS = {"athena": ("hive", "trino"), "redshift": ("postgres", "tsql"), "databricks": ("spark",),
                   "spark": ("databricks", "hive"), "hive": ("spark",), "trino": ("presto",), "presto": ("trino",),
                   "": ("mysql", "spark", "tsql"), "duckdb": ("postgres",), "postgres": ("redshift",),
                   "snowflake": ("",), "bigquery": ("",), "mysql": ("",), "oracle": ("",), "tsql": ("",)}


def _parse_with_fallback(text: str, dialect: str):
    try:
        return parse_statement(text, dialect)
    except RecursionError:
        raise
    except Exception as first:  # noqa: BLE001 - try a sibling grammar before reporting
        for other in PARSE_FALLBACKS.get(dialect, ()):
            try:
                return parse_statement(text, other)
            except RecursionError:
                raise
            except Exception:  # noqa: BLE001,S112
                continue
        raise first


_NOT_PLAIN = {"SELECT", "LIKE", "CLONE", "TEMP", "TEMPORARY", "VOLATILE", "GLOBAL", "LOCAL", "AS"}


def _plain_ddl(chunk: Chunk) -> bool:
    """``CREATE TABLE name (columns...)`` / ``ALTER TABLE`` of a permanent table: no lineage, only schema."""
    words = [t.text.upper() for t in chunk.tokens[:4]]
    if not words or words[0] not in ("CREATE", "ALTER") or "TABLE" not in words[1:4]:
        return False
    if any(t.text.startswith(("#", "@")) or t.token_type == T.PARAMETER for t in chunk.tokens[:8]):
        return False
    if words[0] == "ALTER":
        return not any(t.text.upper() in ("RENAME", "SWAP", "EXCHANGE") for t in chunk.tokens)
    return not any(t.text.upper() in _NOT_PLAIN for t in chunk.tokens)


def _first_word(chunk: Chunk) -> str:
    return chunk.tokens[0].text.upper() if chunk.tokens else ""


def _routine_header(chunk: Chunk) -> tuple[str, TableName | None, str]:
    """(kind, name, body text) of ``CREATE [OR ALTER|REPLACE] PROCEDURE name ... AS body``."""
    toks = chunk.tokens
    kind, i = "PROCEDURE", 0
    while i < len(toks) and toks[i].text.upper() not in _ROUTINE_KINDS:
        i += 1
    if i < len(toks):
        kind = _ROUTINE_KINDS[toks[i].text.upper()]
    i += 1
    parts: list[str] = []
    while i < len(toks) and (toks[i].token_type in (T.VAR, T.DOT, T.IDENTIFIER) or
                             (parts and parts[-1] == "." and toks[i].token_type != T.L_PAREN)):
        if toks[i].token_type == T.DOT:
            parts.append(".")
        else:
            parts.append(toks[i].text)
        i += 1
    names = [p for p in parts if p != "."]
    name = TableName(*([""] * (3 - len(names)) + names[-3:])) if names else None
    # body: a dollar-quoted / string body, else what follows the first AS / BEGIN / IS at depth 0
    for t in toks[i:]:
        if t.token_type in (T.RAW_STRING, T.HEREDOC_STRING) and len(t.text) > 10:
            return kind, name, t.text
    depth = 0
    for t in toks[i:]:
        if t.token_type == T.L_PAREN:
            depth += 1
        elif t.token_type == T.R_PAREN:
            depth -= 1
        elif depth == 0 and t.text.upper() in ("AS", "BEGIN", "IS"):
            return kind, name, chunk.text[t.start - toks[0].start:]
    return kind, name, ""


def job_name(rel_path: str, obj: str | None, ordinal: int | None = None) -> str:
    """Stable job names: ``path::object`` for objects, ``path::statement_N`` for loose statements."""
    if obj:
        return f"{rel_path}::{obj}"
    return f"{rel_path}::statement_{ordinal}"


class _FileScanner:
    def __init__(self, ctx: SqlContext, path: str, limits: Limits, line_offset: int = 0,
                 ddl_known: bool = False) -> None:
        self.ctx, self.path, self.limits, self.line_offset = ctx, path, limits, line_offset
        self.ddl_known = ddl_known
        self.issues: list[ScanIssue] = []
        self.count = 0

    def issue(self, line: int, reason: str, kind: str = "error") -> None:
        self.issues.append(ScanIssue(self.path, line + self.line_offset, reason, kind))

    def chunk_lineage(self, chunk: Chunk, line_base: int = 0) -> list[StatementLineage]:
        line = chunk.line + line_base
        end = chunk.end_line + line_base
        word = _first_word(chunk)
        if len(chunk.text) > self.limits.max_statement_chars:
            self.count += 1
            self.issue(line, f"statement of {len(chunk.text)} characters exceeds the limit "
                             f"({self.limits.max_statement_chars}); skipped")
            return []
        if word in CONTROL or word in ("ELSE",):
            return self.control(chunk, line)
        self.count += 1
        if self.ddl_known and _plain_ddl(chunk):
            return []                # pass 1 read it into the catalog already
        out: list[StatementLineage] = []
        try:
            with _deadline(self.limits.statement_timeout_seconds):
                trees = _parse_with_fallback(_dialect_fixups(chunk.text, self.ctx.dialect), self.ctx.dialect)
                for tree in [one for parsed in trees for one in _expand_multitable(parsed)]:
                    if isinstance(tree, exp.Command):
                        out.extend(self.command(tree, chunk, line, end))
                        continue
                    res = analyze_statement(tree, self.ctx, chunk.text.strip(), line, end)
                    if res is not None:
                        out.append(res)
                        for w in res.warnings:
                            self.issue(line, w, "warning")
        except StatementTimeout as exc:
            self.issue(line, str(exc))
        except RecursionError:
            self.issue(line, "statement nested too deeply to parse")
        except Exception as exc:  # noqa: BLE001 - sqlglot raises ParseError, TokenError, and others
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.issue(line, f"cannot parse ({type(exc).__name__}): {msg[:200]}")
        return out

    def command(self, tree: exp.Command, chunk: Chunk, line: int, end: int) -> list[StatementLineage]:
        """Statements sqlglot keeps as text: Redshift ``UNLOAD ('query') TO ...`` reads its query's tables."""
        if tree.name.upper() != "UNLOAD":
            return []
        m = re.search(r"\(\s*'((?:[^']|'')*)'\s*\)", chunk.text, re.S)
        if not m:
            return []
        inner, _issues = statements_of(m.group(1).replace("''", "'"), self.ctx, self.path, self.limits)
        inputs = tuple(t for st in inner for t in st.inputs)
        return [StatementLineage("UNLOAD", chunk.text.strip(), inputs, (), line=line, end_line=end)]

    def control(self, chunk: Chunk, line: int) -> list[StatementLineage]:
        """IF / WHILE conditions may read tables (EXISTS subqueries); DECLARE @t TABLE declares a temp."""
        toks = chunk.tokens
        word = _first_word(chunk)
        if word == "DECLARE" and any(t.token_type == T.TABLE for t in toks):
            for i, t in enumerate(toks):
                if t.token_type == T.PARAMETER and i + 1 < len(toks):
                    name = "@" + toks[i + 1].text
                    cols = []
                    depth = 0
                    expect = False
                    for u in toks[i + 2:]:
                        if u.token_type == T.L_PAREN:
                            depth += 1
                            expect = depth == 1
                            continue
                        if u.token_type == T.R_PAREN:
                            depth -= 1
                        elif depth == 1 and u.token_type == T.COMMA:
                            expect = True
                        elif expect and depth == 1:
                            if u.text.upper() not in ("PRIMARY", "CONSTRAINT", "UNIQUE", "INDEX", "CHECK"):
                                cols.append(u.text)
                            expect = False
                    self.ctx.temps[name.lower()] = TempTable([], {c.lower(): [] for c in cols}, cols)
                    break
            return []
        if word in ("IF", "WHILE", "ELSEIF", "ELSIF") and any(t.token_type == T.SELECT for t in toks):
            cond = chunk.text[toks[1].start - toks[0].start:] if len(toks) > 1 else ""
            cond = re.sub(r"(?is)\bTHEN\b.*$", "", cond)
            try:
                tree = parse_statement(f"SELECT 1 WHERE {cond}", self.ctx.dialect)
            except Exception:  # noqa: BLE001
                return []
            if tree:
                res = analyze_statement(tree[0], self.ctx, chunk.text.strip(), line)
                return [res] if res is not None and res.inputs else []
        return []

    def routine(self, chunk: Chunk) -> tuple[str, TableName | None, list[StatementLineage]]:
        kind, name, body = _routine_header(chunk)
        saved = self.ctx.temps
        self.ctx.temps = {}
        out: list[StatementLineage] = []
        try:
            if body:
                offset = chunk.text.find(body[:200]) if body else 0
                base = chunk.line - 1 + chunk.text[:max(offset, 0)].count("\n")
                for sub in split_body(body, self.ctx.dialect):
                    if sub.routine:
                        _k, _n, inner = self.routine(sub)
                        out.extend(inner)
                    else:
                        out.extend(self.chunk_lineage(sub, base))
        except Exception as exc:  # noqa: BLE001 - a tokenizer error in the body
            self.issue(chunk.line, f"cannot read {kind.lower()} body ({type(exc).__name__}): {str(exc)[:200]}")
        finally:
            self.ctx.temps = saved
        return kind, name, out

    def chunks(self, text: str) -> list[Chunk]:
        from scanner.dialects import splits_on_keywords
        return split_statements(text, self.ctx.dialect, keyword_mode=splits_on_keywords(self.ctx.dialect))


def statements_of(text: str, ctx: SqlContext, path: str = "<sql>",
                  limits: Limits = DEFAULT_LIMITS) -> tuple[list[StatementLineage], list[ScanIssue]]:
    """Every data-moving statement of ``text``, routines' bodies included, in order."""
    scanner = _FileScanner(ctx, path, limits)
    out: list[StatementLineage] = []
    try:
        chunks = scanner.chunks(text)
    except Exception as exc:  # noqa: BLE001 - TokenError on binary or broken text
        return [], [ScanIssue(path, 1, f"cannot tokenize ({type(exc).__name__}): {str(exc)[:200]}")]
    for chunk in chunks:
        if chunk.routine:
            out.extend(scanner.routine(chunk)[2])
        else:
            out.extend(scanner.chunk_lineage(chunk))
    return out, scanner.issues


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def units_of_sql(text: str, ctx: SqlContext, rel_path: str, limits: Limits = DEFAULT_LIMITS,
                 integration: str = "SQL", line_offset: int = 0, name_prefix: str | None = None,
                 ddl_known: bool = False) -> tuple[list[Unit], list[ScanIssue], int]:
    """Jobs of one SQL text: a view or routine is one job named after the object; every other
    statement that writes (or, for SELECT, only reads) is one job named by its ordinal in the file."""
    scanner = _FileScanner(ctx, rel_path, limits, line_offset, ddl_known)
    units: list[Unit] = []
    try:
        chunks = scanner.chunks(text)
    except Exception as exc:  # noqa: BLE001
        return [], [ScanIssue(rel_path, 1 + line_offset, f"cannot tokenize ({type(exc).__name__}): {str(exc)[:200]}")], 0
    ordinal = 0
    prefix = name_prefix or rel_path
    for chunk in chunks:
        if chunk.routine:
            kind, name, stmts = scanner.routine(chunk)
            obj = name.qualified if name else f"routine_{_digest(chunk.text)}"
            units.append(Unit(job_name(prefix, obj), rel_path, kind, integration, ctx.dialect, chunk.text.strip(),
                              chunk.line + line_offset, chunk.end_line + line_offset, tuple(stmts),
                              ctx.full(name) if name else None))
            continue
        if _first_word(chunk) not in CONTROL:
            ordinal += 1
        for k, st in enumerate(scanner.chunk_lineage(chunk)):
            job = job_name(prefix, None, ordinal) + (f".{k + 1}" if k else "")
            if (not st.outputs and st.kind != "SELECT") or (st.kind == "CREATE_TABLE" and not st.inputs):
                continue       # DDL is reported as tables (dataset events), not as jobs
            if st.kind == "CREATE_VIEW" and st.outputs:
                units.append(Unit(job_name(prefix, st.outputs[0].qualified), rel_path, "VIEW", integration,
                                  ctx.dialect, st.sql, st.line + line_offset, st.end_line + line_offset, (st,),
                                  st.outputs[0]))
                continue
            units.append(Unit(job, rel_path, "QUERY", integration, ctx.dialect, st.sql,
                              st.line + line_offset, st.end_line + line_offset, (st,)))
    return units, scanner.issues, scanner.count
