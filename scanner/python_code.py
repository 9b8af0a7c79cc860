"""Python source -> jobs, via :mod:`ast` (pure; nothing is imported or run).

Per function (and the module body): SQL strings passed to ``spark.sql``, ``pd.read_sql`` /
``read_sql_query``, ``cursor.execute``, SQLAlchemy ``text()``, ``pl.read_database`` (constants,
f-strings and ``+`` concatenations whose parts resolve to constants); table reads
``spark.read.table`` / ``spark.table`` / ``pd.read_sql_table``; writes ``saveAsTable``, ``insertInto``,
``to_sql``, ``write_database``; and DataFrame tracing through ``select``, ``withColumn``,
``withColumnRenamed``, ``join``, ``drop``, ``filter`` / ``where``, ``groupBy().agg()``, ``alias``
over simple assignments. Whatever cannot be resolved statically is reported, never guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from scanner.files import DEFAULT_LIMITS, Limits, _FileScanner
from scanner.model import (
    AGGREGATION,
    IDENTITY,
    TRANSFORMATION,
    ColumnLineage,
    ScanIssue,
    StatementLineage,
    TableName,
    Unit,
    stronger,
)
from scanner.sql import SqlContext

__all__ = ["units_of_python"]

SQL_CALLS = {"sql", "read_sql", "read_sql_query", "execute", "executemany", "text", "read_database", "exec_driver_sql"}
READ_TABLE_CALLS = {"read_sql_table", "table"}
WRITE_CALLS = {"saveAsTable", "insertInto", "to_sql", "write_database"}
AGG_FUNCS = {"sum", "count", "avg", "mean", "min", "max", "countDistinct", "count_distinct", "first", "last",
             "collect_list", "collect_set", "stddev", "variance", "approx_count_distinct", "sumDistinct"}
_SQL_START = ("select", "with", "insert", "update", "delete", "merge", "create", "replace", "truncate", "copy")


def _split_name(text: str) -> TableName:
    parts = [p.strip("`\"[]") for p in text.split(".")]
    parts = [""] * (3 - len(parts)) + parts[-3:]
    return TableName(*parts)


@dataclass
class Frame:
    """What a DataFrame variable holds: its input tables and, per column, the source columns."""

    inputs: list[TableName]
    columns: dict[str, list[tuple[TableName, str, str]]] | None   # None: columns unknown
    indirect: list[tuple[TableName, str, str]] = field(default_factory=list)
    partial: bool = False      # columns lists only the derived ones; others pass through unknown

    def source_of(self, col: str) -> list[tuple[TableName, str, str]]:
        if self.columns is not None and col in self.columns:
            return list(self.columns[col])
        if (self.columns is None or self.partial) and len(self.inputs) == 1:
            return [(self.inputs[0], col, IDENTITY)]
        return []


class _FunctionScanner:
    def __init__(self, scanner: _FileScanner, consts: dict[str, str]) -> None:
        self.scanner = scanner
        self.consts = dict(consts)
        self.frames: dict[str, Frame] = {}
        self.statements: list[StatementLineage] = []
        self.sql_texts: list[str] = []
        self.unresolved: list[str] = []

    # -- strings -------------------------------------------------------------------------------------

    def string(self, node: ast.AST | None) -> str | None:
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.consts.get(node.id)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue) and (s := self.string(v.value)) is not None:
                    parts.append(s)
                else:
                    return None
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.string(node.left), self.string(node.right)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "text" and node.args:
            return self.string(node.args[0])
        return None

    # -- statements ----------------------------------------------------------------------------------

    def visit(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                s = self.string(stmt.value)
                if s is not None and not isinstance(stmt.value, ast.Call):
                    self.consts[name] = s
                    continue
                frame = self.frame(stmt.value)
                if frame is not None:
                    self.frames[name] = frame
                    continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call):
                    self.call(node)
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                pass

    def call(self, node: ast.Call) -> None:
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")
        if attr in WRITE_CALLS:
            self.write(node, attr)
        elif attr in SQL_CALLS and node.args and not self._consumed(node):
            self.sql(node.args[0], node.lineno, attr)

    def _consumed(self, node: ast.Call) -> bool:
        return id(node) in getattr(self, "_seen", set())

    def sql(self, arg: ast.AST, line: int, how: str) -> list[StatementLineage]:
        self._seen = getattr(self, "_seen", set())
        text = self.string(arg)
        if text is None:
            if how != "text":
                self.unresolved.append(f"line {line}: {how}() with SQL not resolvable statically")
                self.scanner.issue(line, f"{how}(): SQL text is not a constant; not scanned", "warning")
            return []
        if how in ("read_sql", "read_database") and not text.strip().lower().startswith(_SQL_START):
            st = StatementLineage("SELECT", text, (self.scanner.ctx.full(_split_name(text.strip())),), (),
                                  line=line, end_line=line)
            self.statements.append(st)
            return [st]
        self.sql_texts.append(text)
        from scanner.files import statements_of
        results, issues = statements_of(text, self.scanner.ctx, self.scanner.path, self.scanner.limits)
        for i in issues:
            self.scanner.issues.append(ScanIssue(i.path, line + i.line - 1, i.reason, i.kind))
        out = []
        for st in results:
            st2 = StatementLineage(st.kind, st.sql, st.inputs, st.outputs, st.columns, st.dataset_indirect,
                                   line + st.line - 1, line + st.end_line - 1, st.warnings)
            self.statements.append(st2)
            out.append(st2)
        return out

    # -- DataFrames ----------------------------------------------------------------------------------

    def col_name(self, node: ast.AST) -> str | None:
        s = self.string(node)
        if s is not None:
            return s
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            fname = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if fname in ("col", "column") and node.args:
                return self.string(node.args[0])
        if isinstance(node, ast.Subscript):
            return self.string(node.slice)
        return None

    def expr_columns(self, node: ast.AST, frame: Frame) -> tuple[list[tuple[TableName, str, str]], str | None]:
        """Source columns referenced by a column expression, its subtype, and its output alias."""
        alias = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("alias", "name") \
                and node.args:
            alias = self.string(node.args[0])
            node = node.func.value
        direct = self.col_name(node)
        if direct is not None and not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", "")) not in ("col", "column")):
            return list(frame.source_of(direct)), alias or direct
        subtype = TRANSFORMATION
        refs: list[str] = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                fname = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
                if fname in AGG_FUNCS:
                    subtype = AGGREGATION
                if fname in ("col", "column") and sub.args and (s := self.string(sub.args[0])):
                    refs.append(s)
                elif fname in AGG_FUNCS and sub.args and isinstance(sub.args[0], ast.Constant):
                    refs.append(str(sub.args[0].value))
            elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
                refs.append(str(sub.slice.value))
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in self.frames:
                refs.append(sub.attr)
        out = []
        for r in refs:
            out.extend((t, c, stronger(subtype, s)) for t, c, s in frame.source_of(r))
        return out, alias

    def frame(self, node: ast.AST) -> Frame | None:
        if isinstance(node, ast.Name):
            return self.frames.get(node.id)
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if not isinstance(func, ast.Attribute):
            if isinstance(func, ast.Name) and func.id in ("read_sql", "read_sql_query", "read_database") and node.args:
                return self._frame_from_sql(node)
            return None
        attr = func.attr
        if attr in ("sql", "read_sql", "read_sql_query", "read_database") and node.args:
            return self._frame_from_sql(node)
        if attr in READ_TABLE_CALLS and node.args:
            name = self.string(node.args[0])
            if name is None:
                self.unresolved.append(f"line {node.lineno}: {attr}() table name not resolvable statically")
                return None
            table = self.scanner.ctx.full(_split_name(name))
            known = self.scanner.ctx.catalog.lookup(table)
            cols = {c.name: [(table, c.name, IDENTITY)] for c in known.columns} if known else None
            self.statements.append(StatementLineage("SELECT", f"{attr}({name!r})", (table,), (), line=node.lineno,
                                                    end_line=node.lineno))
            return Frame([table], cols)
        base = self.frame(func.value)
        if base is None:
            if attr == "agg" and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Attribute) \
                    and func.value.func.attr in ("groupBy", "groupby"):
                grouped = self.frame(func.value.func.value)
                if grouped is None:
                    return None
                keys = [k for a in func.value.args if (k := self.col_name(a))]
                cols = {k: [(t, c, IDENTITY) for t, c, _ in grouped.source_of(k)] for k in keys}
                for a in node.args:
                    srcs, alias = self.expr_columns(a, grouped)
                    cols[alias or f"agg_{len(cols)}"] = [(t, c, AGGREGATION) for t, c, _ in srcs]
                ind = list(grouped.indirect) + [(t, c, "GROUP_BY") for k in keys for t, c, _ in grouped.source_of(k)]
                return Frame(grouped.inputs, cols, ind)
            return None
        if attr == "select":
            cols: dict = {}
            for a in node.args:
                if isinstance(a, ast.Constant) and a.value == "*":
                    if base.columns is None:
                        return Frame(base.inputs, None, base.indirect)
                    cols.update(base.columns)
                    continue
                srcs, alias = self.expr_columns(a, base)
                cols[alias or f"col_{len(cols)}"] = srcs
            return Frame(base.inputs, cols, base.indirect)
        if attr == "withColumn" and len(node.args) >= 2:
            name = self.string(node.args[0])
            srcs, _alias = self.expr_columns(node.args[1], base)
            cols = dict(base.columns) if base.columns is not None else {}
            if name:
                cols[name] = srcs
            return Frame(base.inputs, cols, base.indirect, partial=base.columns is None or base.partial)
        if attr == "withColumnRenamed" and len(node.args) >= 2:
            old, new = self.string(node.args[0]), self.string(node.args[1])
            if base.columns is None or old is None or new is None:
                return base
            cols = {(new if k == old else k): v for k, v in base.columns.items()}
            return Frame(base.inputs, cols, base.indirect)
        if attr == "drop":
            if base.columns is None:
                return base
            names = {self.col_name(a) for a in node.args}
            return Frame(base.inputs, {k: v for k, v in base.columns.items() if k not in names}, base.indirect)
        if attr in ("filter", "where"):
            ind = list(base.indirect)
            for a in node.args:
                text = self.string(a)
                refs = []
                if text is not None:
                    refs = [w for w in _words(text) if base.columns is None or w in (base.columns or {})]
                else:
                    srcs, _ = self.expr_columns(a, base)
                    ind.extend((t, c, "FILTER") for t, c, _s in srcs)
                for r in refs:
                    ind.extend((t, c, "FILTER") for t, c, _s in base.source_of(r))
            return Frame(base.inputs, base.columns, ind)
        if attr == "join" and node.args:
            other = self.frame(node.args[0])
            if other is None:
                return Frame(base.inputs, None, base.indirect)
            cols = None
            if base.columns is not None and other.columns is not None:
                cols = {**other.columns, **base.columns}
            ind = base.indirect + other.indirect
            on = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "on"), None)
            keys = []
            if on is not None:
                s = self.string(on)
                if s is not None:
                    keys = [s]
                elif isinstance(on, (ast.List, ast.Tuple)):
                    keys = [x for e in on.elts if (x := self.string(e))]
            for k in keys:
                ind.extend((t, c, "JOIN") for t, c, _s in base.source_of(k) + other.source_of(k))
            return Frame(base.inputs + other.inputs, cols, ind)
        if attr in ("alias", "distinct", "dropDuplicates", "cache", "persist", "repartition", "coalesce", "limit",
                    "orderBy", "sort", "union", "unionAll", "unionByName"):
            if attr.startswith("union") and node.args:
                other = self.frame(node.args[0])
                if other is not None:
                    cols = None
                    if base.columns is not None and other.columns is not None:
                        cols = {k: v + other.columns.get(k, []) for k, v in base.columns.items()}
                    return Frame(base.inputs + other.inputs, cols, base.indirect + other.indirect)
            return base
        return None

    def _frame_from_sql(self, node: ast.Call) -> Frame | None:
        self._seen = getattr(self, "_seen", set())
        self._seen.add(id(node))
        how = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        stmts = self.sql(node.args[0], node.lineno, how)
        if not stmts:
            return None
        last = stmts[-1]
        cols = None
        if last.kind == "SELECT" and last.columns:
            cols = {c.column: [(x.table, x.column, x.subtype) for x in c.sources if x.type == "DIRECT"]
                    for c in last.columns if c.column != "*"}
        return Frame(list(last.inputs), cols or None)

    def write(self, node: ast.Call, attr: str) -> None:
        func = node.func
        target_arg = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg in ("name", "table_name", "tableName")), None)
        name = self.string(target_arg)
        if name is None:
            self.unresolved.append(f"line {node.lineno}: {attr}() target not resolvable statically")
            return
        schema_kw = next((k.value for k in node.keywords if k.arg == "schema"), None)
        schema = self.string(schema_kw) if schema_kw is not None else None
        if schema and "." not in name:
            name = f"{schema}.{name}"
        target = self.scanner.ctx.full(_split_name(name))
        src_node = func.value if isinstance(func, ast.Attribute) else None
        # df.write.mode(...).saveAsTable -> walk down to the DataFrame
        while isinstance(src_node, (ast.Attribute, ast.Call)):
            if isinstance(src_node, ast.Attribute) and src_node.attr in ("write", "writeTo"):
                src_node = src_node.value
                break
            src_node = src_node.value if isinstance(src_node, ast.Attribute) else src_node.func
        frame = self.frame(src_node) if src_node is not None else None
        columns = []
        if frame is not None and frame.columns is not None:
            for col, srcs in frame.columns.items():
                from scanner.model import SourceColumn
                sc = sorted({SourceColumn(t, c, "DIRECT", s) for t, c, s in srcs})
                columns.append(ColumnLineage(col, col, tuple(sc)))
        from scanner.model import SourceColumn as _SC
        indirect = tuple(sorted({_SC(t, c, "INDIRECT", s) for t, c, s in (frame.indirect if frame else [])}))
        self.statements.append(StatementLineage(
            "INSERT" if attr == "insertInto" else "WRITE", f"{attr}({name!r})",
            tuple(frame.inputs) if frame else (), (target,), tuple(columns), indirect, node.lineno, node.lineno))


def _words(text: str) -> list[str]:
    import re
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)


def _module_consts(tree: ast.Module) -> dict[str, str]:
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            out[stmt.targets[0].id] = stmt.value.value
    return out


def units_of_python(text: str, ctx: SqlContext, rel_path: str,
                    limits: Limits = DEFAULT_LIMITS) -> tuple[list[Unit], list[ScanIssue], int]:
    """One job per function (``path::func`` / ``path::Class.method``) and one for the module body."""
    scanner = _FileScanner(ctx, rel_path, limits)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError) as exc:
        return [], [ScanIssue(rel_path, getattr(exc, "lineno", 1) or 1, f"cannot parse Python: {exc}")], 0
    consts = _module_consts(tree)
    units: list[Unit] = []
    count = 0

    def run(name: str, body: list[ast.stmt], start: int, end: int) -> None:
        nonlocal count
        ctx.temps = {}
        fs = _FunctionScanner(scanner, consts)
        fs.visit(body)
        count += len(fs.statements)
        if not fs.statements:
            return
        if not any(st.outputs for st in fs.statements) and not any(st.inputs for st in fs.statements):
            return
        sql = ";\n".join(fs.sql_texts)
        units.append(Unit(f"{rel_path}::{name}", rel_path, "FUNCTION", "PYTHON", ctx.dialect, sql, start, end,
                          tuple(fs.statements), None, tuple(fs.unresolved)))

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                run(prefix + stmt.name, stmt.body, stmt.lineno, getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno)
                walk(stmt.body, prefix + stmt.name + ".")
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body, prefix + stmt.name + ".")

    run("<module>", tree.body, 1, len(text.splitlines()) or 1)
    walk(tree.body, "")
    return units, scanner.issues, count
