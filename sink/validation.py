"""Validators of the exported documents: WIA-DATA-008 §7 rules and the object-array format's rules.

Both report violations as a list (an empty list means valid); nothing here raises on bad data,
because a violation such as a cycle is a fact about the lineage to report, not a crash.

WIA-DATA-008 §7 (rule names used in :attr:`Violation.rule`):

1. ``uniqueness`` -- node_id, edge_id (and column_lineage_id, provenance_id, quality_id) are unique;
2. ``referential_integrity`` -- edge source/target, provenance/quality node_id name existing nodes;
   column-lineage source/target tables name existing nodes' qualified names;
3. ``timestamps`` -- every timestamp is ISO-8601 in UTC (``...Z`` or ``...+00:00``);
4. ``required_fields`` -- node_id, node_type, name, namespace present and non-empty (plus the
   edge's edge_id, source_node_id, target_node_id, edge_type); enum values as in §1;
5. ``dag`` -- the node/edge graph is acyclic: each strongly connected component with more than
   one node, or a self-loop, is one violation listing its nodes (Tarjan's algorithm, iterative);
6. ``namespace_format`` -- a namespace is a URI: ``scheme ":" ...`` with scheme
   ``[A-Za-z][A-Za-z0-9+.-]*`` (RFC 3986 §3.1).

Object-array format (seeds/sql-object-lineage-json-format.md): :func:`validate_object_array`
is that document's own validation script, ported unchanged (it accepts ``"Stored Procedure"``,
as the script does, where the rules text says ``"StoredProcedure"``);
:func:`object_array_violations` checks all eleven listed rules and names each failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Violation",
    "validate_wia_graph",
    "find_cycles",
    "validate_object_array",
    "object_array_violations",
    "NODE_TYPES",
    "EDGE_TYPES",
    "UTC_TIMESTAMP",
    "NAMESPACE_URI",
]

NODE_TYPES = frozenset({"table", "view", "column", "report", "model", "file", "stream"})
EDGE_TYPES = frozenset({"derived_from", "aggregated_from", "joined_with", "filtered_from", "projected_from"})
TRANSFORMATION_TYPES = frozenset({"direct", "computed", "aggregated", "joined"})
PROVENANCE_EVENT_TYPES = frozenset({"created", "modified", "accessed", "deleted"})
UTC_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|\+00:00)$")
NAMESPACE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:\S*$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Violation:
    """One broken rule: which (``rule``), where (``path``, a JSON path) and what (``message``)."""

    rule: str
    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.rule}: {self.path}: {self.message}"


# -- WIA-DATA-008 §7 ----------------------------------------------------------------------------

def validate_wia_graph(doc: dict[str, Any]) -> list[Violation]:
    """All §7 violations of a graph document (§1.3 plus the column_lineage/provenance/quality arrays)."""
    out: list[Violation] = []
    nodes = doc.get("nodes")
    edges = doc.get("edges")
    if not isinstance(nodes, list) or not isinstance(edges, list):
        return [Violation("required_fields", "$", "the graph document needs arrays 'nodes' and 'edges'")]
    for key in ("graph_id", "version", "generated_at"):
        if not doc.get(key):
            out.append(Violation("required_fields", f"$.{key}", "missing"))
    _check_time(out, "$.generated_at", doc.get("generated_at"))
    node_ids = _unique(out, "nodes", nodes, "node_id")
    qualified = {n.get("qualified_name") for n in nodes if isinstance(n, dict)}
    for i, node in enumerate(nodes):
        _check_node(out, f"$.nodes[{i}]", node)
    _unique(out, "edges", edges, "edge_id")
    for i, edge in enumerate(edges):
        _check_edge(out, f"$.edges[{i}]", edge, node_ids)
    for i, col in enumerate(doc.get("column_lineage") or []):
        _check_column(out, f"$.column_lineage[{i}]", col, qualified)
    _unique(out, "column_lineage", doc.get("column_lineage") or [], "column_lineage_id")
    for name, id_key, time_key in (("provenance", "provenance_id", "event_time"),
                                   ("quality", "quality_id", "measured_at")):
        items = doc.get(name) or []
        _unique(out, name, items, id_key)
        for i, item in enumerate(items):
            path = f"$.{name}[{i}]"
            if item.get("node_id") not in node_ids:
                out.append(Violation("referential_integrity", f"{path}.node_id",
                                     f"{item.get('node_id')!r} is not a node of the graph"))
            _check_time(out, f"{path}.{time_key}", item.get(time_key), required=True)
            if name == "provenance" and item.get("event_type") not in PROVENANCE_EVENT_TYPES:
                out.append(Violation("required_fields", f"{path}.event_type", f"{item.get('event_type')!r}"))
    pairs = [(e.get("source_node_id"), e.get("target_node_id")) for e in edges if isinstance(e, dict)]
    for component in find_cycles(pairs):
        shown = ", ".join(component[:10]) + (" ..." if len(component) > 10 else "")
        out.append(Violation("dag", "$.edges", f"cycle through {len(component)} node(s): {shown}"))
    return out


def _unique(out: list[Violation], name: str, items: list[Any], key: str) -> set[Any]:
    seen: set[Any] = set()
    for i, item in enumerate(items):
        value = item.get(key) if isinstance(item, dict) else None
        if value in seen:
            out.append(Violation("uniqueness", f"$.{name}[{i}].{key}", f"duplicate {key} {value!r}"))
        seen.add(value)
    return seen


def _check_time(out: list[Violation], path: str, value: Any, required: bool = False) -> None:
    if value is None:
        if required:
            out.append(Violation("timestamps", path, "missing"))
        return
    if not isinstance(value, str) or not UTC_TIMESTAMP.match(value):
        out.append(Violation("timestamps", path, f"{value!r} is not an ISO-8601 UTC timestamp"))


def _check_node(out: list[Violation], path: str, node: Any) -> None:
    if not isinstance(node, dict):
        out.append(Violation("required_fields", path, "a node must be an object"))
        return
    for key in ("node_id", "node_type", "name", "namespace"):
        if not isinstance(node.get(key), str) or not node.get(key):
            out.append(Violation("required_fields", f"{path}.{key}", "missing or empty"))
    if isinstance(node.get("node_id"), str) and not _UUID.match(node["node_id"]):
        out.append(Violation("required_fields", f"{path}.node_id", f"{node['node_id']!r} is not a UUID"))
    if node.get("node_type") and node.get("node_type") not in NODE_TYPES:
        out.append(Violation("required_fields", f"{path}.node_type", f"{node['node_type']!r} is not one of "
                             + "|".join(sorted(NODE_TYPES))))
    ns = node.get("namespace")
    if isinstance(ns, str) and ns and not NAMESPACE_URI.match(ns):
        out.append(Violation("namespace_format", f"{path}.namespace", f"{ns!r} is not a URI (scheme:...)"))
    for key in ("created_at", "updated_at"):
        _check_time(out, f"{path}.{key}", node.get(key))


def _check_edge(out: list[Violation], path: str, edge: Any, node_ids: set[Any]) -> None:
    if not isinstance(edge, dict):
        out.append(Violation("required_fields", path, "an edge must be an object"))
        return
    for key in ("edge_id", "source_node_id", "target_node_id", "edge_type"):
        if not edge.get(key):
            out.append(Violation("required_fields", f"{path}.{key}", "missing or empty"))
    if edge.get("edge_type") and edge["edge_type"] not in EDGE_TYPES:
        out.append(Violation("required_fields", f"{path}.edge_type", f"{edge['edge_type']!r} is not a WIA edge type"))
    for key in ("source_node_id", "target_node_id"):
        if edge.get(key) and edge[key] not in node_ids:
            out.append(Violation("referential_integrity", f"{path}.{key}", f"{edge[key]!r} is not a node"))
    _check_time(out, f"{path}.created_at", edge.get("created_at"))
    _check_time(out, f"{path}.metadata.execution_time", (edge.get("metadata") or {}).get("execution_time"))


def _check_column(out: list[Violation], path: str, col: dict[str, Any], qualified: set[Any]) -> None:
    for key in ("column_lineage_id", "source_table", "source_column", "target_table", "target_column",
                "transformation_type"):
        if not col.get(key):
            out.append(Violation("required_fields", f"{path}.{key}", "missing or empty"))
    if col.get("transformation_type") and col["transformation_type"] not in TRANSFORMATION_TYPES:
        out.append(Violation("required_fields", f"{path}.transformation_type", repr(col["transformation_type"])))
    for key in ("source_table", "target_table"):
        if col.get(key) and col[key] not in qualified:
            out.append(Violation("referential_integrity", f"{path}.{key}", f"{col[key]!r} is not a node's qualified_name"))
    _check_time(out, f"{path}.created_at", col.get("created_at"))


def find_cycles(edges: Iterable[tuple[Any, Any]]) -> list[list[str]]:
    """Strongly connected components that contain a cycle (size > 1, or a self-loop), nodes sorted.

    Tarjan's algorithm, iterative (no recursion limit on long chains); O(V + E).
    """
    graph: dict[Any, list[Any]] = {}
    self_loops: set[Any] = set()
    for s, t in edges:
        graph.setdefault(s, []).append(t)
        graph.setdefault(t, [])
        if s == t:
            self_loops.add(s)
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    on_stack: set[Any] = set()
    stack: list[Any] = []
    result: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in self_loops:
                    result.append(sorted(str(m) for m in component))
    return sorted(result)


# -- object-array format (seeds/sql-object-lineage-json-format.md) ------------------------------

def validate_lineage_json(data: Any) -> bool:
    """The specification's own validation script, verbatim in logic (returns True / False)."""
    required_fields = {'id', 'name', 'schema', 'object_type', 'inputs', 'outputs'}
    valid_types = {'Table', 'View', 'Stored Procedure'}
    valid_data_model_types = {'Dimension', 'Fact', 'Other'}

    # Collect all node IDs
    node_ids = {node['id'] for node in data}

    for node in data:
        # Check required fields
        if not required_fields.issubset(node.keys()):
            return False

        # Check object_type
        if node['object_type'] not in valid_types:
            return False

        # Check arrays
        if not isinstance(node['inputs'], list):
            return False
        if not isinstance(node['outputs'], list):
            return False

        # Check optional fields
        if 'description' in node and not isinstance(node['description'], str):
            return False
        if 'data_model_type' in node:
            if not isinstance(node['data_model_type'], str):
                return False
            if node['data_model_type'] not in valid_data_model_types:
                return False

        # Check all references exist
        for ref_id in node['inputs'] + node['outputs']:
            if ref_id not in node_ids:
                return False

        # Tables and Views should have empty outputs
        if node['object_type'] in ['Table', 'View']:
            if node['outputs'] != []:
                return False

    return True


