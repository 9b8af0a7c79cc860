"""SQL text -> statement lineage: parse, qualify, trace (pure; no I/O).

:func:`analyze_sql` is the entry point. A :class:`SqlContext` carries what earlier statements
taught (DDL schemas, temporary tables, ``USE db``) to later ones within a file or procedure.
Temporary tables (``#t``, ``@t``, ``CREATE TEMP[ORARY] TABLE/VIEW``) are followed through: a
statement reading one reads what built it, and they are never reported as datasets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from scanner.catalog import Catalog, apply_alter, schema_from_create, table_name
from scanner.columns import ColumnTracer, Src, to_source_columns
from scanner.model import IDENTITY, ColumnDef, ColumnLineage, StatementLineage, TableName, TableSchema

__all__ = ["SqlContext", "TempTable", "analyze_sql", "analyze_statement", "parse_statement"]

_DB, _CAT = "__scan_db__", "__scan_catalog__"


@dataclass
class TempTable:
    inputs: list[TableName]
    columns: dict[str, list[Src]]
    order: list[str]


@dataclass
class SqlContext:
    """What a file or procedure learnt so far; ``catalog`` is shared by the whole scan."""

    dialect: str = ""
    catalog: Catalog = field(default_factory=Catalog)
    default_database: str = ""
    default_schema: str = ""
    use_db: str = ""
    temps: dict[str, TempTable] = field(default_factory=dict)
    learnt: list[TableSchema] = field(default_factory=list)

    def full(self, name: TableName) -> TableName:
        """Apply ``USE db`` and the configured default database / schema to a name as written."""
        cat, db = name.catalog, name.db
        if not db and (self.use_db or self.default_schema):
            db = self.use_db or self.default_schema
        if not cat and db and self.default_database:
            cat = self.default_database
        return TableName(cat, db, name.name)


def _is_temp_ref(name: TableName, ctx: SqlContext) -> bool:
    return name.name.startswith(("#", "@")) or (not name.db and name.name.lower() in ctx.temps)


def _temp_key(name: TableName) -> str:
    return name.name.lower()


def _create_is_temp(create: exp.Create) -> bool:
    props = create.args.get("properties")
    if props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
        return True
    return False


@functools.lru_cache(maxsize=64)
def dialect_of(name: str) -> Dialect:
    """The sqlglot Dialect instance for a canonical name (cached: sqlglot resolves names on every call)."""
    return Dialect.get_or_raise(name or None)


def parse_statement(sql: str, dialect: str) -> list[exp.Expression]:
    """sqlglot's parse of one chunk (may hold several statements when no ';' separated them)."""
    return [e for e in sqlglot.parse(sql, read=dialect_of(dialect)) if e is not None]


#: qualify options tried in turn: alias references expanded, then not, then columns left as written.
_QUALIFY_ATTEMPTS = ({"expand_alias_refs": True}, {"expand_alias_refs": False},
                     {"expand_alias_refs": False, "qualify_columns": False})


def _plain_projections(query: exp.Expression) -> list[exp.Expression] | None:
    """The projections of a plain SELECT without stars (as written), else None."""
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    projections = list(query.expressions)
    if any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
           for p in projections):
        return None
    return projections


class _Spelling:
    """Maps normalised identifiers back to how the code spelt them."""

    def __init__(self, tree: exp.Expression) -> None:
        self.names: dict[str, str] = {}
        for ident in tree.find_all(exp.Identifier):
            self.names.setdefault(ident.this.lower(), ident.this)

    def __call__(self, text: str) -> str:
        return self.names.get(text.lower(), text)


def _clean_expr(expr: exp.Expression, spell: _Spelling, dialect: str) -> str:
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Identifier):
            return exp.Identifier(this=spell(node.this), quoted=False)
        return node
    try:
        return expr.copy().transform(fix).sql(dialect=dialect_of(dialect))
    except Exception:  # noqa: BLE001 - the text is informative only
        return expr.sql()


