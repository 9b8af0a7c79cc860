"""Spark's Python processes in local mode run through a launcher that drops PySpark's source zips from PYTHONPATH.

Imported from ``pyspark.zip``, every PySpark module a data-source planner needs is compiled from source again in every
process (stream_processor/spark_python.py); through the launcher the installed packages are used.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stream_processor.spark_python import (
    ENABLE_VARIABLE,
    is_launcher,
    launcher_text,
    packages_installed,
    spark_python,
)

PRINT_PATH = "import os, sys; print(os.environ.get('PYTHONPATH')); print(sys.executable)"


def _run(launcher: str, pythonpath: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run([launcher, "-c", PRINT_PATH], env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv(ENABLE_VARIABLE, raising=False)
    path = spark_python("local[2]", cache_root=tmp_path)
    assert path != sys.executable and Path(path).is_file()
    return path


@pytest.mark.unit
def test_the_launcher_drops_pyspark_zips_and_jars_and_keeps_the_rest(launcher: str) -> None:
    path = ":".join([
        "/opt/spark/python/lib/pyspark.zip", "/work/project", "/opt/spark/python/lib/py4j-0.10.9.9-src.zip",
        "/opt/spark/jars/spark-core_2.13-4.3.0.jar", "/data/a*b", "", "/work/other"])
    out = _run(launcher, path)
    # a pattern is kept as written (no globbing), an empty entry (the working directory) inside the path too
    assert out == ["/work/project:/data/a*b::/work/other", sys.executable]


@pytest.mark.unit
def test_the_launcher_unsets_a_path_of_only_zips_and_leaves_none_alone(launcher: str) -> None:
    assert _run(launcher, "/x/python/lib/pyspark.zip:/x/python/lib/py4j-0.10.9.9-src.zip") == ["None", sys.executable]
    assert _run(launcher, None) == ["None", sys.executable]


@pytest.mark.unit
def test_the_launcher_is_written_once_executable_and_reused(tmp_path: Path, launcher: str) -> None:
    mode = Path(launcher).stat().st_mode
    assert mode & stat.S_IXUSR and mode & stat.S_IXOTH
    before = Path(launcher).stat().st_mtime_ns
    assert spark_python("local[*]", cache_root=tmp_path) == launcher
    assert Path(launcher).stat().st_mtime_ns == before
    assert Path(launcher).read_text() == launcher_text(sys.executable)


@pytest.mark.unit
def test_a_launcher_is_told_from_an_interpreter(tmp_path: Path, launcher: str) -> None:
    """A launcher left in ``PYSPARK_PYTHON`` (an earlier local session's) is replaced by a cluster session's choice."""
    assert is_launcher(launcher)
    assert not is_launcher(sys.executable)
    assert not is_launcher(str(tmp_path / "missing"))
    assert not is_launcher(None)


@pytest.mark.unit
def test_a_cluster_session_after_a_local_one_hands_out_the_interpreter(launcher: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from stream_processor import session

    class Stop(Exception):
        pass

    def stop(*_args: object, **_kwargs: object) -> object:
        raise Stop   # the environment is settled before the memory settings are read

    monkeypatch.setenv("PYSPARK_PYTHON", launcher)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", launcher)
    monkeypatch.setattr(session, "SparkMemorySettings", stop)
    with pytest.raises(Stop):
        session.build_spark_session(master="spark://127.0.0.1:7077")
    assert os.environ["PYSPARK_PYTHON"] == os.environ["PYSPARK_DRIVER_PYTHON"] == sys.executable


@pytest.mark.unit
def test_an_interpreter_path_with_quotes_and_spaces_is_run_as_it_is(tmp_path: Path) -> None:
    odd = tmp_path / "a dir" / "it's $python"
    odd.parent.mkdir()
    odd.symlink_to(sys.executable)
    path = spark_python("local[2]", executable=str(odd), cache_root=tmp_path / "cache")
    assert _run(path, "/p/pyspark.zip:/q") == ["/q", str(odd)]


@pytest.mark.unit
def test_a_cluster_or_the_switch_off_gets_the_interpreter_itself(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert spark_python("spark://127.0.0.1:7077", cache_root=tmp_path) == sys.executable
    assert spark_python(None, cache_root=tmp_path) == sys.executable   # spark-submit's master
    monkeypatch.setenv(ENABLE_VARIABLE, "false")
    assert spark_python("local[2]", cache_root=tmp_path) == sys.executable
    assert not any(tmp_path.iterdir())


@pytest.mark.unit
def test_an_unwritable_cache_falls_back_to_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENABLE_VARIABLE, raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert spark_python("local[2]", cache_root=blocker / "cache") == sys.executable


@pytest.mark.integration
def test_the_local_sessions_data_source_planner_imports_the_installed_pyspark(spark) -> None:
    """``schema()`` of a Python data source runs in Spark's ``create_data_source`` planner process: it names its one
    column after where that process imported ``pyspark`` from."""
    if not packages_installed():
        pytest.skip("pyspark and py4j are not installed as packages: Spark's zips are the only copy")
    from pyspark.sql.datasource import DataSource

    class Where(DataSource):
        @classmethod
        def name(cls):
            return "lineage_test_where"

        def schema(self):
            import pyspark

            return "from_zip int" if ".zip" in pyspark.__file__ else "from_package int"

    spark.dataSource.register(Where)
    assert spark.sparkContext.pythonExec != sys.executable   # the launcher (session.py, local mode)
    assert spark.read.format("lineage_test_where").load().schema.names == ["from_package"]
