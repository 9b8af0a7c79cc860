"""sink/annotate.py: the quality formulas, pinned with numbers (pure, no servers)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from sink.annotate import (
    VersionFacts,
    accuracy,
    anomalies,
    completeness,
    consistency,
    quality_annotation,
    timeliness,
    validations,
)

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


@pytest.mark.unit
def test_completeness_formula_and_edges():
    # 1 - (10 + 30) / (100 * 2) = 0.8
    assert completeness(VersionFacts(row_count=100, null_counts={"a": 10, "b": 30})) == pytest.approx(0.8)
    assert completeness(VersionFacts(row_count=0, null_counts={"a": 0})) is None
    assert completeness(VersionFacts(row_count=None, null_counts={"a": 1})) is None
    assert completeness(VersionFacts(row_count=5, null_counts={})) is None
    assert completeness(VersionFacts(row_count=1, null_counts={"a": 5})) == 0.0   # clamped


@pytest.mark.unit
def test_accuracy():
    facts = VersionFacts(assertions=[{"assertion": "not_null", "success": True},
                                     {"assertion": "unique", "success": False},
                                     {"assertion": "between", "success": True, "column": "x"},
                                     {"assertion": "regex", "success": True}])
    assert accuracy(facts) == 0.75
    assert accuracy(VersionFacts()) is None
    rules = validations(facts)
    assert [r["rule_type"] for r in rules] == ["not_null", "unique", "range", "pattern"]
    assert rules[1] == {"rule_name": "unique", "rule_type": "unique", "passed": False, "failed_count": None,
                        "details": None}
    assert rules[2]["details"] == "column x" and rules[2]["failed_count"] == 0


@pytest.mark.unit
def test_consistency_against_previous():
    prev = VersionFacts(fields=[{"name": "a", "type": "int"}, {"name": "b", "type": "int"},
                                {"name": "c", "type": "text"}, {"name": "d", "type": "int"}])
    cur = VersionFacts(fields=[{"name": "a", "type": "int"}, {"name": "b", "type": "bigint"},
                               {"name": "c", "type": "text"}, {"name": "e", "type": "int"}])
    assert consistency(cur, prev) == 0.5          # a and c kept of 4
    assert consistency(cur, None) == 1.0
    assert consistency(VersionFacts(), prev) is None
    found = anomalies(cur, prev)
    assert found == [{"type": "invalid", "severity": "medium", "count": 2,
                      "description": "schema change: removed ['d'], type changed ['b']"}]


@pytest.mark.unit
def test_timeliness_linear_decay():
    end = T0
    assert timeliness(VersionFacts(event_time=end - timedelta(seconds=1), nominal_end=end)) == 1.0
    assert timeliness(VersionFacts(event_time=end + timedelta(minutes=15), nominal_end=end)) == pytest.approx(0.75)
    assert timeliness(VersionFacts(event_time=end + timedelta(minutes=30), nominal_end=end), 1800) == 0.0
    assert timeliness(VersionFacts(event_time=end)) is None


@pytest.mark.unit
def test_row_drop_and_null_spike_anomalies():
    prev = VersionFacts(row_count=1000, null_counts={"a": 10, "b": 0})
    cur = VersionFacts(row_count=200, null_counts={"a": 100, "b": 0})   # drop 80% -> high; a: 0.01 -> 0.5
    found = anomalies(cur, prev)
    assert found[0]["type"] == "missing" and found[0]["severity"] == "high" and found[0]["count"] == 800
    assert found[1]["type"] == "invalid" and found[1]["severity"] == "medium" and found[1]["count"] == 100
    assert len(found) == 2
    assert anomalies(VersionFacts(row_count=50, null_counts={}), VersionFacts(row_count=1000))[0]["severity"] == "critical"
    assert anomalies(VersionFacts(row_count=400), VersionFacts(row_count=1000))[0]["severity"] == "medium"
    assert anomalies(VersionFacts(row_count=600), VersionFacts(row_count=1000)) == []
    assert anomalies(cur, None) == []


@pytest.mark.unit
def test_quality_annotation_bundles_metrics():
    prev = VersionFacts(row_count=10, fields=[{"name": "a", "type": "int"}])
    cur = VersionFacts(row_count=10, null_counts={"a": 1}, fields=[{"name": "a", "type": "int"}],
                       assertions=[{"assertion": "x", "success": True}], event_time=T0, nominal_end=T0)
    note = quality_annotation(cur, prev)
    assert note.metrics == {"completeness": pytest.approx(0.9), "accuracy": 1.0, "consistency": 1.0,
                            "timeliness": 1.0}
    assert note.anomalies == []


def _random_version(rng, cols):
    """Column values of one dataset version as ``QUALITY_INPUTS`` gives them, edge cases included."""
    row_count = rng.choice([None, 0, -3, 1, 7, 100, 250_000])
    null_counts = rng.choice([None, {}, "{}", {c: rng.choice([0, 1, 5, 60, 99, 400, -2]) for c in rng.sample(cols, 3)}])
    if isinstance(null_counts, dict) and null_counts and rng.random() < 0.3:
        null_counts = json.dumps(null_counts)   # text, as a loader without the jsonb hook hands it over
    fields = rng.choice([None, [], [{"name": c, "type": rng.choice(["int", "text"])} for c in rng.sample(cols, 4)],
                         [{"name": "a", "type": "int"}, {"name": "a", "type": "text"}]])
    assertions = rng.choice([None, [], "[]", [
        {"assertion": rng.choice(["not_null", "unique_id", "value_between", "email_pattern", "custom_rule", ""]),
         "success": rng.choice([True, False, None]), "column": rng.choice([None, "a", ""]),
         **({"failedCount": rng.choice([0, 3, "x"])} if rng.random() < 0.5 else {})}
        for _ in range(rng.randint(1, 3))]])
    event_time = T0 + timedelta(seconds=rng.randint(0, 7200))
    nominal_end = rng.choice([None, T0, T0 + timedelta(seconds=3000), T0 + timedelta(seconds=9000)])
    return row_count, null_counts, fields, assertions, event_time, nominal_end


@pytest.mark.unit
def test_annotation_values_equal_the_facts_path():
    """The store's fast path (``annotation_values``, no VersionFacts) gives exactly what ``quality_annotation`` of
    ``facts_from_row`` gives, for random versions with and without a previous one (and None where the version has
    no quality input)."""
    import random

    from sink.annotate import annotation_values, facts_from_row

    rng = random.Random(30)
    cols = ["a", "b", "c", "d", "e"]
    compared = annotated = 0
    for _ in range(3000):
        rc, nc, fields, assertions, etime, nominal = _random_version(rng, cols)
        p_rc, p_nc, p_fields, p_as, p_time, p_nominal = _random_version(rng, cols)
        has_prev = rng.random() < 0.8
        window = rng.choice([3600.0, 0.0, 600.0])
        current = facts_from_row({"row_count": rc, "null_counts": nc, "fields": fields, "assertions": assertions,
                                  "event_time": etime, "nominal_end": nominal})
        previous = facts_from_row({"row_count": p_rc, "null_counts": p_nc, "fields": p_fields, "assertions": p_as,
                                   "event_time": p_time, "nominal_end": p_nominal}) if has_prev else None
        got = annotation_values(rc, nc, fields, assertions, etime, nominal, has_prev, p_rc, p_nc, p_fields, window)
        compared += 1
        if not current.has_quality_input():
            assert got is None
            continue
        want = quality_annotation(current, previous, window)
        assert got == (want.metrics, want.validations, want.anomalies)
        annotated += 1
    assert annotated > 2000 and compared == 3000
