"""Processor metrics: batch reports and query progress become Prometheus samples on an HTTP endpoint."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sink.model import BatchResult
from stream_processor.metrics import ProcessorMetrics
from stream_processor.writer import BatchReport


class _Op:
    numRowsTotal = 7
    memoryUsedBytes = 4096
    customMetrics = {"numDroppedDuplicateRows": 2, "rocksdbSstFileSize": 1234}


class _Src:
    startOffset = "null"   # the query's first batch (Spark's progress JSON has a null start offset)
    endOffset = json.dumps({"t": {"0": 10, "1": 5}})
    latestOffset = json.dumps({"t": {"0": 12, "1": 5}})


class _Progress:
    batchId = 4
    inputRowsPerSecond = 100.0
    processedRowsPerSecond = 80.0
    durationMs = {"triggerExecution": 1500}
    stateOperators = [_Op()]
    sources = [_Src()]


@pytest.mark.unit
def test_batch_report_and_progress_reach_the_endpoint():
    m = ProcessorMetrics()
    port = m.serve(0)
    report = BatchReport(
        batch_id=3, result=BatchResult(3, events_in=5, events_new=4, duplicates=1, rows_by_table={"lineage_runs": 4}),
        counts={("consumed", "t", "avro"): 5, ("rejected", "decode.json", "DecodeError"): 2,
                ("ts_bucket", "1000", ""): 5, ("self_groups", "pending", ""): 4, ("self_groups", "held", ""): 9,
                ("parses", "decode", ""): 5, ("parses", "recombine", ""): 3},
        committed_at=3.0, duration_seconds=0.5)
    m.on_batch(report)
    m.on_progress(_Progress())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("lineage_events_consumed_total", (("encoding", "avro"), ("topic", "t")))] == 5
    assert samples[("lineage_events_rejected_total", (("reason", "decode.json"),))] == 2
    assert samples[("lineage_event_parses_total", (("stage", "decode"),))] == 5
    assert samples[("lineage_event_parses_total", (("stage", "recombine"),))] == 3
    assert samples[("lineage_event_parses_total", (("stage", "staging"),))] == 0   # exported from the start
    assert samples[("lineage_duplicates_dropped_total", (("stage", "sink"),))] == 1
    assert samples[("lineage_duplicates_dropped_total", (("stage", "state"),))] == 2
    assert samples[("lineage_consumer_lag_records", (("partition", "0"), ("topic", "t")))] == 2
    assert samples[("lineage_end_to_end_latency_seconds_count", ())] == 5
    # commit at 3.0 s, records stamped in the 10 ms bucket starting at 1.000 s: latency 1.995 s
    assert samples[("lineage_end_to_end_latency_seconds_bucket", (("le", "2.0"),))] == 5
    assert samples[("lineage_state_rows", ())] == 7
    assert samples[("lineage_state_memory_bytes", ())] == 4096
    assert samples[("lineage_state_sst_bytes", ())] == 1234
    assert samples[("lineage_self_groups", (("state", "pending"),))] == 4   # gauges: the last batch's values
    assert samples[("lineage_self_groups", (("state", "held"),))] == 9
    assert m.status_line() == "events in 5, rejected 2, duplicates 3, batches 1, lag 2"


@pytest.mark.unit
def test_lag_is_the_backlog_a_batch_was_planned_with():
    """Without a rate limit a batch reads to the latest offset (end = latest): the gauge still reports the records
    it had to catch up (latest - start), not 0; a partition the batch began has no start: latest - end."""
    class Src:
        startOffset = json.dumps({"t": {"0": 400, "1": 7}, "$meta": {"x": 1}})
        endOffset = json.dumps({"t": {"0": 13400, "1": 9, "2": 30}})
        latestOffset = json.dumps({"t": {"0": 13400, "1": 9, "2": 31}, "$meta": {"x": 2}})

    class Progress(_Progress):
        sources = [Src()]

    m = ProcessorMetrics()
    m.on_progress(Progress())
    lag = {labels["partition"]: value for labels, value in
           ((s.labels, s.value) for f in m.registry.collect() for s in f.samples
            if s.name == "lineage_consumer_lag_records")}
    assert lag == {"0": 13000, "1": 2, "2": 1}
    assert m.status_line().endswith("lag 13003")

    class Caught(_Progress):   # an idle tick: nothing new since the last batch
        sources = [type("S", (), {"startOffset": Src.endOffset, "endOffset": Src.endOffset,
                                  "latestOffset": Src.endOffset})()]

    m.on_progress(Caught())
    assert m.status_line().endswith("lag 0")


@pytest.mark.integration
def test_listener_reads_progress_of_a_real_query(spark, tmp_path):
    """The JSON bridge hands Spark's own progress events to the metrics: batch id, state rows of a
    dedupe operator, and the duplicates it dropped."""
    import time

    from stream_processor.metrics import MetricsListener

    m = ProcessorMetrics()
    listener = MetricsListener(m)
    spark.streams.addListener(listener)
    try:
        source = tmp_path / "in"
        source.mkdir()
        # 3 distinct values, one of them twice: the dedupe keeps 3 rows in state and drops 1
        (source / "a.json").write_text("\n".join(json.dumps({"v": v, "ts": "2026-01-01T00:00:00Z"})
                                                  for v in ("a", "b", "c", "a")))
        df = (spark.readStream.schema("v string, ts timestamp").json(str(source))
              .withWatermark("ts", "1 hour").dropDuplicates(["v", "ts"]))
        query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        deadline = time.time() + 30
        while m.totals["state_duplicates"] < 1 and time.time() < deadline:
            time.sleep(0.2)   # the listener bus delivers progress asynchronously
    finally:
        spark.streams.removeListener(listener)
    assert m.totals["state_duplicates"] == 1
    assert m.state_rows._value.get() == 3
    assert m.state_memory._value.get() > 0   # what the state store reports holding for those 3 rows
    assert m.batch_id._value.get() == query.lastProgress.batchId   # the last one (a no-data batch may follow)
    assert listener.last_progress_at > 0
