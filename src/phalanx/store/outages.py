"""Whether a failure means that storage is gone for now (the database down, the disk full), said in
one line: what the server answers 503 for (``server.outages``) instead of a 500 with a traceback.
Here, in the store package, because only it knows the storage library's errors."""

from __future__ import annotations

import errno

from sqlalchemy.exc import SQLAlchemyError

from phalanx.errors import BackendUnavailable, PhalanxError
from phalanx.store.sql.errors import translate

# what storage raises raw (not through a store method, which translates): the server handles these
STORAGE_ERRORS: tuple[type[Exception], ...] = (OSError, SQLAlchemyError)
_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}


def unavailable(exc: BaseException) -> str | None:
    """Why storage cannot serve now, in one line; None when ``exc`` (or what caused it) is
    something else (a bug)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _DISK:
            where = f" ({cause.filename})" if cause.filename else ""
            return f"the server's disk is full or failing: {cause.strerror or cause}{where}"
        error = cause if isinstance(cause, PhalanxError) else translate(cause)
        if isinstance(error, BackendUnavailable):
            return error.message
        if "database or disk is full" in str(cause):
            return "the server's disk is full (its database cannot grow)"
        cause = cause.__cause__ or cause.__context__
    return None
