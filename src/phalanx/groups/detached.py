"""A group's controller as its own process (`python -m phalanx.groups ID`): what `phalanx group run
--detach`, `group resume --detach` and the server start, in its own session so that neither a
Ctrl-C at a terminal nor a server that stops or restarts ends the search.

Groups submitted to a server are marked (``PHALANX_HOME/server/groups/ID``): a server that starts
adopts them (``adopt``), starting a controller again for each marked group that has not ended and
whose controller is gone (killed with the server's machine, or by hand). The controller resumes
where the last one stopped (``Controller.run``: finished trials kept, running ones watched again,
only the missing ones launched), and the group's lock keeps it to one controller at a time.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from phalanx.config import Settings
from phalanx.store.base import GroupStore

log = logging.getLogger(__name__)

CONTROLLER_LOG = "controller.log"


def spawn(settings: Settings, group_id: str) -> subprocess.Popen[bytes]:
    """Start the group's controller in its own session (its output to groups/ID/controller.log)
    and return at once; the caller reaps it or leaves it be."""
    folder = settings.home / "groups" / group_id
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PHALANX_HOME"] = str(settings.home)
    stores = (("PHALANX_DB_URL", settings.db_url), ("PHALANX_ARTIFACTS_URL", settings.artifacts_url))
    for var, value in stores:
        if value:
            env[var] = value
    with open(folder / CONTROLLER_LOG, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "phalanx.groups", group_id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def marks(settings: Settings) -> Path:
    return settings.home / "server" / "groups"


def mark_server_group(settings: Settings, group_id: str) -> None:
    """Record that the server started this group, so that a restarted server adopts it."""
    folder = marks(settings)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / group_id).touch()


def adopt(store: GroupStore, settings: Settings) -> list[str]:
    """Start a controller again for every server group that has not ended and has none running;
    the ids of those started. A group that ended is unmarked."""
    from phalanx.errors import NotFound
    from phalanx.groups.ending import controller_alive
    from phalanx.groups.lock import holder

    started = []
    folder = marks(settings)
    for mark in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            group = store.get_group(mark.name)
        except NotFound:  # deleted
            mark.unlink(missing_ok=True)
            continue
        if group.done:
            mark.unlink(missing_ok=True)
            continue
        if controller_alive(group) or holder(settings.home / "groups" / group.id) is not None:
            continue  # its controller outlived the server: nothing to adopt but the watch
        log.warning("group %s: its controller is gone; starting it again", group.id)
        spawn(settings, group.id)
        started.append(group.id)
    return started
