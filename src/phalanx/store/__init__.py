"""The store: experiments, replicas and everything replicas report (``base.Store``), implemented by
``sql.SqlStore``; files live in ``artifacts.ArtifactStore``. ``open_store(settings)`` is the one way
the CLI, the supervisor and the server open it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from phalanx.config import Settings
from phalanx.errors import BackendUnavailable, StoreUnavailable, UsageError

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def open_store(settings: Settings | None = None) -> LocalStore:
    """The store the settings name (PHALANX_DB_URL, else SQLite under PHALANX_HOME), with its
    artifact store (PHALANX_ARTIFACTS_URL, else a folder under PHALANX_HOME), schema up to date."""
    from sqlalchemy.exc import OperationalError  # why: `phalanx ls` imports this package: no SQLAlchemy

    from phalanx.store.artifacts import ArtifactStore  # why: `run --detach` imports this package
    from phalanx.store.sql.store import SqlStore  # why: `phalanx ls` imports this package: no SQLAlchemy

    settings = settings or Settings()
    try:
        artifacts = ArtifactStore(settings.artifacts_root)
    except (ValueError, ImportError) as exc:  # fsspec: an unknown protocol, or its package missing
        raise UsageError(
            f"PHALANX_ARTIFACTS_URL {settings.artifacts_root!r}: {exc}; "
            "use a folder, or a URL whose fsspec package is installed (e.g. s3:// needs s3fs)"
        ) from exc
    try:
        return SqlStore(settings.database_url, artifacts)
    except OperationalError as exc:  # the database server is down or refuses us: say so, no traceback
        from sqlalchemy.engine import make_url  # why: `phalanx ls` imports this package: no SQLAlchemy

        shown = make_url(settings.database_url).render_as_string(hide_password=True)
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise StoreUnavailable(
            f"cannot open the database {shown} (PHALANX_DB_URL): {reason}; "
            "start the database server or fix PHALANX_DB_URL"
        ) from exc


_T = TypeVar("_T")


def through_outage(call: Callable[[], _T], patience: float) -> _T:
    """``call()`` (opening the store, a read), tried again every second while the database cannot be
    reached (BackendUnavailable), for ``patience`` seconds (0: once). A submit a server accepted is
    started through an outage of its database: its answer promised it would run."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return call()
        except BackendUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def reuse_after_fork(store: LocalStore) -> LocalStore:
    """``store``, opened by the process this one was forked from, made safe to use here. Its
    inherited connections are the parent's: they are forgotten, never used or closed here, and new
    ones are opened on use (SQLAlchemy's ``dispose(close=False)``). Why: a group's trial supervisor
    is forked from the controller, and opening a store afresh (an engine, its first connection, the
    schema check) delayed its replicas' start by 0.15 s and more under load (issue 30)."""
    store.engine.dispose(close=False)
    return store


__all__ = ["open_store", "reuse_after_fork", "through_outage"]
