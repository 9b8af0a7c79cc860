"""benchmarks/cpu_by_process.py: CPU seconds per kind of process while a command runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks.cpu_by_process import _cmdline, classify, cpu_seconds, main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("cmdline", "kind"), [
    ("/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp x org.apache.spark.deploy.SparkSubmit", "jvm"),
    ("bash /x/pyspark/bin/spark-class org.apache.spark.deploy.SparkSubmit --conf "
     "spark.python.daemon.module=stream_processor.spark_daemon pyspark-shell", "other"),
    ("/usr/bin/python -m pyspark.daemon pyspark.worker", "spark-python"),
    ("/usr/bin/python -m stream_processor.spark_daemon pyspark.sql.worker.plan_data_source_read", "spark-python"),
    ("/usr/bin/python -m pyspark.sql.streaming.python_streaming_source_runner", "spark-source-runner"),
    ("/x/pginstall/bin/postgres -D /tmp/data -p 5432", "postgres"),
    ("postgres: root test 127.0.0.1(5000) idle", "postgres"),
    ("/x/bin/tansu broker --listener-url tcp://127.0.0.1:9092", "broker"),
    ("/usr/bin/python3 /usr/bin/lineage demo", "python"),
    ("redis-server 127.0.0.1:6379", "other"),
])
def test_classify(cmdline, kind):
    assert classify(cmdline) == kind


def test_a_python_child_that_has_exited_and_not_been_waited_for_is_still_python() -> None:
    # a zombie has no command line; its kind comes from its name, not "other"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(200):
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        assert _cmdline(child.pid) is not None
        assert classify(_cmdline(child.pid) or "") == "python"
    finally:
        child.wait()


def test_the_commands_own_cpu_is_counted_as_driver(tmp_path):
    # busy for 0.5 s of its own CPU time (not wall time), then exit 3
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nsys.exit(3)"
    wall, totals, code = cpu_seconds([sys.executable, "-c", burn], interval=0.05)
    assert code == 3
    assert totals.get("driver", 0) >= 0.3
    out = tmp_path / "cpu.json"
    assert main(["--json", str(out), "--", sys.executable, "-c", "pass"]) == 0
    assert set(json.loads(out.read_text())) == {"wall_seconds", "cpu_seconds", "exit_code"}


def test_the_series_has_one_line_per_sample(tmp_path) -> None:
    out = tmp_path / "series.jsonl"
    # busy for 0.6 s of its own CPU time (not wall time)
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    assert main(["--series", str(out), "--interval", "0.05", "--", sys.executable, "-c", burn]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) >= 3 and all("t" in line for line in lines)
    # the command (kind "driver"), sample by sample; its last interval before it exits is not seen
    assert sum(line.get("driver", 0) for line in lines) >= 0.3


def test_tree_counts_the_commands_children_and_not_the_machines_other_processes() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"
    # a busy neighbour of kind "other" (a shell loop, no descendant of the command), and a command whose child
    # (kind "python") burns 1 s of CPU
    neighbour = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        child = textwrap.dedent(f"""
            import subprocess, sys
            subprocess.run([sys.executable, "-c", {burn.format(s=1.0)!r}], check=True)
        """)
        _, mine, code = cpu_seconds([sys.executable, "-c", child], interval=0.05, tree=True)
        _, machine, _ = cpu_seconds([sys.executable, "-c", child], interval=0.05)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert code == 0
    assert mine.get("python", 0) >= 0.7        # the child is counted
    assert mine.get("other", 0) < 0.1          # the neighbour is not ...
    assert machine.get("other", 0) >= 0.2      # ... where the machine-wide count has it


def test_tree_includes_a_daemon_the_command_detached() -> None:
    # the command double-forks a busy grandchild and exits when it is done: the grandchild is adopted by init (as the
    # PostgreSQL server pg_ctl starts is) and still counted, as long as it runs while the command does
    code = textwrap.dedent("""
        import os, time
        done_r, done_w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                t = time.process_time()
                while time.process_time() - t < 0.6: pass
                os.write(done_w, b"x")
            os._exit(0)
        os.read(done_r, 1)     # the command lasts until its detached grandchild has burned its CPU
        time.sleep(0.2)
    """)
    _, mine, rc = cpu_seconds([sys.executable, "-c", code], interval=0.05, tree=True)
    assert rc == 0
    # whatever kind the grandchild's command line makes it, its CPU is the tree's beside the command's own
    assert sum(v for k, v in mine.items() if k != "driver") >= 0.4
