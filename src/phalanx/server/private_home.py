"""The server's home is its own account's alone (docs/security.md).

Everything the server keeps about its projects lies in its home: the store (``phalanx.db``, mode
0600 itself), every run's logs and files, the artifacts, the spool, the datasets copied in, the
groups' studies, the keys. Most of those are made with the umask's modes (0644, 0755), so the home
folder itself is what keeps other accounts of the machine out: ``phalanx server`` makes it mode 0700
(created so, or tightened at start where this process's user owns it).

Boxes are not hindered: bubblewrap binds each box's own folders from the home as root, at the same
path, under folders it makes 0755 in the box (``phalanx.machine.box``), so a box's account never
goes through the home folder of the host, unless the home lies in a tree a box sees whole (/usr,
/etc, /opt): that home keeps its mode, with a warning.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from phalanx.machine.box import MACHINE_TREES

OWNER_ONLY = 0o700


def keep_private(home: Path) -> str | None:
    """Make ``home`` (created if missing) mode 0700 where this process's user owns it. Returns a
    warning to show when other accounts may still enter it (another user's folder, a file system
    that keeps no modes, a home a box must walk through), else None. Never raises: the server
    still starts."""
    if any(home.resolve().is_relative_to(tree) for tree in MACHINE_TREES):
        with contextlib.suppress(OSError):
            home.mkdir(parents=True, exist_ok=True)
        return (  # a box binds /usr, /etc and /opt whole: its account walks through the real home
            f"warning: the server's home {home} is under {', '.join(MACHINE_TREES)}, which every box"
            " sees as it is: it keeps its mode so that boxed jobs reach their folders, and other"
            " accounts of this machine may enter it; put PHALANX_HOME elsewhere (e.g. /srv/phalanx)"
        )
    with contextlib.suppress(FileExistsError, OSError):
        home.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(home, OWNER_ONLY)
    try:
        info = os.stat(home)
        if not info.st_mode & 0o077:
            return None
        if info.st_uid == os.geteuid():
            os.chmod(home, stat.S_IMODE(info.st_mode) & OWNER_ONLY)
            if not os.stat(home).st_mode & 0o077:
                return None
    except OSError:
        pass
    return (
        f"warning: other accounts of this machine may enter {home} (the server's home: its store, "
        "logs and files); make it this account's alone (chown it, chmod 700)"
    )
