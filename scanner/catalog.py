"""Known table schemas: from DDL in the scanned code, a schema file, or the graph.

Lookups are case-insensitive and tolerate partial qualification: ``orders`` finds ``shop.orders``
when exactly one known table has that name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from sqlglot import exp

from scanner.model import ColumnDef, ForeignKey, TableName, TableSchema

__all__ = ["Catalog", "table_name", "schema_from_create", "apply_alter", "load_schema_file"]


def _ident(node: exp.Expression | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        text = node.this
        if node.args.get("global_") and not text.startswith("#"):
            return "##" + text
        return ("#" + text) if node.args.get("temporary") and not text.startswith("#") else text
    if isinstance(node, exp.Parameter):
        inner = node.this
        return "@" + (inner.name if isinstance(inner, exp.Expression) else str(inner))
    if isinstance(node, exp.Dot):
        return ".".join(_ident(p) for p in node.flatten())
    return node.name


def table_name(table: exp.Table) -> TableName:
    """A parsed table reference as written (temp markers ``#`` / ``@`` kept)."""
    return TableName(_ident(table.args.get("catalog")), _ident(table.args.get("db")), _ident(table.this))


class Catalog:
    """Table schemas by case-insensitive name, with suffix matching for partial names."""

    def __init__(self, tables: Iterable[TableSchema] = ()) -> None:
        self._full: dict[tuple[str, str, str], TableSchema] = {}
        self._by_name: dict[str, list[tuple[str, str, str]]] = {}
        for t in tables:
            self.add(t)

    def __len__(self) -> int:
        return len(self._full)

    def __iter__(self):
        return iter(self._full.values())

    def add(self, schema: TableSchema) -> None:
        key = schema.table.key()
        if key not in self._full:
            self._by_name.setdefault(key[2], []).append(key)
        self._full[key] = schema

    def lookup(self, name: TableName) -> TableSchema | None:
        key = name.key()
        hit = self._full.get(key)
        if hit is not None:
            return hit
        cands = [k for k in self._by_name.get(key[2], ())
                 if (not key[1] or k[1] == key[1]) and (not key[0] or k[0] == key[0])]
        if len(cands) == 1:
            return self._full[cands[0]]
        return None

    def merge(self, other: Catalog) -> None:
        for t in other:
            self.add(t)


def _column_def(cd: exp.ColumnDef) -> tuple[ColumnDef, bool]:
    kind = cd.args.get("kind")
    nullable, pk = True, False
    for c in cd.args.get("constraints") or []:
        k = c.args.get("kind")
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = bool(k.args.get("allow_null"))
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            pk, nullable = True, False
    return ColumnDef(cd.name, _type_text(kind), nullable), pk


def _type_text(kind: exp.Expression | None) -> str | None:
    """A column type as SQL text; plain types without parameters skip the generator (it is slow)."""
    if kind is None:
        return None
    if isinstance(kind, exp.DataType) and not kind.expressions and not kind.args.get("nested") \
            and not kind.args.get("values") and hasattr(kind.this, "value") and kind.this.value != "USERDEFINED":
        return str(kind.this.value)
    return kind.sql()


def _fk(node: exp.ForeignKey, name: str, columns: list[str] | None = None) -> ForeignKey | None:
    ref = node.args.get("reference")
    schema = ref.this if isinstance(ref, exp.Reference) else None
    if isinstance(schema, exp.Schema) and isinstance(schema.this, exp.Table):
        target, ref_cols = table_name(schema.this), [i.name for i in schema.expressions]
    elif isinstance(schema, exp.Table):
        target, ref_cols = table_name(schema), []
    else:
        return None
    cols = columns or [i.name for i in node.expressions]
    return ForeignKey(name or f"fk_{'_'.join(cols)}", tuple(cols), target, tuple(ref_cols))


def _constraints(nodes: Iterable[exp.Expression], pk: list[str], fks: list[ForeignKey]) -> None:
    for node in nodes:
        name = ""
        inner: Iterable[exp.Expression] = [node]
        if isinstance(node, exp.Constraint):
            name, inner = node.name, node.expressions
        elif isinstance(node, exp.AddConstraint):
            _constraints(node.expressions, pk, fks)
            continue
        for c in inner:
            if isinstance(c, exp.PrimaryKey):
                pk.extend(e.name for e in c.expressions if e.name not in pk)
            elif isinstance(c, exp.ForeignKey):
                fk = _fk(c, name)
                if fk:
                    fks.append(fk)


def schema_from_create(create: exp.Create, table: TableName) -> TableSchema | None:
    """The schema a ``CREATE TABLE t (...)`` declares, or None when it lists no columns."""
    schema = create.this
    if not isinstance(schema, exp.Schema):
        return None
    cols: list[ColumnDef] = []
    pk: list[str] = []
    fks: list[ForeignKey] = []
    for e in schema.expressions:
        if isinstance(e, exp.ColumnDef):
            cd, is_pk = _column_def(e)
            cols.append(cd)
            if is_pk:
                pk.append(cd.name)
            for c in e.args.get("constraints") or []:
                if isinstance(c.args.get("kind"), exp.Reference):
                    fk = _fk(exp.ForeignKey(expressions=[exp.to_identifier(cd.name)], reference=c.args["kind"]),
                             "", [cd.name])
                    if fk:
                        fks.append(fk)
        else:
            _constraints([e], pk, fks)
    if not cols:
        return None
    kind = "VIEW" if str(create.args.get("kind") or "").upper() == "VIEW" else "TABLE"
    return TableSchema(table, tuple(cols), tuple(pk), tuple(fks), kind)


def apply_alter(alter: exp.Alter, table: TableName, known: TableSchema | None) -> TableSchema:
    """``ALTER TABLE ... ADD COLUMN / ADD CONSTRAINT`` applied to what was known of the table."""
    cols = list(known.columns) if known else []
    pk = list(known.primary_key) if known else []
    fks = list(known.foreign_keys) if known else []
    names = {c.name.lower() for c in cols}
    for action in alter.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            cd, is_pk = _column_def(action)
            if cd.name.lower() not in names:
                cols.append(cd)
                names.add(cd.name.lower())
            if is_pk:
                pk.append(cd.name)
        else:
            _constraints([action], pk, fks)
    return TableSchema(known.table if known else table, tuple(cols), tuple(pk), tuple(fks),
                       known.kind if known else "TABLE")


def load_schema_file(path: str | Path) -> Catalog:
    """A JSON schema file: ``{"db.schema.table": {"col": "TYPE", ...}}`` or ``{"db.schema.table": ["col", ...]}``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    cat = Catalog()
    for name, cols in data.items():
        parts = name.split(".")
        parts = [""] * (3 - len(parts)) + parts[-3:]
        tn = TableName(*parts)
        if isinstance(cols, dict):
            defs = tuple(ColumnDef(c, str(t) if t else None) for c, t in cols.items())
        else:
            defs = tuple(ColumnDef(str(c)) for c in cols)
        cat.add(TableSchema(tn, defs))
    return cat
