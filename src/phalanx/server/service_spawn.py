"""Starting a service's processes (phalanx.server.services): each in the project's box when the
server boxes (else as the server, with none of its environment), listening on a Unix socket in a
folder of its own, started from one thread that lives as long as the services.

A service has one instance (a board, a notebook server) or more (a served model's replicas, each
its own process and socket behind the service's one address); each is started here and returned
once it listens.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from phalanx.backends.local.boxes import PACKAGE_ROOT
from phalanx.errors import PhalanxError
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.server.service_process import Process, Spawned, tail
from phalanx.services.targets import Target
from phalanx.store.accounts import Role

if TYPE_CHECKING:
    from phalanx.services.boards import Board
    from phalanx.services.seats import Seat

Popen = subprocess.Popen[bytes]

SOCKET = "service.sock"
LISTEN = "listen"  # in a service's folder: the folders its instances' sockets are in, one a line
LISTEN_PREFIX = "phalanx-service-"
LOG = "service.log"  # its processes' output, in its folder (the reason a start failed)
# in a service's environment: its folder (in the server's home), how a leftover is found (tests)
MARK = "PHALANX_SERVICE"


class ServiceFailed(PhalanxError):
    """A service's process ended before it listened (its log's last lines say why)."""

    code = "unavailable"


@dataclass(frozen=True)
class Instance:
    """One of a service's processes and the socket it listens on."""

    socket: Path
    process: Process
    boxed: bool = False  # its folder becomes the server's once it listens


@dataclass(frozen=True)
class Launch:
    """What a service is, before its processes: its id, kind, project, target, who asked, the least
    role that reaches it, its board (a TensorBoard's) and its seat in the machine's ledger."""

    id: str
    kind: str
    project: str
    target: Target
    who: str
    role: Role
    board: Board | None
    seat: Seat | None = None  # what it holds of the machine (a notebook file's resources)


@dataclass(frozen=True)
class Recipe:
    """How a service's process runs: ``argv_for(socket)``, its command for the socket it listens
    on; what its box may read (``ro``) and write (``rw``); what it finds in its environment."""

    argv_for: Callable[[str], list[str]]
    ro: tuple[str, ...] = ()
    rw: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


class Spawner:
    """Starts instances of services under ``home``/services/ID. ``isolation_for(project)``: its box
    (None: not boxed); ``start_seconds``: how long a start may take to listen; ``stopping(s)``: waits
    up to ``s`` seconds, True once the server is stopping."""

    def __init__(
        self,
        home: Path,
        isolation_for: Callable[[str], Isolation | None],
        start_seconds: float,
        stopping: Callable[[float], bool],
    ) -> None:
        self.home = home
        self.isolation_for = isolation_for
        self.start_seconds = start_seconds
        self.stopping = stopping
        # every process is started from this one thread, which lives as long as the services: what
        # ties a process to the server's life (bubblewrap's --die-with-parent, setpriv's
        # --pdeathsig) follows the thread that started it, and a request's worker thread may end
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx-service-start")

    def close(self) -> None:
        self._thread.shutdown(wait=True)

    def spawn(self, launch: Launch, recipe: Recipe) -> Instance:
        """One instance of the service, returned once it listens (ServiceFailed, and nothing left
        running, if it does not)."""
        instance = self.start(launch, recipe)
        self.await_listening(instance, launch)
        return instance

    def start(self, launch: Launch, recipe: Recipe) -> Instance:
        """One instance of the service started: its process, to listen on a socket in a folder of
        its own (``await_listening`` waits for that)."""
        folder = self.home / "services" / launch.id
        # a short path: a Unix socket's path holds at most 107 bytes, a home's may be long
        listen = Path(tempfile.mkdtemp(prefix=f"{LISTEN_PREFIX}{launch.id}-"))
        with open(folder / LISTEN, "a") as listed:  # what a later server removes if this one is killed
            listed.write(f"{listen}\n")
        socket = listen / SOCKET
        own_home = listen / "home"  # its HOME (JupyterLab's runtime files): writable after the lock below
        # -P: nothing of its working folder is imported (a notebook folder's planted jupyterlab.py)
        argv = [sys.executable, "-P", *recipe.argv_for(str(socket))[1:]]
        isolation = self.isolation_for(launch.project)
        if isolation is not None:
            box.make_own_folder(listen, isolation)
            box.make_own_folder(own_home, isolation)
            layout = box.Layout(
                cwd=str(own_home),
                tmp=None,
                rw=(str(listen), *recipe.rw),
                ro=(*recipe.ro, PACKAGE_ROOT, *box.interpreter_trees()),
            )
            argv = box.box_argv(isolation, layout) + argv
            started = box.box_env(isolation, str(own_home))
        else:  # as the server, but with none of its environment (its tokens, its cloud keys)
            own_home.mkdir()
            started = {
                "PATH": os.environ.get("PATH", box.BOX_PATH),
                "HOME": str(own_home),
                "TMPDIR": str(own_home),
            }
            argv = box.ended_with_parent(argv)  # ended with the server however it ends
        started.update(box.inherited(), **recipe.env, PYTHONPATH=PACKAGE_ROOT, **{MARK: str(folder)})
        seat = launch.seat
        if seat is not None:  # its threads, its GPUs; its cgroup joined before anything of it runs
            started.update(seat.env())
            if isolation is not None and seat.cgroup is not None:  # the one cgroup its box shows
                argv = box.with_cgroup(argv, seat.cgroup.folders)
            argv = seat.command(argv)
        with open(folder / LOG, "ab") as out:
            popen = self._thread.submit(
                _popen, seat, argv, env=started, cwd=str(own_home), stdout=out
            ).result()
        return Instance(socket, Spawned(popen), boxed=isolation is not None)

    def await_listening(self, instance: Instance, launch: Launch) -> None:
        """Until its process listens on its socket, whose folder is then the server's (what runs in
        its box can no longer replace the socket); ServiceFailed, and the process ended, when it
        ends first or takes too long."""
        try:
            self._wait(instance, launch.kind, self.home / "services" / launch.id)
        except BaseException:
            end_instance(instance)
            raise
        if instance.boxed:
            os.chown(instance.socket.parent, os.getuid(), os.getgid())
            os.chmod(instance.socket.parent, 0o755)

    def _wait(self, instance: Instance, kind: str, folder: Path) -> None:
        deadline = time.monotonic() + self.start_seconds
        while not instance.socket.exists():
            if not instance.process.alive():
                raise ServiceFailed(
                    f"the {kind} ended (status {instance.process.status()}) before it listened: "
                    f"{tail(folder / LOG)}"
                )
            if time.monotonic() > deadline:
                raise ServiceFailed(f"the {kind} did not listen within {self.start_seconds:.0f} s")
            if self.stopping(0.05):
                raise ServiceFailed("the server is stopping")


def _popen(seat: Seat | None, argv: list[str], env: dict[str, str], cwd: str, stdout: IO[bytes]) -> Popen:
    """``argv`` started from the calling thread, on the seat's cores (which it then inherits)."""
    with seat.pinned() if seat is not None else contextlib.nullcontext():
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def end_instance(instance: Instance) -> None:
    """Its process ended and the folder it listened in gone."""
    instance.process.end()
    shutil.rmtree(instance.socket.parent, ignore_errors=True)


def listened_in(folder: Path) -> list[Path]:
    """The folders a service's instances listened in (``LISTEN``), as a killed server left them."""
    try:
        lines = (folder / LISTEN).read_text().split()
    except OSError:
        return []
    return [Path(line) for line in lines if Path(line).name.startswith(LISTEN_PREFIX)]
