"""Storage errors become Phalanx errors inside the store, so no caller (the server, the CLI, the
supervisor) ever needs to know SQLAlchemy or catch its exceptions.

``phalanx_errors`` wraps every public method of a store class: Phalanx errors pass through, a value
the database cannot hold (an integer beyond 64 bits: SQLite's driver raises OverflowError,
PostgreSQL a DataError) is the caller's UsageError, a clash with stored rows is a Conflict, a
database that cannot be reached (or stays locked) is BackendUnavailable, and anything else the
storage library (or the database driver, for the raw reads) raises is a StoreError. Every public
method defined in the class body is wrapped, so a method another change adds is covered as well.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import exc as sa

from phalanx.errors import BackendUnavailable, Conflict, PhalanxError, StoreError, UsageError
from phalanx.store.db import driver_clash, driver_error, first_line

C = TypeVar("C", bound=type)


def translate(exc: BaseException) -> PhalanxError | None:
    """The Phalanx error a storage exception means; None for one that is not the storage's (a bug)."""
    if isinstance(exc, PhalanxError):
        return exc
    if isinstance(exc, sa.DataError):
        return UsageError(
            f"a number is out of range for the database ({type(exc).__name__}); integers must fit in 64 bits"
        )
    if isinstance(exc, sa.IntegrityError):
        return Conflict(f"the change clashes with what is stored: {first_line(exc)}")
    if isinstance(exc, sa.OperationalError):
        return BackendUnavailable(f"the database failed: {first_line(exc)}; check that it runs, then retry")
    if isinstance(exc, sa.SQLAlchemyError):
        return StoreError(f"the store failed: {first_line(exc)}")
    return driver_error(exc)  # a raw driver cursor's (store.db's statements, fast reads, COPY)


def clash(exc: BaseException) -> str | None:
    """``IntegrityError`` or ``OperationalError`` when ``exc`` is one, raised through SQLAlchemy or
    by the driver's own cursor (``store.db``'s statements): a write clash or a busy database that
    a retried transaction may get past; None for anything else."""
    if isinstance(exc, sa.IntegrityError):
        return "IntegrityError"
    if isinstance(exc, sa.OperationalError):
        return "OperationalError"
    return driver_clash(exc)


def translating(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` raising Phalanx errors for storage failures (``translate``)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except PhalanxError:
            raise
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    return wrapper


def phalanx_errors(cls: C) -> C:
    """Class decorator: every public method of ``cls`` raises only Phalanx errors for storage failures."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and callable(member) and not isinstance(member, type):
            setattr(cls, name, translating(member))
    return cls
