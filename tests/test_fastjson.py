"""sink.fastjson: orjson where it gives the identical value, the json module otherwise."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sink.fastjson import dumps_compact, dumps_sorted, json_compact, loads

pytestmark = pytest.mark.unit

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_loads_gives_the_json_modules_value(value):
    text = json.dumps(value)
    assert loads(text) == json.loads(text)
    assert loads(text.encode()) == json.loads(text)
    assert type(loads(text)) is type(json.loads(text))


@pytest.mark.parametrize("text", ['{"n": 123456789012345678901234}', '[1e400]', '{"x": -1.5e-310}', '"\\ud800"',
                                  '{"a": 1, "a": 2}'])
def test_loads_falls_back_where_orjson_would_differ(text):
    assert repr(loads(text)) == repr(json.loads(text))


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=-(10**18), max_value=10**18), st.integers(min_value=0, max_value=10**17),
       st.integers(min_value=-400, max_value=400), st.sampled_from(["e{:+d}", "E{:d}"]))
def test_loads_reads_exponent_numbers_as_the_json_module_does(whole, fraction, exponent, mark):
    # no guard looks at exponents: orjson refuses an overflow (the json module then reads it) and must read
    # everything else, subnormals and underflows to zero included, to the very float the json module reads
    text = f"[{whole}.{fraction}{mark.format(exponent)}]"
    assert repr(loads(text)) == repr(json.loads(text))


def test_loads_reports_invalid_text_as_the_json_module_does():
    with pytest.raises(json.JSONDecodeError):
        loads("{not json")


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_dumps_sorted_is_the_same_value_with_sorted_keys(value):
    text = dumps_sorted(value)
    assert json.loads(text) == value
    reference = json.dumps(value, sort_keys=True, default=str)
    assert json.loads(text) == json.loads(reference)
    if isinstance(value, dict):
        assert list(json.loads(text)) == sorted(value)


def test_dumps_sorted_writes_str_of_what_json_has_no_type_for():
    row = {"b": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "a": date(2026, 1, 2), "t": time(1, 2, 3),
           "u": uuid.UUID("12345678-1234-5678-1234-567812345678"), "d": Decimal("1.10"), "raw": b"\x00x",
           "nested": [{"z": 1, "y": "é"}], "big": 2**70}
    assert json.loads(dumps_sorted(row)) == json.loads(json.dumps(row, sort_keys=True, default=str))
    assert dumps_sorted(row).index('"a"') < dumps_sorted(row).index('"b"')


def test_dumps_sorted_falls_back_for_non_string_keys():
    assert json.loads(dumps_sorted({2: "y", 1: "x"})) == {"1": "x", "2": "y"}


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_dumps_compact_is_the_reference_text_as_a_value(value):
    assert json.loads(dumps_compact(value)) == json.loads(json_compact(value))
