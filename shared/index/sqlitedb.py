"""Open SQLite connections with sqlite-vec loaded, whatever this Python allows.

Some Pythons (pyenv builds without ``--enable-loadable-sqlite-extensions``) ship a
stdlib ``sqlite3`` that cannot load extensions. We then use ``pysqlite3`` (the
``pysqlite3-binary`` wheel: the same DB-API with a bundled, extension-capable SQLite).
``memoryd doctor`` reports which driver is in use.
"""

from __future__ import annotations

import functools
import sqlite3 as _stdlib_sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import SqliteExtensionUnavailable


@dataclass(frozen=True)
class Driver:
    name: str
    module: ModuleType
    sqlite_version: str
    vec_version: str


def _try_driver(name: str, module: ModuleType) -> Driver | None:
    import sqlite_vec

    try:
        conn = module.connect(":memory:")
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        (vec_version,) = conn.execute("select vec_version()").fetchone()
        conn.execute("create virtual table t using fts5(x)")
        conn.close()
    except (AttributeError, module.OperationalError, module.NotSupportedError):
        return None
    return Driver(name=name, module=module, sqlite_version=module.sqlite_version, vec_version=vec_version)


@functools.cache
def driver() -> Driver:
    """The first driver that can load sqlite-vec and has FTS5."""
    found = _try_driver("sqlite3 (stdlib)", _stdlib_sqlite3)
    if found:
        return found
    try:
        from pysqlite3 import dbapi2 as pysqlite3
    except ImportError:
        pysqlite3 = None
    if pysqlite3 is not None:
        found = _try_driver("pysqlite3 (pysqlite3-binary)", pysqlite3)
        if found:
            return found
    raise SqliteExtensionUnavailable(
        "this Python's sqlite3 cannot load extensions and pysqlite3 is not importable; "
        "install it with `pip install pysqlite3-binary` or use a Python built with "
        "--enable-loadable-sqlite-extensions"
    )


def connect(path: Path | str, *, readonly: bool = False) -> Any:
    """A connection with sqlite-vec loaded, WAL and busy_timeout set first.

    Read-only connections use ``mode=ro`` so they can never write and never block the indexer.
    """
    import sqlite_vec

    drv = driver()
    if readonly:
        conn = drv.module.connect(f"file:{Path(path)}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = drv.module.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {d.SQLITE_BUSY_TIMEOUT_MS}")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    return conn
