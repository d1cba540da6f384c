"""The server's submissions (which experiment an idempotency key made, which code bundle it ran),
seen through the Store: callers outside ``phalanx.store`` never touch the SQL engine themselves.
Implemented by the SQL store's table (``sql.submissions``; migration 0009_srvsubmit_submissions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phalanx.errors import UsageError

if TYPE_CHECKING:
    from phalanx.store.base import Store
    from phalanx.store.sql.submissions import Submission


def _engine(store: Store) -> Any:
    engine = getattr(store, "engine", None)
    if engine is None:
        raise UsageError(
            f"submitting experiments needs the SQL store (SQLite or PostgreSQL), not {type(store).__name__}"
        )
    return engine


def reserve(store: Store, experiment_id: str, key: str | None, bundle_sha256: str) -> str:
    """Record the submission; ``experiment_id``, or the id an earlier submit with ``key`` reserved."""
    from phalanx.store.sql import submissions

    return submissions.reserve(_engine(store), experiment_id, key, bundle_sha256)


def release(store: Store, experiment_id: str) -> None:
    """Forget a submission whose start failed (its key may be used again)."""
    from phalanx.store.sql import submissions

    submissions.release(_engine(store), experiment_id)


def get(store: Store, experiment_id: str) -> Submission | None:
    from phalanx.store.sql import submissions

    return submissions.get(_engine(store), experiment_id)


def by_key(store: Store, key: str) -> Submission | None:
    """The submission an idempotency key made, if any."""
    from phalanx.store.sql import submissions

    return submissions.by_key(_engine(store), key)


def check_available(store: Store) -> None:
    """UsageError (400) when this store cannot record submissions."""
    _engine(store)


def bundles_in_use(store: Store, since: float) -> set[str] | None:
    """The bundles an experiment still needs (see ``sql.submissions.bundles_in_use``); None for a
    store that keeps no submissions (then no bundle can be told unused)."""
    from phalanx.store.sql import submissions

    engine = getattr(store, "engine", None)
    return None if engine is None else submissions.bundles_in_use(engine, since)
