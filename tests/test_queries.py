"""Graph questions against a real PostgreSQL: depth, cycles, routes, ancestors, as-of, terminal jobs, aliases."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from sink.queries import (
    AmbiguousNodeError,
    LineageQueries,
    NodeNotFoundError,
    QueryError,
    is_terminal,
)
from tests.graph_rows import NS, T0, GraphRows, sample_warehouse


@pytest.fixture
def graph(pg_dsn: str):
    """A small warehouse:

        A, B --J1--> C --J2--> D --J3 (terminal)--> E --J4--> F
        C --J5--> C                         (a job reading and writing one table)
        A --J6--> D                         (a second route A ~> D)
        B --J2(old version)--> D            (history: valid 2026-01-01 .. 2026-02-01)
        J0 --> A_alias (alias of A)         (an edge stored against the alias id)
    """
    g = GraphRows(pg_dsn)
    ids = sample_warehouse(g)
    q = LineageQueries(pg_dsn)
    yield g, ids, q
    q.close()
    g.close()


def labels(result) -> set[str]:
    return {h.node.name for h in result.hits}


@pytest.mark.integration
def test_upstream_depth(graph) -> None:
    _, ids, q = graph
    one = q.upstream(f"{NS}/mart.revenue", depth=1)
    assert labels(one) == {"revenue", "stg.orders", "quick_revenue", "raw.orders"}
    assert all(h.level == 1 for h in one.hits)
    two = q.upstream(f"{NS}/mart.revenue", depth=2)
    assert labels(two) == labels(one) | {"clean_orders", "raw.customers", "dedupe_orders", "ingest_orders"}
    by_name = {h.node.name: h for h in two.hits}
    assert by_name["clean_orders"].level == 2 and by_name["clean_orders"].steps == 3
    assert by_name["raw.orders"].steps == 2      # the shortest way (through quick_revenue)
    # edges in data-flow direction between consecutive levels
    assert (ids["C"], ids["J2"], "reads") in {(e.source_id, e.target_id, e.kind) for e in two.edges}


@pytest.mark.integration
def test_job_start_and_downstream(graph) -> None:
    _, ids, q = graph
    res = q.downstream("job:airflow/clean_orders", depth=1)
    assert labels(res) == {"stg.orders"}
    res2 = q.downstream("job:airflow:clean_orders", depth=2)
    assert labels(res2) == {"stg.orders", "revenue", "dedupe_orders", "mart.revenue"}
    assert res2.root.kind == "job" and res2.root.node_id == ids["J1"]


@pytest.mark.integration
def test_cycle_does_not_hang(graph) -> None:
    _, ids, q = graph
    res = q.upstream(f"{NS}/stg.orders", depth=50, stop_at_terminal=False)
    assert labels(res) == {"clean_orders", "dedupe_orders", "raw.orders", "raw.customers", "ingest_orders"}
    assert len(res.hits) == len({h.node.node_id for h in res.hits})    # each node once
    down = q.downstream(f"{NS}/stg.orders", depth=50, stop_at_terminal=False)
    assert {"dedupe_orders", "revenue", "mart.revenue", "revenue.csv"} <= labels(down)
    assert ids["C"] not in {h.node.node_id for h in down.hits}


@pytest.mark.integration
def test_terminal_transform_stops_traversal(graph) -> None:
    _, _, q = graph
    assert is_terminal({"reversible": False, "privacy_preserving": True})
    assert is_terminal({"terminal": True}) and not is_terminal({"reversible": False})
    stopped = q.downstream(f"{NS}/mart.revenue", depth=5)
    assert labels(stopped) == {"anonymise"}
    assert stopped.hits[0].terminal is True
    through = q.downstream(f"{NS}/mart.revenue", depth=5, stop_at_terminal=False)
    assert labels(through) == {"anonymise", "public.revenue_anon", "report", "revenue.csv"}
    up = q.upstream("s3://reports/revenue.csv", depth=5)
    assert labels(up) == {"report", "public.revenue_anon", "anonymise"}


@pytest.mark.integration
def test_as_of_shows_history(graph) -> None:
    _, _, q = graph
    now = q.upstream(f"{NS}/mart.revenue", depth=1)
    assert "raw.customers" not in labels(now)
    then = q.upstream(f"{NS}/mart.revenue", depth=1, as_of=T0 + timedelta(days=10))
    assert "raw.customers" in labels(then)
    after = q.upstream(f"{NS}/mart.revenue", depth=1, as_of=T0 + timedelta(days=40))
    assert "raw.customers" not in labels(after) and "stg.orders" in labels(after)
    before = q.upstream(f"{NS}/mart.revenue", depth=1, as_of=T0 - timedelta(days=1))
    assert before.hits == []
    with pytest.raises(QueryError):
        q.upstream(f"{NS}/mart.revenue", as_of=datetime(2026, 1, 1))   # naive time


@pytest.mark.integration
def test_routes(graph) -> None:
    _, ids, q = graph
    res = q.routes(f"{NS}/raw.orders", f"{NS}/mart.revenue", max_length=10)
    names = [[n.name for n in r] for r in res.routes]
    assert names == [
        ["raw.orders", "quick_revenue", "mart.revenue"],
        ["raw.orders", "clean_orders", "stg.orders", "revenue", "mart.revenue"],
    ]
    assert res.swapped is False
    short = q.routes(f"{NS}/raw.orders", f"{NS}/mart.revenue", max_length=2)
    assert [[n.name for n in r] for r in short.routes] == [["raw.orders", "quick_revenue", "mart.revenue"]]
    back = q.routes(f"{NS}/mart.revenue", f"{NS}/raw.orders")
    assert back.swapped is True and len(back.routes) == 2
    none = q.routes(f"{NS}/raw.customers", "job:airflow/quick_revenue")
    assert none.routes == []
    past = q.routes(f"{NS}/raw.customers", f"{NS}/mart.revenue", max_length=2, as_of=T0 + timedelta(days=1))
    assert [[n.name for n in r] for r in past.routes] == [["raw.customers", "revenue", "mart.revenue"]]


@pytest.mark.integration
def test_aliases_resolve_to_one_node(graph) -> None:
    _, ids, q = graph
    assert q.resolve("hive/warehouse.orders").node_id == ids["A"]
    assert q.resolve("hive:warehouse.orders").node_id == ids["A"]
    assert q.resolve(ids["A_alias"]).node_id == ids["A"]
    up = q.upstream(f"{NS}/raw.orders", depth=1)
    assert labels(up) == {"ingest_orders"}          # written to the alias name, found from the canonical one
    down = q.downstream("job:airflow/ingest_orders", depth=1)
    assert [h.node.node_id for h in down.hits] == [ids["A"]]


@pytest.mark.integration
def test_node_syntax_and_errors(graph) -> None:
    _, ids, q = graph
    assert q.resolve(ids["J2"]).kind == "job"
    assert q.resolve(f"{NS}:mart.revenue").node_id == ids["D"]
    col = q.resolve(f"{NS}/mart.revenue#total")
    assert (col.kind, col.column, col.node_id) == ("column", "total", ids["D"])
    with pytest.raises(NodeNotFoundError):
        q.upstream(f"{NS}/no.such.table")
    with pytest.raises(NodeNotFoundError):
        q.resolve("job:airflow/nope")
    with pytest.raises(QueryError):
        q.upstream(f"{NS}/mart.revenue", depth=0)


@pytest.mark.integration
def test_ambiguous_name(pg_dsn: str) -> None:
    g = GraphRows(pg_dsn)
    g.dataset("a", "b/c")
    g.dataset("a/b", "c")
    with LineageQueries(pg_dsn) as q, pytest.raises(AmbiguousNodeError):
        q.resolve("a/b/c")
    g.close()


@pytest.mark.integration
def test_hostile_names_are_data(pg_dsn: str) -> None:
    g = GraphRows(pg_dsn)
    evil = "x'; DROP TABLE lineage_edges; -- \"東京\" " + "ñ" * 3000
    a, b = g.dataset("pg://db", evil), g.dataset("pg://db", "b")
    g.flow(g.job("ns", "j;--"), [a], [b])
    g.close()
    with LineageQueries(pg_dsn) as q:
        assert q.resolve(f"pg://db/{evil}").node_id == a
        assert [h.node.name for h in q.downstream(f"pg://db/{evil}", depth=1).hits] == ["j;--", "b"]
        assert labels(q.upstream("job:ns/j;--", depth=1)) == {evil}
        with pytest.raises(NodeNotFoundError):
            q.resolve("pg://db/a\x00b")


@pytest.mark.integration
def test_column_lineage(graph) -> None:
    _, _, q = graph
    up = q.upstream(f"{NS}/mart.revenue#total", depth=5)
    assert {h.node.label for h in up.hits} == {f"{NS}/stg.orders#amount", f"{NS}/raw.orders#amount"}
    assert {h.node.label: h.steps for h in up.hits}[f"{NS}/raw.orders#amount"] == 2
    down = q.downstream(f"{NS}/raw.orders#amount", depth=5)
    # stops at the terminal anonymise job: its column is listed, nothing beyond it
    assert {h.node.label for h in down.hits} == {f"{NS}/stg.orders#amount", f"{NS}/mart.revenue#total",
                                                 f"{NS}/public.revenue_anon#total_bucket"}
    assert [h.terminal for h in down.hits if h.node.column == "total_bucket"] == [True]


@pytest.mark.integration
def test_impact(graph) -> None:
    _, _, q = graph
    res = q.impact(f"{NS}/raw.orders")
    assert {h.node.name for h in res.datasets} == {"stg.orders", "mart.revenue", "public.revenue_anon",
                                                   "revenue.csv"}
    assert {h.node.name for h in res.jobs} >= {"clean_orders", "revenue", "anonymise", "report"}
    assert res.owners["team-mart"] == [f"{NS}/mart.revenue"]
    assert res.owners["bob"] == ["job:airflow/revenue"]
    assert "team-raw" not in res.owners   # the changed node itself is not "affected"
    assert res.to_dict()["owners"]["alice"] == ["job:airflow/clean_orders"]


@pytest.mark.integration
def test_ancestors_by_revision(pg_dsn: str) -> None:
    """Paper eq. (4): Ancestors(D:R_y, A) follows the runs that made each revision."""
    g = GraphRows(pg_dsn)
    a, c, d = g.dataset("ns", "A"), g.dataset("ns", "C"), g.dataset("ns", "D")
    b = g.dataset("ns", "B")
    j1, j2 = g.job("ns", "J1"), g.job("ns", "J2")
    g.flow(j1, [a, b], [c])
    g.flow(j2, [c], [d])
    t = [T0 + timedelta(hours=h) for h in range(8)]
    a1, a2 = g.version(a, "a1", t[1]), g.version(a, "a2", t[3])
    b1 = g.version(b, "b1", t[0])
    r1 = g.run(j1, t[2], inputs=[(a, None), (b, b1)], outputs=[(c, None)])
    c1 = g.version(c, "c1", t[2], run=r1)
    g.run(j2, t[4], inputs=[(c, c1)], outputs=[(d, None)])
    g.version(d, "d1", t[4])
    r4 = g.run(j1, t[5], inputs=[(a, None), (b, b1)], outputs=[(c, None)])
    c2 = g.version(c, "c2", t[5], run=r4)
    g.run(j2, t[6], inputs=[(c, c2)], outputs=[(d, None)])
    g.version(d, "d2", t[6])
    with LineageQueries(pg_dsn) as q:
        latest = q.ancestors("ns/D", within_dataset="ns/A")
        assert latest.root_version == "d2"
        assert [(x.version, x.version_id, x.steps) for x in latest.ancestors] == [("a2", a2, 2)]
        first = q.ancestors("ns/D", within_dataset="ns/A", version="d1")
        assert [x.version for x in first.ancestors] == ["a1"]
        assert first.ancestors[0].version_id == a1
        assert [x.version for x in q.ancestors("ns/D", "ns/B", version="d1").ancestors] == ["b1"]
        assert q.ancestors("ns/C", within_dataset="ns/D").ancestors == []
        with pytest.raises(NodeNotFoundError):
            q.ancestors("ns/D", "ns/A", version="nope")
    g.close()


@pytest.mark.integration
def test_to_dict_is_json(graph) -> None:
    import json

    _, _, q = graph
    doc = json.loads(json.dumps(q.upstream(f"{NS}/mart.revenue", depth=2).to_dict()))
    assert doc["root"]["label"] == f"{NS}/mart.revenue" and doc["direction"] == "upstream"
    assert {n["node"]["name"] for n in doc["nodes"]} >= {"stg.orders", "clean_orders"}
    route = json.loads(json.dumps(q.routes(f"{NS}/raw.orders", f"{NS}/mart.revenue").to_dict()))
    assert route["routes"][0][0]["kind"] == "dataset" and route["routes"][0][1]["kind"] == "job"


# -- end to end: OpenLineage events through GraphStore.write_batch, then the questions -----------------

PG = "postgres://db:5432"


def _event(job: str, time: str, inputs: list[dict], outputs: list[dict], job_facets: dict | None = None,
           run_id: str | None = None) -> dict:
    base = {"_producer": "https://example.com/producer", "_schemaURL": "https://example.com/facet.json"}
    for facets in [job_facets or {}] + [d.get("facets") or {} for d in inputs + outputs]:
        for facet in facets.values():
            for key, value in base.items():
                facet.setdefault(key, value)  # BaseFacet: the core validation requires both on every facet
    return {
        "eventType": "COMPLETE", "eventTime": time, "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": run_id or str(uuid.uuid4()), "facets": {}},
        "job": {"namespace": "etl", "name": job, "facets": job_facets or {}},
        "inputs": inputs, "outputs": outputs,
    }


def _ds(name: str, ns: str = PG, fields: list[str] | None = None, **facets: object) -> dict:
    out: dict = {"namespace": ns, "name": name, "facets": dict(facets)}
    if fields:
        out["facets"]["schema"] = {"fields": [{"name": f, "type": "int"} for f in fields]}
    return out


def _cols(src: str, mapping: dict[str, list[tuple[str, str]]]) -> dict:
    return {"fields": {t: {"inputFields": [{"namespace": PG, "name": src, "field": f,
                                            "transformations": [{"type": "DIRECT", "subtype": sub}]}
                                           for f, sub in cols]} for t, cols in mapping.items()}}


def _version(v: str) -> dict:
    return {"sourceCodeLocation": {"type": "git", "url": "https://git/etl", "version": v}}


@pytest.mark.integration
def test_end_to_end_openlineage_events(pg_dsn: str) -> None:
    from schemas.identity import event_hash
    from schemas.validate import validate_event
    from sink.export import object_array_document, wia_document
    from sink.graph import load_snapshot
    from sink.model import StoredEvent
    from sink.postgres import GraphStore
    from sink.validation import validate_object_array, validate_wia_graph

    def stored(doc: dict) -> StoredEvent:
        event = validate_event(doc)
        return StoredEvent(event=event, event_hash=event_hash(event), source="test")

    day1, day3 = "2024-05-01T10:00:00.000000Z", "2024-05-03T10:00:00.000000Z"
    clean_run = str(uuid.uuid4())
    batch1 = [
        _event("clean", day1, [_ds("raw.orders", fields=["id", "amount"])],
               [_ds("stg.orders", fields=["id", "amount"],
                    columnLineage=_cols("raw.orders", {"amount": [("amount", "IDENTITY")]}))],
               _version("v1"), run_id=clean_run),
        _event("daily", day1, [_ds("stg.orders"), _ds("raw.fx")],
               [_ds("mart.daily", fields=["total"],
                    columnLineage=_cols("stg.orders", {"total": [("amount", "AGGREGATION")]}))], _version("v1")),
        _event("anon", day1, [_ds("mart.daily")], [_ds("public.daily_anon")],
               {"tracing": {"terminal": True}}),
        _event("dedupe", day1, [_ds("stg.orders")], [_ds("stg.orders")]),
        _event("publish", day1, [_ds("public.daily_anon")],
               [_ds("exports/daily", ns="s3://bucket",
                    symlinks={"identifiers": [{"namespace": "hive://ms", "name": "db.daily", "type": "TABLE"}]})]),
    ]
    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, [stored(e) for e in batch1])
        # a new version of `daily` stops reading raw.fx: that edge becomes history
        store.write_batch(2, [stored(_event("daily", day3, [_ds("stg.orders")], [_ds("mart.daily")],
                                            _version("v2")))])
    with LineageQueries(pg_dsn) as q:
        today = q.upstream(f"{PG}/mart.daily", depth=1)
        assert {h.node.label for h in today.hits} == {"job:etl/daily", f"{PG}/stg.orders"}
        then = q.upstream(f"{PG}/mart.daily", depth=1, as_of=datetime.fromisoformat("2024-05-02T00:00:00+00:00"))
        assert f"{PG}/raw.fx" in {h.node.label for h in then.hits}
        down = q.downstream(f"{PG}/raw.orders", depth=5)
        assert "job:etl/anon" in down.labels() and f"{PG}/public.daily_anon" not in down.labels()
        assert [h.terminal for h in down.hits if h.node.name == "anon"] == [True]
        cyc = q.upstream(f"{PG}/stg.orders", depth=20)
        assert {"job:etl/dedupe", "job:etl/clean", f"{PG}/raw.orders"} <= cyc.labels()
        routes = q.routes(f"{PG}/raw.orders", f"{PG}/mart.daily")
        assert [[n.label for n in r] for r in routes.routes] == [
            [f"{PG}/raw.orders", "job:etl/clean", f"{PG}/stg.orders", "job:etl/daily", f"{PG}/mart.daily"]]
        cols = q.upstream(f"{PG}/mart.daily#total", depth=3)
        assert cols.labels() == {f"{PG}/stg.orders#amount", f"{PG}/raw.orders#amount"}
        alias = q.resolve("s3://bucket/exports/daily")
        assert (alias.namespace, alias.name) == ("hive://ms", "db.daily")
        assert "job:etl/publish" in q.upstream("s3://bucket/exports/daily", depth=1).labels()
        anc = q.ancestors(f"{PG}/stg.orders", within_dataset=f"{PG}/raw.orders", version=f"run:{clean_run}")
        assert anc.root_version == f"run:{clean_run}"
        assert [a.run_id for a in anc.ancestors] == [clean_run]
        impact = q.impact(f"{PG}/raw.orders")
        assert f"{PG}/public.daily_anon" in {h.node.label for h in impact.datasets}   # impact goes through
    snap = load_snapshot(pg_dsn)
    doc = wia_document(snap)
    assert [v.rule for v in validate_wia_graph(doc)] == ["dag"]        # stg.orders -> stg.orders (dedupe)
    assert validate_object_array(object_array_document(snap))


@pytest.mark.integration
def test_system_postgres_via_dsn(system_pg_dsn: str) -> None:
    """The machine's own PostgreSQL (an older major version) answers the same questions."""
    g = GraphRows(system_pg_dsn)
    ids = sample_warehouse(g)
    g.close()
    with LineageQueries(system_pg_dsn) as q:
        assert labels(q.upstream(f"{NS}/stg.orders", depth=10, stop_at_terminal=False)) == {
            "clean_orders", "dedupe_orders", "raw.orders", "raw.customers", "ingest_orders"}
        assert len(q.routes(f"{NS}/raw.orders", f"{NS}/mart.revenue").routes) == 2
        assert [h.node.node_id for h in q.downstream("job:airflow/ingest_orders", depth=1).hits] == [ids["A"]]
        assert {h.node.label for h in q.upstream(f"{NS}/mart.revenue#total").hits} == {
            f"{NS}/stg.orders#amount", f"{NS}/raw.orders#amount"}


@pytest.mark.unit
def test_name_splits_and_as_of_flag() -> None:
    from lineage.commands.query import parse_as_of
    from schemas.errors import ConfigurationError
    from sink.queries import _splits

    assert _splits("s3://b/x.csv") == (["s3", "s3:", "s3:/", "s3://b"], ["//b/x.csv", "/b/x.csv", "b/x.csv", "x.csv"])
    assert _splits("ns:name") == (["ns"], ["name"])
    assert parse_as_of("2026-01-31T00:00:00Z").isoformat() == "2026-01-31T00:00:00+00:00"
    assert parse_as_of(None) is None
    for bad in ("2026-01-31T00:00:00", "yesterday"):
        with pytest.raises(ConfigurationError):
            parse_as_of(bad)