def validate_object_array(data: Any) -> bool:
    """True when ``data`` passes the specification's script (:func:`validate_lineage_json`)."""
    try:
        return isinstance(data, list) and validate_lineage_json(data)
    except (KeyError, TypeError, AttributeError):
        return False


_NODE_ID = re.compile(r"^node_(0|[1-9]\d*)$")


def object_array_violations(data: Any) -> list[Violation]:
    """Each of the document's eleven rules, with the node that breaks it."""
    if not isinstance(data, list):
        return [Violation("structure", "$", "the document must be a JSON array of node objects")]
    out: list[Violation] = []
    required = ("id", "name", "schema", "object_type", "inputs", "outputs")
    ids = [n.get("id") if isinstance(n, dict) else None for n in data]
    known = set(ids)
    seen: set[Any] = set()
    for i, node in enumerate(data):
        path = f"$[{i}]"
        if not isinstance(node, dict):
            out.append(Violation("required_fields", path, "a node must be an object"))
            continue
        missing = [k for k in required if k not in node]
        if missing:
            out.append(Violation("required_fields", path, "missing " + ", ".join(missing)))
        nid = node.get("id")
        if nid in seen:
            out.append(Violation("unique_id", f"{path}.id", f"duplicate id {nid!r}"))
        seen.add(nid)
        if not isinstance(nid, str) or not _NODE_ID.match(nid):
            out.append(Violation("id_format", f"{path}.id", f"{nid!r} is not node_N"))
        elif nid != f"node_{i}":
            out.append(Violation("sequential_ids", f"{path}.id", f"expected node_{i}, got {nid}"))
        if node.get("object_type") not in ("Table", "View", "Stored Procedure"):
            out.append(Violation("object_type", f"{path}.object_type", repr(node.get("object_type"))))
        for key in ("inputs", "outputs"):
            refs = node.get(key)
            if not isinstance(refs, list):
                out.append(Violation("arrays", f"{path}.{key}", "must be an array"))
                continue
            for ref in refs:
                if ref not in known:
                    out.append(Violation("references", f"{path}.{key}", f"{ref!r} is not a node id"))
            if refs != sorted(refs, key=_id_number):
                out.append(Violation("sorted_refs", f"{path}.{key}", "node ids are not sorted"))
        if node.get("object_type") in ("Table", "View") and node.get("outputs") != []:
            out.append(Violation("table_outputs", f"{path}.outputs", "tables and views have empty outputs"))
        if "description" in node and not isinstance(node["description"], str):
            out.append(Violation("description", f"{path}.description", "must be a string"))
        if "data_model_type" in node and node["data_model_type"] not in ("Dimension", "Fact", "Other"):
            out.append(Violation("data_model_type", f"{path}.data_model_type", repr(node["data_model_type"])))
    return out


def _id_number(ref: Any) -> tuple[int, Any]:
    match = _NODE_ID.match(ref) if isinstance(ref, str) else None
    return (int(ref[5:]), "") if match else (1 << 62, str(ref))
