"""Fetch an experiment's download inputs on a cluster node, into that node's own cache, before its
replicas start: ``python -m phalanx.data.nodefetch ORDERS.json [CACHE_DIR]``.

Why per node: a Slurm node need not share PHALANX_HOME with the submitting machine, and reading a
dataset from a shared disk by every replica at once is what the cache avoids. Each task of the job
runs this first (the sbatch script's task wrapper); the orders file (``inputs.fetch_order``, written
by the script into the run folder) names every input's files, hashes and cache key. The fetch is
``cache.fetch_into`` — the same lock, temporary folder, hash check and rename as on the submitting
machine — so two replicas on one node fetch once, and a later job on that node finds it done.

The cache folder: CACHE_DIR, else ``PHALANX_NODE_CACHE``, else ``/tmp/phalanx-<uid>/data``; a ``%n``
in it becomes the node's name (SLURMD_NODENAME, else the host name), as in Slurm's own paths.
The node reads object storage with its own credentials (AWS variables, profile, instance role):
nothing secret is in the orders. Prints ``export PHALANX_INPUT_<NAME>=<path>`` lines for the task's
shell to evaluate; a missing or changed file is a message on stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from phalanx.data.cache import fetch_into
from phalanx.errors import PhalanxError, exit_status
from phalanx.store.manifest import FileEntry, Manifest


def node_cache(given: str | None = None, tmp: str = "/tmp") -> Path:
    """The node's cache folder, ``%n`` expanded to the node's name. The default one lies in
    ``tmp`` (where anyone may make a folder): its ``phalanx-<uid>`` is made this account's alone.
    One that is not (another account made it first, to hand this one its files or to keep it
    from caching) is never used: this job fetches into a new folder of its own instead."""
    raw = given or os.environ.get("PHALANX_NODE_CACHE")
    if raw is None:
        return _own_folder(Path(tmp), f"phalanx-{os.getuid()}") / "data"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return Path(raw.replace("%n", node))


def _own_folder(tmp: Path, name: str) -> Path:
    folder = tmp / name
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022:
        return folder
    print(
        f"phalanx: {folder} is not this account's own folder (owner uid {info.st_uid}, mode "
        f"{stat.filemode(info.st_mode)}): its files are not trusted; this job fetches into a folder "
        "of its own (PHALANX_NODE_CACHE=/scratch/$USER/%n gives every job one cache)",
        file=sys.stderr,
    )
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))


def manifest_of(order: Mapping[str, Any]) -> Manifest:
    files = tuple(FileEntry(str(p), int(size), str(sha)) for p, size, sha in order["files"])
    return Manifest(str(order["url"]), files)


def fetch_orders(orders: Sequence[Mapping[str, Any]], root: Path) -> dict[str, str]:
    """Each order's variable -> its folder under ``root``, fetched there once (under its lock)."""
    return {
        str(o["env"]): str(fetch_into(root, manifest_of(o), str(o["key"]), str(o["what"]))) for o in orders
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or len(args) > 2:
        print("usage: python -m phalanx.data.nodefetch ORDERS.json [CACHE_DIR]", file=sys.stderr)
        return 2
    try:
        orders = json.loads(Path(args[0]).read_text())
        paths = fetch_orders(orders, node_cache(args[1] if len(args) > 1 else None))
    except PhalanxError as exc:
        print(f"phalanx: {exc}", file=sys.stderr)
        return exit_status(exc)
    except OSError as exc:
        print(f"phalanx: fetching the inputs on this node failed: {exc}", file=sys.stderr)
        return 1
    for env, path in paths.items():
        print(f"export {env}={shlex.quote(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
