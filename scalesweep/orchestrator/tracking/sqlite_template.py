"""A new SQLite tracking store starts as a copy of an empty, fully migrated one.

MLflow makes a new SQLite store by running every schema migration since its first release, one
by one (``mlflow.store.db.utils._initialize_tables``): seconds of CPU for each new store, which
every first run and every sweep in its own directory pays. The same empty schema is made once
per MLflow version into the user's cache (``$XDG_CACHE_HOME/scalesweep``, else
``~/.cache/scalesweep``) and copied for each new store; MLflow then finds its tables in place
and, as for any store it opens, adds the Default experiment itself, with this store's own
artifact root (the template holds no experiment). The copy only ever creates a file that does
not exist yet (a hard link of the finished copy), so a store that appeared meanwhile -- another
driver's -- is never overwritten. Anything that does not fit (not a file path, a cache that
cannot be written, no hard links) leaves the new store to MLflow, as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

CACHE_ENV = "XDG_CACHE_HOME"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` tracking URI; None for any other store or memory."""
    if not uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(uri).database
    return None if not database or database == ":memory:" else Path(database)


def template_path() -> Path:
    """Where the empty schema of this MLflow version is kept."""
    import mlflow
    from mlflow.store.db.utils import _get_latest_schema_revision

    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "scalesweep"
    return cache / f"mlflow-{mlflow.__version__}-{_get_latest_schema_revision()}.db"


def seed_new_store(uri: str) -> bool:
    """Before MLflow first opens ``uri``: a SQLite store that does not exist yet becomes a copy
    of the empty template (made first if missing). Returns whether it was copied."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    try:
        template = _template()
        tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        # mode 0o666 less the umask, as sqlite itself creates a store (mkstemp's would be 0o600)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        try:
            shutil.copyfile(template, tmp)
            os.link(tmp, path)  # creates path only if absent: a store made meanwhile stays
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except OSError:  # no cache, no hard links, or the store appeared: MLflow makes or has it
        return False
    return True


def _template() -> Path:
    template = template_path()
    if template.exists():
        return template
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    template.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=template.parent, prefix=".template.", suffix=".db")
    os.close(fd)
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(tmp, template)  # whole or not at all, whoever finishes last
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return template
