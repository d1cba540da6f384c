"""Which store a command works on: this machine's, or a Phalanx server's API.

`--server URL` names a server; `phalanx login URL` makes one the default; `--local` keeps this
machine whatever the login says. Once a server is in play (a login stored, or either option given)
every command says on stderr, in one line, which it uses ("phalanx: on server URL" / "phalanx: on
this machine"), so nobody reads a laptop's store believing it is the team's. Without a login and
without the options, nothing is printed and everything is local, as before logins existed.

A command meaningful only on this machine (`phalanx gc`, `phalanx sync`) takes `--server` only to
refuse it (``this_machine_only``: exit status 2, saying so), never to act on this machine instead.

A hint a command gives (`phalanx ls` lists them) names the door the user gave it (``hints_on_door``),
so that repeating the hinted command acts where this one did, not on this machine's store. Every
command registered on a ``DoorTyper`` (all of Phalanx's) that takes --server has its errors' hints
given so.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import inspect
import re
import shlex
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from phalanx.errors import PhalanxError, UsageError

if TYPE_CHECKING:
    from phalanx.config import Settings

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", metavar="URL", help="The Phalanx server at URL (default: the one `phalanx login` chose)."
    ),
]
LocalOpt = Annotated[bool, typer.Option("--local", help="This machine's store, even after `phalanx login`.")]

ThisMachineOnlyOpt = Annotated[
    str | None,
    typer.Option("--server", metavar="URL", help="Refused: this command acts on this machine only."),
]


# A hint naming one of these is left as it is: they take no door (they act on this machine only, or
# read no store), or only a server's (never --local). tests/unit/cli/test_doors.py holds both to the code.
NO_DOOR = frozenset({"check", "gc", "group resume", "login", "logout", "server", "sync", "version"})
SERVER_ONLY = frozenset(
    {
        "alert add",
        "alert deliveries",
        "alert ls",
        "alert rm",
        "notebook ls",
        "notebook stop",
        "tensorboard ls",
        "tensorboard stop",
    }
)
_HINT = re.compile(r"`phalanx ([^`]*)`")


def door_words(server: str | None, local: bool) -> str:
    """What sends a command to the door this one was given: `--server URL`, `--local`, or '' (none
    given: the login's server, or this machine, as for the command itself)."""
    if server is not None:
        return f"--server {shlex.quote(server)}"
    return "--local" if local else ""


def on_door(text: str, server: str | None, local: bool) -> str:
    """``text`` with each `phalanx ...` command it names given this command's door (one that names a
    door already, takes none, or is to be run "on the server's machine", is left as it is)."""
    words = door_words(server, local)

    def told(hint: re.Match[str]) -> str:
        command = hint.group(1)
        first, _, rest = command.partition(" ")
        second = rest.split(" ", 1)[0]
        names = {first, *(f"{first} {alt}" for alt in second.split("|"))}
        if (
            not words
            or text.startswith(" on the server's machine", hint.end())
            or "--server" in command.split()
            or "--local" in command.split()
            or names & NO_DOOR
            or (local and names & SERVER_ONLY)
        ):
            return hint.group(0)
        return f"`phalanx {command} {words}`"

    return _HINT.sub(told, text)


@contextlib.contextmanager
def hints_on_door(server: str | None, local: bool) -> Iterator[None]:
    """Errors raised inside name commands on the door given (``on_door``): a bare `phalanx ls` after
    --server URL would read this machine's store, or the login's server after --local."""
    try:
        yield
    except PhalanxError as exc:
        exc.message = on_door(exc.message, server, local)
        exc.args = (exc.message,)
        raise


Command = TypeVar("Command", bound=Callable[..., Any])


def door_hints_of(command: Command) -> Command:
    """``command`` with the hints of its errors on the door it was given (``hints_on_door``), when it
    takes --server (a parameter ``server``, and ``local`` where it takes --local too); else itself."""
    if "server" not in inspect.signature(command).parameters:
        return command

    @functools.wraps(command)
    def on_its_door(*args: Any, **kwargs: Any) -> Any:  # Typer passes every parameter by name
        with hints_on_door(kwargs.get("server"), bool(kwargs.get("local", False))):
            return command(*args, **kwargs)

    return on_its_door  # type: ignore[return-value]


class DoorTyper(typer.Typer):
    """A Typer app whose commands give their hints on the door they were given (``door_hints_of``):
    `phalanx get zz --server URL` refused says `phalanx ls --server URL` lists them, not a bare
    `phalanx ls` that would read this machine's store."""

    def command(self, name: str | None = None, **options: Any) -> Callable[[Command], Command]:
        register = super().command(name, **options)

        def decorator(command: Command) -> Command:
            register(door_hints_of(command))
            return command

        return decorator


def this_machine_only(command: str, server: str | None, instead: str) -> None:
    """Refuse ``--server`` for a command that acts on this machine only (a UsageError: exit status
    2, nothing done); ``instead``: what to do for the server. After `phalanx login`, say the door
    (this machine), as every command does once a server is in play."""
    from phalanx import logins  # why: the command modules import this one for its options (start-up)
    from phalanx.config import Settings  # why: as above

    if server is not None:
        raise UsageError(
            f"`phalanx {command}` acts on this machine only; it does not take --server {server}: {instead}"
        )
    if logins.load(Settings().home) is not None:
        logins.say_door(None)


def submit_server(server: str | None, local: bool, settings: Settings) -> str | None:
    """The server a run or a group is submitted to: --server, else the one `phalanx login` stored;
    None with --local (said, after a login)."""
    from phalanx import logins  # why: the command modules import this one for its options (start-up)

    if server is None and not local:  # after `phalanx login URL`, the server is the default
        stored = logins.load(settings.home)
        return stored.url if stored is not None else None
    if local:
        if server is not None:
            raise UsageError("--server and --local: give one (--local runs it on this machine)")
        logins.say_door(None)
    return server


def shell_actor() -> str:
    """Who a change made on this machine's store is audited as: ``cli:`` and the shell's login."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"
