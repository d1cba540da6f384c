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