def _identifier_function(table: exp.Table) -> TableName | None:
    """``IDENTIFIER('db.t')`` / ``IDENTIFIER(db.t)`` (Snowflake, Databricks): the table it names, when constant."""
    node = table.this
    arg = None
    if type(node).__name__ == "DynamicIdentifier":
        arg = node.this
    elif isinstance(node, exp.Anonymous) and node.name.lower() == "identifier" and len(node.expressions) == 1:
        arg = node.expressions[0]
    if isinstance(arg, exp.Literal) and arg.is_string:
        text = arg.this
    elif isinstance(arg, (exp.Column, exp.Identifier, exp.Dot)) and not arg.find(exp.Parameter, exp.Placeholder):
        text = arg.sql()
    else:
        return None
    parts = [p.strip('"`[]') for p in text.split(".")]
    if not all(p and p[0] not in "$:?@" for p in parts):
        return None
    return TableName(*([""] * (3 - len(parts)) + parts[-3:]))


class _Analyzer:
    def __init__(self, stmt: exp.Expression, ctx: SqlContext) -> None:
        self.stmt, self.ctx, self.dialect = stmt, ctx, ctx.dialect
        self.spell = _Spelling(stmt)
        self.cte_names = {c.alias_or_name.lower() for c in stmt.find_all(exp.CTE)}
        self.warnings: list[str] = []

    # -- names -----------------------------------------------------------------------------------

    def written(self, table: exp.Table, target: bool = False) -> TableName | None:
        """A physical or temp table as written; None for table functions, stages and (unless it is the
        statement's ``target``) CTE references."""
        if not isinstance(table.this, (exp.Identifier, exp.Parameter, exp.Dot)):
            return _identifier_function(table)
        name = table_name(table)
        if not name.name:
            return None
        if not target and not name.db and not name.catalog and name.name.lower() in self.cte_names:
            return None
        return name

    def tables_read(self, node: exp.Expression | None, exclude: set[int] = frozenset()) -> list[TableName]:
        out: list[TableName] = []
        if node is None:
            return out
        for t in node.find_all(exp.Table):
            if id(t) in exclude:
                continue
            name = self.written(t)
            if name is None:
                continue
            out.extend(self.expand(name))
        return out

    def expand(self, name: TableName) -> list[TableName]:
        if _is_temp_ref(name, self.ctx):
            temp = self.ctx.temps.get(_temp_key(name))
            return list(temp.inputs) if temp else []
        return [self.ctx.full(name)]

    def from_qualified(self, table: exp.Table) -> TableName | None:
        if not isinstance(table.this, (exp.Identifier, exp.Parameter, exp.Dot)):
            return None
        raw = table_name(table)
        cat = "" if raw.catalog.lower() == _CAT else self.spell(raw.catalog)
        db = "" if raw.db.lower() == _DB else self.spell(raw.db)
        name = raw.name
        if name.startswith(("#", "@")):
            name = name[0] + self.spell(name[1:])
        else:
            name = self.spell(name)
        return TableName(cat, db, name)

    def physical(self, table: exp.Table) -> TableName | None:
        name = self.from_qualified(table)
        if name is None:
            return None
        if _is_temp_ref(name, self.ctx):
            return name
        return self.ctx.full(name)

    def temp_columns(self, name: TableName) -> dict[str, list[Src]] | None:
        if not _is_temp_ref(name, self.ctx):
            return None
        temp = self.ctx.temps.get(_temp_key(name))
        return temp.columns if temp else {}

    # -- column lineage ----------------------------------------------------------------------------

    def schema_for(self, query: exp.Expression) -> dict:
        """sqlglot's nested schema for the tables ``query`` reads that the catalog or temps know."""
        mapping: dict = {}
        for t in query.find_all(exp.Table):
            name = self.written(t)
            if name is None:
                continue
            cols: list[tuple[str, str]] | None = None
            if _is_temp_ref(name, self.ctx):
                temp = self.ctx.temps.get(_temp_key(name))
                if temp and temp.order:
                    cols = [(c, "UNKNOWN") for c in temp.order]
            else:
                known = self.ctx.catalog.lookup(self.ctx.full(name)) or self.ctx.catalog.lookup(name)
                if known is not None and known.columns:
                    cols = [(c.name, c.type or "UNKNOWN") for c in known.columns]
            if cols is None:
                continue
            for c, _ty in cols:
                self.spell.names.setdefault(c.lower(), c)
            cat = name.catalog or _CAT
            db = name.db or _DB
            key_name = name.name
            if key_name.startswith("#"):
                key_name = key_name  # tokenised as temporary identifier; the name keeps no '#'
            mapping.setdefault(cat, {}).setdefault(db, {})[t.name] = {c: ty for c, ty in cols}
        return mapping

    def trace(self, query: exp.Expression) -> tuple[list[tuple[str, str, list[Src]]], list[Src]]:
        """``[(output name, expression text, sources)]`` and dataset-level indirect sources."""
        schema = self.schema_for(query)
        original = _plain_projections(query)
        qualified = None
        error: Exception | None = None
        for options in _QUALIFY_ATTEMPTS:
            try:
                qualified = qualify(query.copy(), dialect=dialect_of(self.dialect), schema=schema or None, db=_DB,
                                    catalog=_CAT, validate_qualify_columns=False, quote_identifiers=False,
                                    identify=False, **options)
                break
            except RecursionError:
                raise
            except Exception as exc:  # noqa: BLE001 - sqlglot raises many types on odd grammar
                error = exc
        if qualified is None:
            self.warnings.append(f"column lineage skipped: {type(error).__name__}: {str(error)[:120]}")
            return [], []
        root = build_scope(qualified)
        if root is None:
            return [], []
        tracer = ColumnTracer(self.physical, self.temp_columns)
        sp = self.spell
        outs = []
        traced = tracer.outputs(root)
        same = original is not None and len(original) == len(traced)
        for i, (name, e, srcs) in enumerate(traced):
            if same:
                proj = original[i]
                inner = proj.this if isinstance(proj, exp.Alias) else proj
                text = inner.name if isinstance(inner, exp.Column) and not inner.table else \
                    inner.sql(dialect=dialect_of(self.dialect))
                if not isinstance(proj, (exp.Alias, exp.Column)):
                    name = text          # an unnamed expression is named by its text, as written
            else:
                text = _clean_expr(e, sp, self.dialect)
            outs.append((sp(name), text, [(t, sp(c), ty, sub, m) for t, c, ty, sub, m in srcs]))
        for t, c, ty, sub, m in tracer.star_sources(root):
            outs.append(("*", "*", [(t, sp(c), ty, sub, m)]))
        return outs, [(t, sp(c), ty, sub, m) for t, c, ty, sub, m in tracer.indirect(root)]

    # -- statements --------------------------------------------------------------------------------

    def result(self, kind: str, inputs: list[TableName], outputs: list[TableName],
               columns: list[ColumnLineage] = (), indirect: list[Src] = ()) -> StatementLineage:
        def uniq(names: list[TableName]) -> tuple[TableName, ...]:
            seen: dict[tuple[str, str, str], TableName] = {}
            for n in names:
                seen.setdefault(n.key(), n)
            return tuple(seen.values())
        return StatementLineage(kind, "", uniq(inputs), uniq(outputs), tuple(columns),
                                to_source_columns([s for s in indirect if not _is_temp_ref(s[0], self.ctx)]),
                                warnings=tuple(self.warnings))

    def write(self, target: TableName | None, kind: str, query: exp.Expression | None,
              target_columns: list[str] | None, extra_inputs: list[TableName] = (),
              temp: bool = False, exclude: set[int] = frozenset()) -> StatementLineage:
        while isinstance(query, exp.Subquery) and isinstance(query.this, exp.Query):
            query = query.this
        inputs = self.tables_read(query, exclude) + list(extra_inputs)
        outs, indirect = self.trace(query) if query is not None and isinstance(
            query, (exp.Select, exp.SetOperation, exp.Subquery)) else ([], [])
        names = self._target_names(target, outs, target_columns)
        columns = []
        for (_name, text, srcs), out_name in zip(outs, names, strict=False):
            columns.append((out_name, text, srcs))
        if target is not None and (temp or _is_temp_ref(target, self.ctx)):
            self._remember_temp(target, inputs, columns, indirect)
            return self.result(kind, inputs, [], [], [])
        lineage = [ColumnLineage(n, t, to_source_columns([s for s in srcs if not _is_temp_ref(s[0], self.ctx)]))
                   for n, t, srcs in columns]
        outputs = [self.ctx.full(target)] if target is not None else []
        return self.result(kind, inputs, outputs, lineage, indirect)

    def _target_names(self, target: TableName | None, outs: list, target_columns: list[str] | None) -> list[str]:
        if target_columns:
            return target_columns
        if target is not None:
            known = None
            if _is_temp_ref(target, self.ctx):
                temp = self.ctx.temps.get(_temp_key(target))
                if temp and temp.order and isinstance(self.stmt, exp.Insert):
                    return temp.order
            elif isinstance(self.stmt, exp.Insert):
                known = self.ctx.catalog.lookup(self.ctx.full(target))
            if known is not None and known.columns and len(known.columns) >= len(outs):
                return known.column_names()
        return [n for n, _t, _s in outs]

    def _remember_temp(self, target: TableName, inputs: list[TableName], columns: list, indirect: list[Src]) -> None:
        key = _temp_key(target)
        prev = self.ctx.temps.get(key)
        cols: dict[str, list[Src]] = {k: list(v) for k, v in (prev.columns.items() if prev else [])}
        order = list(prev.order) if prev else []
        for name, _text, srcs in columns:
            if name.lower() not in cols:
                order.append(name)
            cols.setdefault(name.lower(), []).extend(srcs)
        all_inputs = (list(prev.inputs) if prev else []) + [i for i in inputs if not _is_temp_ref(i, self.ctx)]
        self.ctx.temps[key] = TempTable(all_inputs, cols, order)

    def analyze(self) -> StatementLineage | None:
        s = self.stmt
        if isinstance(s, exp.Insert):
            return self.insert(s)
        if isinstance(s, exp.Create):
            return self.create(s)
        if isinstance(s, exp.Merge):
            return self.merge(s)
        if isinstance(s, exp.Update):
            return self.update(s)
        if isinstance(s, exp.Delete):
            return self.delete(s)
        if isinstance(s, (exp.Select, exp.SetOperation, exp.Subquery)):
            return self.select(s)
        if isinstance(s, exp.TruncateTable):
            outs = [self.ctx.full(n) for t in s.expressions if (n := self.written(t))
                    and not _is_temp_ref(n, self.ctx)]
            return self.result("TRUNCATE", [], outs)
        if isinstance(s, exp.Alter):
            return self.alter(s)
        if isinstance(s, exp.Copy):
            return self.copy(s)
        if isinstance(s, exp.Cache) and isinstance(s.this, exp.Table) and s.expression is not None:
            target = self.written(s.this, True)     # Spark CACHE TABLE t AS SELECT: a temporary view
            if target is not None:
                self.ctx.temps[_temp_key(target)] = TempTable([], {}, [])
            return self.write(target, "CACHE", s.expression, None, temp=True)
        if isinstance(s, exp.Use):
            target = s.this
            self.ctx.use_db = (target.name if isinstance(target, exp.Expression) else str(target or "")) or ""
            return None
        if isinstance(s, exp.Drop):
            if isinstance(s.this, exp.Table):
                name = self.written(s.this)
                if name is not None and _is_temp_ref(name, self.ctx):
                    self.ctx.temps.pop(_temp_key(name), None)
            return None
        return None

    def select(self, s: exp.Expression) -> StatementLineage:
        into = s.args.get("into") if isinstance(s, exp.Select) else None
        if isinstance(s, exp.SetOperation):
            first = s
            while isinstance(first, exp.SetOperation):
                first = first.this
            if isinstance(first, exp.Select) and first.args.get("into") is not None:
                s = s.copy()
                first = s
                while isinstance(first, exp.SetOperation):
                    first = first.this
                into = first.args["into"]
                first.set("into", None)
                s.set("into", into)
                target = self.written(into.this, True) if isinstance(into.this, exp.Table) else None
                temp = bool(into.args.get("temporary")) or (target is not None and _is_temp_ref(target, self.ctx))
                query = s.copy()
                query.set("into", None)
                return self.write(target, "SELECT_INTO", query, None, temp=temp)
        if into is not None and isinstance(into.this, exp.Table):
            target = self.written(into.this, True)
            query = s.copy()
            query.set("into", None)
            temp = bool(into.args.get("temporary")) or (target is not None and _is_temp_ref(target, self.ctx))
            return self.write(target, "SELECT_INTO", query, None, temp=temp)
        return self.write(None, "SELECT", s, None)

    def insert(self, s: exp.Insert) -> StatementLineage:
        this = s.this
        cols = None
        if isinstance(this, exp.Schema):
            cols = [i.name for i in this.expressions]
            this = this.this
        query = s.expression
        with_ = s.args.get("with_") or s.args.get("with")
        if with_ is not None and isinstance(query, exp.Query) and query.args.get("with_") is None:
            query = query.copy()
            query.set("with_", with_.copy())
        if not isinstance(this, exp.Table):
            return self.result("INSERT", self.tables_read(query), [])
        target = self.written(this, True)
        kind = "INSERT_OVERWRITE" if s.args.get("overwrite") else "INSERT"
        return self.write(target, kind, query, cols)

    def create(self, s: exp.Create) -> StatementLineage | None:
        kind = str(s.args.get("kind") or "").upper()
        this = s.this
        cols = None
        if isinstance(this, exp.Schema):
            if kind in ("TABLE", "VIEW") and s.expression is None and isinstance(this.this, exp.Table):
                name = self.written(this.this)
                if name is not None and not _is_temp_ref(name, self.ctx) and not _create_is_temp(s):
                    schema = schema_from_create(s, self.ctx.full(name))
                    if schema is not None:
                        self.ctx.catalog.add(schema)
                        self.ctx.learnt.append(schema)
                    like = s.find(exp.LikeProperty)
                    return self.result("CREATE_TABLE", self.tables_read(like), [self.ctx.full(name)])
                if name is not None:
                    order = [e.name for e in this.expressions if isinstance(e, exp.ColumnDef)]
                    self.ctx.temps[_temp_key(name)] = TempTable([], {c.lower(): [] for c in order}, order)
                return None
            cols = [e.name for e in this.expressions if isinstance(e, (exp.ColumnDef, exp.Identifier, exp.Column))]
            this = this.this
        if not isinstance(this, exp.Table) or kind not in ("TABLE", "VIEW", "MATERIALIZED VIEW") \
                and "VIEW" not in kind and kind != "TABLE":
            return None
        query = s.expression
        target = self.written(this, True)
        if query is None:
            if target is None or _is_temp_ref(target, self.ctx) or _create_is_temp(s):
                return None
            source = s.find(exp.LikeProperty) or s.args.get("clone")
            return self.result("CREATE_TABLE", self.tables_read(source), [self.ctx.full(target)])
        temp = _create_is_temp(s)
        if isinstance(query, exp.Subquery) and isinstance(query.this, exp.Query):
            query = query.this
        with_ = s.args.get("with_")
        if with_ is not None and isinstance(query, exp.Query) and query.args.get("with_") is None:
            query = query.copy()
            query.set("with_", with_.copy())
        result = self.write(target, "CREATE_VIEW" if "VIEW" in kind else "CREATE_TABLE_AS", query, cols, temp=temp)
        if target is not None and not temp and not _is_temp_ref(target, self.ctx) and result.columns:
            name = self.ctx.full(target)
            if self.ctx.catalog.lookup(name) is None:
                self.ctx.catalog.add(TableSchema(name, tuple(ColumnDef(c.column) for c in result.columns),
                                                 kind="VIEW" if "VIEW" in kind else "TABLE"))
        return result

    def _rel_select(self, target: exp.Expression, others: list[exp.Expression], on: exp.Expression | None,
                    where: exp.Expression | None, projections: list[exp.Expression]) -> exp.Select:
        sel = exp.Select(expressions=projections)
        sel.set("from_", exp.From(this=target.copy()))
        joins = []
        for o in others:
            joins.append(exp.Join(this=o.copy(), on=on.copy() if on is not None else None,
                                  kind=None if on is not None else "CROSS"))
            on = None
        if joins:
            sel.set("joins", joins)
        if where is not None:
            sel.set("where", where.copy() if isinstance(where, exp.Where) else exp.Where(this=where.copy()))
        return sel

    def _set_lineage(self, target_exp: exp.Table, sel: exp.Select, names: list[str]) -> tuple[list, list[Src]]:
        outs, indirect = self.trace(sel)
        target_name = self.physical(target_exp) if target_exp is not None else None
        cols = []
        for (_name, text, srcs), out in zip(outs, names, strict=False):
            cols.append((out, text, [x for x in srcs if target_name is None or x[0].key() != target_name.key()
                                     or x[1].lower() != out.lower()]))
        return cols, indirect

    def merge(self, s: exp.Merge) -> StatementLineage:
        target_exp, using, on = s.this, s.args.get("using"), s.args.get("on")
        target = self.written(target_exp, True) if isinstance(target_exp, exp.Table) else None
        inputs = self.tables_read(using) + self.tables_read(on)
        cols: dict[str, tuple[str, list[Src]]] = {}
        indirect: list[Src] = []
        texts: dict[str, str] = {}
        whens = s.args.get("whens")
        for when in (whens.expressions if whens is not None else []):
            then = when.args.get("then")
            names, exprs = [], []
            if isinstance(then, exp.Update):
                for eq in then.expressions:
                    names.append(eq.this.name)
                    exprs.append(eq.expression)
            elif isinstance(then, exp.Insert):
                tcols = then.this
                vals = then.expression
                names = [c.name for c in (tcols.expressions if isinstance(tcols, exp.Tuple) else
                                          (tcols.expressions if isinstance(tcols, exp.Schema) else []))]
                if isinstance(vals, exp.Tuple):
                    exprs = list(vals.expressions)
                elif isinstance(vals, exp.Values):
                    exprs = list(vals.expressions[0].expressions) if vals.expressions else []
                if not names and target is not None:
                    known = self.ctx.catalog.lookup(self.ctx.full(target))
                    names = known.column_names()[:len(exprs)] if known else []
            if when.args.get("condition") is not None:
                inputs += self.tables_read(when.args["condition"])
            if not names or not exprs or target_exp is None or using is None:
                continue
            projections = [exp.alias_(e.copy(), f"_c{i}") for i, e in enumerate(exprs)]
            sel = self._rel_select(target_exp, [using], on, None, projections)
            found, ind = self._set_lineage(target_exp, sel, names)
            indirect.extend(ind)
            for name, text, srcs in found:
                prev = cols.get(name.lower())
                cols[name.lower()] = (name, (prev[1] if prev else []) + srcs)
                texts.setdefault(name.lower(), text)
        lineage = [ColumnLineage(n, texts.get(k, n), to_source_columns(
            [x for x in srcs if not _is_temp_ref(x[0], self.ctx)])) for k, (n, srcs) in cols.items()]
        outputs = [self.ctx.full(target)] if target is not None and not _is_temp_ref(target, self.ctx) else []
        return self.result("MERGE", inputs, outputs, lineage, indirect)

    def update(self, s: exp.Update) -> StatementLineage:
        target_exp = s.this
        if not isinstance(target_exp, exp.Table):
            return self.result("UPDATE", self.tables_read(s), [])
        target = self.written(target_exp, True)
        from_ = s.args.get("from_") or s.args.get("from")
        from_tables: list[exp.Table] = []
        if from_ is not None:
            from_tables = [from_.this] + list(from_.expressions or [])
            from_tables = [t for t in from_tables if isinstance(t, exp.Expression)]
        real = target_exp
        # T-SQL "UPDATE a SET ... FROM b AS a JOIN c": the target is an alias of a FROM table
        if target is not None and not target.db:
            for t in (from_.find_all(exp.Table) if from_ is not None else []):
                if t.alias and t.alias.lower() == target.name.lower():
                    real = t
                    target = self.written(t)
                    break
        inputs = self.tables_read(s, {id(target_exp), id(real)})
        names, exprs = [], []
        for eq in s.expressions:
            if isinstance(eq, exp.EQ):
                names.append(eq.this.name)
                exprs.append(eq.expression)
        lineage: list[ColumnLineage] = []
        indirect: list[Src] = []
        if names:
            sel = exp.Select(expressions=[exp.alias_(e.copy(), f"_c{i}") for i, e in enumerate(exprs)])
            with_ = s.args.get("with_")
            if with_ is not None:
                sel.set("with_", with_.copy())
            base = real.copy()
            base.set("joins", None)
            sel.set("from_", exp.From(this=base))
            joins = [j.copy() for j in real.args.get("joins") or []]
            for t in from_tables:
                if t is not real:
                    plain = t.copy()
                    plain.set("joins", None)
                    joins.append(exp.Join(this=plain, kind="CROSS"))
                joins.extend(j.copy() for j in t.args.get("joins") or [] if t is not real)
            if real is not target_exp and target_exp.alias:
                pass
            if joins:
                sel.set("joins", joins)
            if s.args.get("where") is not None:
                sel.set("where", s.args["where"].copy())
            found, indirect = self._set_lineage(real, sel, names)
            lineage = [ColumnLineage(n, t, to_source_columns([x for x in srcs if not _is_temp_ref(x[0], self.ctx)]))
                       for n, t, srcs in found]
        if target is not None and _is_temp_ref(target, self.ctx):
            self._remember_temp(target, inputs, [], [])
            return self.result("UPDATE", inputs, [])
        outputs = [self.ctx.full(target)] if target is not None else []
        return self.result("UPDATE", [i for i in inputs if not outputs or i.key() != outputs[0].key()],
                           outputs, lineage, indirect)

    def delete(self, s: exp.Delete) -> StatementLineage:
        target_exp = s.this
        target = self.written(target_exp, True) if isinstance(target_exp, exp.Table) else None
        inputs = []
        for key in ("using", "where"):
            node = s.args.get(key)
            if node is None:
                continue
            for n in (node if isinstance(node, list) else [node]):
                if isinstance(n, exp.Expression):
                    inputs += self.tables_read(n)
        for j in s.args.get("joins") or []:
            inputs += self.tables_read(j)
        if target is None or _is_temp_ref(target, self.ctx):
            return self.result("DELETE", inputs, [])
        out = self.ctx.full(target)
        return self.result("DELETE", [i for i in inputs if i.key() != out.key()], [out])

    def alter(self, s: exp.Alter) -> StatementLineage | None:
        if not isinstance(s.this, exp.Table):
            return None
        name = self.written(s.this)
        if name is None or _is_temp_ref(name, self.ctx):
            return None
        full = self.ctx.full(name)
        rename = next((a for a in s.args.get("actions") or [] if isinstance(a, exp.AlterRename)), None)
        if rename is not None and isinstance(rename.this, exp.Table) and (new := self.written(rename.this)):
            return self.result("ALTER_RENAME", [full], [self.ctx.full(new)])
        known = self.ctx.catalog.lookup(full)
        schema = apply_alter(s, full, known)
        if schema.columns or schema.foreign_keys or schema.primary_key:
            self.ctx.catalog.add(schema)
            self.ctx.learnt.append(schema)
        return self.result("ALTER_TABLE", [], [])

    def copy(self, s: exp.Copy) -> StatementLineage:
        this = s.this
        target = self.written(this) if isinstance(this, exp.Table) else None
        if s.args.get("kind") is False and target is not None:     # COPY INTO @stage FROM table: an unload
            return self.result("COPY", [self.ctx.full(target)], [])
        inputs = []
        for f in s.args.get("files") or []:
            if isinstance(f, exp.Table) and (n := self.written(f)):
                inputs.append(self.ctx.full(n))
            elif isinstance(f, (exp.Subquery, exp.Select)):
                inputs += self.tables_read(f)
        return self.result("COPY", inputs, [self.ctx.full(target)] if target else [])


