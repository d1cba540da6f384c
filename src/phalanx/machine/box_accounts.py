"""What a box's account database shows: the machine's accounts and groups, less every other
project's box account (``phx-<project>`` names every project that ever ran a job here).

The box reads the machine's ``/etc`` read-only, and ``/etc/passwd`` and ``/etc/group`` are world
readable: left as they are, any job lists the projects of the machine. So each box gets filtered
copies bound over them (and over ``/etc/shadow`` and ``/etc/gshadow``, which its account cannot
read anyway): every entry stays but those of another Phalanx box account (a ``phx-`` name, or
Phalanx's mark in its comment) and their groups, and such names are taken out of groups' member
lists. The box's own account and group stay, or are added when the machine has none for them (a
uid range's account), so ``id``, ``whoami``, ``getpass.getuser()``, pip and git resolve it. The
backups the shadow tools keep (``/etc/passwd-``...) show nothing (``/dev/null``).

The copies are written by root, one folder per box uid (``/run/phalanx-box/<uid>``, mode 0700),
replaced by a rename when the machine's files change: a running box keeps the copy it bound, and a
box started later (a replica's restart with the same argv) binds the current one. Nothing else of
the machine's name service reaches a box: nscd's and systemd-userdb's sockets lie under /run and
/var, which it does not see. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Set
from pathlib import Path

from phalanx.machine.identities import MARK, PREFIX

FOLDER = Path("/run/phalanx-box")
PASSWD, GROUP, SHADOW, GSHADOW = "/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"
BACKUPS = tuple(f"{name}-" for name in (PASSWD, GROUP, SHADOW, GSHADOW))  # the shadow tools' last ones


def account_binds(account: str, uid: int, gid: int) -> list[str]:
    """bubblewrap options that show the box whose account is ``account`` (``uid``, ``gid``) the
    machine's accounts without the other box accounts (``--ro-bind COPY /etc/passwd``...). Files
    this process cannot read (/etc/shadow, not as root) are left as they are. OSError when no
    folder of this process's own can hold the copies."""
    files: dict[str, str] = {}
    for name in (PASSWD, GROUP, SHADOW, GSHADOW):
        with contextlib.suppress(OSError):
            files[name] = _read(name)
    copies = views(files, account, uid, gid)
    argv: list[str] = []
    if copies:
        folder = _own_folder(uid)
        for name, text in copies.items():
            argv += ["--ro-bind", str(_write(folder, name, text)), name]
    for backup in BACKUPS:
        if os.path.lexists(backup):
            argv += ["--ro-bind", "/dev/null", backup]
    return argv


def views(files: Mapping[str, str], account: str, uid: int, gid: int) -> dict[str, str]:
    """What the box of ``account`` sees of each of ``files`` (path -> content: PASSWD, GROUP,
    SHADOW, GSHADOW, those read): the same, less the other box accounts, their groups and their
    names in member lists; its own entries added to passwd and group when missing. Nothing
    without PASSWD."""
    if PASSWD not in files:
        return {}
    passwd = files[PASSWD]
    hidden = {e[0] for e in _entries(passwd) if _foreign(e, account, uid)}
    out = {PASSWD: _kept(passwd, lambda e: e[0] not in hidden)}
    if not any(len(e) >= 7 and e[2] == str(uid) for e in _entries(passwd)):
        out[PASSWD] += f"{account}:x:{uid}:{gid}:{MARK}:/nonexistent:/usr/sbin/nologin\n"
    if SHADOW in files:
        out[SHADOW] = _kept(files[SHADOW], lambda e: e[0] not in hidden)
    if GROUP in files:
        gone = {e[0] for e in _entries(files[GROUP]) if _foreign_group(e, hidden, gid)}
        out[GROUP] = _kept(files[GROUP], lambda e: e[0] not in gone, (3,), hidden)
        if not any(len(e) >= 4 and e[2] == str(gid) for e in _entries(files[GROUP])):
            out[GROUP] += f"{account}:x:{gid}:\n"
        if GSHADOW in files:
            out[GSHADOW] = _kept(files[GSHADOW], lambda e: e[0] not in gone, (2, 3), hidden)
    return out


def _foreign(entry: list[str], account: str, uid: int) -> bool:
    """A passwd entry of another box's account (never the box's own)."""
    if len(entry) < 7 or entry[0] == account or entry[2] == str(uid):
        return False
    return entry[0].startswith(PREFIX) or MARK in entry[4]


def _foreign_group(entry: list[str], hidden: Set[str], gid: int) -> bool:
    """A group of another box's account: named as one, or a ``phx-`` group not the box's own."""
    if len(entry) < 4 or entry[2] == str(gid):
        return False
    return entry[0] in hidden or entry[0].startswith(PREFIX)


def _entries(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _kept(
    text: str, keep: Callable[[list[str]], bool], members: Iterable[int] = (), hidden: Set[str] = frozenset()
) -> str:
    """The lines of ``text`` whose entry ``keep`` keeps (comments and odd lines kept as they are),
    with the names in ``hidden`` taken out of the ``members`` fields (comma-separated names)."""
    out = []
    for line in text.splitlines():
        entry = line.split(":")
        if not line or line.startswith("#") or len(entry) < 2:
            out.append(line)
            continue
        if not keep(entry):
            continue
        for field in members:
            if field < len(entry) and entry[field]:
                entry[field] = ",".join(n for n in entry[field].split(",") if n not in hidden)
        out.append(":".join(entry))
    return "\n".join(out) + "\n" if out else ""


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def _own_folder(uid: int) -> Path:
    """``FOLDER/<uid>``, made 0700 and checked to be this process's own (not a link, nobody else's
    to write); else a folder of this process's own under the temporary folder (a test not run as
    root). OSError when neither is."""
    me = os.geteuid()
    for base in (FOLDER, Path(tempfile.gettempdir()) / f"phalanx-box-{me}"):
        folder = base / str(uid)
        with contextlib.suppress(OSError):
            for path in (base, folder):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, 0o700)
                info = os.lstat(path)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != me or info.st_mode & 0o022:
                    raise PermissionError(f"{path} is not this process's own folder")
            return folder
    raise OSError(f"no folder of this process's own for a box's account files ({FOLDER})")


def _write(folder: Path, name: str, text: str) -> Path:
    """``folder``/<basename of ``name``> holding ``text``, with the mode and group of ``name``:
    replaced by a rename when it differs (a box that bound the old one keeps it)."""
    path = folder / Path(name).name
    data = text.encode("utf-8", errors="surrogateescape")
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return path
    source = os.stat(name)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), stat.S_IMODE(source.st_mode))
            with contextlib.suppress(OSError):  # (not root: its own group)
                os.fchown(f.fileno(), -1, source.st_gid)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
