"""The local driver's ``file:`` file system sets permissions without a chmod subprocess (stream_processor/localfs.py)."""

from __future__ import annotations

import os
import stat

import pytest

from stream_processor import localfs


@pytest.mark.unit
def test_local_fs_conf_is_for_local_mode_only_and_keeps_a_given_class_path(monkeypatch, tmp_path):
    jar = tmp_path / "x.jar"
    jar.write_bytes(b"")
    monkeypatch.setattr(localfs, "local_fs_jar", lambda cache_root=None: str(jar))
    assert localfs.local_fs_conf("spark://host:7077") == {}
    assert localfs.local_fs_conf(None) == {}
    conf = localfs.local_fs_conf("local[2]", "/opt/a.jar")
    assert conf == {"spark.driver.extraClassPath": f"/opt/a.jar{os.pathsep}{jar}",
                    "spark.hadoop.fs.file.impl": localfs.CLASS_NAME}
    monkeypatch.setenv(localfs.ENABLE_VARIABLE, "false")
    assert localfs.local_fs_conf("local[2]") == {}


@pytest.mark.integration
def test_a_source_that_does_not_compile_leaves_hadoops_default(monkeypatch, tmp_path, caplog):
    if localfs._javac() is None:   # no compiler at all: the same outcome, for that reason
        assert localfs.local_fs_jar(tmp_path / "cache") is None
        assert not list((tmp_path / "cache").rglob("*.jar"))
        return
    broken = tmp_path / "NioLocalFileSystem.java"
    broken.write_text("package io.lineage.hadoop; public class NioLocalFileSystem extends Missing {}\n")
    monkeypatch.setattr(localfs, "JAVA_SOURCE", broken)
    assert localfs.local_fs_jar(tmp_path / "cache") is None
    assert "could not build" in caplog.text and "Missing" in caplog.text
    assert not list((tmp_path / "cache").rglob("*.jar"))


@pytest.mark.integration
def test_the_sessions_local_file_system_sets_the_mode_bits_hadoop_asks_for(spark, tmp_path):
    """The shared session (local mode) runs with the jar built from the source in the checkout; files and directories
    made through Hadoop get the modes Hadoop's own code gives them (umask 022), ``.crc`` files included, and an explicit
    ``setPermission`` sets exactly its bits."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    if localfs._javac() is None:   # no compiler: Hadoop's own local file system, which must give the same modes
        assert fs.getClass().getName() == "org.apache.hadoop.fs.LocalFileSystem"
    else:
        assert fs.getClass().getName() == localfs.CLASS_NAME
        assert fs.getRawFileSystem().getClass().getName() == localfs.CLASS_NAME + "$Raw"
    hpath = jvm.org.apache.hadoop.fs.Path
    out = fs.create(hpath(f"file://{tmp_path}/d/f"), True)
    out.write(b"abc")
    out.close()
    mode = {name: stat.S_IMODE(os.stat(tmp_path / "d" / name).st_mode) for name in ("f", ".f.crc")}
    assert mode == {"f": 0o644, ".f.crc": 0o644}
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o755
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission
    for bits in (0o600, 0o640, 0o705, 0o000, 0o777):
        fs.setPermission(hpath(f"file://{tmp_path}/d/f"), perm.createImmutable(bits))
        assert stat.S_IMODE(os.stat(tmp_path / "d" / "f").st_mode) == bits
    fs.setPermission(hpath(f"file://{tmp_path}/d/f"), perm.createImmutable(0o644))
    stream = fs.open(hpath(f"file://{tmp_path}/d/f"))   # the checksum still verifies
    try:
        assert bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)) == b"abc"
    finally:
        stream.close()
