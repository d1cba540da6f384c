"""Whether and how `phalanx server` boxes the code its users submit (docs/security.md).

Decided once, when the server starts (``decide``), and said in its start line:

- ``box``: the server runs as root and this machine has bubblewrap and setpriv: every experiment
  submitted to it (each replica, a group's trials, the build of its venv) runs in a box as its
  project's own unprivileged account (phalanx.machine.box, .identities, .cgroups);
- ``admins``: it cannot box (not root, or the tools are missing): only server admins (and the
  server token's holder in single-token mode) may submit, since submitted code would run as the
  server itself, with its home, store, keys and environment;
- ``trust``: `--trust-submitters`: everybody who may submit runs code as the server, knowingly
  (logged as a warning at start).

The policy is recorded in ``<home>/server/box.json`` while the server runs, so the places that
launch (``isolation_for``, called where LaunchOptions are built) and the detached group
controllers read the same decision the server made.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from fastapi import HTTPException

from phalanx.config import Settings
from phalanx.machine import box, cgroups, identities
from phalanx.machine.box import Isolation
from phalanx.server.policy import Principal

log = logging.getLogger(__name__)

FILE = "server/box.json"


class BoxMode(StrEnum):
    BOX = "box"
    ADMINS = "admins"
    TRUST = "trust"


@dataclass(frozen=True)
class BoxPolicy:
    """What the server does with submitted code. ``report_to``: its own URL, where boxes report;
    ``uids``: a uid range to take accounts from (None: useradd); ``hidden``: its paths masked in
    every box; ``extra_ro``: paths every box may read; ``why``: why it cannot box (admins)."""

    mode: BoxMode
    report_to: str | None = None
    uids: tuple[int, int] | None = None
    hidden: tuple[str, ...] = ()
    extra_ro: tuple[str, ...] = ()
    pids_max: int = 4096
    why: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> BoxPolicy:
        uids = doc.get("uids")
        return cls(
            mode=BoxMode(str(doc["mode"])),
            report_to=str(doc["report_to"]) if doc.get("report_to") else None,
            uids=(int(uids[0]), int(uids[1])) if isinstance(uids, list | tuple) else None,
            hidden=tuple(str(p) for p in doc.get("hidden") or ()),  # type: ignore[attr-defined]
            extra_ro=tuple(str(p) for p in doc.get("extra_ro") or ()),  # type: ignore[attr-defined]
            pids_max=int(doc.get("pids_max") or 4096),  # type: ignore[call-overload]
            why=str(doc.get("why") or ""),
        )


def decide(
    *,
    trust: bool,
    report_to: str,
    uids: tuple[int, int] | None = None,
    hidden: tuple[str, ...] = (),
    extra_ro: tuple[str, ...] = (),
) -> BoxPolicy:
    """The server's policy: boxes when it can, else admins only, unless told to trust."""
    if trust:
        return BoxPolicy(BoxMode.TRUST, why="--trust-submitters")
    missing = box.missing_tools()
    if os.geteuid() != 0:
        why = "it does not run as root, so it cannot run code as another account"
    elif missing:
        why = f"{' and '.join(missing)} not found (apt-get install bubblewrap util-linux)"
    else:
        return BoxPolicy(BoxMode.BOX, report_to, uids, hidden, extra_ro)
    return BoxPolicy(BoxMode.ADMINS, why=why)


def start_line(policy: BoxPolicy) -> str:
    """How the server treats submitted code, for its start line (and the log)."""
    if policy.mode is BoxMode.BOX:
        ids = f"uids {policy.uids[0]}-{policy.uids[1]}" if policy.uids else "accounts made with useradd"
        return (
            f"submitted code runs boxed: one account per project ({ids}), bubblewrap mount + PID "
            f"namespaces, {cgroups.describe()}"
        )
    if policy.mode is BoxMode.TRUST:
        return (
            "WARNING: --trust-submitters: submitted code runs as this server's own account, with its "
            "home, store, keys and environment; every editor can act as a server admin"
        )
    return f"submitted code cannot be boxed ({policy.why}): only server admins may submit"


@contextlib.contextmanager
def recorded(home: Path, policy: BoxPolicy) -> Iterator[None]:
    """Keep the policy in ``<home>/server/box.json`` while the block runs (the server's life)."""
    path = home / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".box.{os.getpid()}.json")
    tmp.write_text(json.dumps({**policy.to_json(), "pid": os.getpid()}))
    tmp.replace(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():  # not a newer server's
                path.unlink()


def read_policy(home: Path) -> BoxPolicy | None:
    """The policy of the server running over this home (None: none recorded)."""
    try:
        return BoxPolicy.from_json(json.loads((home / FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def isolation_for(settings: Settings, project: str) -> Isolation | None:
    """How an experiment of ``project`` submitted to this server is boxed (None: it is not, the
    server does not box); its project's account is made on first use."""
    policy = read_policy(settings.home)
    if policy is None or policy.mode is not BoxMode.BOX or not policy.report_to:
        return None
    account = identities.ensure_account(project, policy.uids, settings.home)
    return Isolation(
        account=account.name,
        uid=account.uid,
        gid=account.gid,
        project=project,
        report_to=policy.report_to,
        hidden=policy.hidden,
        extra_ro=policy.extra_ro,
        pids_max=policy.pids_max,
    )


def check_submitter(policy: BoxPolicy | None, who: Principal) -> None:
    """403 for a submitter who is no server admin, on a server that cannot box their code."""
    if policy is None or policy.mode is not BoxMode.ADMINS or who.superuser:
        return
    raise HTTPException(
        403,
        f"this server cannot box submitted code ({policy.why}), which would run as the server "
        "itself: only a server admin may submit here. Ask the admin to run it as root (with "
        "bubblewrap installed), or to start it with --trust-submitters",
    )
