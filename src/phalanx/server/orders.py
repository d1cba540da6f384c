"""Launch orders: what the server's launcher needs to start an accepted submit, kept on disk.

A submit writes its order (``<home>/server/orders/<id>.pickle``, fsynced) before the transaction
that records the submit commits, so every submission the store holds as accepted has its order:
a server killed after the answer starts it after its restart from the order, exactly once. An
order whose submit never committed is garbage (``stale``); one that was carried out is removed.

Pickled, as the Runner's launch files are: the validated spec object itself, written and read by
the same Phalanx in the server's own home.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from phalanx.config import Settings
from phalanx.runner.options import Launch
from phalanx.store.submissions import SubmissionKind


@dataclass(frozen=True)
class Order:
    """An accepted submit's launch: which code to unpack where, then (an experiment) the launch
    its supervisor runs, or (a group) nothing more: its controller reads the group's row.

    ``snapshot``: the code is a stored source snapshot (a clone's), not a client's bundle."""

    id: str
    kind: SubmissionKind
    bundle_sha256: str
    work: Path
    file_name: str | None = None  # written into ``work`` after the unpack (the text validated)
    file_text: str | None = None
    launch: Launch | None = None
    snapshot: bool = False
    target: str | None = None  # a group's cluster (None: this machine)


def folder(settings: Settings) -> Path:
    return settings.home / "server" / "orders"


def write(settings: Settings, order: Order) -> None:
    """Durably: fsynced before the submit's transaction commits."""
    root = folder(settings)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{order.id}.pickle"
    tmp = path.with_name(f"{order.id}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(pickle.dumps(order, protocol=pickle.HIGHEST_PROTOCOL))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: nothing half-written stays behind
        tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read(settings: Settings, order_id: str) -> Order | None:
    try:
        order = pickle.loads((folder(settings) / f"{order_id}.pickle").read_bytes())
    except FileNotFoundError:
        return None
    return order if isinstance(order, Order) else None


def remove(settings: Settings, order_id: str) -> None:
    (folder(settings) / f"{order_id}.pickle").unlink(missing_ok=True)
