"""A queue priority as a user gives it (``--priority``, ``submit(priority=)``), checked.

On its own (not in ``phalanx.queue``) so that `phalanx run --detach` checks it without importing
the queue and the machine ledger (docs/cli-speed.md).
"""

from __future__ import annotations

from phalanx.errors import UsageError

# --priority bounds: aging adds one per 10 minutes waited, so 1000 already outranks a week of waiting
MAX_PRIORITY = 1000


def check_priority(priority: object, given_as: str) -> int:
    """A queue priority as given: a whole number within ±MAX_PRIORITY, else a UsageError naming
    where it was given."""
    if not isinstance(priority, int) or isinstance(priority, bool) or abs(priority) > MAX_PRIORITY:
        raise UsageError(
            f"{given_as} {priority!r}: give a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY}"
            " (higher starts first; a waiting run also gains one point per 10 minutes)"
        )
    return priority
