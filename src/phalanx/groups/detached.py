"""The server's groups: a group submitted to a server is marked (``PHALANX_HOME/server/groups/ID``)
when its controller is started (``GroupLauncher.start``: `python -m phalanx.groups ID` in its own
session, so that a server that stops or restarts does not end the search). A server that starts
adopts them (``adopt``), starting a controller again for each marked group that has not ended and
whose controller is gone (killed with the server's machine, or by hand). The controller resumes
where the last one stopped (``Controller.run``: finished trials kept, running ones watched again,
only the missing ones launched), and the group's lock keeps it to one controller at a time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from phalanx.config import Settings
from phalanx.errors import NotFound
from phalanx.groups.launching import GroupLauncher
from phalanx.groups.lock import holder
from phalanx.store.base import LocalStore
from phalanx.store.group_views import controller_alive

log = logging.getLogger(__name__)


def marks(settings: Settings) -> Path:
    return settings.home / "server" / "groups"


def mark_server_group(settings: Settings, group_id: str) -> None:
    """Record that the server started this group, so that a restarted server adopts it."""
    folder = marks(settings)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / group_id).touch()


def adopt(store: LocalStore, settings: Settings) -> list[str]:
    """Start a controller again for every server group that has not ended and has none running;
    the ids of those started. A group that ended is unmarked."""
    launcher = GroupLauncher(settings, store)
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
        launcher.start(group.id)
        started.append(group.id)
    return started
