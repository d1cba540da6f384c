"""The server a user logged in to (`phalanx login URL`): its URL and token, kept in
``PHALANX_HOME/login.json`` with mode 0600.

Why a file of its own and not the environment: after `phalanx login`, `phalanx run -f FILE` and the
read and control commands go to that server by default (`--local` keeps this machine), and a token
typed once must not have to live in every shell's history. The file is written whole (a temporary
file created 0600, then renamed over the old one), so it is never readable by others, not even for
a moment, and never half-written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import UsageError

FILE_NAME = "login.json"


@dataclass(frozen=True)
class Login:
    url: str
    token: str | None

    def __repr__(self) -> str:  # never show the token, even in a traceback or a log line
        return f"Login(url={self.url!r}, token={'***' if self.token else None})"


def path(home: Path) -> Path:
    return home / FILE_NAME


def load(home: Path) -> Login | None:
    """The stored login, or None; UsageError naming the file when it is not a login's JSON."""
    if not home.is_dir():  # no login can be there; the command says what is wrong with the home
        return None
    file = path(home)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    # (any other OSError, a PHALANX_HOME that is a file or not readable, is the CLI's home error)
    except ValueError as exc:
        raise UsageError(
            f"{file}: cannot read the stored login ({exc}); `phalanx logout` removes it, "
            "then `phalanx login URL` again"
        ) from None
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str) or not url:
        raise UsageError(f"{file}: no server URL in it; `phalanx logout`, then `phalanx login URL` again")
    token = doc.get("token")
    return Login(url, token if isinstance(token, str) and token else None)


def save(home: Path, login: Login) -> Path:
    """Write ``login`` to ``home/login.json``, readable by its owner only."""
    home.mkdir(parents=True, exist_ok=True)
    file = path(home)
    tmp = file.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask or an old leftover's mode
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"url": login.url, "token": login.token}, out)
            out.write("\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, file)
    return file


def clear(home: Path) -> bool:
    """Forget the stored login; whether there was one."""
    try:
        path(home).unlink()
    except FileNotFoundError:
        return False
    return True
