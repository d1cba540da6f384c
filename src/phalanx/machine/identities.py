"""The unprivileged OS account a project's boxed code runs as: one per project.

Why per project and not per user: everything a box can reach belongs to its project (its
experiments' folders, its secrets, its datasets), and every editor of the project already reads
all of it through the API; what must not leak is one project's to another. A per-user account
would also need a Unix account linked to each person (Determined's `link-with-agent-user`) and
would split a project's shared venvs and caches by person for no gain in safety.

Two ways to get one, chosen by the server's admin:

- ``useradd`` (the server runs as root): a system account ``phx-<project>`` without a home or a
  login shell, created on the project's first boxed run and marked as Phalanx's in its comment;
  an existing account of that name that is not Phalanx's is refused, never taken over;
- a uid range (``phalanx server --box-uids 200000-265535``): no account is created; each project
  is given the next free uid of the range (its gid the same number), recorded in
  ``<home>/server/box-uids.json`` under a lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import UsageError

PREFIX = "phx-"
MARK = "phalanx box"  # the account's comment (GECOS): how Phalanx knows an account is its own
_PLAIN = re.compile(r"^[a-z][a-z0-9_-]{0,22}$")  # what useradd accepts, within 32 characters


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def account_name(project: str) -> str:
    """``phx-<project>``; a name useradd would refuse (capitals, dots, too long) becomes its
    plain part and a hash, so two projects never share an account."""
    if _PLAIN.match(project):
        return PREFIX + project
    plain = re.sub(r"[^a-z0-9_-]", "-", project.lower()).strip("-")[:14] or "p"
    if not plain[0].isalpha():
        plain = "p" + plain[:13]
    return f"{PREFIX}{plain}-{hashlib.sha256(project.encode()).hexdigest()[:8]}"


def ensure_account(project: str, uids: tuple[int, int] | None, home: Path) -> Account:
    """The project's account, made on first use (UsageError when it cannot be)."""
    if uids is not None:
        return _from_range(project, uids, home)
    name = account_name(project)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = _useradd(name, project)
    if MARK not in (entry.pw_gecos or "") or entry.pw_uid == 0:
        raise UsageError(
            f"the account {name!r} exists but Phalanx did not make it; rename it, or give the server "
            "a uid range of its own (--box-uids FIRST-LAST)"
        )
    return Account(name, entry.pw_uid, entry.pw_gid)


def _useradd(name: str, project: str) -> pwd.struct_passwd:
    tool = shutil.which("useradd")
    if tool is None:
        raise UsageError("boxing needs useradd (Debian: passwd) or a uid range (--box-uids FIRST-LAST)")
    argv = [tool, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group"]
    argv += ["--comment", f"{MARK} for project {project}"[:200], name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        return pwd.getpwnam(name)  # made now, or by a concurrent start (useradd then said so)
    except KeyError:
        raise UsageError(f"cannot create the account {name!r}: {done.stderr.strip()}") from None


def _from_range(project: str, uids: tuple[int, int], home: Path) -> Account:
    first, last = uids
    path = home / "server" / "box-uids.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            given: dict[str, int] = json.loads(path.read_text())
        except (OSError, ValueError):
            given = {}
        uid = given.get(project)
        if uid is None:
            taken = set(given.values())
            uid = next((u for u in range(first, last + 1) if u not in taken and not _has_account(u)), None)
            if uid is None:
                raise UsageError(f"the box uid range {first}-{last} is used up; give the server a larger one")
            given[project] = uid
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(given, indent=1, sort_keys=True))
            os.replace(tmp, path)
    return Account(f"{PREFIX}{uid}", uid, uid)


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def parse_range(text: str) -> tuple[int, int]:
    """``FIRST-LAST`` (UsageError naming the fix): uids above the system's, at least 1 wide."""
    first, sep, last = text.partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise UsageError(f"--box-uids {text!r}: give a range FIRST-LAST, e.g. 200000-265535")
    low, high = int(first), int(last)
    if low < 1000 or high < low:
        raise UsageError(f"--box-uids {text!r}: FIRST must be at least 1000 and LAST at least FIRST")
    return low, high
