"""``write_batch`` one by one against ``write_batches`` (pipelined), interleaved, with counted CPU.

    python benchmarks/store_overlap_ab.py [--events 20000] [--batch-size 5000] [--rounds 3] [--dsn DSN]

Each round writes the same demo batches (benchmarks/store_write_bench.py's events) into two fresh databases,
first with ``GraphStore.write_batch`` per batch, then with ``GraphStore.write_batches``, and prints for each
the wall time, events/s, this process's CPU seconds and the server's (every ``postgres`` process of this
machine, with the children it reaped: the staging connection's backend exits before the count), and how many
cores the two kept busy on average. Interleaving is the point: on a shared machine the load drifts between
runs, so compare the two lines of one round. Prints figures; asserts nothing.

Measured 2026-11-23 (2 cores, 20,000 events; 15 interleaved pairs over the session, some beside a Spark run):
pipelined / serial events/s median 1.08, range 0.67-1.51; cores busy ~1.45 pipelined against ~1.2 serial.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_write_bench import bench_postgres, demo_events  # noqa: E402

from sink.postgres import GraphStore  # noqa: E402


def server_cpu_seconds() -> float:
    """CPU seconds of every ``postgres`` process of this machine, including the children each reaped."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] != "postgres":
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])   # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def fresh_database(admin_dsn: str) -> str:
    name = f"overlap_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)


def one_run(dsn: str, batches: list[tuple[int, list]], pipelined: bool) -> dict[str, float]:
    with GraphStore(dsn) as store:
        store.migrate()
        t0, c0, s0 = time.perf_counter(), time.process_time(), server_cpu_seconds()
        if pipelined:
            for _result, _rejected in store.write_batches(batches):
                pass
        else:
            for batch_id, events in batches:
                store.write_batch(batch_id, events)
        seconds, python_cpu = time.perf_counter() - t0, time.process_time() - c0
    time.sleep(0.3)    # let the postmaster reap the staging connection's backend
    return {"seconds": seconds, "python_cpu": python_cpu, "server_cpu": server_cpu_seconds() - s0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=None, help="PostgreSQL DSN of a database to create others from "
                                                     "(default: embedded server in a temp dir)")
    args = parser.parse_args(argv)
    dsn, stop_postgres = bench_postgres(args.dsn)
    try:
        events = demo_events(args.events)
        batches = [(1 + i // args.batch_size, events[i:i + args.batch_size])
                   for i in range(0, len(events), args.batch_size)]
        for round_number in range(args.rounds):
            for pipelined in (False, True):
                figures = one_run(fresh_database(dsn), batches, pipelined)
                cpu = figures["python_cpu"] + figures["server_cpu"]
                print(f"round {round_number} {'write_batches' if pipelined else 'write_batch  '}: "
                      f"{figures['seconds']:.2f} s, {len(events) / figures['seconds']:.0f} events/s, "
                      f"python {figures['python_cpu']:.2f} CPU-s, server {figures['server_cpu']:.2f} CPU-s, "
                      f"cores busy {cpu / figures['seconds']:.2f}, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        stop_postgres()
    return 0


if __name__ == "__main__":
    sys.exit(main())
