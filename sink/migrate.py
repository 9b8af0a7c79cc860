"""Versioned, append-only schema migrations (``sink/migrations/NNN_name.sql``), applied on start.

Each file is applied once, in its own transaction, under a transaction-scoped advisory lock, and
recorded in ``schema_migrations (version, name, checksum, applied_at)``: two processes starting
together serialise on the lock and the second finds the version already recorded. A shipped migration
is never edited; a checksum that differs from the recorded one is logged as a warning (the database
keeps what it applied).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from schemas.errors import StoreError

__all__ = ["Migration", "available_migrations", "apply_migrations", "MIGRATION_LOCK_KEY"]

log = logging.getLogger(__name__)

#: pg_advisory_xact_lock key of the migrator ("LINEAGEM" as a big-endian int64).
MIGRATION_LOCK_KEY = int.from_bytes(b"LINEAGEM", "big") & 0x7FFF_FFFF_FFFF_FFFF
_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def available_migrations() -> list[Migration]:
    """The migrations shipped in ``sink/migrations``, in version order."""
    out = []
    for entry in resources.files("sink").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            out.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    out.sort(key=lambda m: m.version)
    versions = [m.version for m in out]
    if len(set(versions)) != len(versions):
        raise StoreError(f"two migrations share a version number: {versions}", code="store.migration")
    return out


def apply_migrations(conn: psycopg.Connection, up_to: int | None = None) -> list[int]:
    """Apply every pending migration (``<= up_to`` if given); return the versions applied now."""
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
                            version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                            applied_at timestamptz NOT NULL DEFAULT now())""")
    for migration in available_migrations():
        if up_to is not None and migration.version > up_to:
            break
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                row = conn.execute("SELECT checksum FROM schema_migrations WHERE version = %s",
                                   (migration.version,)).fetchone()
                if row is not None:
                    if row[0] != migration.checksum:
                        log.warning("migration %03d_%s differs from the one applied; shipped migrations must "
                                    "not be edited (add a new file instead)", migration.version, migration.name)
                    continue
                conn.execute(migration.sql)
                conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                             (migration.version, migration.name, migration.checksum))
                applied_now.append(migration.version)
                log.info("applied migration %03d_%s", migration.version, migration.name)
        except psycopg.Error as exc:
            raise StoreError(f"migration {migration.version:03d}_{migration.name} failed: {exc}",
                             code="store.migration") from exc
    return applied_now
