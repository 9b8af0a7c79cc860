"""What validation costs per demo event: the core alone, core + standard facets, and the facet validators compared.

    PYTHONPATH=. python benchmarks/validate_bench.py [--events 4000] [--repeats 7] [--baseline OLD/schemas/validate.py]

The events are ``producers.demo.DemoTraffic(seed=1)`` messages (Evo documents unpacked), parsed once up front:
validation works on the parsed dict, so nothing here parses JSON. Each variant runs over all events ``repeats``
times; the figure is CPU time of this thread per event (``time.thread_time``, so other processes on a shared
machine do not inflate it), printed as median and range over the repeats:

- ``core``: :func:`schemas.validate.validate_event` (the spec's required fields and formats, BaseFacet fields);
- ``core+facets``: :func:`schemas.validate.validate_openlineage_event`, what the decoder calls; the difference to
  ``core`` is the cost of checking standard facets;
- ``baseline``, with ``--baseline``: ``validate_event`` of another checkout's ``schemas/validate.py`` (e.g. the
  one before standard facets were checked); ``added vs baseline`` is then the whole added cost;
- ``jsonschema-rs, one call per event``: the fast path alone (:func:`schemas.facets.event_facets_validator`);
- ``jsonschema-rs, one call per facet`` and ``fastjsonschema, one call per facet``: the alternatives, each facet
  checked against its own compiled schema (validators compiled before timing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from producers.demo import DemoTraffic
from schemas.facets import event_facets_validator, facet_validator, standard_facets
from schemas.validate import validate_event, validate_openlineage_event

Event = tuple[dict[str, Any], Any]   # (parsed event, the subject its `$self` outputs stand for)


def demo_events(n: int) -> list[Event]:
    events: list[Event] = []
    for message in DemoTraffic(seed=1).take(n):
        value = message.value
        for event in value["events"] if isinstance(value.get("events"), list) else [value]:
            events.append((json.loads(json.dumps(event)), message.subject))   # plain parsed JSON, nothing shared
    return events[:n]


def facets_of(event: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for key in ("run", "job"):
        for name, facet in ((event.get(key) or {}).get("facets") or {}).items():
            yield key, name, facet
    for key, own, level in (("inputs", "inputFacets", "input"), ("outputs", "outputFacets", "output")):
        for item in event.get(key) or ():
            for name, facet in (item.get("facets") or {}).items():
                yield "dataset", name, facet
            for name, facet in (item.get(own) or {}).items():
                yield level, name, facet


def measure(variants: dict[str, Callable[[dict[str, Any], Any], Any]], events: list[Event],
            repeats: int) -> dict[str, list[float]]:
    """Thread CPU microseconds per event, one figure per variant and repeat; the variants take turns within each
    repeat, so a change of load on a shared machine hits all of them alike and pairwise differences hold."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.thread_time()
            for event, subject in events:
                fn(event, subject)
            out[name].append((time.thread_time() - start) / len(events) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", help="path of another checkout's schemas/validate.py to compare with")
    args = parser.parse_args()
    events = demo_events(args.events)
    facets = sum(1 for e, _ in events for _ in facets_of(e))
    print(f"{len(events)} demo events, {facets / len(events):.1f} facets per event, "
          f"{sum(len(json.dumps(e)) for e, _ in events) / len(events) / 1000:.1f} kB mean")

    composite = event_facets_validator()
    for event, subject in events:   # compile every validator first (cached per process); the demo is valid
        assert not validate_openlineage_event(event, subject).facet_violations
        for level, name, _ in facets_of(event):
            facet_validator(level, name)
    variants: dict[str, Callable[[dict[str, Any], Any], Any]] = {
        "core": validate_event,
        "core+facets": validate_openlineage_event,
        "jsonschema-rs, one call per event": lambda event, _subject: composite.is_valid(event),
    }

    def per_facet(validators: dict[tuple[str, str], Callable[[Any], Any]]) -> Callable[[dict[str, Any], Any], None]:
        def run(event: dict[str, Any], _subject: Any) -> None:
            for level, name, facet in facets_of(event):
                check = validators.get((level, name))
                if check is not None:
                    check(facet)
        return run

    if args.baseline:
        import importlib.util

        spec = importlib.util.spec_from_file_location("baseline_validate", args.baseline)
        assert spec is not None and spec.loader is not None
        baseline = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(baseline)
        variants["baseline"] = baseline.validate_event

    schemas = standard_facets()
    variants["jsonschema-rs, one call per facet"] = per_facet(
        {k: v.is_valid for k in schemas if (v := facet_validator(*k)) is not None})
    try:
        import fastjsonschema

        compiled = {k: fastjsonschema.compile(s, use_formats=True) for k, s in schemas.items()}
        variants["fastjsonschema, one call per facet"] = per_facet(compiled)
    except ImportError:
        print("fastjsonschema not installed: skipped")

    results = measure(variants, events, args.repeats)
    for name, values in results.items():
        print(f"{name:40s} median {statistics.median(values):7.1f} us/event  "
              f"range {min(values):7.1f} .. {max(values):7.1f}")
    pairs = [("added by standard facets", "core")] + ([("added vs baseline", "baseline")] if args.baseline else [])
    for label, before in pairs:
        added = [b - a for a, b in zip(results[before], results["core+facets"], strict=True)]
        print(f"{label:40s} median {statistics.median(added):7.1f} us/event  "
              f"range {min(added):7.1f} .. {max(added):7.1f}")


if __name__ == "__main__":
    main()
