"""What the stream's decoder costs per demo message (no Spark, no server).

    PYTHONPATH=. python benchmarks/decode_bench.py [--messages 3000] [--repeats 5]

:func:`stream_processor.decode.decode_record` is the reader task's work per Kafka message (``lineage_kafka`` with
``decode=packed``, through ``DecodedColumns.add``): the Avro envelope (or JSON) read, the parse, validation, the
canonical text, its checks and the hash. The messages are the demo traffic's (``DemoTraffic(seed=7)``, as
benchmarks/e2e_bench.py sends them: Avro single-object, JSON for a subject's message), decoded twice untimed first
(a long-lived worker has its caches warm). Each repeat decodes them all; the figure is this thread's CPU time per
message (``time.thread_time``: other processes on the shared 2-core machine do not inflate it), median and range over
the repeats. PYTHONPATH picks the checkout (a worktree of another commit, with its compiled modules, for an A/B).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import demo_messages  # noqa: E402
from stream_processor.decode import decode_record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    messages = demo_messages(args.messages)
    for _ in range(2):
        for value, headers in messages:
            decode_record(value, headers)
    figures = []
    for _ in range(args.repeats):
        started = time.thread_time()
        for value, headers in messages:
            decode_record(value, headers)
        figures.append((time.thread_time() - started) / len(messages) * 1e6)
    print(f"demo: {len(messages)} messages per repeat, {args.repeats} repeats")
    print(f"decode_record: median {statistics.median(figures):.1f} us/message (range {min(figures):.1f}-"
          f"{max(figures):.1f}, {args.repeats} repeats: {', '.join(f'{f:.1f}' for f in figures)})")


if __name__ == "__main__":
    main()