def analyze_statement(stmt: exp.Expression, ctx: SqlContext, sql: str = "", line: int = 1,
                      end_line: int | None = None) -> StatementLineage | None:
    """The lineage of one parsed statement, or None when it moves no data (DDL, SET, USE, DROP...)."""
    result = _Analyzer(stmt, ctx).analyze()
    if result is None:
        return None
    return StatementLineage(result.kind, sql or stmt.sql(dialect=dialect_of(ctx.dialect)), result.inputs,
                            result.outputs, result.columns, result.dataset_indirect, line,
                            end_line if end_line is not None else line, result.warnings)


def analyze_sql(sql: str, dialect: str = "", *, catalog: Catalog | None = None, default_database: str = "",
                default_schema: str = "", context: SqlContext | None = None) -> list[StatementLineage]:
    """Every statement of ``sql`` (one or many, ``GO``-batched or not) -> its lineage.

    >>> [str(t) for t in analyze_sql("INSERT INTO b SELECT x FROM a")[0].inputs]
    ['a']
    """
    from scanner.dialects import canonical_dialect
    from scanner.files import statements_of
    ctx = context or SqlContext(canonical_dialect(dialect), catalog if catalog is not None else Catalog(),
                                default_database, default_schema)
    results, _issues = statements_of(sql, ctx, "<sql>")
    return results




__all__ += ["SqlglotError", "IDENTITY"]
