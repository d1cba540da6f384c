"""Per-experiment ingest tokens: what a replica gets instead of the server's token.

A replica runs the user's code, possibly on a shared cluster node; giving it the server's token
would let that code (or anyone reading its environment) read, stop and delete every experiment.
``experiment_token(token, id)`` is an HMAC of the experiment id under the server's token, so the
server checks it without storing anything, and it only lets its holder send records and files of
that one experiment (see docs/security.md). Standard library only: the tracking SDK copy uses it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

PREFIX = "phx-exp"


def experiment_token(token: str, experiment_id: str) -> str:
    """The token replicas of ``experiment_id`` get: ``phx-exp.<id>.<hmac>``."""
    mac = hmac.new(token.encode(), f"phalanx-ingest-v1:{experiment_id}".encode(), hashlib.sha256)
    return f"{PREFIX}.{experiment_id}.{mac.hexdigest()}"


def token_experiment(token: str, given: str) -> str | None:
    """The experiment id ``given`` is a valid experiment token for (under ``token``), else None."""
    prefix, _, rest = given.partition(".")
    experiment_id, _, _mac = rest.partition(".")
    if prefix != PREFIX or not experiment_id:
        return None
    expected = experiment_token(token, experiment_id)
    return experiment_id if hmac.compare_digest(given.encode(), expected.encode()) else None


BOX_KEY = "server/box.key"  # under PHALANX_HOME: the key of boxed replicas' tokens


def box_key(home: Path) -> str:
    """The key boxed replicas' experiment tokens are made with (``<home>/server/box.key``, made
    on first use, mode 0600): the server may have no token of its own (a tokenless team server),
    yet its boxes must report with a token that writes only their experiment. Removing the file
    revokes every box's token at the server's next start."""
    path = home / BOX_KEY
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # made by a concurrent first use: theirs is the key
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()
