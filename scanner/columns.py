"""Column lineage: walk a qualified query's scopes from each output column down to physical tables.

Pure functions over sqlglot's optimizer scopes. DIRECT subtypes chain to the strongest step
(IDENTITY < TRANSFORMATION < AGGREGATION); columns in CASE conditions and window PARTITION/ORDER
are INDIRECT CONDITIONAL / WINDOW inputs of that field; columns in JOIN, WHERE/HAVING/QUALIFY,
GROUP BY and ORDER BY of every scope are dataset-level INDIRECT inputs.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from scanner.model import AGGREGATION, IDENTITY, TRANSFORMATION, SourceColumn, TableName, stronger

__all__ = ["ColumnTracer", "Src"]

#: (table, column, type, subtype, masking)
Src = tuple[TableName, str, str, str, bool]
_MASKING = {"MD5", "SHA", "SHA1", "SHA2", "SHA256", "SHA512", "HASH", "HASHBYTES", "FARM_FINGERPRINT",
            "XXHASH64", "CRC32", "MURMUR3", "SHA2_HEX", "MD5_HEX", "STANDARD_HASH"}


def _subtype(e: exp.Expression) -> str:
    if isinstance(e, exp.Column):
        return IDENTITY
    for node in e.walk():
        if isinstance(node, exp.AggFunc):
            return AGGREGATION
    return TRANSFORMATION


def _masking(e: exp.Expression) -> bool:
    for node in e.walk():
        if isinstance(node, exp.Func) and (node.sql_name().upper() in _MASKING or
                                           (isinstance(node, exp.Anonymous) and node.name.upper() in _MASKING)):
            return True
    return False


class ColumnTracer:
    """Traces output columns of one qualified query.

    ``physical(table) -> TableName | None`` names a physical table (None for a table function);
    ``temp_columns(name) -> dict[col, list[Src]] | None`` expands a temporary table already built.
    """

    def __init__(self, physical: Callable[[exp.Table], TableName | None],
                 temp_columns: Callable[[TableName], dict[str, list[Src]] | None]) -> None:
        self.physical = physical
        self.temp_columns = temp_columns
        self._memo: dict[int, list[tuple[str, exp.Expression, list[Src]]]] = {}

    # -- outputs -----------------------------------------------------------------------------------

    def outputs(self, scope: Scope) -> list[tuple[str, exp.Expression, list[Src]]]:
        key = id(scope)
        if key not in self._memo:
            self._memo[key] = []          # recursion guard (recursive CTEs)
            self._memo[key] = self._outputs(scope)
        return self._memo[key]

    def _outputs(self, scope: Scope) -> list[tuple[str, exp.Expression, list[Src]]]:
        if scope.set_operation_scopes:
            branches = [self.outputs(s) for s in scope.set_operation_scopes]
            first = branches[0]
            merged = []
            for i, (name, expr, srcs) in enumerate(first):
                all_srcs = list(srcs)
                for other in branches[1:]:
                    if i < len(other):
                        all_srcs.extend(other[i][2])
                merged.append((name, expr, all_srcs))
            return merged
        select = scope.expression
        if isinstance(select, exp.Subquery) and isinstance(select.this, exp.Select):
            select = select.this
        if not isinstance(select, exp.Select):
            return self._table_function_outputs(scope, select)
        out = []
        for i, proj in enumerate(select.expressions):
            if isinstance(proj, exp.Star) or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)):
                continue
            name = proj.alias_or_name or f"_col_{i}"
            expr = proj.this if isinstance(proj, exp.Alias) else proj
            out.append((name, expr, self.expression_sources(scope, expr)))
        return out

    def _table_function_outputs(self, scope: Scope, node: exp.Expression) -> list[tuple[str, exp.Expression, list[Src]]]:
        """LATERAL VIEW explode(...), UNNEST(...), FLATTEN(...), JSON_TABLE(...): every output column is a
        TRANSFORMATION of the columns the function reads (resolved where the function stands)."""
        if isinstance(node, exp.Lateral) and isinstance(node.this, (exp.Subquery, exp.Select)):
            inner = node.this.this if isinstance(node.this, exp.Subquery) else node.this
            root = scope
            while root.parent is not None:
                root = root.parent
            for candidate in root.traverse():
                if candidate.expression is inner:
                    return self.outputs(candidate)
            return []
        alias = node.args.get("alias")
        names = [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) and alias.columns else []
        if not names:
            names = [alias.name] if isinstance(alias, exp.TableAlias) and alias.name else []
            if isinstance(node, exp.Lateral) or "FLATTEN" in node.sql().upper()[:40]:
                names += ["value", "key", "index", "path", "this", "seq"]
        where = scope.parent or scope
        srcs: list[Src] = []
        for col in node.find_all(exp.Column):
            for t, c, typ, _sub, m in self.resolve(where, col):
                if typ == "DIRECT":
                    srcs.append((t, c, "DIRECT", TRANSFORMATION, m))
        return [(n, node, list(srcs)) for n in names]

    def output_map(self, scope: Scope) -> dict[str, list[Src]]:
        return {name.lower(): srcs for name, _e, srcs in self.outputs(scope)}

    # -- one expression ----------------------------------------------------------------------------

    def expression_sources(self, scope: Scope, expr: exp.Expression) -> list[Src]:
        base = _subtype(expr)
        masking = _masking(expr)
        found: list[Src] = []
        if any(isinstance(n, exp.Star) and isinstance(n.parent, exp.AggFunc) for n in expr.find_all(exp.Star)):
            selected = [src for _n, src in scope.selected_sources.values()]
            if len(selected) == 1:      # COUNT(*): every row of the one source
                found.extend((t, c, "DIRECT", AGGREGATION, False) for t, c, *_ in self._star_of(selected[0]))
        for node, role in self._columns_with_roles(expr):
            if isinstance(node, exp.Column):
                inner = self.resolve(scope, node)
            else:      # a scalar subquery
                inner = self._subquery_sources(scope, node)
            for table, col, typ, sub, mask in inner:
                if role == "DIRECT" and typ == "DIRECT":
                    found.append((table, col, "DIRECT", stronger(base, sub), masking or mask))
                elif role != "DIRECT":
                    found.append((table, col, "INDIRECT", role, False))
                else:
                    found.append((table, col, typ, sub, mask))
        return found

    @staticmethod
    def _columns_with_roles(expr: exp.Expression):
        """Columns (and scalar subqueries) of ``expr`` with DIRECT / CONDITIONAL / WINDOW roles."""
        stack: list[tuple[exp.Expression, str]] = [(expr, "DIRECT")]
        while stack:
            node, role = stack.pop()
            if isinstance(node, exp.Column):
                if not isinstance(node.this, exp.Star):
                    yield node, role
                continue
            if isinstance(node, (exp.Subquery, exp.Select)) and node is not expr:
                yield node, role
                continue
            if isinstance(node, exp.Window):
                stack.append((node.this, role))
                for p in node.args.get("partition_by") or []:
                    stack.append((p, "WINDOW"))
                order = node.args.get("order")
                if order is not None:
                    stack.append((order, "WINDOW"))
                continue
            if isinstance(node, exp.Case):
                for if_ in node.args.get("ifs") or []:
                    stack.append((if_.this, "CONDITIONAL"))
                    stack.append((if_.args.get("true"), role))
                if node.this is not None:
                    stack.append((node.this, "CONDITIONAL"))
                if node.args.get("default") is not None:
                    stack.append((node.args["default"], role))
                continue
            if isinstance(node, exp.If):
                stack.append((node.this, "CONDITIONAL"))
                for k in ("true", "false"):
                    if node.args.get(k) is not None:
                        stack.append((node.args[k], role))
                continue
            for child in node.iter_expressions():
                if child is not None:
                    stack.append((child, role))

    def _subquery_sources(self, scope: Scope, node: exp.Expression) -> list[Src]:
        select = node.this if isinstance(node, exp.Subquery) else node
        for child in scope.subquery_scopes + scope.derived_table_scopes:
            if child.expression is select:
                srcs = []
                for _name, _e, s in self.outputs(child)[:1]:
                    srcs.extend((t, c, ty, TRANSFORMATION if ty == "DIRECT" and sub == IDENTITY else sub, m)
                                for t, c, ty, sub, m in s)
                return srcs
        return []

    # -- one column --------------------------------------------------------------------------------

    def resolve(self, scope: Scope, column: exp.Column) -> list[Src]:
        name = column.name
        alias = column.table
        current: Scope | None = scope
        while current is not None:
            source = self._pick_source(current, alias, name)
            if source is not None:
                return self._from_source(source, name)
            if alias and alias in current.sources:
                return []
            current = current.parent
        return []

    def _pick_source(self, scope: Scope, alias: str, name: str):
        if alias:
            found = scope.sources.get(alias)
            if found is None:     # qualified by the table's name although it has an alias
                found = next((src for _n, src in scope.selected_sources.values()
                              if isinstance(src, exp.Table) and src.name.lower() == alias.lower()), None)
            return found
        selected = [src for _node, src in scope.selected_sources.values()]
        if len(selected) == 1:
            return selected[0]
        # unqualified and ambiguous: the one derived source that outputs it, else the one plain table
        hits = [s for s in selected if isinstance(s, Scope) and name.lower() in self.output_map(s)]
        if len(hits) == 1:
            return hits[0]
        tables = [s for s in selected if isinstance(s, exp.Table)]
        if len(tables) == 1 and not hits and all(
                not isinstance(s, Scope) or name.lower() not in self.output_map(s) for s in selected):
            return tables[0]
        return None

    def _from_source(self, source, name: str) -> list[Src]:
        if isinstance(source, Scope):
            found = self.output_map(source).get(name.lower())
            if found is not None:
                return list(found)
            # not among its named outputs: through a star no schema could expand, when it covers one source
            star = self._star_source(source)
            return self._from_source(star, name) if star is not None else []
        if isinstance(source, exp.Table):
            table = self.physical(source)
            if table is None:
                return self._function_sources(source)
            temp = self.temp_columns(table)
            if temp is not None:
                return list(temp.get(name.lower(), []))
            return [(table, name, "DIRECT", IDENTITY, False)]
        return []

    def _function_sources(self, source: exp.Expression) -> list[Src]:
        return []

    # -- stars that no schema could expand --------------------------------------------------------------

    def star_sources(self, scope: Scope) -> list[Src]:
        """``SELECT *`` / ``t.*`` left unexpanded: ``table.*`` of every physical table they cover."""
        if scope.set_operation_scopes:
            return [s for branch in scope.set_operation_scopes for s in self.star_sources(branch)]
        select = scope.expression
        if not isinstance(select, exp.Select):
            return []
        out: list[Src] = []
        for proj in select.expressions:
            if isinstance(proj, exp.Star):
                sources = [src for _n, src in scope.selected_sources.values()]
            elif isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star):
                src = self._pick_source(scope, proj.table, "*")
                sources = [src] if src is not None else []
            else:
                continue
            for src in sources:
                out.extend(self._star_of(src))
        return out

    def _star_source(self, scope: Scope):
        """The one source an unexpanded ``*`` / ``t.*`` of ``scope`` selects from, else None."""
        if scope.set_operation_scopes or not isinstance(scope.expression, exp.Select):
            return None
        covered = []
        for proj in scope.expression.expressions:
            if isinstance(proj, exp.Star):
                covered.extend(src for _n, src in scope.selected_sources.values())
            elif isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star):
                covered.append(self._pick_source(scope, proj.table, "*"))
        covered = [c for c in covered if c is not None]
        return covered[0] if len(covered) == 1 else None

    def _star_of(self, source) -> list[Src]:
        if isinstance(source, exp.Table):
            table = self.physical(source)
            if table is None:
                return []
            temp = self.temp_columns(table)
            if temp is not None:
                return [s for srcs in temp.values() for s in srcs]
            return [(table, "*", "DIRECT", IDENTITY, False)]
        if isinstance(source, Scope):
            named = [s for _n, _e, srcs in self.outputs(source) for s in srcs]
            return named + self.star_sources(source)
        return []

    # -- dataset-level indirect --------------------------------------------------------------------

    def indirect(self, root: Scope) -> list[Src]:
        """Columns in JOIN / WHERE / HAVING / QUALIFY / GROUP BY / ORDER BY of every scope under ``root``."""
        out: list[Src] = []
        for scope in root.traverse():
            select = scope.expression
            if not isinstance(select, exp.Select):
                continue
            parts: list[tuple[exp.Expression | None, str]] = [
                (select.args.get("where"), "FILTER"), (select.args.get("having"), "FILTER"),
                (select.args.get("qualify"), "FILTER"), (select.args.get("group"), "GROUP_BY"),
                (select.args.get("order"), "SORT"),
            ]
            for join in select.args.get("joins") or []:
                parts.append((join.args.get("on"), "JOIN"))
                for u in join.args.get("using") or []:
                    parts.append((u, "JOIN"))
            for node, role in parts:
                if node is None:
                    continue
                for col in node.find_all(exp.Column):
                    if col.find_ancestor(exp.Select) is not select and not isinstance(node, exp.Identifier):
                        continue
                    for t, c, _ty, _sub, _m in self.resolve(scope, col):
                        out.append((t, c, "INDIRECT", role, False))
        return out


def to_source_columns(srcs: list[Src]) -> tuple[SourceColumn, ...]:
    """Deduplicated, sorted: DIRECT before INDIRECT for the same column; the strongest subtype wins."""
    best: dict[tuple, SourceColumn] = {}
    for table, col, typ, sub, mask in srcs:
        key = (table.key(), col.lower(), typ, sub if typ == "INDIRECT" else "")
        prev = best.get(key)
        if prev is None:
            best[key] = SourceColumn(table, col, typ, sub, mask)
        elif typ == "DIRECT":
            best[key] = SourceColumn(prev.table, prev.column, typ, stronger(prev.subtype, sub), prev.masking or mask)
    return tuple(sorted(best.values(), key=lambda s: (s.type, s.table.key(), s.column.lower(), s.subtype)))
