"""Experiment ids as users type them: any unique prefix reads, only a long one destroys.

Reading commands take any unique prefix of an id (`phalanx get a` is handy). A destructive call
took one too, so `DELETE /api/v1/experiments/a` deleted whichever experiment was the only one whose
id started with `a` — a prefix that is unique today names another experiment tomorrow. Deleting
needs the full id (12 hex characters) or a prefix of at least ``MIN_DESTRUCTIVE_PREFIX``.
"""

from __future__ import annotations

import os

from phalanx.errors import UsageError

# 8 of the 12 hex characters: what `git` shows of a hash, and 4 billion values, so a prefix this
# long names one experiment in any store a person keeps
MIN_DESTRUCTIVE_PREFIX = 8
ID_LENGTH = 12


def random_hex(n: int) -> str:
    """``n`` random lowercase hex characters (``os.urandom``): what ``uuid.uuid4().hex[:n]`` gave
    for n <= 12, without importing ``uuid`` into every run and every reporting script."""
    return os.urandom((n + 1) // 2).hex()[:n]


def new_id() -> str:
    """A new experiment's (or group's) id: 12 random hex characters (48 bits)."""
    return random_hex(ID_LENGTH)


def check_destructive(given: str, full: str, action: str = "delete", kind: str = "experiment") -> None:
    """Raise UsageError (exit 2, HTTP 400) when ``given`` is a prefix of ``full`` shorter than
    MIN_DESTRUCTIVE_PREFIX characters; the message names the full id to type."""
    typed = given.strip().lower()
    if typed == full or len(typed) >= MIN_DESTRUCTIVE_PREFIX:
        return
    article = "an" if kind[0] in "aeiou" else "a"
    raise UsageError(
        f"{given.strip()!r} is a {len(typed)}-character prefix of {kind} {full}: to {action} {article}"
        f" {kind} give its full id or at least {MIN_DESTRUCTIVE_PREFIX} characters of it (e.g. {full})"
    )
