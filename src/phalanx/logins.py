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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.config import Settings
from phalanx.errors import UsageError

if TYPE_CHECKING:
    from phalanx.apiclient import Client

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


def choose(
    server: str | None,
    local: bool,
    token_file: Path | None = None,
    settings: Settings | None = None,
    *,
    say: bool = True,
    local_option: str | None = "`--local`",
) -> Client | None:
    """The server's client, or None for this machine; says which on stderr once a server is in play
    (a login stored, or ``server``/``local`` given), so nobody reads a laptop's store believing it is
    the team's. The CLI's ``--server``/``--local`` and ``phalanx.search_experiments`` both ask here.

    The token: ``token_file``, else PHALANX_TOKEN, else the stored login's (for its own URL only:
    a token is never sent to a server it was not given for).

    ``local_option``: how the caller says "this machine" (`--local`, ``local=True``), named when the
    server cannot be reached, with `phalanx logout` when the server is the login's."""
    from phalanx.apiclient import (  # why: `phalanx ls` runs without urllib.request
        STORED_TOKEN,
        Client,
        check_url,
        given_token,
    )

    if server is not None and local:
        raise UsageError("--server and --local: give one (--local is this machine's store)")
    settings = settings or Settings()
    login = load(settings.home)
    if local or (server is None and login is None):
        if say and (local or login is not None):
            say_door(None)
        return None
    url = check_url(server) if server is not None else check_url(login.url if login else "")
    logged_in = login is not None and check_url(login.url) == url
    stored = login.token if login is not None and logged_in else None
    given, given_from = given_token(token_file, settings.token)
    ways = [f"{local_option} works on this machine"] if local_option else []
    if logged_in:  # the login's server: forgetting it is the other way back to this machine
        ways.append("`phalanx logout` to forget the server")
    instead = ", or ".join(ways) or None
    token_from = given_from if given else STORED_TOKEN if stored else None
    client = Client(url, given or stored, say=_stderr, instead=instead, token_from=token_from)
    if say:
        say_door(client.url)
    return client


def say_door(server_url: str | None) -> None:
    """The one stderr line that says where a command acts: the server at ``server_url``, or this
    machine (None). Every command that says so says it with this line, never on stdout (``-o json``
    stays clean)."""
    sys.stderr.write(f"phalanx: on server {server_url}\n" if server_url else "phalanx: on this machine\n")
    sys.stderr.flush()


def _stderr(text: str) -> None:
    """A client's notes (a submit retried while the server restarts) on this command's stderr."""
    sys.stderr.write(f"phalanx: {text}\n")
    sys.stderr.flush()
